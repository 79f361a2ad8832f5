/*
 * slurm_watch.c - the daemon's side of a job's life before it runs.
 *
 * Owns: finding jobs that job_submit.lua held for stage-in (their plan and
 * the "stagehand:hold=pending" marker live in admin_comment), creating their
 * stage_in requests with the identity slurmctld recorded (uid, gid, work
 * dir - never a client's word), showing progress and failures in the job's
 * status text (admin_comment, scontrol show job), releasing the job once every
 * input is verified, and cancelling the transfers of a job cancelled while
 * held. A job held for '#DATA after=' waits first, until slurm_after.c finds
 * the archives it names verified; its stage-in starts then.
 *
 * It is also the backstop for the end of a job: the SPANK plugin (or the
 * epilog hook) normally reports it within milliseconds, but if that event is
 * lost - slurmstepd killed, a spool on a node that never runs another job -
 * the job's final record in slurmctld produces the same event once the job
 * has left COMPLETING and a grace period has passed.
 *
 * Everything it decides is derived again on each tick from slurmctld's job
 * list and the queue, so a restart of the daemon or of slurmctld at any
 * moment loses nothing: a job still marked hold=pending whose requests are
 * done is simply released on the next tick.
 *
 * Must never: release a job whose inputs are not all verified, start or
 * cancel a job itself, touch user files (workers do, as the owner).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "conf.h"
#include "dsl.h"
#include "log.h"
#include "monoclock.h"
#include "queue.h"
#include "queue_drain.h"
#include "queue_after.h"
#include "queue_shards.h"
#include "slurm_after.h"
#include "slurm_compat.h"
#include "slurm_jobs.h"
#include "slurm_watch.h"

/* hold_state values kept in the queue's jobs table (queue_job.hold_state). */
#define HS_STAGING   "staging"    /* requests created, waiting for them */
#define HS_FAILED    "failed"     /* a request failed for good: job stays held */
#define HS_INVALID   "invalid"    /* the recorded plan was refused */
#define HS_RELEASED  "released"   /* inputs verified, job released */
#define HS_CANCELLED "cancelled"  /* job ended while held: transfers cancelled */
#define HS_BB_SETUP  "bb-setup"   /* burst-buffer setup called (api_bb.c): stage it */
#define HS_AFTER     "after"      /* waits for the archives its after= names (slurm_after.c) */

static int _slurm_ok;         /* libslurm initialised */
static char _drained[300];    /* while an admin has drained the daemon: why, for held jobs'
				 status text (set each tick); "" when not drained */
static volatile int _ctld_down; /* the last job list failed (main thread writes) */
static int64_t _last_err_ms;  /* rate limit for "slurmctld unreachable" */

int slurm_watch_init(const struct slurm_watch_ctx *w, char *err, size_t errlen)
{
	/* slurm_init() exits the process when no slurm.conf can be found:
	   SlurmWatch=no keeps a daemon without Slurm (tests, API-only movers) up. */
	if (!w->conf->slurm_watch) {
		log_info("SlurmWatch=no: not watching Slurm for held jobs");
		return 0;
	}
	/* SlurmConf= wins over the environment (a unit started without SLURM_CONF). */
	if (w->conf->slurm_conf) {
		if (access(w->conf->slurm_conf, R_OK) < 0) {
			snprintf(err, errlen, "SlurmConf=%s: %s", w->conf->slurm_conf,
				 strerror(errno));
			return -1;
		}
		setenv("SLURM_CONF", w->conf->slurm_conf, 1);
		log_info("SlurmConf: libslurm reads %s", w->conf->slurm_conf);
	}
	sjob_init();
	_slurm_ok = 1;
	return 0;
}

struct ran_on;
static struct ran_on *_ran;   /* where plan jobs ran at the last tick (owned) */
static size_t _nran;

/*
 * The last job table read, kept while slurmctld says nothing changed: a
 * quiet controller then answers each tick without packing its jobs, so the
 * watch costs it little however many jobs wait in its queue.
 */
static struct sjob *_cache;
static size_t _ncache;
static char **_cache_running;
static uint32_t *_cache_run_ids;  /* every RUNNING job's id, sorted */
static size_t _ncache_run_ids;
static time_t _cache_since;
static int64_t _next_ms;
static int64_t _next_full_ms;	/* burst-buffer mode: the next read of the whole table */

static void _cache_clear(void)
{
	sjob_free(_cache, _ncache);
	sjob_free_paths(_cache_running);
	free(_cache_run_ids);
	_cache = NULL;
	_ncache = 0;
	_cache_running = NULL;
	_cache_run_ids = NULL;
	_ncache_run_ids = 0;
	_cache_since = 0;
}

/* A copy of a NULL-terminated path list (NULL for none or no memory: nothing held). */
static char **_dup_paths(char *const *p)
{
	size_t n = 0;
	char **c;

	while (p && p[n])
		n++;
	if (!n || !(c = calloc(n + 1, sizeof(*c))))
		return NULL;
	for (size_t i = 0; i < n; i++)
		if (!(c[i] = strdup(p[i]))) {
			sjob_free_paths(c);
			return NULL;
		}
	return c;
}

void slurm_watch_fini(const struct slurm_watch_ctx *w)
{
	_cache_clear();
	_next_ms = 0;
	if (_slurm_ok)
		sjob_fini();
	_slurm_ok = 0;
	free(_ran);
	_ran = NULL;
	_nran = 0;
}

static int _user_name(uid_t uid, char *buf, size_t len)
{
	struct passwd pw, *res = NULL;
	char tmp[4096];

	if (getpwuid_r(uid, &pw, tmp, sizeof(tmp), &res) != 0 || !res)
		return -1;
	return snprintf(buf, len, "%s", pw.pw_name) >= (int)len ? -1 : 0;
}

/*
 * The job's status text (admin_comment "stagehand:status=", never the
 * user's own comment), only when it changed: each update is two RPCs.
 */
static void _comment(const struct sjob *j, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void _comment(const struct sjob *j, const char *fmt, ...)
{
	char buf[1024], cur[1100], err[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);  /* a cut status is still useful */
	va_end(ap);
	/* Compare as it would be stored. */
	if (j->status && sjob_status_record(NULL, buf, cur, sizeof(cur)) == 0 &&
	    strcmp(cur + strlen(SJOB_STATUS_MARK), j->status) == 0)
		return;
	if (sjob_set_status(j->job_id, buf, err, sizeof(err)) < 0)
		log_warn("job %u: %s", j->job_id, err);
}

static void _set_hold_state(const struct slurm_watch_ctx *w, uint32_t job_id, const char *hs)
{
	char err[256];

	if (queue_job_set_hold_state(w->q, job_id, hs, err, sizeof(err)) < 0)
		log_err("job %u: cannot record hold state %s: %s", job_id, hs, err);
}

/* Grammar settings from the daemon's config, so a plan is checked by the site's rules. */
static void _dsl_config(const struct slurm_watch_ctx *w, struct dsl_config *dc)
{
	dsl_config_init(dc);
	dc->allowed_schemes = (const char *const *)w->conf->allowed_schemes;
	dc->stage_in_roots = (const char *const *)w->conf->stage_in_roots;
	dc->max_directives = (size_t)w->conf->max_directives;
	dc->max_line = (size_t)w->conf->max_directive_line;
	dc->max_path = (size_t)w->conf->max_path_length;
}

/* The last component of p, trailing '/' left out: *len bytes at the result. */
static const char *_basename(const char *p, int *len)
{
	size_t n = strlen(p);
	const char *s;

	while (n > 1 && p[n - 1] == '/')
		n--;
	s = p + n;
	while (s > p && s[-1] != '/')
		s--;
	*len = (int)(n - (size_t)(s - p));
	return s;
}

/*
 * Where a stage_in lands: to= absolute as is, relative under the job's
 * working directory; no to= in the job's scratch input directory
 * (ScratchRoots[0]/USER/JOBID/input/NAME, the STAGEHAND_INPUT_DIR the SPANK
 * plugin exports). A to= ending in '/' names a directory: the input goes
 * inside it under its own name (docs/directives.md, "Where stage_in puts
 * its input"); without it, to= names the copy itself.
 */
struct _stage_in_line {
	const char *src;             /* expanded */
	const char *to;              /* expanded to=, or NULL */
	int into;                    /* to= ends in '/': the input goes inside it */
	bool shared;                 /* one copy for the whole array */
};

static int _stage_in_dest(const struct slurm_watch_ctx *w, const struct sjob *j, const char *user,
			  const struct _stage_in_line *sl, char *out, size_t outlen, char *err,
			  size_t errlen)
{
	const char *src = sl->src, *to = sl->to;
	int into = sl->into, n, bl;
	bool shared = sl->shared;
	const char *b = _basename(src, &bl);

	if (to && to[0] == '/')
		n = snprintf(out, outlen, "%s%s%.*s", to, into ? "/" : "", into ? bl : 0, b);
	else if (to)
		n = snprintf(out, outlen, "%s/%s%s%.*s", j->work_dir ? j->work_dir : "", to,
			     into ? "/" : "", into ? bl : 0, b);
	else if (w->conf->scratch_roots && w->conf->scratch_roots[0] && shared)
		/* One copy for the whole array: STAGEHAND_SHARED_INPUT_DIR. */
		n = snprintf(out, outlen, "%s/%s/%u/shared/%.*s", w->conf->scratch_roots[0], user,
			     j->array_job_id, bl, b);
	else if (w->conf->scratch_roots && w->conf->scratch_roots[0])
		n = snprintf(out, outlen, "%s/%s/%u/input/%.*s", w->conf->scratch_roots[0], user,
			     j->job_id, bl, b);
	else {
		snprintf(err, errlen, "the site has no ScratchRoots for inputs without to=; "
			 "add to=DEST to the stage_in line");
		return -1;
	}
	if (n < 0 || (size_t)n >= outlen) {
		snprintf(err, errlen, "stage-in destination is too long");
		return -1;
	}
	if (to && to[0] != '/' && (!j->work_dir || j->work_dir[0] != '/')) {
		snprintf(err, errlen, "the job has no absolute working directory for to=%.200s", to);
		return -1;
	}
	return 0;
}

/* Does a plan value use a per-task pattern (%a or %j)? "%%" is a literal '%'. */
static bool _per_task(const char *v)
{
	for (const char *p = v; p && *p; p++)
		if (p[0] == '%' && p[1]) {
			if (p[1] == 'a' || p[1] == 'j')
				return true;
			p++;
		}
	return false;
}

struct shared_find {
	const char *source, *dest;
	int64_t id;
};

/* queue_request_list callback (queue locked): a live shared request with this source/dest. */
static int _find_shared(const struct queue_request *r, void *arg)
{
	struct shared_find *f = arg;

	if (r->state == QS_CANCELLED || !r->dest || strcmp(r->source, f->source) != 0 ||
	    strcmp(r->dest, f->dest) != 0 || !strstr(r->options, "\"shared\":true"))
		return 0;
	f->id = r->id;
	return 1;
}

/* req: a stage_in of src to dest for job_id (the job's or its array's), as j's owner (user). */
static void _stage_in_request(struct slurm_watch_request *req, const struct sjob *j,
			      const char *user, int64_t job_id, const char *src, const char *dest)
{
	memset(req, 0, sizeof(*req));
	req->uid = j->uid;
	req->gid = j->gid;
	req->user = user;
	req->job_id = job_id;
	req->source = src;
	req->dest = dest;
}

/*
 * A file:// source names a local path: the grammar took it only with an
 * absolute path that passes the path rules (docs/directives.md, "URLs"), so
 * its request is the path itself, read and checked as any other path. The
 * URL is taken literally, as the grammar keeps it (no %-decoding).
 */
static void _file_url_path(char *src)
{
	if (strncasecmp(src, "file://", 7) == 0 && src[7] == '/')
		memmove(src, src + 7, strlen(src + 7) + 1);
}

/*
 * A stage_in of an array task that does not depend on the task (no %a, no
 * %j): made once, as a request of the array's job id with options.shared,
 * and counted by every task (queue_job_stage_in). 0 (made or found, *id
 * set), or -1 with err.
 */
static int _shared_request(const struct slurm_watch_ctx *w, const struct sjob *j, const char *user,
			   const char *src, const char *dest, int64_t *id, char *err,
			   size_t errlen)
{
	struct queue_filter f = { .uid = j->uid, .job_id = j->array_job_id, .state = -1,
				  .action = "stage_in", .limit = 0 };
	struct shared_find sf = { .source = src, .dest = dest, .id = 0 };
	struct slurm_watch_request req;

	if (queue_request_list(w->q, &f, _find_shared, &sf, err, errlen) < 0)
		return -1;
	if (sf.id) {
		*id = sf.id;
		return 0;
	}
	_stage_in_request(&req, j, user, j->array_job_id, src, dest);
	req.options = "{\"shared\":true}";
	return slurm_watch_ops.create_request(w->core, &req, id, err, errlen);
}

/*
 * A held job with '#DATA after=' (hold mode): may it go on to its stage-in
 * and release? 1 yes (or it has no after=: nothing to wait for), 0 not yet:
 * it stays held (HS_AFTER, or HS_INVALID when refused for good) and its
 * status text says what it waits for. The verdict is slurm_after.c's, kept
 * in the queue for 'stagehand status'. Stage-in starts only after it, so a
 * stage_in line may name the archives waited for.
 */
static int _after_ready(const struct slurm_watch_ctx *w, const struct sjob *j, const struct sjob *jobs, size_t n)
{
	struct after_view v = { .jobs = jobs, .n = n, .lookup = sjob_get, .now = time(NULL) };
	char err[512], user[256], text[900], list[64 * 24];
	struct dsl_config dc;
	struct dsl_plan *plan;
	enum after_state st;
	json_t *pj;
	int changed = 0;

	pj = json_loads(j->plan_json, 0, NULL);
	_dsl_config(w, &dc);
	plan = pj ? dsl_plan_from_json(pj, &dc, err, sizeof(err)) : NULL;
	json_decref(pj);
	if (!plan || !plan->after_line) {
		dsl_plan_free(plan);
		return 1;  /* no after=, or a bad plan that _start_staging reports */
	}
	struct queue_job_rec rec = { j->job_id, j->uid, j->gid,
				     _user_name(j->uid, user, sizeof(user)) == 0 ? user : NULL,
				     j->work_dir, j->plan_json };

	if (queue_job_upsert(w->q, &rec, err, sizeof(err)) < 0) {
		log_err("job %u: cannot record job: %s", j->job_id, err);
		dsl_plan_free(plan);
		return 0;  /* tried again next tick */
	}
	st = after_judge(w->q, &v, j, plan->after, plan->nafter, text, sizeof(text));
	after_list_text(plan->after, plan->nafter, list, sizeof(list));
	if (queue_after_set(w->q, j->job_id, list, after_state_name(st), text, &changed, err,
			    sizeof(err)) < 0)
		log_err("job %u: cannot record what it waits for: %s", j->job_id, err);
	if (changed)
		log_info("job %u: after=%s: %s%s%s", j->job_id, list, after_state_name(st),
			 text[0] ? ": " : "", text);
	switch (st) {
	case AFTER_DONE:
		break;
	case AFTER_WAIT:
		_comment(j, "stagehand: %s", text);
		_set_hold_state(w, j->job_id, HS_AFTER);
		break;
	case AFTER_FAILED:
		_comment(j, "stagehand: held: %s", text);
		_set_hold_state(w, j->job_id, HS_AFTER);
		break;
	case AFTER_REFUSED:
		_comment(j, "stagehand: after= refused (script line %d): %s - scancel this job",
			 plan->after_line, text);
		_set_hold_state(w, j->job_id, HS_INVALID);
		break;
	}
	dsl_plan_free(plan);
	return st == AFTER_DONE;
}
static char *_expanded_plan(const struct sjob *j, const char *user, char *err, size_t errlen);

/*
 * One directive of a held job's plan: nothing (0) unless it is a stage_in,
 * else its request, created (1) or shared with the array's other tasks (1);
 * -1 with err filled when it is refused. ctx expands its patterns.
 */
static int _stage_in_one(const struct slurm_watch_ctx *w, const struct sjob *j, const char *user,
			 const struct dsl_expand_ctx *ctx, const struct dsl_directive *dir,
			 char *err, size_t errlen)
{
	char src[4096], to[4096], dest[8192];
	struct slurm_watch_request req;
	bool shared = j->array_job_id && !_per_task(dir->path) && !_per_task(dir->to);
	int64_t id;

	if (dir->action != DSL_STAGE_IN)
		return 0;
	if (dsl_expand(dir->path, ctx, src, sizeof(src), err, errlen) < 0 ||
	    (dir->to && dsl_expand(dir->to, ctx, to, sizeof(to), err, errlen) < 0))
		return -1;
	_file_url_path(src);
	if (_stage_in_dest(w, j, user, &(struct _stage_in_line){ src, dir->to ? to : NULL,
			   dir->to && dir->to[strlen(dir->to) - 1] == '/', shared }, dest,
			   sizeof(dest), err, errlen) < 0)
		return -1;
	if (shared) {
		if (_shared_request(w, j, user, src, dest, &id, err, errlen) < 0)
			return -1;
		log_info("job %u: array %u task %u: shared stage-in request %lld: %s -> %s",
			 j->job_id, j->array_job_id, j->array_task_id, (long long)id, src, dest);
		return 1;
	}
	_stage_in_request(&req, j, user, j->job_id, src, dest);
	if (slurm_watch_ops.create_request(w->core, &req, &id, err, errlen) < 0)
		return -1;
	log_info("job %u: stage-in request %lld: %s -> %s", j->job_id, (long long)id, src, dest);
	return 1;
}

/* Create the stage_in requests of a newly seen held job. */
static void _start_staging(const struct slurm_watch_ctx *w, const struct sjob *j)
{
	char err[512], user[256];
	struct dsl_config dc;
	struct dsl_plan *plan;
	struct dsl_expand_ctx ctx;
	json_error_t jerr;
	json_t *pj;
	size_t i, nreq = 0;

	if (_user_name(j->uid, user, sizeof(user)) < 0) {
		_comment(j, "stagehand: stage-in failed: uid %u has no user name on the staging host "
			 "- ask your admin", (unsigned)j->uid);
		return;  /* tried again next tick (the name service may be back) */
	}
	/* Recorded as the plugin sends it, patterns expanded: without the plugin
	   (Epilog= alone) no event brings the expanded plan before the job's end. */
	char *expanded = _expanded_plan(j, user, err, sizeof(err));

	if (!expanded) {
		log_err("job %u: plan not expanded (%s)", j->job_id, err);
		_comment(j, "stagehand: stage-in refused: recorded plan is invalid (%s) - ask your admin",
			 err);
		_set_hold_state(w, j->job_id, HS_INVALID);
		return;
	}
	if (queue_job_upsert(w->q, &(struct queue_job_rec){ j->job_id, j->uid, j->gid, user,
			     j->work_dir, expanded }, err, sizeof(err)) < 0) {
		free(expanded);
		log_err("job %u: cannot record job: %s", j->job_id, err);
		return;
	}
	free(expanded);
	pj = json_loads(j->plan_json, 0, &jerr);
	/* Ticks run in the main thread, the only writer of w->conf: no lock. */
	_dsl_config(w, &dc);
	plan = pj ? dsl_plan_from_json(pj, &dc, err, sizeof(err)) : NULL;
	if (!pj)
		snprintf(err, sizeof(err), "not JSON: %s", jerr.text);
	if (!plan) {
		json_decref(pj);
		log_err("job %u: recorded plan refused: %s", j->job_id, err);
		_comment(j, "stagehand: stage-in refused: recorded plan is invalid (%s) - ask your admin",
			 err);
		_set_hold_state(w, j->job_id, HS_INVALID);
		return;
	}
	json_decref(pj);
	memset(&ctx, 0, sizeof(ctx));
	ctx.job_id = j->job_id;
	ctx.user = user;
	ctx.job_name = j->name;
	ctx.array_job_id = j->array_job_id;
	ctx.array_task_id = j->array_job_id ? (long)j->array_task_id : -1;
	if (j->array_job_id &&
	    queue_job_set_array(w->q, j->job_id, j->array_job_id, j->array_task_id, err,
				sizeof(err)) < 0) {
		dsl_plan_free(plan);
		log_err("job %u: cannot record its array: %s", j->job_id, err);
		return;  /* tried again next tick */
	}
	for (i = 0; i < plan->ndirs; i++) {
		const struct dsl_directive *dir = &plan->dirs[i];
		int rc = _stage_in_one(w, j, user, &ctx, dir, err, sizeof(err));

		if (rc >= 0) {
			nreq += (size_t)rc;
			continue;
		}
		log_warn("job %u: stage-in refused (line %d): %s", j->job_id, dir->line, err);
		_comment(j, "stagehand: stage-in refused (script line %d): %s - fix the #DATA line "
			 "and resubmit", dir->line, err);
		_set_hold_state(w, j->job_id, HS_FAILED);
		dsl_plan_free(plan);
		return;
	}
	dsl_plan_free(plan);
	_set_hold_state(w, j->job_id, HS_STAGING);
	if (nreq)
		_comment(j, "stagehand: staging %zu input%s", nreq, nreq == 1 ? "" : "s");
	else	/* a burst-buffer job with only after-job transfers */
		_comment(j, "stagehand: no inputs to stage");
}

struct progress {
	int64_t files_total, files_done, bytes_total, bytes_done;
	bool shared_only;   /* count only an array's shared requests */
};

static int _sum(const struct queue_request *r, void *arg)
{
	struct progress *p = arg;

	if (strcmp(r->action, "stage_in") != 0)
		return 0;
	if (p->shared_only && !strstr(r->options, "\"shared\":true"))
		return 0;
	p->files_total += r->files_total;
	p->files_done += r->files_done;
	p->bytes_total += r->bytes_total;
	p->bytes_done += r->bytes_done;
	return 0;
}

static void _human(int64_t b, char *buf, size_t len)
{
	const char *u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double v = (double)b;
	int i = 0;

	while (v >= 1024 && i < 4) {
		v /= 1024;
		i++;
	}
	snprintf(buf, len, i ? "%.1f %s" : "%.0f %s", v, u[i]);
}

/*
 * Jobs whose release was declined, so the log says it once per job (sorted
 * ids; forgotten all at once when full, which only repeats a line).
 */
#define DECLINED_MAX 4096
static uint32_t _declined[DECLINED_MAX];
static size_t _ndeclined;

/* Log, once per job, that the daemon did not release job_id, and why. */
static void _declined_once(uint32_t job_id, const char *why)
{
	size_t lo = 0, hi = _ndeclined;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (_declined[mid] == job_id)
			return;
		if (_declined[mid] < job_id)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (_ndeclined == DECLINED_MAX) {
		_ndeclined = 0;
		lo = 0;
	}
	memmove(_declined + lo + 1, _declined + lo, (_ndeclined - lo) * sizeof(*_declined));
	_declined[lo] = job_id;
	_ndeclined++;
	log_warn("job %u: inputs staged but not released: %s", job_id, why);
}

/*
 * Release a staged job only while stagehand holds it (sjob_release checks
 * slurmctld's view again first). 0 released, 1 declined (logged once, and
 * said in the job's status), -1 error (logged; tried again next tick).
 */
static int _release(const struct sjob *j)
{
	char why[256], err[256];
	int rc;

	if (!sjob_held_by_us(j, why, sizeof(why)))
		rc = 1;
	else
		rc = sjob_release(j->job_id, why, sizeof(why), err, sizeof(err));
	if (rc < 0)
		log_warn("job %u: inputs staged but %s (tried again)", j->job_id, err);
	if (rc == 1) {
		_declined_once(j->job_id, why);
		_comment(j, "stagehand: inputs staged, not released: %s", why);
	}
	return rc;
}

/* The stage-in of j so far, its array's shared inputs included; hb, ht: bytes done, total. */
static void _stage_in_progress(const struct slurm_watch_ctx *w, const struct sjob *j,
			       struct progress *p, char *hb, char *ht, size_t hlen)
{
	struct queue_filter f = { .uid = -1, .job_id = j->job_id, .state = -1, .limit = 0 };
	char err[256];

	memset(p, 0, sizeof(*p));
	queue_request_list(w->q, &f, _sum, p, err, sizeof(err));
	if (j->array_job_id && j->array_job_id != j->job_id) {
		/* An array task waits for the array's shared inputs too. */
		f.job_id = j->array_job_id;
		p->shared_only = true;
		queue_request_list(w->q, &f, _sum, p, err, sizeof(err));
	}
	_human(p->bytes_done, hb, hlen);
	_human(p->bytes_total, ht, hlen);
}

/* The status of a stage-in under way: the same words in hold and burst-buffer mode. */
static void _staging_comment(const struct sjob *j, const struct progress *p, const char *hb,
			     const char *ht)
{
	int pct = p->bytes_total > 0 ? (int)(100 * p->bytes_done / p->bytes_total) : 0;

	_comment(j, "stagehand: staging %lld/%lld files (%d%%, %s of %s)%s",
		 (long long)p->files_done, (long long)p->files_total, pct, hb, ht, _drained);
}

/* A held job whose requests exist: release, report failure, or show progress. */
static void _follow(const struct slurm_watch_ctx *w, const struct sjob *j)
{
	struct progress p;
	const char *state = NULL;
	char *error = NULL;
	char err[256], hb[32], ht[32];

	if (queue_job_stage_in(w->q, j->job_id, &state, &error, err, sizeof(err)) < 0) {
		log_err("job %u: %s", j->job_id, err);
		return;
	}
	_stage_in_progress(w, j, &p, hb, ht, sizeof(hb));
	if (strcmp(state, "ready") == 0 || strcmp(state, "none") == 0) {
		if (_release(j) == 0) {
			char *aj = NULL, *as = NULL, *ar = NULL;

			log_info("job %u: inputs staged (%lld files, %s): released", j->job_id,
				 (long long)p.files_done, hb);
			if (queue_after_get(w->q, j->job_id, &aj, &as, &ar, err, sizeof(err)) == 0)
				_comment(j, "stagehand: archives of after=%s verified; inputs staged "
					 "(%lld files, %s); released", aj, (long long)p.files_done, hb);
			else
				_comment(j, "stagehand: inputs staged (%lld files, %s); released",
					 (long long)p.files_done, hb);
			free(aj);
			free(as);
			free(ar);
			_set_hold_state(w, j->job_id, HS_RELEASED);
		}
	} else if (strcmp(state, "failed") == 0) {
		_comment(j, "stagehand: stage-in failed: %.700s - fix it and run 'stagehand retry %u'",
			 error ? error : "unknown error", j->job_id);
		_set_hold_state(w, j->job_id, HS_FAILED);
	} else {
		_staging_comment(j, &p, hb, ht);
		_set_hold_state(w, j->job_id, HS_STAGING);
	}
	free(error);
}

/*
 * A burst-buffer job being staged (not held: Slurm's data_in hook waits for
 * it through api_bb.c): progress in its status as in hold mode, never a
 * release. The job is PENDING (reason BurstBufferStageIn on 24.05 and
 * later, None on 22.05), so slurmctld takes the update; burst_buffer/lua
 * writes only its Reason and SystemComment.
 */
static void _follow_bb(const struct slurm_watch_ctx *w, const struct sjob *j)
{
	struct progress p;
	const char *state = NULL;
	char *error = NULL;
	char err[256], hb[32], ht[32];

	if (queue_job_stage_in(w->q, j->job_id, &state, &error, err, sizeof(err)) < 0) {
		log_err("job %u: %s", j->job_id, err);
		return;
	}
	if (!strcmp(state, "ready") || !strcmp(state, "none")) {
		_comment(j, "stagehand: inputs staged; waiting for Slurm to start the job");
		_set_hold_state(w, j->job_id, HS_RELEASED);
	} else if (!strcmp(state, "failed")) {
		_comment(j, "stagehand: stage-in failed: %.700s", error ? error : "unknown error");
		_set_hold_state(w, j->job_id, HS_FAILED);
	} else {
		_stage_in_progress(w, j, &p, hb, ht, sizeof(hb));
		_staging_comment(j, &p, hb, ht);
	}
	free(error);
}

struct idlist {
	int64_t ids[256];
	int n;
	bool keep_shared;   /* other tasks of the array still wait for its shared inputs */
};

/* queue_request_list holds the queue's lock while it calls back: collect only. */
static int _collect_active(const struct queue_request *r, void *arg)
{
	struct idlist *l = arg;

	if (r->state == QS_DONE || r->state == QS_FAILED_FINAL || r->state == QS_CANCELLED)
		return 0;
	if (l->keep_shared && strstr(r->options, "\"shared\":true"))
		return 0;
	l->ids[l->n++] = r->id;
	return l->n == (int)(sizeof(l->ids) / sizeof(l->ids[0]));
}

static void _cancel_job(const struct slurm_watch_ctx *w, uint32_t job_id, bool keep_shared)
{
	struct queue_filter f = { .uid = -1, .job_id = job_id, .state = -1,
				  .action = "stage_in", .limit = 0 };
	struct idlist l = { .n = 0, .keep_shared = keep_shared };
	char err[256];
	int i;

	if (queue_request_list(w->q, &f, _collect_active, &l, err, sizeof(err)) < 0) {
		log_err("job %u: cannot list its requests: %s", job_id, err);
		return;  /* tried again next tick */
	}
	for (i = 0; i < l.n; i++)
		if (queue_request_set_state(w->q, l.ids[i], -1, QS_CANCELLED,
					    "job cancelled while held", err, sizeof(err)) == 0)
			log_info("job %u: request %lld cancelled (job ended while held)",
				 job_id, (long long)l.ids[i]);
	_set_hold_state(w, job_id, HS_CANCELLED);
	slurm_watch_ops.wake(w->core);
}

/* Seconds after a job's end before slurmctld's record stands in for the plugin's event. */
#define END_GRACE_SECONDS 10

/*
 * slurmctld's copy of the plan is the one job_submit.lua recorded, with its
 * patterns (%j, %u, %x, ...) unexpanded; the SPANK plugin's event carries the
 * expanded plan. Expand path and to= here the same way, so that an archive of
 * "results-%j" means the same directory whichever reported the end.
 * Returns a new string (free it), or NULL with err filled.
 */
static char *_expanded_plan(const struct sjob *j, const char *user, char *err, size_t errlen)
{
	struct dsl_expand_ctx ctx = { .job_id = j->job_id, .user = user, .job_name = j->name,
				      .array_job_id = j->array_job_id,
				      .array_task_id = j->array_job_id ? (long)j->array_task_id : -1 };
	json_error_t jerr;
	json_t *plan = json_loads(j->plan_json, 0, &jerr), *a;
	size_t i;
	char *out;

	if (!plan) {
		snprintf(err, errlen, "recorded plan is not JSON: %s", jerr.text);
		return NULL;
	}
	json_array_foreach(json_object_get(plan, "actions"), i, a) {
		static const char *const keys[] = { "path", "to", NULL };

		for (int k = 0; keys[k]; k++) {
			const char *v = json_string_value(json_object_get(a, keys[k]));
			char buf[4096];

			if (!v)
				continue;
			if (dsl_expand(v, &ctx, buf, sizeof(buf), err, errlen) < 0 ||
			    json_object_set_new(a, keys[k], json_string(buf)) < 0) {
				json_decref(plan);
				return NULL;
			}
		}
	}
	out = json_dumps(plan, JSON_COMPACT);
	json_decref(plan);
	if (!out)
		snprintf(err, errlen, "out of memory");
	return out;
}

static void _end_backstop(const struct slurm_watch_ctx *w, const struct sjob *j, time_t now)
{
	char err[512], user[256];
	char *plan;
	int dup = 0, rc;

	if (j->completing || !j->end_time || now - j->end_time < END_GRACE_SECONDS)
		return;
	if (_user_name(j->uid, user, sizeof(user)) < 0)
		snprintf(user, sizeof(user), "%u", (unsigned)j->uid);
	plan = _expanded_plan(j, user, err, sizeof(err));
	if (!plan) {
		log_err("job %u: plan not expanded (%s); its after-job transfers are skipped",
			j->job_id, err);
		plan = strdup("{\"version\":1,\"actions\":[]}");
		if (!plan)
			return;
	}
	rc = queue_job_end(w->q, &(struct queue_job_end_rec){ { j->job_id, j->uid, j->gid, user,
			   j->work_dir, plan }, sjob_state_name(j->state), j->exit_code, NULL,
			   (int64_t)now }, &dup, err, sizeof(err));
	free(plan);
	if (rc < 0) {
		log_err("job %u: cannot record its end from slurmctld: %s", j->job_id, err);
		return;
	}
	if (!dup)
		log_info("job %u: ended %s (exit %d) with no event from its node; "
			 "taking slurmctld's record", j->job_id, sjob_state_name(j->state), j->exit_code);
}

/* How long a job's end waits for an unreachable slurmctld before the event is taken as sent. */
#define END_CTLD_WAIT_SECONDS 600

/* Splits per tick: each is one RPC to slurmctld; a big array is split over a few ticks. */
#define SPLITS_PER_TICK 64

/*
 * A held array is one pending record whose tasks have no job ids yet, so
 * %a cannot be expanded and a task cannot be released alone. Updating one
 * task (its status text) makes slurmctld split it off as its own held job, with
 * the same admin_comment and priority 0; the next tick stages it like any
 * job, under its own id. The %N throttle and the hold stay with each task.
 */
static void _split_array(const struct sjob *j)
{
	uint32_t tasks[SPLITS_PER_TICK];
	size_t nt = sjob_array_tasks(j->array_tasks, tasks, SPLITS_PER_TICK), k;
	char err[256], c[128];

	if (nt == 0 && j->array_tasks)
		log_warn("array %u: cannot read its task list '%.100s'", j->job_id, j->array_tasks);
	for (k = 0; k < nt; k++) {
		snprintf(c, sizeof(c), "stagehand: task %u of array %u: waiting for stage-in",
			 tasks[k], j->array_job_id);
		if (sjob_split_task(j->array_job_id, tasks[k], j->admin_comment, c, err,
				    sizeof(err)) < 0) {
			log_warn("array %u: %s (tried again)", j->array_job_id, err);
			return;
		}
	}
	if (nt)
		log_info("array %u: %zu held task%s split off to be staged one by one",
			 j->array_job_id, nt, nt == 1 ? "" : "s");
}

/* Does another task of j's array still wait (held) for its inputs? */
static bool _array_waits(const struct sjob *jobs, size_t n, const struct sjob *j)
{
	if (!j->array_job_id)
		return false;
	for (size_t i = 0; i < n; i++)
		if (&jobs[i] != j && jobs[i].array_job_id == j->array_job_id &&
		    jobs[i].state == JOB_PENDING && jobs[i].hold_pending)
			return true;
	return false;
}

enum slurm_watch_end slurm_watch_end_check(const struct slurm_watch_ctx *w,
					   const struct slurm_watch_end_event *e,
					   struct slurm_watch_end_word *out)
{
	int64_t job_id = e->job_id, received = e->received;
	const char *event_state = e->event_state;
	struct sjob j;
	char err[256], user[256];
	enum slurm_watch_end r;
	int rc;

	memset(out, 0, sizeof(*out));
	out->array_job_id = out->array_task_id = -1;
	if (!w->conf->slurm_watch || !_slurm_ok || job_id <= 0 || job_id > UINT32_MAX)
		return SW_END_UNKNOWN;
	/* slurmctld down: do not block on it; wait for it, then take the event as sent. */
	if (_ctld_down)
		return time(NULL) - received < END_CTLD_WAIT_SECONDS ? SW_END_WAIT : SW_END_UNKNOWN;
	rc = sjob_get((uint32_t)job_id, &j, err, sizeof(err));
	if (rc != 0) {
		if (rc < 0 && time(NULL) - received < END_CTLD_WAIT_SECONDS)
			return SW_END_WAIT;
		if (rc < 0)
			log_warn("job %lld: %s; its end event is taken as sent", (long long)job_id, err);
		return SW_END_UNKNOWN;
	}
	out->restarts = (int)j.restarts;
	out->exit_code = j.exit_code;
	if (j.array_job_id) {
		out->array_job_id = j.array_job_id;
		out->array_task_id = j.array_task_id;
	}
	snprintf(out->state, sizeof(out->state), "%s", sjob_state_name(j.state));
	if (e->want_plan && j.plan_json) {
		if (_user_name(j.uid, user, sizeof(user)) < 0)
			snprintf(user, sizeof(user), "%u", (unsigned)j.uid);
		out->plan = _expanded_plan(&j, user, err, sizeof(err));
		if (!out->plan)
			log_err("job %lld: slurmctld's plan not expanded (%s)", (long long)job_id,
				err);
	}
	/* Requeued: pending again (scontrol requeue, NODE_FAIL with requeue, preemption
	   in REQUEUE mode), or still completing with a requeue flag. Still RUNNING:
	   slurmctld has not heard of the end yet (milliseconds), or the event is a late
	   one from a run that was requeued and the job runs again: either way the
	   archive waits until slurmctld says the job ended. */
	if (j.state == JOB_PENDING || j.requeue) {
		r = SW_END_REQUEUED;
		_comment(&j, "stagehand: run %u was requeued (it ended %s on its node): outputs are "
			 "archived after the final run", j.restarts ? j.restarts : 1,
			 event_state ? event_state : "?");
	}
	else if (sjob_state_is_final(j.state))
		r = SW_END_FINAL;  /* no comment: slurmctld refuses to change a finished job */
	else
		r = SW_END_WAIT;
	sjob_clear(&j);
	return r;
}

time_t slurm_watch_expected_start(int64_t job_id)
{
	/* The cache is dropped while slurmctld cannot be reached: 0, "not known". */
	for (size_t i = 0; i < _ncache; i++)
		if ((int64_t)_cache[i].job_id == job_id)
			return _cache[i].start_time;
	return 0;
}

/* Where plan jobs ran at the last tick (job id -> batch host), to name a lost node. */
struct ran_on {
	uint32_t job_id;
	char host[64];
};

/*
 * Where jobs last started, from their job-start events (the SPANK plugin
 * sends one before a batch job's tasks run): names the node of a job lost
 * before any table the watch read showed it RUNNING. API threads write it,
 * the main loop reads it; a ring of the newest STARTED_MAX starts.
 */
#define STARTED_MAX 4096
static struct ran_on _started[STARTED_MAX];
static size_t _started_next;
static pthread_mutex_t _started_lock = PTHREAD_MUTEX_INITIALIZER;

/* A Slurm node name as a job-start event may give it: [A-Za-z0-9._-], 1-63. */
static int _node_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= sizeof(_started[0].host))
		return 0;
	for (; *s; s++)
		if (!isalnum((unsigned char)*s) && *s != '.' && *s != '_' && *s != '-')
			return 0;
	return 1;
}

void slurm_watch_job_started(int64_t job_id, const char *node)
{
	size_t slot = STARTED_MAX;

	if (job_id <= 0 || job_id > UINT32_MAX || !node || !_node_name_ok(node))
		return;
	pthread_mutex_lock(&_started_lock);
	for (size_t i = 0; i < STARTED_MAX && slot == STARTED_MAX; i++)
		if (_started[i].job_id == (uint32_t)job_id)
			slot = i;
	if (slot == STARTED_MAX)
		slot = _started_next++ % STARTED_MAX;
	_started[slot].job_id = (uint32_t)job_id;
	snprintf(_started[slot].host, sizeof(_started[slot].host), "%s", node);
	pthread_mutex_unlock(&_started_lock);
}

/* Where job_id ran: slurmctld's batch host at the last table read that
   showed it RUNNING, else its last job-start event. 0, or -1 if neither. */
static int _ran_host(uint32_t job_id, char *host, size_t hostlen)
{
	int rc = -1;

	for (size_t i = 0; i < _nran; i++)
		if (_ran[i].job_id == job_id) {
			snprintf(host, hostlen, "%s", _ran[i].host);
			return 0;
		}
	pthread_mutex_lock(&_started_lock);
	for (size_t i = 0; i < STARTED_MAX && rc < 0; i++)
		if (_started[i].job_id == job_id) {
			snprintf(host, hostlen, "%s", _started[i].host);
			rc = 0;
		}
	pthread_mutex_unlock(&_started_lock);
	return rc;
}

static void _remember_hosts(const struct sjob *jobs, size_t n)
{
	struct ran_on *r = calloc(n ? n : 1, sizeof(*r));
	size_t k = 0;

	if (!r)
		return;  /* keep the older list */
	for (size_t i = 0; i < n; i++)
		if (jobs[i].batch_host && jobs[i].state == JOB_RUNNING) {
			r[k].job_id = jobs[i].job_id;
			snprintf(r[k].host, sizeof(r[k].host), "%s", jobs[i].batch_host);
			k++;
		}
	free(_ran);
	_ran = r;
	_nran = k;
}

/*
 * Burst-buffer mode: jobs slurmctld asked to stage out (data_out) while no
 * end event of theirs had come. A run lost with its node ends with no event
 * (NODE_FAIL, then requeued), and between whole tables only the jobs being
 * staged are read: these are read with them for ASKED_KEEP_MS after the
 * last such call, so the requeue is seen now, not at the next whole table.
 * API threads add, the main loop reads.
 */
#define ASKED_MAX 64
#define ASKED_KEEP_MS 30000
static struct {
	uint32_t job_id;	/* 0: a free slot */
	int64_t until_ms;
} _asked[ASKED_MAX];
static pthread_mutex_t _asked_lock = PTHREAD_MUTEX_INITIALIZER;

void slurm_watch_follow(int64_t job_id)
{
	int64_t now = mono_ms();
	size_t slot = 0;

	if (job_id <= 0 || job_id > UINT32_MAX)
		return;
	pthread_mutex_lock(&_asked_lock);
	/* Its own slot, else a free or expired one, else the one expiring first. */
	for (size_t i = 0; i < ASKED_MAX; i++) {
		if (_asked[i].job_id == (uint32_t)job_id) {
			slot = i;
			break;
		}
		if (_asked[i].until_ms < _asked[slot].until_ms)
			slot = i;
	}
	_asked[slot].job_id = (uint32_t)job_id;
	_asked[slot].until_ms = now + ASKED_KEEP_MS;
	pthread_mutex_unlock(&_asked_lock);
}

/*
 * slurmctld requeued a job (it counts a restart) and no end event of that
 * run came: its node died (NODE_FAIL, then requeued) or the event is still
 * on its way. Say so in the record and the comment; a late event of that
 * run is recognised (queue_job_requeued) and never archived.
 */
static void _requeued_silently(const struct slurm_watch_ctx *w, const struct sjob *j)
{
	char host[64], how[160], err[256];
	int down = _ran_host(j->job_id, host, sizeof(host)) == 0 ?
		   sjob_node_down(host, err, sizeof(err)) : -1;

	if (down == 1)
		snprintf(how, sizeof(how), "run %u lost with node %s (NODE_FAIL); requeued",
			 j->restarts, host);
	else
		snprintf(how, sizeof(how), "run %u requeued by slurmctld with no end event from "
			 "its node", j->restarts);
	if (queue_job_requeued(w->q, j->job_id, (int)j->restarts, how, err, sizeof(err)) < 0) {
		log_err("job %u: cannot record its requeue: %s", j->job_id, err);
		return;
	}
	log_info("job %u: %s: its outputs are archived after the final run", j->job_id, how);
	_comment(j, "stagehand: %s: outputs are archived after the final run", how);
}

/*
 * slurmctld counts a restart the record does not have, and the job's end was
 * processed already: 'scontrol requeue' of an ended job. Its earlier run's
 * after-job transfers must not stand for the rerun (lifecycle_job_rerun):
 * they would archive outputs the rerun is rewriting, remove inputs it
 * reads, and release after= dependents before it ends. When the rerun has
 * ended too (its end event was dropped as a duplicate of the first), its
 * end is stored from slurmctld's record and processed as new.
 */
static void _rerun_after_end(const struct slurm_watch_ctx *w, const struct sjob *j, const struct queue_job *qj)
{
	const char *fin = sjob_state_is_final(j->state) ? sjob_state_name(j->state) : NULL;
	char how[160], err[256];

	snprintf(how, sizeof(how), "run %d ended %s and was processed; slurmctld requeued the job "
		 "(run %u)", qj->runs + 1, qj->end_state ? qj->end_state : "?", j->restarts + 1);
	if (slurm_watch_ops.job_rerun(w->core, j->job_id, (int)j->restarts, how, fin, j->exit_code,
				      err, sizeof(err)) < 0) {
		log_err("job %u: cannot record its rerun: %s", j->job_id, err);
		return;
	}
	if (!fin)
		_comment(j, "stagehand: requeued after its end: outputs are archived after the "
			 "final run");
}

/*
 * sjob_list_since's filter: the daemon's own mover jobs run on the transfer
 * partition for stagehand, not for a user; after-job transfers never yield
 * to them. Known by the job ids the shards table recorded, not by name.
 */
static int _own_mover(uint32_t job_id, void *arg)
{
	const struct slurm_watch_ctx *w = arg;
	char err[256];
	int rc = queue_shard_job(w->q, job_id, err, sizeof(err));

	if (rc < 0)
		log_warn("job %u: %s (yielding to it as to any job)", job_id, err);
	return rc == 1;
}

/* Jobs asked for one by one in a tick, at most: beyond, one table read costs less. */
#define TRACK_MAX 128

/* Put j (taken over; NULL: drop) in the cache as job id's record. 0, or -1 (no memory). */
static int _cache_put(uint32_t id, struct sjob *j)
{
	struct sjob *v;
	size_t i;

	for (i = 0; i < _ncache && _cache[i].job_id != id; i++)
		;
	if (i < _ncache) {
		sjob_clear(&_cache[i]);
		if (j)
			_cache[i] = *j;
		else
			_cache[i] = _cache[--_ncache];
		return 0;
	}
	if (!j)
		return 0;
	if (!(v = realloc(_cache, (_ncache + 1) * sizeof(*v)))) {
		sjob_clear(j);
		return -1;
	}
	_cache = v;
	_cache[_ncache++] = *j;
	return 0;
}

/*
 * Burst-buffer mode between two reads of the whole table: Slurm's hooks
 * say which jobs to stage (setup, teardown) and the SPANK plugin when jobs
 * start and end, so there is nothing to discover; only the jobs being
 * staged are asked for, one REQUEST_JOB_INFO_SINGLE each, and their records
 * replace or join the cache. The cost to slurmctld is then proportional to
 * the jobs stagehand stages, not to its queue. Returns 0; 1 when a whole
 * table is due instead (more than TRACK_MAX such jobs, the database did not
 * answer); -1 with err when slurmctld cannot be reached.
 */
static int _refresh_tracked(const struct slurm_watch_ctx *w, int64_t now_ms, char *err,
			    size_t errlen)
{
	int64_t ids[TRACK_MAX + 1 + ASKED_MAX];
	uint32_t gone[ASKED_MAX];
	size_t ngone = 0;
	int ntracked, n = queue_jobs_in_hold(w->q, HS_BB_SETUP, HS_STAGING, ids, TRACK_MAX + 1, err, errlen);

	if (n < 0 || n > TRACK_MAX)
		return 1;
	ntracked = n;
	/* The jobs slurm_watch_follow named; an expired one leaves the cache. */
	pthread_mutex_lock(&_asked_lock);
	for (size_t i = 0; i < ASKED_MAX; i++) {
		int tracked = 0;

		if (!_asked[i].job_id)
			continue;
		if (_asked[i].until_ms <= now_ms) {
			gone[ngone++] = _asked[i].job_id;
			_asked[i].job_id = 0;
			continue;
		}
		for (int k = 0; k < ntracked && !tracked; k++)
			tracked = ids[k] == _asked[i].job_id;
		if (!tracked)	/* one RPC per job a tick */
			ids[n++] = _asked[i].job_id;
	}
	pthread_mutex_unlock(&_asked_lock);
	for (size_t i = 0; i < ngone; i++)
		_cache_put(gone[i], NULL);	/* a tracked one is read again below */
	for (int k = 0; k < n; k++) {
		struct sjob j;
		int rc = sjob_get((uint32_t)ids[k], &j, err, errlen);

		if (rc < 0)
			return -1;
		if (rc == 1) {
			/* Long gone from slurmctld (MinJobAge): nothing will start it. */
			_cache_put((uint32_t)ids[k], NULL);
			if (k < ntracked)
				_cancel_job(w, (uint32_t)ids[k], false);
			continue;
		}
		if (_cache_put((uint32_t)ids[k], &j) < 0)
			return 1;
	}
	return 0;
}

/*
 * The jobs this tick decides on, in _cache: the whole table (only when it
 * changed since the last one), or in burst-buffer mode between whole
 * tables (SlurmWatchFullInterval) the jobs being staged. 0, or -1 with err
 * (slurmctld unreachable: the cache is dropped).
 */
static int _read_jobs(const struct slurm_watch_ctx *w, int64_t now_ms, char *err, size_t errlen)
{
	struct sjob *jobs = NULL;
	char **running = NULL;
	struct sjob_ids run = { NULL, 0 };
	size_t n = 0;
	int rc;

	if (w->conf->submit_mode == CONF_SUBMIT_BB && _cache_since && now_ms < _next_full_ms) {
		rc = _refresh_tracked(w, now_ms, err, errlen);
		if (rc <= 0)
			return rc;
	}
	rc = sjob_list_since(&_cache_since, &jobs, &n, &running, &run,
			     &(struct sjob_skip){ _own_mover, (void *)w }, err, errlen);
	if (rc < 0)
		return -1;
	_next_full_ms = now_ms + (int64_t)w->conf->slurm_watch_full_interval * 1000;
	if (rc == 0) {
		sjob_free(_cache, _ncache);
		sjob_free_paths(_cache_running);
		free(_cache_run_ids);
		_cache = jobs;
		_ncache = n;
		_cache_running = running;
		_cache_run_ids = run.ids;
		_ncache_run_ids = run.n;
	}
	return 0;
}

/*
 * While drained, a held job's status says why its inputs do not move (the
 * transfer under way, if any, still finishes and the job is released).
 */
static void _drain_note(const struct slurm_watch_ctx *w)
{
	struct queue_drain qd;
	char err[256];

	_drained[0] = '\0';
	if (!atomic_load(w->drained))
		return;
	if (queue_drain_get(w->q, &qd, err, sizeof(err)) != 1) {
		snprintf(_drained, sizeof(_drained), "; waiting: stagehandd is drained for "
			 "maintenance, staging resumes after it");
		return;
	}
	/* A cut reason still reads: the status is a sentence for the user. */
	snprintf(_drained, sizeof(_drained), "; waiting: stagehandd is drained for maintenance%s"
		 "%.200s%s, staging resumes after it", *qd.reason ? " (" : "", qd.reason,
		 *qd.reason ? ")" : "");
	queue_drain_free(&qd);
}

/*
 * A tick's changes go to the queue in batches (queue_batch_begin): the
 * stage-ins of a 10,000-task array are stored by a few hundred commits, not
 * by 10,000 (each a durable commit: an fsync, 2-4 ms on a plain disk). A
 * batch is cut after BATCH_JOBS jobs or BATCH_MS, so the queue's writer lock,
 * which the API's changes wait for, is never held long; the Slurm calls a job
 * needs (its comment, its hold) run inside it. Reads elsewhere do not wait
 * (the queue's readers' connection). A crash before a batch's commit loses
 * only what the next tick derives again from slurmctld's table.
 */
#define BATCH_JOBS 64
#define BATCH_MS 50


/* Ends the open batch (if any); with again, starts the next. Returns whether one is open. */
static int _batch_cut(const struct slurm_watch_ctx *w, int open, int again, int64_t *since)
{
	char err[512];

	if (open && queue_batch_end(w->q, err, sizeof(err)) < 0)
		log_err("slurm watch: storing the tick's changes failed: %s (the next tick "
			"derives them again)", err);
	*since = mono_ms();
	return again && queue_batch_begin(w->q) == 0;
}

void slurm_watch_tick(const struct slurm_watch_ctx *w, int64_t now_ms)
{
	struct sjob *jobs;
	size_t n, i;
	char err[512];
	int batched, in_batch = 0;
	int64_t since;

	if (!_slurm_ok || now_ms < _next_ms)
		return;
	_next_ms = now_ms + (int64_t)w->conf->slurm_watch_interval * 1000;
	if (_read_jobs(w, now_ms, err, sizeof(err)) < 0) {
		/* slurmctld down or restarting: nothing is lost, try next tick. */
		if (now_ms - _last_err_ms > 60000) {
			log_warn("%s (retrying)", err);
			_last_err_ms = now_ms;
		}
		_ctld_down = 1;
		_cache_clear();
		return;
	}
	_ctld_down = 0;
	_drain_note(w);
	/* Unchanged or not, every tick derives the same decisions again from the table. */
	jobs = _cache;
	n = _ncache;
	/* The yield module takes a list of its own (slurmctld's view a moment ago). */
	slurm_watch_ops.set_running(w->core, _dup_paths(_cache_running), _cache_run_ids,
				    _ncache_run_ids, _cache_since);
	batched = _batch_cut(w, 0, 1, &since);
	for (i = 0; i < n; i++) {
		const struct sjob *j = &jobs[i];
		struct queue_job *qj = NULL;
		const char *hs;

		if (!j->plan_json)
			continue;
		if (batched && (++in_batch > BATCH_JOBS || mono_ms() - since >= BATCH_MS)) {
			batched = _batch_cut(w, batched, 1, &since);
			in_batch = 1;
		}
		if (SJOB_IS_ARRAY_META(j)) {
			if (j->state == JOB_PENDING && j->hold_pending)
				_split_array(j);
			continue;  /* its tasks are followed one by one */
		}
		if (queue_job_get(w->q, j->job_id, &qj, err, sizeof(err)) < 0) {
			log_err("job %u: %s", j->job_id, err);
			continue;
		}
		/* An array task's own archive directory and %a need its array, even when it
		   was never held (stage-in records it for held ones). */
		if (j->array_job_id && (!qj || qj->array_job_id < 0) && j->state != JOB_PENDING &&
		    queue_job_set_array(w->q, j->job_id, j->array_job_id, j->array_task_id, err,
					sizeof(err)) < 0)
			log_err("job %u: cannot record its array: %s", j->job_id, err);
		if (qj && qj->end_processed && (int)j->restarts > qj->runs)
			_rerun_after_end(w, j, qj);
		else if (j->restarts > 0 && (j->state == JOB_PENDING || j->state == JOB_RUNNING) &&
			 (int)j->restarts > (qj ? qj->runs : 0) && (!qj || !qj->end_state))
			_requeued_silently(w, j);
		hs = qj && qj->hold_state ? qj->hold_state : "none";
		if (j->state == JOB_PENDING && j->hold_pending) {
			if (!qj || !strcmp(hs, "none") || !strcmp(hs, HS_CANCELLED) ||
			    !strcmp(hs, HS_AFTER)) {
				if (_after_ready(w, j, jobs, n))
					_start_staging(w, j);
			}
			else if (!strcmp(hs, HS_STAGING) || !strcmp(hs, HS_FAILED) ||
				 !strcmp(hs, HS_RELEASED))
				_follow(w, j);
			/* HS_INVALID: stays held with its comment until cancelled. */
		} else if (j->state == JOB_PENDING && !strcmp(hs, HS_BB_SETUP)) {
			/* Burst-buffer mode: Slurm called setup; its data_in hook waits. */
			_start_staging(w, j);
		} else if (j->state == JOB_PENDING && !strcmp(hs, HS_STAGING)) {
			_follow_bb(w, j);
		} else if (sjob_state_is_final(j->state) &&
			   (!strcmp(hs, HS_STAGING) || !strcmp(hs, HS_FAILED) ||
			    !strcmp(hs, HS_BB_SETUP) || !strcmp(hs, HS_AFTER))) {
			_cancel_job(w, j->job_id, _array_waits(jobs, n, j));
		} else if (sjob_state_is_final(j->state) && strcmp(hs, HS_INVALID) != 0 &&
			   strcmp(hs, HS_CANCELLED) != 0 && j->end_time && (!qj || !qj->end_state)) {
			/* Never ran (cancelled while pending): no outputs to archive. */
			if (j->state != JOB_CANCELLED || qj)
				_end_backstop(w, j, time(NULL));
		}
		queue_job_free(qj);
	}
	_batch_cut(w, batched, 0, &since);
	_remember_hosts(jobs, n);
}
