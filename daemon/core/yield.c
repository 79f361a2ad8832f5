/* yield.c - see yield.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "grow.h"
#include "log.h"
#include "metrics.h"
#include "monoclock.h"
#include "pace.h"
#include "queue.h"
#include "queue_shards.h"
#include "slurm_jobs.h"
#include "xfer.h"
#include "yield.h"

#define MAX_ROOTS 64
#define MAX_BUSY 64
#define PROBE_MAX (64 * 1024)

static char **_slurm_paths;          /* from slurm_watch, owned */
static char *_roots[MAX_ROOTS];      /* copies of the configured roots */
static dev_t _devs[MAX_ROOTS];
static size_t _nroots;
static dev_t _busy[MAX_BUSY];
static size_t _nbusy;
static int _unknown_busy;
static int64_t _last_ms;
static int64_t _last_full_ms;
static int _probe_warned;

/* Job-start events: written by the API thread, read by the main loop. */
static pthread_mutex_t _starts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct yield_starts _starts;
static atomic_int _kick;	/* 1: apply the busy set at the next loop turn */
static atomic_uint _kick_seq;	/* job-start events so far */
static atomic_uint _applied_seq;	/* the last of them the main loop has applied */
static struct xfer_bucket *_paused[64];	/* paused workers' buckets (under _starts_lock) */
static int _npaused;
static atomic_int _nstarted;

static void _start_clear(struct yield_start *e)
{
	for (size_t i = 0; i < e->npaths; i++)
		free(e->paths[i]);
	e->npaths = 0;
}

int yield_starts_add(struct yield_starts *t, int64_t job, const char *const *paths,
		     size_t npaths, int64_t expire_ms)
{
	struct yield_start *e = NULL, fresh = { .job = job, .expire_ms = expire_ms, .mover = -1,
						.recheck_ms = mono_ms() + YIELD_MOVER_RECHECK_MS,
						.event_time = time(NULL) };

	for (size_t i = 0; i < npaths && fresh.npaths < YIELD_START_PATHS_MAX; i++) {
		if (!paths[i] || paths[i][0] != '/')
			continue;
		if (!(fresh.paths[fresh.npaths] = strdup(paths[i]))) {
			_start_clear(&fresh);
			return -1;
		}
		fresh.npaths++;
	}
	for (size_t i = 0; i < t->n; i++)
		if (t->v[i].job == job)
			e = &t->v[i];
	if (e) {
		fresh.seen = e->seen && fresh.npaths && e->npaths &&
			     strcmp(fresh.paths[0], e->paths[0]) == 0;
		fresh.mover = e->mover;	/* the same job id: the same answer */
		fresh.recheck_ms = e->recheck_ms;
		_start_clear(e);
		*e = fresh;
		return 0;
	}
	if (t->n >= YIELD_STARTS_MAX) {
		_start_clear(&fresh);
		return -1;
	}
	if (grow_array((void **)&t->v, &t->cap, t->n + 1, sizeof(*t->v), 16) < 0) {
		_start_clear(&fresh);
		return -1;
	}
	t->v[t->n++] = fresh;
	return 0;
}

size_t yield_starts_users(const struct yield_starts *t)
{
	size_t n = 0;

	for (size_t i = 0; i < t->n; i++)
		n += t->v[i].mover != 1;
	return n;
}

static void _starts_drop(struct yield_starts *t, size_t i)
{
	_start_clear(&t->v[i]);
	t->v[i] = t->v[--t->n];
}

int yield_starts_remove(struct yield_starts *t, int64_t job)
{
	for (size_t i = 0; i < t->n; i++)
		if (t->v[i].job == job) {
			_starts_drop(t, i);
			return 1;
		}
	return 0;
}

size_t yield_starts_expire(struct yield_starts *t, int64_t now_ms)
{
	size_t dropped = 0;

	for (size_t i = 0; i < t->n;)
		if (t->v[i].expire_ms <= now_ms) {
			_starts_drop(t, i);
			dropped++;
		} else {
			i++;
		}
	return dropped;
}

static int _listed(char *const *running, const char *p)
{
	for (char *const *r = running; r && *r; r++)
		if (strcmp(*r, p) == 0)
			return 1;
	return 0;
}

/* Does a table from table_time say the entry's job no longer runs? */
static int _ended_unseen(const struct yield_start *e, const uint32_t *ids, size_t nids,
			 time_t table_time)
{
	uint32_t id = (uint32_t)e->job;

	if (!ids || e->seen || table_time <= e->event_time || e->job <= 0 || e->job > UINT32_MAX)
		return 0;
	return !bsearch(&id, ids, nids, sizeof(*ids), sjob_id_cmp);
}

size_t yield_starts_watch(struct yield_starts *t, char *const *running, const uint32_t *ids,
			  size_t nids, time_t table_time)
{
	size_t dropped = 0;

	for (size_t i = 0; i < t->n;) {
		struct yield_start *e = &t->v[i];
		int listed = e->npaths && _listed(running, e->paths[0]);

		if ((e->seen && !listed) || (!listed && _ended_unseen(e, ids, nids, table_time))) {
			_starts_drop(t, i);
			dropped++;
			continue;
		}
		e->seen |= listed;
		i++;
	}
	return dropped;
}

void yield_starts_free(struct yield_starts *t)
{
	while (t->n)
		_starts_drop(t, t->n - 1);
	free(t->v);
	t->v = NULL;
	t->cap = 0;
}

/*
 * The job's tasks start when the start event is answered: first let the main
 * loop pause the transfers on its file systems, and let the I/O they had in
 * flight finish (no take or write reported for YIELD_QUIET_MS), so none of it
 * lands in the job's first burst. Bounded by YIELD_SETTLE_MS.
 */
static int _settle(unsigned seq)
{
	int64_t t0 = mono_ms(), now = t0;
	struct timespec ts = { 0, 2 * 1000000L };

	while ((int)(atomic_load(&_applied_seq) - seq) < 0 && now - t0 < YIELD_SETTLE_MS) {
		nanosleep(&ts, NULL);
		now = mono_ms();
	}
	if ((int)(atomic_load(&_applied_seq) - seq) < 0)
		return 0;
	for (;;) {
		int busy = 0;

		pthread_mutex_lock(&_starts_lock);
		for (int i = 0; i < _npaused; i++)
			busy |= xfer_bucket_idle_s(_paused[i]) * 1000 < YIELD_QUIET_MS;
		pthread_mutex_unlock(&_starts_lock);
		if (!busy)
			return 1;
		if (now - t0 >= YIELD_SETTLE_MS)
			return 0;
		nanosleep(&ts, NULL);
		now = mono_ms();
	}
}

int yield_job_start_mark(struct daemon *d, int64_t job, const char *const *paths, size_t npaths,
			 unsigned *seq, char *err, size_t errlen)
{
	int rc;

	pthread_mutex_lock(&_starts_lock);
	rc = yield_starts_add(&_starts, job, paths, npaths,
			      mono_ms() + (int64_t)YIELD_START_EXPIRY_S * 1000);
	atomic_store(&_nstarted, (int)yield_starts_users(&_starts));
	pthread_mutex_unlock(&_starts_lock);
	if (rc < 0) {
		snprintf(err, errlen, "cannot record job %lld's start: %s", (long long)job,
			 _starts.n >= YIELD_STARTS_MAX ? "too many running jobs marked "
			 "(end events missing?)" : "out of memory");
		return -1;
	}
	*seq = atomic_fetch_add(&_kick_seq, 1) + 1;
	atomic_store(&_kick, 1);
	daemon_wake(d);
	return 0;
}

int yield_job_start_settle(int64_t job, unsigned seq, int *settled)
{
	int rc = 0;

	*settled = _settle(seq);
	pthread_mutex_lock(&_starts_lock);
	for (size_t i = 0; i < _starts.n; i++)
		if (_starts.v[i].job == job)
			rc = _starts.v[i].mover == 1;
	pthread_mutex_unlock(&_starts_lock);
	return rc;
}

int yield_job_start(struct daemon *d, int64_t job, const char *const *paths, size_t npaths,
		    int *settled, char *err, size_t errlen)
{
	unsigned seq;

	if (yield_job_start_mark(d, job, paths, npaths, &seq, err, errlen) < 0)
		return -1;
	return yield_job_start_settle(job, seq, settled);
}

int yield_job_end(struct daemon *d, int64_t job)
{
	int was;

	pthread_mutex_lock(&_starts_lock);
	was = yield_starts_remove(&_starts, job);
	atomic_store(&_nstarted, (int)yield_starts_users(&_starts));
	pthread_mutex_unlock(&_starts_lock);
	if (was) {
		atomic_store(&_kick, 1);
		daemon_wake(d);
	}
	return was;
}

int yield_jobs_started(void)
{
	return atomic_load(&_nstarted);
}

int yield_after_job(const char *action)
{
	return action && (strcmp(action, "archive") == 0 || strcmp(action, "stage_out") == 0);
}

int yield_root_index(const char *path, char *const *roots, size_t nroots)
{
	size_t best_len = 0;
	int best = -1;

	if (!path || path[0] != '/')
		return -1;
	for (size_t i = 0; i < nroots; i++) {
		size_t n = strlen(roots[i]);

		if (strcmp(roots[i], "/") == 0)
			n = 0;	/* "/" holds everything: match any absolute path */
		else if (strncmp(path, roots[i], n) != 0 || (path[n] != '/' && path[n] != '\0'))
			continue;
		if (best < 0 || n > best_len) {
			best = (int)i;
			best_len = n;
		}
	}
	return best;
}

static int _dev_busy(const struct yield_view *v, dev_t dev)
{
	for (size_t i = 0; i < v->nbusy; i++)
		if (v->busy[i] == dev)
			return 1;
	return 0;
}

static int _path_affected(const struct yield_view *v, const char *p)
{
	int i;

	if (!p || p[0] != '/')
		return 0;	/* a URL (remote) or nothing: not a local file system */
	i = yield_root_index(p, v->roots, v->nroots);
	if (i < 0 || v->devs[i] == 0)
		return v->nbusy > 0 || v->unknown_busy;
	return _dev_busy(v, v->devs[i]);
}

int yield_paths_affected(const struct yield_view *v, const char *source, const char *dest)
{
	return _path_affected(v, source) || _path_affected(v, dest);
}

void yield_set_running(struct daemon *d, char **paths, const uint32_t *ids, size_t nids,
		       time_t table_time)
{
	size_t gone;

	(void)d;
	/* After the watch has seen a started job, its view wins. */
	pthread_mutex_lock(&_starts_lock);
	gone = yield_starts_watch(&_starts, paths, ids, nids, table_time);
	atomic_store(&_nstarted, (int)yield_starts_users(&_starts));
	pthread_mutex_unlock(&_starts_lock);
	if (gone)
		log_debug("yield: %zu started job(s) no longer run (slurmctld)", gone);
	for (char **p = _slurm_paths; p && *p; p++)
		free(*p);
	free(_slurm_paths);
	_slurm_paths = paths;
}

static void _view(struct yield_view *v)
{
	v->roots = _roots;
	v->devs = _devs;
	v->nroots = _nroots;
	v->busy = _busy;
	v->nbusy = _nbusy;
	v->unknown_busy = _unknown_busy;
}

int yield_request_affected(struct daemon *d, const struct queue_request *r)
{
	struct yield_view v;

	if (!d->conf->yield_to_jobs || !yield_after_job(r->action))
		return 0;
	_view(&v);
	return yield_paths_affected(&v, r->source, r->dest);
}

static void _add_root(const char *path)
{
	struct stat st;

	if (_nroots >= MAX_ROOTS)
		return;
	_roots[_nroots] = strdup(path);
	if (!_roots[_nroots])
		return;
	/* Admin-configured roots only; a missing root is "unknown". */
	_devs[_nroots] = stat(path, &st) == 0 ? st.st_dev : 0;
	_nroots++;
}

static void _mark(const char *path)
{
	int i = yield_root_index(path, _roots, _nroots);

	if (path[0] != '/')
		return;
	if (i < 0 || _devs[i] == 0) {
		_unknown_busy = 1;
		return;
	}
	for (size_t k = 0; k < _nbusy; k++)
		if (_busy[k] == _devs[i])
			return;
	if (_nbusy < MAX_BUSY)
		_busy[_nbusy++] = _devs[i];
}

/* The probe file: one absolute path per line, '#' comments; read as root (admin's file). */
static void _read_probe(const char *path)
{
	char buf[PROBE_MAX + 1];
	ssize_t n, len = 0;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		if (errno != ENOENT && !_probe_warned) {
			log_warn("YieldProbe %s: cannot open: %s (treated as no busy directories)",
				 path, strerror(errno));
			_probe_warned = 1;
		}
		return;
	}
	_probe_warned = 0;
	while (len < PROBE_MAX && (n = read(fd, buf + len, (size_t)(PROBE_MAX - len))) > 0)
		len += n;
	close(fd);
	buf[len] = '\0';
	for (char *line = buf, *next; line && *line; line = next) {
		char *e;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if ((e = strchr(line, '#')))
			*e = '\0';
		while (*line == ' ' || *line == '\t')
			line++;
		e = line + strlen(line);
		while (e > line && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
			*--e = '\0';
		if (*line == '/')
			_mark(line);
	}
}

/*
 * Ask the shards table whether a job-start event's job is one of the
 * daemon's mover jobs. A mover job can start, and its event arrive, before
 * the shard records its job id (a shard resubmitted after a lost mover), so
 * "a user's job" is asked again until recheck_ms; "a mover job" is kept (a
 * shard sent back to the queue later forgets its job). Each entry is asked
 * at most once per call (from moves on), so the batches end. The lookups
 * run outside _starts_lock: the queue has its own lock.
 */
static int _needs_ask(const struct yield_start *e, int64_t now)
{
	return e->mover < 0 || (e->mover == 0 && now < e->recheck_ms);
}

static void _classify(struct daemon *d)
{
	int64_t ask[64], now = mono_ms();
	int ans[64];
	size_t n = 0, from = 0;
	char err[256];

	do {
		size_t i;

		n = 0;
		pthread_mutex_lock(&_starts_lock);
		for (i = from; i < _starts.n && n < 64; i++)
			if (_needs_ask(&_starts.v[i], now))
				ask[n++] = _starts.v[i].job;
		from = i;
		pthread_mutex_unlock(&_starts_lock);
		for (size_t k = 0; k < n; k++) {
			ans[k] = queue_shard_job(d->q, ask[k], err, sizeof(err));
			if (ans[k] < 0) {
				log_warn("yield: job %lld: %s (yielding to it as to any job)",
					 (long long)ask[k], err);
				ans[k] = 0;
			} else if (ans[k]) {
				log_debug("yield: job %lld is a mover job of this daemon: not "
					  "yielded to", (long long)ask[k]);
			}
		}
		pthread_mutex_lock(&_starts_lock);
		for (size_t e = 0; e < _starts.n; e++)
			for (size_t k = 0; k < n && _starts.v[e].mover != 1; k++)
				if (_starts.v[e].job == ask[k])
					_starts.v[e].mover = ans[k];
		pthread_mutex_unlock(&_starts_lock);
	} while (n == 64);
}

static void _refresh(struct daemon *d)
{
	const struct conf *c = d->conf;

	for (size_t i = 0; i < _nroots; i++)
		free(_roots[i]);
	_nroots = 0;
	_nbusy = 0;
	_unknown_busy = 0;
	for (char **p = c->scratch_roots; p && *p; p++)
		_add_root(*p);
	if (c->archive_root)
		_add_root(c->archive_root);
	for (char **p = c->stage_in_roots; p && *p; p++)
		_add_root(*p);
	if (!c->yield_to_jobs)
		return;
	for (char **p = _slurm_paths; p && *p; p++)
		_mark(*p);
	_classify(d);
	pthread_mutex_lock(&_starts_lock);
	if (yield_starts_expire(&_starts, mono_ms()))
		log_warn("yield: a job-start event expired after %d h with no end event; "
			 "its file systems are no longer held (check the SPANK plugin's log)",
			 YIELD_START_EXPIRY_S / 3600);
	for (size_t i = 0; i < _starts.n; i++)
		for (size_t k = 0; _starts.v[i].mover != 1 && k < _starts.v[i].npaths; k++)
			_mark(_starts.v[i].paths[k]);
	atomic_store(&_nstarted, (int)yield_starts_users(&_starts));
	pthread_mutex_unlock(&_starts_lock);
	if (c->yield_probe)
		_read_probe(c->yield_probe);
}

static void _tick(struct daemon *d, int64_t now_ms)
{
	int held;
	unsigned seq = atomic_load(&_kick_seq);

	/* Runs every loop turn (period 0); does its work every 500 ms, or at
	   once when a job-start or end event arrived. */
	if (!atomic_exchange(&_kick, 0) && now_ms - _last_full_ms < 500)
		return;
	_last_full_ms = now_ms;
	_refresh(d);
	held = yield_ops.pool_yield(d->pool, now_ms);
	pthread_mutex_lock(&_starts_lock);
	_npaused = yield_ops.pool_paused(d->pool, _paused, 64);
	pthread_mutex_unlock(&_starts_lock);
	atomic_store(&d->metrics->yield_busy_fs, (int)_nbusy + _unknown_busy);
	atomic_store(&d->metrics->yield_active, held);
	/* Last: a start event's answer says "settled" only once /metrics shows it. */
	atomic_store(&_applied_seq, seq);
	if (held > 0 && _last_ms > 0)
		atomic_fetch_add(&d->metrics->yield_ms, (uint64_t)(now_ms - _last_ms));
	_last_ms = now_ms;
}

static void _fini(struct daemon *d)
{
	pace_run_stop();
	yield_set_running(d, NULL, NULL, 0, 0);
	pthread_mutex_lock(&_starts_lock);
	yield_starts_free(&_starts);
	pthread_mutex_unlock(&_starts_lock);
	for (size_t i = 0; i < _nroots; i++)
		free(_roots[i]);
	_nroots = 0;
}

static int _init(struct daemon *d, char *err, size_t errlen)
{
	_refresh(d);
	return pace_run_start(d, err, errlen);
}

/*
 * Every loop turn: _tick gates itself (a kick at once, else every 500 ms).
 * With a period of 50 ms a kick that arrived within 50 ms of the last run
 * waited for the loop's next turn, the poll's 200 ms, and a job-start's
 * settle with it: in a burst of jobs that made the plugin's 300 ms call to
 * the daemon time out.
 */
const struct lifecycle_hook yield_hook = {
	.name = "yield",
	.period_ms = 0,
	.init = _init,
	.tick = _tick,
	.fini = _fini,
};
