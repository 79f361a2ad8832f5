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
 * Audit: one record per member (the daemon's item and audit rows), path_dst
 * being the member's logical place DEST/relpath; the index says in which
 * bundle and at which offset it lives. Each bundle is logged once.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "bundle.h"
#include "log.h"
#include "queue.h"
#include "tar.h"
#include "xattr.h"
#include "xfer.h"
#include "xfer_util.h"

#define CHUNK (4u << 20)
#define MAX_DEPTH 256
#define INDEX_NAME BUNDLE_INDEX_NAME
#define JOURNAL_NAME BUNDLE_JOURNAL_NAME
#define INDEX_TMP ".index.jsonl.tmp"
#define JOURNAL_MAX (1LL << 32)

static struct xfer_bundle_params _params = {
	.min_files = 1000, .file_max = 1ULL << 20, .bundle_size = 1ULL << 30,
};

void xfer_bundle_configure(const struct xfer_bundle_params *p)
{
	_params = *p;
}

enum _etype { E_FILE, E_LINK, E_DIR, E_SPECIAL, E_ERROR };

/* An entry of the source tree, or a record of the journal/index. */
struct _rec {
	char *rel;
	char *target;                /* symlink target */
	enum _etype type;
	int64_t size, mtime_ns;
	uint32_t mode;
	ino_t ino;
	int err;                     /* E_ERROR: errno; E_SPECIAL: 1 FIFO, 2 socket, 3 device,
					-1 reserved name, -2 excluded directory */
	int bundle;                  /* bundle number; 0 = stored plain at DEST/rel */
	int64_t offset;              /* data offset in the bundle */
	char cks[CKSUM_HEX_MAX];
	long seq;                    /* journal line order: later lines win */
	int done;                    /* archived by this attempt or kept from an earlier one */
};

struct _vec {
	struct _rec *v;
	size_t n, cap;
};

struct _bmeta {
	int num;
	int64_t size, members;
	char cks[CKSUM_HEX_MAX];
	int kept;                    /* listed and verified (or written now) */
	int64_t refs;                /* index entries pointing at it */
};

struct _run {
	struct xfer_ctx *ctx;
	char *buf;                   /* CHUNK bytes: copy and read-back buffer */
	char *fbuf;                  /* BundleFileMax bytes: one small file */
	struct xfer_bundle_params p;
	int sroot, droot, bdir, jfd;
	struct _vec src;             /* the source tree, sorted by relpath */
	struct _vec jr;              /* journal records, sorted by relpath (kept only) */
	struct _bmeta *bm;           /* bundles known (kept + written now) */
	size_t nbm, capbm;
	int next_bundle;
	long seq;
	/* parent-directory caches */
	char *sp_rel, *dp_rel;
	int sp_fd, dp_fd;
	/* the open bundle */
	int bfd;
	int bnum;
	char btmp[64];
	uint64_t boff;
	struct cksum bck;
	size_t blen;                 /* buffered bytes in buf */
	size_t *bmem;                /* indices into src of its members */
	size_t nbmem, capbmem;
	/* counts */
	int64_t files, bytes, skipped, small, verified, kept;
	int failures, final_failures;
	char first_error[XFER_TEXT_MAX];
};

static int _stopped(struct _run *r)
{
	return r->ctx->stop && *r->ctx->stop;
}

static void _fail_item(struct _run *r, const char *rel, int err, const char *what)
{
	char msg[XFER_TEXT_MAX];

	snprintf(msg, sizeof(msg), "%s '%s': %s", what, rel, strerror(err));
	xfer_emit(r->ctx, XR_ITEM_FAILED, err, 0, 0, 0, NULL, rel, msg);
	if (!r->failures)
		memcpy(r->first_error, msg, sizeof(r->first_error));
	r->failures++;
	if (xfer_err_final(err))
		r->final_failures++;
}

static struct _rec *_push(struct _vec *v)
{
	if (v->n == v->cap) {
		size_t cap = v->cap ? v->cap * 2 : 256;
		struct _rec *n = realloc(v->v, cap * sizeof(*n));

		if (!n)
			return NULL;
		v->v = n;
		v->cap = cap;
	}
	memset(&v->v[v->n], 0, sizeof(v->v[0]));
	return &v->v[v->n++];
}

static void _vec_free(struct _vec *v)
{
	for (size_t i = 0; i < v->n; i++) {
		free(v->v[i].rel);
		free(v->v[i].target);
	}
	free(v->v);
	memset(v, 0, sizeof(*v));
}

static int _cmp_rel(const void *a, const void *b)
{
	const struct _rec *x = a, *y = b;
	int c = strcmp(x->rel, y->rel);

	return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

static struct _rec *_find(struct _vec *v, const char *rel)
{
	size_t lo = 0, hi = v->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(rel, v->v[mid].rel);

		if (c == 0)
			return &v->v[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

static struct _bmeta *_bundle_meta(struct _run *r, int num)
{
	for (size_t i = 0; i < r->nbm; i++)
		if (r->bm[i].num == num)
			return &r->bm[i];
	return NULL;
}

static struct _bmeta *_bundle_meta_add(struct _run *r, int num)
{
	struct _bmeta *b = _bundle_meta(r, num);

	if (b)
		return b;
	if (r->nbm == r->capbm) {
		size_t cap = r->capbm ? r->capbm * 2 : 16;
		struct _bmeta *n = realloc(r->bm, cap * sizeof(*n));

		if (!n)
			return NULL;
		r->bm = n;
		r->capbm = cap;
	}
	b = &r->bm[r->nbm++];
	memset(b, 0, sizeof(*b));
	b->num = num;
	return b;
}

/* ---- pass 1: walk the source into r->src ---- */

static void _walk(struct _run *r, int dirfd, const char *prefix, int depth)
{
	DIR *d;
	struct dirent *de;
	int fd = dup(dirfd);

	if (fd < 0 || !(d = fdopendir(fd))) {
		struct _rec *e = _push(&r->src);

		if (fd >= 0)
			close(fd);
		if (e) {
			e->type = E_ERROR;
			e->err = errno;
			e->rel = strdup(*prefix ? prefix : ".");
		}
		return;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		char rel[XFER_PATH_MAX];
		struct stat st;
		struct _rec *e;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (depth == 0 && strcmp(de->d_name, BUNDLE_DIR) == 0) {
			e = _push(&r->src);
			if (e) {
				e->type = E_SPECIAL;
				e->rel = strdup(de->d_name);
				e->err = -1;	/* reserved name */
			}
			continue;
		}
		e = _push(&r->src);
		if (!e)
			break;
		if (xfer_join(rel, sizeof(rel), prefix, de->d_name) < 0) {
			e->type = E_ERROR;
			e->err = ENAMETOOLONG;
			e->rel = strdup(de->d_name);
			continue;
		}
		e->rel = strdup(rel);
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			e->type = E_ERROR;
			e->err = errno;
			continue;
		}
		e->size = st.st_size;
		e->mtime_ns = xfer_ns(&st.st_mtim);
		e->mode = st.st_mode & 07777;
		e->ino = st.st_ino;
		if (S_ISREG(st.st_mode)) {
			e->type = E_FILE;
			r->files++;
			r->bytes += st.st_size;
			if ((uint64_t)st.st_size < r->p.file_max)
				r->small++;
		} else if (S_ISLNK(st.st_mode)) {
			char t[PATH_MAX];
			ssize_t n = readlinkat(dirfd, de->d_name, t, sizeof(t) - 1);

			if (n < 0) {
				e->type = E_ERROR;
				e->err = errno;
				continue;
			}
			t[n] = '\0';
			e->type = E_LINK;
			e->size = 0;
			e->target = strdup(t);
		} else if (S_ISDIR(st.st_mode)) {
			int sub;

			e->type = E_DIR;
			e->size = 0;
			if (xfer_excluded(r->ctx, rel)) {
				/* exempt= inside the tree: not archived, not removed */
				e->type = E_SPECIAL;
				e->err = -2;
				r->skipped++;
				continue;
			}
			if (depth >= MAX_DEPTH) {
				e->type = E_ERROR;
				e->err = ELOOP;
				continue;
			}
			sub = openat(dirfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				e->type = E_ERROR;
				e->err = errno;
				continue;
			}
			_walk(r, sub, rel, depth + 1);
			close(sub);
		} else {
			e->type = E_SPECIAL;
			e->err = S_ISFIFO(st.st_mode) ? 1 : S_ISSOCK(st.st_mode) ? 2 : 3;
			r->skipped++;
		}
	}
	closedir(d);
}

/* ---- parent directories by relpath, never through a symlink ---- */

static int _open_under(int root, const char *dir, int create)
{
	char buf[XFER_PATH_MAX];
	int fd = dup(root);

	if (snprintf(buf, sizeof(buf), "%s", dir) >= (int)sizeof(buf)) {
		close(fd);
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *s = buf, *e; fd >= 0 && s && *s; s = e) {
		int nfd;

		e = strchr(s, '/');
		if (e)
			*e++ = '\0';
		if (create && mkdirat(fd, s, 0700) < 0 && errno != EEXIST) {
			int err = errno;

			close(fd);
			errno = err;
			return -1;
		}
		nfd = openat(fd, s, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		fd = nfd;
	}
	return fd;
}

/* The fd of rel's parent directory (cached); *leaf points into rel. */
static int _parent(struct _run *r, const char *rel, const char **leaf, int dest)
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

/* ---- index lines (the format: common/bundle.c) ---- */

static void _bundle_name(char *out, size_t len, int num)
{
	char bn[BUNDLE_NAME_SIZE];

	bundle_name(bn, num);
	snprintf(out, len, "%s", bn);
}

/* One index/journal line for a record; new string with '\n', or NULL. */
static char *_rec_line(const struct _rec *e)
{
	struct bundle_line l = {
		.type = BUNDLE_L_ENTRY, .path = e->rel, .target = e->target,
		.kind = e->type == E_FILE ? BUNDLE_K_FILE : e->type == E_LINK ? BUNDLE_K_LINK :
			BUNDLE_K_DIR,
		.num = e->bundle, .offset = e->offset, .size = e->size, .mode = e->mode,
		.mtime_ns = e->mtime_ns,
	};

	memcpy(l.cks, e->cks, sizeof(l.cks));
	return bundle_entry_line(&l);
}

static char *_bundle_line(const struct _bmeta *b)
{
	return bundle_bundle_line(b->num, b->size, b->cks, b->members);
}

static char *_header_line(struct _run *r)
{
	struct bundle_header h = {
		.algo = r->ctx->algo, .source = r->ctx->source, .dest = r->ctx->dest,
		.request = r->ctx->request_id, .job = r->ctx->job_id, .uid = r->ctx->uid,
		.created = (int64_t)time(NULL),
	};

	return bundle_header_line(&h);
}

static int _write_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

/* Append text to the journal and make it durable. */
static int _journal(struct _run *r, const char *text)
{
	if (r->jfd < 0) {
		r->jfd = openat(r->bdir, JOURNAL_NAME, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW |
				O_CLOEXEC, 0600);
		if (r->jfd < 0)
			return -1;
		if (lseek(r->jfd, 0, SEEK_END) == 0) {
			char *h = _header_line(r);
			int rc = h ? _write_all(r->jfd, h, strlen(h)) : -1;

			free(h);
			if (rc < 0)
				return -1;
		}
	}
	if (_write_all(r->jfd, text, strlen(text)) < 0 || fsync(r->jfd) < 0)
		return -1;
	return 0;
}

/* ---- checksums of what is on disk ---- */

static int _cksum_fd(struct _run *r, int fd, char *cks, int64_t *len)
{
	struct cksum ck;
	int64_t total = 0;
	ssize_t n;

	if (cksum_init(&ck, r->ctx->algo) < 0)
		return ENOMEM;
	posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	while ((n = pread(fd, r->buf, CHUNK, total)) > 0) {
		if (_stopped(r)) {
			cksum_abort(&ck);
			return EINTR;
		}
		cksum_update(&ck, r->buf, (size_t)n);
		total += n;
		xfer_bucket_take(r->ctx->bucket, (uint64_t)n, r->ctx->stop);
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (n < 0) {
		int e = errno;

		cksum_abort(&ck);
		return e;
	}
	cksum_final(&ck, cks);
	if (len)
		*len = total;
	return 0;
}

/* ---- resume: the journal of an earlier attempt ---- */

static void _load_journal(struct _run *r)
{
	struct stat st;
	int fd, from_index = 0;
	char *text;
	long line = 0;

	fd = openat(r->bdir, INDEX_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		from_index = 1;
	} else {
		fd = openat(r->bdir, JOURNAL_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > JOURNAL_MAX ||
	    !(text = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return;
	}
	{
		size_t got = 0;

		while (got < (size_t)st.st_size) {
			ssize_t n = read(fd, text + got, (size_t)st.st_size - got);

			if (n <= 0)
				break;
			got += (size_t)n;
		}
		text[got] = '\0';
	}
	close(fd);
	/*
	 * The one strict decoder (common/bundle.c): a line it rejects (a torn
	 * last line, or one edited by hand) is left out, and what it listed is
	 * archived again.
	 */
	for (char *s = text, *e; s && *s; s = e) {
		struct bundle_line l;
		char why[256];

		e = strchr(s, '\n');
		if (e)
			*e++ = '\0';
		line++;
		if (bundle_line_decode(s, strlen(s), &l, why, sizeof(why)) < 0)
			continue;
		if (l.type == BUNDLE_L_BUNDLE) {
			struct _bmeta *b = _bundle_meta_add(r, l.num);

			if (b) {
				b->size = l.size;
				b->members = l.members;
				memcpy(b->cks, l.cks, sizeof(b->cks));
			}
		} else if (l.type == BUNDLE_L_ENTRY && l.kind != BUNDLE_K_DIR) {
			struct _rec *x = _push(&r->jr);

			if (x) {
				x->type = l.kind == BUNDLE_K_FILE ? E_FILE : E_LINK;
				x->rel = l.path;	/* moved */
				x->target = l.target;
				l.path = l.target = NULL;
				x->size = l.size;
				x->mode = l.mode;
				x->mtime_ns = l.mtime_ns;
				x->bundle = l.num;
				x->offset = l.offset;
				x->seq = line;
				memcpy(x->cks, l.cks, sizeof(x->cks));
			}
		}
		bundle_line_clear(&l);
	}
	free(text);
	/* From now on the journal is appended to: a finished index becomes it. */
	if (from_index)
		renameat(r->bdir, INDEX_NAME, r->bdir, JOURNAL_NAME);
}

/* Verify each listed bundle; drop records of bundles that are not intact. */
static void _check_kept(struct _run *r)
{
	for (size_t i = 0; i < r->nbm && !_stopped(r); i++) {
		struct _bmeta *b = &r->bm[i];
		char bn[32], got[CKSUM_HEX_MAX];
		int64_t members = 0, len = 0;
		int fd;

		_bundle_name(bn, sizeof(bn), b->num);
		for (size_t k = 0; k < r->jr.n; k++)
			members += r->jr.v[k].bundle == b->num;
		fd = openat(r->bdir, bn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || !b->cks[0] || members < b->members) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (_cksum_fd(r, fd, got, &len) == 0 && len == b->size && strcmp(got, b->cks) == 0)
			b->kept = 1;
		else
			xfer_logf(r->ctx, LOG_LVL_WARN, "request %lld: %s/%s/%s does not match its "
				  "journal record; its members are packed again",
				  (long long)r->ctx->request_id, r->ctx->dest, BUNDLE_DIR, bn);
		close(fd);
	}
	/* Keep the records in intact bundles (and plain files); later lines win. */
	{
		size_t w = 0;

		for (size_t k = 0; k < r->jr.n; k++) {
			struct _rec *x = &r->jr.v[k];
			struct _bmeta *b = x->bundle ? _bundle_meta(r, x->bundle) : NULL;

			if (x->bundle && (!b || !b->kept)) {
				free(x->rel);
				free(x->target);
				continue;
			}
			r->jr.v[w++] = *x;
		}
		r->jr.n = w;
		qsort(r->jr.v, r->jr.n, sizeof(r->jr.v[0]), _cmp_rel);
		w = 0;
		for (size_t k = 0; k < r->jr.n; k++) {
			if (k + 1 < r->jr.n && strcmp(r->jr.v[k].rel, r->jr.v[k + 1].rel) == 0) {
				free(r->jr.v[k].rel);
				free(r->jr.v[k].target);
				continue;
			}
			r->jr.v[w++] = r->jr.v[k];
		}
		r->jr.n = w;
	}
}

/* Remove what the bundle folder holds besides kept bundles and the journal. */
static void _sweep(struct _run *r, int only_unreferenced)
{
	int fd = dup(r->bdir);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		int num = bundle_name_parse(de->d_name);
		struct _bmeta *b = num ? _bundle_meta(r, num) : NULL;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    strcmp(de->d_name, JOURNAL_NAME) == 0 || strcmp(de->d_name, INDEX_NAME) == 0)
			continue;
		if (num > r->next_bundle)
			r->next_bundle = num;
		if (b && b->kept && (!only_unreferenced || b->refs > 0))
			continue;
		if (!num && only_unreferenced)
			continue;
		if (unlinkat(r->bdir, de->d_name, 0) == 0 && num)
			xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: removed %s %s/%s/%s",
				  (long long)r->ctx->request_id, only_unreferenced ? "superseded" :
				  "unverified", r->ctx->dest, BUNDLE_DIR, de->d_name);
	}
	closedir(d);
	for (size_t i = 0; i < r->nbm; i++)
		if (r->bm[i].num > r->next_bundle)
			r->next_bundle = r->bm[i].num;
}

/* ---- the open bundle ---- */

static int _bflush(struct _run *r)
{
	if (r->blen && _write_all(r->bfd, r->buf, r->blen) < 0)
		return errno;
	xfer_bucket_wrote(r->ctx->bucket, r->bfd, -1, r->blen);
	xfer_bucket_take(r->ctx->bucket, r->blen, r->ctx->stop);
	r->blen = 0;
	return 0;
}

static int _bput(struct _run *r, const void *data, size_t len)
{
	const char *p = data;

	cksum_update(&r->bck, data, len);
	r->boff += len;
	while (len) {
		size_t k = CHUNK - r->blen < len ? CHUNK - r->blen : len;

		memcpy(r->buf + r->blen, p, k);
		r->blen += k;
		p += k;
		len -= k;
		if (r->blen == CHUNK) {
			int e = _bflush(r);

			if (e)
				return e;
		}
	}
	return 0;
}

static int _bopen(struct _run *r)
{
	r->bnum = ++r->next_bundle;
	snprintf(r->btmp, sizeof(r->btmp), ".bundle-%06d.tar.stagehand-%lld", r->bnum,
		 (long long)r->ctx->request_id);
	unlinkat(r->bdir, r->btmp, 0);
	r->bfd = openat(r->bdir, r->btmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
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

static void _babort(struct _run *r)
{
	if (r->bfd < 0)
		return;
	cksum_abort(&r->bck);
	close(r->bfd);
	r->bfd = -1;
	unlinkat(r->bdir, r->btmp, 0);
	r->blen = 0;
}

static void _remove_source(struct _run *r, const struct _rec *e)
{
	const char *leaf;
	int pfd;

	if (r->ctx->keep || e->type != E_FILE)
		return;
	pfd = _parent(r, e->rel, &leaf, 0);
	if (pfd < 0 || unlinkat(pfd, leaf, 0) < 0)
		xfer_logf(r->ctx, LOG_LVL_WARN, "request %lld: keep=no: cannot remove source '%s': %s",
			  (long long)r->ctx->request_id, e->rel, strerror(errno));
}

/* Close, verify, rename, journal and report the open bundle. */
static void _bclose(struct _run *r)
{
	static const char zero[TAR_END_BYTES];
	char want[CKSUM_HEX_MAX], got[CKSUM_HEX_MAX], bn[32];
	int64_t len = 0;
	int e = 0;
	struct _bmeta *b;
	size_t cap = 4096, used = 0;
	char *text;

	if (r->bfd < 0)
		return;
	if (r->nbmem == 0) {
		_babort(r);
		r->next_bundle--;
		return;
	}
	_bundle_name(bn, sizeof(bn), r->bnum);
	e = _bput(r, zero, sizeof(zero));
	if (!e)
		e = _bflush(r);
	cksum_final(&r->bck, want);
	if (!e && fsync(r->bfd) < 0)
		e = errno;
	posix_fadvise(r->bfd, 0, 0, POSIX_FADV_DONTNEED);
	if (!e)
		e = _cksum_fd(r, r->bfd, got, &len);
	if (!e && (strcmp(got, want) != 0 || (uint64_t)len != r->boff))
		e = EIO;
	if (close(r->bfd) < 0 && !e)
		e = errno;
	r->bfd = -1;
	if (!e && renameat(r->bdir, r->btmp, r->bdir, bn) < 0)
		e = errno;
	if (!e && fsync(r->bdir) < 0)
		e = errno;
	b = e ? NULL : _bundle_meta_add(r, r->bnum);
	if (!e && !b)
		e = ENOMEM;
	if (e) {
		unlinkat(r->bdir, r->btmp, 0);
		for (size_t i = 0; i < r->nbmem; i++)
			if (e != EINTR)
				_fail_item(r, r->src.v[r->bmem[i]].rel, e, e == EIO ?
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
	text = malloc(cap);
	for (size_t i = 0; text && i <= r->nbmem; i++) {
		char *l = i == 0 ? _bundle_line(b) : _rec_line(&r->src.v[r->bmem[i - 1]]);
		size_t ll = l ? strlen(l) : 0;

		if (!l) {
			free(text);
			text = NULL;
			break;
		}
		if (used + ll + 1 > cap) {
			char *n;

			while (used + ll + 1 > cap)
				cap *= 2;
			n = realloc(text, cap);
			if (!n) {
				free(l);
				free(text);
				text = NULL;
				break;
			}
			text = n;
		}
		memcpy(text + used, l, ll + 1);
		used += ll;
		free(l);
	}
	if (!text || _journal(r, text) < 0) {
		int err = text ? errno : ENOMEM;

		free(text);
		for (size_t i = 0; i < r->nbmem; i++)
			_fail_item(r, r->src.v[r->bmem[i]].rel, err, "cannot record bundle member");
		r->nbmem = 0;
		return;
	}
	free(text);
	xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: %s/%s/%s verified: %zu members, %lld bytes, %s",
		  (long long)r->ctx->request_id, r->ctx->dest, BUNDLE_DIR, bn, r->nbmem,
		  (long long)len, got);
	for (size_t i = 0; i < r->nbmem; i++) {
		struct _rec *m = &r->src.v[r->bmem[i]];

		m->done = 1;
		xfer_emit(r->ctx, XR_ITEM_DONE, 0, m->size, (int64_t)time(NULL), (int64_t)time(NULL),
			  m->type == E_FILE ? m->cks : NULL, m->rel, m->type == E_FILE ? "file" : "symlink");
		if (m->type == E_FILE) {
			r->verified++;
			_remove_source(r, m);
		}
	}
	r->nbmem = 0;
}

/* Read one small file whole into r->fbuf; 0 or an errno. */
static int _read_small(struct _run *r, struct _rec *e)
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

static void _pack(struct _run *r, size_t idx)
{
	struct _rec *e = &r->src.v[idx];
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
		_fail_item(r, e->rel, ENAMETOOLONG, "name too long for a bundle");
		return;
	}
	if (r->bfd >= 0 && r->nbmem && r->boff + need + TAR_END_BYTES > r->p.bundle_size)
		_bclose(r);
	if (r->bfd < 0 && (rc = _bopen(r)) != 0) {
		_fail_item(r, e->rel, rc, "cannot create bundle for");
		return;
	}
	if (e->type == E_FILE) {
		struct cksum ck;

		rc = _read_small(r, e);
		if (rc) {
			_fail_item(r, e->rel, rc, rc == EAGAIN ? "source changed during copy" :
				   "cannot read source");
			return;
		}
		if (cksum_init(&ck, r->ctx->algo) < 0) {
			_fail_item(r, e->rel, ENOMEM, "cannot checksum");
			return;
		}
		cksum_update(&ck, r->fbuf, (size_t)e->size);
		cksum_final(&ck, e->cks);
	}
	if (!tar_header_encode(&m, hdr, sizeof(hdr), err, sizeof(err))) {
		_fail_item(r, e->rel, ENAMETOOLONG, "name cannot be stored in a bundle");
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
	if (r->nbmem == r->capbmem) {
		size_t cap = r->capbmem ? r->capbmem * 2 : 1024;
		size_t *n = realloc(r->bmem, cap * sizeof(*n));

		if (!n) {
			rc = ENOMEM;
			goto fail;
		}
		r->bmem = n;
		r->capbmem = cap;
	}
	r->bmem[r->nbmem++] = idx;
	if (e->type == E_FILE)
		xfer_emit(r->ctx, XR_ITEM_COPIED, 0, 0, 0, 0, e->cks, e->rel, NULL);
	return;
fail:
	/* A write error spoils the whole open bundle. */
	_fail_item(r, e->rel, rc, "cannot write bundle for");
	for (size_t i = 0; i < r->nbmem; i++)
		_fail_item(r, r->src.v[r->bmem[i]].rel, rc, "cannot write bundle for");
	r->nbmem = 0;
	_babort(r);
}

/* ---- large files: copied alone, as the local backend does ---- */

static void _copy_plain(struct _run *r, struct _rec *e)
{
	const char *sleaf, *dleaf;
	int sp = _parent(r, e->rel, &sleaf, 0), dp, sfd, dfd, err = 0;
	char tmp[NAME_MAX + 1], want[CKSUM_HEX_MAX], got[CKSUM_HEX_MAX];
	struct cksum ck;
	struct stat st;
	int64_t off = 0, len = 0;
	char *line;

	xfer_emit(r->ctx, XR_ITEM_START, 0, e->size, e->mtime_ns, e->mode, NULL, e->rel, "file");
	if (sp < 0) {
		_fail_item(r, e->rel, errno, "cannot open source directory of");
		return;
	}
	sfd = openat(sp, sleaf, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (sfd < 0) {
		_fail_item(r, e->rel, errno, "cannot open source");
		return;
	}
	if (fstat(sfd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_ino != e->ino) {
		close(sfd);
		_fail_item(r, e->rel, EAGAIN, "source changed while walking");
		return;
	}
	fcntl(sfd, F_SETFL, fcntl(sfd, F_GETFL) & ~O_NONBLOCK);
	dp = _parent(r, e->rel, &dleaf, 1);
	if (dp < 0) {
		err = errno;
		close(sfd);
		_fail_item(r, e->rel, err, "cannot create destination directory for");
		return;
	}
	if (snprintf(tmp, sizeof(tmp), ".stagehand-%lld-%lld", (long long)r->ctx->request_id,
		     (long long)e->ino) >= (int)sizeof(tmp)) {
		close(sfd);
		_fail_item(r, e->rel, ENAMETOOLONG, "name too long");
		return;
	}
	unlinkat(dp, tmp, 0);
	dfd = openat(dp, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (dfd < 0) {
		err = errno;
		close(sfd);
		_fail_item(r, e->rel, err, "cannot create destination");
		return;
	}
	if (cksum_init(&ck, r->ctx->algo) < 0) {
		err = ENOMEM;
		goto out;
	}
	posix_fadvise(sfd, 0, 0, POSIX_FADV_SEQUENTIAL);
	for (;;) {
		ssize_t n = pread(sfd, r->buf, CHUNK, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 || _stopped(r)) {
			err = n < 0 ? errno : EINTR;
			cksum_abort(&ck);
			goto out;
		}
		if (n == 0)
			break;
		cksum_update(&ck, r->buf, (size_t)n);
		if (_write_all(dfd, r->buf, (size_t)n) < 0) {
			err = errno;
			cksum_abort(&ck);
			goto out;
		}
		xfer_bucket_wrote(r->ctx->bucket, dfd, off, (uint64_t)n);
		xfer_bucket_take(r->ctx->bucket, (uint64_t)n, r->ctx->stop);
		off += n;
	}
	cksum_final(&ck, want);
	if (off != e->size || fstat(sfd, &st) < 0 || xfer_ns(&st.st_mtim) != e->mtime_ns) {
		err = EAGAIN;
		goto out;
	}
	{
		struct timespec ts[2] = { st.st_atim, st.st_mtim };

		if (fchmod(dfd, e->mode) < 0 || futimens(dfd, ts) < 0 || fsync(dfd) < 0)
			err = errno;
	}
	posix_fadvise(dfd, 0, 0, POSIX_FADV_DONTNEED);
	if (!err)
		err = _cksum_fd(r, dfd, got, &len);
	if (!err && (strcmp(got, want) != 0 || len != e->size))
		err = EIO;
out:
	posix_fadvise(sfd, 0, 0, POSIX_FADV_DONTNEED);
	close(sfd);
	if (close(dfd) < 0 && !err)
		err = errno;
	if (!err && renameat(dp, tmp, dp, dleaf) < 0)
		err = errno;
	if (!err && fsync(dp) < 0)
		err = errno;
	if (err) {
		unlinkat(dp, tmp, 0);
		if (err != EINTR)
			_fail_item(r, e->rel, err, err == EAGAIN ? "source changed during copy" :
				   err == EIO ? "checksum mismatch after copy of" : "copy failed");
		return;
	}
	snprintf(e->cks, sizeof(e->cks), "%s", got);
	e->bundle = 0;
	xfer_emit(r->ctx, XR_ITEM_COPIED, 0, 0, 0, 0, want, e->rel, NULL);
	line = _rec_line(e);
	if (!line || _journal(r, line) < 0) {
		free(line);
		_fail_item(r, e->rel, errno ? errno : ENOMEM, "cannot record");
		return;
	}
	free(line);
	e->done = 1;
	xfer_emit(r->ctx, XR_ITEM_DONE, 0, e->size, (int64_t)time(NULL), (int64_t)time(NULL), got,
		  e->rel, "file");
	r->verified++;
	_remove_source(r, e);
}

/* ---- an entry verified by an earlier attempt ---- */

static int _try_keep(struct _run *r, struct _rec *e)
{
	struct _rec *j = _find(&r->jr, e->rel);
	const struct xfer_done_ent *de;

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
		r->kept++;
	de = xfer_done_find(r->ctx->done, r->ctx->ndone, e->rel);
	if (!de || de->size != e->size || de->mtime_ns != e->mtime_ns || e->type != E_FILE) {
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

/* ---- the final index ---- */

static int _write_index(struct _run *r, char *msg, size_t msglen)
{
	struct _vec out = { 0 };
	char *h = _header_line(r), want[CKSUM_HEX_MAX], got[CKSUM_HEX_MAX];
	struct cksum ck;
	int fd, e = 0;
	int64_t len = 0;

	/* Everything archived now or kept, plus earlier members not superseded. */
	for (size_t i = 0; i < r->src.n; i++)
		if (r->src.v[i].done || r->src.v[i].type == E_DIR) {
			struct _rec *x = _push(&out);

			if (!x) {
				e = ENOMEM;
				break;
			}
			*x = r->src.v[i];
		}
	for (size_t i = 0; !e && i < r->jr.n; i++)
		if (!r->jr.v[i].done && !_find(&r->src, r->jr.v[i].rel)) {
			struct _rec *x = _push(&out);

			if (!x) {
				e = ENOMEM;
				break;
			}
			*x = r->jr.v[i];
		}
	if (e || !h || cksum_init(&ck, r->ctx->algo) < 0) {
		free(out.v);
		free(h);
		snprintf(msg, msglen, "out of memory writing the index");
		return -1;
	}
	qsort(out.v, out.n, sizeof(out.v[0]), _cmp_rel);
	for (size_t i = 0; i < out.n; i++) {
		struct _bmeta *b = out.v[i].bundle ? _bundle_meta(r, out.v[i].bundle) : NULL;

		if (b)
			b->refs++;
	}
	unlinkat(r->bdir, INDEX_TMP, 0);
	fd = openat(r->bdir, INDEX_TMP, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		e = errno;
		goto fail;
	}
	cksum_update(&ck, h, strlen(h));
	if (_write_all(fd, h, strlen(h)) < 0)
		e = errno;
	for (size_t i = 0; !e && i < r->nbm; i++) {
		char *l;

		if (!r->bm[i].kept || !r->bm[i].refs)
			continue;
		l = _bundle_line(&r->bm[i]);
		if (!l || _write_all(fd, l, strlen(l)) < 0)
			e = l ? errno : ENOMEM;
		else
			cksum_update(&ck, l, strlen(l));
		free(l);
	}
	for (size_t i = 0; !e && i < out.n; i++) {
		char *l = _rec_line(&out.v[i]);

		if (!l || _write_all(fd, l, strlen(l)) < 0)
			e = l ? errno : ENOMEM;
		else
			cksum_update(&ck, l, strlen(l));
		free(l);
	}
	cksum_final(&ck, want);
	if (!e && fsync(fd) < 0)
		e = errno;
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (!e)
		e = _cksum_fd(r, fd, got, &len);
	if (!e && strcmp(got, want) != 0)
		e = EIO;
	if (close(fd) < 0 && !e)
		e = errno;
	if (!e && renameat(r->bdir, INDEX_TMP, r->bdir, INDEX_NAME) < 0)
		e = errno;
	if (!e && fsync(r->bdir) < 0)
		e = errno;
fail:
	free(out.v);
	free(h);
	if (e) {
		unlinkat(r->bdir, INDEX_TMP, 0);
		snprintf(msg, msglen, "cannot write the index %s/%s/%s: %s", r->ctx->dest, BUNDLE_DIR,
			 INDEX_NAME, strerror(e));
		return -1;
	}
	if (r->jfd >= 0) {
		close(r->jfd);
		r->jfd = -1;
	}
	unlinkat(r->bdir, JOURNAL_NAME, 0);
	_sweep(r, 1);
	xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: index %s/%s/%s written (%zu entries, %s)",
		  (long long)r->ctx->request_id, r->ctx->dest, BUNDLE_DIR, INDEX_NAME, out.n, got);
	return 0;
}

/* ---- labels (as the local backend sets them) ---- */

/* Directories of the destination take the source's modes and times, deepest first. */
static void _dir_times(struct _run *r)
{
	for (size_t i = r->src.n; i-- > 0;) {
		struct _rec *e = &r->src.v[i];
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

static void _cleanup(struct _run *r)
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
	_vec_free(&r->src);
	_vec_free(&r->jr);
	free(r->bm);
	free(r->bmem);
	free(r->buf);
	free(r->fbuf);
}

static int _finish(struct _run *r, int result, const char *msg)
{
	xfer_emit(r->ctx, XR_RESULT, result, 0, 0, 0, NULL, NULL, msg);
	_cleanup(r);
	return result;
}

static int _run_bundle(struct xfer_ctx *ctx)
{
	struct _run r = { .ctx = ctx, .p = _params, .sroot = -1, .droot = -1, .bdir = -1,
			  .jfd = -1, .sp_fd = -1, .dp_fd = -1, .bfd = -1 };
	char msg[XFER_TEXT_MAX];
	struct stat st;
	int had_bundles = 0;

	if (strcmp(ctx->action, "archive") != 0)
		return xfer_backend_local.run(ctx);
	r.sroot = xfer_open_source(ctx, O_RDONLY | O_NOCTTY | O_NONBLOCK, msg, sizeof(msg));
	if (r.sroot >= 0 && fstat(r.sroot, &st) < 0) {
		snprintf(msg, sizeof(msg), "cannot stat source %s: %s", ctx->source, strerror(errno));
		close(r.sroot);
		r.sroot = -1;
	}
	if (r.sroot < 0)
		return _finish(&r, errno == ENOMEM || errno == EIO ? XFER_RETRYABLE : XFER_FINAL, msg);
	if (!S_ISDIR(st.st_mode)) {
		_cleanup(&r);	/* not a tree: nothing to bundle */
		return xfer_backend_local.run(ctx);
	}
	{
		char p[XFER_PATH_MAX];
		struct stat bst;

		if (snprintf(p, sizeof(p), "%s/%s", ctx->dest, BUNDLE_DIR) < (int)sizeof(p) &&
		    lstat(p, &bst) == 0 && S_ISDIR(bst.st_mode))
			had_bundles = 1;	/* once bundled, an archive stays bundled */
	}
	_walk(&r, r.sroot, "", 0);
	if (r.small < r.p.min_files && !had_bundles) {
		_cleanup(&r);
		return xfer_backend_local.run(ctx);
	}
	r.buf = malloc(CHUNK);
	r.fbuf = malloc(r.p.file_max ? r.p.file_max : 1);
	if (!r.buf || !r.fbuf)
		return _finish(&r, XFER_RETRYABLE, "out of memory");
	qsort(r.src.v, r.src.n, sizeof(r.src.v[0]), _cmp_rel);
	xfer_emit(ctx, XR_TOTALS, 0, r.files, r.bytes, r.skipped, NULL, NULL, NULL);
	for (size_t i = 0; i < r.src.n; i++) {
		struct _rec *e = &r.src.v[i];

		if (e->type == E_ERROR) {
			_fail_item(&r, e->rel ? e->rel : "?", e->err, "cannot read");
		} else if (e->type == E_SPECIAL && e->err == -1) {
			snprintf(msg, sizeof(msg), "the source holds its own '%s' at the top, where a "
				 "bundled archive keeps its index: rename it, or archive this tree with "
				 "ArchiveBundle=no", BUNDLE_DIR);
			return _finish(&r, XFER_FINAL, msg);
		} else if (e->type == E_SPECIAL && e->err == -2) {
			xfer_emit(ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, e->rel, XFER_EXCLUDE_REASON);
		} else if (e->type == E_SPECIAL) {
			snprintf(msg, sizeof(msg), "%s skipped: only regular files, directories and "
				 "symlinks are archived", e->err == 1 ? "FIFO" : e->err == 2 ? "socket" :
				 "device");
			xfer_emit(ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, e->rel, msg);
		}
	}
	xfer_logf(ctx, LOG_LVL_INFO, "request %lld: bundling %lld files (%lld smaller than %llu "
		  "bytes) of %s into %s/%s", (long long)ctx->request_id, (long long)r.files,
		  (long long)r.small, (unsigned long long)r.p.file_max, ctx->source, ctx->dest,
		  BUNDLE_DIR);
	/* The destination and its bundle folder, as the owner. */
	if (xfer_mkparents(ctx->dest, msg, sizeof(msg)) < 0)
		return _finish(&r, XFER_FINAL, msg);
	r.droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r.droot < 0 && errno == ENOENT && mkdir(ctx->dest, 0700) == 0)
		r.droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r.droot >= 0 && mkdirat(r.droot, BUNDLE_DIR, 0700) < 0 && errno != EEXIST)
		r.bdir = -1;
	else if (r.droot >= 0)
		r.bdir = openat(r.droot, BUNDLE_DIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (r.droot < 0 || r.bdir < 0) {
		snprintf(msg, sizeof(msg), "cannot create archive directory %s/%s: %s (its parent "
			 "must exist and be writable by you)", ctx->dest, BUNDLE_DIR, strerror(errno));
		return _finish(&r, errno == ENOSPC || errno == EIO ? XFER_RETRYABLE : XFER_FINAL, msg);
	}
	/* Resume: what an earlier attempt verified stays. */
	_load_journal(&r);
	_check_kept(&r);
	_sweep(&r, 0);
	for (size_t i = 0; i < r.src.n && !_stopped(&r); i++) {
		struct _rec *e = &r.src.v[i];

		if (e->type != E_FILE && e->type != E_LINK)
			continue;
		if (_try_keep(&r, e))
			continue;
		if (e->type == E_LINK || (uint64_t)e->size < r.p.file_max)
			_pack(&r, i);
		else
			_copy_plain(&r, e);
	}
	if (!_stopped(&r))
		_bclose(&r);
	if (_stopped(&r))
		return _finish(&r, XFER_INTERRUPTED, "interrupted; will be resumed");
	xfer_emit(ctx, XR_PHASE, QS_VERIFYING, 0, 0, 0, NULL, NULL, NULL);
	if (_write_index(&r, msg, sizeof(msg)) < 0)
		return _finish(&r, XFER_RETRYABLE, msg);
	_dir_times(&r);
	{
		struct timespec ts[2] = { st.st_atim, st.st_mtim };

		fchmod(r.droot, st.st_mode & 07777);
		fsync(r.droot);
		futimens(r.droot, ts);
	}
	if (!r.failures && r.verified + r.kept != r.files) {
		snprintf(msg, sizeof(msg), "the source tree changed during the transfer (%lld files "
			 "counted, %lld verified): will be redone", (long long)r.files,
			 (long long)(r.verified + r.kept));
		return _finish(&r, XFER_RETRYABLE, msg);
	}
	if (r.failures)
		return _finish(&r, xfer_failed_result(r.failures, r.final_failures, r.first_error,
						      msg, sizeof(msg)), msg);
	xfer_label_all(ctx, r.sroot, "archived", ctx->dest);
	return _finish(&r, XFER_OK, NULL);
}

const struct xfer_backend xfer_backend_bundle = { "bundle", NULL, _run_bundle };
