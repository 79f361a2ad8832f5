/*
 * xfer_util.h - path helpers every transfer endpoint (local, url, bundle)
 * needs in the same form: relpath joining, making parents, opening a source
 * without following a symlink below a directory, and lifecycle labels on the
 * source. The rest of what endpoints share is the engine (xfer_engine.h).
 *
 * Must never: follow a symlink inside a source tree, or run outside a
 * worker that has dropped to the owner (same rules as the backends).
 */
#ifndef STAGEHAND_XFER_UTIL_H
#define STAGEHAND_XFER_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <time.h>

#include "xfer.h"

/*
 * The user.* extended attributes of sfd onto dfd, but for the lifecycle
 * labels (NS"stagehand.*"): they describe the source copy's life. Best
 * effort: an attribute that cannot be read or set is left out.
 */
void xfer_copy_xattrs(int sfd, int dfd, const char *ns);

/* A timestamp in nanoseconds since the epoch. */
int64_t xfer_ns(const struct timespec *ts);

/* out = "prefix/name" ("name" when prefix is ""). 0, or -1 when it does not fit. */
int xfer_join(char *out, size_t outlen, const char *prefix, const char *name);

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
 * following a symbolic link in any component below beneath: beneath itself
 * is opened normally ("/" checks every component), the rest with
 * resolve_open (common/resolve.h), the last with flags. Returns a
 * descriptor the caller owns, or -1 with errno set and why naming the
 * component that failed, in path below beneath, and how (a symbolic link
 * with its target).
 */
int xfer_open_beneath(const char *beneath, const char *path, int flags, char *why,
		      size_t whylen);

/*
 * Open a request's source (O_RDONLY | O_NOCTTY | O_NONBLOCK) and fstat it
 * into st: below ctx->beneath without following a symlink when it is set,
 * else normally. On failure returns -1 and msg says why, naming the #DATA
 * line when ctx->line is set; errno is kept.
 */
int xfer_open_source(const struct xfer_ctx *ctx, struct stat *st, char *msg, size_t msglen);

/*
 * Room for one more element in the array *p of *n used and *cap allocated
 * elements of elem bytes (doubling, from first; common/grow.h): 0, or -1
 * with errno ENOMEM or EOVERFLOW (*p and *cap are then unchanged).
 */
int xfer_grow(void **p, size_t n, size_t *cap, size_t elem, size_t first);

/* 1 if an entry failing with errno err cannot be fixed by a retry. */
int xfer_err_final(int err);

/*
 * Set one lifecycle label on the open source fd: through the daemon when
 * ctx->label_via_daemon (trusted. namespace), else directly. Failures are
 * logged as warnings, never fatal.
 */
void xfer_label(struct xfer_ctx *ctx, int fd, const char *name, const char *value);
/* The policy label, the location label (when location is not NULL), job and owner. */
void xfer_label_all(struct xfer_ctx *ctx, int fd, const char *policy, const char *location);

#endif /* STAGEHAND_XFER_UTIL_H */
