/*
 * xfer_local.c - the "local" and "null" backends: POSIX trees.
 *
 * Runs only inside a worker that already has the owner's uid, gid and groups.
 * Inside the source tree nothing is followed: every entry is opened with
 * openat(O_NOFOLLOW) relative to its parent's fd, symlinks are recreated as
 * symlinks, FIFOs/sockets/devices are skipped with a warning. Each file is
 * written to a temporary name in its destination directory, fsynced and
 * renamed, then read back (its pages dropped first, so from the disk) and
 * its checksum compared with the source's; only then is it reported, in one
 * record. Files of a directory are copied by THREADS threads at once (small
 * files are bound by the latency of open/fsync/rename, not by bandwidth);
 * the walker waits for them before it syncs and timestamps the directory.
 * Files of XFER_BIG_MIN bytes or more take the pipelined path of xfer_big.c.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "queue.h"
#include "xattr.h"
#include "xfer.h"
#include "xfer_big.h"
#include "xfer_util.h"

#define CHUNK (4u << 20)          /* the walker's buffer (single files, null backend) */
#define TBUF (256u << 10)         /* a copy thread's buffer (aligned: O_DIRECT reads) */
#define THREADS 16                /* copy threads per worker: small files are latency-bound */
#define QMAX 256                  /* files queued for the threads at most */
#define BATCH_N 512               /* small files made durable together (SyncMode=batch) */
#define BATCH_BYTES (8 << 20)     /* ... or this many bytes: progress shows per batch */
#define BATCH_FILE_MAX (1 << 20)  /* files up to this size are batched */
#define MAX_DEPTH 256

/* A buffer owned by one thread. */
struct _tbuf {
	char *p;
	size_t len;
};

/* A small file of a batch, between its copy and its verification. */
struct _pend {
	int sdir, ddir;
	char *name, *rel;
	struct stat st;
	char tmp[NAME_MAX + 1];
	char cks[CKSUM_HEX_MAX];
	int64_t total, started;
	int state;                   /* 0 failed or kept, 1 copied, 2 renamed */
};

/* One directory's batch: copied by the threads, synced and renamed by the walker. */
struct _batch {
	struct _pend *p;
	size_t n, cap;
	int ddir;
	int64_t bytes;
	struct _pend *old;           /* the previous batch, being verified by the threads */
	size_t nold;
};

static void _batch_free(struct _pend *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(p[i].name);
		free(p[i].rel);
	}
	free(p);
}

enum { T_FILE = 0, T_BATCH_COPY, T_BATCH_VERIFY };

/* A job handed to a copy thread; sdir/ddir stay open until the walker drains. */
struct _task {
	int kind;                    /* T_FILE: the whole pipeline; else one batch stage */
	int sdir, ddir;
	char *name, *rel;
	struct stat st;
	struct _pend *pend;          /* batch stages: the file (owned by the batch) */
	struct _task *next;
};

struct _run {
	struct xfer_ctx *ctx;
	int null;                    /* null backend: read and checksum only */
	struct _tbuf tb0;            /* the walker's buffer, CHUNK bytes */
	int64_t files, bytes, skipped;
	int64_t kept, verified;      /* files left as verified before, files verified now */
	int failures, final_failures;
	char first_error[XFER_TEXT_MAX];
	pthread_mutex_t mu;          /* the counters above, once threads run */
	/* the copy threads */
	pthread_t th[THREADS];
	int nth;
	pthread_mutex_t pmu;
	pthread_cond_t cv_work, cv_done;
	struct _task *head, *tail;
	int pending;                 /* queued + being copied */
	int quit;
};

static int _stopped(struct _run *r)
{
	return r->ctx->stop && *r->ctx->stop;
}

/* Record a per-entry failure; permission problems cannot be fixed by a retry. */
static void _fail_item(struct _run *r, const char *rel, int err, const char *what)
{
	char msg[XFER_TEXT_MAX];

	snprintf(msg, sizeof(msg), "%s '%s': %s", what, rel, strerror(err));
	xfer_emit(r->ctx, XR_ITEM_FAILED, err, 0, 0, 0, NULL, rel, msg);
	pthread_mutex_lock(&r->mu);
	if (!r->failures)
		memcpy(r->first_error, msg, sizeof(r->first_error));
	r->failures++;
	if (xfer_err_final(err))
		r->final_failures++;
	pthread_mutex_unlock(&r->mu);
}

static void _count_add(struct _run *r, int64_t *counter)
{
	pthread_mutex_lock(&r->mu);
	++*counter;
	pthread_mutex_unlock(&r->mu);
}

/* ---- pass 1: count ---- */

/* ---- pass 2: copy ---- */

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

/* Create the temporary file; a stale one from an interrupted attempt is replaced. */
static int _create_tmp(int ddir, const char *tmp)
{
	int fd = openat(ddir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);

	if (fd < 0 && errno == EEXIST && unlinkat(ddir, tmp, 0) == 0)
		fd = openat(ddir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	return fd;
}

/*
 * Hash everything fd holds from offset 0 into cks, writing it to dfd as well
 * (dfd < 0: hash only). expect is the size seen by the walk: a short read
 * that ends exactly there is the end of the file (no extra read for it).
 */
static int _stream(struct _run *r, struct _tbuf *tb, int fd, int dfd, int64_t expect, int align,
		   int64_t *total, char *cks)
{
	struct cksum ck;
	int64_t off = 0;
	size_t want;

	if (cksum_init(&ck, r->ctx->algo) < 0)
		return ENOMEM;
	for (;;) {
		ssize_t n;

		if (_stopped(r)) {
			cksum_abort(&ck);
			return EINTR;
		}
		/* Ask for what is left plus one byte (the EOF test), not a whole buffer:
		   a direct read past the end costs zero-filling, a buffered one read-ahead. */
		want = tb->len;
		if (expect >= off && (uint64_t)(expect - off) < want) {
			want = (size_t)(expect - off) + 1;
			if (align)
				want = (want + 4095) / 4096 * 4096;
			if (want > tb->len)
				want = tb->len;
		}
		n = pread(fd, tb->p, want, off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;

			cksum_abort(&ck);
			return e;
		}
		if (n == 0)
			break;
		cksum_update(&ck, tb->p, (size_t)n);
		for (ssize_t w = 0; dfd >= 0 && w < n;) {
			ssize_t m = pwrite(dfd, tb->p + w, (size_t)(n - w), off + w);

			if (m < 0 && errno == EINTR)
				continue;
			if (m < 0) {
				int e = errno;

				cksum_abort(&ck);
				return e;
			}
			w += m;
		}
		/* Charged after the fact: a small file costs what it moved, not a chunk. */
		xfer_bucket_wrote(r->ctx->bucket, dfd, off, (uint64_t)n);
		xfer_bucket_take(r->ctx->bucket, (uint64_t)n, r->ctx->stop);
		off += n;
		if ((size_t)n < want && off == expect)
			break;
	}
	*total = off;
	cksum_final(&ck, cks);
	return 0;
}

/*
 * Read the destination back from the device (O_DIRECT, or after dropping its
 * cached pages where direct I/O is refused) and checksum it.
 */
static int _verify_file(struct _run *r, struct _tbuf *tb, int ddir, const char *name,
			int64_t expect, char *cks)
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
	e = _stream(r, tb, fd, -1, expect, direct, &total, cks);
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	close(fd);
	if (!e && total != expect)
		e = EIO;
	return e;
}

/*
 * A symlink is in place: check it now, so that what was verified survives a
 * crash (the next attempt skips it).
 */
static void _verified_link(struct _run *r, int ddir, const char *name, const char *rel,
			   const char *want)
{
	char got[PATH_MAX];
	ssize_t n;

	if (!r->null) {
		n = readlinkat(ddir, name, got, sizeof(got) - 1);
		if (n < 0) {
			_fail_item(r, rel, errno, "cannot verify");
			return;
		}
		got[n] = '\0';
		if (strcmp(got, want) != 0) {
			_fail_item(r, rel, EIO, "checksum mismatch after copy of");
			return;
		}
	}
	xfer_emit(r->ctx, XR_ITEM_DONE, 0, 0, (int64_t)time(NULL), (int64_t)time(NULL),
		  NULL, rel, "symlink");
}

/* Resume: verified by an earlier attempt, and neither side changed since (counted kept). */
static int _resume_ok(struct _run *r, int ddir, const char *name, const char *rel,
		      const struct stat *st)
{
	const struct xfer_done_ent *de = xfer_done_find(r->ctx->done, r->ctx->ndone, rel);
	struct stat dst;

	if (!de || r->null || de->size != st->st_size || de->mtime_ns != xfer_ns(&st->st_mtim))
		return 0;
	if (fstatat(ddir, name, &dst, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(dst.st_mode) &&
	    dst.st_size == st->st_size && xfer_ns(&dst.st_mtim) == de->mtime_ns) {
		_count_add(r, &r->kept);
		return 1;
	}
	return 0;
}

/* Report a verified file; for archive with keep=no, remove its source now. */
static void _report(struct _run *r, int sdir, const char *sname, const char *rel,
		    const struct stat *st, int64_t total, int64_t started, const char *cks,
		    const char *got)
{
	xfer_emit_file(r->ctx, rel, total, xfer_ns(&st->st_mtim), (int)(st->st_mode & 07777), started,
		       (int64_t)time(NULL), cks, got);
	_count_add(r, &r->verified);
	if (!r->null && !r->ctx->keep && strcmp(r->ctx->action, "archive") == 0 &&
	    unlinkat(sdir, sname, 0) < 0)
		xfer_logf(r->ctx, LOG_LVL_WARN, "request %lld: keep=no: cannot remove source '%s': %s",
			  (long long)r->ctx->request_id, rel, strerror(errno));
}

/*
 * One regular file: temporary file, data, metadata, fsync, rename, then
 * read back and compare; reported in one record once all of that holds. For
 * archive with keep=no the source goes only after this verification.
 */
static void _copy_file(struct _run *r, struct _tbuf *tb, int sdir, const char *sname, int ddir,
		       const char *name, const char *rel, const struct stat *st)
{
	char tmp[NAME_MAX + 1], cks[CKSUM_HEX_MAX], got[CKSUM_HEX_MAX];
	struct stat cur;
	int sfd, dfd = -1, e, big = !r->null && st->st_size >= XFER_BIG_MIN;
	int64_t total = 0, started = (int64_t)time(NULL);

	if (_resume_ok(r, ddir, name, rel, st))
		return;
	/* Small files are reported once, when verified; a big one shows while it runs. */
	if (big)
		xfer_emit(r->ctx, XR_ITEM_START, 0, st->st_size, xfer_ns(&st->st_mtim),
			  (int64_t)(st->st_mode & 07777), NULL, rel, "file");
	/* O_NONBLOCK: never hang on a FIFO swapped in; no effect on a regular file. */
	sfd = openat(sdir, sname, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (sfd < 0) {
		_fail_item(r, rel, errno, "cannot open source");
		return;
	}
	if (fstat(sfd, &cur) < 0 || !S_ISREG(cur.st_mode) || cur.st_ino != st->st_ino) {
		close(sfd);
		_fail_item(r, rel, EAGAIN, "source changed while walking");
		return;
	}
	if (!r->null) {
		if (xfer_tmpname(tmp, sizeof(tmp), name, r->ctx->request_id) < 0) {
			close(sfd);
			_fail_item(r, rel, ENAMETOOLONG, "name too long");
			return;
		}
		dfd = _create_tmp(ddir, tmp);
		if (dfd < 0) {
			e = errno;
			close(sfd);
			_fail_item(r, rel, e, "cannot create destination");
			return;
		}
	}
	if (big) {
		int vfd = openat(ddir, tmp, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC);

		if (vfd < 0) {
			e = errno;
		} else {
			/* A source about to be removed (keep=no) is always verified in full. */
			int sample = r->ctx->keep ? r->ctx->verify_sample : 0;

			e = xfer_big_copy(r->ctx, sfd, dfd, vfd, st->st_size, sample, &total, cks, got);
			close(vfd);
		}
	} else {
		e = _stream(r, tb, sfd, dfd, st->st_size, 0, &total, cks);
		posix_fadvise(sfd, 0, 0, POSIX_FADV_DONTNEED);
	}
	if (!e && total != st->st_size)
		e = EAGAIN;	/* the source changed size while it was copied */
	if (!e && dfd >= 0) {
		struct timespec ts[2] = { cur.st_atim, cur.st_mtim };

		if (fchmod(dfd, cur.st_mode & 07777) < 0 || futimens(dfd, ts) < 0)
			e = errno;
		_copy_xattrs(sfd, dfd, r->ctx->xattr_ns);
		if (!e && fsync(dfd) < 0)
			e = errno;
	}
	close(sfd);
	if (dfd >= 0 && close(dfd) < 0 && !e)
		e = errno;
	if (!e && dfd >= 0 && renameat(ddir, tmp, ddir, name) < 0)
		e = errno;
	if (e) {
		if (!r->null)
			unlinkat(ddir, tmp, 0);
		if (e != EINTR)
			_fail_item(r, rel, e, e == EAGAIN ? "source changed during copy" : "copy failed");
		return;
	}
	if (r->null)
		snprintf(got, sizeof(got), "%s", cks);
	else if (!big && (e = _verify_file(r, tb, ddir, name, total, got)) != 0) {
		if (e != EINTR)
			_fail_item(r, rel, e, "cannot verify");
		return;
	}
	if (strcmp(got, cks) != 0) {
		_fail_item(r, rel, EIO, "checksum mismatch after copy of");
		return;
	}
	_report(r, sdir, sname, rel, st, total, started, cks, got);
}

/* ---- SyncMode=batch: small files made durable by one syncfs() per batch ---- */

/* Stage 1, on a thread: data and metadata into the temporary file, no fsync yet. */
static void _batch_copy(struct _run *r, struct _tbuf *tb, struct _pend *p)
{
	struct stat cur;
	int sfd, dfd, e;

	p->state = 0;
	p->started = (int64_t)time(NULL);
	if (_resume_ok(r, p->ddir, p->name, p->rel, &p->st))
		return;
	sfd = openat(p->sdir, p->name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (sfd < 0) {
		_fail_item(r, p->rel, errno, "cannot open source");
		return;
	}
	if (fstat(sfd, &cur) < 0 || !S_ISREG(cur.st_mode) || cur.st_ino != p->st.st_ino) {
		close(sfd);
		_fail_item(r, p->rel, EAGAIN, "source changed while walking");
		return;
	}
	if (xfer_tmpname(p->tmp, sizeof(p->tmp), p->name, r->ctx->request_id) < 0) {
		close(sfd);
		_fail_item(r, p->rel, ENAMETOOLONG, "name too long");
		return;
	}
	dfd = _create_tmp(p->ddir, p->tmp);
	if (dfd < 0) {
		e = errno;
		close(sfd);
		_fail_item(r, p->rel, e, "cannot create destination");
		return;
	}
	e = _stream(r, tb, sfd, dfd, p->st.st_size, 0, &p->total, p->cks);
	posix_fadvise(sfd, 0, 0, POSIX_FADV_DONTNEED);
	if (!e && p->total != p->st.st_size)
		e = EAGAIN;
	if (!e) {
		struct timespec ts[2] = { cur.st_atim, cur.st_mtim };

		if (fchmod(dfd, cur.st_mode & 07777) < 0 || futimens(dfd, ts) < 0)
			e = errno;
		_copy_xattrs(sfd, dfd, r->ctx->xattr_ns);
	}
	close(sfd);
	if (close(dfd) < 0 && !e)
		e = errno;
	if (e) {
		unlinkat(p->ddir, p->tmp, 0);
		if (e != EINTR)
			_fail_item(r, p->rel, e, e == EAGAIN ? "source changed during copy" : "copy failed");
		return;
	}
	p->state = 1;
}

/* Stage 3, on a thread: the file is durable and in place; read it back and report. */
static void _batch_verify(struct _run *r, struct _tbuf *tb, struct _pend *p)
{
	char got[CKSUM_HEX_MAX];
	int e = _verify_file(r, tb, p->ddir, p->name, p->total, got);

	if (e) {
		if (e != EINTR)
			_fail_item(r, p->rel, e, "cannot verify");
		return;
	}
	if (strcmp(got, p->cks) != 0) {
		_fail_item(r, p->rel, EIO, "checksum mismatch after copy of");
		return;
	}
	_report(r, p->sdir, p->name, p->rel, &p->st, p->total, p->started, p->cks, got);
}

/* ---- the copy threads ---- */

static void *_thread(void *arg)
{
	struct _run *r = arg;
	struct _tbuf tb = { NULL, TBUF };

	if (posix_memalign((void **)&tb.p, 4096, TBUF) != 0)
		tb.p = NULL;
	for (;;) {
		struct _task *t;

		pthread_mutex_lock(&r->pmu);
		while (!r->head && !r->quit)
			pthread_cond_wait(&r->cv_work, &r->pmu);
		t = r->head;
		if (t) {
			r->head = t->next;
			if (!r->head)
				r->tail = NULL;
		}
		pthread_mutex_unlock(&r->pmu);
		if (!t)
			break;
		if (!tb.p)
			_fail_item(r, t->pend ? t->pend->rel : t->rel, ENOMEM, "out of memory copying");
		else if (t->kind == T_BATCH_COPY)
			_batch_copy(r, &tb, t->pend);
		else if (t->kind == T_BATCH_VERIFY)
			_batch_verify(r, &tb, t->pend);
		else
			_copy_file(r, &tb, t->sdir, t->name, t->ddir, t->name, t->rel, &t->st);
		free(t->name);
		free(t->rel);
		free(t);
		pthread_mutex_lock(&r->pmu);
		r->pending--;
		pthread_cond_broadcast(&r->cv_done);
		pthread_mutex_unlock(&r->pmu);
	}
	free(tb.p);
	return NULL;
}

static void _pool_start(struct _run *r)
{
	pthread_mutex_init(&r->pmu, NULL);
	pthread_cond_init(&r->cv_work, NULL);
	pthread_cond_init(&r->cv_done, NULL);
	for (r->nth = 0; r->nth < THREADS; r->nth++)
		if (pthread_create(&r->th[r->nth], NULL, _thread, r) != 0)
			break;
}

/* Wait until every file handed out is finished. */
static void _pool_drain(struct _run *r)
{
	if (!r->nth)
		return;
	pthread_mutex_lock(&r->pmu);
	while (r->pending > 0)
		pthread_cond_wait(&r->cv_done, &r->pmu);
	pthread_mutex_unlock(&r->pmu);
}

static void _pool_stop(struct _run *r)
{
	if (!r->nth)
		return;
	_pool_drain(r);
	pthread_mutex_lock(&r->pmu);
	r->quit = 1;
	pthread_cond_broadcast(&r->cv_work);
	pthread_mutex_unlock(&r->pmu);
	for (int i = 0; i < r->nth; i++)
		pthread_join(r->th[i], NULL);
	r->nth = 0;
}

static void _enqueue(struct _run *r, struct _task *t);

/* Copy a file on a thread (inline when there are none, or for a big file). */
static void _submit(struct _run *r, int sdir, int ddir, const char *name, const char *rel,
		    const struct stat *st)
{
	struct _task *t = NULL;

	if (!r->nth || (!r->null && st->st_size >= XFER_BIG_MIN) ||
	    !(t = calloc(1, sizeof(*t))) || !(t->name = strdup(name)) || !(t->rel = strdup(rel))) {
		if (r->nth && t) {
			free(t->name);
			free(t);
		}
		_copy_file(r, &r->tb0, sdir, name, ddir, name, rel, st);
		return;
	}
	t->sdir = sdir;
	t->ddir = ddir;
	t->st = *st;
	_enqueue(r, t);
}

/* Add a small file to the directory's batch and start its copy on a thread. */
static void _batch_add(struct _run *r, struct _batch *b, int sdir, int ddir, const char *name,
		       const char *rel, const struct stat *st)
{
	struct _pend *p;
	struct _task *t;

	if (!b->p) {
		b->p = calloc(BATCH_N, sizeof(*b->p));
		b->cap = b->p ? BATCH_N : 0;
		b->ddir = ddir;
	}
	if (!b->p || !(t = calloc(1, sizeof(*t)))) {
		_submit(r, sdir, ddir, name, rel, st);	/* out of memory: the plain path */
		return;
	}
	p = &b->p[b->n];
	memset(p, 0, sizeof(*p));
	p->sdir = sdir;
	p->ddir = ddir;
	p->st = *st;
	if (!(p->name = strdup(name)) || !(p->rel = strdup(rel))) {
		free(p->name);
		free(t);
		_submit(r, sdir, ddir, name, rel, st);
		return;
	}
	b->n++;
	b->bytes += st->st_size;
	t->kind = T_BATCH_COPY;
	t->pend = p;
	_enqueue(r, t);
}

/*
 * Stage 2, on the walker: every copy of the batch finished; one syncfs()
 * makes their data and metadata durable, then they are renamed into place,
 * the directory is fsynced (the names are durable), and only then read back
 * and reported (stage 3).
 */
static void _batch_flush(struct _run *r, struct _batch *b)
{
	size_t copied = 0, renamed = 0;
	int e = 0;

	/* This batch's copies and the previous batch's verifications are finished. */
	_pool_drain(r);
	_batch_free(b->old, b->nold);
	b->old = NULL;
	b->nold = 0;
	if (!b->p)
		return;
	for (size_t i = 0; i < b->n; i++)
		copied += b->p[i].state == 1;
	if (copied && _stopped(r))
		e = EINTR;
	else if (copied && syncfs(b->ddir) < 0)
		e = errno;
	for (size_t i = 0; i < b->n; i++) {
		struct _pend *p = &b->p[i];

		if (p->state != 1)
			continue;
		if (!e && renameat(p->ddir, p->tmp, p->ddir, p->name) == 0) {
			p->state = 2;
			renamed++;
			continue;
		}
		unlinkat(p->ddir, p->tmp, 0);
		p->state = 0;
		if (e != EINTR)
			_fail_item(r, p->rel, e ? e : errno, e ? "cannot make durable" :
				   "cannot rename into place");
	}
	if (renamed && fsync(b->ddir) < 0) {
		e = errno;
		for (size_t i = 0; i < b->n; i++)
			if (b->p[i].state == 2) {
				b->p[i].state = 0;
				_fail_item(r, b->p[i].rel, e, "cannot make the directory durable for");
			}
		renamed = 0;
	}
	for (size_t i = 0; renamed && i < b->n; i++) {
		struct _task *t;

		if (b->p[i].state != 2)
			continue;
		if (!(t = calloc(1, sizeof(*t)))) {
			_batch_verify(r, &r->tb0, &b->p[i]);
			continue;
		}
		t->kind = T_BATCH_VERIFY;
		t->pend = &b->p[i];
		_enqueue(r, t);
	}
	/* Verified while the threads already copy the next batch; freed at the next flush. */
	b->old = b->p;
	b->nold = b->n;
	b->p = NULL;
	b->n = 0;
	b->bytes = 0;
}

static void _enqueue(struct _run *r, struct _task *t)
{
	pthread_mutex_lock(&r->pmu);
	while (r->pending >= QMAX)
		pthread_cond_wait(&r->cv_done, &r->pmu);
	if (r->tail)
		r->tail->next = t;
	else
		r->head = t;
	r->tail = t;
	r->pending++;
	pthread_cond_signal(&r->cv_work);
	pthread_mutex_unlock(&r->pmu);
}

static void _copy_symlink(struct _run *r, int sdir, int ddir, const char *name, const char *rel,
			  const struct stat *st)
{
	char target[PATH_MAX], tmp[NAME_MAX + 1];
	ssize_t n;

	xfer_emit(r->ctx, XR_ITEM_START, 0, st->st_size, xfer_ns(&st->st_mtim), 0, NULL, rel, "symlink");
	n = readlinkat(sdir, name, target, sizeof(target) - 1);
	if (n < 0) {
		_fail_item(r, rel, errno, "cannot read symlink");
		return;
	}
	target[n] = '\0';
	if (r->null) {
		_verified_link(r, ddir, name, rel, target);
		return;
	}
	if (xfer_tmpname(tmp, sizeof(tmp), name, r->ctx->request_id) < 0) {
		_fail_item(r, rel, ENAMETOOLONG, "name too long");
		return;
	}
	unlinkat(ddir, tmp, 0);
	if (symlinkat(target, ddir, tmp) < 0) {
		_fail_item(r, rel, errno, "cannot create symlink");
		return;
	}
	{
		struct timespec ts[2] = { st->st_atim, st->st_mtim };

		utimensat(ddir, tmp, ts, AT_SYMLINK_NOFOLLOW);
	}
	if (renameat(ddir, tmp, ddir, name) < 0) {
		int e = errno;

		unlinkat(ddir, tmp, 0);
		_fail_item(r, rel, e, "cannot rename symlink into place");
		return;
	}
	_verified_link(r, ddir, name, rel, target);
}

/* Make or open destination directory name in ddir; never through a symlink. */
static int _dest_dir(int ddir, const char *name, int null)
{
	int fd;

	if (null)
		return dup(ddir);
	if (mkdirat(ddir, name, 0700) < 0 && errno != EEXIST)
		return -1;
	fd = openat(ddir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ELOOP)
		errno = ELOOP;	/* a symlink where a directory belongs: refused */
	return fd;
}

static void _copy_tree(struct _run *r, int sdir, int ddir, const char *prefix, int depth)
{
	struct _batch b = { NULL, 0, 0, ddir, 0, NULL, 0 };
	DIR *d;
	struct dirent *de;
	int fd = dup(sdir);

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		_fail_item(r, *prefix ? prefix : ".", errno, "cannot read directory");
		return;
	}
	rewinddir(d);	/* the dup shares its offset with sdir */
	while ((de = readdir(d)) && !_stopped(r)) {
		char rel[XFER_PATH_MAX];
		struct stat st;

		if (b.n == BATCH_N || b.bytes >= BATCH_BYTES)
			_batch_flush(r, &b);
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (xfer_join(rel, sizeof(rel), prefix, de->d_name) < 0) {
			_fail_item(r, de->d_name, ENAMETOOLONG, "path too long under");
			continue;
		}
		if (fstatat(sdir, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			_fail_item(r, rel, errno, "cannot stat");
			continue;
		}
		if (S_ISREG(st.st_mode) && r->ctx->sync_batch && !r->null && r->nth &&
		    st.st_size <= BATCH_FILE_MAX) {
			_batch_add(r, &b, sdir, ddir, de->d_name, rel, &st);
		} else if (S_ISREG(st.st_mode)) {
			_submit(r, sdir, ddir, de->d_name, rel, &st);
		} else if (S_ISLNK(st.st_mode)) {
			_copy_symlink(r, sdir, ddir, de->d_name, rel, &st);
		} else if (S_ISDIR(st.st_mode) && xfer_excluded(r->ctx, rel)) {
			/* An exempt= directory inside the tree: neither copied nor, with
			   keep=no, removed. */
			xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, rel, XFER_EXCLUDE_REASON);
		} else if (S_ISDIR(st.st_mode)) {
			int s2, d2;

			if (depth >= MAX_DEPTH) {
				_fail_item(r, rel, ELOOP, "tree deeper than 256 levels at");
				continue;
			}
			s2 = openat(sdir, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (s2 < 0) {
				_fail_item(r, rel, errno, "cannot open source directory");
				continue;
			}
			d2 = _dest_dir(ddir, de->d_name, r->null);
			if (d2 < 0) {
				_fail_item(r, rel, errno, "cannot create destination directory");
				close(s2);
				continue;
			}
			_copy_tree(r, s2, d2, rel, depth + 1);
			if (!r->null) {
				struct timespec ts[2] = { st.st_atim, st.st_mtim };

				_copy_xattrs(s2, d2, r->ctx->xattr_ns);
				fchmod(d2, st.st_mode & 07777);
				fsync(d2);
				futimens(d2, ts);
			}
			close(s2);
			close(d2);
		} else {
			const char *kind = S_ISFIFO(st.st_mode) ? "FIFO" : S_ISSOCK(st.st_mode) ?
					   "socket" : "device";
			char msg[256];

			snprintf(msg, sizeof(msg), "%s skipped: only regular files, directories and "
				 "symlinks are copied", kind);
			xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, rel, msg);
		}
	}
	/* The directory's files are in place before it is synced and timestamped. */
	_batch_flush(r, &b);
	_pool_drain(r);
	_batch_free(b.old, b.nold);
	closedir(d);
}

static int _finish(struct _run *r, int result, const char *msg)
{
	xfer_emit(r->ctx, XR_RESULT, result, 0, 0, 0, NULL, NULL, msg);
	_pool_stop(r);
	free(r->tb0.p);
	pthread_mutex_destroy(&r->mu);
	return result;
}

static int _run_common(struct xfer_ctx *ctx, int null)
{
	struct _run r = { .ctx = ctx, .null = null };
	char msg[XFER_TEXT_MAX], base[NAME_MAX + 1];
	struct stat st;
	int sroot, droot = -1, sparent = -1;
	const char *leaf = NULL;

	pthread_mutex_init(&r.mu, NULL);
	r.tb0.p = malloc(CHUNK);
	r.tb0.len = CHUNK;
	if (!r.tb0.p)
		return _finish(&r, XFER_RETRYABLE, "out of memory");
	/* The request's own paths are resolved normally, with the owner's identity. */
	sroot = xfer_open_source(ctx, O_RDONLY | O_NOCTTY | O_NONBLOCK, msg, sizeof(msg));
	if (sroot >= 0 && fstat(sroot, &st) < 0) {
		snprintf(msg, sizeof(msg), "cannot stat source %s: %s", ctx->source, strerror(errno));
		close(sroot);
		sroot = -1;
	}
	if (sroot < 0)
		return _finish(&r, errno == ENOMEM || errno == EIO ? XFER_RETRYABLE : XFER_FINAL, msg);
	if (strcmp(ctx->action, "label") == 0) {
		const char *pol = ctx->label_policy ? ctx->label_policy : "archive";

		xfer_label_all(ctx, sroot, pol, NULL);
		close(sroot);
		snprintf(msg, sizeof(msg), "labelled %s", pol);
		return _finish(&r, XFER_OK, msg);
	}
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
		close(sroot);
		snprintf(msg, sizeof(msg), "source %s is neither a file nor a directory", ctx->source);
		return _finish(&r, XFER_FINAL, msg);
	}
	fcntl(sroot, F_SETFL, fcntl(sroot, F_GETFL) & ~O_NONBLOCK);
	if (S_ISDIR(st.st_mode)) {
		xfer_count_tree(ctx, sroot, "", 0, MAX_DEPTH, 0, &r.files, &r.bytes, &r.skipped);
		xfer_emit(ctx, XR_TOTALS, 0, r.files, r.bytes, r.skipped, NULL, NULL, NULL);
		msg[0] = '\0';
		if (!null) {
			/* The first failing step is the one reported (not a later ENOENT). */
			if (xfer_mkparents(ctx->dest, msg, sizeof(msg)) < 0)
				errno = EACCES;
			else if ((droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 &&
				 errno == ENOENT) {
				if (mkdir(ctx->dest, 0700) == 0)
					droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
				else
					xfer_mkdir_why(ctx->dest, errno, msg, sizeof(msg));
			}
		} else {
			droot = dup(sroot);
		}
		if (droot < 0) {
			int e = errno;

			if (!msg[0])
				snprintf(msg, sizeof(msg), "cannot open destination directory %s: %s",
					 ctx->dest, strerror(e));
			close(sroot);
			return _finish(&r, e == ENOSPC || e == EIO ? XFER_RETRYABLE : XFER_FINAL, msg);
		}
		_pool_start(&r);
		_copy_tree(&r, sroot, droot, "", 0);
		if (!null) {
			struct timespec ts[2] = { st.st_atim, st.st_mtim };

			fchmod(droot, st.st_mode & 07777);
			fsync(droot);
			futimens(droot, ts);
		}
	} else {
		/* A single file: dest names the copy, or an existing directory to put it in. */
		const char *sb = strrchr(ctx->source, '/');
		struct stat dst;

		xfer_emit(ctx, XR_TOTALS, 0, 1, st.st_size, 0, NULL, NULL, NULL);
		snprintf(base, sizeof(base), "%s", sb ? sb + 1 : ctx->source);
		if (null) {
			droot = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			leaf = base;
		} else if (stat(ctx->dest, &dst) == 0 && S_ISDIR(dst.st_mode)) {
			droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			leaf = base;
		} else {
			char dir[XFER_PATH_MAX];
			const char *db = strrchr(ctx->dest, '/');

			msg[0] = '\0';
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
			close(sroot);
			return _finish(&r, XFER_FINAL, msg);
		}
		/* The file is opened again by name relative to its parent: keep that fd. */
		{
			char sdir[XFER_PATH_MAX];

			snprintf(sdir, sizeof(sdir), "%.*s", sb == ctx->source ? 1 :
				 (int)(sb - ctx->source), ctx->source);
			sparent = open(sdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		}
		if (sparent < 0) {
			snprintf(msg, sizeof(msg), "cannot open source directory of %s: %s",
				 ctx->source, strerror(errno));
			close(sroot);
			close(droot);
			return _finish(&r, XFER_FINAL, msg);
		}
		/* relpath of a single file is the destination's name. */
		{
			struct stat st2;

			if (fstatat(sparent, base, &st2, AT_SYMLINK_NOFOLLOW) < 0 ||
			    st2.st_ino != st.st_ino)
				_fail_item(&r, base, EAGAIN, "source changed while walking");
			else
				_copy_file(&r, &r.tb0, sparent, base, droot, leaf, leaf, &st2);
		}
	}
	if (_stopped(&r)) {
		close(sroot);
		close(droot);
		if (sparent >= 0)
			close(sparent);
		return _finish(&r, XFER_INTERRUPTED, "interrupted; will be redone");
	}
	/* Every file was verified as it was copied; the final check is the count. */
	xfer_emit(ctx, XR_PHASE, QS_VERIFYING, 0, 0, 0, NULL, NULL, NULL);
	if (!r.failures && !null && strcmp(ctx->action, "archive") == 0)
		xfer_label_all(ctx, sroot, "archived", ctx->dest);
	close(sroot);
	close(droot);
	if (sparent >= 0)
		close(sparent);
	if (!r.failures && S_ISDIR(st.st_mode) && r.verified + r.kept != r.files) {
		/* Never report done unless every file counted was verified. */
		snprintf(msg, sizeof(msg), "the source tree changed during the transfer (%lld files "
			 "counted, %lld verified): will be redone", (long long)r.files,
			 (long long)(r.verified + r.kept));
		return _finish(&r, XFER_RETRYABLE, msg);
	}
	if (r.failures)
		return _finish(&r, xfer_failed_result(r.failures, r.final_failures, r.first_error,
						      msg, sizeof(msg)), msg);
	return _finish(&r, XFER_OK, NULL);
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
