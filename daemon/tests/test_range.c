/*
 * test_range.c - a file copied in byte ranges (as two movers would, one
 * range each) into one temporary file, then finished by the final pass; a
 * source changed in between; a symlink planted at the temporary name.
 */
#include "config.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "durable.h"
#include "tests/tap.h"
#include "xfer_range.h"
#include "xfer_util.h"

#define MIB (1LL << 20)

static char _dir[] = "/tmp/test_range_XXXXXX";
static char _src[64], _dst[64];
static int _chan[2];

/* The next record the code under test sent; 0 when none is waiting. */
static int _next(struct xfer_rec *r, char *path, char *text)
{
	static char buf[1 << 16];
	static size_t len;
	ssize_t n, used;

	for (;;) {
		used = xfer_parse(buf, len, r, path, text);
		if (used > 0) {
			memmove(buf, buf + used, len - (size_t)used);
			len -= (size_t)used;
			return 1;
		}
		n = recv(_chan[0], buf + len, sizeof(buf) - len, MSG_DONTWAIT);
		if (n <= 0)
			return 0;
		len += (size_t)n;
	}
}

/* The next record of type t, skipping logs. */
static int _expect(int t, struct xfer_rec *r, char *path)
{
	char text[XFER_TEXT_MAX + 1];

	while (_next(r, path, text))
		if ((int)r->type == t)
			return 1;
	return 0;
}

static void _write(const char *rel, int64_t size)
{
	char p[256];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", _src, rel);
	f = fopen(p, "w");
	for (int64_t i = 0; f && i < size; i++)
		fputc((int)((i * 7 + i / 4099) & 0xff), f);
	if (f)
		fclose(f);
}

static int _same(const char *rel)
{
	char a[256], b[256], cmd[600];

	snprintf(a, sizeof(a), "%s/%s", _src, rel);
	snprintf(b, sizeof(b), "%s/%s", _dst, rel);
	snprintf(cmd, sizeof(cmd), "cmp -s '%s' '%s'", a, b);
	return system(cmd) == 0;
}

static void _ctx(struct xfer_ctx *ctx, volatile sig_atomic_t *stop)
{
	memset(ctx, 0, sizeof(*ctx));
	ctx->request_id = 7;
	ctx->uid = geteuid();
	ctx->action = "archive";
	ctx->source = _src;
	ctx->dest = _dst;
	ctx->keep = 1;
	ctx->chan = _chan[1];
	ctx->algo = CKSUM_XXH128;
	ctx->xattr_ns = "user.";
	ctx->stop = stop;
}

static void _two_movers(void)
{
	volatile sig_atomic_t stop = 0;
	struct xfer_ctx ctx;
	int64_t size = 3 * MIB + 5;
	struct xfer_range r0 = { "d/big", 0, 2 * MIB, size }, r1 = { "d/big", 2 * MIB, MIB + 5, size };
	char msg[XFER_TEXT_MAX], path[XFER_PATH_MAX + 1], tmp[PATH_MAX], cks[2][CKSUM_HEX_MAX];
	struct xfer_rec rec;
	struct xfer_done_ent de = { "d/big", size, 0, "ranges-xxh128:00" };
	struct stat st;

	_write("d/big", size);
	ok(stat(_src, &st) == 0, "source tree");
	_ctx(&ctx, &stop);
	/* The second range first: whoever comes first creates the file at its full size. */
	ok(xfer_range_run(&ctx, &r1, 1, msg, sizeof(msg)) == XFER_OK, "the last range copied (%s)",
	   msg);
	snprintf(tmp, sizeof(tmp), "%s/d/.big.stagehand-7", _dst);
	ok(stat(tmp, &st) == 0 && st.st_size == size && (st.st_mode & 0777) == 0600,
	   "the temporary file has the final size, mode 0600");
	ok(_expect(XR_RANGE_DONE, &rec, path) && strcmp(path, "d/big") == 0 &&
	   rec.a == 2 * MIB && rec.b == MIB + 5 && rec.c == size && rec.d > 0 &&
	   strncmp(rec.cks, "xxh128:", 7) == 0, "reported: offset, length, size, mtime, checksum");
	snprintf(cks[1], sizeof(cks[1]), "%s", rec.cks);
	ok(xfer_range_run(&ctx, &r0, 1, msg, sizeof(msg)) == XFER_OK, "the first range copied");
	ok(_expect(XR_RANGE_DONE, &rec, path) && rec.a == 0 && rec.b == 2 * MIB,
	   "reported too");
	snprintf(cks[0], sizeof(cks[0]), "%s", rec.cks);
	ok(strcmp(cks[0], cks[1]) != 0, "each range has its own checksum");
	ok(stat(tmp, &st) == 0 && st.st_size == size, "still the final size");
	/* The final pass, with the mtime the ranges saw. */
	de.mtime_ns = rec.d;
	xfer_range_finish(&ctx, &de, 1);
	ok(de.size == size, "finished: it stays in the resume set");
	ok(_same("d/big") && access(tmp, F_OK) < 0, "the file is in place, byte for byte; no "
	   "temporary file left");
	ok(_expect(XR_ITEM_FILE, &rec, path) && strcmp(path, "d/big") == 0 && rec.a == size &&
	   strcmp(rec.cks, de.ranged_cks) == 0 && strcmp(rec.cks2, de.ranged_cks) == 0,
	   "one file record, with the checksum of its ranges");
}

static void _changed(void)
{
	volatile sig_atomic_t stop = 0;
	struct xfer_ctx ctx;
	int64_t size = 2 * MIB;
	struct xfer_range r = { "c", 0, MIB, size }, wrong = { "c", MIB, MIB, size + 1 };
	struct xfer_done_ent de = { "c", size, 1, "ranges-xxh128:00" };
	char msg[XFER_TEXT_MAX], tmp[PATH_MAX], path[XFER_PATH_MAX + 1], text[XFER_TEXT_MAX + 1];
	struct xfer_rec rec;
	struct stat st;

	_write("c", size);
	_ctx(&ctx, &stop);
	ok(xfer_range_run(&ctx, &r, 1, msg, sizeof(msg)) == XFER_OK, "a range of c copied");
	ok(_expect(XR_RANGE_DONE, &rec, path), "reported");
	while (_next(&rec, path, text))
		;
	ok(xfer_range_run(&ctx, &wrong, 1, msg, sizeof(msg)) == XFER_OK && _next(&rec, path, text) &&
	   rec.type == XR_LOG && strstr(text, "changed size since the request was planned") &&
	   !_next(&rec, path, text),
	   "a source of another size than planned: only a warning (%s), the range not done", text);
	/* The mtime the ranges saw (1 ns) is not the source's now. */
	xfer_range_finish(&ctx, &de, 1);
	snprintf(tmp, sizeof(tmp), "%s/.c.stagehand-7", _dst);
	ok(de.size == -1 && access(tmp, F_OK) < 0 && stat(tmp, &st) < 0,
	   "source changed since: left to the walk (size -1), the stale bytes removed");
}

static void _symlink(void)
{
	volatile sig_atomic_t stop = 0;
	struct xfer_ctx ctx;
	struct xfer_range r = { "e", 0, MIB, 2 * MIB };
	char msg[XFER_TEXT_MAX], tmp[PATH_MAX], victim[PATH_MAX];
	struct stat st;

	_write("e", 2 * MIB);
	snprintf(victim, sizeof(victim), "%s/victim", _dir);
	close(open(victim, O_WRONLY | O_CREAT, 0600));
	snprintf(tmp, sizeof(tmp), "%s/.e.stagehand-7", _dst);
	ok(symlink(victim, tmp) == 0, "a symlink planted at the temporary name");
	_ctx(&ctx, &stop);
	ok(xfer_range_run(&ctx, &r, 1, msg, sizeof(msg)) != XFER_OK &&
	   strstr(msg, "cannot create the temporary file of 'e'"), "refused (%s)", msg);
	ok(stat(victim, &st) == 0 && st.st_size == 0, "its target untouched");
}

int main(void)
{

	if (!mkdtemp(_dir) || socketpair(AF_UNIX, SOCK_STREAM, 0, _chan) < 0)
		return 1;
	/* Room for every record of a test without a reader. */
	setsockopt(_chan[1], SOL_SOCKET, SO_SNDBUF, &(int){ 1 << 20 }, sizeof(int));
	snprintf(_src, sizeof(_src), "%s/src", _dir);
	snprintf(_dst, sizeof(_dst), "%s/dst", _dir);
	if (mkdir(_src, 0700) < 0 || mkdir(_dst, 0700) < 0 || chdir(_src) < 0 ||
	    mkdir("d", 0700) < 0)
		return 1;
	_two_movers();
	_changed();
	_symlink();
	tap_rmtree(_dir);
	return tap_done();
}
