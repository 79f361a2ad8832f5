/*
 * bb.c - `stagehand bb CALL JOB`: what lua/stagehand_bb.lua runs from
 * Slurm's burst_buffer/lua hooks (slurmscriptd, root) to hand a job's
 * staging to stagehandd.
 *
 *   setup     the daemon takes the job (its plan and identity from slurmctld);
 *             --size BYTES --pool NAME: what Slurm reserved for it (the hook's
 *             bb_size and pool), which its stage-in must fit
 *   data-in   wait until its inputs are staged (or failed); with --poll,
 *             ask once where they stand
 *   data-out  wait until its archives and stage-outs are verified (or
 *             failed); with --poll, ask once
 *   teardown  label the job's staged inputs for purge
 *
 * Two ways Slurm drives a stage (docs/burst-buffer-slurm.md): up to 23.11,
 * data_in and data_out run until the work is done, so the hook waits here
 * (--wait); from 24.05 on, data_in/data_out start it and return, and
 * slurmctld polls test_data_in/test_data_out every PollInterval until they
 * stop answering BUSY: those hooks ask once (--poll).
 *
 * The last line of output is the hook's answer, for a Lua 5.1 caller that
 * cannot see the exit status: "stagehand-bb: ok: TEXT",
 * "stagehand-bb: busy: TEXT" (--poll only: not done yet, ask again) or
 * "stagehand-bb: error: TEXT". Exit 0 ok, 1 failed, 2 daemon unreachable
 * or a usage error, 3 busy.
 *
 * A restarting daemon must not fail a job (Slurm holds a job whose hook
 * failed): a call the daemon does not answer, or answers 503 (it cannot
 * reach slurmctld), is asked again every 2 s until --wait runs out; a poll
 * that cannot reach the daemon answers busy, and Slurm's StageInTimeout /
 * StageOutTimeout bound how long that may last.
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
	"[--poll] [--hurry] [--size BYTES --pool NAME]\n"

/* Exit status of a poll that found the stage still under way. */
#define EXIT_BUSY 3

enum answer { A_ERROR, A_OK, A_BUSY };

static int _answer(enum answer a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int _answer(enum answer a, const char *fmt, ...)
{
	static const char *const word[] = { "error", "ok", "busy" };
	static const int code[] = { EXIT_REFUSED, EXIT_OK, EXIT_BUSY };
	va_list ap;

	printf("stagehand-bb: %s: ", word[a]);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return code[a];
}

/*
 * One POST, asked again while the daemon is unreachable or answers 503,
 * until deadline. EXIT_* with *resp (new reference) on EXIT_OK; *status the
 * last HTTP status (0: no answer).
 */
static int _post(struct http *h, const char *path, json_t *body, json_t **resp,
		 time_t deadline, long *status)
{
	int rc;

	for (;;) {
		rc = client_call(h, "POST", path, body, resp, status);
		if (rc == EXIT_OK || (*status != 0 && *status != 503) || time(NULL) >= deadline)
			return rc;
		sleep(2);
	}
}

/* Where data-in / data-out stand: A_OK done, A_BUSY under way, A_ERROR failed. */
static enum answer _stage_state(json_t *resp, const char **msg)
{
	const char *st = json_string_value(json_object_get(resp, "state"));

	*msg = json_string_value(json_object_get(resp, "message"));
	if (st && !strcmp(st, "failed"))
		return A_ERROR;
	if (st && (!strcmp(st, "ready") || !strcmp(st, "done")))
		return A_OK;
	return A_BUSY;
}

static const char *_done_text(const char *call)
{
	return !strcmp(call, "data-in") ? "inputs staged" : "after-job transfers verified";
}

/* --poll: ask once. An unreachable daemon is a busy answer (Slurm asks again). */
static int _poll(struct http *h, const char *call, const char *path, long long job)
{
	json_t *resp = NULL;
	const char *msg;
	long status = 0;
	int rc;

	rc = client_call(h, "POST", path, NULL, &resp, &status);
	if (rc != EXIT_OK) {
		if (status == 0 || status == 503)
			return _answer(A_BUSY, "%s: stagehandd did not answer for job %lld "
				       "(restarting?); Slurm asks again", call, job);
		return _answer(A_ERROR, "%s refused for job %lld (message above)", call, job);
	}
	switch (_stage_state(resp, &msg)) {
	case A_ERROR:
		rc = _answer(A_ERROR, "%s", msg && *msg ? msg : "failed");
		break;
	case A_OK:
		rc = _answer(A_OK, "%s for job %lld", _done_text(call), job);
		break;
	default:
		rc = _answer(A_BUSY, "%s: under way for job %lld", call, job);
	}
	json_decref(resp);
	return rc;
}

/* --wait: ask every second until done, failed or the deadline. */
static int _wait(struct http *h, const char *call, const char *path, long long job,
		 time_t deadline)
{
	json_t *resp = NULL;
	const char *msg;
	long status = 0;
	int rc;

	for (;;) {
		rc = _post(h, path, NULL, &resp, deadline, &status);
		if (rc != EXIT_OK) {
			if (status == 0 || status == 503)
				return _answer(A_ERROR, "%s: stagehandd did not answer for job %lld",
					       call, job);
			return _answer(A_ERROR, "%s refused for job %lld (message above)", call, job);
		}
		switch (_stage_state(resp, &msg)) {
		case A_ERROR:
			rc = _answer(A_ERROR, "%s", msg && *msg ? msg : "failed");
			json_decref(resp);
			return rc;
		case A_OK:
			json_decref(resp);
			return _answer(A_OK, "%s for job %lld", _done_text(call), job);
		default:
			break;
		}
		json_decref(resp);
		resp = NULL;
		if (time(NULL) >= deadline)
			return _answer(A_ERROR, "%s: still not done for job %lld after the --wait "
				       "limit; see 'stagehand status' for it", call, job);
		sleep(1);
	}
}

int cmd_bb(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "wait", required_argument, NULL, 'w' },
		{ "poll", no_argument, NULL, 'p' },
		{ "hurry", no_argument, NULL, 'H' },
		{ "size", required_argument, NULL, 'S' },
		{ "pool", required_argument, NULL, 'P' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	unsigned long long job = 0, size = 0;
	const char *pool = NULL;
	long secs = -1, status = 0;
	int c, hurry = 0, poll = 0, rc;
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
		} else if (c == 'p') {
			poll = 1;
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
	if (poll && strcmp(call, "data-in") && strcmp(call, "data-out")) {
		fprintf(stderr, "stagehand bb: --poll is for data-in and data-out, not %s\n", call);
		return EXIT_ENV;
	}
	client_path_fmt(path, sizeof(path), "/v1/bb/%llu/%s", job, call);
	if (!(h = client_open())) {
		_answer(A_ERROR, "%s: stagehandd unreachable for job %lld", call, (long long)job);
		return EXIT_ENV;
	}
	/* By default a wait lasts an hour; setup and teardown ask once. */
	if (secs < 0)
		secs = (!strcmp(call, "data-in") || !strcmp(call, "data-out")) ? 3600 : 0;
	if (poll) {
		rc = _poll(h, call, path, (long long)job);
	} else if (!strcmp(call, "data-in") || !strcmp(call, "data-out")) {
		rc = _wait(h, call, path, (long long)job, time(NULL) + secs);
	} else {
		if (hurry)
			body = json_pack("{s:b}", "hurry", 1);
		else if (!strcmp(call, "setup") && pool)
			body = json_pack("{s:I,s:s}", "size", (json_int_t)size, "pool", pool);
		rc = _post(h, path, body, &resp, time(NULL) + secs, &status);
		json_decref(body);
		if (rc == EXIT_OK)
			rc = _answer(A_OK, "%s: %lld", call, (long long)job);
		else if (status == 0)
			rc = _answer(A_ERROR, "%s: stagehandd did not answer for job %lld within "
				     "%ld s", call, (long long)job, secs);
		else
			rc = _answer(A_ERROR, "%s refused for job %lld (message above)", call,
				     (long long)job);
		json_decref(resp);
	}
	http_close(h);
	return rc;
}
