/* mover_auth.c - see mover_auth.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "evpguard.h"
#include "mover_auth.h"

struct mover_auth {
	unsigned char key[MOVER_KEY_LEN];  /* read only once made */
};

static int _random(unsigned char *buf, size_t len)
{
	size_t got = 0;

	while (got < len) {
		ssize_t r = getrandom(buf + got, len - got, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return 0;
}

/* The key at path: read, or made (O_EXCL) when missing. 0, or -1 with err. */
static int _key_file(const char *path, unsigned char *key, char *err, size_t errlen)
{
	struct stat st;
	ssize_t n;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);

	if (fd < 0 && errno == ENOENT) {
		if (_random(key, MOVER_KEY_LEN) < 0) {
			snprintf(err, errlen, "getrandom for the mover key: %s", strerror(errno));
			return -1;
		}
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0) {
			snprintf(err, errlen, "cannot create the mover key %s: open: %s", path,
				 strerror(errno));
			return -1;
		}
		n = write(fd, key, MOVER_KEY_LEN);
		if (n != MOVER_KEY_LEN || fsync(fd) < 0) {
			snprintf(err, errlen, "cannot write the mover key %s: %s", path,
				 n < 0 ? strerror(errno) : "short write");
			close(fd);
			unlink(path);
			return -1;
		}
		close(fd);
		return 0;
	}
	if (fd < 0) {
		snprintf(err, errlen, "cannot open the mover key %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 077) || st.st_size != MOVER_KEY_LEN) {
		snprintf(err, errlen, "the mover key %s must be a regular file of %d bytes, owned by "
			 "uid %u with mode 0600: remove it, and the next start makes a new one",
			 path, MOVER_KEY_LEN, (unsigned)geteuid());
		close(fd);
		return -1;
	}
	n = read(fd, key, MOVER_KEY_LEN);
	close(fd);
	if (n != MOVER_KEY_LEN) {
		snprintf(err, errlen, "cannot read the mover key %s: %s", path,
			 n < 0 ? strerror(errno) : "short read");
		return -1;
	}
	return 0;
}

struct mover_auth *mover_auth_new(const char *key_path, char *err, size_t errlen)
{
	struct mover_auth *a = calloc(1, sizeof(*a));

	if (!a) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (key_path ? _key_file(key_path, a->key, err, errlen) < 0 :
	    _random(a->key, MOVER_KEY_LEN) < 0) {
		if (!key_path)
			snprintf(err, errlen, "getrandom for the mover key: %s", strerror(errno));
		free(a);
		return NULL;
	}
	return a;
}

void mover_auth_free(struct mover_auth *a)
{
	if (!a)
		return;
	OPENSSL_cleanse(a->key, sizeof(a->key));
	free(a);
}

static int _mac(const struct mover_auth *a, int64_t req, int idx, int attempt,
		unsigned char out[32])
{
	char msg[128];
	unsigned int len = 0;
	int n = snprintf(msg, sizeof(msg), "stagehand-mover-v1 %lld %d %d", (long long)req, idx,
			 attempt);
	unsigned char *r;

	if (n < 0 || n >= (int)sizeof(msg))
		return -1;
	evpguard_enter();             /* libcrypto sets up a digest (evpguard.h) */
	r = HMAC(EVP_sha256(), a->key, MOVER_KEY_LEN, (const unsigned char *)msg, (size_t)n, out,
		 &len);
	evpguard_leave();
	return r && len == 32 ? 0 : -1;
}

int mover_auth_token(const struct mover_auth *a, int64_t req, int idx, int attempt,
		     char out[MOVER_TOKEN_HEX + 1])
{
	unsigned char mac[32];

	if (_mac(a, req, idx, attempt, mac) < 0)
		return -1;
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", mac[i]);
	OPENSSL_cleanse(mac, sizeof(mac));
	return 0;
}

int mover_auth_token_ok(const struct mover_auth *a, int64_t req, int idx, int attempt,
			const char *given)
{
	char want[MOVER_TOKEN_HEX + 1];
	int ok;

	if (!given || strlen(given) != MOVER_TOKEN_HEX ||
	    mover_auth_token(a, req, idx, attempt, want) < 0)
		return 0;
	ok = CRYPTO_memcmp(want, given, MOVER_TOKEN_HEX) == 0;
	OPENSSL_cleanse(want, sizeof(want));
	return ok;
}
