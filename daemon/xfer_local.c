/*
 * xfer_local.c - the "local" and "null" endpoints: POSIX trees.
 *
 * Runs only inside a worker that already has the owner's uid, gid and groups.
 * Inside the source tree nothing is followed: the engine's walk opens every
 * entry with openat(O_NOFOLLOW) relative to its parent's fd, symlinks are
 * recreated as symlinks, FIFOs/sockets/devices are skipped with a warning.
 * Each file is written to a temporary name in its destination directory,
 * fsynced and renamed (common/durable.h), then read back (its pages dropped
 * first, so from the disk) and its checksum compared with the source's; only
 * then is it reported, in one record. The copy threads and SyncMode=batch
 * are xfer_local_pool.c; files of XFER_BIG_MIN bytes or more take the
 * pipelined path of xfer_big.c.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "durable.h"
#include "log.h"
#include "queue.h"
#include "xattr.h"
#include "xfer_big.h"
#include "xfer_local_int.h"
#include "xfer_util.h"

#define CHUNK (4u << 20)          /* the walker's buffer (single files, null endpoint) */

static void _copy_xattrs(int sfd, int dfd, const char *ns)
{
	char names[8192], val[8192], skip[64];
	ssize_t n = flistxattr(sfd, names, sizeof(names));

	/* Labels describe the life of the source copy; the copy starts unlabelled. */
	if (snprintf(skip, sizeof(skip), "%sstagehand.", ns) >= (int)sizeof(skip))
		skip[0] = '\0';
	for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(names + i) + 1) {
		const char *nm = names + i;
		ssize_t vl;

		if (strncmp(nm, "user.", 5) != 0 || (skip[0] && strncmp(nm, skip, strlen(skip)) == 0))
			continue;
		vl = fgetxattr(sfd, nm, val, sizeof(val));
		if (vl >= 0)
			fsetxattr(dfd, nm, val, (size_t)vl, 0);
	}
}

/*
 * A symlink is in place: check it now, so that what was verified survives a
 * crash (the next attempt skips it).
 */
static void _verified_link(struct local__run *r, int ddir, const char *name, const char *rel,
			   const char *want)
{
	char got[PATH_MAX];
	ssize_t n;

	if (!r->null) {
		n = readlinkat(ddir, name, got, sizeof(got) - 1);
		if (n < 0) {
			xfer_fail(&r->t, rel, errno, "cannot verify");
			return;
		}
		got[n] = '\0';
		if (strcmp(got, want) != 0) {
			xfer_fail(&r->t, rel, EIO, "checksum mismatch after copy of");
			return;
		}
	}
	xfer_emit(r->ctx, XR_ITEM_DONE, 0, 0, (int64_t)time(NULL), (int64_t)time(NULL),
		  NULL, rel, "symlink");
}

int local__resume_ok(struct local__run *r, int ddir, const char *name, const char *rel,
		     const struct stat *st)
{
	enum xfer_want w = xfer_engine_want(r->ctx, rel, st->st_size, xfer_ns(&st->st_mtim));
	struct stat dst;

	if (w == XFER_WANT_OTHER) {
		xfer_tally_add(&r->t, &r->t.kept);
		return 1;
	}
	if (r->null || w != XFER_WANT_KEPT)
		return 0;
	if (fstatat(ddir, name, &dst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(dst.st_mode) &&
	    dst.st_size == st->st_size && xfer_ns(&dst.st_mtim) == xfer_ns(&st->st_mtim)) {
		xfer_tally_add(&r->t, &r->t.kept);
		return 1;
	}
	return 0;
}

void local__report(struct local__run *r, int sdir, const char *sname, const char *rel,
		   const struct stat *st, int64_t total, int64_t started, const char *cks,
		   const char *got)
{
	xfer_emit_file(r->ctx, rel, total, xfer_ns(&st->st_mtim), (int)(st->st_mode & 07777), started,
		       (int64_t)time(NULL), cks, got);
	xfer_tally_add(&r->t, &r->t.verified);
	if (!r->null)
		xfer_engine_remove_source(r->ctx, sdir, sname, rel);
}

int local__open_source(struct local__run *r, int sdir, const char *sname, const char *rel,
		       const struct stat *st, struct stat *cur)
{
	/* O_NONBLOCK: never hang on a FIFO swapped in; no effect on a regular file. */
	int sfd = openat(sdir, sname, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);

	if (sfd < 0) {
		xfer_fail(&r->t, rel, errno, "cannot open source");
		return -1;
	}
	if (fstat(sfd, cur) < 0 || !S_ISREG(cur->st_mode) || cur->st_ino != st->st_ino) {
		close(sfd);
		xfer_fail(&r->t, rel, EAGAIN, "source changed while walking");
		return -1;
	}
	return sfd;
}

int local__fill(struct local__run *r, const struct xfer_buf *tb, int sfd, int dfd, int vfd,
		const struct stat *st, const struct stat *cur, int64_t *total, char *cks,
		char *got)
{
	int e;

	if (vfd >= 0) {
		/* A source about to be removed (keep=no) is always verified in full. */
		int sample = r->ctx->keep ? r->ctx->verify_sample : 0;

		e = xfer_big_copy(r->ctx, sfd, dfd, vfd, st->st_size, sample, total, cks, got);
	} else {
		e = xfer_engine_stream(r->ctx, tb, sfd, dfd, st->st_size, 0, total, cks);
		posix_fadvise(sfd, 0, 0, POSIX_FADV_DONTNEED);
	}
	if (!e && *total != st->st_size)
		e = EAGAIN;	/* the source changed size while it was copied */
	if (!e && dfd >= 0) {
		struct timespec ts[2] = { cur->st_atim, cur->st_mtim };

		if (fchmod(dfd, cur->st_mode & 07777) < 0 || futimens(dfd, ts) < 0)
			e = errno;
		_copy_xattrs(sfd, dfd, r->ctx->xattr_ns);
	}
	return e;
}

/* The temporary file of a copy; -1 after reporting why. */
static int _create_dest(struct local__run *r, int ddir, const char *name, const char *rel,
			char *tmp, size_t tmplen)
{
	int dfd;

	if (durable_tmpname(tmp, tmplen, name, r->ctx->request_id) < 0) {
		xfer_fail(&r->t, rel, ENAMETOOLONG, "name too long");
		return -1;
	}
	dfd = durable_create(ddir, tmp, O_WRONLY);
	if (dfd < 0)
		xfer_fail(&r->t, rel, errno, "cannot create destination");
	return dfd;
}

/*
 * One regular file: temporary file, data, metadata, fsync, rename, then
 * read back and compare; reported in one record once all of that holds. For
 * archive with keep=no the source goes only after this verification.
 */
void local__copy_file(struct local__run *r, const struct xfer_buf *tb, int sdir,
		      const char *sname, int ddir, const char *name, const char *rel,
		      const struct stat *st)
{
	char tmp[NAME_MAX + 1], cks[CKSUM_HEX_MAX], got[CKSUM_HEX_MAX];
	struct stat cur;
	int sfd, dfd = -1, vfd = -1, e, big = !r->null && st->st_size >= XFER_BIG_MIN;
	int64_t total = 0, started = (int64_t)time(NULL);

	if (local__resume_ok(r, ddir, name, rel, st))
		return;
	/* Small files are reported once, when verified; a big one shows while it runs. */
	if (big)
		xfer_emit(r->ctx, XR_ITEM_START, 0, st->st_size, xfer_ns(&st->st_mtim),
			  (int64_t)(st->st_mode & 07777), NULL, rel, "file");
	sfd = local__open_source(r, sdir, sname, rel, st, &cur);
	if (sfd < 0)
		return;
	if (!r->null && (dfd = _create_dest(r, ddir, name, rel, tmp, sizeof(tmp))) < 0) {
		close(sfd);
		return;
	}
	if (big && (vfd = openat(ddir, tmp, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC)) < 0)
		e = errno;
	else
		e = local__fill(r, tb, sfd, dfd, vfd, st, &cur, &total, cks, got);
	if (vfd >= 0)
		close(vfd);
	close(sfd);
	if (dfd >= 0 && e) {
		close(dfd);
		unlinkat(ddir, tmp, 0);
	} else if (dfd >= 0) {
		e = durable_commit(ddir, tmp, name, dfd, DURABLE_FSYNC);
	}
	if (e) {
		if (e != EINTR)
			xfer_fail(&r->t, rel, e, e == EAGAIN ? "source changed during copy" :
				  "copy failed");
		return;
	}
	if (r->null)
		snprintf(got, sizeof(got), "%s", cks);
	else if (!big && (e = xfer_engine_verify(r->ctx, tb, ddir, name, total, got)) != 0) {
		if (e != EINTR)
			xfer_fail(&r->t, rel, e, "cannot verify");
		return;
	}
	if (strcmp(got, cks) != 0) {
		xfer_fail(&r->t, rel, EIO, "checksum mismatch after copy of");
		return;
	}
	local__report(r, sdir, sname, rel, st, total, started, cks, got);
}

static void _copy_symlink(struct local__run *r, int sdir, int ddir, const char *name,
			  const char *rel, const struct stat *st)
{
	char target[PATH_MAX], tmp[NAME_MAX + 1];
	struct timespec ts[2] = { st->st_atim, st->st_mtim };
	ssize_t n;
	int e;

	if (xfer_engine_want(r->ctx, rel, -1, -1) == XFER_WANT_OTHER)
		return;
	xfer_emit(r->ctx, XR_ITEM_START, 0, st->st_size, xfer_ns(&st->st_mtim), 0, NULL, rel, "symlink");
	n = readlinkat(sdir, name, target, sizeof(target) - 1);
	if (n < 0) {
		xfer_fail(&r->t, rel, errno, "cannot read symlink");
		return;
	}
	target[n] = '\0';
	if (r->null) {
		_verified_link(r, ddir, name, rel, target);
		return;
	}
	if (durable_tmpname(tmp, sizeof(tmp), name, r->ctx->request_id) < 0) {
		xfer_fail(&r->t, rel, ENAMETOOLONG, "name too long");
		return;
	}
	unlinkat(ddir, tmp, 0);
	if (symlinkat(target, ddir, tmp) < 0) {
		xfer_fail(&r->t, rel, errno, "cannot create symlink");
		return;
	}
	utimensat(ddir, tmp, ts, AT_SYMLINK_NOFOLLOW);
	if ((e = durable_commit(ddir, tmp, name, -1, 0)) != 0) {
		xfer_fail(&r->t, rel, e, "cannot rename symlink into place");
		return;
	}
	_verified_link(r, ddir, name, rel, target);
}

/* ---- the walk ---- */

/* A directory of the walk: where its entries go, and its batch. */
struct _ldir {
	int ddir;
	struct local__batch b;
};

static int _visit(struct xfer_walk *w, struct xfer_walk_dir *dir, const char *name,
		  const char *rel, const struct stat *st)
{
	struct local__run *r = w->arg;
	struct _ldir *ld = dir->data;

	local__batch_maybe_flush(r, &ld->b);
	if (S_ISREG(st->st_mode) && local__batchable(r, st)) {
		local__batch_add(r, &ld->b, dir->fd, ld->ddir, name, rel, st);
	} else if (S_ISREG(st->st_mode)) {
		local__submit(r, dir->fd, ld->ddir, name, rel, st);
	} else if (S_ISLNK(st->st_mode)) {
		_copy_symlink(r, dir->fd, ld->ddir, name, rel, st);
	} else if (S_ISDIR(st->st_mode) && xfer_excluded(r->ctx, rel)) {
		/* An exempt= directory inside the tree: neither copied nor, with
		   keep=no, removed. */
		xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, rel, XFER_EXCLUDE_REASON);
	} else if (S_ISDIR(st->st_mode)) {
		return 1;
	} else {
		const char *kind = S_ISFIFO(st->st_mode) ? "FIFO" : S_ISSOCK(st->st_mode) ?
				   "socket" : "device";
		char msg[256];

		snprintf(msg, sizeof(msg), "%s skipped: only regular files, directories and "
			 "symlinks are copied", kind);
		xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, rel, msg);
	}
	return 0;
}

/* Make or open the destination directory of sub; never through a symlink. */
static int _enter(struct xfer_walk *w, struct xfer_walk_dir *dir, struct xfer_walk_dir *sub,
		  const char *name)
{
	struct local__run *r = w->arg;
	struct _ldir *ld = dir->data, *child = calloc(1, sizeof(*child));
	int d2 = -1;

	if (!child) {
		xfer_fail(&r->t, sub->rel, ENOMEM, "cannot create destination directory");
		return -1;
	}
	if (r->null)
		d2 = dup(ld->ddir);
	else if (mkdirat(ld->ddir, name, 0700) == 0 || errno == EEXIST)
		d2 = openat(ld->ddir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (d2 < 0) {
		/* ELOOP: a symlink where a directory belongs is refused. */
		xfer_fail(&r->t, sub->rel, errno, "cannot create destination directory");
		free(child);
		return -1;
	}
	child->ddir = d2;
	child->b.ddir = d2;
	sub->data = child;
	return 0;
}

/* The directory's files are in place before it is synced and timestamped. */
static void _leave(struct xfer_walk *w, struct xfer_walk_dir *dir, struct xfer_walk_dir *sub,
		   const char *name)
{
	struct local__run *r = w->arg;
	struct _ldir *ld = sub->data;

	(void)dir;
	(void)name;
	local__batch_end(r, &ld->b);
	if (!r->null) {
		struct timespec ts[2] = { sub->st->st_atim, sub->st->st_mtim };

		_copy_xattrs(sub->fd, ld->ddir, r->ctx->xattr_ns);
		fchmod(ld->ddir, sub->st->st_mode & 07777);
		fsync(ld->ddir);
		futimens(ld->ddir, ts);
	}
	close(ld->ddir);
	free(ld);
}

static void _walk_fail(struct xfer_walk *w, const char *rel, int err, const char *what)
{
	struct local__run *r = w->arg;

	xfer_fail(&r->t, rel, err, what);
}

/* ---- the request ---- */

static int _finish(struct local__run *r, int result, const char *msg)
{
	xfer_finish(r->ctx, result, msg);
	local__pool_stop(r);
	free(r->tb0.p);
	xfer_tally_destroy(&r->t);
	return result;
}

/* The destination directory of a tree, made (as the owner) when missing. */
static int _open_dest_tree(struct local__run *r, int sroot, char *msg, size_t msglen)
{
	const char *dest = r->ctx->dest;
	int droot = -1, e;

	msg[0] = '\0';
	if (r->null)
		return dup(sroot);
	/* The first failing step is the one reported (not a later ENOENT). */
	if (xfer_mkparents(dest, msg, msglen) < 0)
		errno = EACCES;
	else if ((droot = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 && errno == ENOENT) {
		if (mkdir(dest, 0700) == 0)
			droot = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		else
			xfer_mkdir_why(dest, errno, msg, msglen);
	}
	if (droot < 0) {
		e = errno;
		if (!msg[0])
			snprintf(msg, msglen, "cannot open destination directory %s: %s", dest,
				 strerror(e));
		errno = e;
	}
	return droot;
}

/* A tree: count, then walk and copy. -1 when the request goes on, else the result. */
static int _run_tree(struct local__run *r, int sroot, const struct stat *st)
{
	struct _ldir root = { -1, { 0 } };
	struct xfer_walk w = { .ctx = r->ctx, .arg = r, .visit = _visit, .enter = _enter,
			       .leave = _leave, .fail = _walk_fail };
	struct xfer_walk_dir top = { sroot, "", 0, st, &root };
	char msg[XFER_TEXT_MAX];

	xfer_count_tree(&r->t, sroot, 0);
	xfer_emit(r->ctx, XR_TOTALS, 0, r->t.files, r->t.bytes, r->t.skipped, NULL, NULL, NULL);
	root.ddir = _open_dest_tree(r, sroot, msg, sizeof(msg));
	if (root.ddir < 0)
		return _finish(r, errno == ENOSPC || errno == EIO ? XFER_RETRYABLE : XFER_FINAL, msg);
	root.b.ddir = root.ddir;
	local__pool_start(r);
	xfer_walk_tree(&w, &top);
	local__batch_end(r, &root.b);
	if (!r->null) {
		struct timespec ts[2] = { st->st_atim, st->st_mtim };

		fchmod(root.ddir, st->st_mode & 07777);
		fsync(root.ddir);
		futimens(root.ddir, ts);
	}
	close(root.ddir);
	return -1;
}

/* A single file: dest names the copy, or an existing directory to put it in. */
static int _run_file(struct local__run *r, const struct stat *st)
{
	const struct xfer_ctx *ctx = r->ctx;
	const char *sb = strrchr(ctx->source, '/'), *leaf;
	char msg[XFER_TEXT_MAX], base[NAME_MAX + 1], dir[XFER_PATH_MAX];
	struct stat dst, st2;
	int droot = -1, sparent;

	xfer_emit(r->ctx, XR_TOTALS, 0, 1, st->st_size, 0, NULL, NULL, NULL);
	snprintf(base, sizeof(base), "%s", sb ? sb + 1 : ctx->source);
	msg[0] = '\0';
	leaf = base;
	if (r->null) {
		droot = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	} else if (stat(ctx->dest, &dst) == 0 && S_ISDIR(dst.st_mode)) {
		droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	} else {
		const char *db = strrchr(ctx->dest, '/');

		snprintf(dir, sizeof(dir), "%.*s", db == ctx->dest ? 1 : (int)(db - ctx->dest),
			 ctx->dest);
		if (xfer_mkparents(ctx->dest, msg, sizeof(msg)) == 0)
			droot = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		leaf = db + 1;
	}
	if (droot < 0) {
		if (!msg[0])
			snprintf(msg, sizeof(msg), "cannot open destination directory for %s: %s",
				 ctx->dest, strerror(errno));
		return _finish(r, XFER_FINAL, msg);
	}
	/* The file is opened again by name relative to its parent: keep that fd. */
	snprintf(dir, sizeof(dir), "%.*s", sb == ctx->source ? 1 : (int)(sb - ctx->source),
		 ctx->source);
	sparent = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (sparent < 0) {
		snprintf(msg, sizeof(msg), "cannot open source directory of %s: %s", ctx->source,
			 strerror(errno));
		close(droot);
		return _finish(r, XFER_FINAL, msg);
	}
	/* relpath of a single file is the destination's name. */
	if (fstatat(sparent, base, &st2, AT_SYMLINK_NOFOLLOW) < 0 || st2.st_ino != st->st_ino)
		xfer_fail(&r->t, base, EAGAIN, "source changed while walking");
	else
		local__copy_file(r, &r->tb0, sparent, base, droot, leaf, leaf, &st2);
	close(sparent);
	close(droot);
	return -1;
}

/* A label request: the lifecycle labels on the source, nothing copied. */
static int _run_label(struct local__run *r, int sroot)
{
	const char *pol = r->ctx->label_policy ? r->ctx->label_policy : "archive";
	char msg[XFER_TEXT_MAX];

	xfer_label_all(r->ctx, sroot, pol, NULL);
	close(sroot);
	snprintf(msg, sizeof(msg), "labelled %s", pol);
	return _finish(r, XFER_OK, msg);
}

static int _run_common(struct xfer_ctx *ctx, int null)
{
	struct local__run r = { .ctx = ctx, .null = null };
	char msg[XFER_TEXT_MAX];
	struct stat st;
	int sroot, rc;

	xfer_tally_init(&r.t, ctx);
	r.tb0.p = malloc(CHUNK);
	r.tb0.len = CHUNK;
	if (!r.tb0.p)
		return _finish(&r, XFER_RETRYABLE, "out of memory");
	/* The request's own paths are resolved normally, with the owner's identity. */
	sroot = xfer_open_source(ctx, &st, msg, sizeof(msg));
	if (sroot < 0)
		return _finish(&r, errno == ENOMEM || errno == EIO ? XFER_RETRYABLE : XFER_FINAL, msg);
	if (strcmp(ctx->action, "label") == 0)
		return _run_label(&r, sroot);
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
		close(sroot);
		snprintf(msg, sizeof(msg), "source %s is neither a file nor a directory", ctx->source);
		return _finish(&r, XFER_FINAL, msg);
	}
	fcntl(sroot, F_SETFL, fcntl(sroot, F_GETFL) & ~O_NONBLOCK);
	rc = S_ISDIR(st.st_mode) ? _run_tree(&r, sroot, &st) : _run_file(&r, &st);
	if (rc >= 0) {
		close(sroot);
		return rc;
	}
	if (xfer_stopped(ctx)) {
		close(sroot);
		return _finish(&r, XFER_INTERRUPTED, "interrupted; will be redone");
	}
	/* Every file was verified as it was copied; the final check is the count. */
	xfer_emit(ctx, XR_PHASE, QS_VERIFYING, 0, 0, 0, NULL, NULL, NULL);
	if (!r.t.failures && !null && !ctx->shard && strcmp(ctx->action, "archive") == 0)
		xfer_label_all(ctx, sroot, "archived", ctx->dest);
	close(sroot);
	rc = xfer_tally_verdict(&r.t, S_ISDIR(st.st_mode), "the source tree", msg, sizeof(msg));
	return _finish(&r, rc, rc == XFER_OK ? NULL : msg);
}

static int _run_local(struct xfer_ctx *ctx)
{
	return _run_common(ctx, 0);
}

static int _run_null(struct xfer_ctx *ctx)
{
	return _run_common(ctx, 1);
}

const struct xfer_backend xfer_backend_local = { "local", NULL, _run_local };
const struct xfer_backend xfer_backend_null = { "null", NULL, _run_null };
