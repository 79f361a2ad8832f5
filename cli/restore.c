/*
 * restore.c - 'stagehand restore': bring files back from an archive copy.
 *
 * Offline (no daemon): reads the archive with the invoking user's own
 * identity and writes into a destination directory. Two archive layouts:
 *   bundled  ARCHIVE/.stagehand-bundles/index.jsonl lists every entry; small
 *            files live in tar bundles at an offset, large ones at
 *            ARCHIVE/<relpath> (written by the daemon's bundle backend);
 *   plain    the tree itself (the local backend's copy).
 * The index and the bundles are treated as hostile: every index line is
 * checked before anything is written (relative names only, no '.' or '..'
 * components, offsets inside the bundle and on a tar header), each member's
 * checksum is compared with the index before it is renamed into place, and
 * at the destination nothing is followed: directories are opened with
 * resolve_open (common/resolve.h), files are written to a temporary name
 * with O_EXCL|O_NOFOLLOW, fsynced and renamed.
 *
 * ARCHIVED_PATH may also be the scratch directory that was archived: its
 * user.stagehand.location label names the archive, and the files come back
 * into that directory unless --to says otherwise.
 *
 * Exit status: 0 everything asked for was restored and verified, 1 some
 * entry failed (message per entry), 2 usage or environment error.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bundle.h"
#include "checksum.h"
#include "commands.h"
#include "durable.h"
#include "resolve.h"
#include "tar.h"
#include "xattr.h"

#define INDEX_NAME BUNDLE_INDEX_NAME
#define INDEX_MAX (1LL << 32)          /* bytes of index accepted */
#define RCHUNK (1u << 20)
#define MAX_DEPTH 256

enum _kind { K_FILE, K_LINK, K_DIR };

struct _ent {
	char *path;
	char *target;
	enum _kind kind;
	int bundle;                  /* index into bundles, -1 = stored plain */
	int64_t offset, size, mtime_ns;
	uint32_t mode;
	char cks[CKSUM_HEX_MAX];
	long line;
};

struct _bundle {
	char name[BUNDLE_NAME_SIZE];
	int64_t size;
	int fd;
};

struct _restore {
	const char *archive;         /* as given or from the label */
	const char *dest;            /* destination directory name */
	int afd, bfd, dfd;           /* archive root, its bundle folder, destination */
	int force, verbose;
	char **files;                /* --file selections (normalised, owned) */
	int nfiles;
	struct _ent *e;
	size_t ne;
	struct _bundle *b;
	size_t nb;
	char *buf;
	/* counts */
	long restored_files, restored_links, restored_dirs, errors, skipped;
	long long bytes;
};

static void _err(struct _restore *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void _err(struct _restore *r, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "stagehand restore: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	if (r)
		r->errors++;
}

static void _usage(FILE *fp)
{
	fprintf(fp,
		"usage: stagehand restore ARCHIVED_PATH [--to DIR] [--file RELPATH]... [--force] [-v]\n"
		"\n"
		"Bring files back from an archive copy, as yourself, verifying each one.\n"
		"ARCHIVED_PATH is the archive copy (bundled or plain), or the scratch\n"
		"directory that was archived (found through its stagehand.location label).\n"
		"\n"
		"  --to DIR          write here (default: the scratch directory when\n"
		"                    ARCHIVED_PATH is one, else the current directory)\n"
		"  --file RELPATH    restore only this file or directory (relative to the\n"
		"                    archived tree); may be given several times\n"
		"  --force           replace files that already exist at the destination\n"
		"  -v, --verbose     print each restored path\n"
		"  --help            show this help\n"
		"\n"
		"Exit status: 0 all restored and verified, 1 some entry failed, 2 usage or\n"
		"environment error. See stagehand(1), RESTORE.\n");
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
static int _dest_parent(struct _restore *r, const char *rel, const char **leaf)
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
static int _check_existing(struct _restore *r, int pfd, const char *leaf, const char *rel)
{
	struct stat st;

	if (fstatat(pfd, leaf, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return 0;
	if (S_ISDIR(st.st_mode)) {
		_err(r, "%s/%s: a directory is in the way; not replaced", r->dest, rel);
		return -1;
	}
	if (!r->force) {
		_err(r, "%s/%s exists; not replaced (use --force to replace it)", r->dest, rel);
		return -1;
	}
	return 0;
}

/*
 * Copy len bytes of sfd from off into a new temporary file next to rel,
 * checksumming them; rename it into place if the checksum equals want
 * (want NULL: read the temporary file back and compare with what was read).
 */
/*
 * The directory that will hold rel (never through a symlink) and the
 * temporary name to write it under; -1 after saying why.
 */
static int _dest_tmp(struct _restore *r, const char *rel, const char **leaf, char *tmp,
		     size_t tmplen)
{
	int pfd = _dest_parent(r, rel, leaf);

	if (pfd < 0) {
		_err(r, "cannot restore %s/%s: %s", r->dest, rel, _dest_why(errno));
		return -1;
	}
	if (_check_existing(r, pfd, *leaf, rel) < 0 || _tmpname(tmp, tmplen, *leaf) < 0) {
		close(pfd);
		return -1;
	}
	return pfd;
}

/* len bytes of sfd at off into tfd, hashed with algo into got; 0 or an errno. */
static int _copy_range(struct _restore *r, int sfd, int64_t off, int64_t len, int tfd,
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
static int _read_back(struct _restore *r, int tfd, enum cksum_algo algo, int64_t len,
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
 * rel, checked against want (or read back when the archive has no
 * checksum), then made durable and renamed (common/durable.h).
 */
static int _write_file(struct _restore *r, int sfd, int64_t off, int64_t len, const char *rel,
		       const char *want, uint32_t mode, int64_t mtime_ns, const char *where)
{
	const char *leaf;
	char tmp[NAME_MAX + 1], got[CKSUM_HEX_MAX];
	enum cksum_algo algo = CKSUM_XXH128;
	int pfd, tfd, e = 0;

	if (want) {
		char name[16];
		const char *colon = strchr(want, ':');

		snprintf(name, sizeof(name), "%.*s", colon ? (int)(colon - want) : 0, want);
		if (cksum_algo_from_name(name, &algo) < 0) {
			_err(r, "%s: unknown checksum '%s' in the index", rel, want);
			return -1;
		}
	}
	pfd = _dest_tmp(r, rel, &leaf, tmp, sizeof(tmp));
	if (pfd < 0)
		return -1;
	tfd = durable_create(pfd, tmp, O_RDWR);
	if (tfd < 0) {
		_err(r, "cannot create %s/%s: %s", r->dest, rel, strerror(errno));
		close(pfd);
		return -1;
	}
	e = _copy_range(r, sfd, off, len, tfd, algo, got);
	if (!e && want && strcmp(got, want) != 0) {
		_err(r, "%s: checksum mismatch in %s (expected %s, got %s): the archive copy is "
		     "damaged; this file was not restored", rel, where, want, got);
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
		_err(r, "cannot restore %s/%s: %s", r->dest, rel, e == EIO && !want ?
		     "the copy read back differs from the archive" : strerror(e));
		close(pfd);
		return -1;
	}
	close(pfd);
	r->restored_files++;
	r->bytes += len;
	if (r->verbose)
		printf("%s\n", rel);
	return 0;
}

static int _write_link(struct _restore *r, const char *rel, const char *target, int64_t mtime_ns)
{
	const char *leaf;
	char tmp[NAME_MAX + 1];
	int pfd = _dest_tmp(r, rel, &leaf, tmp, sizeof(tmp)), e;

	if (pfd < 0)
		return -1;
	unlinkat(pfd, tmp, 0);
	if (symlinkat(target, pfd, tmp) < 0) {
		_err(r, "cannot create symlink %s/%s: %s", r->dest, rel, strerror(errno));
		close(pfd);
		return -1;
	}
	if (mtime_ns >= 0) {
		struct timespec ts[2] = { { 0, UTIME_OMIT }, { (time_t)(mtime_ns / 1000000000LL),
							     (long)(mtime_ns % 1000000000LL) } };

		utimensat(pfd, tmp, ts, AT_SYMLINK_NOFOLLOW);
	}
	if ((e = durable_commit(pfd, tmp, leaf, -1, 0)) != 0) {
		_err(r, "cannot restore %s/%s: %s", r->dest, rel, strerror(e));
		close(pfd);
		return -1;
	}
	close(pfd);
	r->restored_links++;
	if (r->verbose)
		printf("%s -> %s\n", rel, target);
	return 0;
}

static void _dir_meta(struct _restore *r, const char *rel, uint32_t mode, int64_t mtime_ns)
{
	int fd = _open_dir(r->dfd, rel, 0);
	struct timespec ts[2] = { { 0, UTIME_OMIT }, { (time_t)(mtime_ns / 1000000000LL),
						     (long)(mtime_ns % 1000000000LL) } };

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
static int _load_index(struct _restore *r, int fd)
{
	struct bundle_index idx;
	struct stat st;
	char *text, why[256];
	size_t got = 0;
	long line = 0;

	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > INDEX_MAX) {
		_err(NULL, "%s/%s/%s is not a regular file of a sane size", r->archive, BUNDLE_DIR,
		     INDEX_NAME);
		return -1;
	}
	text = malloc((size_t)st.st_size + 1);
	if (!text) {
		_err(NULL, "out of memory reading the index");
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
		_err(NULL, "%s/%s/%s: cannot read it whole", r->archive, BUNDLE_DIR, INDEX_NAME);
		return -1;
	}
	if (bundle_index_decode(text, got, &idx, &line, why, sizeof(why)) < 0) {
		free(text);
		_err(NULL, "%s/%s/%s line %ld: %s: the index is damaged or not trustworthy; "
		     "nothing was restored", r->archive, BUNDLE_DIR, INDEX_NAME, line, why);
		return -1;
	}
	free(text);
	r->b = calloc(idx.nbundles + 1, sizeof(*r->b));
	r->e = calloc(idx.nents + 1, sizeof(*r->e));
	if (!r->b || !r->e) {
		bundle_index_free(&idx);
		_err(NULL, "out of memory reading the index");
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
		struct _ent *x = &r->e[i];

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
static int _selected(struct _restore *r, const char *path, int *hits)
{
	if (!r->nfiles)
		return 1;
	for (int i = 0; i < r->nfiles; i++) {
		size_t n = strlen(r->files[i]);

		if (strncmp(path, r->files[i], n) == 0 && (path[n] == '\0' || path[n] == '/')) {
			hits[i]++;
			return 1;
		}
	}
	return 0;
}

static int _cmp_place(const void *a, const void *b)
{
	const struct _ent *x = *(const struct _ent *const *)a, *y = *(const struct _ent *const *)b;

	if (x->bundle != y->bundle)
		return x->bundle < y->bundle ? -1 : 1;
	return x->offset < y->offset ? -1 : x->offset > y->offset;
}

/* The tar header in front of a member must agree with the index. */
static int _check_header(struct _restore *r, struct _ent *x, int fd)
{
	unsigned char blk[TAR_BLOCK];
	char type, why[200];
	uint64_t size;

	if (pread(fd, blk, TAR_BLOCK, x->offset - TAR_BLOCK) != TAR_BLOCK ||
	    tar_header_check(blk, &type, &size, NULL, 0, why, sizeof(why)) < 0) {
		_err(r, "%s: no valid tar header before offset %lld in %s/%s/%s: the bundle is "
		     "damaged or the index is wrong; not restored", x->path, (long long)x->offset,
		     r->archive, BUNDLE_DIR, r->b[x->bundle].name);
		return -1;
	}
	if ((x->kind == K_FILE && (type != TAR_REG || size != (uint64_t)x->size)) ||
	    (x->kind == K_LINK && type != TAR_SYMLINK)) {
		_err(r, "%s: the tar header at offset %lld in %s says type '%c', %llu bytes; the index "
		     "disagrees: not restored", x->path, (long long)x->offset - TAR_BLOCK,
		     r->b[x->bundle].name, type, (unsigned long long)size);
		return -1;
	}
	return 0;
}

static int _open_bundle(struct _restore *r, int bi)
{
	struct stat st;
	struct _bundle *b = &r->b[bi];

	if (b->fd >= 0)
		return b->fd;
	if (b->fd == -2)
		return -1;
	b->fd = openat(r->bfd, b->name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
	if (b->fd < 0 || fstat(b->fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size != b->size) {
		_err(r, "%s/%s/%s: %s", r->archive, BUNDLE_DIR, b->name, b->fd < 0 ?
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
 * Long (~100 lines) on purpose: the four passes of a bundled restore in the
 * order the safety of the result needs them (directories, files, symlinks
 * last, directory modes and times deepest first), over one selection.
 */
static void _restore_bundled(struct _restore *r)
{
	int *hits = calloc((size_t)r->nfiles + 1, sizeof(int));
	struct _ent **sel = malloc((r->ne + 1) * sizeof(*sel));
	size_t ns = 0;

	if (!hits || !sel) {
		_err(r, "out of memory");
		free(hits);
		free(sel);
		return;
	}
	for (size_t i = 0; i < r->ne; i++)
		if (_selected(r, r->e[i].path, hits))
			sel[ns++] = &r->e[i];
	for (int i = 0; i < r->nfiles; i++)
		if (!hits[i])
			_err(r, "%s: not in the archive (its index lists %zu entries)", r->files[i],
			     r->ne);
	/* Directories first (index order is path order: parents first). */
	for (size_t i = 0; i < ns; i++)
		if (sel[i]->kind == K_DIR) {
			int fd = _open_dir(r->dfd, sel[i]->path, 1);

			if (fd < 0)
				_err(r, "cannot create %s/%s: %s", r->dest, sel[i]->path, _dest_why(errno));
			else {
				close(fd);
				r->restored_dirs++;
			}
		}
	/* Files, in the order they sit in the archive. */
	qsort(sel, ns, sizeof(*sel), _cmp_place);
	for (size_t i = 0; i < ns; i++) {
		struct _ent *x = sel[i];

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
				_write_file(r, fd, x->offset, x->size, x->path, x->cks, x->mode,
					    x->mtime_ns, where);
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
				_err(r, "%s/%s: %s", r->archive, x->path, fd < 0 ? strerror(errno) :
				     "not a regular file of the size the index says");
				if (fd >= 0)
					close(fd);
				continue;
			}
			_write_file(r, fd, 0, x->size, x->path, x->cks, x->mode, x->mtime_ns,
				    "the archive copy");
			close(fd);
		}
	}
	/* Symlinks after files: nothing is ever written through one. */
	for (size_t i = 0; i < ns; i++) {
		struct _ent *x = sel[i];

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

static void _plain_tree(struct _restore *r, int sdir, const char *rel, int depth);

static void _plain_entry(struct _restore *r, int sdir, const char *name, const char *rel,
			 int depth)
{
	struct stat st;

	if (fstatat(sdir, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		_err(r, "%s/%s: %s", r->archive, rel, strerror(errno));
		return;
	}
	if (S_ISREG(st.st_mode)) {
		int fd = openat(sdir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);

		if (fd < 0) {
			_err(r, "%s/%s: %s", r->archive, rel, strerror(errno));
			return;
		}
		_write_file(r, fd, 0, st.st_size, rel, NULL, st.st_mode & 07777,
			    (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec,
			    "the archive copy");
		close(fd);
	} else if (S_ISLNK(st.st_mode)) {
		char t[PATH_MAX];
		ssize_t n = readlinkat(sdir, name, t, sizeof(t) - 1);

		if (n < 0) {
			_err(r, "%s/%s: %s", r->archive, rel, strerror(errno));
			return;
		}
		t[n] = '\0';
		_write_link(r, rel, t, (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
	} else if (S_ISDIR(st.st_mode)) {
		int sub = openat(sdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		int dfd;

		if (sub < 0 || depth >= MAX_DEPTH) {
			_err(r, "%s/%s: %s", r->archive, rel, sub < 0 ? strerror(errno) : "too deep");
			if (sub >= 0)
				close(sub);
			return;
		}
		dfd = _open_dir(r->dfd, rel, 1);
		if (dfd < 0) {
			_err(r, "cannot create %s/%s: %s", r->dest, rel, _dest_why(errno));
			close(sub);
			return;
		}
		close(dfd);
		r->restored_dirs++;
		_plain_tree(r, sub, rel, depth + 1);
		close(sub);
		_dir_meta(r, rel, st.st_mode & 07777,
			  (int64_t)st.st_mtim.tv_sec * 1000000000LL + st.st_mtim.tv_nsec);
	} else {
		fprintf(stderr, "stagehand restore: %s/%s: skipped (not a file, directory or symlink)\n",
			r->archive, rel);
		r->skipped++;
	}
}

static void _plain_tree(struct _restore *r, int sdir, const char *rel, int depth)
{
	int fd = dup(sdir);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		_err(r, "%s/%s: %s", r->archive, *rel ? rel : ".", strerror(errno));
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
			_err(r, "%s/%s/%s: path too long", r->archive, rel, de->d_name);
			continue;
		}
		_plain_entry(r, sdir, de->d_name, sub, depth);
	}
	closedir(d);
}

static void _restore_plain(struct _restore *r)
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
		pfd = _open_dir(r->afd, dir, 0);
		if (pfd < 0) {
			_err(r, "%s: not in the archive %s (%s)", f, r->archive, strerror(errno));
			continue;
		}
		_plain_entry(r, pfd, slash ? slash + 1 : f, f, 1);
		close(pfd);
	}
}

/* ---- command ---- */

/* The archive location labelled on a scratch directory; "" when none. */
static void _label_location(int fd, char *loc, size_t len, char *policy, size_t plen)
{
	static const char *const ns[] = { "user.", "trusted.", NULL };
	char err[256];

	loc[0] = policy[0] = '\0';
	for (int i = 0; ns[i]; i++)
		if (xattr_get_label(fd, ns[i], XATTR_LOCATION, loc, len, err, sizeof(err)) > 0) {
			xattr_get_label(fd, ns[i], XATTR_POLICY, policy, plen, err, sizeof(err));
			return;
		}
	loc[0] = '\0';
}

static char *_normalise_file(const char *f)
{
	char *s;
	size_t n;

	while (f[0] == '.' && f[1] == '/')
		f += 2;
	s = strdup(f);
	if (!s)
		return NULL;
	n = strlen(s);
	while (n > 1 && s[n - 1] == '/')
		s[--n] = '\0';
	return s;
}

/*
 * Long (~155 lines) on purpose: the subcommand from arguments to exit code,
 * straight down (options, the index, the selection, the restore, the
 * report); the restore itself is in its own functions.
 */
int cmd_restore(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "to", required_argument, NULL, 't' },
		{ "file", required_argument, NULL, 'f' },
		{ "force", no_argument, NULL, 'F' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 }
	};
	struct _restore r = { .afd = -1, .bfd = -1, .dfd = -1 };
	char loc[BUNDLE_PATH_MAX], policy[64];
	const char *to = NULL, *path;
	struct stat ast, dst;
	int c, pfd, ifd, rc = 2;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "hvt:f:", lo, NULL)) != -1) {
		switch (c) {
		case 't': to = optarg; break;
		case 'v': r.verbose = 1; break;
		case 'F': r.force = 1; break;
		case 'h': _usage(stdout); return 0;
		case 'f': {
			char **nf = realloc(r.files, (size_t)(r.nfiles + 1) * sizeof(*nf));
			const char *why;

			if (!nf)
				return 2;
			r.files = nf;
			r.files[r.nfiles] = _normalise_file(optarg);
			if (!r.files[r.nfiles])
				return 2;
			if ((why = bundle_unsafe_name(r.files[r.nfiles])) != NULL) {
				_err(NULL, "--file '%s': %s; give a path relative to the archived tree",
				     optarg, why);
				goto out;
			}
			r.nfiles++;
			break;
		}
		default:
			_err(NULL, "unknown or incomplete option '%s' (see 'stagehand restore --help')",
			     argv[optind - 1]);
			goto out;
		}
	}
	if (optind != argc - 1) {
		_usage(stderr);
		goto out;
	}
	path = argv[optind];
	r.buf = malloc(RCHUNK);
	if (!r.buf)
		goto out;
	pfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0) {
		_err(NULL, "cannot open %s: %s%s", path, strerror(errno), errno == ENOTDIR ?
		     " (give the archived directory and --file RELPATH for one file)" : "");
		goto out;
	}
	_label_location(pfd, loc, sizeof(loc), policy, sizeof(policy));
	if (loc[0]) {
		if (strcmp(policy, "archived") != 0)
			fprintf(stderr, "stagehand restore: note: %s is labelled '%s', not 'archived': "
				"its archive copy may be incomplete\n", path, policy[0] ? policy : "?");
		r.archive = loc;
		r.afd = open(loc, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (r.afd < 0) {
			_err(NULL, "%s names its archive copy %s, which cannot be opened: %s", path, loc,
			     strerror(errno));
			close(pfd);
			goto out;
		}
		close(pfd);
		if (!to)
			to = path;
	} else {
		r.archive = path;
		r.afd = pfd;
		if (!to)
			to = ".";
	}
	if (fstat(r.afd, &ast) < 0)
		goto out;
	if (geteuid() == 0 && ast.st_uid != 0) {
		_err(NULL, "%s belongs to uid %u: run restore as that user, not as root (e.g. "
		     "runuser -u USER -- stagehand restore ...); root does not write user paths",
		     r.archive, (unsigned)ast.st_uid);
		goto out;
	}
	r.dest = to;
	if (mkdir(to, 0777) < 0 && errno != EEXIST) {
		_err(NULL, "cannot create destination %s: %s (its parent must exist)", to,
		     strerror(errno));
		goto out;
	}
	r.dfd = open(to, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r.dfd < 0 || fstat(r.dfd, &dst) < 0) {
		_err(NULL, "cannot open destination %s: %s", to, strerror(errno));
		goto out;
	}
	if (dst.st_dev == ast.st_dev && dst.st_ino == ast.st_ino) {
		_err(NULL, "the destination %s is the archive copy itself: give --to DIR", to);
		goto out;
	}
	r.bfd = openat(r.afd, BUNDLE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (r.bfd >= 0) {
		ifd = openat(r.bfd, INDEX_NAME, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);
		if (ifd < 0) {
			_err(NULL, "%s/%s has no %s: the archive copy is incomplete (still being made, "
			     "or interrupted: see 'stagehand status')", r.archive, BUNDLE_DIR, INDEX_NAME);
			goto out;
		}
		if (_load_index(&r, ifd) < 0) {
			close(ifd);
			rc = 1;
			goto out;
		}
		close(ifd);
		_restore_bundled(&r);
	} else {
		_restore_plain(&r);
	}
	printf("stagehand restore: %ld file%s (%lld bytes), %ld symlink%s, %ld director%s restored "
	       "from %s into %s%s\n", r.restored_files, r.restored_files == 1 ? "" : "s", r.bytes,
	       r.restored_links, r.restored_links == 1 ? "" : "s", r.restored_dirs,
	       r.restored_dirs == 1 ? "y" : "ies", r.archive, to, r.errors ? "; some failed" : "");
	if (r.errors)
		fprintf(stderr, "stagehand restore: %ld error%s (see above)\n", r.errors,
			r.errors == 1 ? "" : "s");
	rc = r.errors ? 1 : 0;
out:
	for (size_t i = 0; i < r.nb; i++)
		if (r.b[i].fd >= 0)
			close(r.b[i].fd);
	for (size_t i = 0; i < r.ne; i++) {
		free(r.e[i].path);
		free(r.e[i].target);
	}
	for (int i = 0; i < r.nfiles; i++)
		free(r.files[i]);
	free(r.files);
	free(r.e);
	free(r.b);
	free(r.buf);
	if (r.bfd >= 0)
		close(r.bfd);
	if (r.dfd >= 0)
		close(r.dfd);
	if (r.afd >= 0)
		close(r.afd);
	return rc;
}
