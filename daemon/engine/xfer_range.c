/*
 * xfer_range.c - see xfer_range.h: the range driver. It reads and writes
 * through the endpoints' operations (xfer_endpoint.h: the core's stat,
 * open_read, commit and remove, device->abort, and the range table), as
 * the pipeline's driver does, and names no backend but the default one.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "xfer_big.h"
#include "xfer_endpoint.h"
#include "xfer_engine.h"
#include "xfer_range.h"
#include "xfer_util.h"

#define RANGE_BUF (4u << 20)

/* Both sides of one request, opened by their endpoints. */
struct _rrun {
	struct xfer_ctx *ctx;
	const struct xfer_endpoint *src, *dst;
	struct xfer_ep *sep, *dep;   /* owned: ended by _close */
	struct xfer_root sroot, droot;
	char *buf;                   /* owned: RANGE_BUF bytes, aligned */
};

/* A file's name below its directory. */
static const char *_base(const char *rel)
{
	const char *slash = strrchr(rel, '/');

	return slash ? slash + 1 : rel;
}

/*
 * Open both sides (the source as the request names it, the destination's
 * tree); XFER_OK, or XFER_RETRYABLE with msg. A side without a range table
 * cannot take ranges.
 */
static int _open(struct _rrun *x, char *msg, size_t msglen)
{
	x->sroot.dir = x->droot.dir = -1;
	if (!x->src->range || !x->dst->range || !x->src->request->open_source ||
	    !x->dst->request->open_dest || !x->dst->device || !x->dst->device->abort) {
		snprintf(msg, msglen, "the %s and %s backends take no byte ranges", x->src->name,
			 x->dst->name);
		return XFER_RETRYABLE;
	}
	if (x->src->request->open_source(x->ctx, &x->sep, &x->sroot, msg, msglen) != XFER_OK)
		return XFER_RETRYABLE;
	if (!S_ISDIR(x->sroot.st.st_mode)) {
		snprintf(msg, msglen, "cannot copy byte ranges of %s: %s", x->ctx->source,
			 strerror(ENOTDIR));
		return XFER_RETRYABLE;
	}
	if (x->dst->request->open_dest(x->ctx, &x->sroot, &x->dep, &x->droot, msg,
					msglen) != XFER_OK)
		return XFER_RETRYABLE;
	return XFER_OK;
}

static void _close(struct _rrun *x)
{
	if (x->dep)
		x->dst->request->close(x->dep, &x->droot);
	if (x->sep)
		x->src->request->close(x->sep, &x->sroot);
	free(x->buf);
}

/*
 * The source file rel, never through a symlink: its descriptor (cur: what
 * was opened) with *sdir its directory's handle (the caller releases it),
 * or -1 with errno and *what.
 */
static int _open_src(struct _rrun *x, const char *rel, int *sdir, struct stat *cur,
		     const char **what)
{
	const char *name = _base(rel);
	struct stat st;
	int fd, e;

	if ((e = x->src->range->parent(x->sep, &x->sroot, rel, 0, sdir)) != 0) {
		*what = "cannot open the source directory of";
	} else if ((e = x->src->stat(x->sep, *sdir, name, &st)) != 0) {
		*what = "cannot open source";
	} else if (!S_ISREG(st.st_mode)) {
		e = EINVAL;
	} else if ((fd = x->src->open_read(x->sep, *sdir, name, &st, cur)) >= 0) {
		return fd;
	} else {
		e = errno == EAGAIN ? EINVAL : errno;
		*what = "cannot open source";
	}
	if (e == EINVAL)
		*what = "source is no longer a regular file:";
	errno = e;
	return -1;
}

/*
 * Hash len bytes of fd from off into cks; with dfd >= 0 write them there
 * too (the engine's write path: the bucket is charged, pacing applies),
 * else charge them as a read-back. 0 or an errno (EINTR: stopped).
 */
static int _pass(struct xfer_ctx *ctx, char *buf, int fd, int dfd, int64_t off, int64_t len,
		 char *cks)
{
	struct cksum c;
	int e = 0;

	if (cksum_init(&c, ctx->algo) < 0)
		return ENOMEM;
	for (int64_t at = off; at < off + len && !e; ) {
		size_t n = (size_t)(off + len - at < RANGE_BUF ? off + len - at : RANGE_BUF);

		if (xfer_stopped(ctx)) {
			e = EINTR;
			break;
		}
		if (dfd < 0)
			xfer_engine_pace(ctx, n);
		/* Ends early (EAGAIN): a source that shrank, or a temporary file cut short. */
		if ((e = xfer_read_full(fd, 0, buf, n, at)) != 0) {
			if (e == EAGAIN)
				e = dfd >= 0 ? ESTALE : EIO;
			break;
		}
		cksum_update(&c, buf, n);
		if (dfd >= 0)
			e = xfer_engine_write(ctx, dfd, buf, n, at);
		at += (int64_t)n;
	}
	if (e) {
		cksum_abort(&c);
		return e;
	}
	cksum_final(&c, cks);
	return 0;
}

/*
 * Copy one range into the open temporary file, make it durable and read it
 * back: 0, or an errno with *what. cks gets the read-back's checksum.
 */
static int _range(struct _rrun *x, struct xfer_wfile *wf, int sfd, const struct stat *st,
		  const struct xfer_range *r, char *got, const char **what)
{
	char cks[CKSUM_HEX_MAX];
	struct stat after;
	int e;

	*what = "copy failed:";
	e = _pass(x->ctx, x->buf, sfd, wf->fd, r->off, r->len, cks);
	if (!e && (fstat(sfd, &after) < 0 || xfer_ns(&after.st_mtim) != xfer_ns(&st->st_mtim) ||
		   after.st_size != st->st_size))
		e = ESTALE;
	if (e == ESTALE)
		*what = "source changed while its range was copied:";
	if (!e && (e = x->dst->range->sync(x->dep, wf, r->off, r->len)) != 0)
		*what = "cannot make durable:";
	if (!e) {
		*what = "cannot read back";
		e = _pass(x->ctx, x->buf, wf->fd, -1, r->off, r->len, got);
	}
	if (!e && strcmp(cks, got) != 0) {
		*what = "read-back does not match the source:";
		e = EIO;
	}
	return e;
}

/* One range: 0, or an errno with *what (the step that failed). */
static int _copy(struct _rrun *x, const struct xfer_range *r, const char **what)
{
	struct xfer_wfile wf = { .dir = -1, .name = _base(r->relpath), .fd = -1, .vfd = -1 };
	struct stat st;
	char got[CKSUM_HEX_MAX];
	int sdir = -1, sfd, e;

	sfd = _open_src(x, r->relpath, &sdir, &st, what);
	e = sfd < 0 ? errno : 0;
	x->src->range->release(x->sep, sdir);
	if (e)
		return e;
	if (st.st_size != r->size) {
		close(sfd);
		*what = "source changed size since the request was planned:";
		return ESTALE;
	}
	if ((e = x->dst->range->parent(x->dep, &x->droot, r->relpath, 1, &wf.dir)) != 0)
		*what = "cannot make the destination directory of";
	else
		e = x->dst->range->open_shared(x->dep, &wf, r->size, what);
	if (!e)
		e = _range(x, &wf, sfd, &st, r, got, what);
	if (wf.fd >= 0)
		close(wf.fd);	/* the temporary file stays: other movers write into it */
	x->dst->range->release(x->dep, wf.dir);
	close(sfd);
	if (!e)
		xfer_emit(x->ctx, &(struct xfer_note){
			.type = XR_RANGE_DONE, .path = r->relpath, .a = r->off, .b = r->len,
			.c = st.st_size, .d = xfer_ns(&st.st_mtim), .cks = got });
	return e;
}

/* Range i's outcome e: its log line, or the request's result with msg. */
static int _outcome(struct xfer_ctx *ctx, const struct xfer_range *r, int e, const char *what,
		    char *msg, size_t msglen)
{
	if (e == EINTR && xfer_stopped(ctx)) {
		snprintf(msg, msglen, "stopped");
		return XFER_INTERRUPTED;
	}
	if (e == ESTALE) {
		/* No mover can finish a plan of another version of the file: the
		   range stays undone, so the final pass copies the file whole. */
		xfer_logf(ctx, LOG_LVL_WARN, "request %lld: %s '%s' (bytes %lld..%lld of %lld "
			  "planned); left to the request's final pass, which copies it whole",
			  (long long)ctx->request_id, what, r->relpath, (long long)r->off,
			  (long long)(r->off + r->len), (long long)r->size);
		return XFER_OK;
	}
	if (e) {
		snprintf(msg, msglen, "%s '%s' (bytes %lld..%lld of %lld): %s", what, r->relpath,
			 (long long)r->off, (long long)(r->off + r->len), (long long)r->size,
			 strerror(e));
		return xfer_err_final(e) ? XFER_FINAL : XFER_RETRYABLE;
	}
	xfer_logf(ctx, LOG_LVL_INFO, "'%s': bytes %lld..%lld copied and verified", r->relpath,
		  (long long)r->off, (long long)(r->off + r->len));
	return XFER_OK;
}

int xfer_range_run_between(struct xfer_ctx *ctx, const struct xfer_endpoint *src,
			   const struct xfer_endpoint *dst, const struct xfer_range *r, size_t n,
			   char *msg, size_t msglen)
{
	struct _rrun x = { .ctx = ctx, .src = src, .dst = dst };
	int rc;

	msg[0] = '\0';
	if (!n)
		return XFER_OK;
	rc = _open(&x, msg, msglen);
	if (rc == XFER_OK && posix_memalign((void **)&x.buf, 4096, RANGE_BUF) != 0) {
		x.buf = NULL;
		snprintf(msg, msglen, "out of memory");
		rc = XFER_RETRYABLE;
	}
	for (size_t i = 0; i < n && rc == XFER_OK; i++) {
		const char *what = "";
		int e = _copy(&x, &r[i], &what);

		rc = _outcome(ctx, &r[i], e, what, msg, msglen);
	}
	_close(&x);
	return rc;
}

/* Movers copy ranges between POSIX trees, the default endpoint's. */
int xfer_range_run(struct xfer_ctx *ctx, const struct xfer_range *r, size_t n, char *msg,
		   size_t msglen)
{
	return xfer_range_run_between(ctx, &xfer_ep_local, &xfer_ep_local, r, n, msg, msglen);
}

/* ---- the final pass ---- */

/* keep=no: an archive's source file goes once its copy is durable; a failure is a warning. */
static void _remove_source(struct _rrun *x, int sdir, const char *rel)
{
	int e;

	if (x->ctx->keep || strcmp(x->ctx->action, "archive") != 0 || x->dst->discards)
		return;
	if ((e = x->src->remove(x->sep, sdir, _base(rel))) != 0)
		xfer_logf(x->ctx, LOG_LVL_WARN, "request %lld: keep=no: cannot remove source '%s': "
			  "%s", (long long)x->ctx->request_id, rel, strerror(e));
}

/* The temporary file of e, as the ranges left it, put in place: 0 or an errno, *what. */
static int _finish_tmp(struct _rrun *x, struct xfer_wfile *wf, int sfd, const struct stat *st,
		       const struct xfer_done_ent *e, const char **what)
{
	struct stat dst;
	int err;

	if ((err = x->dst->range->parent(x->dep, &x->droot, e->relpath, 0, &wf->dir)) != 0) {
		*what = "cannot open the destination directory of";
		return err;
	}
	if ((err = x->dst->range->open_shared(x->dep, wf, -1, what)) != 0)
		return err;
	if (st->st_size != e->size || xfer_ns(&st->st_mtim) != e->mtime_ns) {
		*what = "source changed since its ranges were copied:";
		x->dst->device->abort(x->dep, wf);	/* stale bytes: the walk copies it whole */
		return ESTALE;
	}
	if (fstat(wf->fd, &dst) < 0 || !S_ISREG(dst.st_mode) || dst.st_size != e->size) {
		*what = "the temporary file has another size:";
		return EIO;
	}
	*what = "cannot make durable or rename";
	return x->dst->commit(x->dep, wf, sfd, st, XFER_C_DIRSYNC);
}

/* Finish e: 0, or an errno with *what. */
static int _finish(struct _rrun *x, const struct xfer_done_ent *e, int64_t started,
		   const char **what)
{
	struct xfer_wfile wf = { .dir = -1, .name = _base(e->relpath), .fd = -1, .vfd = -1 };
	struct stat st;
	int sdir = -1, sfd, err;

	sfd = _open_src(x, e->relpath, &sdir, &st, what);
	err = sfd < 0 ? errno : _finish_tmp(x, &wf, sfd, &st, e, what);
	if (!err) {
		xfer_emit(x->ctx, &(struct xfer_note){
			.type = XR_ITEM_FILE, .path = e->relpath, .a = e->size, .b = e->mtime_ns,
			.c = (int)(st.st_mode & 07777), .d = started, .e = (int64_t)time(NULL),
			.cks = e->ranged_cks, .cks2 = e->ranged_cks });
		_remove_source(x, sdir, e->relpath);
	}
	if (wf.fd >= 0)
		close(wf.fd);
	x->dst->range->release(x->dep, wf.dir);
	x->src->range->release(x->sep, sdir);
	if (sfd >= 0)
		close(sfd);
	return err;
}

void xfer_range_finish_between(struct xfer_ctx *ctx, const struct xfer_endpoint *src,
			       const struct xfer_endpoint *dst, struct xfer_done_ent *done,
			       size_t ndone)
{
	struct _rrun x = { .ctx = ctx, .src = src, .dst = dst };
	int64_t started = (int64_t)time(NULL);
	char msg[XFER_TEXT_MAX];
	size_t i;
	int opened;

	for (i = 0; i < ndone && !done[i].ranged_cks; i++)
		;
	if (i == ndone)
		return;	/* nothing ranged: the common case */
	opened = _open(&x, msg, sizeof(msg)) == XFER_OK;
	for (i = 0; i < ndone; i++) {
		const char *what = "cannot open the source or destination of";
		int e;

		if (!done[i].ranged_cks)
			continue;
		e = !opened ? EIO : _finish(&x, &done[i], started, &what);
		if (!e) {
			xfer_logf(ctx, LOG_LVL_INFO, "request %lld: '%s' finished from the byte ranges "
				  "movers copied", (long long)ctx->request_id, done[i].relpath);
			continue;
		}
		xfer_logf(ctx, LOG_LVL_WARN, "request %lld: %s '%s': %s; it is copied whole "
			  "instead of from its ranges", (long long)ctx->request_id, what,
			  done[i].relpath, strerror(e));
		/* No file has this size: the walk copies it (xfer_engine_want). */
		done[i].size = -1;
	}
	_close(&x);
}

void xfer_range_finish(struct xfer_ctx *ctx, struct xfer_done_ent *done, size_t ndone)
{
	xfer_range_finish_between(ctx, &xfer_ep_local, &xfer_ep_local, done, ndone);
}
