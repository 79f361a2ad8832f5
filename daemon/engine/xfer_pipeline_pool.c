/*
 * xfer_pipeline_pool.c - the driver's copy threads and SyncMode=batch.
 *
 * Files of a directory are copied by PIPE_THREADS threads at once (small
 * files are bound by the latency of open/fsync/rename, not by bandwidth).
 * What the walker hands out is counted in stages: a directory's stage
 * holds the files handed out while it was being filled, and with
 * SyncMode=batch (a destination endpoint with batch_commit) its batch of
 * small files, which the threads copy into temporary files. A stage is
 * queued when its batch is full (512 files or 8 MiB) or when the walk
 * leaves its directory, and the walker goes on: it waits only for the
 * stages queued before the one it just queued, then has the destination
 * make every stage whose copies are over durable and put in place at once
 * (one commit), while the threads copy the newest; the threads then read
 * those files back and report them. Stages end oldest first, once their
 * read-backs are over; a directory's last stage ends it (mode, times,
 * fsync: dir_done), after its subdirectories, which the walk left before
 * it. At most PIPE_STAGES_QUEUED are queued; a directory's stage holds its
 * own descriptor of the source directory and the destination's.
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

/* A job handed to a copy thread; sdir/ddir stay open until its stage ends. */
struct pipe__task {
	int kind;                    /* T_FILE: the whole pipeline; else one batch stage */
	int sdir, ddir;
	char *name, *rel;
	struct stat st;
	struct pipe__pend *pend;    /* batch stages: the file (owned by the stage) */
	struct pipe__stage *stage;  /* counts it until it is finished */
	struct pipe__task *next;
};

/* Stage 1, on a thread: data and metadata into the temporary file, not yet durable. */
static void _batch_copy(struct pipe__run *r, const struct xfer_buf *tb, struct pipe__pend *p)
{
	p->state = 0;
	p->started = (int64_t)time(NULL);
	p->wf.fd = p->wf.vfd = -1;
	if (pipe__resume_ok(r, p->wf.dir, p->name, p->rel, &p->st))
		return;
	if (pipe__transfer(r, tb, &(struct pipe__file){ p->sdir, p->name, p->rel, &p->st }, &p->wf,
			   0, XFER_C_DEFER, p->cks, NULL) == 0)
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
	pipe__report(r, &(struct pipe__file){ p->sdir, p->name, p->rel, &p->st }, p->wf.total,
		     p->started, p->cks, got);
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
		struct pipe__stage *sg;

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
		sg = t->stage;
		free(t->name);
		free(t->rel);
		free(t);
		pthread_mutex_lock(&r->pmu);
		r->pending--;
		if (sg)
			sg->left--;
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

/* Wait until every file handed out is finished. */
static void _pool_drain(struct pipe__run *r)
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
	_pool_drain(r);
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
	if (t->stage)
		t->stage->left++;
	pthread_cond_signal(&r->cv_work);
	pthread_mutex_unlock(&r->pmu);
}

/* ---- stages ---- */

/* b's stage, made at its first file; NULL out of memory. */
static struct pipe__stage *_stage_of(struct pipe__batch *b)
{
	if (!b->s && (b->s = calloc(1, sizeof(*b->s)))) {
		b->s->ddir = b->ddir;
		b->s->sdir = -1;
	}
	return b->s;
}

static int _left(struct pipe__run *r, struct pipe__stage *q)
{
	int n;

	pthread_mutex_lock(&r->pmu);
	n = q->left;
	pthread_mutex_unlock(&r->pmu);
	return n;
}

/* Wait until every task of q is finished. */
static void _wait(struct pipe__run *r, struct pipe__stage *q)
{
	pthread_mutex_lock(&r->pmu);
	while (q->left > 0)
		pthread_cond_wait(&r->cv_done, &r->pmu);
	pthread_mutex_unlock(&r->pmu);
}

/*
 * One commit for the copied files of the nq stages: the destination makes
 * them durable and puts them in place at once; each file's state says where
 * it is (2: in place). Stopped: every temporary file is given up, nothing
 * reported.
 */
static void _commit(struct pipe__run *r, struct pipe__stage *const *qs, size_t nq)
{
	struct pipe__pend *spp[BATCH_N], **pp = spp;
	struct xfer_wfile *swf[BATCH_N], **wf = swf;
	const char *swhat[BATCH_N], **what = swhat;
	int serr[BATCH_N], *err = serr;
	size_t total = 0, n = 0;

	for (size_t k = 0; k < nq; k++)
		total += qs[k]->n;
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
			/* Out of memory: a commit a stage (none holds more than BATCH_N). */
			for (size_t k = 0; k < nq; k++)
				_commit(r, &qs[k], 1);
			return;
		}
	}
	for (size_t k = 0; k < nq; k++)
		for (size_t i = 0; i < qs[k]->n; i++) {
			struct pipe__pend *p = &qs[k]->p[i];

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

/* The files of q in place to the threads for their read-back. */
static void _verify_queue(struct pipe__run *r, struct pipe__stage *q)
{
	for (size_t i = 0; i < q->n; i++) {
		struct pipe__task *t;

		if (q->p[i].state != 2)
			continue;
		if (!(t = calloc(1, sizeof(*t)))) {
			_batch_verify(r, &r->tb0, &q->p[i]);
			continue;
		}
		t->kind = T_BATCH_VERIFY;
		t->pend = &q->p[i];
		t->stage = q;
		_enqueue(r, t);
	}
}

static void _stage_end(struct pipe__run *r, struct pipe__stage *q)
{
	for (size_t i = 0; i < q->n; i++) {
		free(q->p[i].name);
		free(q->p[i].rel);
	}
	free(q->p);
	if (q->end) {
		r->dst->tree->dir_done(r->dep, q->ddir, q->sdir, &q->st);
		if (q->sdir >= 0)
			close(q->sdir);
	}
	free(q);
}

/*
 * On the walker, without waiting: every queued stage whose copies are over
 * is committed (one commit for them all) and its read-backs handed out;
 * then the stages whose read-backs are over end, oldest first.
 */
static void _advance(struct pipe__run *r)
{
	struct pipe__stage *qs[PIPE_STAGES_QUEUED + 1], *q;
	size_t nq = 0;

	for (q = r->sq_head; q && nq < PIPE_STAGES_QUEUED + 1; q = q->next)
		if (!q->committed && _left(r, q) == 0)
			qs[nq++] = q;
	if (nq)
		_commit(r, qs, nq);
	for (size_t k = 0; k < nq; k++) {
		qs[k]->committed = 1;
		_verify_queue(r, qs[k]);
	}
	while ((q = r->sq_head) && q->committed && _left(r, q) == 0) {
		r->sq_head = q->next;
		if (!r->sq_head)
			r->sq_tail = NULL;
		r->sq_n--;
		_stage_end(r, q);
	}
}

/* Queue q; then, waiting, keep at most PIPE_STAGES_QUEUED queued. */
static void _queue(struct pipe__run *r, struct pipe__stage *q)
{
	if (r->sq_tail)
		r->sq_tail->next = q;
	else
		r->sq_head = q;
	r->sq_tail = q;
	r->sq_n++;
	while (r->sq_n > PIPE_STAGES_QUEUED) {
		_wait(r, r->sq_head);
		_advance(r);
	}
}

void pipe__submit(struct pipe__run *r, struct pipe__batch *b, int sdir, int ddir,
		  const char *name, const char *rel, const struct stat *st)
{
	struct pipe__task *t = NULL;
	struct pipe__stage *q = r->nth && b ? _stage_of(b) : NULL;

	if (!q || (!r->dst->discards && st->st_size >= XFER_BIG_MIN) ||
	    !(t = calloc(1, sizeof(*t))) || !(t->name = strdup(name)) || !(t->rel = strdup(rel))) {
		if (t) {
			free(t->name);
			free(t);
		}
		pipe__copy_file(r, &r->tb0, sdir, name, ddir, name, rel, st);
		return;
	}
	t->sdir = sdir;
	t->ddir = ddir;
	t->st = *st;
	t->stage = q;
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
	struct pipe__stage *q = _stage_of(b);
	struct pipe__pend *p;
	struct pipe__task *t;

	if (q && !q->p)
		q->p = calloc(BATCH_N, sizeof(*q->p));
	if (!q || !q->p || !(t = calloc(1, sizeof(*t)))) {
		pipe__submit(r, b, sdir, ddir, name, rel, st);	/* out of memory: the plain path */
		return;
	}
	p = &q->p[q->n];
	memset(p, 0, sizeof(*p));
	p->sdir = sdir;
	p->st = *st;
	if (!(p->name = strdup(name)) || !(p->rel = strdup(rel))) {
		free(p->name);
		free(t);
		pipe__submit(r, b, sdir, ddir, name, rel, st);
		return;
	}
	p->wf.dir = ddir;
	p->wf.name = p->name;
	q->n++;
	q->bytes += st->st_size;
	t->kind = T_BATCH_COPY;
	t->pend = p;
	t->stage = q;
	_enqueue(r, t);
}

/*
 * A full batch: its stage is queued; the walker waits for the copies of the
 * stages queued before it, commits them while the threads copy this one,
 * and goes on.
 */
void pipe__batch_maybe_flush(struct pipe__run *r, struct pipe__batch *b)
{
	struct pipe__stage *q = b->s;

	if (!q || (q->n < BATCH_N && q->bytes < BATCH_BYTES))
		return;
	b->s = NULL;
	_queue(r, q);
	for (struct pipe__stage *o = r->sq_head; o && o != q; o = o->next)
		if (!o->committed)
			_wait(r, o);
	_advance(r);
}

/* Wait for every queued stage and end it (the walk is over or stopped). */
static void _finish_all(struct pipe__run *r)
{
	while (r->sq_head) {
		_wait(r, r->sq_head);
		_advance(r);
	}
}

void pipe__batch_end(struct pipe__run *r, struct pipe__batch *b)
{
	if (b->s) {
		_queue(r, b->s);
		b->s = NULL;
	}
	_finish_all(r);
}

void pipe__dir_leave(struct pipe__run *r, struct pipe__batch *b, int ddir, int sdir,
		     const struct stat *st)
{
	struct pipe__stage *q = r->nth ? _stage_of(b) : NULL;

	if (!q) {
		pipe__batch_end(r, b);
		r->dst->tree->dir_done(r->dep, ddir, sdir, st);
		if (sdir >= 0)
			close(sdir);
		return;
	}
	b->s = NULL;
	q->end = 1;
	q->ddir = ddir;
	q->sdir = sdir;
	q->st = *st;
	/* Committed with the next ones: a small directory need not wait for its own. */
	_queue(r, q);
}
