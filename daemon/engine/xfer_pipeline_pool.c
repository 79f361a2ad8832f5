/*
 * xfer_pipeline_pool.c - the driver's copy threads and SyncMode=batch.
 *
 * Files of a directory are copied by PIPE_THREADS threads at once (small
 * files are bound by the latency of open/fsync/rename, not by bandwidth);
 * they are all done before the destination directory is made durable and
 * timestamped. The walker does not wait for that when it leaves a
 * directory: the directory's end is deferred to its next drains (at most
 * PIPE_DIRS_DEFERRED directories), so that the threads copy the next
 * directory's files while the last ones of this one are committed and read
 * back. With SyncMode=batch (a destination endpoint with
 * batch_commit), small files are made durable together: the threads copy a
 * batch into temporary files, the walker has the destination make them
 * durable and put them in place at once, then the threads read them back and
 * report them while the next batch is copied.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "xfer_big.h"
#include "xfer_pipeline_int.h"

#define TBUF (256u << 10)         /* a copy thread's buffer (aligned: O_DIRECT reads) */
#define QMAX 256                  /* files queued for the threads at most */
#define BATCH_N 512               /* small files made durable together (SyncMode=batch) */
#define BATCH_BYTES (8 << 20)     /* ... or this many bytes: progress shows per batch */
#define BATCH_FILE_MAX (1 << 20)  /* files up to this size are batched */

enum { T_FILE = 0, T_BATCH_COPY, T_BATCH_VERIFY };

/* A job handed to a copy thread; sdir/ddir stay open until the walker drains. */
struct pipe__task {
	int kind;                    /* T_FILE: the whole pipeline; else one batch stage */
	int sdir, ddir;
	char *name, *rel;
	struct stat st;
	struct pipe__pend *pend;    /* batch stages: the file (owned by the batch) */
	struct pipe__task *next;
};

static void _batch_free(struct pipe__pend *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(p[i].name);
		free(p[i].rel);
	}
	free(p);
}

/* Stage 1, on a thread: data and metadata into the temporary file, not yet durable. */
static void _batch_copy(struct pipe__run *r, const struct xfer_buf *tb, struct pipe__pend *p)
{
	p->state = 0;
	p->started = (int64_t)time(NULL);
	p->wf.fd = p->wf.vfd = -1;
	if (pipe__resume_ok(r, p->wf.dir, p->name, p->rel, &p->st))
		return;
	if (pipe__transfer(r, tb, p->sdir, p->name, p->rel, &p->st, &p->wf, 0, XFER_C_DEFER,
			   p->cks, NULL) == 0)
		p->state = 1;
}

/* Stage 3, on a thread: the file is durable and in place; read it back and report. */
static void _batch_verify(struct pipe__run *r, const struct xfer_buf *tb, struct pipe__pend *p)
{
	char got[CKSUM_HEX_MAX];
	int e = r->dst->device->readback(r->dep, tb, p->wf.dir, p->name, p->wf.total, got);

	if (e) {
		if (e != EINTR)
			xfer_fail(&r->t, p->rel, e, "cannot verify");
		return;
	}
	if (strcmp(got, p->cks) != 0) {
		xfer_fail(&r->t, p->rel, EIO, "checksum mismatch after copy of");
		return;
	}
	pipe__report(r, p->sdir, p->name, p->rel, &p->st, p->wf.total, p->started, p->cks, got);
}

/* ---- the copy threads ---- */

static void *_thread(void *arg)
{
	struct pipe__run *r = arg;
	struct xfer_buf tb = { NULL, TBUF };

	if (posix_memalign((void **)&tb.p, 4096, TBUF) != 0)
		tb.p = NULL;
	for (;;) {
		struct pipe__task *t;

		pthread_mutex_lock(&r->pmu);
		while (!r->head && !r->quit)
			pthread_cond_wait(&r->cv_work, &r->pmu);
		t = r->head;
		if (t) {
			r->head = t->next;
			if (!r->head)
				r->tail = NULL;
		}
		pthread_mutex_unlock(&r->pmu);
		if (!t)
			break;
		if (!tb.p)
			xfer_fail(&r->t, t->pend ? t->pend->rel : t->rel, ENOMEM,
				  "out of memory copying");
		else if (t->kind == T_BATCH_COPY)
			_batch_copy(r, &tb, t->pend);
		else if (t->kind == T_BATCH_VERIFY)
			_batch_verify(r, &tb, t->pend);
		else
			pipe__copy_file(r, &tb, t->sdir, t->name, t->ddir, t->name, t->rel, &t->st);
		free(t->name);
		free(t->rel);
		free(t);
		pthread_mutex_lock(&r->pmu);
		r->pending--;
		pthread_cond_broadcast(&r->cv_done);
		pthread_mutex_unlock(&r->pmu);
	}
	free(tb.p);
	return NULL;
}

void pipe__pool_start(struct pipe__run *r)
{
	pthread_mutex_init(&r->pmu, NULL);
	pthread_cond_init(&r->cv_work, NULL);
	pthread_cond_init(&r->cv_done, NULL);
	for (r->nth = 0; r->nth < PIPE_THREADS; r->nth++)
		if (pthread_create(&r->th[r->nth], NULL, _thread, r) != 0)
			break;
}

void pipe__pool_drain(struct pipe__run *r)
{
	if (!r->nth)
		return;
	pthread_mutex_lock(&r->pmu);
	while (r->pending > 0)
		pthread_cond_wait(&r->cv_done, &r->pmu);
	pthread_mutex_unlock(&r->pmu);
}

void pipe__pool_stop(struct pipe__run *r)
{
	if (!r->nth)
		return;
	pipe__pool_drain(r);
	pthread_mutex_lock(&r->pmu);
	r->quit = 1;
	pthread_cond_broadcast(&r->cv_work);
	pthread_mutex_unlock(&r->pmu);
	for (int i = 0; i < r->nth; i++)
		pthread_join(r->th[i], NULL);
	r->nth = 0;
}

static void _enqueue(struct pipe__run *r, struct pipe__task *t)
{
	pthread_mutex_lock(&r->pmu);
	while (r->pending >= QMAX)
		pthread_cond_wait(&r->cv_done, &r->pmu);
	if (r->tail)
		r->tail->next = t;
	else
		r->head = t;
	r->tail = t;
	r->pending++;
	pthread_cond_signal(&r->cv_work);
	pthread_mutex_unlock(&r->pmu);
}

void pipe__submit(struct pipe__run *r, int sdir, int ddir, const char *name, const char *rel,
		   const struct stat *st)
{
	struct pipe__task *t = NULL;

	if (!r->nth || (!r->dst->discards && st->st_size >= XFER_BIG_MIN) ||
	    !(t = calloc(1, sizeof(*t))) || !(t->name = strdup(name)) || !(t->rel = strdup(rel))) {
		if (r->nth && t) {
			free(t->name);
			free(t);
		}
		pipe__copy_file(r, &r->tb0, sdir, name, ddir, name, rel, st);
		return;
	}
	t->sdir = sdir;
	t->ddir = ddir;
	t->st = *st;
	_enqueue(r, t);
}

int pipe__batchable(const struct pipe__run *r, const struct stat *st)
{
	return r->ctx->sync_batch && r->dst->device && r->dst->device->batch_commit &&
	       r->nth && st->st_size <= BATCH_FILE_MAX;
}

/* Add a small file to the directory's batch and start its copy on a thread. */
void pipe__batch_add(struct pipe__run *r, struct pipe__batch *b, int sdir, int ddir,
		      const char *name, const char *rel, const struct stat *st)
{
	struct pipe__pend *p;
	struct pipe__task *t;

	if (!b->p) {
		b->p = calloc(BATCH_N, sizeof(*b->p));
		b->cap = b->p ? BATCH_N : 0;
		b->ddir = ddir;
	}
	if (!b->p || !(t = calloc(1, sizeof(*t)))) {
		pipe__submit(r, sdir, ddir, name, rel, st);	/* out of memory: the plain path */
		return;
	}
	p = &b->p[b->n];
	memset(p, 0, sizeof(*p));
	p->sdir = sdir;
	p->st = *st;
	if (!(p->name = strdup(name)) || !(p->rel = strdup(rel))) {
		free(p->name);
		free(t);
		pipe__submit(r, sdir, ddir, name, rel, st);
		return;
	}
	p->wf.dir = ddir;
	p->wf.name = p->name;
	b->n++;
	b->bytes += st->st_size;
	t->kind = T_BATCH_COPY;
	t->pend = p;
	_enqueue(r, t);
}

/*
 * One commit for the copied files of the nb batches (each of one
 * directory): the destination makes them durable and puts them in place at
 * once; each file's state says where it is (2: in place). Stopped: every
 * temporary file is given up, nothing reported.
 */
static void _commit(struct pipe__run *r, struct pipe__batch *const *bs, size_t nb)
{
	struct pipe__pend *spp[BATCH_N], **pp = spp;
	struct xfer_wfile *swf[BATCH_N], **wf = swf;
	const char *swhat[BATCH_N], **what = swhat;
	int serr[BATCH_N], *err = serr;
	size_t total = 0, n = 0;

	for (size_t k = 0; k < nb; k++)
		total += bs[k]->n;
	if (total > BATCH_N) {
		pp = malloc(total * sizeof(*pp));
		wf = malloc(total * sizeof(*wf));
		what = malloc(total * sizeof(*what));
		err = malloc(total * sizeof(*err));
		if (!pp || !wf || !what || !err) {
			free(pp);
			free(wf);
			free(what);
			free(err);
			/* Out of memory: a commit a batch (none holds more than BATCH_N). */
			for (size_t k = 0; k < nb; k++)
				_commit(r, &bs[k], 1);
			return;
		}
	}
	for (size_t k = 0; k < nb; k++)
		for (size_t i = 0; i < bs[k]->n; i++) {
			struct pipe__pend *p = &bs[k]->p[i];

			if (p->state != 1)
				continue;
			if (xfer_stopped(r->ctx)) {
				r->dst->device->abort(r->dep, &p->wf);
				p->state = 0;
				continue;
			}
			pp[n] = p;
			wf[n++] = &p->wf;
		}
	if (n)
		r->dst->device->batch_commit(r->dep, wf, n, err, what);
	for (size_t k = 0; k < n; k++) {
		pp[k]->state = err[k] ? 0 : 2;
		if (err[k])
			xfer_fail(&r->t, pp[k]->rel, err[k], what[k]);
	}
	if (pp != spp) {
		free(pp);
		free(wf);
		free(what);
		free(err);
	}
}

/* The files of b in place to the threads for their read-back; b->p becomes b->old. */
static void _batch_verify_queue(struct pipe__run *r, struct pipe__batch *b)
{
	for (size_t i = 0; i < b->n; i++) {
		struct pipe__task *t;

		if (b->p[i].state != 2)
			continue;
		if (!(t = calloc(1, sizeof(*t)))) {
			_batch_verify(r, &r->tb0, &b->p[i]);
			continue;
		}
		t->kind = T_BATCH_VERIFY;
		t->pend = &b->p[i];
		_enqueue(r, t);
	}
	/* Verified while the threads already copy the next batch; freed at the next flush. */
	b->old = b->p;
	b->nold = b->n;
	b->p = NULL;
	b->n = 0;
	b->bytes = 0;
}

static void _dir_end(struct pipe__run *r, struct pipe__dirq *q)
{
	r->dst->tree->dir_done(r->dep, q->ddir, q->sdir, &q->st);
	if (q->sdir >= 0)
		close(q->sdir);
	free(q);
}

/*
 * On the walker, right after a drain (nothing handed out is running): the
 * deferred directories whose verifications are over end, in the order they
 * were left; the last batches of the others, and cur (the batch the walker
 * fills, or NULL), are made durable and put in place by one commit, and
 * their verifications queued.
 */
static void _dir_step(struct pipe__run *r, struct pipe__batch *cur)
{
	struct pipe__batch *bs[PIPE_DIRS_DEFERRED + 2];
	struct pipe__dirq *q;
	size_t nb = 0;

	while ((q = r->dq_head) && q->committed) {
		r->dq_head = q->next;
		if (!r->dq_head)
			r->dq_tail = NULL;
		r->dq_n--;
		_batch_free(q->b.old, q->b.nold);
		_dir_end(r, q);
	}
	/* At most PIPE_DIRS_DEFERRED + 1 are queued (pipe__dir_leave). */
	for (q = r->dq_head; q && nb < PIPE_DIRS_DEFERRED + 1; q = q->next) {
		_batch_free(q->b.old, q->b.nold);
		q->b.old = NULL;
		q->b.nold = 0;
		q->committed = 1;
		if (q->b.p)
			bs[nb++] = &q->b;
	}
	if (cur) {
		_batch_free(cur->old, cur->nold);
		cur->old = NULL;
		cur->nold = 0;
		if (cur->p)
			bs[nb++] = cur;
	}
	_commit(r, bs, nb);
	for (size_t k = 0; k < nb; k++)
		_batch_verify_queue(r, bs[k]);
}

/*
 * Stage 2, on the walker: every copy of the batch finished; the destination
 * makes them durable and puts them in place at once (batch_commit), with the
 * last batches of the directories left before, and only then are they read
 * back and reported (stage 3).
 */
static void _batch_flush(struct pipe__run *r, struct pipe__batch *b)
{
	/* This batch's copies and the previous batch's verifications are finished,
	   and so is all the deferred directories' work handed out. */
	pipe__pool_drain(r);
	_dir_step(r, b);
}

void pipe__batch_maybe_flush(struct pipe__run *r, struct pipe__batch *b)
{
	if (b->n == BATCH_N || b->bytes >= BATCH_BYTES)
		_batch_flush(r, b);
}

void pipe__batch_end(struct pipe__run *r, struct pipe__batch *b)
{
	_batch_flush(r, b);
	pipe__pool_drain(r);
	_batch_free(b->old, b->nold);
	b->old = NULL;
	b->nold = 0;
}

void pipe__dir_leave(struct pipe__run *r, struct pipe__batch *b, int ddir, int sdir,
		     const struct stat *st)
{
	struct pipe__dirq *q = r->nth && sdir >= 0 ? calloc(1, sizeof(*q)) : NULL;

	if (!q) {
		pipe__batch_end(r, b);
		r->dst->tree->dir_done(r->dep, ddir, sdir, st);
		if (sdir >= 0)
			close(sdir);
		return;
	}
	q->b = *b;
	q->ddir = ddir;
	q->sdir = sdir;
	q->st = *st;
	if (r->dq_tail)
		r->dq_tail->next = q;
	else
		r->dq_head = q;
	r->dq_tail = q;
	r->dq_n++;
	/* Each step ends the committed ones and commits the rest. */
	while (r->dq_n > PIPE_DIRS_DEFERRED) {
		pipe__pool_drain(r);
		_dir_step(r, NULL);
	}
}

void pipe__dir_finish(struct pipe__run *r)
{
	while (r->dq_head) {
		pipe__pool_drain(r);
		_dir_step(r, NULL);
	}
}
