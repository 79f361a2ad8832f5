/* restore.c - see restore.h. */
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

#include "bundle.h"
#include "checksum.h"
#include "durable.h"
#include "resolve.h"
#include "restore.h"
#include "tar.h"

#define INDEX_NAME BUNDLE_INDEX_NAME
#define INDEX_MAX (1LL << 32)          /* bytes of index accepted */
#define RCHUNK (1u << 20)
#define MAX_DEPTH 256

enum _kind { K_FILE, K_LINK, K_DIR };

struct restore_ent {
	char *path;
	char *target;
	enum _kind kind;
	int bundle;                  /* index into bundles, -1 = stored plain */
	int64_t offset, size, mtime_ns;
	uint32_t mode;
	char cks[CKSUM_HEX_MAX];
	long line;
};

struct restore_bundle {
	char name[BUNDLE_NAME_SIZE];
	int64_t size;
	int fd;
};

static void _err(struct restore *r, const char *rel, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* One failed entry: counted, and told to the caller. */
static void _err(struct restore *r, const char *rel, const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	r->errors++;
	if (r->on_error)
		r->on_error(r->arg, rel, msg);
}

/*
 * Where rel (a path in the archive) lands below dfd, into out: itself, or
 * with the selection files[0] replaced by r->rename. "" is dfd itself.
 */
static const char *_out(struct restore *r, const char *rel, char *out, size_t outlen)
{
	size_t n;
	const char *rest;

	if (!r->rename || r->nfiles < 1)
		return rel;
	n = strlen(r->files[0]);
	rest = rel + n;
	if (*rest == '/' && !r->rename[0])
		rest++;
	if (snprintf(out, outlen, "%s%s", r->rename, rest) >= (int)outlen)
		return NULL;
	return out;
}

/* ---- destination side: nothing is followed ---- */

/*
 * Open (creating with create, mode 0700) directory dir below root with
 * resolve_open: no link followed, '..' refused. -1 with errno (ELOOP for a
 * symlink, ENOTDIR for a file).
 */
static int _open_dir(int root, const char *dir, int create)
{
	return resolve_open(root, dir, O_RDONLY | O_DIRECTORY, 0700,
			    create ? RESOLVE_OPEN_MKDIR : 0, NULL, 0);
}

/* Parent of rel at the destination (created); *leaf into rel. */
static int _dest_parent(struct restore *r, const char *rel, const char **leaf)
{
	const char *slash = strrchr(rel, '/');
	char dir[BUNDLE_PATH_MAX];

	*leaf = slash ? slash + 1 : rel;
	if (!slash)
		return dup(r->dfd);
	snprintf(dir, sizeof(dir), "%.*s", (int)(slash - rel), rel);
	return _open_dir(r->dfd, dir, 1);
}

static const char *_dest_why(int e)
{
	return e == ELOOP || e == ENOTDIR ? "a component at the destination is a symlink or not a "
	       "directory: refused (nothing is followed)" : strerror(e);
}

static int _tmpname(char *out, size_t len, const char *leaf)
{
	int n = snprintf(out, len, ".%s.stagehand-restore-%ld", leaf, (long)getpid());

	if (n < 0 || (size_t)n >= len || n > NAME_MAX)
		n = snprintf(out, len, ".stagehand-restore-%ld-%zu", (long)getpid(), strlen(leaf));
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* Existing entry at the destination: 0 to go on, -1 reported. */
static int _check_existing(struct restore *r, int pfd, const char *leaf, const char *rel)
{
	struct stat st;

	if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	if (S_ISDIR(st.st_mode)) {
		_err(r, rel, "%s/%s: a directory is in the way; not replaced", r->dest, rel);
		return -1;
	}
	if (!r->force) {
		_err(r, rel, "%s/%s exists; not replaced (use --force to replace it)", r->dest, rel);
		return -1;
	}
	return 0;
}

/*
 * The directory that will hold rel (never through a symlink) and the
 * temporary name to write it under; -1 after saying why.
 */
static int _dest_tmp(struct restore *r, const char *rel, const char **leaf, char *tmp,
		     size_t tmplen)
{
	int pfd = _dest_parent(r, rel, leaf);

	if (pfd < 0) {
		_err(r, rel, "cannot restore %s/%s: %s", r->dest, rel, _dest_why(errno));
		return -1;
	}
	if (_check_existing(r, pfd, *leaf, rel) < 0 || _tmpname(tmp, tmplen, *leaf) < 0) {
		close(pfd);
		return -1;
	}
	return pfd;
}

/*
 * Where rel lands (*out, in ob), its directory and the temporary name to
 * write it under (_dest_tmp); -1 after saying why.
 */
static int _dest_open(struct restore *r, const char *rel, char *ob, size_t oblen,
		      const char **out, const char **leaf, char *tmp, size_t tmplen)
{
	*out = _out(r, rel, ob, oblen);
	if (!*out || !**out) {
		_err(r, rel, "%s: its name at the destination is too long or empty", rel);
		return -1;
	}
	return _dest_tmp(r, *out, leaf, tmp, tmplen);
}

/* len bytes of sfd at off into tfd, hashed with algo into got; 0 or an errno. */
static int _copy_range(struct restore *r, int sfd, int64_t off, int64_t len, int tfd,
		       enum cksum_algo algo, char *got)
{
	struct cksum ck;
	int64_t done = 0;

	if (cksum_init(&ck, algo) < 0)
		return ENOMEM;
	while (done < len) {
		size_t want_n = (size_t)(len - done < RCHUNK ? len - done : RCHUNK);
		ssize_t n = pread(sfd, r->buf, want_n, off + done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			cksum_abort(&ck);
			return n < 0 ? errno : EIO;
		}
		cksum_update(&ck, r->buf, (size_t)n);
		for (ssize_t w = 0; w < n;) {
			ssize_t k = write(tfd, r->buf + w, (size_t)(n - w));

			if (k < 0 && errno == EINTR)
				continue;
			if (k < 0) {
				int e = errno;

				cksum_abort(&ck);
				return e;
			}
			w += k;
		}
		done += n;
	}
	cksum_final(&ck, got);
	return 0;
}

/* A plain archive has no checksum of its own: read the copy back; 0 or an errno. */
static int _read_back(struct restore *r, int tfd, enum cksum_algo algo, int64_t len,
		      const char *got)
{
	char back[CKSUM_HEX_MAX];
	struct cksum ck;
	int64_t k = 0;
	ssize_t n;

	if (cksum_init(&ck, algo) < 0)
		return ENOMEM;
	posix_fadvise(tfd, 0, 0, POSIX_FADV_DONTNEED);
	while ((n = pread(tfd, r->buf, RCHUNK, k)) > 0) {
		cksum_update(&ck, r->buf, (size_t)n);
		k += n;
	}
	cksum_final(&ck, back);
	return n < 0 || k != len || strcmp(back, got) != 0 ? EIO : 0;
}

/*
 * Restore one file: len bytes of sfd at off, to a temporary name next to
 * where rel lands (_out), checked against want (the checksum recorded when
 * it was archived; NULL: read back), then made durable and renamed
 * (common/durable.h).
 */
struct _file_piece {
	int64_t off, len;	/* the file's bytes in sfd */
	const char *rel;	/* where it lands, under the restore's root */
	const char *want;	/* its recorded checksum, or NULL */
	uint32_t mode;
	int64_t mtime_ns;
};

static int _write_file(struct restore *r, int sfd, const struct _file_piece *pc, const char *where)
{
	int64_t off = pc->off, len = pc->len, mtime_ns = pc->mtime_ns;
	const char *rel = pc->rel, *want = pc->want;
	uint32_t mode = pc->mode;
	const char *leaf, *out;
	char tmp[NAME_MAX + 1], got[CKSUM_HEX_MAX], ob[BUNDLE_PATH_MAX];
	enum cksum_algo algo = CKSUM_XXH128;
	int pfd, tfd, e = 0;

	if (want) {
		char name[16];
		const char *colon = strchr(want, ':');

		snprintf(name, sizeof(name), "%.*s", colon ? (int)(colon - want) : 0, want);
		if (cksum_algo_from_name(name, &algo) < 0) {
			_err(r, rel, "%s: unknown checksum '%s' recorded for it in the archive", rel,
			     want);
			return -1;
		}
	}
	pfd = _dest_open(r, rel, ob, sizeof(ob), &out, &leaf, tmp, sizeof(tmp));
	if (pfd < 0)
		return -1;
	tfd = durable_create(pfd, tmp, O_RDWR);
	if (tfd < 0) {
		_err(r, rel, "cannot create %s/%s: %s", r->dest, out, strerror(errno));
		close(pfd);
		return -1;
	}
	e = _copy_range(r, sfd, off, len, tfd, algo, got);
	if (!e && want && strcmp(got, want) != 0) {
		_err(r, rel, "%s: checksum mismatch in %s (recorded when it was archived: %s; read "
		     "now: %s): the archive copy is damaged; this file was not restored", rel, where,
		     want, got);
		unlinkat(pfd, tmp, 0);
		close(tfd);
		close(pfd);
		return -1;
	}
	if (!e) {
		struct timespec ts[2] = { { 0, UTIME_OMIT },
					  { (time_t)(mtime_ns / 1000000000LL),
					    (long)(mtime_ns % 1000000000LL) } };

		if (mtime_ns < 0)
			ts[1] = (struct timespec){ 0, UTIME_OMIT };
		/* No set-id bits come back from an archive. */
		if (fchmod(tfd, mode & 01777) < 0 || futimens(tfd, ts) < 0 || fsync(tfd) < 0)
			e = errno;
	}
	if (!e && !want)
		e = _read_back(r, tfd, algo, len, got);
	if (e) {
		close(tfd);
		unlinkat(pfd, tmp, 0);
	} else {
		e = durable_commit(pfd, tmp, leaf, tfd, 0);
	}
	if (e) {
		_err(r, rel, "cannot restore %s/%s: %s", r->dest, out, e == EIO && !want ?
		     "the copy read back differs from the archive" : strerror(e));
		close(pfd);
		return -1;
	}
	close(pfd);
	r->restored_files++;
	r->bytes += len;
	if (r->on_file)
		r->on_file(r->arg, out, len, mtime_ns, mode & 01777, got);
	return 0;
}

static int _write_link(struct restore *r, const char *rel, const char *target, int64_t mtime_ns)
{
	const char *leaf, *out;
	char tmp[NAME_MAX + 1], ob[BUNDLE_PATH_MAX];
	int pfd, e;

	pfd = _dest_open(r, rel, ob, sizeof(ob), &out, &leaf, tmp, sizeof(tmp));
	if (pfd < 0)
		return -1;
	unlinkat(pfd, tmp, 0);
	if (symlinkat(target, pfd, tmp) < 0) {
		_err(r, rel, "cannot create symlink %s/%s: %s", r->dest, out, strerror(errno));
		close(pfd);
		return -1;
	}
	if (mtime_ns >= 0) {
		struct timespec ts[2] = { { 0, UTIME_OMIT }, { (time_t)(mtime_ns / 1000000000LL),
							     (long)(mtime_ns % 1000000000LL) } };

		utimensat(pfd, tmp, ts, AT_SYMLINK_NOFOLLOW);
	}
	if ((e = durable_commit(pfd, tmp, leaf, -1, 0)) != 0) {
		_err(r, rel, "cannot restore %s/%s: %s", r->dest, out, strerror(e));
		close(pfd);
		return -1;
	}
	close(pfd);
	r->restored_links++;
	if (r->on_link)
		r->on_link(r->arg, out, target);
	return 0;
}

/* Make the directory where rel lands (its parents too); 0, or -1 reported. */
static int _make_dir(struct restore *r, const char *rel)
{
	char ob[BUNDLE_PATH_MAX];
	const char *out = _out(r, rel, ob, sizeof(ob));
	int fd;

	if (!out) {
		_err(r, rel, "%s: its name at the destination is too long", rel);
		return -1;
	}
	if (!*out)
		return 0;	/* the destination itself */
	fd = _open_dir(r->dfd, out, 1);
	if (fd < 0) {
		_err(r, rel, "cannot create %s/%s: %s", r->dest, out, _dest_why(errno));
		return -1;
	}
	close(fd);
	r->restored_dirs++;
	return 0;
}

static void _dir_meta(struct restore *r, const char *rel, uint32_t mode, int64_t mtime_ns)
{
	char ob[BUNDLE_PATH_MAX];
	const char *out = _out(r, rel, ob, sizeof(ob));
	struct timespec ts[2] = { { 0, UTIME_OMIT }, { (time_t)(mtime_ns / 1000000000LL),
						     (long)(mtime_ns % 1000000000LL) } };
	int fd;

	if (!out || !*out)
		return;	/* the destination itself keeps its own mode and time */
	fd = _open_dir(r->dfd, out, 0);
	if (fd < 0)
		return;
	/* Owner keeps write access until the end: a read-only dir would block its own files. */
	fchmod(fd, (mode & 01777) | 0700);
	if (mtime_ns >= 0)
		futimens(fd, ts);
	close(fd);
}


/* ---- the index ---- */

/*
 * Read, decode and check the whole index (common/bundle.c, the one strict
 * decoder) before anything is written. 0 or -1 (reported).
 */
static int _load_index(struct restore *r, int fd)
{
	struct bundle_index idx;
	struct stat st;
	char *text, why[256];
	size_t got = 0;
	long line = 0;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > INDEX_MAX) {
		_err(r, NULL, "%s/%s/%s is not a regular file of a sane size", r->archive, BUNDLE_DIR,
		     INDEX_NAME);
		return -1;
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		_err(r, NULL, "out of memory reading the index");
		return -1;
	}
	while (got < (size_t)st.st_size) {
		ssize_t n = read(fd, text + got, (size_t)st.st_size - got);

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	if (got != (size_t)st.st_size) {
		free(text);
		_err(r, NULL, "%s/%s/%s: cannot read it whole", r->archive, BUNDLE_DIR, INDEX_NAME);
		return -1;
	}
	if (bundle_index_decode(text, got, &idx, &line, why, sizeof(why)) < 0) {
		free(text);
		_err(r, NULL, "%s/%s/%s line %ld: %s: the index is damaged or not trustworthy; "
		     "nothing was restored", r->archive, BUNDLE_DIR, INDEX_NAME, line, why);
		return -1;
	}
	free(text);
	r->b = calloc(idx.nbundles + 1, sizeof(*r->b));
	r->e = calloc(idx.nents + 1, sizeof(*r->e));
	if (!r->b || !r->e) {
		bundle_index_free(&idx);
		_err(r, NULL, "out of memory reading the index");
		return -1;
	}
	for (size_t i = 0; i < idx.nbundles; i++) {
		bundle_name(r->b[i].name, idx.bundles[i].num);
		r->b[i].size = idx.bundles[i].size;
		r->b[i].fd = -1;
	}
	r->nb = idx.nbundles;
	for (size_t i = 0; i < idx.nents; i++) {
		struct bundle_line *l = &idx.ents[i];
		struct restore_ent *x = &r->e[i];

		x->path = l->path;	/* moved */
		x->target = l->target;
		l->path = l->target = NULL;
		x->kind = l->kind == BUNDLE_K_FILE ? K_FILE : l->kind == BUNDLE_K_LINK ? K_LINK : K_DIR;
		x->bundle = l->num ? bundle_index_find(&idx, l->num) : -1;
		x->offset = l->offset;
		x->size = l->size;
		x->mtime_ns = l->mtime_ns;
		x->mode = l->mode;
		memcpy(x->cks, l->cks, sizeof(x->cks));
		x->line = idx.ent_lines[i];
	}
	r->ne = idx.nents;
	bundle_index_free(&idx);
	return 0;
}

/* Is path selected by the --file arguments? */
static int _selected(struct restore *r, const char *path, int *hits)
{
	if (!r->nfiles)
		return 1;
	for (int i = 0; i < r->nfiles; i++) {
		size_t n = strlen(r->files[i]);

		if (n == 0 || (strncmp(path, r->files[i], n) == 0 &&
			       (path[n] == '\0' || path[n] == '/'))) {
			if (hits)
				hits[i]++;
			return 1;
		}
	}
	return 0;
}

static int _cmp_place(const void *a, const void *b)
{
	const struct restore_ent *x = *(const struct restore_ent *const *)a, *y = *(const struct restore_ent *const *)b;

	if (x->bundle != y->bundle)
		return x->bundle < y->bundle ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The tar header in front of a member must agree with the index. */
static int _check_header(struct restore *r, struct restore_ent *x, int fd)
{
	unsigned char blk[TAR_BLOCK];
	char type, why[200];
	uint64_t size;

	if (pread(fd, blk, TAR_BLOCK, x->offset - TAR_BLOCK) != TAR_BLOCK ||
	    tar_header_check(blk, &type, &size, NULL, 0, why, sizeof(why)) < 0) {
		_err(r, x->path, "%s: no valid tar header before offset %lld in %s/%s/%s: the bundle is "
		     "damaged or the index is wrong; not restored", x->path, (long long)x->offset,
		     r->archive, BUNDLE_DIR, r->b[x->bundle].name);
		return -1;
	}
	if ((x->kind == K_FILE && (type != TAR_REG || size != (uint64_t)x->size)) ||
	    (x->kind == K_LINK && type != TAR_SYMLINK)) {
		_err(r, x->path, "%s: the tar header at offset %lld in %s says type '%c', %llu bytes; the index "
		     "disagrees: not restored", x->path, (long long)x->offset - TAR_BLOCK,
		     r->b[x->bundle].name, type, (unsigned long long)size);
		return -1;
	}
	return 0;
}

static int _open_bundle(struct restore *r, int bi)
{
	struct stat st;
	struct restore_bundle *b = &r->b[bi];

	if (b->fd >= 0)
		return b->fd;
	if (b->fd == -2)
		return -1;
	b->fd = openat(r->bfd, b->name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (b->fd < 0 || fstat(b->fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != b->size) {
		_err(r, NULL, "%s/%s/%s: %s", r->archive, BUNDLE_DIR, b->name, b->fd < 0 ?
		     strerror(errno) : "not a regular file of the size the index says (damaged "
		     "or truncated)");
		if (b->fd >= 0)
			close(b->fd);
		b->fd = -2;
		return -1;
	}
	posix_fadvise(b->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	return b->fd;
}

/*
 * The four passes of a bundled restore in the order the safety of the
 * result needs them (directories, files, symlinks
 * last, directory modes and times deepest first), over one selection.
 */
static void _restore_bundled(struct restore *r)
{
	int *hits = calloc((size_t)r->nfiles + 1, sizeof(int));
	struct restore_ent **sel = malloc((r->ne + 1) * sizeof(*sel));
	size_t ns = 0;

	if (!hits || !sel) {
		_err(r, NULL, "out of memory");
		free(hits);
		free(sel);
		return;
	}
	for (size_t i = 0; i < r->ne; i++)
		if (_selected(r, r->e[i].path, hits))
			sel[ns++] = &r->e[i];
	for (int i = 0; i < r->nfiles; i++)
		if (!hits[i])
			_err(r, r->files[i], "%s: not in the archive (its index lists %zu entries)", r->files[i],
			     r->ne);
	/* Directories first (index order is path order: parents first). */
	for (size_t i = 0; i < ns; i++)
		if (sel[i]->kind == K_DIR)
			_make_dir(r, sel[i]->path);
	/* Files, in the order they sit in the archive. */
	qsort(sel, ns, sizeof(*sel), _cmp_place);
	for (size_t i = 0; i < ns; i++) {
		struct restore_ent *x = sel[i];

		if (x->kind != K_FILE)
			continue;
		if (x->bundle >= 0) {
			int fd = _open_bundle(r, x->bundle);
			char where[200];

			snprintf(where, sizeof(where), "%s at offset %lld", r->b[x->bundle].name,
				 (long long)x->offset);
			if (fd < 0) {
				r->errors++;
				continue;
			}
			if (_check_header(r, x, fd) == 0)
				_write_file(r, fd, &(struct _file_piece){ x->offset, x->size,
					    x->path, x->cks, x->mode, x->mtime_ns }, where);
		} else {
			const char *leaf;
			char dir[BUNDLE_PATH_MAX];
			const char *slash = strrchr(x->path, '/');
			int pfd, fd;
			struct stat st;

			leaf = slash ? slash + 1 : x->path;
			snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - x->path) : 0, x->path);
			pfd = _open_dir(r->afd, dir, 0);
			fd = pfd < 0 ? -1 : openat(pfd, leaf, O_RDONLY | O_NOFOLLOW | O_NOCTTY |
						   O_NONBLOCK | O_CLOEXEC);
			if (pfd >= 0)
				close(pfd);
			if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != x->size) {
				_err(r, x->path, "%s/%s: %s", r->archive, x->path, fd < 0 ? strerror(errno) :
				     "not a regular file of the size the index says");
				if (fd >= 0)
					close(fd);
				continue;
			}
			_write_file(r, fd, &(struct _file_piece){ 0, x->size, x->path, x->cks,
				    x->mode, x->mtime_ns }, "the archive copy");
			close(fd);
		}
	}
	/* Symlinks after files: nothing is ever written through one. */
	for (size_t i = 0; i < ns; i++) {
		struct restore_ent *x = sel[i];

		if (x->kind != K_LINK)
			continue;
		if (x->bundle >= 0) {
			int fd = _open_bundle(r, x->bundle);

			if (fd < 0) {
				r->errors++;
				continue;
			}
			if (_check_header(r, x, fd) < 0)
				continue;
		}
		_write_link(r, x->path, x->target, x->mtime_ns);
	}
	/* Directory modes and times last, deepest first. */
	for (size_t i = r->ne; i-- > 0;)
		if (r->e[i].kind == K_DIR && _selected(r, r->e[i].path, hits))
			_dir_meta(r, r->e[i].path, r->e[i].mode, r->e[i].mtime_ns);
	free(hits);
	free(sel);
}

/* ---- plain archives: the tree itself ---- */

static int _by_known_path(const void *k, const void *e)
{
	return strcmp((const char *)k, ((const struct restore_known *)e)->path);
}

/*
 * The checksum recorded for rel when it was archived (r->known) into *want,
 * the entry marked as met. 0, or -1 reported: the archive copy has a file
 * it did not have then, or of another size.
 */
static int _known_want(struct restore *r, const char *rel, int64_t size, const char **want)
{
	const struct restore_known *k = bsearch(rel, r->known, r->nknown, sizeof(*k),
						 _by_known_path);

	if (!k) {
		_err(r, rel, "%s/%s: no checksum was recorded for it when the archive was made (a "
		     "file added to the archive copy since): not restored", r->archive, rel);
		return -1;
	}
	if (r->khit)
		r->khit[k - r->known] = 1;
	if (k->size != size) {
		_err(r, rel, "%s/%s: %lld bytes, but %lld when it was archived: the archive copy "
		     "is damaged or was changed; not restored", r->archive, rel, (long long)size,
		     (long long)k->size);
		return -1;
	}
	*want = k->cks;
	return 0;
}

/* Files recorded when the archive was made, selected, and no longer in it. */
static void _known_missing(struct restore *r)
{
	for (size_t i = 0; i < r->nknown; i++)
		if (!r->khit[i] && _selected(r, r->known[i].path, NULL))
			_err(r, r->known[i].path, "%s/%s: archived, but missing from the archive "
			     "copy now: not restored", r->archive, r->known[i].path);
}

static void _plain_tree(struct restore *r, int sdir, const char *rel, int depth);

static void _plain_entry(struct restore *r, int sdir, const char *name, const char *rel,
			 int depth)
{
	struct stat st;

	if (fstatat(sdir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		_err(r, rel, "%s/%s: %s", r->archive, rel, strerror(errno));
		return;
	}
	if (S_ISREG(st.st_mode)) {
		int fd;
		const char *want = NULL;

		if (r->known && _known_want(r, rel, st.st_size, &want) < 0)
			return;
		fd = openat(sdir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
		if (fd < 0) {
			_err(r, rel, "%s/%s: %s", r->archive, rel, strerror(errno));
			return;
		}
		_write_file(r, fd, &(struct _file_piece){ 0, st.st_size, rel, want, st.st_mode & 07777,
			    (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec },
			    "the archive copy");
		close(fd);
	} else if (S_ISLNK(st.st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlinkat(sdir, name, t, sizeof(t) - 1);

		if (n < 0) {
			_err(r, rel, "%s/%s: %s", r->archive, rel, strerror(errno));
			return;
		}
		t[n] = '\0';
		_write_link(r, rel, t, (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
	} else if (S_ISDIR(st.st_mode)) {
		int sub = openat(sdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

		if (sub < 0 || depth >= MAX_DEPTH) {
			_err(r, rel, "%s/%s: %s", r->archive, rel, sub < 0 ? strerror(errno) : "too deep");
			if (sub >= 0)
				close(sub);
			return;
		}
		if (_make_dir(r, rel) < 0) {
			close(sub);
			return;
		}
		_plain_tree(r, sub, rel, depth + 1);
		close(sub);
		_dir_meta(r, rel, st.st_mode & 07777,
			  (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
	} else {
		r->skipped++;
		if (r->on_skip)
			r->on_skip(r->arg, rel, "not a file, directory or symlink");
	}
}

static void _plain_tree(struct restore *r, int sdir, const char *rel, int depth)
{
	int fd = dup(sdir);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		_err(r, NULL, "%s/%s: %s", r->archive, *rel ? rel : ".", strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		char sub[BUNDLE_PATH_MAX];
		int n;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (depth == 0 && !strcmp(de->d_name, BUNDLE_DIR))
			continue;
		n = *rel ? snprintf(sub, sizeof(sub), "%s/%s", rel, de->d_name)
			 : snprintf(sub, sizeof(sub), "%s", de->d_name);
		if (n < 0 || (size_t)n >= sizeof(sub)) {
			_err(r, NULL, "%s/%s/%s: path too long", r->archive, rel, de->d_name);
			continue;
		}
		_plain_entry(r, sdir, de->d_name, sub, depth);
	}
	closedir(d);
}

static void _restore_plain(struct restore *r)
{
	if (!r->nfiles) {
		_plain_tree(r, r->afd, "", 0);
		return;
	}
	for (int i = 0; i < r->nfiles; i++) {
		const char *f = r->files[i], *slash = strrchr(f, '/');
		char dir[BUNDLE_PATH_MAX];
		int pfd;

		snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - f) : 0, f);
		pfd = slash ? _open_dir(r->afd, dir, 0) : dup(r->afd);
		if (pfd < 0) {
			_err(r, f, "%s: not in the archive %s (%s)", f, r->archive, strerror(errno));
			continue;
		}
		_plain_entry(r, pfd, slash ? slash + 1 : f, f, 1);
		close(pfd);
	}
}

/* ---- the module's face ---- */

void restore_init(struct restore *r)
{
	memset(r, 0, sizeof(*r));
	r->afd = r->dfd = r->bfd = -1;
}

int restore_open(struct restore *r)
{
	int ifd;

	r->buf = malloc(RCHUNK);
	if (!r->buf) {
		_err(r, NULL, "out of memory");
		return -1;
	}
	r->bfd = openat(r->afd, BUNDLE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (r->bfd < 0)
		return 0;
	ifd = openat(r->bfd, INDEX_NAME, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (ifd < 0) {
		_err(r, NULL, "%s/%s has no %s: the archive copy is incomplete (still being made, "
		     "or interrupted: see 'stagehand status')", r->archive, BUNDLE_DIR, INDEX_NAME);
		return -1;
	}
	if (_load_index(r, ifd) < 0) {
		close(ifd);
		return -1;
	}
	close(ifd);
	return 1;
}

enum restore_kind restore_kind(struct restore *r, const char *rel)
{
	struct stat st;
	size_t n = strlen(rel);

	if (!*rel)
		return RESTORE_DIR;
	if (r->bfd < 0) {
		const char *slash = strrchr(rel, '/');
		char dir[BUNDLE_PATH_MAX];
		int pfd, rc;

		snprintf(dir, sizeof(dir), "%.*s", slash ? (int)(slash - rel) : 0, rel);
		pfd = slash ? _open_dir(r->afd, dir, 0) : dup(r->afd);
		if (pfd < 0)
			return RESTORE_NONE;
		rc = fstatat(pfd, slash ? slash + 1 : rel, &st, AT_SYMLINK_NOFOLLOW);
		close(pfd);
		return rc < 0 ? RESTORE_NONE : S_ISREG(st.st_mode) ? RESTORE_FILE :
		       S_ISDIR(st.st_mode) ? RESTORE_DIR : RESTORE_OTHER;
	}
	for (size_t i = 0; i < r->ne; i++) {
		const char *p = r->e[i].path;

		if (strcmp(p, rel) == 0)
			return r->e[i].kind == K_FILE ? RESTORE_FILE : r->e[i].kind == K_DIR ?
			       RESTORE_DIR : RESTORE_OTHER;
		if (strncmp(p, rel, n) == 0 && p[n] == '/')
			return RESTORE_DIR;	/* a directory the index has no line for */
	}
	return RESTORE_NONE;
}

int restore_run(struct restore *r)
{
	if (!r->buf && !(r->buf = malloc(RCHUNK))) {
		_err(r, NULL, "out of memory");
		return -1;
	}
	if (r->bfd >= 0) {
		_restore_bundled(r);
	} else {
		if (r->known && !(r->khit = calloc(r->nknown + 1, 1))) {
			_err(r, NULL, "out of memory");
			return -1;
		}
		_restore_plain(r);
		if (r->known)
			_known_missing(r);
	}
	return r->errors ? -1 : 0;
}

void restore_free(struct restore *r)
{
	for (size_t i = 0; i < r->nb; i++)
		if (r->b[i].fd >= 0)
			close(r->b[i].fd);
	for (size_t i = 0; i < r->ne; i++) {
		free(r->e[i].path);
		free(r->e[i].target);
	}
	free(r->e);
	free(r->b);
	free(r->buf);
	free(r->khit);
	if (r->bfd >= 0)
		close(r->bfd);
	r->e = NULL;
	r->b = NULL;
	r->buf = r->khit = NULL;
	r->ne = r->nb = 0;
	r->bfd = -1;
}
