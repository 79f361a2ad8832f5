/*
 * xfer_pipeline_int.h - private to the engine's driver (xfer_pipeline.c: a
 * request, its walk and the copy of one entry; xfer_pipeline_pool.c: the copy
 * threads and SyncMode=batch; xfer_pipeline_group.c: destinations that group
 * files).
 *
 * Must never: be included outside the driver; endpoints see only
 * xfer_endpoint.h.
 */
#ifndef STAGEHAND_XFER_PIPELINE_INT_H
#define STAGEHAND_XFER_PIPELINE_INT_H

#include <limits.h>
#include <pthread.h>
#include <sys/stat.h>

#include "xfer.h"
#include "xfer_endpoint.h"
#include "xfer_engine.h"

#define PIPE_THREADS 16           /* copy threads per worker: small files are latency-bound */
#define PIPE_DIRS 16              /* directories being finished at once (2 descriptors each) */
#define PIPE_GENS 4               /* batches being committed or read back at once */

/* A small file of a batch, between its copy and its verification. */
struct pipe__pend {
	int sdir;
	char *name, *rel;
	struct stat st;
	struct xfer_wfile wf;        /* wf.dir: the destination directory */
	char cks[CKSUM_HEX_MAX];
	int64_t started;
	int state;                   /* 0 failed or kept, 1 copied, 2 in place */
};

/*
 * One batch of a directory's small files, from their copies to their
 * verification: copied by the threads, made durable and put in place by one
 * of them (the commit, once every copy of it has ended) while the others
 * copy the next batch, then read back by the threads.
 */
struct pipe__gen {
	struct pipe__pend *p;        /* BATCH_N of them */
	size_t n;
	int ddir;
	int64_t bytes;
	struct pipe__dirh *dh;       /* its directory (a reference) */
	int copies;                  /* its copies not ended (under the pool's lock) */
	int left;                    /* its tasks not ended: copies, commit, verifications (ditto) */
	int closed;                  /* handed to its commit: freed when left is 0 (ditto) */
};

/*
 * A directory of the walk as the copy threads see it: its two descriptors
 * stay open until the last task that uses them has ended; then (once the
 * walker has left it) the destination makes it durable and timestamped
 * (dir_done) and the descriptors are closed, on whichever thread that is.
 * So the walker goes on to the next directory while this one's last batch
 * is committed and read back.
 */
struct pipe__dirh {
	int sdir, ddir;              /* sdir: a duplicate of the walk's, or -1 */
	struct stat st;              /* the source directory's lstat, for dir_done */
	int refs;                    /* the walker's until it leaves; one per task or batch */
};

/* One directory's batch being filled, and the directory's handle. */
struct pipe__batch {
	struct pipe__gen *cur;       /* being filled and copied */
	int ddir;
	struct pipe__dirh *dh;       /* NULL: out of memory (the directory ends on the walker) */
};

struct pipe__task;

/* A grouping destination's open group: its members in the order they were added. */
struct pipe__group {
	int on;                      /* plan said this request groups */
	struct pipe__pend *p;        /* sdir, name, rel, st, cks, started of each */
	size_t n, cap;
};

struct pipe__run {
	struct xfer_ctx *ctx;
	const struct xfer_endpoint *src, *dst;
	struct xfer_ep *sep, *dep;   /* the two sides, as opened */
	struct xfer_buf tb0;         /* the walker's buffer */
	struct xfer_tally t;         /* counts and failures (thread-safe) */
	/* the copy threads (xfer_pipeline_pool.c) */
	pthread_t th[PIPE_THREADS];
	int nth;
	pthread_mutex_t pmu;
	pthread_cond_t cv_work, cv_done;
	struct pipe__task *head, *tail;
	int pending;                 /* queued + being copied */
	int quit;
	int gens;                    /* batches handed to their commit, not yet freed */
	int dirs;                    /* directories left by the walker, not yet done */
	struct pipe__group g;        /* xfer_pipeline_group.c */
};

/* ---- xfer_pipeline.c ---- */
/* Copy, make durable, verify and report one regular file. */
void pipe__copy_file(struct pipe__run *r, const struct xfer_buf *tb, int sdir,
		     const char *sname, int ddir, const char *name, const char *rel,
		     const struct stat *st);
/* Resume: verified by an earlier attempt and neither side changed since (counted kept). */
int pipe__resume_ok(struct pipe__run *r, int ddir, const char *name, const char *rel,
		    const struct stat *st);
/* Report a verified file; for archive with keep=no, remove its source now. */
void pipe__report(struct pipe__run *r, int sdir, const char *sname, const char *rel,
		  const struct stat *st, int64_t total, int64_t started, const char *cks,
		  const char *got);
/*
 * Open the source file and a temporary destination for it, stream the data
 * (xfer_engine_stream, or the big-file path when wf->vfd >= 0) and commit it
 * with flags. 0, or -1 after reporting why (EINTR: stopped, not reported).
 * cks gets the source's checksum, got the destination's on the big path.
 */
int pipe__transfer(struct pipe__run *r, const struct xfer_buf *tb, int sdir, const char *sname,
		   const char *rel, const struct stat *st, struct xfer_wfile *wf, int big,
		   unsigned cflags, char *cks, char *got);

/* keep=no: an archive's verified source file goes (a failure is a warning). */
void pipe__remove_source(struct pipe__run *r, int sdir, const char *sname, const char *rel);
/* Pass 1 (XR_TOTALS): what the source's listing holds; a tree through w. */
void pipe__count(struct pipe__run *r, struct xfer_root *sroot, int tree, struct xfer_walk *w);

/* ---- xfer_pipeline_group.c ---- */
/*
 * Open a grouping destination, count the source with its survey and follow
 * its plan (r->g.on, or r->dst replaced). XFER_OK, or a result with msg.
 */
int pipe__group_open(struct pipe__run *r, struct xfer_root *sroot, struct xfer_root *droot,
		     int tree, char *msg, size_t msglen);
/* A regular file or symlink of a grouping run: 1 when done with here (kept, grouped, failed). */
int pipe__group_visit(struct pipe__run *r, int sdir, int ddir, const char *name,
		      const char *rel, const struct stat *st);
/* Commit the open group and report its members. */
void pipe__group_flush(struct pipe__run *r);

/* ---- xfer_pipeline_pool.c ---- */
void pipe__pool_start(struct pipe__run *r);
/* Wait until every file handed out is finished. */
void pipe__pool_drain(struct pipe__run *r);
void pipe__pool_stop(struct pipe__run *r);
/* Copy a file on a thread (inline when there are none, or for a big file); dh may be NULL. */
void pipe__submit(struct pipe__run *r, struct pipe__dirh *dh, int sdir, int ddir,
		  const char *name, const char *rel, const struct stat *st);
/* SyncMode=batch: files up to this size go through a directory's batch. */
int pipe__batchable(const struct pipe__run *r, const struct stat *st);
void pipe__batch_add(struct pipe__run *r, struct pipe__batch *b, int sdir, int ddir,
		     const char *name, const char *rel, const struct stat *st);
/* Flush when the batch is full. */
void pipe__batch_maybe_flush(struct pipe__run *r, struct pipe__batch *b);
/* The directory's entries are all handed out: its last batch goes to its commit. */
void pipe__batch_end(struct pipe__run *r, struct pipe__batch *b);
/*
 * A directory's handle for ddir and a duplicate of sdir (-1: none), the
 * walker's reference held; the copy threads use its sdir. NULL when out of
 * memory or descriptors: the directory is then finished on the walker.
 */
struct pipe__dirh *pipe__dir_open(struct pipe__run *r, int ddir, int sdir);
/*
 * The walker leaves dh's directory (st: the source directory's lstat): dh is
 * done (dir_done, its descriptors closed, freed) once its last task ends,
 * maybe now. Waits while PIPE_DIRS directories are being finished.
 */
void pipe__dir_leave(struct pipe__run *r, struct pipe__dirh *dh, const struct stat *st);
/* The walker's reference dropped without dir_done (the root's, after a drain): freed. */
void pipe__dir_free(struct pipe__dirh *dh);

#endif /* STAGEHAND_XFER_PIPELINE_INT_H */
