/* xfer_range.c - see xfer_range.h. */
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

#include "durable.h"
#include "log.h"
#include "xfer_big.h"
#include "xfer_engine.h"
#include "xfer_range.h"
#include "xfer_util.h"

#define RANGE_BUF (4u << 20)

/* A file's place: its parent directory (first dlen bytes of rel) and name. */
static const char *_split(const char *rel, size_t *dlen)
{
	const char *slash = strrchr(rel, '/');

	*dlen = slash ? (size_t)(slash - rel) : 0;
	return slash ? slash + 1 : rel;
}

/* The source file rel below sroot, never through a symlink; its lstat in st. */
static int _open_src(int sroot, const char *rel, struct stat *st, const char **what)
{
	size_t dlen;
	const char *name = _split(rel, &dlen);
	int dir = xfer_open_dir(sroot, rel, dlen, 0), fd, e;

	if (dir < 0) {
		*what = "cannot open the source directory of";
		return -1;
	}
	fd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	e = errno;
	close(dir);
	if (fd < 0) {
		errno = e;
		*what = "cannot open source";
		return -1;
	}
	if (fstat(fd, st) < 0 || !S_ISREG(st->st_mode)) {
		e = S_ISREG(st->st_mode) ? errno : EINVAL;
		close(fd);
		errno = e;
		*what = "source is no longer a regular file:";
		return -1;
	}
	return fd;
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
 * The destination's temporary file for rel, opened read-write, created with
 * size bytes by the first mover (an existing one of another size, left by an
 * earlier attempt, is set to size: every range is rewritten whole).
 */
static int _open_tmp(struct xfer_ctx *ctx, int droot, const char *rel, int64_t size,
		     const char **what)
{
	char tmp[NAME_MAX + 1];
	size_t dlen;
	const char *name = _split(rel, &dlen);
	int dir, fd, e;
	struct stat st;

	dir = xfer_open_dir(droot, rel, dlen, 0700);
	if (dir < 0) {
		*what = "cannot make the destination directory of";
		return -1;
	}
	if (durable_tmpname(tmp, sizeof(tmp), name, ctx->request_id) < 0) {
		close(dir);
		errno = ENAMETOOLONG;
		*what = "name too long:";
		return -1;
	}
	fd = openat(dir, tmp, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
	e = errno;
	close(dir);
	if (fd < 0) {
		errno = e;
		*what = "cannot create the temporary file of";
		return -1;
	}
	/* Another mover's file must be the owner's own regular file. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_size != size && ftruncate(fd, size) < 0)) {
		e = !S_ISREG(st.st_mode) || st.st_uid != geteuid() ? EPERM : errno;
		close(fd);
		errno = e;
		*what = "cannot size the temporary file of";
		return -1;
	}
	return fd;
}

/* One range: 0, or an errno with *what (the step that failed). */
static int _copy(struct xfer_ctx *ctx, char *buf, int sroot, int droot,
		 const struct xfer_range *r, const char **what)
{
	struct stat st, after;
	char cks[CKSUM_HEX_MAX], got[CKSUM_HEX_MAX];
	int sfd, dfd, e = 0;

	sfd = _open_src(sroot, r->relpath, &st, what);
	if (sfd < 0)
		return errno;
	if (st.st_size != r->size) {
		close(sfd);
		*what = "source changed size since the request was planned:";
		return ESTALE;
	}
	dfd = _open_tmp(ctx, droot, r->relpath, r->size, what);
	if (dfd < 0) {
		e = errno;
		close(sfd);
		return e;
	}
	*what = "copy failed:";
	e = _pass(ctx, buf, sfd, dfd, r->off, r->len, cks);
	if (!e && (fstat(sfd, &after) < 0 || xfer_ns(&after.st_mtim) != xfer_ns(&st.st_mtim) ||
		   after.st_size != st.st_size))
		e = ESTALE;
	if (e == ESTALE)
		*what = "source changed while its range was copied:";
	/* Durable: this range's pages written back and waited for, then the
	   file's size and block allocation (fdatasync). The first step is best
	   effort (some file systems lack it): fdatasync writes back whatever is
	   left and reports any write error since the file was opened. */
	if (!e) {
		(void)sync_file_range(dfd, r->off, r->len, SYNC_FILE_RANGE_WAIT_BEFORE |
				      SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
		if (fdatasync(dfd) < 0) {
			*what = "cannot make durable:";
			e = errno;
		}
	}
	/* Read back from the device: the clean cached pages are dropped first. */
	if (!e) {
		posix_fadvise(dfd, r->off, r->len, POSIX_FADV_DONTNEED);
		*what = "cannot read back";
		e = _pass(ctx, buf, dfd, -1, r->off, r->len, got);
	}
	if (!e && strcmp(cks, got) != 0) {
		*what = "read-back does not match the source:";
		e = EIO;
	}
	close(dfd);
	close(sfd);
	if (!e)
		xfer_emit_range(ctx, r->relpath, r->off, r->len, st.st_size, xfer_ns(&st.st_mtim),
				got);
	return e;
}

int xfer_range_run(struct xfer_ctx *ctx, const struct xfer_range *r, size_t n, char *msg,
		   size_t msglen)
{
	struct stat st;
	char *buf = NULL;
	int sroot, droot = -1, rc = XFER_OK;

	msg[0] = '\0';
	if (!n)
		return XFER_OK;
	sroot = xfer_open_source(ctx, &st, msg, msglen);
	if (sroot < 0)
		return XFER_RETRYABLE;
	droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (droot < 0) {
		snprintf(msg, msglen, "cannot open destination directory %s: %s", ctx->dest,
			 strerror(errno));
		close(sroot);
		return XFER_RETRYABLE;
	}
	if (posix_memalign((void **)&buf, 4096, RANGE_BUF) != 0) {
		snprintf(msg, msglen, "out of memory");
		rc = XFER_RETRYABLE;
	}
	for (size_t i = 0; i < n && rc == XFER_OK; i++) {
		const char *what = "";
		int e = _copy(ctx, buf, sroot, droot, &r[i], &what);

		if (e == EINTR && xfer_stopped(ctx)) {
			snprintf(msg, msglen, "stopped");
			rc = XFER_INTERRUPTED;
		} else if (e == ESTALE) {
			/* No mover can finish a plan of another version of the file: the
			   range stays undone, so the final pass copies the file whole. */
			xfer_logf(ctx, LOG_LVL_WARN, "request %lld: %s '%s' (bytes %lld..%lld of %lld "
				  "planned); left to the request's final pass, which copies it whole",
				  (long long)ctx->request_id, what, r[i].relpath, (long long)r[i].off,
				  (long long)(r[i].off + r[i].len), (long long)r[i].size);
		} else if (e) {
			snprintf(msg, msglen, "%s '%s' (bytes %lld..%lld of %lld): %s", what,
				 r[i].relpath, (long long)r[i].off, (long long)(r[i].off + r[i].len),
				 (long long)r[i].size, strerror(e));
			rc = xfer_err_final(e) ? XFER_FINAL : XFER_RETRYABLE;
		} else {
			xfer_logf(ctx, LOG_LVL_INFO, "'%s': bytes %lld..%lld copied and verified",
				  r[i].relpath, (long long)r[i].off, (long long)(r[i].off + r[i].len));
		}
	}
	free(buf);
	close(droot);
	close(sroot);
	return rc;
}

/* ---- the final pass ---- */

/* Finish e: 0, or an errno with *what. */
static int _finish(struct xfer_ctx *ctx, int sroot, int droot, const struct xfer_done_ent *e,
		   int64_t started, const char **what)
{
	char tmp[NAME_MAX + 1];
	size_t dlen;
	const char *name = _split(e->relpath, &dlen);
	struct timespec ts[2];
	struct stat st, dst;
	int sfd, dir = -1, fd = -1, err = 0;

	sfd = _open_src(sroot, e->relpath, &st, what);
	if (sfd < 0)
		return errno;
	if ((dir = xfer_open_dir(droot, e->relpath, dlen, 0)) < 0) {
		*what = "cannot open the destination directory of";
		err = errno;
	} else if (durable_tmpname(tmp, sizeof(tmp), name, ctx->request_id) < 0) {
		*what = "name too long:";
		err = ENAMETOOLONG;
	} else if (st.st_size != e->size || xfer_ns(&st.st_mtim) != e->mtime_ns) {
		*what = "source changed since its ranges were copied:";
		err = ESTALE;
		unlinkat(dir, tmp, 0);	/* stale bytes: the walk copies the file whole */
	} else if ((fd = openat(dir, tmp, O_RDWR | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC)) < 0) {
		*what = "cannot open the temporary file of";
		err = errno;
	} else if (fstat(fd, &dst) < 0 || !S_ISREG(dst.st_mode) || dst.st_size != e->size) {
		*what = "the temporary file has another size:";
		err = EIO;
	}
	if (!err) {
		ts[0] = st.st_atim;
		ts[1] = st.st_mtim;
		if (fchmod(fd, st.st_mode & 07777) < 0 || futimens(fd, ts) < 0) {
			*what = "cannot set the metadata of";
			err = errno;
		}
	}
	if (!err) {
		xfer_copy_xattrs(sfd, fd, ctx->xattr_ns);
		*what = "cannot make durable or rename";
		err = durable_commit(dir, tmp, name, fd, DURABLE_FSYNC | DURABLE_DIRSYNC);
		fd = -1;	/* closed by durable_commit */
	}
	if (!err) {
		xfer_emit_file(ctx, e->relpath, e->size, e->mtime_ns, (int)(st.st_mode & 07777),
			       started, (int64_t)time(NULL), e->ranged_cks, e->ranged_cks);
		/* keep=no: the source goes once its copy is durable under its name. */
		{
			int sdir = xfer_open_dir(sroot, e->relpath, dlen, 0);

			xfer_engine_remove_source(ctx, sdir, name, e->relpath);
			if (sdir >= 0)
				close(sdir);
		}
	}
	if (fd >= 0)
		close(fd);
	if (dir >= 0)
		close(dir);
	close(sfd);
	return err;
}

void xfer_range_finish(struct xfer_ctx *ctx, struct xfer_done_ent *done, size_t ndone)
{
	int64_t started = (int64_t)time(NULL);
	char msg[XFER_TEXT_MAX];
	struct stat st;
	size_t i;
	int sroot, droot = -1;

	for (i = 0; i < ndone && !done[i].ranged_cks; i++)
		;
	if (i == ndone)
		return;	/* nothing ranged: the common case */
	sroot = xfer_open_source(ctx, &st, msg, sizeof(msg));
	if (sroot >= 0)
		droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	for (i = 0; i < ndone; i++) {
		const char *what = "cannot open the source or destination of";
		int e;

		if (!done[i].ranged_cks)
			continue;
		e = sroot < 0 || droot < 0 ? EIO :
		    _finish(ctx, sroot, droot, &done[i], started, &what);
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
	if (droot >= 0)
		close(droot);
	if (sroot >= 0)
		close(sroot);
}
