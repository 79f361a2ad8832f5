/*
 * test_mover_auth.c - who may report a shard's records (mover tokens and
 * their key) and the daemon's read-back of what movers recorded.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checksum.h"
#include "durable.h"
#include "mover_auth.h"
#include "mover_verify.h"
#include "queue.h"
#include "tests/tap.h"

static char _dir[] = "/tmp/test_mover_auth.XXXXXX";

static void _tokens(void)
{
	char err[512], t1[MOVER_TOKEN_HEX + 1], t2[MOVER_TOKEN_HEX + 1], path[600];
	struct mover_auth *a, *b, *c;
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", _dir, MOVER_KEY_FILE);
	a = mover_auth_new(path, err, sizeof(err));
	ok(a != NULL, "a key is made where there was none (%s)", a ? "" : err);
	ok(stat(path, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0600 &&
	   st.st_size == MOVER_KEY_LEN, "the key file is 0600, %d bytes", MOVER_KEY_LEN);
	ok(mover_auth_token(a, 41, 2, 1, t1) == 0 && strlen(t1) == MOVER_TOKEN_HEX &&
	   strspn(t1, "0123456789abcdef") == MOVER_TOKEN_HEX, "a token is 64 hex digits");
	ok(mover_auth_token_ok(a, 41, 2, 1, t1), "the shard's own token is taken");
	ok(!mover_auth_token_ok(a, 41, 2, 2, t1), "not for the shard's next mover job");
	ok(!mover_auth_token_ok(a, 41, 3, 1, t1), "not for another shard");
	ok(!mover_auth_token_ok(a, 42, 2, 1, t1), "not for another request");
	ok(!mover_auth_token_ok(a, 41, 2, 1, NULL) && !mover_auth_token_ok(a, 41, 2, 1, "") &&
	   !mover_auth_token_ok(a, 41, 2, 1, "00"), "no token, an empty or a short one: refused");
	memcpy(t2, t1, sizeof(t2));
	t2[MOVER_TOKEN_HEX - 1] = t2[MOVER_TOKEN_HEX - 1] == '0' ? '1' : '0';
	ok(!mover_auth_token_ok(a, 41, 2, 1, t2), "one digit changed: refused");
	/* The same key after a restart: running movers keep their tokens. */
	b = mover_auth_new(path, err, sizeof(err));
	ok(b && mover_auth_token(b, 41, 2, 1, t2) == 0 && strcmp(t1, t2) == 0,
	   "the key is read back: the same token after a restart");
	/* Another key (no file: this run only): another token. */
	c = mover_auth_new(NULL, err, sizeof(err));
	ok(c && !mover_auth_token_ok(c, 41, 2, 1, t1), "another daemon's key: refused");
	mover_auth_free(a);
	mover_auth_free(b);
	mover_auth_free(c);
	/* A key others can read is no secret: refused, with what to do. */
	chmod(path, 0644);
	a = mover_auth_new(path, err, sizeof(err));
	ok(!a, "a key file of mode 0644 is refused");
	contains(err, "mode 0600", "it says what it must be");
	chmod(path, 0600);
	fd = open(path, O_WRONLY | O_APPEND);
	ok(fd >= 0 && write(fd, "x", 1) == 1, "(key made one byte too long)");
	if (fd >= 0)
		close(fd);
	a = mover_auth_new(path, err, sizeof(err));
	ok(!a, "a key of the wrong length is refused");
	unlink(path);
	if (symlink("/etc/hostname", path) == 0) {
		a = mover_auth_new(path, err, sizeof(err));
		ok(!a, "a key that is a symbolic link is not followed");
		mover_auth_free(a);
		unlink(path);
	}
}

static void _write(const char *path, const char *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	if (fd < 0 || write(fd, data, len) != (ssize_t)len)
		tap_diag("cannot write %s: %s", path, strerror(errno));
	if (fd >= 0)
		close(fd);
}

static void _cks(const char *data, size_t len, char out[CKSUM_HEX_MAX])
{
	struct cksum c;

	cksum_init(&c, CKSUM_XXH128);
	cksum_update(&c, data, len);
	cksum_final(&c, out);
}

static int64_t _mtime(const char *path)
{
	struct stat st;

	stat(path, &st);
	return (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
}

static void _verify(void)
{
	char src[300], dst[300], p[700], tmp[128], err[512], ck[3][CKSUM_HEX_MAX];
	const char *data[2] = { "hello, archive\n", "second file, in a directory\n" };
	char big[8192];
	struct queue_request r = { .id = 7, .uid = getuid(), .gid = getgid() };
	struct mover_verify_set s = { 0 };
	struct mover_verify_result res;
	struct mover_verify_ent e[2];
	struct mover_verify_range g[2];
	int rc;

	if (geteuid() != 0) {
		tap_diag("read-back tests skipped: the checker switches identity (run as root)");
		return;
	}
	snprintf(src, sizeof(src), "%s/src", _dir);
	snprintf(dst, sizeof(dst), "%s/dst", _dir);
	mkdir(src, 0755);
	mkdir(dst, 0755);
	snprintf(p, sizeof(p), "%s/d", src);
	mkdir(p, 0755);
	snprintf(p, sizeof(p), "%s/d", dst);
	mkdir(p, 0755);
	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/%s", src, i ? "d/b" : "a");
		_write(p, data[i], strlen(data[i]));
		snprintf(p, sizeof(p), "%s/%s", dst, i ? "d/b" : "a");
		_write(p, data[i], strlen(data[i]));
		_cks(data[i], strlen(data[i]), ck[i]);
		snprintf(p, sizeof(p), "%s/%s", src, i ? "d/b" : "a");
		e[i] = (struct mover_verify_ent){ i ? "d/b" : "a", (int64_t)strlen(data[i]),
						  _mtime(p), ck[i], ck[i] };
	}
	/* A big file's two ranges, in the destination's temporary file. */
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (char)(i * 7);
	snprintf(p, sizeof(p), "%s/d/big", src);
	_write(p, big, sizeof(big));
	durable_tmpname(tmp, sizeof(tmp), "big", r.id);
	snprintf(p, sizeof(p), "%s/d/%s", dst, tmp);
	_write(p, big, sizeof(big));
	_cks(big, 4096, ck[2]);
	{
		static char ck2[CKSUM_HEX_MAX];

		_cks(big + 4096, 4096, ck2);
		snprintf(p, sizeof(p), "%s/d/big", src);
		g[0] = (struct mover_verify_range){ "d/big", 0, 4096, sizeof(big), _mtime(p), ck[2] };
		g[1] = (struct mover_verify_range){ "d/big", 4096, 4096, sizeof(big), _mtime(p), ck2 };
	}
	r.source = src;
	r.dest = dst;
	s.e = e;
	s.n = 2;
	s.rg = g;
	s.nr = 2;
	rc = mover_verify_run(&r, &s, NULL, &res, err, sizeof(err));
	ok(rc == 0 && res.files == 2 && res.ranges == 2 && res.bytes == 2 * (15 + 28 + 8192),
	   "as recorded: every file and range read back at both ends (rc %d, %lld bytes) %s",
	   rc, (long long)res.bytes, rc < 0 ? err : "");
	mover_verify_result_free(&res);

	/* The copy of d/b changed (same size): that file, named, and only it. */
	snprintf(p, sizeof(p), "%s/d/b", dst);
	_write(p, "SECOND FILE, IN A DIRECTORY\n", 28);
	rc = mover_verify_run(&r, &s, NULL, &res, err, sizeof(err));
	ok(rc == 1 && res.mismatched == 1 && res.rmismatched == 0 && res.bad &&
	   strcmp(res.bad[0], "d/b") == 0, "a copy unlike its record: found (rc %d)", rc);
	contains(res.first, "'d/b' at the destination reads xxh128:", "the reason names it");
	contains(res.first, ck[1], "and the checksum its mover recorded");
	mover_verify_result_free(&res);
	_write(p, data[1], strlen(data[1]));

	/* A record whose checksums the copy never had (a forged one). */
	e[0].cks_src = e[0].cks_dst = "xxh128:00000000000000000000000000000000";
	rc = mover_verify_run(&r, &s, NULL, &res, err, sizeof(err));
	ok(rc == 1 && res.mismatched == 1 && strcmp(res.bad[0], "a") == 0,
	   "a forged checksum: found");
	mover_verify_result_free(&res);
	e[0].cks_src = e[0].cks_dst = ck[0];

	/* The copy replaced by a link to a file that hashes right: not followed. */
	snprintf(p, sizeof(p), "%s/a", dst);
	unlink(p);
	{
		char target[700];

		snprintf(target, sizeof(target), "%s/a", src);
		(void)!symlink(target, p);
	}
	rc = mover_verify_run(&r, &s, NULL, &res, err, sizeof(err));
	ok(rc == 1 && res.mismatched == 1 && strcmp(res.bad[0], "a") == 0,
	   "a symbolic link in place of the copy is not read through");
	contains(res.first, "cannot be read back", "it says the copy cannot be read back");
	mover_verify_result_free(&res);
	unlink(p);
	_write(p, data[0], strlen(data[0]));

	/* The copy never made: found. */
	unlink(p);
	rc = mover_verify_run(&r, &s, NULL, &res, err, sizeof(err));
	ok(rc == 1 && res.mismatched == 1, "a file never copied: found");
	mover_verify_result_free(&res);
	_write(p, data[0], strlen(data[0]));

	/* The second range changed in the temporary file: that range. */
	snprintf(p, sizeof(p), "%s/d/%s", dst, tmp);
	big[5000] ^= 1;
	_write(p, big, sizeof(big));
	rc = mover_verify_run(&r, &s, NULL, &res, err, sizeof(err));
	ok(rc == 1 && res.mismatched == 0 && res.rmismatched == 1 && res.badr[0] == 1,
	   "a range unlike its record: found, and only it (rc %d)", rc);
	contains(res.first, "'d/big' bytes 4096+4096 at the destination read", "named with its bytes");
	mover_verify_result_free(&res);
	big[5000] ^= 1;
	_write(p, big, sizeof(big));

	/* The copy right but the source is not what the mover said it read. */
	snprintf(p, sizeof(p), "%s/d/big", src);
	{
		int64_t was = g[0].mtime_ns;

		big[10] ^= 1;
		_write(p, big, sizeof(big));
		big[10] ^= 1;
		g[0].mtime_ns = g[1].mtime_ns = _mtime(p);
		rc = mover_verify_run(&r, &s, NULL, &res, err, sizeof(err));
		ok(rc == 1 && res.rmismatched == 1 && res.badr[0] == 0,
		   "an unchanged source unlike the range recorded: found");
		contains(res.first, "the source reads", "it says the source differs");
		mover_verify_result_free(&res);
		g[0].mtime_ns = g[1].mtime_ns = was;
	}

	/* The source changed since (another mtime): the final pass's business. */
	rc = mover_verify_run(&r, &s, NULL, &res, err, sizeof(err));
	ok(rc == 0, "a source changed since the mover read it is not compared");
	mover_verify_result_free(&res);

	/* No destination at all: the pass cannot be made, said so. */
	snprintf(p, sizeof(p), "%s/none", _dir);
	r.dest = p;
	rc = mover_verify_run(&r, &s, NULL, &res, err, sizeof(err));
	ok(rc == -1, "no destination: the pass fails");
	contains(err, "the owner cannot open the destination", "and says why");
	mover_verify_result_free(&res);
}

int main(void)
{
	if (!mkdtemp(_dir)) {
		printf("Bail out! mkdtemp: %s\n", strerror(errno));
		return 1;
	}
	_tokens();
	_verify();
	tap_rmtree(_dir);
	return tap_done();
}
