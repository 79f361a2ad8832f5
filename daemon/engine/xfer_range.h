/*
 * xfer_range.h - one big file copied in byte ranges by several movers, and
 * the finish of the file once every range is done.
 *
 * Owns: the ranged copy (xfer_range_run: each range of a source file is
 * written into the destination's temporary file at the same offsets,
 * through the engine's one write path, made durable, read back from the
 * device and hashed, then reported with XR_RANGE_DONE), and the finish
 * (xfer_range_finish, in the request's final pass: metadata, fsync, rename
 * to the final name, one XR_ITEM_FILE for the whole file). Like the
 * pipeline's driver it touches files only through the endpoints'
 * operations (xfer_endpoint.h: the core, device->abort and the range
 * table); the endpoint decides how a directory is opened, how the shared
 * temporary file is made and how a range is made durable.
 *
 * The temporary file is the engine's own name for it (durable_tmpname with
 * the request id), created with its final size by whichever mover comes
 * first; the others open it. A range is always written whole, so what an
 * interrupted mover left in its range is overwritten by the next one.
 *
 * Verification: each range's read-back must hash like the source bytes
 * that were written; the daemon records those checksums, and the finish
 * checks the source still has the size and mtime every range saw. The whole
 * file is not read back again at the finish: that would be one node reading
 * the whole file serially, which is what splitting it avoids.
 *
 * Must never: follow a symlink below the source or destination root (every
 * component is opened with openat(O_NOFOLLOW) from its parent), write
 * outside its range, remove a temporary file other movers write into, or
 * run outside a process that is the request's owner.
 */
#ifndef STAGEHAND_XFER_RANGE_H
#define STAGEHAND_XFER_RANGE_H

#include <stddef.h>
#include <stdint.h>

#include "xfer.h"

/* One range to copy (borrowed relpath, below ctx->source and ctx->dest). */
struct xfer_range {
	const char *relpath;
	int64_t off, len;
	int64_t size;                /* the file's size when the request was planned */
};

/*
 * Copy ranges r[0..n) of ctx's request (a directory tree) and report each
 * with XR_RANGE_DONE. Returns enum xfer_result: XFER_OK when every range
 * was copied; else the first failure, with msg saying what, where and why.
 * Stops early when *ctx->stop is set (XFER_INTERRUPTED).
 */
int xfer_range_run(struct xfer_ctx *ctx, const struct xfer_range *r, size_t n, char *msg,
		   size_t msglen);

/*
 * The same between two endpoints that take byte ranges (their range table,
 * xfer_endpoint.h); xfer_range_run is this between local trees. A side
 * without one: XFER_RETRYABLE with msg.
 */
struct xfer_endpoint;
int xfer_range_run_between(struct xfer_ctx *ctx, const struct xfer_endpoint *src,
			   const struct xfer_endpoint *dst, const struct xfer_range *r, size_t n,
			   char *msg, size_t msglen);

/*
 * The final pass: finish every entry of done[0..ndone) that has ranged_cks
 * (its ranges were all copied) and report it with XR_ITEM_FILE; it stays in
 * the resume set, so the walk keeps it. An entry that cannot be finished
 * (the source changed, the temporary file is gone) gets size -1, with a
 * warning, so that the walk copies the file whole.
 */
void xfer_range_finish(struct xfer_ctx *ctx, struct xfer_done_ent *done, size_t ndone);
/* The same between two endpoints that take byte ranges. */
void xfer_range_finish_between(struct xfer_ctx *ctx, const struct xfer_endpoint *src,
			       const struct xfer_endpoint *dst, struct xfer_done_ent *done,
			       size_t ndone);

#endif /* STAGEHAND_XFER_RANGE_H */
