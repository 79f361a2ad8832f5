/*
 * xfer_util.h - small pieces every transfer backend (local, url, bundle)
 * needs in the same form: relpath joining, temporary names, the count pass
 * over a source tree, lifecycle labels on the source, and the summary of
 * per-entry failures.
 *
 * Must never: follow a symlink inside a source tree, or run outside a
 * worker that has dropped to the owner (same rules as the backends).
 */
#ifndef STAGEHAND_XFER_UTIL_H
#define STAGEHAND_XFER_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "xfer.h"

/* A timestamp in nanoseconds since the epoch. */
int64_t xfer_ns(const struct timespec *ts);

/* out = "prefix/name" ("name" when prefix is ""). 0, or -1 when it does not fit. */
int xfer_join(char *out, size_t outlen, const char *prefix, const char *name);

/*
 * The temporary name a file is written to in its destination directory:
 * ".NAME.stagehand-ID", or ".stagehand-ID-HASH" when that is longer than
 * NAME_MAX. 0, or -1 when it does not fit in out.
 */
int xfer_tmpname(char *out, size_t outlen, const char *name, int64_t id);

/*
 * mkdir -p of path's parents (as the owner; existing components are fine).
 * 0, or -1 with why naming the first mkdir that failed, its errno and, when
 * permission was refused, the owner and mode of the directory it was made in.
 */
int xfer_mkparents(const char *path, char *why, size_t whylen);

/* why = "mkdir PATH: strerror(e)", with the parent's owner and mode for EACCES/EPERM. */
void xfer_mkdir_why(const char *path, int e, char *why, size_t whylen);

/*
 * Open path, which lies below the directory beneath (an absolute path the
 * site controls: a scratch root or the job's working directory), without
 * following a symbolic link in any component below beneath: every component
 * is opened with openat(O_NOFOLLOW) from the one before it, the last with
 * flags | O_NOFOLLOW. beneath itself is opened normally; beneath "/" checks
 * every component. Returns a descriptor the caller owns, or -1 with errno set
 * and why saying which component failed and how (a symbolic link is named,
 * with its target).
 */
int xfer_open_beneath(const char *beneath, const char *path, int flags, char *why,
		      size_t whylen);

/*
 * Open a request's source: below ctx->beneath without following a symlink
 * when it is set, else normally. On failure returns -1 and msg says why,
 * naming the #DATA line when ctx->line is set; errno is kept.
 */
int xfer_open_source(const struct xfer_ctx *ctx, int flags, char *msg, size_t msglen);

/* 1 if an entry failing with errno err cannot be fixed by a retry. */
int xfer_err_final(int err);

/*
 * Pass 1 of a tree copy: add the regular files (and their bytes) under the
 * directory dirfd to *files and *bytes, and the entries that will not be
 * copied to *skipped: excluded directories (ctx->exclude), special files,
 * and symlinks when links_skipped is set. prefix is dirfd's relpath ("" at
 * the root). Nothing is followed; directories deeper than max_depth are not
 * entered. Unreadable entries are left to the copy pass to report.
 */
void xfer_count_tree(const struct xfer_ctx *ctx, int dirfd, const char *prefix, int depth,
		     int max_depth, int links_skipped, int64_t *files, int64_t *bytes,
		     int64_t *skipped);

/*
 * Set one lifecycle label on the open source fd: through the daemon when
 * ctx->label_via_daemon (trusted. namespace), else directly. Failures are
 * logged as warnings, never fatal.
 */
void xfer_label(struct xfer_ctx *ctx, int fd, const char *name, const char *value);
/* The policy label, the location label (when location is not NULL), job and owner. */
void xfer_label_all(struct xfer_ctx *ctx, int fd, const char *policy, const char *location);

/*
 * The result of a request with failures (> 0) entries failed: msg says how
 * many and the first error; XFER_FINAL when every failure was final, else
 * XFER_RETRYABLE.
 */
int xfer_failed_result(int failures, int final_failures, const char *first_error, char *msg,
		       size_t msglen);

#endif /* STAGEHAND_XFER_UTIL_H */
