/*
 * xfer_local_pool.c - the local endpoint's copy threads and SyncMode=batch.
 *
 * Files of a directory are copied by LOCAL_THREADS threads at once (small
 * files are bound by the latency of open/fsync/rename, not by bandwidth);
 * the walker waits for them before it syncs and timestamps the directory.
 * With SyncMode=batch, small files are made durable together: the threads
 * copy a batch into temporary files, the walker makes them durable with one
 * syncfs(), renames them and fsyncs the directory, then the threads read
 * them back and report them while the next batch is copied.
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

#include "durable.h"
#include "xfer_big.h"
#include "xfer_local_int.h"

#define TBUF (256u << 10)         /* a copy thread's buffer (aligned: O_DIRECT reads) */
#define QMAX 256                  /* files queued for the threads at most */
#define BATCH_N 512               /* small files made durable together (SyncMode=batch) */
#define BATCH_BYTES (8 << 20)     /* ... or this many bytes: progress shows per batch */
#define BATCH_FILE_MAX (1 << 20)  /* files up to this size are batched */

enum { T_FILE = 0, T_BATCH_COPY, T_BATCH_VERIFY };

/* A job handed to a copy thread; sdir/ddir stay open until the walker drains. */
struct local__task {
	int kind;                    /* T_FILE: the whole pipeline; else one batch stage */
	int sdir, ddir;
	char *name, *rel;
	struct stat st;
	struct local__pend *pend;    /* batch stages: the file (owned by the batch) */
	struct local__task *next;
};

static void _batch_free(struct local__pend *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(p[i].name);
		free(p[i].rel);
	}
	free(p);
}

/* Stage 1, on a thread: data and metadata into the temporary file, no fsync yet. */
static void _batch_copy(struct local__run *r, const struct xfer_buf *tb, struct local__pend *p)
{
	struct stat cur;
	int sfd, dfd, e;

	p->state = 0;
	p->started = (int64_t)time(NULL);
	if (local__resume_ok(r, p->ddir, p->name, p->rel, &p->st))
		return;
	sfd = local__open_source(r, p->sdir, p->name, p->rel, &p->st, &cur);
	if (sfd < 0)
		return;
	if (durable_tmpname(p->tmp, sizeof(p->tmp), p->name, r->ctx->request_id) < 0) {
		close(sfd);
		xfer_fail(&r->t, p->rel, ENAMETOOLONG, "name too long");
		return;
	}
	dfd = durable_create(p->ddir, p->tmp, O_WRONLY);
	if (dfd < 0) {
		e = errno;
		close(sfd);
		xfer_fail(&r->t, p->rel, e, "cannot create destination");
		return;
	}
	e = local__fill(r, tb, sfd, dfd, -1, &p->st, &cur, &p->total, p->cks, NULL);
	close(sfd);
	if (close(dfd) < 0 && !e)
		e = errno;
	if (e) {
		unlinkat(p->ddir, p->tmp, 0);
		if (e != EINTR)
			xfer_fail(&r->t, p->rel, e, e == EAGAIN ? "source changed during copy" :
				  "copy failed");
		return;
	}
	p->state = 1;
}

/* Stage 3, on a thread: the file is durable and in place; read it back and report. */
static void _batch_verify(struct local__run *r, const struct xfer_buf *tb, struct local__pend *p)
{
	char got[CKSUM_HEX_MAX];
	int e = xfer_engine_verify(r->ctx, tb, p->ddir, p->name, p->total, got);

	if (e) {
		if (e != EINTR)
			xfer_fail(&r->t, p->rel, e, "cannot verify");
		return;
	}
	if (strcmp(got, p->cks) != 0) {
		xfer_fail(&r->t, p->rel, EIO, "checksum mismatch after copy of");
		return;
	}
	local__report(r, p->sdir, p->name, p->rel, &p->st, p->total, p->started, p->cks, got);
}

/* ---- the copy threads ---- */

static void *_thread(void *arg)
{
	struct local__run *r = arg;
	struct xfer_buf tb = { NULL, TBUF };

	if (posix_memalign((void **)&tb.p, 4096, TBUF) != 0)
		tb.p = NULL;
	for (;;) {
		struct local__task *t;

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
			local__copy_file(r, &tb, t->sdir, t->name, t->ddir, t->name, t->rel, &t->st);
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

void local__pool_start(struct local__run *r)
{
	pthread_mutex_init(&r->pmu, NULL);
	pthread_cond_init(&r->cv_work, NULL);
	pthread_cond_init(&r->cv_done, NULL);
	for (r->nth = 0; r->nth < LOCAL_THREADS; r->nth++)
		if (pthread_create(&r->th[r->nth], NULL, _thread, r) != 0)
			break;
}

void local__pool_drain(struct local__run *r)
{
	if (!r->nth)
		return;
	pthread_mutex_lock(&r->pmu);
	while (r->pending > 0)
		pthread_cond_wait(&r->cv_done, &r->pmu);
	pthread_mutex_unlock(&r->pmu);
}

void local__pool_stop(struct local__run *r)
{
	if (!r->nth)
		return;
	local__pool_drain(r);
	pthread_mutex_lock(&r->pmu);
	r->quit = 1;
	pthread_cond_broadcast(&r->cv_work);
	pthread_mutex_unlock(&r->pmu);
	for (int i = 0; i < r->nth; i++)
		pthread_join(r->th[i], NULL);
	r->nth = 0;
}

static void _enqueue(struct local__run *r, struct local__task *t)
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

void local__submit(struct local__run *r, int sdir, int ddir, const char *name, const char *rel,
		   const struct stat *st)
{
	struct local__task *t = NULL;

	if (!r->nth || (!r->null && st->st_size >= XFER_BIG_MIN) ||
	    !(t = calloc(1, sizeof(*t))) || !(t->name = strdup(name)) || !(t->rel = strdup(rel))) {
		if (r->nth && t) {
			free(t->name);
			free(t);
		}
		local__copy_file(r, &r->tb0, sdir, name, ddir, name, rel, st);
		return;
	}
	t->sdir = sdir;
	t->ddir = ddir;
	t->st = *st;
	_enqueue(r, t);
}

int local__batchable(const struct local__run *r, const struct stat *st)
{
	return r->ctx->sync_batch && !r->null && r->nth && st->st_size <= BATCH_FILE_MAX;
}

/* Add a small file to the directory's batch and start its copy on a thread. */
void local__batch_add(struct local__run *r, struct local__batch *b, int sdir, int ddir,
		      const char *name, const char *rel, const struct stat *st)
{
	struct local__pend *p;
	struct local__task *t;

	if (!b->p) {
		b->p = calloc(BATCH_N, sizeof(*b->p));
		b->cap = b->p ? BATCH_N : 0;
		b->ddir = ddir;
	}
	if (!b->p || !(t = calloc(1, sizeof(*t)))) {
		local__submit(r, sdir, ddir, name, rel, st);	/* out of memory: the plain path */
		return;
	}
	p = &b->p[b->n];
	memset(p, 0, sizeof(*p));
	p->sdir = sdir;
	p->ddir = ddir;
	p->st = *st;
	if (!(p->name = strdup(name)) || !(p->rel = strdup(rel))) {
		free(p->name);
		free(t);
		local__submit(r, sdir, ddir, name, rel, st);
		return;
	}
	b->n++;
	b->bytes += st->st_size;
	t->kind = T_BATCH_COPY;
	t->pend = p;
	_enqueue(r, t);
}

/* Rename a durable batch into place; returns how many were renamed. */
static size_t _batch_rename(struct local__run *r, struct local__batch *b, int e)
{
	size_t renamed = 0;

	for (size_t i = 0; i < b->n; i++) {
		struct local__pend *p = &b->p[i];

		if (p->state != 1)
			continue;
		if (!e && renameat(p->ddir, p->tmp, p->ddir, p->name) == 0) {
			p->state = 2;
			renamed++;
			continue;
		}
		unlinkat(p->ddir, p->tmp, 0);
		p->state = 0;
		if (e != EINTR)
			xfer_fail(&r->t, p->rel, e ? e : errno, e ? "cannot make durable" :
				  "cannot rename into place");
	}
	if (renamed && fsync(b->ddir) < 0) {
		e = errno;
		for (size_t i = 0; i < b->n; i++)
			if (b->p[i].state == 2) {
				b->p[i].state = 0;
				xfer_fail(&r->t, b->p[i].rel, e, "cannot make the directory durable for");
			}
		renamed = 0;
	}
	return renamed;
}

/*
 * Stage 2, on the walker: every copy of the batch finished; one syncfs()
 * makes their data and metadata durable, then they are renamed into place,
 * the directory is fsynced (the names are durable), and only then read back
 * and reported (stage 3).
 */
static void _batch_flush(struct local__run *r, struct local__batch *b)
{
	size_t copied = 0, renamed;
	int e = 0;

	/* This batch's copies and the previous batch's verifications are finished. */
	local__pool_drain(r);
	_batch_free(b->old, b->nold);
	b->old = NULL;
	b->nold = 0;
	if (!b->p)
		return;
	for (size_t i = 0; i < b->n; i++)
		copied += b->p[i].state == 1;
	if (copied && xfer_stopped(r->ctx))
		e = EINTR;
	else if (copied && syncfs(b->ddir) < 0)
		e = errno;
	renamed = _batch_rename(r, b, e);
	for (size_t i = 0; renamed && i < b->n; i++) {
		struct local__task *t;

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

void local__batch_maybe_flush(struct local__run *r, struct local__batch *b)
{
	if (b->n == BATCH_N || b->bytes >= BATCH_BYTES)
		_batch_flush(r, b);
}

void local__batch_end(struct local__run *r, struct local__batch *b)
{
	_batch_flush(r, b);
	local__pool_drain(r);
	_batch_free(b->old, b->nold);
	b->old = NULL;
	b->nold = 0;
}
