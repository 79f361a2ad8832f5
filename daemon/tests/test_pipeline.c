/*
 * test_pipeline.c - the engine's driver (xfer_pipeline.c) owns what happens
 * when a destination endpoint fails: a destination built from the local
 * endpoint's operations, with a full disk at one file's commit and a
 * corrupted read-back at another's, must give one failure record each with
 * the driver's message, leave no temporary file, keep (keep=no) exactly the
 * sources that were not verified, and end in a retryable verdict.
 *
 * The byte-range copy (xfer_range.c) is a driver too: between a source and
 * a destination that know no backend's name, built from the local
 * endpoint's operations, it must take every file through them (counted
 * here), give the endpoint's failure as its message, finish through the
 * destination's commit and remove a keep=no source through the source's
 * remove; and a side with no range table is refused.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/tap.h"
#include "xfer_endpoint.h"
#include "xfer_range.h"

static char _dir[] = "/tmp/test_pipeline_XXXXXX";
static volatile sig_atomic_t _stop;

/* ---- a destination with injected faults, otherwise the local endpoint ---- */

static int _commit_nospace(struct xfer_ep *ep, struct xfer_wfile *wf, int sfd,
			   const struct stat *cur, unsigned flags)
{
	if (strcmp(wf->name, "nospace") == 0) {
		/* the contract: on failure no temporary file */
		xfer_ep_local.device->abort(ep, wf);
		return ENOSPC;
	}
	return xfer_ep_local.commit(ep, wf, sfd, cur, flags);
}

static int _readback_corrupt(struct xfer_ep *ep, const struct xfer_buf *tb, int dir,
			     const char *name, int64_t expect, char *cks)
{
	int e = xfer_ep_local.device->readback(ep, tb, dir, name, expect, cks);

	if (!e && strcmp(name, "bad") == 0)
		cks[strlen(cks) - 1] ^= 1;	/* what a flipped bit on the device reads back as */
	return e;
}

static struct xfer_endpoint _faulty;
static struct xfer_ep_device _faulty_device;

/* ---- byte ranges: both sides counted, the destination's sync can fail ---- */

static int _ranges_parent, _ranges_opened, _ranges_synced, _ranges_removed;

static int _count_parent(struct xfer_ep *ep, const struct xfer_root *root, const char *rel,
			 int make, int *dir)
{
	_ranges_parent++;
	return xfer_ep_local.range->parent(ep, root, rel, make, dir);
}

static int _count_open(struct xfer_ep *ep, struct xfer_wfile *wf, int64_t size,
		       const char **what)
{
	_ranges_opened++;
	return xfer_ep_local.range->open_shared(ep, wf, size, what);
}

static int _sync_nospace(struct xfer_ep *ep, struct xfer_wfile *wf, int64_t off, int64_t len)
{
	_ranges_synced++;
	if (strcmp(wf->name, "nospace") == 0)
		return ENOSPC;
	return xfer_ep_local.range->sync(ep, wf, off, len);
}

static int _count_remove(struct xfer_ep *ep, int dir, const char *name)
{
	_ranges_removed++;
	return xfer_ep_local.remove(ep, dir, name);
}

static struct xfer_endpoint _rsrc, _norange;
static struct xfer_ep_range _rrange;

/* ---- run the driver in a child, collect its records ---- */

struct _seen {
	int result, files, failed, totals, phase;
	char failed_text[4][XFER_TEXT_MAX + 1];
	int failed_code[4];
	char files_path[4][XFER_PATH_MAX + 1];
	char result_text[XFER_TEXT_MAX + 1];
};

static void _collect(const char *buf, size_t len, struct _seen *s)
{
	for (size_t off = 0; off < len;) {
		static char path[XFER_PATH_MAX + 1], text[XFER_TEXT_MAX + 1];
		struct xfer_rec rec;
		ssize_t used = xfer_parse(buf + off, len - off, &rec, path, text);

		if (used <= 0)
			break;
		off += (size_t)used;
		if (rec.type == XR_RESULT) {
			s->result = rec.code;
			snprintf(s->result_text, sizeof(s->result_text), "%s", text);
		} else if (rec.type == XR_TOTALS) {
			s->totals = (int)rec.a;
		} else if (rec.type == XR_PHASE) {
			s->phase = rec.code;
		} else if (rec.type == XR_ITEM_FILE && s->files < 4) {
			snprintf(s->files_path[s->files++], XFER_PATH_MAX + 1, "%s", path);
		} else if (rec.type == XR_ITEM_FAILED && s->failed < 4) {
			s->failed_code[s->failed] = rec.code;
			snprintf(s->failed_text[s->failed++], XFER_TEXT_MAX + 1, "%s", text);
		}
	}
}

/* The request both drivers run in these tests: an archive of src into dst, records on chan. */
static void _ctx(struct xfer_ctx *ctx, const char *src, const char *dst, int chan)
{
	ctx->request_id = 3;
	ctx->uid = getuid();
	ctx->action = "archive";
	ctx->source = src;
	ctx->dest = dst;
	ctx->keep = 0;
	ctx->chan = chan;
	ctx->algo = CKSUM_XXH128;
	ctx->xattr_ns = "user.";
	ctx->stop = &_stop;
}

static void _run(const char *src, const char *dst, struct _seen *s)
{
	static char buf[1 << 16];
	size_t len = 0;
	ssize_t n;
	int sv[2];
	pid_t pid;

	memset(s, 0, sizeof(*s));
	s->result = -1;
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return;
	pid = fork();
	if (pid == 0) {
		struct xfer_ctx ctx = { 0 };

		close(sv[0]);
		_ctx(&ctx, src, dst, sv[1]);
		xfer_pipeline_run(&ctx, &xfer_ep_local, &_faulty);
		_exit(0);
	}
	close(sv[1]);
	while ((n = read(sv[0], buf + len, sizeof(buf) - len)) > 0)
		len += (size_t)n;
	close(sv[0]);
	waitpid(pid, NULL, 0);
	_collect(buf, len, s);
}

static void _write(const char *dir, const char *name, const char *text)
{
	char p[512];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd >= 0) {
		if (write(fd, text, strlen(text)) < 0)
			perror(p);
		close(fd);
	}
}

static int _exists(const char *dir, const char *name)
{
	char p[512];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return lstat(p, &st) == 0;
}

/* Any temporary file of request 3 (".NAME.stagehand-3") left in dir? */
static int _temp_left(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int left = 0;

	while (d && (de = readdir(d)))
		left |= strstr(de->d_name, ".stagehand-3") != NULL;
	if (d)
		closedir(d);
	return left;
}

static int _has_failure(const struct _seen *s, int code, const char *text)
{
	for (int i = 0; i < s->failed; i++)
		if (s->failed_code[i] == code && strcmp(s->failed_text[i], text) == 0)
			return 1;
	return 0;
}

/* The next record of type t on fd (the range driver runs in this process), skipping others. */
static int _record(int fd, int t, struct xfer_rec *r, char *path)
{
	static char buf[1 << 16];
	static size_t len;
	char text[XFER_TEXT_MAX + 1];
	ssize_t used, n;

	for (;;) {
		used = xfer_parse(buf, len, r, path, text);
		if (used > 0) {
			memmove(buf, buf + used, len - (size_t)used);
			len -= (size_t)used;
			if ((int)r->type == t)
				return 1;
			continue;
		}
		n = recv(fd, buf + len, sizeof(buf) - len, MSG_DONTWAIT);
		if (n <= 0)
			return 0;
		len += (size_t)n;
	}
}

static void _ranges(void)
{
	char src[256], dst[256], msg[XFER_TEXT_MAX], path[XFER_PATH_MAX + 1];
	struct xfer_range good = { "d/good", 0, 8, 15 }, rest = { "d/good", 8, 7, 15 };
	struct xfer_range full = { "d/nospace", 0, 17, 17 };
	struct xfer_done_ent de = { "d/good", 15, 0, "ranges-xxh128:00" };
	struct xfer_ctx ctx = { 0 };
	struct xfer_rec rec;
	int sv[2];

	snprintf(src, sizeof(src), "%s/rsrc", _dir);
	snprintf(dst, sizeof(dst), "%s/rdst", _dir);
	if (mkdir(src, 0755) < 0 || mkdir(dst, 0755) < 0 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv))
		return;
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &(int){ 1 << 20 }, sizeof(int));
	snprintf(path, sizeof(path), "%s/d", src);
	mkdir(path, 0755);
	_write(path, "good", "verified bytes\n");
	_write(path, "nospace", "the disk is full\n");
	_ctx(&ctx, src, dst, sv[1]);

	ok(xfer_range_run_between(&ctx, &_rsrc, &_faulty, &rest, 1, msg, sizeof(msg)) == XFER_OK &&
	   xfer_range_run_between(&ctx, &_rsrc, &_faulty, &good, 1, msg, sizeof(msg)) == XFER_OK,
	   "two ranges copied between endpoints the driver knows by their tables only (%s)", msg);
	ok(_ranges_parent == 4 && _ranges_opened == 2 && _ranges_synced == 2,
	   "each through both sides' parent, the destination's open_shared and sync (%d, %d, %d)",
	   _ranges_parent, _ranges_opened, _ranges_synced);
	ok(_record(sv[0], XR_RANGE_DONE, &rec, path) && rec.a == 8 && rec.b == 7 &&
	   _record(sv[0], XR_RANGE_DONE, &rec, path) && rec.a == 0 && rec.b == 8 &&
	   strcmp(path, "d/good") == 0, "each range reported");
	ok(xfer_range_run_between(&ctx, &_rsrc, &_faulty, &full, 1, msg, sizeof(msg)) ==
	   XFER_RETRYABLE && strcmp(msg, "cannot make durable: 'd/nospace' (bytes 0..17 of 17): "
	   "No space left on device") == 0, "the endpoint's failure is the driver's message: %s",
	   msg);
	de.mtime_ns = rec.d;
	xfer_range_finish_between(&ctx, &_rsrc, &_faulty, &de, 1);
	ok(de.size == 15 && _record(sv[0], XR_ITEM_FILE, &rec, path) &&
	   strcmp(path, "d/good") == 0, "finished through the destination's commit");
	snprintf(path, sizeof(path), "%s/d", dst);
	ok(_exists(path, "good") && !_exists(path, ".good.stagehand-3") &&
	   _exists(path, ".nospace.stagehand-3"), "in place, its temporary file gone (the failed "
	   "range's stays, for the next mover)");
	snprintf(path, sizeof(path), "%s/d", src);
	ok(_ranges_removed == 1 && !_exists(path, "good") && _exists(path, "nospace"),
	   "keep=no: the source went through the source endpoint's remove");
	ok(xfer_range_run_between(&ctx, &_rsrc, &_norange, &good, 1, msg, sizeof(msg)) ==
	   XFER_RETRYABLE && strcmp(msg, "the faulty and norange backends take no byte ranges") == 0,
	   "a destination without a range table is refused: %s", msg);
	close(sv[0]);
	close(sv[1]);
}

int main(void)
{
	char src[256], dst[256];
	struct _seen s;
	pid_t pid;

	_faulty = xfer_ep_local;
	_faulty.name = "faulty";
	_faulty.commit = _commit_nospace;
	_faulty_device = *xfer_ep_local.device;
	_faulty_device.readback = _readback_corrupt;
	_faulty.device = &_faulty_device;
	_rrange = *xfer_ep_local.range;
	_rrange.parent = _count_parent;
	_rrange.open_shared = _count_open;
	_rrange.sync = _sync_nospace;
	_faulty.range = &_rrange;
	_rsrc = _faulty;
	_rsrc.name = "faulty";
	_rsrc.remove = _count_remove;
	_norange = _faulty;
	_norange.name = "norange";
	_norange.range = NULL;
	if (!mkdtemp(_dir))
		return 1;
	snprintf(src, sizeof(src), "%s/src", _dir);
	snprintf(dst, sizeof(dst), "%s/dst", _dir);
	if (mkdir(src, 0755) < 0)
		return 1;
	_write(src, "good", "verified bytes\n");
	_write(src, "nospace", "the disk is full\n");
	_write(src, "bad", "a bit flips\n");

	_run(src, dst, &s);
	ok(s.totals == 3, "the driver counted the source's listing: %d files", s.totals);
	ok(s.phase == XFER_PHASE_VERIFYING, "the verify phase reported in the engine's own "
	   "words (%d), which core/worker.c turns into the request's state", s.phase);
	ok(s.files == 1 && strcmp(s.files_path[0], "good") == 0,
	   "only the verified file is reported done (%d: %s)", s.files, s.files_path[0]);
	ok(s.failed == 2, "one failure record for each failed file (%d)", s.failed);
	ok(_has_failure(&s, ENOSPC, "copy failed 'nospace': No space left on device"),
	   "a commit failure is the driver's message with the endpoint's errno");
	ok(_has_failure(&s, EIO, "checksum mismatch after copy of 'bad': Input/output error"),
	   "a read-back that differs is a checksum mismatch");
	ok(s.result == XFER_RETRYABLE, "a full disk and a mismatch are retried (result %d)",
	   s.result);
	ok(strncmp(s.result_text, "2 of the entries failed; first: ", 32) == 0,
	   "the verdict names the count and the first failure: %s", s.result_text);
	ok(!_exists(src, "good") && _exists(src, "nospace") && _exists(src, "bad"),
	   "keep=no removed only the source that was verified");
	ok(_exists(dst, "good") && !_exists(dst, "nospace"),
	   "the verified copy is in place, the failed commit left nothing");
	ok(!_temp_left(dst), "no temporary file is left in the destination");
	_run(src, dst, &s);
	ok(s.totals == 2 && s.failed == 2 && s.result == XFER_RETRYABLE,
	   "a second attempt fails the same two files again, nothing else");
	_ranges();
	pid = fork();
	if (pid == 0) {
		execlp("rm", "rm", "-rf", _dir, (char *)NULL);
		_exit(127);
	}
	waitpid(pid, NULL, 0);
	return tap_done();
}
