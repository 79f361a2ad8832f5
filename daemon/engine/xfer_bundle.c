/*
 * xfer_bundle.c - the "bundle" endpoint: archive copies of trees of many
 * small files as tar bundles plus an index. A destination of the engine's
 * driver (xfer_pipeline.c), which owns the walk, the per-file decisions,
 * failure accounting, progress, keep=no and the verdict; what is here is
 * only the bundle's own: appending members to the open tar stream, closing
 * a bundle (durable, read back, journalled), the index, and resume by the
 * journal.
 *
 * Runs only inside a worker that already has the owner's uid, gid and groups,
 * and only for archive requests (anything else goes to the local endpoint).
 * When the source is a tree holding at least BundleMinFiles regular files
 * smaller than BundleFileMax (or its archive was bundled before), the
 * archive destination DEST gets:
 *
 *   DEST/.stagehand-bundles/bundle-000001.tar …  small files and symlinks,
 *                                                POSIX pax tar (common/tar.h),
 *                                                each at most BundleSize bytes
 *   DEST/.stagehand-bundles/index.jsonl          one JSON object a line
 *   DEST/<relpath>                               larger files, copied alone
 *
 * Index lines (docs/admin-guide.md, "Small-file bundling and restore"):
 *   {"stagehand_index":1,"checksum":"xxh128","source":…,"dest":…,…}   first
 *   {"bundle":"bundle-000001.tar","size":N,"checksum":"xxh128:…","members":K}
 *   {"path":…,"type":"file","bundle":…,"offset":O,"size":S,"mode":M,
 *    "mtime_ns":T,"checksum":"xxh128:…"}      offset = the member's first data byte
 *   {"path":…,"type":"file","size":…,…}        no "bundle": stored at DEST/path
 *   {"path":…,"type":"symlink","target":…,"bundle":…,"offset":…,…}
 *   {"path":…,"type":"dir","mode":M,"mtime_ns":T}
 * A name that is not valid UTF-8 is written as "path_hex" ("target_hex").
 *
 * Durability and verification: a bundle is written under a temporary name,
 * closed with the two end-of-archive blocks, fsynced, read back from disk
 * (its pages dropped first) and its checksum compared before it is renamed
 * into place; each member's checksum is taken from the bytes written. Only
 * then are its members appended to the journal (index.jsonl.part, fsynced)
 * and the driver reports them (and, with keep=no, removes their sources).
 * Larger files are the local endpoint's (temporary file, fsync, rename,
 * read back), in directories made only when such a file goes there; each is
 * journalled once the driver verified it. At the end the index is written
 * from the journal (temp, fsync, rename, read back).
 *
 * Resume at bundle granularity: a new attempt reads the journal (or the
 * index of a finished attempt), re-reads every bundle it lists and keeps
 * those whose size and checksum still match; members of kept bundles whose
 * source is unchanged are not packed again. Anything else in the bundle
 * folder (temporary files, unlisted or damaged bundles) is removed.
 *
 * The journal and the index are xfer_bundle_index.c.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "durable.h"
#include "log.h"
#include "tar.h"
#include "xfer_bundle_int.h"
#include "xfer_endpoint.h"
#include "xfer_util.h"

static struct xfer_bundle_params _params = {
	.min_files = 1000, .file_max = 1ULL << 20, .bundle_size = 1ULL << 30,
};

void xfer_bundle_configure(const struct xfer_bundle_params *p)
{
	_params = *p;
}

/* ---- the open bundle ---- */

static int _bflush(struct xfer_ep *r)
{
	if (r->blen && bundle__write(r, r->bfd, r->buf, r->blen) < 0)
		return errno;
	r->blen = 0;
	return 0;
}

static int _bput(struct xfer_ep *r, const void *data, size_t len)
{
	const char *p = data;

	cksum_update(&r->bck, data, len);
	r->boff += len;
	while (len) {
		size_t k = BUNDLE_CHUNK - r->blen < len ? BUNDLE_CHUNK - r->blen : len;

		memcpy(r->buf + r->blen, p, k);
		r->blen += k;
		p += k;
		len -= k;
		if (r->blen == BUNDLE_CHUNK) {
			int e = _bflush(r);

			if (e)
				return e;
		}
	}
	return 0;
}

/* Members that will not be in a bundle. */
static void _mem_clear(struct xfer_ep *r)
{
	bundle__vec_free(&r->mem);
	r->spoiled = 0;
}

static int _bopen(struct xfer_ep *r)
{
	_mem_clear(r);
	r->bnum = ++r->next_bundle;
	snprintf(r->btmp, sizeof(r->btmp), ".bundle-%06d.tar.stagehand-%lld", r->bnum,
		 (long long)r->ctx->request_id);
	r->bfd = durable_create(r->bdir, r->btmp, O_RDWR);
	if (r->bfd < 0)
		return errno;
	if (cksum_init(&r->bck, r->ctx->algo) < 0) {
		close(r->bfd);
		r->bfd = -1;
		unlinkat(r->bdir, r->btmp, 0);
		return ENOMEM;
	}
	r->boff = 0;
	r->blen = 0;
	return 0;
}

static void _babort(struct xfer_ep *r)
{
	if (r->bfd < 0)
		return;
	cksum_abort(&r->bck);
	close(r->bfd);
	r->bfd = -1;
	unlinkat(r->bdir, r->btmp, 0);
	r->blen = 0;
}

/* The journal lines of bundle b and its members: a new string, or NULL. */
static char *_bundle_text(struct xfer_ep *r, const struct bundle__bmeta *b)
{
	char *text = NULL;
	size_t len;
	FILE *f = open_memstream(&text, &len);
	int ok = f != NULL;

	for (size_t i = 0; ok && i <= r->mem.n; i++) {
		char *l = i == 0 ? bundle__bundle_line(b) : bundle__rec_line(&r->mem.v[i - 1]);

		ok = l && fputs(l, f) >= 0;
		free(l);
	}
	if (f && fclose(f) != 0)
		ok = 0;
	if (!ok) {
		free(text);
		return NULL;
	}
	return text;
}

/* The members now in a journalled bundle join what the index lists; 0 or an errno. */
static int _journal_members(struct xfer_ep *r, const struct bundle__bmeta *b)
{
	char *text = _bundle_text(r, b);
	int e = text ? 0 : ENOMEM;

	pthread_mutex_lock(&r->mu);
	if (!e && bundle__journal(r, text) < 0)
		e = errno;
	for (size_t i = 0; !e && i < r->mem.n; i++) {
		struct bundle__rec *x = bundle__push(&r->src);

		if (!x) {
			e = ENOMEM;	/* the journal has it: a retry keeps the bundle */
			break;
		}
		*x = r->mem.v[i];
		x->done = 1;
		r->mem.v[i].rel = r->mem.v[i].target = NULL;	/* moved */
	}
	pthread_mutex_unlock(&r->mu);
	free(text);
	return e;
}

/* Close, verify, rename and journal the open bundle (xfer_endpoint.h: group_commit). */
static int _group_commit(struct xfer_ep *r, const char **what)
{
	static const char zero[TAR_END_BYTES];
	char want[CKSUM_HEX_MAX], got[CKSUM_HEX_MAX], bn[BUNDLE_NAME_SIZE];
	int64_t len = 0;
	int e = xfer_stopped(r->ctx) ? EINTR : r->bfd < 0 ? (r->spoiled ? r->spoiled : EIO) : 0;
	struct bundle__bmeta *b;

	*what = "cannot write bundle for";
	if (e) {
		_babort(r);
		_mem_clear(r);
		return e;
	}
	bundle_name(bn, r->bnum);
	e = _bput(r, zero, sizeof(zero));
	if (!e)
		e = _bflush(r);
	cksum_final(&r->bck, want);
	if (!e && fsync(r->bfd) < 0)
		e = errno;
	if (!e)
		e = bundle__cksum(r, r->bfd, got, &len);
	if (!e && (strcmp(got, want) != 0 || (uint64_t)len != r->boff))
		e = EIO;
	if (e)
		close(r->bfd);
	else
		e = durable_commit(r->bdir, r->btmp, bn, r->bfd, DURABLE_DIRSYNC);
	r->bfd = -1;
	b = e ? NULL : bundle__meta_add(r, r->bnum);
	if (!e && !b)
		e = ENOMEM;
	if (e) {
		unlinkat(r->bdir, r->btmp, 0);
		_mem_clear(r);
		if (e == EIO)
			*what = "bundle checksum mismatch after writing; member";
		return e;
	}
	b->size = len;
	b->members = (int64_t)r->mem.n;
	b->kept = 1;
	snprintf(b->cks, sizeof(b->cks), "%s", got);
	/* The journal learns of the bundle and its members in one fsynced write. */
	if ((e = _journal_members(r, b)) != 0) {
		*what = "cannot record bundle member";
		_mem_clear(r);
		return e;
	}
	xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: %s/%s/%s verified: %zu members, %lld bytes, %s",
		  (long long)r->ctx->request_id, r->ctx->dest, BUNDLE_DIR, bn, r->mem.n,
		  (long long)len, got);
	_mem_clear(r);
	return 0;
}

/* Read all of a small file (as walked in st) into r->fbuf; 0 or an errno. */
static int _read_small(struct xfer_ep *r, int fd, const struct stat *st)
{
	struct stat cur;
	size_t got = 0;
	int err = 0;

	if (fstat(fd, &cur) < 0 || cur.st_size != st->st_size ||
	    xfer_ns(&cur.st_mtim) != xfer_ns(&st->st_mtim))
		return EAGAIN;
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
	for (;;) {
		ssize_t n = read(fd, r->fbuf + got, r->p.file_max - got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			err = errno;
			break;
		}
		if (n == 0)
			break;
		got += (size_t)n;
		if (got == r->p.file_max)
			break;
	}
	/* Changed while read: other size, or a newer mtime. */
	if (!err && (got != (size_t)st->st_size || fstat(fd, &cur) < 0 ||
		     xfer_ns(&cur.st_mtim) != xfer_ns(&st->st_mtim)))
		err = EAGAIN;
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	return err;
}

static struct tar_member _member(const struct xfer_ep *r, const char *rel, const struct stat *st,
				 const char *target)
{
	return (struct tar_member){
		.path = rel, .linkname = target, .type = target ? TAR_SYMLINK : TAR_REG,
		.size = target ? 0 : (uint64_t)st->st_size, .mode = st->st_mode & 07777,
		.uid = (uint32_t)r->ctx->uid, .gid = (uint32_t)getgid(),
		.mtime_ns = xfer_ns(&st->st_mtim),
	};
}

static int _group_want(struct xfer_ep *r, const char *rel, const struct stat *st,
		       const char *target)
{
	struct tar_member m = _member(r, rel, st, target);
	uint64_t need = tar_header_size(&m) + m.size + tar_pad(m.size);

	if (!target && (uint64_t)st->st_size >= r->p.file_max)
		return XFER_G_FILE;
	if (r->mem.n && (r->spoiled || r->boff + need + TAR_END_BYTES > r->p.bundle_size))
		return XFER_G_FULL;
	return XFER_G_ADD;
}

/* Header, data and padding of one member; 0 or the errno of the write. */
static int _put_member(struct xfer_ep *r, const struct tar_member *m, const char *hdr,
		       size_t hl, struct bundle__rec *e)
{
	static const char pad[TAR_BLOCK];
	int rc = _bput(r, hdr, hl);

	e->offset = (int64_t)r->boff;
	if (!rc && m->size)
		rc = _bput(r, r->fbuf, m->size);
	if (!rc)
		rc = _bput(r, pad, tar_pad(m->size));
	return rc;
}

static int _group_add(struct xfer_ep *r, const char *rel, int sfd, const struct stat *st,
		      const char *target, char *cks, const char **what)
{
	struct tar_member m = _member(r, rel, st, target);
	char hdr[3 * TAR_BLOCK + 2 * TAR_NAME_MAX + 512], err[256];
	size_t hl = tar_header_size(&m);
	struct bundle__rec *e;
	struct cksum ck;
	int rc;

	*what = "cannot write bundle for";
	if (!hl) {
		*what = "name too long for a bundle";
		return ENAMETOOLONG;
	}
	if (r->bfd < 0 && (rc = _bopen(r)) != 0) {
		*what = "cannot create bundle for";
		return rc;
	}
	cks[0] = '\0';
	if (!target && (rc = _read_small(r, sfd, st)) != 0) {
		*what = rc == EAGAIN ? "source changed during copy" : "cannot read source";
		return rc;
	}
	if (!target && cksum_init(&ck, r->ctx->algo) < 0) {
		*what = "cannot checksum";
		return ENOMEM;
	}
	if (!target) {
		cksum_update(&ck, r->fbuf, m.size);
		cksum_final(&ck, cks);
	}
	if (!tar_header_encode(&m, hdr, sizeof(hdr), err, sizeof(err))) {
		*what = "name cannot be stored in a bundle";
		return ENAMETOOLONG;
	}
	if (!(e = bundle__push(&r->mem)))
		return ENOMEM;
	*e = (struct bundle__rec){ .rel = strdup(rel), .target = target ? strdup(target) : NULL,
				   .type = target ? E_LINK : E_FILE, .size = (int64_t)m.size,
				   .mtime_ns = m.mtime_ns, .mode = m.mode, .bundle = r->bnum };
	snprintf(e->cks, sizeof(e->cks), "%s", cks);
	rc = !e->rel || (target && !e->target) ? ENOMEM : _put_member(r, &m, hdr, hl, e);
	if (rc) {
		free(e->rel);
		free(e->target);
		r->mem.n--;
	}
	if (rc && rc != ENOMEM) {
		/* A write error spoils the whole open bundle. */
		r->spoiled = rc;
		_babort(r);
	}
	return rc;
}

/* ---- directories: a handle is an index; made only when a plain file goes there ---- */

/* The descriptor of directory handle h (made when create): -1 with errno set. */
static int _fd(struct xfer_ep *r, int h, int create)
{
	int fd = -1, e = EBADF;

	pthread_mutex_lock(&r->mu);
	if (h >= 0 && (size_t)h < r->ndirs && r->dirs[h].rel) {
		fd = r->dirs[h].fd;
		if (fd < 0)
			fd = r->dirs[h].fd = xfer_open_dir(r->droot, r->dirs[h].rel,
							    strlen(r->dirs[h].rel),
							    create ? 0700 : 0);
		e = errno;
	}
	pthread_mutex_unlock(&r->mu);
	errno = e;
	return fd;
}

static int _mkdir(struct xfer_ep *r, int dir, const char *name, int *sub)
{
	int e = 0;

	pthread_mutex_lock(&r->mu);
	if (xfer_grow((void **)&r->dirs, r->ndirs, &r->capdirs, sizeof(*r->dirs), 64) < 0) {
		e = ENOMEM;
	} else {
		const char *up = r->dirs[dir].rel;
		struct bundle__dir *d = &r->dirs[r->ndirs];

		d->fd = -1;
		if (asprintf(&d->rel, "%s%s%s", up, *up ? "/" : "", name) < 0)
			e = ENOMEM;
		else
			*sub = (int)r->ndirs++;
	}
	pthread_mutex_unlock(&r->mu);
	return e;
}

/* The index lists the directory; if it was made, the local endpoint finishes it. */
static void _dir_done(struct xfer_ep *r, int dir, int sdir, const struct stat *st)
{
	struct bundle__dir *d;
	struct bundle__rec *x = NULL;
	int fd;

	pthread_mutex_lock(&r->mu);
	d = &r->dirs[dir];
	fd = d->fd;
	if (fd < 0 && dir)	/* made on the way to a deeper plain file, or never */
		fd = xfer_open_dir(r->droot, d->rel, strlen(d->rel), 0);
	if (dir && (x = bundle__push(&r->src)) != NULL)
		*x = (struct bundle__rec){ .rel = d->rel, .type = E_DIR, .mode = st->st_mode & 07777,
					   .mtime_ns = xfer_ns(&st->st_mtim), .done = 1 };
	else
		free(d->rel);
	d->rel = NULL;
	d->fd = -1;
	if (!dir)
		r->droot = -1;
	pthread_mutex_unlock(&r->mu);
	if (fd >= 0)
		xfer_ep_local.tree->dir_done(r->loc, fd, sdir, st);
}

/* ---- plain files: the local endpoint's, in the directory a handle names ---- */

static int _open_write(struct xfer_ep *r, struct xfer_wfile *wf, unsigned flags,
		       const char **what)
{
	int h = wf->dir, e;

	if ((wf->dir = _fd(r, h, 1)) < 0) {
		e = errno;
		*what = "cannot create destination directory for";
	} else {
		e = xfer_ep_local.open_write(r->loc, wf, flags, what);
	}
	wf->dir = h;
	return e;
}

static int _commit(struct xfer_ep *r, struct xfer_wfile *wf, int sfd, const struct stat *cur,
		   unsigned flags)
{
	int h = wf->dir, e;

	wf->dir = _fd(r, h, 0);
	e = xfer_ep_local.commit(r->loc, wf, sfd, cur, flags);
	wf->dir = h;
	return e;
}

static void _abort(struct xfer_ep *r, struct xfer_wfile *wf)
{
	int h = wf->dir;

	wf->dir = _fd(r, h, 0);
	xfer_ep_local.device->abort(r->loc, wf);
	wf->dir = h;
}

static int _readback(struct xfer_ep *r, const struct xfer_buf *tb, int dir, const char *name,
		     int64_t expect, char *cks)
{
	return xfer_ep_local.device->readback(r->loc, tb, _fd(r, dir, 0), name, expect, cks);
}

/* A plain file verified by the driver: journalled, then listed in the index. */
static int _record(struct xfer_ep *r, const char *rel, const struct stat *st, const char *cks)
{
	struct bundle__rec e = { .rel = strdup(rel), .type = E_FILE, .size = st->st_size,
				 .mtime_ns = xfer_ns(&st->st_mtim), .mode = st->st_mode & 07777,
				 .done = 1 };
	char *line;
	struct bundle__rec *x;
	int err = 0;

	snprintf(e.cks, sizeof(e.cks), "%s", cks);
	line = e.rel ? bundle__rec_line(&e) : NULL;
	pthread_mutex_lock(&r->mu);
	if (!line || bundle__journal(r, line) < 0)
		err = line ? errno : ENOMEM;
	else if (!(x = bundle__push(&r->src)))
		err = ENOMEM;
	else
		*x = e, e.rel = NULL;
	pthread_mutex_unlock(&r->mu);
	free(line);
	free(e.rel);
	return err;
}

/* ---- resume: the journal's record of an earlier attempt ---- */

static int _kept(struct xfer_ep *r, int dir, const char *name, const char *rel,
		 const struct stat *st, const char *target, char *cks)
{
	struct bundle__rec *j = bundle__find(&r->jr, rel), *x;
	struct stat cur;
	int fd;

	if (!j || j->type != (target ? E_LINK : E_FILE) || j->size != (target ? 0 : st->st_size) ||
	    j->mtime_ns != xfer_ns(&st->st_mtim) || j->mode != (st->st_mode & 07777u))
		return 0;
	if (target && (!j->target || strcmp(j->target, target) != 0))
		return 0;
	if (!target && !j->bundle &&
	    ((fd = _fd(r, dir, 0)) < 0 || fstatat(fd, name, &cur, AT_SYMLINK_NOFOLLOW) < 0 ||
	     !S_ISREG(cur.st_mode) || cur.st_size != st->st_size ||
	     xfer_ns(&cur.st_mtim) != xfer_ns(&st->st_mtim)))
		return 0;
	pthread_mutex_lock(&r->mu);
	if ((x = bundle__push(&r->src)) != NULL) {
		*x = *j;
		x->done = 1;
		x->rel = strdup(j->rel);
		x->target = j->target ? strdup(j->target) : NULL;
		if (!x->rel || (j->target && !x->target)) {
			free(x->rel);
			free(x->target);
			r->src.n--;
			x = NULL;
		}
	}
	pthread_mutex_unlock(&r->mu);
	if (!x)
		return 0;	/* out of memory: archived again */
	j->done = 1;	/* superseded by x in the index */
	snprintf(cks, CKSUM_HEX_MAX, "%s", j->cks);
	return 1;
}

/* ---- the request ---- */

static int _open_dest(struct xfer_ctx *ctx, const struct xfer_root *src, struct xfer_ep **ep,
		      struct xfer_root *root, char *msg, size_t msglen)
{
	struct xfer_ep *r = calloc(1, sizeof(*r));
	struct stat bst;
	int rc;

	*ep = r;
	if (!r) {
		snprintf(msg, msglen, "out of memory");
		return XFER_RETRYABLE;
	}
	*r = (struct xfer_ep){ .ctx = ctx, .p = _params, .tree = S_ISDIR(src->st.st_mode),
			       .droot = -1, .bdir = -1, .jfd = -1, .bfd = -1 };
	pthread_mutex_init(&r->mu, NULL);
	rc = xfer_ep_local.request->open_dest(ctx, src, &r->loc, root, msg, msglen);
	if (rc != XFER_OK || !r->tree)
		return rc;
	/* Once bundled, an archive stays bundled. */
	r->had_bundles = fstatat(root->dir, BUNDLE_DIR, &bst, AT_SYMLINK_NOFOLLOW) == 0 &&
			 S_ISDIR(bst.st_mode);
	if (xfer_grow((void **)&r->dirs, 0, &r->capdirs, sizeof(*r->dirs), 64) < 0 ||
	    !(r->dirs[0].rel = strdup(""))) {
		snprintf(msg, msglen, "out of memory");
		return XFER_RETRYABLE;
	}
	r->droot = r->dirs[0].fd = root->dir;
	r->ndirs = 1;
	root->dir = 0;
	return XFER_OK;
}

static void _close(struct xfer_ep *r, struct xfer_root *root)
{
	_babort(r);
	for (size_t i = 0; i < r->ndirs; i++) {
		if (r->dirs[i].fd >= 0)
			close(r->dirs[i].fd);
		free(r->dirs[i].rel);
	}
	if (r->jfd >= 0)
		close(r->jfd);
	if (r->bdir >= 0)
		close(r->bdir);
	bundle__vec_free(&r->src);
	bundle__vec_free(&r->jr);
	bundle__vec_free(&r->mem);
	free(r->dirs);
	free(r->bm);
	free(r->buf);
	free(r->fbuf);
	pthread_mutex_destroy(&r->mu);
	if (r->loc) {
		if (r->ndirs)
			root->dir = -1;	/* a handle of ours, its descriptor closed above */
		xfer_ep_local.request->close(r->loc, root);
	}
	free(r);
}

static void _survey(struct xfer_ep *r, const char *rel, const struct stat *st)
{
	if (strcmp(rel, BUNDLE_DIR) == 0)
		r->reserved = 1;
	if (S_ISREG(st->st_mode)) {
		r->files++;
		r->small += (uint64_t)st->st_size < r->p.file_max;
	}
}

/* The bundle folder, as the owner; -1 with msg. */
static int _open_bdir(struct xfer_ep *r, char *msg, size_t msglen)
{
	int e;

	if (mkdirat(r->droot, BUNDLE_DIR, 0700) == 0 || errno == EEXIST)
		r->bdir = openat(r->droot, BUNDLE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
				 O_CLOEXEC);
	if (r->bdir >= 0)
		return 0;
	e = errno;
	snprintf(msg, msglen, "cannot create archive directory %s/%s: %s (its parent must "
		 "exist and be writable by you)", r->ctx->dest, BUNDLE_DIR, strerror(e));
	errno = e;
	return -1;
}

/* A tree of few small files is the local endpoint's; else resume, then bundle. */
static int _plan(struct xfer_ep *r, const struct xfer_endpoint **use, char *msg, size_t msglen)
{
	struct xfer_ctx *ctx = r->ctx;

	*use = &xfer_ep_local;
	if (!r->tree || (r->small < r->p.min_files && !r->had_bundles))
		return XFER_OK;
	if (r->reserved) {
		snprintf(msg, msglen, "the source holds its own '%s' at the top, where a bundled "
			 "archive keeps its index: rename it, or archive this tree with "
			 "ArchiveBundle=no", BUNDLE_DIR);
		return XFER_FINAL;
	}
	r->buf = malloc(BUNDLE_CHUNK);
	r->fbuf = malloc(r->p.file_max ? r->p.file_max : 1);
	if (!r->buf || !r->fbuf) {
		snprintf(msg, msglen, "out of memory");
		return XFER_RETRYABLE;
	}
	xfer_logf(ctx, LOG_LVL_INFO, "request %lld: bundling %lld files (%lld smaller than %llu "
		  "bytes) of %s into %s/%s", (long long)ctx->request_id, (long long)r->files,
		  (long long)r->small, (unsigned long long)r->p.file_max, ctx->source, ctx->dest,
		  BUNDLE_DIR);
	if (_open_bdir(r, msg, msglen) < 0)
		return errno == ENOSPC || errno == EIO ? XFER_RETRYABLE : XFER_FINAL;
	/* Resume: what an earlier attempt verified stays. */
	bundle__load_journal(r);
	bundle__check_kept(r);
	bundle__sweep(r, 0);
	*use = &xfer_ep_bundle;
	return XFER_OK;
}

/* The index, from everything archived or kept (sorted: the index and its lookups). */
static int _finish(struct xfer_ep *r, char *msg, size_t msglen)
{
	if (r->bfd >= 0) {
		_babort(r);	/* opened, but no member was added */
		r->next_bundle--;
	}
	_mem_clear(r);
	bundle__sort(&r->src);
	return bundle__write_index(r, msg, msglen) < 0 ? XFER_RETRYABLE : XFER_OK;
}

static const struct xfer_ep_tree _tree = { .mkdir = _mkdir, .dir_done = _dir_done };

static const struct xfer_ep_device _device = { .abort = _abort, .readback = _readback };

static const struct xfer_ep_group _group = {
	.survey = _survey, .plan = _plan, .kept = _kept, .group_want = _group_want,
	.group_add = _group_add, .group_commit = _group_commit, .record = _record,
	.finish = _finish,
};

static const struct xfer_ep_request _request = { .open_dest = _open_dest, .close = _close };

/* Only a destination; symlinks always go into bundles, so it makes none itself. */
const struct xfer_endpoint xfer_ep_bundle = {
	.name = "bundle", .request = &_request,
	.open_write = _open_write, .commit = _commit,
	.tree = &_tree, .device = &_device, .group = &_group,
};
