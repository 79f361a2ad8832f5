/*
 * xfer_bundle.c - the "bundle" backend: archive copies of trees of many small
 * files as tar bundles plus an index.
 *
 * Runs only inside a worker that already has the owner's uid, gid and groups,
 * and only for archive requests (anything else goes to the local backend).
 * The source tree is walked as the local backend walks it (openat with
 * O_NOFOLLOW from the parent's fd; FIFOs, sockets and devices skipped with a
 * reason). When the tree holds at least BundleMinFiles regular files smaller
 * than BundleFileMax, the archive destination DEST gets:
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
 * then are its members appended to the journal (index.jsonl.part, fsynced),
 * reported done to the daemon and, with keep=no, removed from scratch.
 * Large files follow the local backend's temp + fsync + rename + read-back.
 * At the end the index is written from the journal (temp, fsync, rename,
 * read back) and the source is labelled archived.
 *
 * Resume at bundle granularity: a new attempt reads the journal (or the
 * index of a finished attempt), re-reads every bundle it lists and keeps
 * those whose size and checksum still match; members of kept bundles whose
 * source is unchanged are not packed again. Anything else in the bundle
 * folder (temporary files, unlisted or damaged bundles) is removed.
 *
 * The walk, the durable write, read-back and failure accounting are the
 * engine's (xfer_engine.h, common/durable.h); the journal and the index are
 * xfer_bundle_index.c.
 *
 * Audit: one record per member (the daemon's item and audit rows), path_dst
 * being the member's logical place DEST/relpath; the index says in which
 * bundle and at which offset it lives. Each bundle is logged once.
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

#include "durable.h"
#include "log.h"
#include "queue.h"
#include "tar.h"
#include "xattr.h"
#include "xfer_bundle_int.h"
#include "xfer_util.h"

static struct xfer_bundle_params _params = {
	.min_files = 1000, .file_max = 1ULL << 20, .bundle_size = 1ULL << 30,
};

void xfer_bundle_configure(const struct xfer_bundle_params *p)
{
	_params = *p;
}

/* ---- pass 1: walk the source into r->src (the engine's walk) ---- */

static int _visit(struct xfer_walk *w, struct xfer_walk_dir *dir, const char *name,
		  const char *rel, const struct stat *st)
{
	struct bundle__run *r = w->arg;
	struct bundle__rec *e = bundle__push(&r->src);

	if (!e)
		return 0;
	if (dir->depth == 0 && strcmp(name, BUNDLE_DIR) == 0) {
		e->type = E_SPECIAL;
		e->rel = strdup(name);
		e->err = -1;	/* reserved name */
		return 0;
	}
	e->rel = strdup(rel);
	e->size = st->st_size;
	e->mtime_ns = xfer_ns(&st->st_mtim);
	e->mode = st->st_mode & 07777;
	e->ino = st->st_ino;
	if (S_ISREG(st->st_mode)) {
		e->type = E_FILE;
		r->t.files++;
		r->t.bytes += st->st_size;
		if ((uint64_t)st->st_size < r->p.file_max)
			r->small++;
	} else if (S_ISLNK(st->st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlinkat(dir->fd, name, t, sizeof(t) - 1);

		if (n < 0) {
			e->type = E_ERROR;
			e->err = errno;
			return 0;
		}
		t[n] = '\0';
		e->type = E_LINK;
		e->size = 0;
		e->target = strdup(t);
	} else if (S_ISDIR(st->st_mode)) {
		e->type = E_DIR;
		e->size = 0;
		if (!xfer_excluded(r->ctx, rel))
			return 1;
		/* exempt= inside the tree: not archived, not removed */
		e->type = E_SPECIAL;
		e->err = -2;
		r->t.skipped++;
	} else {
		e->type = E_SPECIAL;
		e->err = S_ISFIFO(st->st_mode) ? 1 : S_ISSOCK(st->st_mode) ? 2 : 3;
		r->t.skipped++;
	}
	return 0;
}

/* Failures are reported once the endpoint knows it bundles this tree. */
static void _walk_fail(struct xfer_walk *w, const char *rel, int err, const char *what)
{
	struct bundle__run *r = w->arg;
	struct bundle__rec *e = r->src.n ? &r->src.v[r->src.n - 1] : NULL;

	/* A directory that cannot be entered: its own record says why. */
	if (e && e->type == E_DIR && e->rel && strcmp(e->rel, rel) == 0 &&
	    strcmp(what, "cannot read directory") != 0) {
		e->type = E_ERROR;
		e->err = err;
		return;
	}
	e = bundle__push(&r->src);
	if (e) {
		e->type = E_ERROR;
		e->err = err;
		e->rel = strdup(rel);
	}
}

static void _walk(struct bundle__run *r)
{
	struct xfer_walk w = { .ctx = r->ctx, .arg = r, .visit = _visit, .fail = _walk_fail };
	struct xfer_walk_dir root = { r->sroot, "", 0, NULL, NULL };

	xfer_walk_tree(&w, &root);
}

/* ---- parent directories by relpath, never through a symlink ---- */

static int _open_under(int root, const char *dir, int create)
{
	return xfer_open_dir(root, dir, strlen(dir), create ? 0700 : 0);
}

static int _parent(struct bundle__run *r, const char *rel, const char **leaf, int dest)
{
	const char *slash = strrchr(rel, '/');
	size_t dl = slash ? (size_t)(slash - rel) : 0;
	char **cache = dest ? &r->dp_rel : &r->sp_rel;
	int *cfd = dest ? &r->dp_fd : &r->sp_fd;
	char *dir;

	*leaf = slash ? slash + 1 : rel;
	if (*cache && strlen(*cache) == dl && strncmp(*cache, rel, dl) == 0)
		return *cfd;
	if (*cfd >= 0)
		close(*cfd);
	free(*cache);
	*cache = NULL;
	*cfd = -1;
	dir = strndup(rel, dl);
	if (!dir)
		return -1;
	*cfd = _open_under(dest ? r->droot : r->sroot, dir, dest);
	if (*cfd < 0) {
		free(dir);
		return -1;
	}
	*cache = dir;
	return *cfd;
}

static int _bflush(struct bundle__run *r)
{
	if (r->blen && bundle__write(r, r->bfd, r->buf, r->blen) < 0)
		return errno;
	r->blen = 0;
	return 0;
}

static int _bput(struct bundle__run *r, const void *data, size_t len)
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

static int _bopen(struct bundle__run *r)
{
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
	r->nbmem = 0;
	return 0;
}

static void _babort(struct bundle__run *r)
{
	if (r->bfd < 0)
		return;
	cksum_abort(&r->bck);
	close(r->bfd);
	r->bfd = -1;
	unlinkat(r->bdir, r->btmp, 0);
	r->blen = 0;
}

static void _remove_source(struct bundle__run *r, const struct bundle__rec *e)
{
	const char *leaf = e->rel;
	int pfd;

	if (r->ctx->keep || e->type != E_FILE)
		return;
	pfd = _parent(r, e->rel, &leaf, 0);
	xfer_engine_remove_source(r->ctx, pfd, leaf, e->rel);
}

/* The journal lines of bundle b and its members: a new string, or NULL. */
static char *_bundle_text(struct bundle__run *r, const struct bundle__bmeta *b)
{
	size_t cap = 4096, used = 0;
	char *text = malloc(cap);

	for (size_t i = 0; text && i <= r->nbmem; i++) {
		char *l = i == 0 ? bundle__bundle_line(b) : bundle__rec_line(&r->src.v[r->bmem[i - 1]]);
		size_t ll = l ? strlen(l) : 0;

		if (!l) {
			free(text);
			return NULL;
		}
		if (used + ll + 1 > cap) {
			char *n;

			while (used + ll + 1 > cap)
				cap *= 2;
			n = realloc(text, cap);
			if (!n) {
				free(l);
				free(text);
				return NULL;
			}
			text = n;
		}
		memcpy(text + used, l, ll + 1);
		used += ll;
		free(l);
	}
	return text;
}

/* Close, verify, rename, journal and report the open bundle. */
static void _bclose(struct bundle__run *r)
{
	static const char zero[TAR_END_BYTES];
	char want[CKSUM_HEX_MAX], got[CKSUM_HEX_MAX], bn[32];
	int64_t len = 0;
	int e = 0;
	struct bundle__bmeta *b;
	char *text;

	if (r->bfd < 0)
		return;
	if (r->nbmem == 0) {
		_babort(r);
		r->next_bundle--;
		return;
	}
	bundle__name(bn, sizeof(bn), r->bnum);
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
		for (size_t i = 0; i < r->nbmem; i++)
			if (e != EINTR)
				xfer_fail(&r->t, r->src.v[r->bmem[i]].rel, e, e == EIO ?
					   "bundle checksum mismatch after writing; member" :
					   "cannot write bundle for");
		r->nbmem = 0;
		return;
	}
	b->size = len;
	b->members = (int64_t)r->nbmem;
	b->kept = 1;
	snprintf(b->cks, sizeof(b->cks), "%s", got);
	/* The journal learns of the bundle and its members in one fsynced write. */
	text = _bundle_text(r, b);
	if (!text || bundle__journal(r, text) < 0) {
		int err = text ? errno : ENOMEM;

		free(text);
		for (size_t i = 0; i < r->nbmem; i++)
			xfer_fail(&r->t, r->src.v[r->bmem[i]].rel, err, "cannot record bundle member");
		r->nbmem = 0;
		return;
	}
	free(text);
	xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: %s/%s/%s verified: %zu members, %lld bytes, %s",
		  (long long)r->ctx->request_id, r->ctx->dest, BUNDLE_DIR, bn, r->nbmem,
		  (long long)len, got);
	for (size_t i = 0; i < r->nbmem; i++) {
		struct bundle__rec *m = &r->src.v[r->bmem[i]];

		m->done = 1;
		xfer_emit(r->ctx, XR_ITEM_DONE, 0, m->size, (int64_t)time(NULL), (int64_t)time(NULL),
			  m->type == E_FILE ? m->cks : NULL, m->rel, m->type == E_FILE ? "file" : "symlink");
		if (m->type == E_FILE) {
			r->t.verified++;
			_remove_source(r, m);
		}
	}
	r->nbmem = 0;
}

/* Read one small file whole into r->fbuf; 0 or an errno. */
static int _read_small(struct bundle__run *r, struct bundle__rec *e)
{
	const char *leaf;
	int pfd = _parent(r, e->rel, &leaf, 0), fd, err = 0;
	struct stat st;
	size_t got = 0;

	if (pfd < 0)
		return errno;
	fd = openat(pfd, leaf, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0)
		return errno;
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_ino != e->ino ||
	    st.st_size != e->size || xfer_ns(&st.st_mtim) != e->mtime_ns) {
		close(fd);
		return EAGAIN;
	}
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
	if (!err && (got != (size_t)e->size || fstat(fd, &st) < 0 || xfer_ns(&st.st_mtim) != e->mtime_ns))
		err = EAGAIN;
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	return err;
}

static void _pack(struct bundle__run *r, size_t idx)
{
	struct bundle__rec *e = &r->src.v[idx];
	struct tar_member m = {
		.path = e->rel, .linkname = e->type == E_LINK ? e->target : NULL,
		.type = e->type == E_LINK ? TAR_SYMLINK : TAR_REG,
		.size = e->type == E_FILE ? (uint64_t)e->size : 0, .mode = e->mode,
		.uid = (uint32_t)r->ctx->uid, .gid = (uint32_t)getgid(), .mtime_ns = e->mtime_ns,
	};
	char hdr[3 * TAR_BLOCK + 2 * TAR_NAME_MAX + 512], err[256];
	size_t hl = tar_header_size(&m);
	uint64_t need = hl + m.size + tar_pad(m.size);
	int rc;

	xfer_emit(r->ctx, XR_ITEM_START, 0, (int64_t)m.size, e->mtime_ns, e->mode, NULL, e->rel,
		  e->type == E_FILE ? "file" : "symlink");
	if (!hl) {
		xfer_fail(&r->t, e->rel, ENAMETOOLONG, "name too long for a bundle");
		return;
	}
	if (r->bfd >= 0 && r->nbmem && r->boff + need + TAR_END_BYTES > r->p.bundle_size)
		_bclose(r);
	if (r->bfd < 0 && (rc = _bopen(r)) != 0) {
		xfer_fail(&r->t, e->rel, rc, "cannot create bundle for");
		return;
	}
	if (e->type == E_FILE) {
		struct cksum ck;

		rc = _read_small(r, e);
		if (rc) {
			xfer_fail(&r->t, e->rel, rc, rc == EAGAIN ? "source changed during copy" :
				   "cannot read source");
			return;
		}
		if (cksum_init(&ck, r->ctx->algo) < 0) {
			xfer_fail(&r->t, e->rel, ENOMEM, "cannot checksum");
			return;
		}
		cksum_update(&ck, r->fbuf, (size_t)e->size);
		cksum_final(&ck, e->cks);
	}
	if (!tar_header_encode(&m, hdr, sizeof(hdr), err, sizeof(err))) {
		xfer_fail(&r->t, e->rel, ENAMETOOLONG, "name cannot be stored in a bundle");
		return;
	}
	if ((rc = _bput(r, hdr, hl)) != 0)
		goto fail;
	e->offset = (int64_t)r->boff;
	e->bundle = r->bnum;
	if (m.size && (rc = _bput(r, r->fbuf, m.size)) != 0)
		goto fail;
	memset(hdr, 0, TAR_BLOCK);
	if ((rc = _bput(r, hdr, tar_pad(m.size))) != 0)
		goto fail;
	if (xfer_grow((void **)&r->bmem, r->nbmem, &r->capbmem, sizeof(*r->bmem), 1024) < 0) {
		rc = ENOMEM;
		goto fail;
	}
	r->bmem[r->nbmem++] = idx;
	if (e->type == E_FILE)
		xfer_emit(r->ctx, XR_ITEM_COPIED, 0, 0, 0, 0, e->cks, e->rel, NULL);
	return;
fail:
	/* A write error spoils the whole open bundle. */
	xfer_fail(&r->t, e->rel, rc, "cannot write bundle for");
	for (size_t i = 0; i < r->nbmem; i++)
		xfer_fail(&r->t, r->src.v[r->bmem[i]].rel, rc, "cannot write bundle for");
	r->nbmem = 0;
	_babort(r);
}

/* The source of a large file and its temporary file; 0, or -1 after reporting why. */
static int _plain_open(struct bundle__run *r, struct bundle__rec *e, int *sfd, int *dp,
		       const char **dleaf, char *tmp, size_t tmplen)
{
	const char *sleaf;
	int sp = _parent(r, e->rel, &sleaf, 0), dfd, err;
	struct stat st;

	if (sp < 0) {
		xfer_fail(&r->t, e->rel, errno, "cannot open source directory of");
		return -1;
	}
	*sfd = openat(sp, sleaf, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (*sfd < 0) {
		xfer_fail(&r->t, e->rel, errno, "cannot open source");
		return -1;
	}
	if (fstat(*sfd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_ino != e->ino) {
		close(*sfd);
		xfer_fail(&r->t, e->rel, EAGAIN, "source changed while walking");
		return -1;
	}
	fcntl(*sfd, F_SETFL, fcntl(*sfd, F_GETFL) & ~O_NONBLOCK);
	*dp = _parent(r, e->rel, dleaf, 1);
	if (*dp < 0) {
		err = errno;
		close(*sfd);
		xfer_fail(&r->t, e->rel, err, "cannot create destination directory for");
		return -1;
	}
	if (snprintf(tmp, tmplen, ".stagehand-%lld-%lld", (long long)r->ctx->request_id,
		     (long long)e->ino) >= (int)tmplen) {
		close(*sfd);
		xfer_fail(&r->t, e->rel, ENAMETOOLONG, "name too long");
		return -1;
	}
	dfd = durable_create(*dp, tmp, O_RDWR);
	if (dfd < 0) {
		err = errno;
		close(*sfd);
		xfer_fail(&r->t, e->rel, err, "cannot create destination");
		return -1;
	}
	return dfd;
}

/* ---- large files: copied alone, durable and read back as the engine does ---- */

static void _copy_plain(struct bundle__run *r, struct bundle__rec *e)
{
	struct xfer_buf tb = { r->buf, BUNDLE_CHUNK };
	const char *dleaf;
	char tmp[NAME_MAX + 1], want[CKSUM_HEX_MAX], got[CKSUM_HEX_MAX];
	struct stat st;
	int64_t off = 0, len = 0;
	int sfd, dp, dfd, err;
	char *line;

	xfer_emit(r->ctx, XR_ITEM_START, 0, e->size, e->mtime_ns, e->mode, NULL, e->rel, "file");
	dfd = _plain_open(r, e, &sfd, &dp, &dleaf, tmp, sizeof(tmp));
	if (dfd < 0)
		return;
	posix_fadvise(sfd, 0, 0, POSIX_FADV_SEQUENTIAL);
	err = xfer_engine_stream(r->ctx, &tb, sfd, dfd, -1, 0, &off, want);
	if (!err && (off != e->size || fstat(sfd, &st) < 0 || xfer_ns(&st.st_mtim) != e->mtime_ns))
		err = EAGAIN;
	if (!err) {
		struct timespec ts[2] = { st.st_atim, st.st_mtim };

		if (fchmod(dfd, e->mode) < 0 || futimens(dfd, ts) < 0 || fsync(dfd) < 0)
			err = errno;
	}
	if (!err)
		err = bundle__cksum(r, dfd, got, &len);
	if (!err && (strcmp(got, want) != 0 || len != e->size))
		err = EIO;
	posix_fadvise(sfd, 0, 0, POSIX_FADV_DONTNEED);
	close(sfd);
	if (err) {
		close(dfd);
		unlinkat(dp, tmp, 0);
	} else {
		err = durable_commit(dp, tmp, dleaf, dfd, DURABLE_DIRSYNC);
	}
	if (err) {
		if (err != EINTR)
			xfer_fail(&r->t, e->rel, err, err == EAGAIN ? "source changed during copy" :
				  err == EIO ? "checksum mismatch after copy of" : "copy failed");
		return;
	}
	snprintf(e->cks, sizeof(e->cks), "%s", got);
	e->bundle = 0;
	xfer_emit(r->ctx, XR_ITEM_COPIED, 0, 0, 0, 0, want, e->rel, NULL);
	line = bundle__rec_line(e);
	if (!line || bundle__journal(r, line) < 0) {
		free(line);
		xfer_fail(&r->t, e->rel, errno ? errno : ENOMEM, "cannot record");
		return;
	}
	free(line);
	e->done = 1;
	xfer_emit(r->ctx, XR_ITEM_DONE, 0, e->size, (int64_t)time(NULL), (int64_t)time(NULL), got,
		  e->rel, "file");
	r->t.verified++;
	_remove_source(r, e);
}

static int _try_keep(struct bundle__run *r, struct bundle__rec *e)
{
	struct bundle__rec *j = bundle__find(&r->jr, e->rel);

	if (!j || j->type != e->type || j->size != e->size || j->mtime_ns != e->mtime_ns ||
	    j->mode != e->mode)
		return 0;
	if (e->type == E_LINK && strcmp(j->target, e->target) != 0)
		return 0;
	if (e->type == E_FILE && !j->bundle) {
		const char *leaf;
		int dp = _parent(r, e->rel, &leaf, 1);
		struct stat st;

		if (dp < 0 || fstatat(dp, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISREG(st.st_mode) || st.st_size != e->size || xfer_ns(&st.st_mtim) != e->mtime_ns)
			return 0;
	}
	e->bundle = j->bundle;
	e->offset = j->offset;
	snprintf(e->cks, sizeof(e->cks), "%s", j->cks);
	e->done = 1;
	j->done = 1;	/* superseded by e in the index */
	if (e->type == E_FILE)
		r->t.kept++;
	if (e->type != E_FILE ||
	    xfer_engine_want(r->ctx, e->rel, e->size, e->mtime_ns) != XFER_WANT_KEPT) {
		/* Verified on disk, but the daemon has no record of it yet. */
		xfer_emit(r->ctx, XR_ITEM_START, 0, e->size, e->mtime_ns, e->mode, NULL, e->rel,
			  e->type == E_FILE ? "file" : "symlink");
		if (e->type == E_FILE)
			xfer_emit(r->ctx, XR_ITEM_COPIED, 0, 0, 0, 0, e->cks, e->rel, NULL);
		xfer_emit(r->ctx, XR_ITEM_DONE, 0, e->size, (int64_t)time(NULL), (int64_t)time(NULL),
			  e->type == E_FILE ? e->cks : NULL, e->rel, e->type == E_FILE ? "file" : "symlink");
	}
	if (e->type == E_FILE)
		_remove_source(r, e);
	return 1;
}

/* Directories of the destination take the source's modes and times, deepest first. */
static void _dir_times(struct bundle__run *r)
{
	for (size_t i = r->src.n; i-- > 0;) {
		struct bundle__rec *e = &r->src.v[i];
		int fd;

		if (e->type != E_DIR)
			continue;
		fd = _open_under(r->droot, e->rel, 0);
		if (fd >= 0) {
			struct timespec ts[2] = { { 0, UTIME_OMIT },
						  { (time_t)(e->mtime_ns / 1000000000LL),
						    (long)(e->mtime_ns % 1000000000LL) } };

			fchmod(fd, e->mode);
			fsync(fd);
			futimens(fd, ts);
			close(fd);
		}
	}
}

static void _cleanup(struct bundle__run *r)
{
	_babort(r);
	if (r->sp_fd >= 0)
		close(r->sp_fd);
	if (r->dp_fd >= 0)
		close(r->dp_fd);
	if (r->jfd >= 0)
		close(r->jfd);
	if (r->bdir >= 0)
		close(r->bdir);
	if (r->droot >= 0)
		close(r->droot);
	if (r->sroot >= 0)
		close(r->sroot);
	free(r->sp_rel);
	free(r->dp_rel);
	bundle__vec_free(&r->src);
	bundle__vec_free(&r->jr);
	free(r->bm);
	free(r->bmem);
	free(r->buf);
	free(r->fbuf);
	xfer_tally_destroy(&r->t);
}

static int _finish(struct bundle__run *r, int result, const char *msg)
{
	xfer_finish(r->ctx, result, msg);
	_cleanup(r);
	return result;
}

/* What the walk found that is not archived: failures, skips; -1 when the tree cannot be. */
static int _report_walk(struct bundle__run *r, char *msg, size_t msglen)
{
	for (size_t i = 0; i < r->src.n; i++) {
		struct bundle__rec *e = &r->src.v[i];

		if (e->type == E_ERROR) {
			xfer_fail(&r->t, e->rel ? e->rel : "?", e->err, "cannot read");
		} else if (e->type == E_SPECIAL && e->err == -1) {
			snprintf(msg, msglen, "the source holds its own '%s' at the top, where a "
				 "bundled archive keeps its index: rename it, or archive this tree with "
				 "ArchiveBundle=no", BUNDLE_DIR);
			return -1;
		} else if (e->type == E_SPECIAL && e->err == -2) {
			xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, e->rel, XFER_EXCLUDE_REASON);
		} else if (e->type == E_SPECIAL) {
			snprintf(msg, msglen, "%s skipped: only regular files, directories and "
				 "symlinks are archived", e->err == 1 ? "FIFO" : e->err == 2 ? "socket" :
				 "device");
			xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, e->rel, msg);
		}
	}
	return 0;
}

/* The destination and its bundle folder, as the owner; -1 with errno and msg. */
static int _open_dest(struct bundle__run *r, char *msg, size_t msglen)
{
	const char *dest = r->ctx->dest;

	if (xfer_mkparents(dest, msg, msglen) < 0) {
		errno = EACCES;
		return -1;
	}
	r->droot = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r->droot < 0 && errno == ENOENT && mkdir(dest, 0700) == 0)
		r->droot = open(dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r->droot >= 0 && mkdirat(r->droot, BUNDLE_DIR, 0700) < 0 && errno != EEXIST)
		r->bdir = -1;
	else if (r->droot >= 0)
		r->bdir = openat(r->droot, BUNDLE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (r->droot < 0 || r->bdir < 0) {
		int e = errno;

		snprintf(msg, msglen, "cannot create archive directory %s/%s: %s (its parent "
			 "must exist and be writable by you)", dest, BUNDLE_DIR, strerror(e));
		errno = e;
		return -1;
	}
	return 0;
}

/* Resume, then pack or copy every file and symlink, then the index. */
static int _archive(struct bundle__run *r, const struct stat *st)
{
	struct xfer_ctx *ctx = r->ctx;
	char msg[XFER_TEXT_MAX];
	int rc;

	/* Resume: what an earlier attempt verified stays. */
	bundle__load_journal(r);
	bundle__check_kept(r);
	bundle__sweep(r, 0);
	for (size_t i = 0; i < r->src.n && !xfer_stopped(ctx); i++) {
		struct bundle__rec *e = &r->src.v[i];

		if (e->type != E_FILE && e->type != E_LINK)
			continue;
		if (_try_keep(r, e))
			continue;
		if (e->type == E_LINK || (uint64_t)e->size < r->p.file_max)
			_pack(r, i);
		else
			_copy_plain(r, e);
	}
	if (!xfer_stopped(ctx))
		_bclose(r);
	if (xfer_stopped(ctx))
		return _finish(r, XFER_INTERRUPTED, "interrupted; will be resumed");
	xfer_emit(ctx, XR_PHASE, QS_VERIFYING, 0, 0, 0, NULL, NULL, NULL);
	if (bundle__write_index(r, msg, sizeof(msg)) < 0)
		return _finish(r, XFER_RETRYABLE, msg);
	_dir_times(r);
	{
		struct timespec ts[2] = { st->st_atim, st->st_mtim };

		fchmod(r->droot, st->st_mode & 07777);
		fsync(r->droot);
		futimens(r->droot, ts);
	}
	rc = xfer_tally_verdict(&r->t, 1, "the source tree", msg, sizeof(msg));
	if (rc != XFER_OK)
		return _finish(r, rc, msg);
	xfer_label_all(ctx, r->sroot, "archived", ctx->dest);
	return _finish(r, XFER_OK, NULL);
}

/* Not yet an endpoint of xfer_pipeline.c: it packs and indexes in its own loop (xfer_endpoint.h). */
static int _run_bundle(struct xfer_ctx *ctx)
{
	struct bundle__run r = { .ctx = ctx, .p = _params, .sroot = -1, .droot = -1, .bdir = -1,
				 .jfd = -1, .sp_fd = -1, .dp_fd = -1, .bfd = -1 };
	char msg[XFER_TEXT_MAX], p[XFER_PATH_MAX];
	struct stat st, bst;
	int had_bundles = 0;

	if (strcmp(ctx->action, "archive") != 0)
		return xfer_backend_local.run(ctx);
	xfer_tally_init(&r.t, ctx);
	r.sroot = xfer_open_source(ctx, &st, msg, sizeof(msg));
	if (r.sroot < 0)
		return _finish(&r, errno == ENOMEM || errno == EIO ? XFER_RETRYABLE : XFER_FINAL, msg);
	if (!S_ISDIR(st.st_mode)) {
		_cleanup(&r);	/* not a tree: nothing to bundle */
		return xfer_backend_local.run(ctx);
	}
	if (snprintf(p, sizeof(p), "%s/%s", ctx->dest, BUNDLE_DIR) < (int)sizeof(p) &&
	    lstat(p, &bst) == 0 && S_ISDIR(bst.st_mode))
		had_bundles = 1;	/* once bundled, an archive stays bundled */
	_walk(&r);
	if (r.small < r.p.min_files && !had_bundles) {
		_cleanup(&r);
		return xfer_backend_local.run(ctx);
	}
	r.buf = malloc(BUNDLE_CHUNK);
	r.fbuf = malloc(r.p.file_max ? r.p.file_max : 1);
	if (!r.buf || !r.fbuf)
		return _finish(&r, XFER_RETRYABLE, "out of memory");
	qsort(r.src.v, r.src.n, sizeof(r.src.v[0]), bundle__cmp_rel);
	xfer_emit(ctx, XR_TOTALS, 0, r.t.files, r.t.bytes, r.t.skipped, NULL, NULL, NULL);
	if (_report_walk(&r, msg, sizeof(msg)) < 0)
		return _finish(&r, XFER_FINAL, msg);
	xfer_logf(ctx, LOG_LVL_INFO, "request %lld: bundling %lld files (%lld smaller than %llu "
		  "bytes) of %s into %s/%s", (long long)ctx->request_id, (long long)r.t.files,
		  (long long)r.small, (unsigned long long)r.p.file_max, ctx->source, ctx->dest,
		  BUNDLE_DIR);
	if (_open_dest(&r, msg, sizeof(msg)) < 0)
		return _finish(&r, errno == ENOSPC || errno == EIO ? XFER_RETRYABLE : XFER_FINAL, msg);
	return _archive(&r, &st);
}

const struct xfer_backend xfer_backend_bundle = { "bundle", NULL, _run_bundle };
