/*
 * drain.c - 'stagehand drain' and 'stagehand resume' (admins): stop new
 * transfers before maintenance while running ones finish, and start them
 * again after it. The daemon checks who may (docs/api.md, /v1/drain); this
 * command only asks, waits and formats.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "client_int.h"
#include "commands.h"
#include "monoclock.h"

static void _drain_usage(FILE *fp)
{
	fprintf(fp,
		"usage: stagehand drain [--reason TEXT] [--wait [--timeout SEC]] [--json]\n"
		"Stop new transfers before maintenance (admins). Transfers under way finish;\n"
		"new requests are still accepted and queued; jobs held for stage-in stay held,\n"
		"their status saying why. The daemon stays drained across restarts until\n"
		"'stagehand resume'.\n"
		"  --reason TEXT   why, shown to users in held jobs' status, in 'stagehand\n"
		"                  health' and 'stagehand doctor' (one line, at most 200 bytes)\n"
		"  --wait          return once no transfer runs any more\n"
		"  --timeout SEC   with --wait: exit 1 if transfers still run after SEC seconds\n"
		"  --interval SEC  polling interval for --wait (default 1)\n"
		"  --json          print the daemon's answer as JSON\n"
		COMMON_HELP);
}

static void _resume_usage(FILE *fp)
{
	fprintf(fp,
		"usage: stagehand resume [--json]\n"
		"Let transfers start again after 'stagehand drain' (admins).\n"
		"  --json          print the daemon's answer as JSON\n"
		COMMON_HELP);
}

static json_int_t _int(const json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

void client_print_drain(FILE *fp, const json_t *st)
{
	const char *reason = json_string_value(json_object_get(st, "reason"));
	time_t since = (time_t)_int(st, "since");
	struct tm tm;
	char when[64] = "?";

	if (!json_is_true(json_object_get(st, "drained")))
		return;
	if (localtime_r(&since, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z", &tm);
	fprintf(fp, "drained since %s by uid %" JSON_INTEGER_FORMAT "%s%s: no new transfers "
		"start (%" JSON_INTEGER_FORMAT " still running); requests are queued until "
		"'stagehand resume'\n", when, _int(st, "by"), reason && *reason ? ": " : "",
		reason ? reason : "", _int(st, "running"));
}

/* Poll until nothing runs; EXIT_OK, EXIT_REFUSED at the timeout or on a resume, EXIT_ENV. */
static int _wait_idle(struct http *h, double timeout, double interval, int json_out)
{
	double end = timeout > 0 ? mono_s() + timeout : 0;
	json_int_t last = -2;

	for (;;) {
		json_t *st = NULL;
		json_int_t n;
		int rc = client_call(h, "GET", "/v1/drain", NULL, &st, NULL);

		if (rc != EXIT_OK)
			return rc;
		n = _int(st, "running");
		if (!json_is_true(json_object_get(st, "drained"))) {
			json_decref(st);
			client_errx("drain: the daemon was resumed while waiting");
			return EXIT_REFUSED;
		}
		if (n != last && !json_out && n > 0)
			printf("waiting for %" JSON_INTEGER_FORMAT " running transfer%s\n", n,
			       n == 1 ? "" : "s");
		fflush(stdout);
		last = n;
		json_decref(st);
		if (n == 0) {
			if (!json_out)
				printf("no transfer running: ready for maintenance\n");
			return EXIT_OK;
		}
		if (end && mono_s() >= end) {
			client_errx("drain: %" JSON_INTEGER_FORMAT " transfer%s still running after "
				    "%.0f s (the daemon stays drained)", n, n == 1 ? "" : "s",
				    timeout);
			return EXIT_REFUSED;
		}
		client_sleep(interval);
	}
}

static int _seconds(const char *opt, const char *v, double lo, double hi, double *out)
{
	char *e;
	double d;

	errno = 0;
	d = strtod(v, &e);
	if (errno || e == v || *e || !(d >= lo && d <= hi)) {
		client_errx("drain: %s wants seconds from %g to %g, got '%s'", opt, lo, hi, v);
		return -1;
	}
	*out = d;
	return 0;
}

int cmd_drain(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "reason", required_argument, NULL, 'r' },
		{ "wait", no_argument, NULL, 'w' },
		{ "timeout", required_argument, NULL, 't' },
		{ "interval", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'J' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *reason = NULL;
	int c, wait = 0, json_out = 0, rc;
	double timeout = 0, interval = 1;
	struct http *h;
	json_t *body, *resp = NULL;

	client_foreach_opt(c, argc, argv, "h", lo) {
		switch (c) {
		case 'r': reason = optarg; break;
		case 'w': wait = 1; break;
		case 'J': json_out = 1; break;
		case 't':
			if (_seconds("--timeout", optarg, 1, 7 * 86400, &timeout) < 0)
				return EXIT_ENV;
			break;
		case 'n':
			if (_seconds("--interval", optarg, 0.1, 3600, &interval) < 0)
				return EXIT_ENV;
			break;
		case 'h': _drain_usage(stdout); return EXIT_OK;
		case '?': return EXIT_ENV;
		default: _drain_usage(stderr); return EXIT_ENV;
		}
	}
	if (optind != argc) {
		client_errx("drain: unexpected argument '%s' (give the reason with --reason)",
			    argv[optind]);
		return EXIT_ENV;
	}
	if (timeout > 0 && !wait) {
		client_errx("drain: --timeout goes with --wait");
		return EXIT_ENV;
	}
	body = reason ? json_pack("{s:s}", "reason", reason) : json_object();
	if (!body) {
		client_errx("drain: the reason must be UTF-8 text");
		return EXIT_ENV;
	}
	if (!(h = client_open())) {
		json_decref(body);
		return EXIT_ENV;
	}
	rc = client_call(h, "POST", "/v1/drain", body, &resp, NULL);
	json_decref(body);
	if (rc == EXIT_OK) {
		if (json_out) {
			client_print_json_line(resp);
		} else {
			printf("stagehandd %s\n", json_is_true(json_object_get(resp, "already")) ?
			       "was drained already" : "drained");
			client_print_drain(stdout, resp);
		}
		fflush(stdout);
		if (wait)
			rc = _wait_idle(h, timeout, interval, json_out);
	}
	json_decref(resp);
	http_close(h);
	return rc;
}

int cmd_resume(int argc, char **argv)
{
	int json_out = 0, rc;
	struct http *h;
	json_t *resp = NULL;

	if ((rc = client_json_opts(argc, argv, _resume_usage, &json_out)) >= 0)
		return rc;
	if (optind != argc) {
		client_errx("resume: unexpected argument '%s'", argv[optind]);
		return EXIT_ENV;
	}
	if (!(h = client_open()))
		return EXIT_ENV;
	rc = client_call(h, "DELETE", "/v1/drain", NULL, &resp, NULL);
	if (rc == EXIT_OK) {
		if (json_out) {
			client_print_json_line(resp);
		} else if (json_is_true(json_object_get(resp, "was_drained"))) {
			printf("stagehandd resumed: %" JSON_INTEGER_FORMAT " queued request%s may "
			       "start\n", _int(resp, "queued"), _int(resp, "queued") == 1 ? "" : "s");
		} else {
			printf("stagehandd was not drained\n");
		}
	}
	json_decref(resp);
	http_close(h);
	return rc;
}
