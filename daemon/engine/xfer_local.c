/*
 * xfer_local.c - the "local" and "null" endpoints: POSIX trees.
 *
 * Runs only inside a worker that already has the owner's uid, gid and groups.
 * Inside the source tree nothing is followed: the listing is the engine's
 * walk, which opens every entry with openat(O_NOFOLLOW) relative to its
 * parent's descriptor, and every other operation here works on a directory
 * descriptor and a name, never a path. A file is written to a temporary name
 * in its destination directory and made durable by common/durable.h; its
 * read-back is the engine's (xfer_engine_verify). Only the request's own
 * paths (the source and destination as given) are resolved by name, with
 * the owner's identity.
 *
 * The null endpoint is a destination that stores nothing: the source is read
 * and hashed in full (a benchmark of the source side and of the engine).
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
#include <unistd.h>

#include "durable.h"
#include "xfer_endpoint.h"
#include "xfer_util.h"

struct xfer_ep {
	struct xfer_ctx *ctx;
	int fd;                      /* a source: what ctx->source opened (labels go on it) */
};

static struct xfer_ep *_ep_new(struct xfer_ctx *ctx, struct xfer_ep **ep, char *msg,
			       size_t msglen)
{
	struct xfer_ep *e = calloc(1, sizeof(*e));

	if (e) {
		e->ctx = ctx;
		e->fd = -1;
	} else {
		snprintf(msg, msglen, "out of memory");
	}
	*ep = e;
	return e;
}

static void _close(struct xfer_ep *ep, struct xfer_root *root)
{
	if (root->dir >= 0 && root->dir != ep->fd)
		close(root->dir);
	root->dir = -1;
	if (ep->fd >= 0)
		close(ep->fd);
	free(ep);
}

/* ---- source ---- */

/* The request's source, resolved normally as the owner (or beneath options.beneath). */
static int _open_source(struct xfer_ctx *ctx, struct xfer_ep **ep, struct xfer_root *root,
			char *msg, size_t msglen)
{
	struct xfer_ep *e = _ep_new(ctx, ep, msg, msglen);
	const char *sb = strrchr(ctx->source, '/');
	char dir[XFER_PATH_MAX];

	if (!e)
		return XFER_RETRYABLE;
	e->fd = xfer_open_source(ctx, &root->st, msg, msglen);
	if (e->fd < 0)
		return errno == ENOMEM || errno == EIO ? XFER_RETRYABLE : XFER_FINAL;
	fcntl(e->fd, F_SETFL, fcntl(e->fd, F_GETFL) & ~O_NONBLOCK);
	root->dir = e->fd;
	root->name[0] = '\0';
	if (!S_ISREG(root->st.st_mode) || strcmp(ctx->action, "label") == 0)
		return XFER_OK;
	/* A file is opened again by name relative to its parent, never followed. */
	snprintf(root->name, sizeof(root->name), "%s", sb ? sb + 1 : ctx->source);
	snprintf(dir, sizeof(dir), "%.*s", !sb ? 1 : sb == ctx->source ? 1 :
		 (int)(sb - ctx->source), !sb ? "." : ctx->source);
	root->dir = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root->dir < 0) {
		snprintf(msg, msglen, "cannot open source directory of %s: %s", ctx->source,
			 strerror(errno));
		return XFER_FINAL;
	}
	return XFER_OK;
}

static void _list(struct xfer_ep *ep, struct xfer_walk *w, struct xfer_walk_dir *root)
{
	(void)ep;
	xfer_walk_tree(w, root);
}

static int _open_read(struct xfer_ep *ep, int dir, const char *name, const struct stat *st,
		      struct stat *cur)
{
	/* O_NONBLOCK: never hang on a FIFO swapped in; no effect on a regular file. */
	int sfd = openat(dir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);

	(void)ep;
	if (sfd < 0)
		return -1;
	if (fstat(sfd, cur) < 0 || !S_ISREG(cur->st_mode) || cur->st_ino != st->st_ino) {
		close(sfd);
		errno = EAGAIN;
		return -1;
	}
	return sfd;
}

static int _readlink(struct xfer_ep *ep, int dir, const char *name, char *out, size_t outlen)
{
	ssize_t n = readlinkat(dir, name, out, outlen - 1);

	(void)ep;
	if (n < 0)
		return errno;
	out[n] = '\0';
	return 0;
}

static int _remove(struct xfer_ep *ep, int dir, const char *name)
{
	(void)ep;
	return dir < 0 ? EBADF : unlinkat(dir, name, 0) < 0 ? errno : 0;
}

static void _label(struct xfer_ep *ep, const struct xfer_root *root, const char *policy,
		   const char *location)
{
	(void)root;
	xfer_label_all(ep->ctx, ep->fd, policy, location);
}

/* ---- destination ---- */

/* The destination directory of a tree, made (as the owner) when missing. */
int xfer_local_open_dest_tree(const char *dest, char *msg, size_t msglen)
{
	int droot = -1, e;

	msg[0] = '\0';
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

/* A single file: dest names the copy, or an existing directory to put it in. */
int xfer_local_open_dest_file(const char *dest, const char *base, struct xfer_root *root,
			      char *msg, size_t msglen)
{
	const char *db = strrchr(dest, '/');
	char dir[XFER_PATH_MAX];
	struct stat dst;

	msg[0] = '\0';
	snprintf(root->name, sizeof(root->name), "%s", base);
	if (stat(dest, &dst) == 0 && S_ISDIR(dst.st_mode)) {
		root->dir = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	} else if (db) {
		snprintf(dir, sizeof(dir), "%.*s", db == dest ? 1 : (int)(db - dest), dest);
		if (xfer_mkparents(dest, msg, msglen) == 0)
			root->dir = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		snprintf(root->name, sizeof(root->name), "%s", db + 1);
	} else {
		errno = EINVAL;
	}
	if (root->dir < 0) {
		if (!msg[0])
			snprintf(msg, msglen, "cannot open destination directory for %s: %s", dest,
				 strerror(errno));
		return -1;
	}
	return 0;
}

static int _open_dest(struct xfer_ctx *ctx, const struct xfer_root *src, struct xfer_ep **ep,
		      struct xfer_root *root, char *msg, size_t msglen)
{
	if (!_ep_new(ctx, ep, msg, msglen))
		return XFER_RETRYABLE;
	root->dir = -1;
	if (!S_ISDIR(src->st.st_mode))
		return xfer_local_open_dest_file(ctx->dest, src->name, root, msg, msglen) < 0 ? XFER_FINAL :
		       XFER_OK;
	root->dir = xfer_local_open_dest_tree(ctx->dest, msg, msglen);
	if (root->dir < 0)
		return errno == ENOSPC || errno == EIO ? XFER_RETRYABLE : XFER_FINAL;
	return XFER_OK;
}

static int _stat(struct xfer_ep *ep, int dir, const char *name, struct stat *st)
{
	(void)ep;
	return fstatat(dir, name, st, AT_SYMLINK_NOFOLLOW) < 0 ? errno : 0;
}

static int _mkdir(struct xfer_ep *ep, int dir, const char *name, int *sub)
{
	(void)ep;
	/* O_NOFOLLOW: a symlink where a directory belongs is refused (ELOOP). */
	if (mkdirat(dir, name, 0700) == 0 || errno == EEXIST)
		*sub = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	else
		*sub = -1;
	return *sub < 0 ? errno : 0;
}

static void _dir_done(struct xfer_ep *ep, int dir, int sdir, const struct stat *st)
{
	struct timespec ts[2] = { st->st_atim, st->st_mtim };

	if (sdir >= 0)
		xfer_copy_xattrs(sdir, dir, ep->ctx->xattr_ns);
	fchmod(dir, st->st_mode & 07777);
	fsync(dir);
	futimens(dir, ts);
	close(dir);
}

/*
 * XFER_W_RESUME: what an earlier attempt of this request left under the
 * temporary name is kept, if it is a plain file of ours alone.
 */
static int _open_resume(struct xfer_wfile *wf, const char **what)
{
	struct stat st;

	wf->fd = openat(wf->dir, wf->tmp, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC,
			0600);
	if (wf->fd < 0) {
		*what = "cannot create a temporary file for";
		return errno;
	}
	if (fstat(wf->fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
	    st.st_nlink != 1) {
		close(wf->fd);
		wf->fd = -1;
		*what = "the temporary file is not a plain file of yours (remove it) for";
		return EPERM;
	}
	return 0;
}

static int _open_write(struct xfer_ep *ep, struct xfer_wfile *wf, unsigned flags,
		       const char **what)
{
	int e;

	wf->fd = wf->vfd = -1;
	if (durable_tmpname(wf->tmp, sizeof(wf->tmp), wf->name, ep->ctx->request_id) < 0) {
		*what = "name too long";
		return ENAMETOOLONG;
	}
	if (flags & XFER_W_RESUME)
		return _open_resume(wf, what);
	wf->fd = durable_create(wf->dir, wf->tmp, O_WRONLY);
	if (wf->fd < 0) {
		*what = "cannot create destination";
		return errno;
	}
	if (!(flags & XFER_W_VERIFY))
		return 0;
	wf->vfd = openat(wf->dir, wf->tmp, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (wf->vfd >= 0)
		return 0;
	e = errno;
	close(wf->fd);
	wf->fd = -1;
	unlinkat(wf->dir, wf->tmp, 0);
	*what = "copy failed";
	return e;
}

static void _abort(struct xfer_ep *ep, struct xfer_wfile *wf)
{
	(void)ep;
	if (wf->vfd >= 0)
		close(wf->vfd);
	if (wf->fd >= 0)
		close(wf->fd);
	wf->fd = wf->vfd = -1;
	unlinkat(wf->dir, wf->tmp, 0);
}

static int _commit(struct xfer_ep *ep, struct xfer_wfile *wf, int sfd, const struct stat *cur,
		   unsigned flags)
{
	struct timespec ts[2] = { cur->st_atim, cur->st_mtim };
	int fd = wf->fd, e = 0;

	if (wf->vfd >= 0)
		close(wf->vfd);
	wf->vfd = -1;
	if (fchmod(fd, cur->st_mode & 07777) < 0 || futimens(fd, ts) < 0)
		e = errno;
	if (sfd >= 0)
		xfer_copy_xattrs(sfd, fd, ep->ctx->xattr_ns);
	if (e) {
		_abort(ep, wf);
		return e;
	}
	wf->fd = -1;
	if (!(flags & XFER_C_DEFER))
		return durable_commit(wf->dir, wf->tmp, wf->name, fd, DURABLE_FSYNC |
				      (flags & XFER_C_DIRSYNC ? DURABLE_DIRSYNC : 0));
	if (close(fd) < 0) {
		e = errno;
		unlinkat(wf->dir, wf->tmp, 0);
	}
	return e;
}

/*
 * SyncMode=batch (xfer_endpoint.h). The runs of wf (files of one directory next to each other): each file
 * system synced once (a run's directory is fstat'ed for its device; the few
 * devices seen are remembered), every file renamed into place, then each
 * directory with a file placed made durable. A failed sync fails its run's
 * files (their temporary files removed); a failed fsync its placed ones.
 */
#define COMMIT_DEVS 8

/* Where the run of files of wf[i]'s directory that starts at i ends. */
static size_t _run_end(struct xfer_wfile *const *wf, size_t n, size_t i)
{
	size_t end = i + 1;

	while (end < n && wf[end]->dir == wf[i]->dir)
		end++;
	return end;
}

static void _batch_commit(struct xfer_ep *ep, struct xfer_wfile *const *wf, size_t n,
			  int *err, const char **what)
{
	dev_t devs[COMMIT_DEVS];
	size_t ndev = 0;

	(void)ep;
	for (size_t i = 0; i < n;) {
		size_t end = _run_end(wf, n, i);
		struct stat st;
		int e = 0;

		if (fstat(wf[i]->dir, &st) < 0) {
			e = errno;
		} else {
			size_t k = 0;

			while (k < ndev && devs[k] != st.st_dev)
				k++;
			if (k == ndev && syncfs(wf[i]->dir) < 0)
				e = errno;
			else if (k == ndev && ndev < COMMIT_DEVS)
				devs[ndev++] = st.st_dev;
		}
		for (size_t j = i; j < end; j++) {
			err[j] = e;
			what[j] = "cannot make durable";
			if (e)
				unlinkat(wf[j]->dir, wf[j]->tmp, 0);
		}
		i = end;
	}
	for (size_t i = 0; i < n; i++) {
		if (err[i])
			continue;
		if (renameat(wf[i]->dir, wf[i]->tmp, wf[i]->dir, wf[i]->name) == 0)
			continue;
		err[i] = errno;
		what[i] = "cannot rename into place";
		unlinkat(wf[i]->dir, wf[i]->tmp, 0);
	}
	for (size_t i = 0; i < n;) {
		size_t end = _run_end(wf, n, i), placed = 0;

		for (size_t j = i; j < end; j++)
			placed += !err[j];
		if (placed && fsync(wf[i]->dir) < 0) {
			int e = errno;

			for (size_t j = i; j < end; j++)
				if (!err[j]) {
					err[j] = e;
					what[j] = "cannot make the directory durable for";
				}
		}
		i = end;
	}
}

static int _readback(struct xfer_ep *ep, const struct xfer_buf *tb, int dir, const char *name,
		     int64_t expect, char *cks)
{
	return xfer_engine_verify(ep->ctx, tb, dir, name, expect, cks);
}

static int _symlink(struct xfer_ep *ep, int dir, const char *name, const char *target,
		    const struct stat *st, const char **what)
{
	char tmp[NAME_MAX + 1], got[PATH_MAX];
	struct timespec ts[2] = { st->st_atim, st->st_mtim };
	ssize_t n;
	int e;

	if (durable_tmpname(tmp, sizeof(tmp), name, ep->ctx->request_id) < 0) {
		*what = "name too long";
		return ENAMETOOLONG;
	}
	unlinkat(dir, tmp, 0);
	if (symlinkat(target, dir, tmp) < 0) {
		*what = "cannot create symlink";
		return errno;
	}
	utimensat(dir, tmp, ts, AT_SYMLINK_NOFOLLOW);
	if ((e = durable_commit(dir, tmp, name, -1, 0)) != 0) {
		*what = "cannot rename symlink into place";
		return e;
	}
	n = readlinkat(dir, name, got, sizeof(got) - 1);
	if (n < 0) {
		*what = "cannot verify";
		return errno;
	}
	got[n] = '\0';
	if (strcmp(got, target) != 0) {
		*what = "checksum mismatch after copy of";
		return EIO;
	}
	return 0;
}

/* ---- byte ranges ---- */

static int _range_parent(struct xfer_ep *ep, const struct xfer_root *root, const char *rel,
			 int make, int *dir)
{
	const char *slash = strrchr(rel, '/');

	(void)ep;
	*dir = xfer_open_dir(root->dir, rel, slash ? (size_t)(slash - rel) : 0, make ? 0700 : 0);
	return *dir < 0 ? errno : 0;
}

static void _range_release(struct xfer_ep *ep, int dir)
{
	(void)ep;
	if (dir >= 0)
		close(dir);
}

static int _range_open(struct xfer_ep *ep, struct xfer_wfile *wf, int64_t size,
		       const char **what)
{
	struct stat st;
	int e;

	wf->fd = wf->vfd = -1;
	if (durable_tmpname(wf->tmp, sizeof(wf->tmp), wf->name, ep->ctx->request_id) < 0) {
		*what = "name too long:";
		return ENAMETOOLONG;
	}
	wf->fd = openat(wf->dir, wf->tmp, O_RDWR | (size >= 0 ? O_CREAT : 0) | O_NOFOLLOW |
			O_NOCTTY | O_CLOEXEC, 0600);
	if (wf->fd < 0) {
		*what = size >= 0 ? "cannot create the temporary file of" :
			"cannot open the temporary file of";
		return errno;
	}
	if (size < 0)
		return 0;
	/* Another mover's file must be the owner's own regular file. */
	if (fstat(wf->fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_size != size && ftruncate(wf->fd, size) < 0)) {
		e = !S_ISREG(st.st_mode) || st.st_uid != geteuid() ? EPERM : errno;
		close(wf->fd);
		wf->fd = -1;
		*what = "cannot size the temporary file of";
		return e;
	}
	return 0;
}

/*
 * This range's pages written back and waited for, then the file's size and
 * block allocation (fdatasync). The first step is best effort (some file
 * systems lack it): fdatasync writes back whatever is left and reports any
 * write error since the file was opened. Then the clean cached pages are
 * dropped, so the read-back comes from the device.
 */
static int _range_sync(struct xfer_ep *ep, struct xfer_wfile *wf, int64_t off, int64_t len)
{
	(void)ep;
	(void)sync_file_range(wf->fd, off, len, SYNC_FILE_RANGE_WAIT_BEFORE |
			      SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
	if (fdatasync(wf->fd) < 0)
		return errno;
	posix_fadvise(wf->fd, off, len, POSIX_FADV_DONTNEED);
	return 0;
}

static const struct xfer_ep_range _range = {
	.parent = _range_parent, .release = _range_release, .open_shared = _range_open,
	.sync = _range_sync,
};

static const struct xfer_ep_tree _tree = {
	.mkdir = _mkdir, .dir_done = _dir_done, .readlink = _readlink, .symlink = _symlink,
};

static const struct xfer_ep_device _device = {
	.abort = _abort, .readback = _readback, .batch_commit = _batch_commit, .label = _label,
};

static const struct xfer_ep_request _request = {
	.open_source = _open_source, .open_dest = _open_dest, .close = _close,
};

const struct xfer_endpoint xfer_ep_local = {
	.name = "local", .request = &_request,
	.stat = _stat, .list = _list, .open_read = _open_read, .open_write = _open_write,
	.commit = _commit, .remove = _remove,
	.tree = &_tree, .device = &_device, .range = &_range,
};

/* ---- null: a destination that stores nothing ---- */

/* Handles are duplicates of the source's, so that every one the driver ends is its own. */
static int _null_open_dest(struct xfer_ctx *ctx, const struct xfer_root *src,
			   struct xfer_ep **ep, struct xfer_root *root, char *msg, size_t msglen)
{
	if (!_ep_new(ctx, ep, msg, msglen))
		return XFER_RETRYABLE;
	snprintf(root->name, sizeof(root->name), "%s", src->name);
	root->dir = dup(src->dir);
	if (root->dir < 0) {
		snprintf(msg, msglen, "cannot open destination directory for %s: %s", ctx->dest,
			 strerror(errno));
		return XFER_FINAL;
	}
	return XFER_OK;
}

static int _null_mkdir(struct xfer_ep *ep, int dir, const char *name, int *sub)
{
	(void)ep;
	(void)name;
	*sub = dup(dir);
	return *sub < 0 ? errno : 0;
}

static void _null_dir_done(struct xfer_ep *ep, int dir, int sdir, const struct stat *st)
{
	(void)ep;
	(void)sdir;
	(void)st;
	close(dir);
}

static int _null_open_write(struct xfer_ep *ep, struct xfer_wfile *wf, unsigned flags,
			    const char **what)
{
	(void)ep;
	(void)flags;
	(void)what;
	wf->fd = wf->vfd = -1;	/* xfer_engine_stream reads and hashes only */
	return 0;
}

static int _null_commit(struct xfer_ep *ep, struct xfer_wfile *wf, int sfd,
			const struct stat *cur, unsigned flags)
{
	(void)ep;
	(void)wf;
	(void)sfd;
	(void)cur;
	(void)flags;
	return 0;
}

static int _null_symlink(struct xfer_ep *ep, int dir, const char *name, const char *target,
			 const struct stat *st, const char **what)
{
	(void)ep;
	(void)dir;
	(void)name;
	(void)target;
	(void)st;
	(void)what;
	return 0;
}

static const struct xfer_ep_tree _null_tree = {
	.mkdir = _null_mkdir, .dir_done = _null_dir_done, .symlink = _null_symlink,
};

/* Only a destination: a request's source is always a real endpoint. */
static const struct xfer_ep_request _null_request = {
	.open_dest = _null_open_dest, .close = _close,
};

const struct xfer_endpoint xfer_ep_null = {
	.name = "null", .discards = 1, .request = &_null_request,
	.open_write = _null_open_write, .commit = _null_commit,
	.tree = &_null_tree,
};
