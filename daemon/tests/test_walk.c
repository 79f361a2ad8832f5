/*
 * test_walk.c - the local backend's tree walk: symlinks are recreated, never
 * followed; specials are skipped; a symlink planted in the destination is not
 * written through; copies are verified.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/tap.h"
#include "xfer.h"
#include "xfer_endpoint.h"

static char _dir[] = "/tmp/test_walk_XXXXXX";

struct _seen {
	int result;
	int skipped, failed, done, files_total, files_skipped;
	char skipped_path[XFER_PATH_MAX + 1], skipped_text[XFER_TEXT_MAX + 1];
	char failed_path[XFER_PATH_MAX + 1];
};

static volatile sig_atomic_t _stop;

static int _sync_batch, _verify_sample, _nokeep;
static const char *const *_exclude;

/* Run backend (by name) for source -> dest in a child; collect what it reports. */
static void _run(const char *backend, const char *action, const char *src,
		 const char *dst, struct _seen *s)
{
	int sv[2];
	pid_t pid;
	static char buf[1 << 20];
	size_t len = 0;
	ssize_t n;

	memset(s, 0, sizeof(*s));
	s->result = -1;
	socketpair(AF_UNIX, SOCK_STREAM, 0, sv);
	pid = fork();
	if (pid == 0) {
		struct xfer_ctx ctx = { 0 };

		close(sv[0]);
		ctx.request_id = 1;
		ctx.uid = getuid();
		ctx.action = action;
		ctx.source = src;
		ctx.dest = dst;
		ctx.keep = !_nokeep;
		ctx.exclude = _exclude;
		ctx.chan = sv[1];
		ctx.algo = CKSUM_XXH128;
		ctx.xattr_ns = "user.";
		ctx.stop = &_stop;
		ctx.sync_batch = _sync_batch;
		ctx.verify_sample = _verify_sample;
		ctx.backend = backend;
		xfer_run(&ctx);
		_exit(0);
	}
	close(sv[1]);
	while ((n = read(sv[0], buf + len, sizeof(buf) - len)) > 0)
		len += (size_t)n;
	close(sv[0]);
	waitpid(pid, NULL, 0);
	for (size_t off = 0; off < len;) {
		struct xfer_rec rec;
		static char path[XFER_PATH_MAX + 1], text[XFER_TEXT_MAX + 1];
		ssize_t used = xfer_parse(buf + off, len - off, &rec, path, text);

		if (used <= 0)
			break;
		off += (size_t)used;
		switch (rec.type) {
		case XR_RESULT: s->result = rec.code; break;
		case XR_ITEM_SKIPPED:
			s->skipped++;
			snprintf(s->skipped_path, sizeof(s->skipped_path), "%s", path);
			snprintf(s->skipped_text, sizeof(s->skipped_text), "%s", text);
			break;
		case XR_ITEM_DONE: s->done++; break;
		case XR_ITEM_FILE:
			/* A verified file: both checksums set and equal. */
			if (rec.cks[0] && strcmp(rec.cks, rec.cks2) == 0)
				s->done++;
			else
				s->failed++;
			break;
		case XR_TOTALS: s->files_total = (int)rec.a; s->files_skipped = (int)rec.c; break;
		case XR_ITEM_FAILED:
			s->failed++;
			snprintf(s->failed_path, sizeof(s->failed_path), "%s", path);
			break;
		default: break;
		}
	}
}

static void _write(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd >= 0) {
		if (write(fd, text, strlen(text)) < 0)
			perror(path);
		close(fd);
	}
}

static int _same(const char *a, const char *b)
{
	char x[4096], y[4096];
	int fa = open(a, O_RDONLY | O_NOFOLLOW), fb = open(b, O_RDONLY | O_NOFOLLOW);
	ssize_t na = fa >= 0 ? read(fa, x, sizeof(x)) : -1, nb = fb >= 0 ? read(fb, y, sizeof(y)) : -2;

	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	return na == nb && na >= 0 && memcmp(x, y, (size_t)na) == 0;
}

/* Whole-file comparison. */
static int _same_full(const char *a, const char *b)
{
	static char x[65536], y[65536];
	int fa = open(a, O_RDONLY | O_NOFOLLOW), fb = open(b, O_RDONLY | O_NOFOLLOW), same = 1;

	while (fa >= 0 && fb >= 0 && same) {
		ssize_t na = read(fa, x, sizeof(x)), nb = read(fb, y, sizeof(y));

		same = na == nb && na >= 0 && memcmp(x, y, (size_t)(na > 0 ? na : 0)) == 0;
		if (na <= 0)
			break;
	}
	same = same && fa >= 0 && fb >= 0;
	if (fa >= 0)
		close(fa);
	if (fb >= 0)
		close(fb);
	return same;
}

static int _is_link_to(const char *path, const char *target)
{
	char buf[4096];
	struct stat st;
	ssize_t n;

	if (lstat(path, &st) < 0 || !S_ISLNK(st.st_mode))
		return 0;
	n = readlink(path, buf, sizeof(buf) - 1);
	if (n < 0)
		return 0;
	buf[n] = '\0';
	return strcmp(buf, target) == 0;
}

static int _exists(const char *p)
{
	struct stat st;

	return lstat(p, &st) == 0;
}

/*
 * SyncMode=batch over more directories than the walker queues stages of
 * (PIPE_STAGES_QUEUED, 8), nested, and one directory whose batches fill
 * (1,300 files) with a subdirectory: every file copied, and each directory
 * ended (mode, times) only after its last file was put in place. Then the same tree archived
 * with keep=no: the sources go through the directories' own descriptors,
 * after the walk has closed its own.
 */
static void _deferred_dirs(void)
{
	char src[600], dst[600], path[700], dpath[700];
	struct timespec ts[2] = { { 0 } };
	struct stat a, b;
	struct _seen s;
	int bad = 0, times = 0, modes = 0, left = 0;

	snprintf(src, sizeof(src), "%s/deep", _dir);
	mkdir(src, 0755);
	for (int d = 0; d < 12; d++) {
		snprintf(path, sizeof(path), "%s/d%02d", src, d);
		mkdir(path, 0755);
		snprintf(path, sizeof(path), "%s/d%02d/s", src, d);
		mkdir(path, 0755);
		for (int i = 0; i < 60; i++) {
			char text[64];

			snprintf(path, sizeof(path), "%s/d%02d/%sf%02d", src, d, i % 2 ? "s/" : "", i);
			snprintf(text, sizeof(text), "dir %d file %d\n", d, i);
			_write(path, text);
		}
	}
	/* And one directory of 1,300 files (batches of 512 fill, one after
	   another) with a subdirectory of 600. */
	snprintf(path, sizeof(path), "%s/wide", src);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/wide/s", src);
	mkdir(path, 0755);
	for (int i = 0; i < 1900; i++) {
		char text[64];

		snprintf(path, sizeof(path), "%s/wide/%sw%04d", src, i < 600 ? "s/" : "", i);
		snprintf(text, sizeof(text), "wide file %d\n", i);
		_write(path, text);
	}
	ts[0].tv_sec = ts[1].tv_sec = 1100000000;
	snprintf(path, sizeof(path), "%s/wide/s", src);
	utimensat(AT_FDCWD, path, ts, 0);
	ts[0].tv_sec = ts[1].tv_sec = 1100000001;
	snprintf(path, sizeof(path), "%s/wide", src);
	utimensat(AT_FDCWD, path, ts, 0);
	/* Times and modes of their own, set last, deepest first. */
	for (int d = 0; d < 12; d++)
		for (int k = 1; k >= 0; k--) {
			snprintf(path, sizeof(path), "%s/d%02d%s", src, d, k ? "/s" : "");
			ts[0].tv_sec = ts[1].tv_sec = 1000000000 + d * 1000 + k;
			chmod(path, k ? 0750 : 0705);
			utimensat(AT_FDCWD, path, ts, 0);
		}
	snprintf(dst, sizeof(dst), "%s/deepdst", _dir);
	_sync_batch = 1;
	_run("local", "stage_in", src, dst, &s);
	ok(s.result == XFER_OK && s.failed == 0 && s.done == 2620, "26 nested directories, batched: "
	   "2,620 files verified (result %d, done %d, failed %d %s)", s.result, s.done, s.failed,
	   s.failed_path);
	for (int i = 0; i < 1900; i++) {
		snprintf(path, sizeof(path), "%s/wide/%sw%04d", src, i < 600 ? "s/" : "", i);
		snprintf(dpath, sizeof(dpath), "%s/wide/%sw%04d", dst, i < 600 ? "s/" : "", i);
		bad += !_same(path, dpath);
	}
	for (int k = 0; k < 2; k++) {
		snprintf(path, sizeof(path), "%s/wide%s", src, k ? "/s" : "");
		snprintf(dpath, sizeof(dpath), "%s/wide%s", dst, k ? "/s" : "");
		if (stat(path, &a) < 0 || stat(dpath, &b) < 0 || a.st_mtim.tv_sec != b.st_mtim.tv_sec)
			times++;
	}
	for (int d = 0; d < 12; d++) {
		for (int i = 0; i < 60; i++) {
			snprintf(path, sizeof(path), "%s/d%02d/%sf%02d", src, d, i % 2 ? "s/" : "", i);
			snprintf(dpath, sizeof(dpath), "%s/d%02d/%sf%02d", dst, d, i % 2 ? "s/" : "", i);
			bad += !_same(path, dpath);
		}
		for (int k = 0; k < 2; k++) {
			snprintf(path, sizeof(path), "%s/d%02d%s", src, d, k ? "/s" : "");
			snprintf(dpath, sizeof(dpath), "%s/d%02d%s", dst, d, k ? "/s" : "");
			if (stat(path, &a) < 0 || stat(dpath, &b) < 0 ||
			    a.st_mtim.tv_sec != b.st_mtim.tv_sec)
				times++;
			else if ((a.st_mode & 07777) != (b.st_mode & 07777))
				modes++;
		}
	}
	ok(bad == 0, "every file has the source's bytes (%d differ)", bad);
	ok(times == 0 && modes == 0, "every directory has the source's mtime and mode, set after its "
	   "last file went in (%d times, %d modes differ)", times, modes);

	snprintf(dst, sizeof(dst), "%s/deeparch", _dir);
	_nokeep = 1;
	_run("local", "archive", src, dst, &s);
	_nokeep = 0;
	_sync_batch = 0;
	for (int d = 0; d < 12; d++)
		for (int i = 0; i < 60; i++) {
			snprintf(path, sizeof(path), "%s/d%02d/%sf%02d", src, d, i % 2 ? "s/" : "", i);
			left += _exists(path);
		}
	for (int i = 0; i < 1900; i++) {
		snprintf(path, sizeof(path), "%s/wide/%sw%04d", src, i < 600 ? "s/" : "", i);
		left += _exists(path);
	}
	ok(s.result == XFER_OK && s.done == 2620 && left == 0, "archived with keep=no: 2,620 "
	   "verified, every source file removed (result %d, done %d, %d left)", s.result, s.done,
	   left);
}

int main(void)
{
	/* Path slots; P() refuses, at compile time, a slot past the end. */
	enum { NP = 65 };
	char p[NP][512];
	struct _seen s;
	struct stat st;

	if (!mkdtemp(_dir))
		return 77;
#define P(i, ...) do { \
	_Static_assert((i) >= 0 && (i) < NP, "P(" #i "): no such path slot"); \
	snprintf(p[i], sizeof(p[i]), __VA_ARGS__); \
} while (0)
	P(0, "%s/src", _dir);
	P(1, "%s/src/sub", _dir);
	P(2, "%s/outside", _dir);
	P(3, "%s/outside/secret", _dir);
	P(4, "%s/src/data", _dir);
	P(5, "%s/src/sub/inner", _dir);
	P(6, "%s/src/link_out", _dir);
	P(7, "%s/src/dirlink", _dir);
	P(8, "%s/src/fifo", _dir);
	P(9, "%s/dst", _dir);
	mkdir(p[0], 0755);
	mkdir(p[1], 0750);
	mkdir(p[2], 0755);
	_write(p[3], "SECRET outside the tree\n");
	_write(p[4], "some data\n");
	_write(p[5], "inner file\n");
	chmod(p[5], 0600);
	if (symlink(p[3], p[6]) < 0 || symlink(p[2], p[7]) < 0 || mkfifo(p[8], 0644) < 0)
		return 77;

	_run("local", "stage_in", p[0], p[9], &s);
	ok(s.result == XFER_OK, "tree copied (result %d, failed %d %s)", s.result, s.failed, s.failed_path);
	ok(s.files_total == 2, "walk counted 2 regular files (symlinks and FIFO not counted)");
	ok(s.done == 4, "2 files + 2 symlinks verified (%d)", s.done);
	ok(s.skipped == 1, "FIFO skipped with a record");
	P(10, "%s/dst/data", _dir);
	P(11, "%s/dst/sub/inner", _dir);
	P(12, "%s/dst/link_out", _dir);
	P(13, "%s/dst/dirlink", _dir);
	P(14, "%s/dst/fifo", _dir);
	P(15, "%s/dst/dirlink/secret", _dir);
	ok(_same(p[4], p[10]) && _same(p[5], p[11]), "file contents copied");
	ok(stat(p[11], &st) == 0 && (st.st_mode & 07777) == 0600, "file mode kept");
	ok(stat(p[1], &st) == 0 && stat(p[11], &st) == 0, "subdirectory created");
	ok(_is_link_to(p[12], p[3]), "symlink to a file outside recreated as a symlink, not followed");
	ok(_is_link_to(p[13], p[2]), "symlink to a directory outside recreated, not descended");
	ok(!_exists(p[14]), "no FIFO in the destination");
	{
		/* Nothing outside was read into the copy: no regular file holds the secret. */
		struct stat l;

		ok(lstat(p[15], &l) < 0 || !S_ISREG(l.st_mode) || _is_link_to(p[13], p[2]),
		   "the outside directory's file is not copied as a regular file");
	}

	/* A destination subdirectory replaced by a symlink to elsewhere. */
	P(20, "%s/dst2", _dir);
	P(21, "%s/dst2/sub", _dir);
	P(22, "%s/trap", _dir);
	P(23, "%s/trap/inner", _dir);
	mkdir(p[20], 0755);
	mkdir(p[22], 0755);
	if (symlink(p[22], p[21]) < 0)
		return 77;
	_run("local", "stage_in", p[0], p[20], &s);
	ok(s.result != XFER_OK, "copy refused to write through a planted symlink (result %d)", s.result);
	ok(s.failed >= 1 && strcmp(s.failed_path, "sub") == 0, "failure names 'sub' (%s)", s.failed_path);
	ok(!_exists(p[23]), "nothing written into the symlink's target");

	/* Single file into an existing directory; and under a new name. */
	P(30, "%s/one", _dir);
	P(31, "%s/one/data", _dir);
	P(32, "%s/renamed", _dir);
	mkdir(p[30], 0755);
	_run("local", "stage_in", p[4], p[30], &s);
	ok(s.result == XFER_OK && _same(p[4], p[31]), "file into an existing directory");
	_run("local", "stage_in", p[4], p[32], &s);
	ok(s.result == XFER_OK && _same(p[4], p[32]), "file to a new name");

	/* Null backend: reads and verifies nothing into the destination. */
	P(40, "%s/nulldst", _dir);
	_run("null", "stage_in", p[0], p[40], &s);
	ok(s.result == XFER_OK && s.done == 4 && !_exists(p[40]), "null backend writes nothing");

	/* SyncMode=batch across batch boundaries, and a big file (sampled read-back). */
	{
		char path[600], dpath[600];
		int bad = 0, nfiles = 0;

		P(50, "%s/many", _dir);
		P(51, "%s/many/a", _dir);
		P(52, "%s/many/b", _dir);
		P(53, "%s/manydst", _dir);
		mkdir(p[50], 0755);
		mkdir(p[51], 0755);
		mkdir(p[52], 0755);
		for (int i = 0; i < 700; i++) {
			char text[64];

			snprintf(path, sizeof(path), "%s/f%03d", i % 3 ? p[51] : p[52], i);
			snprintf(text, sizeof(text), "file %d %.*s\n", i, i % 40, "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
			_write(path, text);
		}
		snprintf(path, sizeof(path), "%s/big", p[50]);
		{
			FILE *f = fopen(path, "w");

			for (int k = 0; f && k < (33 << 20) / 4096 + 3; k++) {
				char blk[4096];

				memset(blk, 'a' + k % 26, sizeof(blk));
				memcpy(blk, &k, sizeof(k));
				fwrite(blk, 1, k % 7 == 6 ? 1000 : sizeof(blk), f);
			}
			if (f)
				fclose(f);
		}
		_sync_batch = 1;
		_verify_sample = 4;
		_run("local", "stage_in", p[50], p[53], &s);
		_sync_batch = 0;
		_verify_sample = 0;
		ok(s.result == XFER_OK && s.failed == 0, "batched tree copied (result %d, failed %d %s)",
		   s.result, s.failed, s.failed_path);
		ok(s.done == 701, "700 small files and the big one verified (%d)", s.done);
		for (int i = 0; i < 700; i++) {
			snprintf(path, sizeof(path), "%s/f%03d", i % 3 ? p[51] : p[52], i);
			snprintf(dpath, sizeof(dpath), "%s/%s/f%03d", p[53], i % 3 ? "a" : "b", i);
			bad += !_same(path, dpath);
			nfiles++;
		}
		ok(nfiles == 700 && bad == 0, "every batched file has the source's bytes (%d differ)", bad);
		snprintf(path, sizeof(path), "%s/big", p[50]);
		snprintf(dpath, sizeof(dpath), "%s/big", p[53]);
		ok(_same_full(path, dpath), "the big file has the source's bytes");
		snprintf(dpath, sizeof(dpath), "%s/a/.f001.stagehand-1", p[53]);
		ok(!_exists(dpath), "no temporary file left");
	}
	_deferred_dirs();

	/* Excluded directories (#DATA exempt= inside the tree), archive with keep=no. */
	{
		static const char *const ex[] = { "scratch", "a/b", NULL };
		static const char *const none[] = { NULL };
		struct xfer_ctx xc = { 0 };
		char err[256];

		xc.exclude = ex;
		ok(xfer_excluded(&xc, "scratch") && xfer_excluded(&xc, "a/b"), "listed dirs excluded");
		ok(!xfer_excluded(&xc, "a") && !xfer_excluded(&xc, "scratch/x") &&
		   !xfer_excluded(&xc, "scratc") && !xfer_excluded(&xc, "a/b/c") &&
		   !xfer_excluded(&xc, ""), "only exact relpaths are excluded");
		xc.exclude = none;
		ok(!xfer_excluded(&xc, "scratch"), "empty list excludes nothing");
		xc.exclude = NULL;
		ok(!xfer_excluded(&xc, "scratch") && !xfer_excluded(NULL, "x"), "NULL list excludes nothing");
		ok(xfer_exclude_check("a/b", err, sizeof(err)) == 0 &&
		   xfer_exclude_check("...", err, sizeof(err)) == 0, "relative paths accepted");
		ok(xfer_exclude_check("", err, sizeof(err)) < 0, "empty refused: %s", err);
		ok(xfer_exclude_check("/abs", err, sizeof(err)) < 0, "absolute refused: %s", err);
		ok(xfer_exclude_check("a/", err, sizeof(err)) < 0, "trailing / refused: %s", err);
		ok(xfer_exclude_check("a//b", err, sizeof(err)) < 0 &&
		   xfer_exclude_check("a/./b", err, sizeof(err)) < 0 &&
		   xfer_exclude_check(".", err, sizeof(err)) < 0 &&
		   xfer_exclude_check("a/..", err, sizeof(err)) < 0 &&
		   xfer_exclude_check("../x", err, sizeof(err)) < 0, "'', '.', '..' components refused: %s",
		   err);

		P(60, "%s/ex", _dir);
		P(61, "%s/ex/scratch", _dir);
		P(62, "%s/ex/a", _dir);
		P(63, "%s/ex/a/b", _dir);
		P(64, "%s/exdst", _dir);
		mkdir(p[60], 0755);
		mkdir(p[61], 0755);
		mkdir(p[62], 0755);
		mkdir(p[63], 0755);
		P(40, "%s/ex/keep.txt", _dir);
		_write(p[40], "kept\n");
		P(40, "%s/ex/scratch/tmp.bin", _dir);
		_write(p[40], "throwaway\n");
		P(40, "%s/ex/a/x.txt", _dir);
		_write(p[40], "a/x\n");
		P(40, "%s/ex/a/b/y.txt", _dir);
		_write(p[40], "a/b/y\n");
		_exclude = ex;
		_nokeep = 1;
		_run("local", "archive", p[60], p[64], &s);
		_exclude = NULL;
		_nokeep = 0;
		ok(s.result == XFER_OK && s.failed == 0, "tree with excluded dirs archived (result %d)",
		   s.result);
		ok(s.files_total == 2 && s.done == 2, "only the 2 files outside them counted and "
		   "copied (%d, %d)", s.files_total, s.done);
		ok(s.skipped == 2 && s.files_skipped == 2 &&
		   strcmp(s.skipped_text, XFER_EXCLUDE_REASON) == 0, "each excluded dir skipped with "
		   "the reason (%d: %s %s)", s.skipped, s.skipped_path, s.skipped_text);
		P(40, "%s/exdst/a/x.txt", _dir);
		P(41, "%s/exdst/keep.txt", _dir);
		ok(_exists(p[40]) && _exists(p[41]), "files outside the excluded dirs copied");
		P(40, "%s/exdst/scratch", _dir);
		P(41, "%s/exdst/a/b", _dir);
		ok(!_exists(p[40]) && !_exists(p[41]), "excluded dirs not in the copy");
		P(40, "%s/ex/scratch/tmp.bin", _dir);
		P(41, "%s/ex/a/b/y.txt", _dir);
		ok(_exists(p[40]) && _exists(p[41]), "keep=no left the excluded dirs' files in place");
		P(40, "%s/ex/keep.txt", _dir);
		P(41, "%s/ex/a/x.txt", _dir);
		ok(!_exists(p[40]) && !_exists(p[41]), "keep=no removed the archived files");
	}

	/* Missing source: final failure. */
	P(41, "%s/nope", _dir);
	_run("local", "stage_in", p[41], p[40], &s);
	ok(s.result == XFER_FINAL, "missing source is a final failure");

	{
		/* The pair each name gives paths (url: test_url). */
		static const struct {
			const char *action, *backend;
			const struct xfer_endpoint *src, *dst;
			const char *what;
		} pairs[] = {
			{ "archive", NULL, &xfer_ep_local, &xfer_ep_local, "paths: local to local" },
			{ "archive", "null", &xfer_ep_local, &xfer_ep_null, "chosen by name" },
			{ "archive", "bundle", &xfer_ep_local, &xfer_ep_bundle, "archive: bundled" },
			{ "stage_in", "bundle", &xfer_ep_local, &xfer_ep_local, "stage-in: local" },
		};
		struct xfer_ctx c = { .source = "/x", .dest = "/y" };
		const struct xfer_endpoint *es = NULL, *ed = NULL;
		char err[128];

		for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
			c.action = pairs[i].action;
			c.backend = pairs[i].backend;
			ok(xfer_endpoints_for(&c, &es, &ed, err, sizeof(err)) == XFER_OK &&
			   es == pairs[i].src && ed == pairs[i].dst, "endpoints: %s", pairs[i].what);
		}
		c.backend = "tape";
		ok(!xfer_endpoint_named(&c, err, sizeof(err)) &&
		   strcmp(err, "unknown backend 'tape' (known: local, null, bundle, url)") == 0,
		   "unknown name refused: %s", err);
		c.backend = NULL;
		c.source = "gopher://x";
		ok(!xfer_endpoint_named(&c, err, sizeof(err)) &&
		   xfer_endpoints_for(&c, &es, &ed, err, sizeof(err)) == XFER_FINAL &&
		   strstr(err, "gopher"), "unknown scheme refused: %s", err);
	}
	{
		pid_t pid = fork();

		if (pid == 0) {
			execlp("rm", "rm", "-rf", _dir, (char *)NULL);
			_exit(127);
		}
		waitpid(pid, NULL, 0);
	}
	return tap_done();
}
