/* checksum.c - see checksum.h. */
#include "config.h"

#include <openssl/evp.h>
#include <string.h>
#include <strings.h>
#include <xxhash.h>

#include "checksum.h"
#include "evpguard.h"

int cksum_algo_from_name(const char *name, enum cksum_algo *out)
{
	if (strcasecmp(name, "xxh128") == 0)
		*out = CKSUM_XXH128;
	else if (strcasecmp(name, "sha256") == 0)
		*out = CKSUM_SHA256;
	else
		return -1;
	return 0;
}

const char *cksum_algo_name(enum cksum_algo algo)
{
	return algo == CKSUM_SHA256 ? "sha256" : algo == CKSUM_MD5 ? "md5" : "xxh128";
}

int cksum_init(struct cksum *c, enum cksum_algo algo)
{
	int ok;

	c->algo = algo;
	c->xxh = NULL;
	c->evp = NULL;
	if (algo == CKSUM_XXH128) {
		c->xxh = XXH3_createState();
		if (!c->xxh)
			return -1;
		XXH3_128bits_reset(c->xxh);
		return 0;
	}
	c->evp = EVP_MD_CTX_new();
	if (!c->evp)
		return -1;
	evpguard_enter();             /* the fetch takes OpenSSL's locks (evpguard.h) */
	ok = EVP_DigestInit_ex(c->evp, algo == CKSUM_SHA256 ? EVP_sha256() : EVP_md5(), NULL);
	evpguard_leave();
	if (!ok) {
		EVP_MD_CTX_free(c->evp);
		c->evp = NULL;
		return -1;
	}
	return 0;
}

void cksum_update(struct cksum *c, const void *data, size_t len)
{
	if (c->evp)
		EVP_DigestUpdate(c->evp, data, len);
	else if (c->xxh)
		XXH3_128bits_update(c->xxh, data, len);
}

static void _hex(const unsigned char *b, size_t n, char *out)
{
	static const char d[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = d[b[i] >> 4];
		out[2 * i + 1] = d[b[i] & 15];
	}
	out[2 * n] = '\0';
}

void cksum_final(struct cksum *c, char out[CKSUM_HEX_MAX])
{
	const char *name = cksum_algo_name(c->algo);
	size_t nl = strlen(name);

	memcpy(out, name, nl);
	out[nl] = ':';
	if (c->evp) {
		unsigned char md[EVP_MAX_MD_SIZE];
		unsigned int n = 0;

		/* Cannot fail for a context EVP_DigestInit_ex accepted. */
		EVP_DigestFinal_ex(c->evp, md, &n);
		_hex(md, n, out + nl + 1);
	} else if (c->xxh) {
		XXH128_canonical_t can;

		XXH128_canonicalFromHash(&can, XXH3_128bits_digest(c->xxh));
		_hex(can.digest, sizeof(can.digest), out + nl + 1);
	} else {
		out[nl + 1] = '\0';
	}
	cksum_abort(c);
}

void cksum_abort(struct cksum *c)
{
	if (c->xxh)
		XXH3_freeState(c->xxh);
	c->xxh = NULL;
	if (c->evp)
		EVP_MD_CTX_free(c->evp);
	c->evp = NULL;
}

const char *cksum_hex(const char *s)
{
	const char *p = strchr(s, ':');

	return p ? p + 1 : s;
}

long cksum_b64_decode(const char *in, size_t n, unsigned char *out, size_t outcap)
{
	static const char alpha[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	unsigned char tmp[3 * 64];
	unsigned char *dst;
	size_t pad, want;
	int got;

	if (n == 0)
		return 0;
	if (n % 4 || n > (size_t)1 << 30)
		return -1;
	pad = in[n - 1] == '=' ? (in[n - 2] == '=' ? 2 : 1) : 0;
	/*
	 * EVP_DecodeBlock is lax: it trims blanks, accepts '=' anywhere and
	 * counts padding as zero bytes. Only the alphabet, then 0-2 '=', pass.
	 */
	for (size_t i = 0; i < n - pad; i++)
		if (!in[i] || !strchr(alpha, in[i]))
			return -1;
	want = n / 4 * 3;
	if (want - pad > outcap)
		return -1;
	/* It also writes the padding bytes: decode where there is room for them. */
	dst = outcap >= want ? out : want <= sizeof(tmp) ? tmp : NULL;
	if (!dst)
		return -1;
	got = EVP_DecodeBlock(dst, (const unsigned char *)in, (int)n);
	if (got < 0 || (size_t)got != want)
		return -1;
	if (dst != out)
		memcpy(out, dst, want - pad);
	return (long)(want - pad);
}
