/*
 * bb.c - `stagehand bb CALL JOB`: what lua/stagehand_bb.lua runs from
 * Slurm's burst_buffer/lua hooks (slurmscriptd, root) to hand a job's
 * staging to stagehandd.
 *
 *   setup     the daemon takes the job (its plan and identity from slurmctld);
 *             --size BYTES --pool NAME: what Slurm reserved for it (the hook's
 *             bb_size and pool), which its stage-in must fit
 *   data-in   wait until its inputs are staged (or failed)
 *   data-out  wait until its archives and stage-outs are verified (or failed)
 *   teardown  label the job's staged inputs for purge
 *
 * The last line of output is the hook's answer, for a Lua 5.1 caller that
 * cannot see the exit status: "stagehand-bb: ok: TEXT" or
 * "stagehand-bb: error: TEXT". Exit 0 ok, 1 failed, 2 daemon unreachable
 * or a usage error. Waits poll the daemon once a second, up to --wait
 * seconds (Slurm's StageInTimeout/StageOutTimeout bound the hook anyway).
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client_int.h"
#include "commands.h"

#define BB_USAGE "usage: stagehand bb setup|data-in|data-out|teardown JOB [--wait SECONDS] " \
	"[--hurry] [--size BYTES --pool NAME]\n"

static int _answer(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int _answer(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("stagehand-bb: %s: ", ok ? "ok" : "error");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return ok ? EXIT_OK : EXIT_REFUSED;
}

/* One POST; EXIT_* with *resp (new reference) on EXIT_OK. */
static int _post(struct http *h, const char *path, json_t *body, json_t **resp)
{
	return client_call(h, "POST", path, body, resp, NULL);
}

static int _wait(struct http *h, const char *call, const char *path, long long job, long secs)
{
	time_t deadline = time(NULL) + secs;
	json_t *resp = NULL;
	int rc;

	for (;;) {
		const char *st, *msg;

		rc = _post(h, path, NULL, &resp);
		if (rc != EXIT_OK) {
			/* The daemon may be restarting: keep asking until the deadline. */
			if (time(NULL) >= deadline)
				return _answer(0, "%s: stagehandd did not answer for job %lld",
					       call, job);
			sleep(2);
			continue;
		}
		st = json_string_value(json_object_get(resp, "state"));
		msg = json_string_value(json_object_get(resp, "message"));
		if (st && !strcmp(st, "failed")) {
			rc = _answer(0, "%s", msg && *msg ? msg : "failed");
			json_decref(resp);
			return rc;
		}
		if (st && (!strcmp(st, "ready") || !strcmp(st, "done"))) {
			json_decref(resp);
			return _answer(1, "%s for job %lld", !strcmp(call, "data-in") ?
				       "inputs staged" : "after-job transfers verified", job);
		}
		json_decref(resp);
		resp = NULL;
		if (time(NULL) >= deadline)
			return _answer(0, "%s: still not done for job %lld after the --wait limit; "
				       "see 'stagehand status' for it", call, job);
		sleep(1);
	}
}

int cmd_bb(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "wait", required_argument, NULL, 'w' },
		{ "hurry", no_argument, NULL, 'H' },
		{ "size", required_argument, NULL, 'S' },
		{ "pool", required_argument, NULL, 'P' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	unsigned long long job = 0, size = 0;
	const char *pool = NULL;
	long secs = 3600;
	int c, hurry = 0, rc;
	char path[128], *end;
	const char *call;
	struct http *h;
	json_t *resp = NULL, *body = NULL;

	client_foreach_opt(c, argc, argv, "h", lo) {
		if (c == '?')
			return EXIT_ENV;
		if (c == 'w') {
			secs = strtol(optarg, &end, 10);
			if (*end || secs < 0 || secs > 7 * 86400) {
				fprintf(stderr, "stagehand bb: --wait takes seconds (0 to 604800), "
					"not '%s'\n", optarg);
				return EXIT_ENV;
			}
		} else if (c == 'H') {
			hurry = 1;
		} else if (c == 'S') {
			errno = 0;
			size = strtoull(optarg, &end, 10);
			if (errno || *end || !*optarg || *optarg == '-' || size > (1ULL << 62)) {
				fprintf(stderr, "stagehand bb: --size takes bytes, not '%s'\n", optarg);
				return EXIT_ENV;
			}
		} else if (c == 'P') {
			pool = optarg;
		} else if (c == 'h') {
			printf(BB_USAGE "Hand a job's staging to stagehandd from Slurm's burst_buffer/lua "
			       "hooks (root; docs/admin-guide.md).\n" COMMON_HELP);
			return EXIT_OK;
		}
	}
	if (argc - optind != 2 || client_parse_id(argv[optind + 1], &job) != ID_JOB) {
		fprintf(stderr, BB_USAGE);
		return EXIT_ENV;
	}
	call = argv[optind];
	if (strcmp(call, "setup") && strcmp(call, "data-in") && strcmp(call, "data-out") &&
	    strcmp(call, "teardown")) {
		fprintf(stderr, "stagehand bb: no call '%s'\n" BB_USAGE, call);
		return EXIT_ENV;
	}
	client_path_fmt(path, sizeof(path), "/v1/bb/%llu/%s", job, call);
	if (!(h = client_open())) {
		_answer(0, "%s: stagehandd unreachable for job %lld", call, (long long)job);
		return EXIT_ENV;
	}
	if (!strcmp(call, "data-in") || !strcmp(call, "data-out")) {
		rc = _wait(h, call, path, (long long)job, secs);
	} else {
		if (hurry)
			body = json_pack("{s:b}", "hurry", 1);
		else if (!strcmp(call, "setup") && pool)
			body = json_pack("{s:I,s:s}", "size", (json_int_t)size, "pool", pool);
		rc = _post(h, path, body, &resp);
		json_decref(body);
		if (rc == EXIT_OK)
			rc = _answer(1, "%s: %lld", call, (long long)job);
		else
			rc = _answer(0, "%s refused for job %lld (message above)", call, (long long)job);
		json_decref(resp);
	}
	http_close(h);
	return rc;
}
