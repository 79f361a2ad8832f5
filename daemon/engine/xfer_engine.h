/*
 * xfer_engine.h - the transfer engine's shared pieces: what every backend
 * (local, null, bundle, url) uses, written once.
 *
 * Owns: the one tree walk of a local source (xfer_walk_tree, depth limit
 * XFER_WALK_DEPTH), the one read-hash-write loop and read-back verification
 * (xfer_engine_stream, xfer_engine_verify, xfer_engine_readback), the one
 * data write to a destination (xfer_engine_write, where the token bucket is
 * charged), the decision whether a file is part of this run or already done
 * (xfer_engine_want, the resume set), failure accounting with the one
 * per-entry error formatter (xfer_fail, xfer_failf) and the verdict of a
 * request (xfer_tally_verdict). The durable write itself (temporary name,
 * fsync, rename) is common/durable.h.
 *
 * The driver that puts these together for a request is xfer_pipeline.c; the
 * sides it moves data between are endpoints (xfer_endpoint.h) that keep only
 * what is their own: how to list, open, read, write and make durable on
 * their side. The local, null, url and bundle backends are all endpoints of
 * that driver.
 *
 * Must never: follow a symbolic link inside a source tree (every entry is
 * opened with openat(O_NOFOLLOW) from its parent's descriptor), or run
 * outside a worker that has dropped to the owner's identity.
 */
#ifndef STAGEHAND_XFER_ENGINE_H
#define STAGEHAND_XFER_ENGINE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "checksum.h"
#include "xfer.h"

/* ---- failure accounting and the counts of one request ---- */

/* Thread-safe once the copy threads run (every update takes mu). */
struct xfer_tally {
	struct xfer_ctx *ctx;
	int64_t files, bytes, skipped; /* counted before the copy (XR_TOTALS) */
	int64_t kept;                /* files verified by an earlier attempt and unchanged */
	int64_t verified;            /* files verified by this attempt */
	int failures, final_failures;
	char first_error[XFER_TEXT_MAX];
	pthread_mutex_t mu;
};

void xfer_tally_init(struct xfer_tally *t, struct xfer_ctx *ctx);
void xfer_tally_destroy(struct xfer_tally *t);
/* ++*counter (one of t's) under t's lock. */
void xfer_tally_add(struct xfer_tally *t, int64_t *counter);

/* 1 once SIGTERM asked the worker to stop. */
int xfer_stopped(const struct xfer_ctx *ctx);

/*
 * The per-entry error formatter: "WHAT 'REL': strerror(err)" as an
 * XR_ITEM_FAILED record; counted as final when xfer_err_final(err).
 */
void xfer_fail(struct xfer_tally *t, const char *rel, int err, const char *what);
/* The same with a message of the endpoint's own (final: a retry cannot help). */
void xfer_failf(struct xfer_tally *t, const char *rel, int final, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

/*
 * The verdict once every entry was tried: XFER_OK (msg ""), or the result
 * and msg. With count_check, a run that verified or kept fewer files than
 * it counted is retried: what names the tree in that message.
 */
int xfer_tally_verdict(const struct xfer_tally *t, int count_check, const char *what, char *msg,
		       size_t msglen);

/* Emit the request's XR_RESULT; returns result. */
int xfer_finish(struct xfer_ctx *ctx, int result, const char *msg);

/* ---- is this file part of this run, or already done? ---- */

enum xfer_want {
	XFER_WANT_COPY = 0,          /* copy it */
	XFER_WANT_KEPT,              /* verified by an earlier attempt, the source unchanged
					since: the endpoint checks its copy is still there */
	XFER_WANT_OTHER,             /* not this run's: another shard's file (counted kept;
					its own mover copies it) */
};

/*
 * The one decision, for a source file rel of size bytes last modified at
 * mtime_ns (-1 unknown): a run restricted to a shard (ctx->shard) leaves
 * out what the shard does not hold; else the resume set (ctx->done) lists
 * it with the same size and mtime, or it is to be copied.
 */
enum xfer_want xfer_engine_want(const struct xfer_ctx *ctx, const char *rel, int64_t size,
				int64_t mtime_ns);

/* ---- data: the one write, the one read-hash loop, read-back ---- */

/* A buffer owned by one thread. */
struct xfer_buf {
	char *p;
	size_t len;
};

/*
 * Every data write to a destination: charges n bytes to ctx->bucket
 * (xfer_bucket_take: the bandwidth cap and yield), then writes all of buf
 * at off (off < 0: at fd's offset). fd < 0: the endpoint moves the bytes
 * itself (an upload: libcurl sends what its read callback returns), only
 * the charge is taken. 0, or the errno of the failed write.
 */
int xfer_engine_write(struct xfer_ctx *ctx, int fd, const void *buf, size_t n, int64_t off);

/* Bytes read back for verification are charged to the bucket too (not a write). */
void xfer_engine_pace(struct xfer_ctx *ctx, uint64_t n);

#define XFER_S_ALIGN 1u              /* fd is O_DIRECT: reads rounded up to 4096 bytes */
#define XFER_S_NOPACE 2u             /* reads are not charged to the bucket */

/*
 * Hash everything fd holds from offset 0 into cks (algorithm ctx->algo),
 * writing it to dfd as well through xfer_engine_write (dfd < 0: hash only).
 * expect is the size seen by the walk (-1 unknown): a short read that ends
 * exactly there is the end of the file. *total gets the bytes read.
 * 0, or an errno (EINTR: stopped).
 */
int xfer_engine_stream(struct xfer_ctx *ctx, const struct xfer_buf *tb, int fd, int dfd,
		       int64_t expect, unsigned flags, int64_t *total, char *cks);

/*
 * Read ddir/name back from the device (O_DIRECT when tb is aligned, else
 * after dropping its cached pages) and hash it into cks. EIO when it does
 * not hold expect bytes.
 */
int xfer_engine_verify(struct xfer_ctx *ctx, const struct xfer_buf *tb, int ddir,
		       const char *name, int64_t expect, char *cks);

/* The same for an open fd (cached pages dropped first); *len gets its size. */
int xfer_engine_readback(struct xfer_ctx *ctx, const struct xfer_buf *tb, int fd,
			 unsigned flags, int64_t *len, char *cks);

/* ---- the tree walk of a local source ---- */

/*
 * Directories deeper than this below the source root are not entered: each
 * level holds a descriptor and a stack frame, and a tree this deep is a
 * mistake or an attack, never data.
 */
#define XFER_WALK_DEPTH 256

struct xfer_walk_dir {
	int fd;                      /* the directory (the walk never follows a symlink) */
	const char *rel;             /* its relpath, "" at the root */
	int depth;                   /* 0 at the root */
	const struct stat *st;       /* its lstat (NULL at the root) */
	void *data;                  /* the endpoint's per-directory state */
};

struct xfer_walk {
	struct xfer_ctx *ctx;
	void *arg;                   /* the endpoint's run */
	/*
	 * Every entry but "." and "..", with its lstat. For a directory,
	 * return 1 to walk it; any other entry's return is ignored.
	 */
	int (*visit)(struct xfer_walk *w, struct xfer_walk_dir *dir, const char *name,
		     const char *rel, const struct stat *st);
	/* Optional: sub was opened, before its entries; < 0 leaves it out. */
	int (*enter)(struct xfer_walk *w, struct xfer_walk_dir *dir, struct xfer_walk_dir *sub,
		     const char *name);
	/* Optional: after sub's entries (sub->fd is closed after this). */
	void (*leave)(struct xfer_walk *w, struct xfer_walk_dir *dir, struct xfer_walk_dir *sub,
		      const char *name);
	/* An entry that cannot be walked: what says why, err is the errno. */
	void (*fail)(struct xfer_walk *w, const char *rel, int err, const char *what);
};

/*
 * Walk dir's entries, depth first, in readdir order, until done or
 * ctx->stop. Recursion is bounded by XFER_WALK_DEPTH (a deeper directory is
 * reported to fail with ELOOP).
 */
void xfer_walk_tree(struct xfer_walk *w, struct xfer_walk_dir *dir);

/*
 * Pass 1 of a tree copy: the regular files (and their bytes) under dirfd
 * into t->files and t->bytes, the entries that will not be copied into
 * t->skipped: excluded directories (ctx->exclude), special files, and
 * symlinks when links_skipped. Unreadable entries are left to the copy pass.
 */
void xfer_count_tree(struct xfer_tally *t, int dirfd, int links_skipped);

/*
 * The same count through any listing: fills w (its arg is c) so that a
 * source endpoint's list operation (xfer_endpoint.h) can drive it.
 */
struct xfer_count {
	struct xfer_tally *t;
	int links_skipped;
};
void xfer_count_init(struct xfer_walk *w, struct xfer_count *c, struct xfer_tally *t,
		     int links_skipped);

/*
 * Open the directory named by the first len bytes of rel (a relpath below
 * root; len 0: root itself) with resolve_open (common/resolve.h): never
 * through a symlink, '..' refused, missing directories made with mode when
 * mode is not 0. A descriptor the caller owns, or -1 with errno set.
 */
int xfer_open_dir(int root, const char *rel, size_t len, int mode);

#endif /* STAGEHAND_XFER_ENGINE_H */
