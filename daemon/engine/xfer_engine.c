/* xfer_engine.c - see xfer_engine.h: what every transfer endpoint shares. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "resolve.h"
#include "xfer_engine.h"
#include "xfer_util.h"

/* ---- failure accounting ---- */

void xfer_tally_init(struct xfer_tally *t, struct xfer_ctx *ctx)
{
	memset(t, 0, sizeof(*t));
	t->ctx = ctx;
	pthread_mutex_init(&t->mu, NULL);
}

void xfer_tally_destroy(struct xfer_tally *t)
{
	pthread_mutex_destroy(&t->mu);
}

void xfer_tally_add(struct xfer_tally *t, int64_t *counter)
{
	pthread_mutex_lock(&t->mu);
	++*counter;
	pthread_mutex_unlock(&t->mu);
}

int xfer_stopped(const struct xfer_ctx *ctx)
{
	return ctx->stop && *ctx->stop;
}

static void _failed(struct xfer_tally *t, const char *rel, int code, int final, const char *msg)
{
	xfer_emit(t->ctx, &(struct xfer_note){
		.type = XR_ITEM_FAILED, .code = code, .path = rel, .text = msg });
	pthread_mutex_lock(&t->mu);
	if (!t->failures)
		snprintf(t->first_error, sizeof(t->first_error), "%s", msg);
	t->failures++;
	if (final)
		t->final_failures++;
	pthread_mutex_unlock(&t->mu);
}

void xfer_fail(struct xfer_tally *t, const char *rel, int err, const char *what)
{
	char msg[XFER_TEXT_MAX];

	snprintf(msg, sizeof(msg), "%s '%s': %s", what, rel, strerror(err));
	_failed(t, rel, err, xfer_err_final(err), msg);
}

void xfer_failf(struct xfer_tally *t, const char *rel, int final, const char *fmt, ...)
{
	char msg[XFER_TEXT_MAX];
	va_list ap;

	va_start(ap, fmt);
	log_verrf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	_failed(t, rel, final ? EACCES : EIO, final, msg);
}

int xfer_tally_verdict(const struct xfer_tally *t, int count_check, const char *what, char *msg,
		       size_t msglen)
{
	msg[0] = '\0';
	if (!t->failures && count_check && t->verified + t->kept != t->files) {
		/* Never report done unless every file counted was verified. */
		snprintf(msg, msglen, "%s changed during the transfer (%lld files counted, %lld "
			 "verified): will be redone", what, (long long)t->files,
			 (long long)(t->verified + t->kept));
		return XFER_RETRYABLE;
	}
	if (!t->failures)
		return XFER_OK;
	if (snprintf(msg, msglen, "%d of the entries failed; first: %s", t->failures,
		     t->first_error) >= (int)msglen && msglen >= 4)
		memcpy(msg + msglen - 4, "...", 4);
	return t->final_failures == t->failures ? XFER_FINAL : XFER_RETRYABLE;
}

int xfer_finish(struct xfer_ctx *ctx, int result, const char *msg)
{
	xfer_emit(ctx, &(struct xfer_note){ .type = XR_RESULT, .code = result, .text = msg });
	return result;
}

/* ---- the resume set ---- */

/* A run restricted to a shard is tested here, so every endpoint leaves the same files out. */
enum xfer_want xfer_engine_want(const struct xfer_ctx *ctx, const char *rel, int64_t size,
				int64_t mtime_ns)
{
	const struct xfer_done_ent *de;

	if (xfer_shard_skip(ctx, rel))
		return XFER_WANT_OTHER;
	de = xfer_done_find(ctx->done, ctx->ndone, rel);
	if (de && mtime_ns >= 0 && de->size == size && de->mtime_ns == mtime_ns)
		return XFER_WANT_KEPT;
	return XFER_WANT_COPY;
}

/* ---- data ---- */

void xfer_engine_pace(struct xfer_ctx *ctx, uint64_t n)
{
	xfer_bucket_take(ctx->bucket, n, ctx->stop);
}

static int _write_piece(struct xfer_ctx *ctx, int fd, const char *p, size_t n, int64_t off)
{
	xfer_bucket_take(ctx->bucket, (uint64_t)n, ctx->stop);
	for (size_t w = 0; fd >= 0 && w < n;) {
		ssize_t m = off >= 0 ? pwrite(fd, p + w, n - w, (off_t)(off + (int64_t)w))
				     : write(fd, p + w, n - w);

		if (m < 0 && errno == EINTR)
			continue;
		if (m < 0)
			return errno;
		w += (size_t)m;
	}
	/* What the pace controller learns from: the file system, bytes, latency;
	   paced or paused ranges are written back here (no dirty pile). */
	if (fd >= 0)
		xfer_bucket_wrote(ctx->bucket, fd, off, (uint64_t)n);
	return 0;
}

int xfer_engine_write(struct xfer_ctx *ctx, int fd, const void *buf, size_t n, int64_t off)
{
	/* Paced (YieldMode=adaptive): in pieces of XFER_PACE_CHUNK, each charged, written and
	   written back before the next, so that the controller's hold or lower
	   rate takes effect within one piece, not one read buffer (8 MiB). */
	size_t piece = xfer_bucket_paced_io(ctx->bucket) ? XFER_PACE_CHUNK : n, done = 0;

	do {
		size_t len = n - done < piece ? n - done : piece;
		int e = _write_piece(ctx, fd, (const char *)buf + done, len,
				     off < 0 ? -1 : off + (int64_t)done);

		if (e)
			return e;
		done += len;
	} while (done < n);
	return 0;
}

int xfer_engine_stream(struct xfer_ctx *ctx, const struct xfer_buf *tb, int fd, int dfd,
		       int64_t expect, unsigned flags, int64_t *total, char *cks)
{
	struct cksum ck;
	int64_t off = 0;
	size_t want;
	int e;

	if (cksum_init(&ck, ctx->algo) < 0)
		return ENOMEM;
	for (;;) {
		ssize_t n;

		if (xfer_stopped(ctx)) {
			cksum_abort(&ck);
			return EINTR;
		}
		/* Ask for what is left plus one byte (the EOF test), not a whole buffer:
		   a direct read past the end costs zero-filling, a buffered one read-ahead. */
		want = tb->len;
		/* Paced: reads are as small as the paced writes (xfer_engine_write). */
		if (!(flags & XFER_S_NOPACE) && xfer_bucket_paced_io(ctx->bucket) &&
		    want > XFER_PACE_CHUNK)
			want = XFER_PACE_CHUNK;
		if (expect >= off && (uint64_t)(expect - off) < want) {
			want = (size_t)(expect - off) + 1;
			if (flags & XFER_S_ALIGN)
				want = (want + 4095) / 4096 * 4096;
			if (want > tb->len)
				want = tb->len;
		}
		n = pread(fd, tb->p, want, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			e = errno;
			cksum_abort(&ck);
			return e;
		}
		if (n == 0)
			break;
		cksum_update(&ck, tb->p, (size_t)n);
		/* Charged as it moves: a small file costs what it moved, not a chunk. */
		if (dfd >= 0 && (e = xfer_engine_write(ctx, dfd, tb->p, (size_t)n, off)) != 0) {
			cksum_abort(&ck);
			return e;
		}
		if (dfd < 0 && !(flags & XFER_S_NOPACE))
			xfer_engine_pace(ctx, (uint64_t)n);
		off += n;
		if ((size_t)n < want && off == expect)
			break;
	}
	*total = off;
	cksum_final(&ck, cks);
	return 0;
}

int xfer_engine_verify(struct xfer_ctx *ctx, const struct xfer_buf *tb, int ddir,
		       const char *name, int64_t expect, char *cks)
{
	/* O_DIRECT: from the device whatever the page cache holds (needs an aligned buffer). */
	int direct = ((uintptr_t)tb->p % 4096) == 0 && tb->len % 4096 == 0;
	int fd = direct ? openat(ddir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_DIRECT)
			: -1;
	int64_t total = 0;
	int e;

	if (fd < 0) {
		direct = 0;
		fd = openat(ddir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
		if (fd < 0)
			return errno;
		posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	}
	e = xfer_engine_stream(ctx, tb, fd, -1, expect, direct ? XFER_S_ALIGN : 0, &total, cks);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	if (!e && total != expect)
		e = EIO;
	return e;
}

int xfer_engine_readback(struct xfer_ctx *ctx, const struct xfer_buf *tb, int fd,
			 unsigned flags, int64_t *len, char *cks)
{
	int64_t total = 0;
	int e;

	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	e = xfer_engine_stream(ctx, tb, fd, -1, -1, flags, &total, cks);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (!e && len)
		*len = total;
	return e;
}

/* ---- the walk ---- */

/*
 * Recursive: one frame and one descriptor a level, bounded by
 * XFER_WALK_DEPTH; an explicit stack would need the same descriptors.
 */
void xfer_walk_tree(struct xfer_walk *w, struct xfer_walk_dir *dir)
{
	DIR *d;
	struct dirent *de;
	int fd = dup(dir->fd);

	if (fd < 0 || !(d = fdopendir(fd))) {
		int e = errno;

		if (fd >= 0)
			close(fd);
		w->fail(w, *dir->rel ? dir->rel : ".", e, "cannot read directory");
		return;
	}
	rewinddir(d);	/* the dup shares its offset with dir->fd */
	while ((de = readdir(d)) && !xfer_stopped(w->ctx)) {
		char rel[XFER_PATH_MAX];
		struct xfer_walk_dir sub;
		struct stat st;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (xfer_join(rel, sizeof(rel), dir->rel, de->d_name) < 0) {
			w->fail(w, de->d_name, ENAMETOOLONG, "path too long under");
			continue;
		}
		if (fstatat(dir->fd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			w->fail(w, rel, errno, "cannot stat");
			continue;
		}
		if (w->visit(w, dir, de->d_name, rel, &st) != 1 || !S_ISDIR(st.st_mode))
			continue;
		if (dir->depth >= XFER_WALK_DEPTH) {
			w->fail(w, rel, ELOOP, "tree deeper than 256 levels at");
			continue;
		}
		sub = (struct xfer_walk_dir){ -1, rel, dir->depth + 1, &st, NULL };
		sub.fd = openat(dir->fd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub.fd < 0) {
			w->fail(w, rel, errno, "cannot open source directory");
			continue;
		}
		if (!w->enter || w->enter(w, dir, &sub, de->d_name) >= 0) {
			xfer_walk_tree(w, &sub);
			if (w->leave)
				w->leave(w, dir, &sub, de->d_name);
		}
		close(sub.fd);
	}
	closedir(d);
}

static int _count_visit(struct xfer_walk *w, struct xfer_walk_dir *dir, const char *name,
			const char *rel, const struct stat *st)
{
	struct xfer_count *c = w->arg;

	(void)dir;
	(void)name;
	if (S_ISREG(st->st_mode)) {
		c->t->files++;
		c->t->bytes += st->st_size;
	} else if (S_ISDIR(st->st_mode)) {
		if (!xfer_excluded(w->ctx, rel))
			return 1;
		c->t->skipped++;
	} else if (c->links_skipped || !S_ISLNK(st->st_mode)) {
		c->t->skipped++;
	}
	return 0;
}

/* Unreadable entries are reported by the copy pass. */
static void _count_fail(struct xfer_walk *w, const char *rel, int err, const char *what)
{
	(void)w;
	(void)rel;
	(void)err;
	(void)what;
}

void xfer_count_init(struct xfer_walk *w, struct xfer_count *c, struct xfer_tally *t,
		     int links_skipped)
{
	c->t = t;
	c->links_skipped = links_skipped;
	*w = (struct xfer_walk){ .ctx = t->ctx, .arg = c, .visit = _count_visit,
				 .fail = _count_fail };
}

void xfer_count_tree(struct xfer_tally *t, int dirfd, int links_skipped)
{
	struct xfer_count c;
	struct xfer_walk w;
	struct xfer_walk_dir root = { dirfd, "", 0, NULL, NULL };

	xfer_count_init(&w, &c, t, links_skipped);
	xfer_walk_tree(&w, &root);
}

int xfer_open_dir(int root, const char *rel, size_t len, int mode)
{
	char dir[PATH_MAX];

	if (len >= sizeof(dir)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(dir, rel, len);
	dir[len] = '\0';
	return resolve_open(root, dir, O_RDONLY | O_DIRECTORY, (mode_t)mode,
			    mode ? RESOLVE_OPEN_MKDIR : 0, NULL, 0);
}
