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
#define PIPE_STAGES_QUEUED 8      /* stages queued at most (a directory's last: 2 fds) */

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
 * What the walker handed out for a directory since its last stage was
 * queued (xfer_pipeline_pool.c): the files copied whole, and with
 * SyncMode=batch its batch of small files, copied by the threads, then made
 * durable and put in place by the walker, then read back by the threads.
 * A directory's last stage ends it (end: ddir, sdir, st for dir_done).
 */
struct pipe__stage {
	struct pipe__pend *p;        /* the batch (SyncMode=batch), n of them */
	size_t n;
	int64_t bytes;
	int left;                    /* its tasks not finished (under pmu) */
	int committed;               /* its batch in place; its read-backs handed out */
	int end;                     /* the directory ends with it */
	int ddir, sdir;              /* sdir: the directory's own descriptor of the source */
	struct stat st;
	struct pipe__stage *next;
};

/* A directory's stage being filled. */
struct pipe__batch {
	struct pipe__stage *s;       /* NULL until its next file */
	int ddir;
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
	struct pipe__stage *sq_head, *sq_tail;  /* queued stages, oldest first */
	int sq_n;
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
/* A source file as the walk found it: its directory's handle, name, path in the request, stat. */
struct pipe__file {
	int sdir;
	const char *sname, *rel;     /* borrowed */
	const struct stat *st;       /* borrowed */
};

/* Report a verified file; for archive with keep=no, remove its source now. */
void pipe__report(struct pipe__run *r, const struct pipe__file *f, int64_t total,
		  int64_t started, const char *cks, const char *got);
/*
 * Open the source file and a temporary destination for it, stream the data
 * (xfer_engine_stream, or the big-file path when wf->vfd >= 0) and commit it
 * with flags. 0, or -1 after reporting why (EINTR: stopped, not reported).
 * cks gets the source's checksum, got the destination's on the big path.
 */
int pipe__transfer(struct pipe__run *r, const struct xfer_buf *tb, const struct pipe__file *f,
		   struct xfer_wfile *wf, int big, unsigned cflags, char *cks, char *got);

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
void pipe__pool_stop(struct pipe__run *r);
/* Copy a file on a thread, counted in b's stage (inline when there are no threads, no
   b, or for a big file). */
void pipe__submit(struct pipe__run *r, struct pipe__batch *b, int sdir, int ddir,
		  const char *name, const char *rel, const struct stat *st);
/* SyncMode=batch: files up to this size go through a directory's batch. */
int pipe__batchable(const struct pipe__run *r, const struct stat *st);
void pipe__batch_add(struct pipe__run *r, struct pipe__batch *b, int sdir, int ddir,
		     const char *name, const char *rel, const struct stat *st);
/* A full batch: its stage queued, the ones before committed while it is copied. */
void pipe__batch_maybe_flush(struct pipe__run *r, struct pipe__batch *b);
/* b's stage queued and every stage ended (the caller then ends b's directory). */
void pipe__batch_end(struct pipe__run *r, struct pipe__batch *b);
/*
 * The walk left a directory: its stage, queued, ends it (dir_done with
 * sdir, which is then closed) once every file handed out for it is in place
 * and verified; the walker goes on meanwhile. Without copy threads, or out
 * of memory, it ends now.
 */
void pipe__dir_leave(struct pipe__run *r, struct pipe__batch *b, int ddir, int sdir,
		     const struct stat *st);

#endif /* STAGEHAND_XFER_PIPELINE_INT_H */
