/* worker.c - see worker.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "grow.h"
#include "log.h"
#include "metrics.h"
#include "monoclock.h"
#include "usercache.h"
#include "userdir.h"
#include "worker.h"
#include "worker_int.h"
#include "spawner.h"
#include "xattr.h"
#include "xfer.h"
#include "xfer_endpoint.h"
#include "xfer_range.h"
#include "xfer_engine.h"
#include "pace.h"
#include "pool.h"
#include "queue_mpu.h"
#include "queue_shards.h"

#define BUF_MAX (2 * (sizeof(struct xfer_rec) + XFER_PATH_MAX + XFER_TEXT_MAX))
#define MAX_FDS 16

struct _worker {
	pid_t pid;
	int chan;                    /* -1 after EOF */
	struct queue_request *req;   /* owned */
	char buf[BUF_MAX];
	size_t len;
	int fds[MAX_FDS];            /* label fds received, in order */
	int nfds;
	int result;                  /* enum xfer_result, -1 = none received */
	char msg[XFER_TEXT_MAX + 1];
	int cancelled;               /* stopped by cancel: request already cancelled */
	int over_capacity;           /* stopped: its stage-in exceeds the job's burst buffer
					(w->msg says why, XFER_FINAL) */
	int stopped;                 /* stopped by drain: checkpoint as queued */
	int exited, status;
	int spawned;                 /* made by the spawner: its status comes from there */
	struct xfer_bucket *yb;      /* this worker's own bucket (yield), parent = global cap */
	int64_t yield_since_ms;      /* when it started yielding; 0 = not yielding */
	int yield_mode;              /* enum _ym */
};

#define MAX_UNSETTLED 256

struct worker_pool {
	struct daemon *d;
	struct _worker *w;           /* conf->workers slots can change on reload: grow only */
	int nslots;
	int busy;
	/* Requests whose outcome could not be written (database full or failing):
	   still running/verifying in the queue with no worker. Put back to queued
	   as soon as the database takes writes again, so they are redone. */
	int64_t unsettled[MAX_UNSETTLED];
	int nunsettled;
	struct spawner *sp;          /* NULL until the first worker, or while none can be made */
	int sp_said;                 /* its failure was logged */
};

struct worker_pool *worker_pool_create(struct daemon *d)
{
	struct worker_pool *p = calloc(1, sizeof(*p));

	if (p)
		p->d = d;
	return p;
}

int worker_pool_busy(const struct worker_pool *p)
{
	return p->busy;
}

/*
 * Signal a worker child, which runs as the job's owner: the daemon needs
 * CAP_KILL for that (the systemd unit keeps it). A refusal is logged with
 * its errno, since the worker would otherwise go on while the request is
 * taken for stopped.
 */
static void _signal_worker(pid_t pid, int sig)
{
	if (kill(pid, sig) < 0 && errno != ESRCH)
		log_err("cannot stop worker %d with signal %d: kill: %s (stagehandd needs CAP_KILL "
			"to signal workers running as job owners; see the unit's "
			"CapabilityBoundingSet)", (int)pid, sig, strerror(errno));
}

static void _close_fds(struct _worker *w)
{
	for (int i = 0; i < w->nfds; i++)
		close(w->fds[i]);
	w->nfds = 0;
}

/*
 * Wait for w's worker to exit, into w->status: from the spawner for one it
 * made. 0, or -1 when there is no status to be had: a spawner that is gone
 * took its workers with it (their parent-death signal), which is recorded
 * as a SIGKILL.
 */
static int _reap(struct worker_pool *p, struct _worker *w)
{
	if (!w->spawned)
		return waitpid(w->pid, &w->status, 0) == w->pid ? 0 : -1;
	if (spawner_wait(p->sp, w->pid, &w->status) == 0)
		return 0;
	if (!spawner_broken(p->sp))
		return -1;	/* not sent this time: waited for at the next turn */
	if (!p->sp_said++)
		log_err("request %lld: no exit status for worker %d from the worker spawner: %s; "
			"taken as killed", w->req ? (long long)w->req->id : 0LL, (int)w->pid,
			strerror(errno));
	w->status = SIGKILL;	/* as waitpid reports a SIGKILL */
	return 0;
}

void worker_pool_destroy(struct worker_pool *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->nslots; i++) {
		struct _worker *w = &p->w[i];

		if (w->pid > 0) {
			_signal_worker(w->pid, SIGKILL);
			_reap(p, w);
		}
		if (w->chan >= 0)
			close(w->chan);
		_close_fds(w);
		queue_request_free(w->req);
		if (w->yb)
			pace_run_bucket(w->yb, 0);
		xfer_bucket_destroy(w->yb);
	}
	spawner_stop(p->sp);
	free(p->w);
	free(p);
}

/* ---- daemon side ---- */

static void _free_exclude(char **x)
{
	for (char **p = x; p && *p; p++)
		free(*p);
	free(x);
}

/*
 * options.exclude (set by lifecycle.c for exempt= directories inside the
 * source): a NULL-terminated copy in *out (NULL when absent). 0, or -1 with
 * a message in err.
 */
static int _read_exclude(const json_t *v, char ***out, char *err, size_t errlen)
{
	char why[256];
	size_t n, i;
	json_t *e;

	*out = NULL;
	if (!v)
		return 0;
	if (!json_is_array(v)) {
		snprintf(err, errlen, "options.exclude must be an array of relative paths");
		return -1;
	}
	n = json_array_size(v);
	if (n > XFER_EXCLUDE_MAX) {
		snprintf(err, errlen, "options.exclude has %zu entries; the limit is %d", n,
			 XFER_EXCLUDE_MAX);
		return -1;
	}
	*out = calloc(n + 1, sizeof(**out));
	if (!*out) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	json_array_foreach(v, i, e) {
		const char *s = json_string_value(e);

		if (!s) {
			snprintf(err, errlen, "options.exclude[%zu] is not a string", i);
			goto bad;
		}
		if (xfer_exclude_check(s, why, sizeof(why)) < 0) {
			snprintf(err, errlen, "options.exclude[%zu]: %s", i, why);
			goto bad;
		}
		(*out)[i] = strdup(s);
		if (!(*out)[i]) {
			snprintf(err, errlen, "out of memory");
			goto bad;
		}
	}
	return 0;
bad:
	_free_exclude(*out);
	*out = NULL;
	return -1;
}

struct _doneset {
	struct xfer_done_ent *e;
	size_t n, cap;
};

static int _collect_done(const struct queue_item *it, void *arg)
{
	struct _doneset *s = arg;

	if (strcmp(it->type, "file") != 0)
		return 0;
	if (grow_array((void **)&s->e, &s->cap, s->n + 1, sizeof(*s->e), 64) < 0)
		return 1;
	s->e[s->n].relpath = strdup(it->relpath);
	if (!s->e[s->n].relpath)
		return 1;
	s->e[s->n].size = it->size;
	s->e[s->n].mtime_ns = it->mtime_ns;
	s->e[s->n].ranged_cks = NULL;
	s->n++;
	return 0;
}

/* A file whose ranges movers copied: the final pass finishes it (xfer_range.h). */
static int _collect_ranged(const char *relpath, int64_t size, int64_t mtime_ns,
			   const char *cks, void *arg)
{
	struct queue_item it = { .relpath = relpath, .type = "file", .size = size,
				 .mtime_ns = mtime_ns };
	struct _doneset *s = arg;

	if (_collect_done(&it, arg))
		return 1;
	s->e[s->n - 1].ranged_cks = strdup(cks);
	return s->e[s->n - 1].ranged_cks == NULL;
}

/* A purge request's files still to remove (cleanup.h): not removed or left yet. */
static int _collect_purge(const struct queue_item *it, void *arg)
{
	if (it->state == QI_DONE || it->state == QI_SKIPPED)
		return 0;
	return _collect_done(it, arg);
}

static int _by_relpath(const void *a, const void *b)
{
	return strcmp(((const struct xfer_done_ent *)a)->relpath,
		      ((const struct xfer_done_ent *)b)->relpath);
}

static void _free_done(struct _doneset *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->e[i].relpath);
		free(s->e[i].ranged_cks);
	}
	free(s->e);
}

static void _settle(struct worker_pool *p, struct _worker *w);

enum _ym { YM_RUNNING = 0, YM_PAUSED, YM_THROTTLED, YM_TRICKLE, YM_PACED };
static const char *const _mode_names[] = { "running", "paused", "throttled", "trickling",
					   "paced" };

/*
 * YieldMode=adaptive: an after-job transfer (and a stage-in that can wait,
 * below) runs under the pace thread (pace.h) from its first byte to its
 * last, whether jobs run or not; it is held back while the thread holds it.
 */
static int _pace_one(struct _worker *w, const char *why)
{
	if (w->yield_mode != YM_PACED) {
		xfer_bucket_set_flush(w->yb, XFER_FLUSH_PACED);
		pace_run_bucket(w->yb, 1);
		log_info("request %lld: %s paced by the adaptive scavenger%s", (long long)w->req->id,
			 w->req->action, why);
		w->yield_mode = YM_PACED;
	}
	return xfer_bucket_paused(w->yb);
}

/* Back to full speed: a reload changed YieldMode, or a stage-in's job comes near. */
static void _unpace(struct _worker *w)
{
	pace_run_bucket(w->yb, 0);
	xfer_bucket_set_paused(w->yb, 0);
	xfer_bucket_set_flush(w->yb, XFER_FLUSH_OFF);
	w->yield_mode = YM_RUNNING;
}

/*
 * A stage-in that can wait (YieldMode=adaptive, YieldStageInLead): its job
 * is pending and the scheduler expects it to start more than the lead from
 * now. Burst-buffer mode stages a job in as soon as it has such an
 * estimate, which can be hours ahead; until the job comes near, its input
 * is moved in the bandwidth running jobs leave idle, like an archive. A
 * held job (hold mode: it waits for this very input), a running one and a
 * job with no estimate are never paced. From the Slurm watch's last table
 * (no RPC); *start gets the estimate.
 */
static int _stage_in_can_wait(const struct conf *c, const struct queue_request *r,
			      time_t *start)
{
	*start = 0;
	if (c->yield_mode != CONF_YIELD_ADAPTIVE || c->yield_stage_in_lead <= 0 ||
	    strcmp(r->action, "stage_in") != 0 || r->job_id <= 0)
		return 0;
	*start = worker_ops.expected_start(r->job_id);
	return *start > time(NULL) + c->yield_stage_in_lead;
}

/* Stage-in: paced while its job is far from starting, full speed once it is near. */
static int _yield_stage_in(const struct conf *c, struct _worker *w)
{
	char why[128];
	time_t start;

	if (_stage_in_can_wait(c, w->req, &start)) {
		snprintf(why, sizeof(why), ": job %lld is expected to start in %lld s",
			 (long long)w->req->job_id, (long long)(start - time(NULL)));
		return _pace_one(w, why);
	}
	if (w->yield_mode == YM_PACED) {
		_unpace(w);
		log_info("request %lld: job %lld is expected to start within YieldStageInLead "
			 "(%d s) or has no estimate: stage_in at full speed", (long long)w->req->id,
			 (long long)w->req->job_id, c->yield_stage_in_lead);
	}
	return 0;
}

/* Apply the yield decision to one worker; returns 1 if it is held back. */
static int _yield_one(struct worker_pool *p, struct _worker *w, int64_t now_ms)
{
	const struct conf *c = p->d->conf;
	int mode = 0;
	uint64_t rate = 0;

	if (!w->yb || !w->req)
		return 0;
	if (c->yield_to_jobs && !worker_ops.after_job(w->req->action))
		return _yield_stage_in(c, w);
	if (c->yield_to_jobs) {
		if (c->yield_mode == CONF_YIELD_ADAPTIVE)
			return _pace_one(w, "");
		if (w->yield_mode == YM_PACED)	/* YieldMode changed by a reload */
			_unpace(w);
		/* Written back chunk by chunk: a pause leaves no dirty pages behind. */
		xfer_bucket_set_flush(w->yb, XFER_FLUSH_RANGES);
	}
	if (worker_ops.request_affected(p->d, w->req)) {
		if (!w->yield_since_ms)
			w->yield_since_ms = now_ms;
		/*
		 * YieldMaxDelay lifts a held transfer to YieldTrickle only where
		 * that is faster than what it has (0 is unlimited): a pause
		 * (YieldBandwidth=0) trickles, a cap keeps its rate unless the
		 * trickle is the larger.
		 */
		if (c->yield_max_delay && now_ms - w->yield_since_ms >= (int64_t)c->yield_max_delay * 1000 &&
		    (c->yield_trickle == 0 || c->yield_trickle > c->yield_bandwidth)) {
			mode = 3;
			rate = c->yield_trickle;
		} else if (c->yield_bandwidth == 0) {
			mode = 1;
		} else {
			mode = 2;
			rate = c->yield_bandwidth;
		}
	} else {
		w->yield_since_ms = 0;
	}
	if (mode != w->yield_mode) {
		xfer_bucket_set_rate(w->yb, rate);
		xfer_bucket_set_paused(w->yb, mode == 1);
		if (mode == 0)
			log_info("request %lld: running jobs left its file system; %s resumes",
				 (long long)w->req->id, w->req->action);
		else
			log_info("request %lld: %s %s while jobs run on its file system%s",
				 (long long)w->req->id, w->req->action, _mode_names[mode],
				 mode == 3 ? " (YieldMaxDelay reached)" : "");
		w->yield_mode = mode;
	}
	return mode != 0;
}

int worker_pool_yield(struct worker_pool *p, int64_t now_ms)
{
	int held = 0;

	for (int k = 0; k < p->nslots; k++)
		if (p->w[k].pid > 0 && p->w[k].req)
			held += _yield_one(p, &p->w[k], now_ms);
	return held;
}

int worker_pool_paused(const struct worker_pool *p, struct xfer_bucket **out, int max)
{
	int n = 0;

	for (int k = 0; k < p->nslots && n < max; k++)
		if (p->w[k].pid > 0 && p->w[k].req && p->w[k].yb && p->w[k].yield_mode == YM_PAUSED)
			out[n++] = p->w[k].yb;
	return n;
}

int worker_pool_busy_after_job(const struct worker_pool *p)
{
	int n = 0;

	for (int k = 0; k < p->nslots; k++)
		if (p->w[k].pid > 0 && p->w[k].req && worker_ops.after_job(p->w[k].req->action))
			n++;
	return n;
}

/* A new, free slot at the end of p: its index, or -1 out of memory. */
static int _grow_slot(struct worker_pool *p)
{
	struct _worker *nw = realloc(p->w, (size_t)(p->nslots + 1) * sizeof(*nw));
	int slot;

	if (!nw)
		return -1;
	p->w = nw;
	slot = p->nslots++;
	memset(&p->w[slot], 0, sizeof(p->w[slot]));
	p->w[slot].chan = -1;
	return slot;
}

/* A free slot of p (grown by one when none is): its index, or -1 out of memory. */
static int _free_slot(struct worker_pool *p)
{
	int slot = -1;

	for (int i = 0; i < p->nslots; i++)
		if (p->w[i].pid == 0 && p->w[i].chan < 0)
			slot = i;
	return slot >= 0 ? slot : _grow_slot(p);
}

/*
 * The spawner a worker is started through (spawner.h), made when missing:
 * first the slots of Workers= and their buckets, so that it holds them. One
 * left stale by a reload, or broken, is replaced once none of its workers
 * is left to wait for; until then workers fork here. NULL: fork here (why
 * is logged once).
 */
static struct spawner *_spawner(struct worker_pool *p)
{
	struct daemon *d = p->d;
	int want = d->conf->workers > 0 ? d->conf->workers : 1;

	if (p->sp && !spawner_current(p->sp, d->conf_gen)) {
		if (spawner_live(p->sp) > 0)
			return NULL;
		spawner_stop(p->sp);
		p->sp = NULL;
	}
	if (p->sp)
		return p->sp;
	while (p->nslots < want)
		if (_grow_slot(p) < 0)
			return NULL;
	for (int i = 0; i < p->nslots; i++)
		if (!p->w[i].yb && !(p->w[i].yb = xfer_bucket_create(0)))
			return NULL;
	p->sp = spawner_start(d, p->nslots);
	if (!p->sp) {
		if (!p->sp_said++)
			log_err("cannot start the worker spawner: %s; workers are forked by the "
				"daemon itself", strerror(errno));
		return NULL;
	}
	p->sp_said = 0;
	log_info("worker spawner started (pid %d, %d slots)", (int)spawner_pid(p->sp), p->nslots);
	return p->sp;
}

/*
 * A worker for a->r in slot through the spawner; -1 when it is to be forked
 * here instead (no spawner for it, a resume's state to hand over, or the
 * spawner failed: that is logged once).
 */
static pid_t _spawn(struct worker_pool *p, int slot, const struct worker_order *a, int chan,
		    int resume_state)
{
	struct spawner *sp;
	pid_t pid;

	if (resume_state || !(sp = _spawner(p)) || !spawner_fits(sp, p->d->conf_gen, slot))
		return -1;
	pid = spawner_spawn(sp, a, chan);
	if (pid < 0 && spawner_broken(sp) && !p->sp_said++)
		log_err("request %lld: the worker spawner (pid %d) failed: %s; workers are forked "
			"by the daemon until it is made again", (long long)a->r->id,
			(int)spawner_pid(sp), strerror(errno));
	return pid;
}

/*
 * r's options: backend= copied into name (namelen) and pointed to by *bname,
 * keep=false into *keep, exclude= into *exclude (the caller frees it with
 * _free_exclude). Returns -1 with err filled when exclude= is wrong.
 */
static int _start_options(const struct queue_request *r, char *name, size_t namelen,
			  const char **bname, int *keep, char ***exclude, char *err, size_t errlen)
{
	json_t *opts = json_loads(r->options, 0, NULL);

	if (opts) {
		json_t *b = json_object_get(opts, "backend"), *k = json_object_get(opts, "keep");

		if (json_is_string(b) && snprintf(name, namelen, "%s", json_string_value(b)) <
		    (int)namelen)
			*bname = name;
		if (json_is_false(k))
			*keep = 0;
		if (_read_exclude(json_object_get(opts, "exclude"), exclude, err, errlen) < 0) {
			json_decref(opts);
			return -1;
		}
		json_decref(opts);
	}
	return 0;
}

/*
 * What r has done already, sorted by relpath, into ds: a purge's items, or
 * the files done and those assembled from ranges. Unreadable, it is logged
 * and ds is left empty (the request starts over).
 */
static void _resume_set(struct daemon *d, const struct queue_request *r, enum cksum_algo algo,
			struct _doneset *ds)
{
	char err[512];

	if (!strcmp(r->action, "purge") ?
	    queue_item_list(d->q, r->id, -1, 0, _collect_purge, ds, err, sizeof(err)) < 0 :
	    (queue_item_list(d->q, r->id, QI_DONE, 0, _collect_done, ds, err, sizeof(err)) < 0 ||
	     queue_ranges_assembled(d->q, r->id, algo, _collect_ranged, ds, err,
				    sizeof(err)) < 0)) {
		log_err("request %lld: cannot read resume state: %s", (long long)r->id, err);
		_free_done(ds);
		*ds = (struct _doneset){ 0 };
	}
	if (ds->n > 1)
		qsort(ds->e, ds->n, sizeof(*ds->e), _by_relpath);	/* assembled files joined it */
}

/*
 * The slot's own bucket in front of the global one, made when missing, reset
 * for a new request: the yield module pauses or throttles this worker alone.
 * Made before fork so both see one page. -1: out of memory.
 */
static int _slot_bucket(struct worker_pool *p, int slot)
{
	if (!p->w[slot].yb) {
		p->w[slot].yb = xfer_bucket_create(0);
		if (!p->w[slot].yb)
			return -1;
	}
	xfer_bucket_set_parent(p->w[slot].yb, p->d->bucket);
	xfer_bucket_reset_io(p->w[slot].yb);
	xfer_bucket_set_rate(p->w[slot].yb, 0);
	xfer_bucket_set_paused(p->w[slot].yb, 0);
	xfer_bucket_set_flush(p->w[slot].yb, XFER_FLUSH_OFF);	/* the slot's last request's */
	return 0;
}

/* The slot now runs r in worker pid, read through chan; it keeps its bucket. */
static void _slot_started(struct worker_pool *p, int slot, pid_t pid, int spawned, int chan,
			  struct queue_request *r)
{
	struct _worker *w = &p->w[slot];
	struct xfer_bucket *yb = w->yb;

	memset(w, 0, sizeof(*w));
	w->pid = pid;
	w->spawned = spawned;
	w->chan = chan;
	w->req = r;
	w->result = -1;
	w->yb = yb;
	/* Yield from the first byte if its file system is busy already. */
	_yield_one(p, w, mono_ms());
}

/*
 * Long on purpose: the claim of one request, straight down (the slot,
 * options, backend, groups, the user's directory, the resume set, the
 * bucket, the socket pair, the fork); each step fails the request in its own
 * words and frees what the steps above it made.
 */
int worker_pool_start(struct worker_pool *p, struct queue_request *r)
{
	struct daemon *d = p->d;
	struct _doneset ds = { 0 };
	struct xfer_archive arch = { 0 };
	struct xfer_mpu_ent *mpu = NULL;
	size_t nmpu = 0;
	const struct xfer_endpoint *be;
	enum cksum_algo algo = CKSUM_XXH128;
	gid_t groups[256];
	int ngroups = 256, sv[2], keep = 1, slot = -1, final, spawned = 0;
	char err[512], name[64];
	const char *bname = NULL;
	char **exclude = NULL;
	char user[256];              /* LOGIN_NAME_MAX */
	int known;
	int64_t budget;
	pid_t pid, self = getpid();	/* the child checks its parent against it */
	struct worker_order order;

	slot = _free_slot(p);
	if (slot < 0)
		goto fail_mem;
	if (_start_options(r, name, sizeof(name), &bname, &keep, &exclude, err, sizeof(err)) < 0) {
		log_err("request %lld: refused: %s", (long long)r->id, err);
		queue_request_fail(d->q, r->id, &(struct queue_failure){ err, 0, 0, time(NULL) },
				   &final, NULL, 0);
		queue_request_free(r);
		return 0;
	}
	be = xfer_endpoint_named(&(struct xfer_ctx){ .source = r->source, .dest = r->dest,
						   .backend = bname }, err, sizeof(err));
	if (!be) {
		_free_exclude(exclude);
		queue_request_fail(d->q, r->id, &(struct queue_failure){ err, 0, 0, time(NULL) },
				   &final, NULL, 0);
		queue_request_free(r);
		return 0;
	}
	cksum_algo_from_name(d->conf->checksum, &algo);
	/* Groups are looked up here, before fork: the worker only makes syscalls. */
	known = usercache_groups(r->uid, r->gid, user, sizeof(user), groups, &ngroups) == 0;
	/* ArchiveRoot/USER or ScratchRoots/USER, made by root when missing (the
	   worker, as the user, cannot create it below a root-owned 0755 root). */
	if (known && userdir_for_dest(d->conf, r->dest, user, r->uid, r->gid, err,
				      sizeof(err)) < 0) {
		log_err("request %lld: %s", (long long)r->id, err);
		_free_exclude(exclude);
		queue_request_fail(d->q, r->id, &(struct queue_failure){ err, 0, 0, time(NULL) },
				   &final, NULL, 0);
		queue_request_free(r);
		return 0;
	}
	_resume_set(d, r, algo, &ds);
	if (_slot_bucket(p, slot) < 0) {
		_free_done(&ds);
		_free_exclude(exclude);
		goto fail_mem;
	}
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
		log_err("request %lld: socketpair: %s", (long long)r->id, strerror(errno));
		_free_done(&ds);
		_free_exclude(exclude);
		goto fail_retry;
	}
	budget = pool_stage_in_budget(d, r);
	worker__archive_load(d, r, &arch);
	if (queue_mpu_load(d->q, r->id, &mpu, &nmpu, err, sizeof(err)) < 0)
		log_err("request %lld: cannot read its S3 multipart uploads: %s",
			(long long)r->id, err);	/* they start over */
	order = (struct worker_order){
		.r = r, .groups = groups, .ngroups = ngroups, .be = be, .algo = algo,
		.keep = keep, .idle = d->conf->io_class == CONF_IO_IDLE, .yb = p->w[slot].yb,
		.exclude = exclude, .budget = budget, .done = ds.e, .ndone = ds.n, .mpu = mpu,
		.nmpu = nmpu, .arch = arch.root ? &arch : NULL,
	};
	/* A resume's state (files done, uploads, an archive's checksums) is in
	   this process only: that worker is forked here. */
	pid = _spawn(p, slot, &order, sv[1], ds.n > 0 || nmpu > 0 || arch.root != NULL);
	spawned = pid > 0;
	if (pid < 0) {
		sigset_t all, old;

		/* Signals stay blocked until the worker has its handlers: a cancel
		   (SIGUSR1) or stop (SIGTERM) sent meanwhile waits for them, rather
		   than running the daemon's handler in the child. */
		sigfillset(&all);
		pthread_sigmask(SIG_BLOCK, &all, &old);
		pid = fork();
		if (pid != 0)
			pthread_sigmask(SIG_SETMASK, &old, NULL);
	}
	if (pid < 0) {
		log_err("request %lld: fork: %s", (long long)r->id, strerror(errno));
		worker__archive_free(&arch);
		close(sv[0]);
		close(sv[1]);
		_free_done(&ds);
		queue_mpu_free(mpu, nmpu);
		_free_exclude(exclude);
		goto fail_retry;
	}
	if (pid == 0) {
		close(sv[0]);
		worker__child(d, &order, sv[1], self);
	}
	close(sv[1]);
	worker__archive_free(&arch);
	_free_done(&ds);
	queue_mpu_free(mpu, nmpu);
	_free_exclude(exclude);
	fcntl(sv[0], F_SETFL, fcntl(sv[0], F_GETFL) | O_NONBLOCK);
	_slot_started(p, slot, pid, spawned, sv[0], r);
	p->busy++;
	atomic_store(&d->metrics->workers_busy, p->busy);
	log_info("request %lld: worker %d started as uid %u (%s %s -> %s, attempt %d, %s backend)",
		 (long long)r->id, (int)pid, (unsigned)r->uid, r->action, r->source,
		 r->dest ? r->dest : "-", r->attempts, be->name);
	return 0;
fail_mem:
	log_err("request %lld: out of memory starting a worker", (long long)r->id);
fail_retry:
	queue_request_fail(d->q, r->id, &(struct queue_failure){
				   "could not start a worker process; see the daemon log", 1,
				   d->conf->retry_backoff, time(NULL) }, &final, NULL, 0);
	queue_request_free(r);
	return -1;
}

int worker_pool_pollfds(const struct worker_pool *p, struct pollfd *fds, int max)
{
	int n = 0;

	for (int i = 0; i < p->nslots && n < max; i++)
		if (p->w[i].chan >= 0) {
			fds[n].fd = p->w[i].chan;
			fds[n].events = POLLIN;
			fds[n].revents = 0;
			n++;
		}
	return n;
}

static void _label_fd(struct daemon *d, struct _worker *w, const char *name, const char *value)
{
	static const char *const ok[] = { XATTR_POLICY, XATTR_LOCATION, XATTR_JOB, XATTR_OWNER, NULL };
	char err[256];
	int fd, allowed = 0;

	if (w->nfds == 0) {
		log_warn("request %lld: label record without a file descriptor", (long long)w->req->id);
		return;
	}
	fd = w->fds[0];
	memmove(w->fds, w->fds + 1, (size_t)(--w->nfds) * sizeof(int));
	for (int i = 0; ok[i]; i++)
		allowed |= strcmp(ok[i], name) == 0;
	/* The fd was opened by the worker as the owner: no path is resolved here.
	 * Root writes the label, so it goes only on what the owner owns: the
	 * request's source may be a link the owner pointed elsewhere. */
	struct stat st;
	int owned = fstat(fd, &st) == 0 && st.st_uid == w->req->uid;
	if (!allowed)
		log_warn("request %lld: worker asked for unknown label '%s'", (long long)w->req->id, name);
	else if (!owned)
		log_warn("request %lld: %s not labelled %s: it is not owned by the request's "
			 "owner (uid %lu)", (long long)w->req->id, w->req->source, name,
			 (unsigned long)w->req->uid);
	else if (xattr_set_label(fd, conf_xattr_prefix(d->conf), name, value, err, sizeof(err)) < 0)
		log_warn("request %lld: %s on %s", (long long)w->req->id, err, w->req->source);
	close(fd);
}

/*
 * Where the audit row of path in r says it was read from and written to
 * (src, dst); one cut short by its buffer is logged and recorded as it is.
 */
static void _audit_paths(const struct queue_request *r, const char *path, char *src,
			 size_t srclen, char *dst, size_t dstlen)
{
	if (snprintf(src, srclen, "%s/%s", r->source, path) >= (int)srclen ||
	    snprintf(dst, dstlen, "%s/%s", r->dest ? r->dest : "-", path) >= (int)dstlen)
		log_warn("request %lld: audit path truncated", (long long)r->id);
}

/* One record a worker sent, applied to the queue (and the metrics). */
static void _apply(struct worker_pool *p, struct _worker *w, const struct xfer_rec *rec,
		   const char *path, const char *text)
{
	struct daemon *d = p->d;
	struct queue_request *r = w->req;
	char err[512];
	int rc = 0;

	switch (rec->type) {
	case XR_TOTALS:
		rc = queue_request_totals(d->q, r->id, rec->a, rec->b, rec->c, err, sizeof(err));
		/* The walk has counted the source before copying: stop a stage-in that
		   would outgrow the size Slurm reserved for its job (pool.c). */
		if (rc == 0 && !w->over_capacity &&
		    pool_over_capacity(d, r, w->msg, sizeof(w->msg))) {
			w->over_capacity = 1;
			w->result = XFER_FINAL;
			_signal_worker(w->pid, SIGKILL);
			log_warn("request %lld: %s", (long long)r->id, w->msg);
		}
		break;
	case XR_ITEM_START: {
		struct queue_item_meta m = { path, text, rec->a, rec->b, (int)rec->c };

		rc = queue_item_start(d->q, r->id, &m, err, sizeof(err));
		break;
	}
	case XR_ITEM_COPIED:
		rc = queue_item_copied(d->q, r->id, path, rec->cks, err, sizeof(err));
		break;
	case XR_ITEM_DONE: {
		char src[XFER_PATH_MAX * 2 + 2], dst[XFER_PATH_MAX * 2 + 2];
		int is_file = strcmp(text, "file") == 0;

		if (!strcmp(r->action, "purge")) {
			/* A staged input removed (cleanup_run): no copy, no audit row. */
			rc = queue_item_finish(d->q, r->id, path, "file", QI_DONE, NULL, err,
					       sizeof(err));
			break;
		}
		struct queue_audit a = { r->job_id, r->uid, src, dst, rec->cks, rec->a, rec->b, rec->c };

		/* A single-file request's relpath is the destination's own name. */
		_audit_paths(r, path, src, sizeof(src), dst, sizeof(dst));
		rc = queue_item_done(d->q, r->id, path, is_file ? rec->cks : NULL,
				     is_file ? &a : NULL, err, sizeof(err));
		if (rc == 0 && is_file) {
			atomic_fetch_add(&d->metrics->bytes_moved, (uint64_t)rec->a);
			atomic_fetch_add(&d->metrics->files_moved, 1);
		}
		break;
	}
	case XR_ITEM_FILE: {
		char src[XFER_PATH_MAX * 2 + 2], dst[XFER_PATH_MAX * 2 + 2];
		struct queue_file_done f = {
			.relpath = path, .cks_src = rec->cks, .cks_dst = rec->cks2, .size = rec->a,
			.mtime_ns = rec->b, .mode = (int)rec->c,
			.audit = { r->job_id, r->uid, src, dst, rec->cks2, rec->a, rec->d, rec->e },
		};

		_audit_paths(r, path, src, sizeof(src), dst, sizeof(dst));
		rc = queue_item_file_done(d->q, r->id, &f, err, sizeof(err));
		if (rc == 0) {
			atomic_fetch_add(&d->metrics->bytes_moved, (uint64_t)rec->a);
			atomic_fetch_add(&d->metrics->files_moved, 1);
		}
		break;
	}
	case XR_ITEM_SKIPPED:
		rc = queue_item_finish(d->q, r->id, path, "special", QI_SKIPPED, text, err, sizeof(err));
		log_warn("request %lld: %s: %s", (long long)r->id, path, text);
		break;
	case XR_ITEM_FAILED:
		rc = queue_item_finish(d->q, r->id, path, NULL, QI_FAILED, text, err, sizeof(err));
		log_warn("request %lld: %s", (long long)r->id, text);
		break;
	case XR_PHASE:
		if (rec->code == XFER_PHASE_VERIFYING)
			queue_request_set_state(d->q, r->id, QS_RUNNING, QS_VERIFYING, NULL, NULL, 0);
		break;
	case XR_LABEL:
		_label_fd(d, w, path, text);
		break;
	case XR_MPU:
		rc = queue_mpu_apply(d->q, r->id, rec, path, text, err, sizeof(err));
		break;
	case XR_LOG:
		log_msg(rec->code >= LOG_LVL_ERROR && rec->code <= LOG_LVL_DEBUG ?
			(enum log_level)rec->code : LOG_LVL_INFO, "%s", text);
		break;
	case XR_RESULT:
		if (w->over_capacity)
			break;
		w->result = rec->code;
		snprintf(w->msg, sizeof(w->msg), "%s", text);
		break;
	default:
		break;
	}
	if (rc < 0)
		log_err("request %lld: recording progress failed: %s", (long long)r->id, err);
}

/* Reads and applies records until the socket is empty or budget records were applied. */
/* w's worker killed and its channel closed: the reap settles it as killed. */
static void _kill_unread(struct _worker *w)
{
	_signal_worker(w->pid, SIGKILL);
	close(w->chan);
	w->chan = -1;
}

static void _read(struct worker_pool *p, struct _worker *w, int *budget)
{
	while (*budget > 0) {
		char cbuf[CMSG_SPACE(sizeof(int) * 4)];
		struct iovec iov = { w->buf + w->len, sizeof(w->buf) - w->len };
		struct msghdr mh = { 0 };
		struct cmsghdr *cm;
		ssize_t n;
		size_t off = 0;
		int lost = 0;

		mh.msg_iov = &iov;
		mh.msg_iovlen = 1;
		mh.msg_control = cbuf;
		mh.msg_controllen = sizeof(cbuf);
		n = recvmsg(w->chan, &mh, MSG_CMSG_CLOEXEC);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return;
		for (cm = CMSG_FIRSTHDR(&mh); n > 0 && cm; cm = CMSG_NXTHDR(&mh, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
				size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);

				for (size_t i = 0; i < k; i++) {
					int fd;

					memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
					if (w->nfds < MAX_FDS)
						w->fds[w->nfds++] = fd;
					else {
						close(fd);
						lost = 1;
					}
				}
			}
		if (n > 0 && (lost || (mh.msg_flags & MSG_CTRUNC))) {
			/* A label's descriptor dropped: the next ones would go on the
			   wrong files (they are paired in order). Stopped, and retried. */
			log_err("request %lld: a label descriptor from worker %d was lost (%s); "
				"stopping it, the request will be retried",
				(long long)w->req->id, (int)w->pid,
				lost ? "more than 16 waiting" :
				"MSG_CTRUNC: the daemon is out of descriptors? see its LimitNOFILE");
			_kill_unread(w);
			return;
		}
		if (n <= 0) {
			close(w->chan);
			w->chan = -1;
			return;
		}
		w->len += (size_t)n;
		for (;;) {
			struct xfer_rec rec;
			char path[XFER_PATH_MAX + 1], text[XFER_TEXT_MAX + 1];
			ssize_t used = xfer_parse(w->buf + off, w->len - off, &rec, path, text);

			if (used == 0)
				break;
			if (used < 0) {
				log_err("request %lld: worker %d sent a corrupt record; stopping it",
					(long long)w->req->id, (int)w->pid);
				_kill_unread(w);
				return;
			}
			_apply(p, w, &rec, path, text);
			off += (size_t)used;
			--*budget;
		}
		memmove(w->buf, w->buf + off, w->len - off);
		w->len -= off;
	}
}

static void _unsettled_add(struct worker_pool *p, int64_t id)
{
	if (p->nunsettled < MAX_UNSETTLED)
		p->unsettled[p->nunsettled++] = id;
	else
		log_err("request %lld: left running until the daemon restarts (too many "
			"unrecorded outcomes)", (long long)id);
}

/* Retry putting unsettled requests back to queued; keep those that still fail. */
static void _unsettled_retry(struct worker_pool *p)
{
	char err[512];
	int k = 0;

	for (int i = 0; i < p->nunsettled; i++) {
		if (queue_request_checkpoint(p->d->q, p->unsettled[i], err, sizeof(err)) == 0)
			log_info("request %lld: outcome could not be recorded earlier; queued again",
				 (long long)p->unsettled[i]);
		else
			p->unsettled[k++] = p->unsettled[i];
	}
	p->nunsettled = k;
}

static void _settle(struct worker_pool *p, struct _worker *w)
{
	struct daemon *d = p->d;
	struct queue_request *r = w->req;
	char err[512], why[XFER_TEXT_MAX + 64];
	int final = 0;

	if (w->cancelled) {
		log_info("request %lld: cancelled; worker stopped", (long long)r->id);
	} else if (w->result == XFER_OK) {
		queue_request_set_state(d->q, r->id, QS_RUNNING, QS_VERIFYING, NULL, NULL, 0);
		if (queue_request_set_state(d->q, r->id, QS_VERIFYING, QS_DONE, NULL, err,
					    sizeof(err)) == 0) {
			log_info("request %lld: done and verified", (long long)r->id);
		} else {
			log_err("request %lld: cannot mark done: %s; it will be redone",
				(long long)r->id, err);
			_unsettled_add(p, r->id);
		}
	} else if (w->stopped || w->result == XFER_INTERRUPTED) {
		if (queue_request_checkpoint(d->q, r->id, err, sizeof(err)) == 0)
			log_info("request %lld: stopped; checkpointed as queued", (long long)r->id);
		else
			_unsettled_add(p, r->id);
	} else {
		struct queue_failure f = { why, w->result != XFER_FINAL, d->conf->retry_backoff,
					   time(NULL) };

		if (w->result == XFER_RETRYABLE || w->result == XFER_FINAL)
			snprintf(why, sizeof(why), "%s", w->msg);
		else if (WIFSIGNALED(w->status))
			snprintf(why, sizeof(why), "worker killed by signal %d", WTERMSIG(w->status));
		else
			snprintf(why, sizeof(why), "worker exited (status %d) without a result",
				 WEXITSTATUS(w->status));
		atomic_fetch_add(&d->metrics->failures, 1);
		if (queue_request_fail(d->q, r->id, &f, &final, err, sizeof(err)) < 0) {
			log_err("request %lld: cannot record failure: %s", (long long)r->id, err);
			_unsettled_add(p, r->id);
		} else if (!final)
			atomic_fetch_add(&d->metrics->retries, 1);
		log_warn("request %lld: attempt %d failed%s: %s", (long long)r->id, r->attempts,
			 final ? " (final)" : ", will retry", why);
	}
	_close_fds(w);
	queue_request_free(w->req);
	w->req = NULL;
	w->pid = 0;
	if (w->yb && w->yield_mode == YM_PACED)
		pace_run_bucket(w->yb, 0);
	w->yield_since_ms = 0;
	w->yield_mode = 0;
	p->busy--;
	atomic_store(&d->metrics->workers_busy, p->busy);
}

void worker_pool_service(struct worker_pool *p, const struct pollfd *fds, int n)
{
	/*
	 * Everything the workers sent since the last turn is applied in one
	 * transaction: the more records wait, the larger the batch, so the
	 * database keeps up with any number of small files without adding
	 * latency when records are few. The budget bounds how long the API
	 * thread may wait for the queue lock.
	 */
	int budget = 4096, batched = 0;
	char err[512];

	for (int i = 0; i < n && !batched; i++)
		if (fds[i].revents)
			batched = queue_batch_begin(p->d->q) == 0;
	for (int i = 0; i < n; i++) {
		if (!fds[i].revents)
			continue;
		for (int k = 0; k < p->nslots; k++)
			if (p->w[k].chan == fds[i].fd) {
				_read(p, &p->w[k], &budget);
				break;
			}
	}
	if (batched && queue_batch_end(p->d->q, err, sizeof(err)) < 0)
		log_err("recording progress failed: %s", err);
	/* Reap: a worker is finished when its channel hit EOF and it has exited. */
	for (int k = 0; k < p->nslots; k++) {
		struct _worker *w = &p->w[k];

		if (w->pid <= 0 || w->chan >= 0)
			continue;
		if (_reap(p, w) == 0)
			_settle(p, w);
	}
	if (p->nunsettled)
		_unsettled_retry(p);
}

int worker_pool_cancel(struct worker_pool *p, int64_t id)
{
	for (int k = 0; k < p->nslots; k++)
		if (p->w[k].pid > 0 && p->w[k].req && p->w[k].req->id == id) {
			p->w[k].cancelled = 1;
			_signal_worker(p->w[k].pid, SIGUSR1);	/* a cancel: XFER_STOP_CANCEL */
			return 1;
		}
	return 0;
}

void worker_pool_stop_all(struct worker_pool *p)
{
	for (int k = 0; k < p->nslots; k++)
		if (p->w[k].pid > 0) {
			p->w[k].stopped = 1;
			_signal_worker(p->w[k].pid, SIGTERM);
		}
}

void worker_pool_check_cancelled(struct worker_pool *p)
{
	for (int k = 0; k < p->nslots; k++) {
		struct _worker *w = &p->w[k];
		struct queue_request *r = NULL;

		if (w->pid <= 0 || !w->req || w->cancelled)
			continue;
		if (queue_request_get(p->d->q, w->req->id, &r, NULL, 0) == 0 &&
		    r->state == QS_CANCELLED) {
			w->cancelled = 1;
			_signal_worker(w->pid, SIGUSR1);	/* a cancel: XFER_STOP_CANCEL */
		}
		queue_request_free(r);
	}
}
