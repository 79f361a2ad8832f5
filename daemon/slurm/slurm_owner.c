/* slurm_owner.c - see slurm_owner.h. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "slurm_compat.h"

#include "slurm_owner.h"

struct _slot {
	uint32_t job;                /* 0: empty (Slurm job ids start at 1) */
	int64_t uid;                 /* owner, or SOWNER_UNKNOWN_JOB */
	int64_t until_ms;
};

struct sowner {
	pthread_mutex_t lock;        /* guards slots and the counters */
	struct _slot slots[SOWNER_SLOTS];
	unsigned long calls, hits;
};

struct sowner *sowner_new(void)
{
	struct sowner *c = calloc(1, sizeof(*c));

	if (c)
		pthread_mutex_init(&c->lock, NULL);
	return c;
}

void sowner_free(struct sowner *c)
{
	if (!c)
		return;
	pthread_mutex_destroy(&c->lock);
	free(c);
}

/* Under lock. */
static void _put(struct sowner *c, uint32_t job, int64_t uid, int64_t now_ms)
{
	struct _slot *s = &c->slots[job % SOWNER_SLOTS];

	s->job = job;
	s->uid = uid;
	s->until_ms = now_ms + (uid >= 0 ? SOWNER_TTL_MS : SOWNER_NEG_TTL_MS);
}

/* Under lock: 1 with *uid when job is cached and fresh. */
static int _get(struct sowner *c, uint32_t job, int64_t now_ms, int64_t *uid)
{
	const struct _slot *s = &c->slots[job % SOWNER_SLOTS];

	if (s->job != job || s->until_ms <= now_ms)
		return 0;
	*uid = s->uid;
	return 1;
}

/* The misses being resolved: sorted unique ids and their owners so far. */
struct _want {
	uint32_t *ids;
	int64_t *res;                /* SOWNER_ERROR until known */
	size_t n;
};

static int _cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

static void _want_set(struct _want *w, uint32_t job, int64_t uid)
{
	uint32_t *p = bsearch(&job, w->ids, w->n, sizeof(*w->ids), _cmp_u32);

	if (p)
		w->res[p - w->ids] = uid;
}

/* Every record of msg into the cache and into w (an array's tasks, and its meta id). */
static void _take(struct sowner *c, const job_info_msg_t *msg, struct _want *w, int64_t now_ms)
{
	pthread_mutex_lock(&c->lock);
	for (uint32_t i = 0; i < msg->record_count; i++) {
		const slurm_job_info_t *r = &msg->job_array[i];

		_put(c, r->job_id, (int64_t)r->user_id, now_ms);
		_want_set(w, r->job_id, (int64_t)r->user_id);
		if (r->array_job_id && r->array_job_id != r->job_id) {
			_put(c, r->array_job_id, (int64_t)r->user_id, now_ms);
			_want_set(w, r->array_job_id, (int64_t)r->user_id);
		}
	}
	pthread_mutex_unlock(&c->lock);
}

/* Every id of w still unresolved: slurmctld does not know it (its table was just read). */
static void _rest_unknown(struct sowner *c, struct _want *w, size_t from, size_t to,
			  int64_t now_ms)
{
	pthread_mutex_lock(&c->lock);
	for (size_t i = from; i < to; i++)
		if (w->res[i] == SOWNER_ERROR) {
			w->res[i] = SOWNER_UNKNOWN_JOB;
			_put(c, w->ids[i], SOWNER_UNKNOWN_JOB, now_ms);
		}
	pthread_mutex_unlock(&c->lock);
}

/* One job (for an array id, all its tasks): into w and the cache. 0 or -1. */
static int _load_one(struct sowner *c, struct _want *w, size_t k, int64_t now_ms, char *err,
		     size_t errlen)
{
	job_info_msg_t *msg = NULL;

	if (slurm_compat_load_job(&msg, w->ids[k], SHOW_ALL) != SLURM_SUCCESS) {
		int e = slurm_errno_now();

		if (e == ESLURM_INVALID_JOB_ID) {
			_rest_unknown(c, w, k, k + 1, now_ms);
			return 0;
		}
		snprintf(err, errlen, "cannot ask slurmctld whose job %u is: %s", w->ids[k],
			 slurm_strerror(e));
		return -1;
	}
	_take(c, msg, w, now_ms);
	slurm_free_job_info_msg(msg);
	_rest_unknown(c, w, k, k + 1, now_ms);
	return 0;
}

/* The whole job table, for every id of w. 0 or -1. */
static int _load_table(struct sowner *c, struct _want *w, int64_t now_ms, char *err,
		       size_t errlen)
{
	job_info_msg_t *msg = NULL;

	if (slurm_load_jobs(0, &msg, SHOW_ALL) != SLURM_SUCCESS) {
		snprintf(err, errlen, "cannot read slurmctld's job table: %s",
			 slurm_strerror(slurm_errno_now()));
		return -1;
	}
	_take(c, msg, w, now_ms);
	slurm_free_job_info_msg(msg);
	_rest_unknown(c, w, 0, w->n, now_ms);
	return 0;
}

/* owners of ids from the cache; the ids it lacks into w (sorted, unique), their
   owners marked SOWNER_ERROR. */
static void _from_cache(struct sowner *c, const uint32_t *ids, size_t n, int64_t *owners,
			int64_t now_ms, struct _want *w)
{
	size_t k = 0;

	w->n = 0;
	pthread_mutex_lock(&c->lock);
	for (size_t i = 0; i < n; i++) {
		if (_get(c, ids[i], now_ms, &owners[i])) {
			c->hits++;
			continue;
		}
		owners[i] = SOWNER_ERROR;
		w->ids[w->n++] = ids[i];
	}
	pthread_mutex_unlock(&c->lock);
	qsort(w->ids, w->n, sizeof(*w->ids), _cmp_u32);
	for (size_t i = 0; i < w->n; i++)
		if (k == 0 || w->ids[i] != w->ids[k - 1])
			w->ids[k++] = w->ids[i];
	w->n = k;
	for (size_t i = 0; i < w->n; i++)
		w->res[i] = SOWNER_ERROR;
}

int sowner_lookup(struct sowner *c, const uint32_t *ids, size_t n, int64_t *owners,
		  int64_t now_ms, char *err, size_t errlen)
{
	struct _want w = { malloc((n ? n : 1) * sizeof(*w.ids)),
			   malloc((n ? n : 1) * sizeof(*w.res)), 0 };
	size_t i;
	int calls = 0, rc = 0;

	if (!w.ids || !w.res) {
		snprintf(err, errlen, "out of memory");
		for (i = 0; i < n; i++)
			owners[i] = SOWNER_ERROR;
		free(w.ids);
		free(w.res);
		return -1;
	}
	_from_cache(c, ids, n, owners, now_ms, &w);
	if (w.n > SOWNER_SINGLE_MAX) {
		calls = 1;
		rc = _load_table(c, &w, now_ms, err, errlen);
	} else {
		/* A task of an array loaded just before is known already: each job,
		   and each array, is asked about once. */
		for (i = 0; i < w.n && rc == 0; i++) {
			if (w.res[i] != SOWNER_ERROR)
				continue;
			calls++;
			rc = _load_one(c, &w, i, now_ms, err, errlen);
		}
	}
	for (i = 0; i < n; i++)
		if (owners[i] == SOWNER_ERROR) {
			uint32_t *p = bsearch(&ids[i], w.ids, w.n, sizeof(*w.ids), _cmp_u32);

			owners[i] = p ? w.res[p - w.ids] : SOWNER_ERROR;
		}
	pthread_mutex_lock(&c->lock);
	c->calls += (unsigned long)calls;
	pthread_mutex_unlock(&c->lock);
	free(w.ids);
	free(w.res);
	return rc < 0 ? -1 : calls;
}

void sowner_stats(struct sowner *c, unsigned long *calls, unsigned long *hits)
{
	pthread_mutex_lock(&c->lock);
	*calls = c->calls;
	*hits = c->hits;
	pthread_mutex_unlock(&c->lock);
}
