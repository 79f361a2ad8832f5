/*
 * job_end.c - "stagehand job-end": the job-end event from an epilog hook,
 * built and spooled by the same code as the SPANK plugin's (common/spool.h:
 * jobend_event, jobend_state, the spool). See stagehand(1), docs/spank.md.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "client_int.h"
#include "commands.h"
#include "spool.h"

static void _job_end_usage(FILE *fp)
{
	fprintf(fp,
		"usage: stagehand job-end [JOB] [--state STATE] [--exit-code N] [--signal N]\n"
		"                         [--uid UID] [--gid GID] [--user NAME] [--work-dir DIR]\n"
		"                         [--node NAME] [--sluid SLUID] [--plan FILE]\n"
		"                         [--spool DIR [--timeout MS]]\n"
		"       stagehand job-end --spool DIR --drain [--timeout MS]\n"
		"Tell stagehandd that Slurm job JOB ended (root; for Epilog= hooks).\n"
		"JOB defaults to $SLURM_JOB_ID, --uid to $SLURM_JOB_UID, --gid to $SLURM_JOB_GID,\n"
		"--user to $SLURM_JOB_USER, --sluid to $SLURM_JOB_SLUID. The state sent is STATE when it is a final Slurm\n"
		"state; otherwise (e.g. COMPLETING) it follows from --exit-code and --signal,\n"
		"by the rule the SPANK plugin uses (docs/spank.md).\n"
		"  --state STATE     Slurm's job state: COMPLETED, FAILED, TIMEOUT, COMPLETING, ...\n"
		"  --exit-code N     the batch script's exit code\n"
		"  --signal N        the signal that ended the batch script (0 = none)\n"
		"  --uid UID         the job owner's uid\n"
		"  --gid GID         the job owner's primary gid\n"
		"  --user NAME       the job owner's user name\n"
		"  --work-dir DIR    the job's working directory (needed for relative plan paths)\n"
		"  --node NAME       the node the event comes from (default: this host's name)\n"
		"  --sluid SLUID     Slurm's unique id of the job's run (Slurm 25.11+)\n"
		"  --plan FILE       the job's normalised #DATA plan as JSON ('-' for stdin)\n"
		"  --spool DIR       epilog mode: deliver older events spooled in DIR first, and\n"
		"                    spool this one there if the daemon cannot take it now;\n"
		"                    exit 0 once it is delivered or spooled\n"
		"  --drain           only deliver the events spooled in DIR (no JOB)\n"
		"  --timeout MS      per-request budget in --spool mode (default 2000)\n"
		COMMON_HELP);
}

/* Parsed job-end options. */
struct _jeopts {
	const char *state, *uid_s, *gid_s, *user, *work_dir, *plan_file, *node, *spool, *sluid;
	bool have_exit, drain;
	int exit_code, sig, timeout_ms;
	unsigned long long job;
};

/* A number in [lo, hi] for option opt. 0, or -1 with a message printed. */
static int _num_opt(const char *opt, const char *v, long lo, long hi, int *out)
{
	char *end;
	long n;

	errno = 0;
	n = strtol(v, &end, 10);
	if (errno || *end || end == v || n < lo || n > hi) {
		client_errx("job-end: %s wants %ld..%ld, got '%s'", opt, lo, hi, v);
		return -1;
	}
	*out = (int)n;
	return 0;
}

/* 1 if s looks like a SLUID (the daemon's rule: 1 to 32 letters and digits). */
static int _sluid_ok(const char *s)
{
	size_t n = strlen(s);

	return n > 0 && n <= 32 &&
	       strspn(s, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz") == n;
}

/* The parsed options' consistency. -1 to go on, else the exit code (a message printed). */
static int _job_end_check(const struct _jeopts *o)
{
	if (o->sig && !o->have_exit) {
		client_errx("job-end: --signal goes with --exit-code (Slurm's ExitCode=N:SIG)");
		return EXIT_ENV;
	}
	if (o->work_dir && *o->work_dir != '/') {
		client_errx("job-end: --work-dir must be absolute, got '%s'", o->work_dir);
		return EXIT_ENV;
	}
	if (o->sluid && !_sluid_ok(o->sluid)) {
		client_errx("job-end: --sluid must be Slurm's SLUID, 1 to 32 letters and "
			    "digits, got '%s'", o->sluid);
		return EXIT_ENV;
	}
	if (o->spool && *o->spool != '/') {
		client_errx("job-end: --spool must be an absolute directory, got '%s'", o->spool);
		return EXIT_ENV;
	}
	return -1;
}

/* Parse argv into o. Returns -1 to go on, else the exit code. */
static int _job_end_args(int argc, char **argv, struct _jeopts *o)
{
	static const struct option lo[] = {
		{ "state", required_argument, NULL, 's' },
		{ "exit-code", required_argument, NULL, 'x' },
		{ "signal", required_argument, NULL, 'S' },
		{ "uid", required_argument, NULL, 'u' },
		{ "work-dir", required_argument, NULL, 'd' },
		{ "gid", required_argument, NULL, 'g' },
		{ "user", required_argument, NULL, 'U' },
		{ "plan", required_argument, NULL, 'p' },
		{ "node", required_argument, NULL, 'n' },
		{ "sluid", required_argument, NULL, 'L' },
		{ "spool", required_argument, NULL, 'P' },
		{ "timeout", required_argument, NULL, 't' },
		{ "drain", no_argument, NULL, 'D' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *job_s;
	int c;

	memset(o, 0, sizeof(*o));
	o->uid_s = getenv("SLURM_JOB_UID");
	o->gid_s = getenv("SLURM_JOB_GID");
	o->user = getenv("SLURM_JOB_USER");
	/* Slurm's own (25.11+ sets it for Epilog=): a bad one is left out, never
	   a reason to lose the event. */
	o->sluid = getenv("SLURM_JOB_SLUID");
	if (o->sluid && !_sluid_ok(o->sluid)) {
		if (*o->sluid)
			fprintf(stderr, "stagehand: job-end: $SLURM_JOB_SLUID '%.40s' is not a "
				"SLUID; the event goes without one\n", o->sluid);
		o->sluid = NULL;
	}
	o->timeout_ms = 2000;
	client_foreach_opt(c, argc, argv, "h", lo) {
		if (c == '?')
			return EXIT_ENV;
		switch (c) {
		case 's': o->state = optarg; break;
		case 'x':
			if (_num_opt("--exit-code", optarg, 0, 255, &o->exit_code) < 0)
				return EXIT_ENV;
			o->have_exit = true;
			break;
		case 'S':
			if (_num_opt("--signal", optarg, 0, 127, &o->sig) < 0)
				return EXIT_ENV;
			break;
		case 't':
			if (_num_opt("--timeout", optarg, 1, 600000, &o->timeout_ms) < 0)
				return EXIT_ENV;
			break;
		case 'u': o->uid_s = optarg; break;
		case 'd': o->work_dir = optarg; break;
		case 'g': o->gid_s = optarg; break;
		case 'U': o->user = optarg; break;
		case 'p': o->plan_file = optarg; break;
		case 'n': o->node = optarg; break;
		case 'L': o->sluid = optarg; break;
		case 'P': o->spool = optarg; break;
		case 'D': o->drain = true; break;
		case 'h': _job_end_usage(stdout); return EXIT_OK;
		default: _job_end_usage(stderr); return EXIT_ENV;
		}
	}
	if (o->drain) {
		if (!o->spool || *o->spool != '/' || argc != optind) {
			client_errx("job-end: --drain takes --spool DIR (absolute) and no JOB");
			return EXIT_ENV;
		}
		return -1;
	}
	job_s = argc - optind == 1 ? argv[optind] : getenv("SLURM_JOB_ID");
	if (argc - optind > 1 || !job_s) {
		client_errx("job-end: name the job (JOB, or $SLURM_JOB_ID in an epilog)");
		_job_end_usage(stderr);
		return EXIT_ENV;
	}
	if (client_parse_id(job_s, &o->job) != ID_JOB || o->job > 0xffffffffULL) {
		client_errx("job-end: '%s' is not a Slurm job id", job_s);
		return EXIT_ENV;
	}
	if (o->state && !*o->state)
		o->state = NULL;
	for (const char *p = o->state; p && *p; p++)
		if (!isupper((unsigned char)*p) && *p != '_') {
			client_errx("job-end: --state '%s' is not a Slurm job state such as COMPLETED or FAILED",
			      o->state);
			return EXIT_ENV;
		}
	if (!o->state && !o->have_exit) {
		client_errx("job-end: give --state (e.g. --state COMPLETED) or --exit-code");
		return EXIT_ENV;
	}
	return _job_end_check(o);
}

/* A uid/gid from text ("" or NULL = unknown, -1). 0, or -1 with a message. */
static int _id_arg(const char *what, const char *s, long long *out)
{
	unsigned long long v;
	char *end;

	*out = -1;
	if (!s || !*s)
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || *end || v > 0xfffffffeULL) {
		client_errx("job-end: %s '%s' is not a number", what, s);
		return -1;
	}
	*out = (long long)v;
	return 0;
}

/* The event for o (new reference), or NULL with a message printed. */
static json_t *_job_end_event(const struct _jeopts *o)
{
	struct jobend_info ji = {
		.slurm_state = o->state, .have_exit = o->have_exit, .exit_code = o->exit_code,
		.sig = o->sig, .user = o->user && *o->user ? o->user : NULL,
		.work_dir = o->work_dir, .source = o->spool ? "epilog" : "cli",
		.sluid = o->sluid && *o->sluid ? o->sluid : NULL,
	};
	char host[256] = "";
	json_error_t jerr;
	json_t *ev;

	if (_id_arg("uid", o->uid_s, &ji.uid) < 0 || _id_arg("gid", o->gid_s, &ji.gid) < 0)
		return NULL;
	if (o->node) {
		ji.node = o->node;
	} else if (gethostname(host, sizeof(host) - 1) == 0) {
		ji.node = host;
	}
	if (o->plan_file) {
		bool in = !strcmp(o->plan_file, "-");

		ji.plan = in ? json_loadf(stdin, JSON_REJECT_DUPLICATES, &jerr)
			     : json_load_file(o->plan_file, JSON_REJECT_DUPLICATES, &jerr);
		if (!ji.plan) {
			client_errx("job-end: plan %s:%d: %s", in ? "(stdin)" : o->plan_file,
			      jerr.line, jerr.text);
			return NULL;
		}
		if (!json_is_object(ji.plan)) {
			client_errx("job-end: plan %s must be a JSON object ({\"version\":1,\"actions\":[...]})",
			      o->plan_file);
			json_decref(ji.plan);
			return NULL;
		}
	}
	ev = jobend_event(&ji);
	json_decref(ji.plan);
	if (!ev)
		client_errx("job-end: out of memory");
	return ev;
}

static void _spool_warn(const char *msg)
{
	client_errx("%s", msg);
}

/*
 * Epilog mode: older spooled events first, then this one; whatever the
 * daemon cannot take now is spooled (the plugin's spool, common/spool.h).
 */
static int _job_end_spooled(struct http *h, const struct _jeopts *o, json_t *ev)
{
	const struct dclient_target *t = http_dclient_target(h);
	struct spool_stats st;
	char err[1280], e2[1280];
	enum spool_send r = SPOOL_RETRY;
	unsigned long job = (unsigned long)o->job;

	if (spool_deliver(o->spool, t, &(struct spool_budget){ 20, o->timeout_ms, 2 * o->timeout_ms },
			  &st, _spool_warn, err, sizeof(err)) < 0)
		client_errx("%s", err);
	else if (st.delivered || st.rejected)
		printf("delivered %d spooled job-end event(s), set aside %d, %d left\n",
		       st.delivered, st.rejected, st.left);
	if (ev == NULL)   /* --drain */
		return st.daemon_down ? EXIT_ENV : EXIT_OK;
	if (!st.daemon_down)
		r = spool_send_event(t, job, ev, o->timeout_ms, err, sizeof(err));
	else
		snprintf(err, sizeof(err), "stagehandd at %s did not answer for older events",
			 t->label);
	if (r == SPOOL_SENT) {
		printf("job %lu: end recorded\n", job);
		return EXIT_OK;
	}
	if (spool_prepare_dir(o->spool, e2, sizeof(e2)) < 0 ||
	    spool_write(o->spool, job, ev, e2, sizeof(e2)) < 0) {
		client_errx("job %lu: job-end event LOST: not delivered (%s) and not spooled (%s); "
		      "run 'stagehand job-end %lu --state STATE' by hand", job, err, e2, job);
		return EXIT_ENV;
	}
	if (r == SPOOL_REJECTED) {
		spool_set_aside(o->spool, job, _spool_warn, err);
		return EXIT_REFUSED;
	}
	printf("job %lu: job-end event spooled in %s/job-%lu.json (%s); it is sent at a "
	       "later job end on this node\n", job, o->spool, job, err);
	return EXIT_OK;
}

int cmd_job_end(int argc, char **argv)
{
	struct _jeopts o;
	char path[64];
	struct http *h;
	json_t *body, *resp;
	int rc = _job_end_args(argc, argv, &o);

	if (rc >= 0)
		return rc;
	if (o.drain) {
		if (!(h = client_open()))
			return EXIT_ENV;
		rc = _job_end_spooled(h, &o, NULL);
		http_close(h);
		return rc;
	}
	if (!(body = _job_end_event(&o)))
		return EXIT_ENV;
	if (!(h = client_open())) {
		json_decref(body);
		return EXIT_ENV;
	}
	if (o.spool) {
		rc = _job_end_spooled(h, &o, body);
		json_decref(body);
		http_close(h);
		return rc;
	}
	client_path_fmt(path, sizeof(path), "/v1/jobs/%llu/end", o.job);
	rc = client_call(h, "POST", path, body, &resp, NULL);
	json_decref(body);
	if (rc == EXIT_OK) {
		json_t *ids = json_object_get(resp, "requests"), *v;
		size_t i;

		if (json_is_true(json_object_get(resp, "duplicate"))) {
			printf("job %llu: end already recorded; nothing changed\n", o.job);
		} else {
			printf("job %llu: end recorded", o.job);
			json_array_foreach(ids, i, v)
				printf("%s r%" JSON_INTEGER_FORMAT, i ? "" : "; requests", json_integer_value(v));
			printf("\n");
		}
	}
	json_decref(resp);
	http_close(h);
	return rc;
}

