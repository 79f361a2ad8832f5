/*
 * test_engine.c - the transfer engine's shared pieces: the durable write,
 * the tree walk and its depth limit, the resume decision, failure
 * accounting and the verdict, opening directories below a root.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "durable.h"
#include "tests/tap.h"
#include "xfer_big.h"
#include "xfer_engine.h"

static char _dir[] = "/tmp/test_engine_XXXXXX";

static void _durable(int dfd)
{
	char tmp[NAME_MAX + 1], big[NAME_MAX + 40];
	struct stat st;
	int fd;

	ok(durable_tmpname(tmp, sizeof(tmp), "f", 7) == 0 && strcmp(tmp, ".f.stagehand-7") == 0,
	   "temporary name: %s", tmp);
	memset(big, 'x', NAME_MAX);
	big[NAME_MAX] = '\0';
	ok(durable_tmpname(tmp, sizeof(tmp), big, 7) == 0 && strlen(tmp) <= NAME_MAX &&
	   strncmp(tmp, ".stagehand-7-", 13) == 0, "a long name gets a hashed temporary name");
	/* A stale temporary file of an interrupted attempt is replaced. */
	fd = openat(dfd, ".f.stagehand-7", O_WRONLY | O_CREAT, 0644);
	ok(fd >= 0 && write(fd, "old", 3) == 3, "stale temporary file made");
	close(fd);
	fd = durable_create(dfd, ".f.stagehand-7", O_RDWR);
	ok(fd >= 0 && fstat(fd, &st) == 0 && st.st_size == 0 && (st.st_mode & 0777) == 0600,
	   "durable_create replaces a stale file, mode 0600");
	ok(write(fd, "new", 3) == 3, "written");
	ok(durable_commit(dfd, ".f.stagehand-7", "f", fd, DURABLE_FSYNC | DURABLE_DIRSYNC) == 0,
	   "committed");
	ok(fstatat(dfd, "f", &st, 0) == 0 && st.st_size == 3 &&
	   fstatat(dfd, ".f.stagehand-7", &st, 0) < 0, "renamed into place, no temporary left");
	/* A symlink planted at the temporary name is never written through. */
	ok(symlinkat("/etc/passwd", dfd, ".l.stagehand-7") == 0, "symlink planted");
	ok(openat(dfd, ".l.stagehand-7", O_RDONLY | O_NOFOLLOW) < 0, "(it is a symlink)");
	fd = durable_create(dfd, ".l.stagehand-7", O_WRONLY);
	ok(fd >= 0 && fstatat(dfd, ".l.stagehand-7", &st, AT_SYMLINK_NOFOLLOW) == 0 &&
	   S_ISREG(st.st_mode), "the planted symlink is replaced by a plain file");
	/* A failed rename removes the temporary file and says why. */
	ok(durable_commit(dfd, ".l.stagehand-7", "missing/x", fd, 0) == ENOENT &&
	   fstatat(dfd, ".l.stagehand-7", &st, AT_SYMLINK_NOFOLLOW) < 0,
	   "a failed commit returns its errno and leaves no temporary file");
}

struct _walkseen {
	int files, dirs, deepest, eloop;
	char eloop_rel[XFER_PATH_MAX];
};

static int _visit(struct xfer_walk *w, struct xfer_walk_dir *dir, const char *name,
		  const char *rel, const struct stat *st)
{
	struct _walkseen *s = w->arg;

	(void)name;
	(void)rel;
	if (dir->depth > s->deepest)
		s->deepest = dir->depth;
	if (S_ISDIR(st->st_mode)) {
		s->dirs++;
		return 1;
	}
	s->files += S_ISREG(st->st_mode);
	return 0;
}

static void _fail(struct xfer_walk *w, const char *rel, int err, const char *what)
{
	struct _walkseen *s = w->arg;

	(void)what;
	if (err == ELOOP) {
		s->eloop++;
		snprintf(s->eloop_rel, sizeof(s->eloop_rel), "%s", rel);
	}
}

static void _walk(int dfd)
{
	struct xfer_ctx ctx = { 0 };
	struct _walkseen s = { 0 };
	struct xfer_walk w = { .ctx = &ctx, .arg = &s, .visit = _visit, .fail = _fail };
	struct xfer_walk_dir root = { -1, "", 0, NULL, NULL };
	int cur = -1, n = 0;

	ok(mkdirat(dfd, "tree", 0700) == 0, "tree made");
	cur = openat(dfd, "tree", O_RDONLY | O_DIRECTORY);
	root.fd = cur;
	/* XFER_WALK_DEPTH + 2 levels of "d", a file at every level. */
	for (int i = 0, fd = dup(cur); i < XFER_WALK_DEPTH + 2; i++) {
		int f = openat(fd, "f", O_WRONLY | O_CREAT, 0600), sub;

		close(f);
		mkdirat(fd, "d", 0700);
		sub = openat(fd, "d", O_RDONLY | O_DIRECTORY);
		close(fd);
		fd = sub;
		n++;
	}
	ok(symlinkat("..", cur, "up") == 0, "a symlink to the parent planted");
	xfer_walk_tree(&w, &root);
	ok(s.eloop == 1 && s.deepest == XFER_WALK_DEPTH, "the walk stops at depth %d (deepest "
	   "visited %d, %d refusals)", XFER_WALK_DEPTH, s.deepest, s.eloop);
	ok(strlen(s.eloop_rel) == (size_t)(XFER_WALK_DEPTH + 1) * 2 - 1,
	   "the refused directory is named by its relpath (%zu bytes)", strlen(s.eloop_rel));
	ok(s.files == XFER_WALK_DEPTH + 1, "every file above the limit seen once (%d); the "
	   "symlink is not followed", s.files);
	close(cur);
	(void)n;
}

static void _want(void)
{
	struct xfer_done_ent done[] = { { "a", 10, 100, NULL }, { "b/c", 5, 200, NULL } };
	struct xfer_ctx ctx = { 0 };

	ctx.done = done;
	ctx.ndone = 2;
	ok(xfer_engine_want(&ctx, "b/c", 5, 200) == XFER_WANT_KEPT, "verified and unchanged: kept");
	ok(xfer_engine_want(&ctx, "b/c", 6, 200) == XFER_WANT_COPY, "other size: copied");
	ok(xfer_engine_want(&ctx, "a", 10, 101) == XFER_WANT_COPY, "other mtime: copied");
	ok(xfer_engine_want(&ctx, "a", 10, -1) == XFER_WANT_COPY, "unknown mtime: copied");
	ok(xfer_engine_want(&ctx, "z", 10, 100) == XFER_WANT_COPY, "not in the set: copied");
}

static void _tally(void)
{
	struct xfer_ctx ctx = { 0 };
	struct xfer_tally t;
	char msg[XFER_TEXT_MAX], buf[4096], path[XFER_PATH_MAX + 1], text[XFER_TEXT_MAX + 1];
	struct xfer_rec rec;
	int sv[2];
	ssize_t n;

	ok(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
	ctx.chan = sv[1];
	xfer_tally_init(&t, &ctx);
	t.files = 3;
	t.verified = 2;
	ok(xfer_tally_verdict(&t, 1, "the source tree", msg, sizeof(msg)) == XFER_RETRYABLE &&
	   strstr(msg, "3 files counted, 2 verified"), "fewer verified than counted: retried (%s)",
	   msg);
	ok(xfer_tally_verdict(&t, 0, "the source tree", msg, sizeof(msg)) == XFER_OK && !msg[0],
	   "without the count check: done");
	xfer_fail(&t, "x/y", EACCES, "cannot open source");
	n = read(sv[0], buf, sizeof(buf));
	ok(n > 0 && xfer_parse(buf, (size_t)n, &rec, path, text) > 0 &&
	   rec.type == XR_ITEM_FAILED && rec.code == EACCES && strcmp(path, "x/y") == 0 &&
	   strcmp(text, "cannot open source 'x/y': Permission denied") == 0,
	   "one record: what, the relpath, the errno's text (%s)", text);
	xfer_failf(&t, "z", 0, "download of '%s' failed: %s", "z", "HTTP 500");
	ok(xfer_tally_verdict(&t, 1, "the tree", msg, sizeof(msg)) == XFER_RETRYABLE &&
	   strcmp(msg, "2 of the entries failed; first: cannot open source 'x/y': Permission "
		  "denied") == 0, "one retryable failure: retried, the first named (%s)", msg);
	t.failures = t.final_failures = 1;
	ok(xfer_tally_verdict(&t, 1, "the tree", msg, sizeof(msg)) == XFER_FINAL,
	   "only final failures: final");
	xfer_tally_destroy(&t);
	close(sv[0]);
	close(sv[1]);
}

static void _open_dir(int dfd)
{
	struct stat st;
	int fd;

	fd = xfer_open_dir(dfd, "m/n/o/leaf", 3, 0750);
	ok(fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) &&
	   fstatat(dfd, "m/n", &st, 0) == 0 && (st.st_mode & 0777) == 0750 &&
	   fstatat(dfd, "m/n/o", &st, 0) < 0, "only the first len bytes are made and opened");
	close(fd);
	ok(symlinkat("/tmp", dfd, "m/s") == 0, "symlink planted in the path");
	errno = 0;
	ok(xfer_open_dir(dfd, "m/s/x", 3, 0700) < 0 && (errno == ELOOP || errno == ENOTDIR),
	   "a symlink component is refused (errno %d)", errno);
	fd = xfer_open_dir(dfd, "", 0, 0);
	ok(fd >= 0, "len 0: the root itself");
	close(fd);
}

/* The one write: paced (YieldMode=adaptive), it moves XFER_PACE_CHUNK at a time. */
static void _paced_write(int dfd)
{
	struct xfer_ctx ctx;
	struct xfer_bucket_io io;
	size_t n = 3 * XFER_PACE_CHUNK + XFER_PACE_CHUNK / 2;
	char *buf = calloc(1, n);
	struct stat st;
	int fd = openat(dfd, "paced", O_RDWR | O_CREAT | O_TRUNC, 0600);

	memset(&ctx, 0, sizeof(ctx));
	ctx.bucket = xfer_bucket_create(0);
	ok(buf && fd >= 0 && ctx.bucket, "bucket and file");
	xfer_bucket_set_flush(ctx.bucket, XFER_FLUSH_RANGES);
	ok(!xfer_bucket_paced_io(ctx.bucket) && xfer_engine_write(&ctx, fd, buf, n, 0) == 0,
	   "yielding, not paced: one write");
	xfer_bucket_drain_io(ctx.bucket, &io);
	ok(io.wbytes == n && io.wmax == n && io.rmax == n, "one piece of %zu bytes (largest %llu)",
	   n, (unsigned long long)io.wmax);
	xfer_bucket_reset_io(ctx.bucket);
	xfer_bucket_set_flush(ctx.bucket, XFER_FLUSH_PACED);
	ok(xfer_bucket_paced_io(ctx.bucket) && xfer_engine_write(&ctx, fd, buf, n, (int64_t)n) == 0,
	   "paced: written");
	xfer_bucket_drain_io(ctx.bucket, &io);
	ok(io.wbytes == n && io.wmax == XFER_PACE_CHUNK && io.rmax == XFER_PACE_CHUNK,
	   "paced: in pieces of at most XFER_PACE_CHUNK (largest %llu of %llu)",
	   (unsigned long long)io.wmax, (unsigned long long)io.wbytes);
	ok(fstat(fd, &st) == 0 && st.st_size == (off_t)(2 * n), "every byte landed at its offset");
	close(fd);
	xfer_bucket_destroy(ctx.bucket);
	free(buf);
}

/*
 * A big file's chunk: 32 MiB when nothing can hold or slow the transfer,
 * 8 MiB when YieldMode=pause can (a job's start waits for our in-flight
 * I/O, 0.3 s at most) or a cap slows it (its bursts), 1 MiB paced. The
 * largest write the bucket saw is the chunk.
 */
static void _big_chunks(int dfd)
{
	static const struct { int flush; uint64_t cap; uint64_t chunk; const char *what; } c[] = {
		{ XFER_FLUSH_OFF, 0, 32u << 20, "never held or slowed: 32 MiB" },
		{ XFER_FLUSH_RANGES, 0, 8u << 20, "pause mode can hold it: 8 MiB" },
		{ XFER_FLUSH_OFF, 1u << 30, 8u << 20, "under a cap (the parent's): 8 MiB" },
		{ XFER_FLUSH_PACED, 0, XFER_PACE_CHUNK, "paced: XFER_PACE_CHUNK" },
	};
	struct xfer_bucket *cap = xfer_bucket_create(0);
	size_t n = 72u << 20;
	char *buf = malloc(n), cs[CKSUM_HEX_MAX], cd[CKSUM_HEX_MAX];
	int sfd = openat(dfd, "bigsrc", O_RDWR | O_CREAT | O_TRUNC, 0600);
	struct xfer_ctx ctx;
	struct xfer_bucket_io io;

	ok(buf && sfd >= 0, "a 72 MiB source");
	if (!buf || sfd < 0)
		return;
	for (size_t i = 0; i < n; i++)
		buf[i] = (char)(i * 2654435761u >> 13);
	ok(write(sfd, buf, n) == (ssize_t)n, "source written");
	memset(&ctx, 0, sizeof(ctx));
	ctx.algo = CKSUM_XXH128;
	ctx.bucket = xfer_bucket_create(0);
	for (size_t k = 0; k < sizeof(c) / sizeof(c[0]); k++) {
		int dfd2 = openat(dfd, "bigdst", O_RDWR | O_CREAT | O_TRUNC, 0600);
		int vfd = openat(dfd, "bigdst", O_RDONLY);
		int64_t total = 0;

		xfer_bucket_reset_io(ctx.bucket);
		xfer_bucket_set_flush(ctx.bucket, c[k].flush);
		xfer_bucket_set_rate(cap, c[k].cap);
		xfer_bucket_set_parent(ctx.bucket, cap);
		ok(xfer_big_copy(&ctx, &(struct xfer_big_job){ sfd, dfd2, vfd, (int64_t)n, 0 }, &total,
				 cs, cd) == 0 &&
		   total == (int64_t)n && strcmp(cs, cd) == 0, "%s: copied and read back equal",
		   c[k].what);
		xfer_bucket_drain_io(ctx.bucket, &io);
		ok(io.wbytes == n && io.wmax == c[k].chunk, "%s (largest write %llu)", c[k].what,
		   (unsigned long long)io.wmax);
		close(vfd);
		close(dfd2);
	}
	xfer_bucket_destroy(ctx.bucket);
	xfer_bucket_destroy(cap);
	close(sfd);
	unlinkat(dfd, "bigsrc", 0);
	unlinkat(dfd, "bigdst", 0);
	free(buf);
}

struct _taker {
	struct xfer_bucket *b;
	int started, done;
};

static void *_take8(void *arg)
{
	struct _taker *t = arg;

	__atomic_store_n(&t->started, 1, __ATOMIC_SEQ_CST);
	xfer_bucket_take(t->b, 8u << 20, NULL);
	__atomic_store_n(&t->done, 1, __ATOMIC_SEQ_CST);
	return NULL;
}

/*
 * A worker's bucket paused (a job started on its file system) while the
 * global cap, its parent, holds a take for its debt: when the debt is paid
 * the take must still wait for the resume. It used to return, and the chunk
 * was written after the job's first command.
 */
static void _pause_under_cap(void)
{
	struct xfer_bucket *cap = xfer_bucket_create(4u << 20), *b = xfer_bucket_create(0);
	struct _taker t = { b, 0, 0 };
	struct timespec ts = { 0, 300 * 1000000L };
	pthread_t th;

	xfer_bucket_set_parent(b, cap);
	xfer_bucket_take(b, 1u << 20, NULL);	/* the cap's credit spent */
	ok(pthread_create(&th, NULL, _take8, &t) == 0, "a take of 8 MiB under a 4 MiB/s cap");
	while (!__atomic_load_n(&t.started, __ATOMIC_SEQ_CST))
		nanosleep(&ts, NULL);
	nanosleep(&ts, NULL);	/* inside the cap's wait: about 2 s of debt */
	xfer_bucket_set_paused(b, 1);
	ts.tv_sec = 3;
	ts.tv_nsec = 0;
	nanosleep(&ts, NULL);	/* the debt is paid by now */
	ok(!__atomic_load_n(&t.done, __ATOMIC_SEQ_CST),
	   "paused during the cap's wait: the take is still held after the debt is paid");
	xfer_bucket_set_paused(b, 0);
	pthread_join(th, NULL);
	ok(t.done, "resumed: the take returns");
	xfer_bucket_destroy(b);
	xfer_bucket_destroy(cap);
}

int main(void)
{
	int dfd;

	if (!mkdtemp(_dir))
		return 1;
	dfd = open(_dir, O_RDONLY | O_DIRECTORY);
	_durable(dfd);
	_walk(dfd);
	_want();
	_tally();
	_open_dir(dfd);
	_paced_write(dfd);
	_big_chunks(dfd);
	_pause_under_cap();
	close(dfd);
	tap_rmtree(_dir);
	return tap_done();
}
