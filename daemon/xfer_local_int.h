/*
 * xfer_local_int.h - private to the local endpoint (xfer_local.c, the walk
 * and the copy of one file; xfer_local_pool.c, the copy threads and
 * SyncMode=batch).
 *
 * Must never: be included outside the local endpoint.
 */
#ifndef STAGEHAND_XFER_LOCAL_INT_H
#define STAGEHAND_XFER_LOCAL_INT_H

#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>

#include "xfer.h"
#include "xfer_engine.h"

#define LOCAL_THREADS 16          /* copy threads per worker: small files are latency-bound */

/* A small file of a batch, between its copy and its verification. */
struct local__pend {
	int sdir, ddir;
	char *name, *rel;
	struct stat st;
	char tmp[NAME_MAX + 1];
	char cks[CKSUM_HEX_MAX];
	int64_t total, started;
	int state;                   /* 0 failed or kept, 1 copied, 2 renamed */
};

/* One directory's batch: copied by the threads, synced and renamed by the walker. */
struct local__batch {
	struct local__pend *p;
	size_t n, cap;
	int ddir;
	int64_t bytes;
	struct local__pend *old;     /* the previous batch, being verified by the threads */
	size_t nold;
};

struct local__task;

struct local__run {
	struct xfer_ctx *ctx;
	int null;                    /* null endpoint: read and checksum only */
	struct xfer_buf tb0;         /* the walker's buffer */
	struct xfer_tally t;         /* counts and failures (thread-safe) */
	/* the copy threads (xfer_local_pool.c) */
	pthread_t th[LOCAL_THREADS];
	int nth;
	pthread_mutex_t pmu;
	pthread_cond_t cv_work, cv_done;
	struct local__task *head, *tail;
	int pending;                 /* queued + being copied */
	int quit;
};

/* ---- xfer_local.c ---- */
/* Copy, make durable, verify and report one regular file. */
void local__copy_file(struct local__run *r, const struct xfer_buf *tb, int sdir,
		      const char *sname, int ddir, const char *name, const char *rel,
		      const struct stat *st);
/* Resume: verified by an earlier attempt and neither side changed since (counted kept). */
int local__resume_ok(struct local__run *r, int ddir, const char *name, const char *rel,
		     const struct stat *st);
/* Report a verified file; for archive with keep=no, remove its source now. */
void local__report(struct local__run *r, int sdir, const char *sname, const char *rel,
		   const struct stat *st, int64_t total, int64_t started, const char *cks,
		   const char *got);
/*
 * The file's data and metadata into the open temporary file dfd (no fsync;
 * dfd < 0: read and hash only). vfd >= 0: a big file, copied and verified
 * through it by xfer_big.c (got: the destination's checksum). st: the walk's
 * lstat, cur: the open source's. 0 or an errno (EAGAIN: the source changed).
 */
int local__fill(struct local__run *r, const struct xfer_buf *tb, int sfd, int dfd, int vfd,
		const struct stat *st, const struct stat *cur, int64_t *total, char *cks,
		char *got);
/* Open a source file of the walk; -1 after reporting why. */
int local__open_source(struct local__run *r, int sdir, const char *sname, const char *rel,
		       const struct stat *st, struct stat *cur);

/* ---- xfer_local_pool.c ---- */
void local__pool_start(struct local__run *r);
/* Wait until every file handed out is finished. */
void local__pool_drain(struct local__run *r);
void local__pool_stop(struct local__run *r);
/* Copy a file on a thread (inline when there are none, or for a big file). */
void local__submit(struct local__run *r, int sdir, int ddir, const char *name, const char *rel,
		   const struct stat *st);
/* SyncMode=batch: files up to this size go through a directory's batch. */
int local__batchable(const struct local__run *r, const struct stat *st);
void local__batch_add(struct local__run *r, struct local__batch *b, int sdir, int ddir,
		      const char *name, const char *rel, const struct stat *st);
/* Flush when the batch is full. */
void local__batch_maybe_flush(struct local__run *r, struct local__batch *b);
/* The directory is done: its batch flushed and verified, memory released. */
void local__batch_end(struct local__run *r, struct local__batch *b);

#endif /* STAGEHAND_XFER_LOCAL_INT_H */
