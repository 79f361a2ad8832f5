/*
 * test_pipeline.c - the engine's driver (xfer_pipeline.c) owns what happens
 * when a destination endpoint fails: a destination built from the local
 * endpoint's operations, with a full disk at one file's commit and a
 * corrupted read-back at another's, must give one failure record each with
 * the driver's message, leave no temporary file, keep (keep=no) exactly the
 * sources that were not verified, and end in a retryable verdict.
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

/* ---- run the driver in a child, collect its records ---- */

struct _seen {
	int result, files, failed, totals;
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
		} else if (rec.type == XR_ITEM_FILE && s->files < 4) {
			snprintf(s->files_path[s->files++], XFER_PATH_MAX + 1, "%s", path);
		} else if (rec.type == XR_ITEM_FAILED && s->failed < 4) {
			s->failed_code[s->failed] = rec.code;
			snprintf(s->failed_text[s->failed++], XFER_TEXT_MAX + 1, "%s", text);
		}
	}
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
		ctx.request_id = 3;
		ctx.uid = getuid();
		ctx.action = "archive";
		ctx.source = src;
		ctx.dest = dst;
		ctx.keep = 0;
		ctx.chan = sv[1];
		ctx.algo = CKSUM_XXH128;
		ctx.xattr_ns = "user.";
		ctx.stop = &_stop;
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
	pid = fork();
	if (pid == 0) {
		execlp("rm", "rm", "-rf", _dir, (char *)NULL);
		_exit(127);
	}
	waitpid(pid, NULL, 0);
	return tap_done();
}
