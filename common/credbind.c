/* credbind.c - see credbind.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "credbind.h"

static const char _hexd[] = "0123456789abcdef";

static void _hex(const unsigned char *b, size_t n, char *out)
{
	for (size_t i = 0; i < n; i++) {
		out[2 * i] = _hexd[b[i] >> 4];
		out[2 * i + 1] = _hexd[b[i] & 15];
	}
	out[2 * n] = '\0';
}

/* n lower-case hex digits at s into b (n/2 bytes). 0, or -1 on another character. */
static int _unhex(const char *s, size_t n, unsigned char *b)
{
	for (size_t i = 0; i < n; i++) {
		const char *p = memchr(_hexd, s[i], 16);

		if (s[i] == '\0' || p == NULL)
			return -1;
		if (i % 2 == 0)
			b[i / 2] = (unsigned char)((p - _hexd) << 4);
		else
			b[i / 2] |= (unsigned char)(p - _hexd);
	}
	return 0;
}

int credbind_digest(const struct credbind_req *rq, long long t, const char *nonce,
		    unsigned char out[CREDBIND_DIGEST_LEN], char *err, size_t errlen)
{
	unsigned char nb[CREDBIND_NONCE_HEX / 2];
	char mid[96];
	unsigned int dl = 0;
	int n, ok;

	if (rq->method == NULL || rq->target == NULL || !*rq->method || !*rq->target ||
	    strchr(rq->method, '\n') || strchr(rq->target, '\n') ||
	    (rq->body == NULL && rq->body_len)) {
		snprintf(err, errlen, "request method or target missing, or holding a newline");
		return -1;
	}
	if (t < 0 || nonce == NULL || strlen(nonce) != CREDBIND_NONCE_HEX ||
	    _unhex(nonce, CREDBIND_NONCE_HEX, nb) < 0) {
		snprintf(err, errlen, "bad time or nonce for a request digest");
		return -1;
	}
	n = snprintf(mid, sizeof(mid), "%lld\n%s\n%zu\n", t, nonce, rq->body_len);
	if (n < 0 || (size_t)n >= sizeof(mid)) {
		snprintf(err, errlen, "request digest fields too long");
		return -1;
	}
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	ok = c != NULL && EVP_DigestInit_ex(c, EVP_sha256(), NULL) &&
	     EVP_DigestUpdate(c, CREDBIND_TAG "\n", sizeof(CREDBIND_TAG)) &&
	     EVP_DigestUpdate(c, rq->method, strlen(rq->method)) &&
	     EVP_DigestUpdate(c, "\n", 1) &&
	     EVP_DigestUpdate(c, rq->target, strlen(rq->target)) &&
	     EVP_DigestUpdate(c, "\n", 1) &&
	     EVP_DigestUpdate(c, mid, (size_t)n) &&
	     (rq->body_len == 0 || EVP_DigestUpdate(c, rq->body, rq->body_len)) &&
	     EVP_DigestFinal_ex(c, out, &dl) && dl == CREDBIND_DIGEST_LEN;
	EVP_MD_CTX_free(c);
	if (!ok) {
		snprintf(err, errlen, "SHA-256 failed (libcrypto)");
		return -1;
	}
	return 0;
}

int credbind_payload(const struct credbind_req *rq, long long t, char *out, size_t outlen,
		     char *err, size_t errlen)
{
	unsigned char nb[CREDBIND_NONCE_HEX / 2], d[CREDBIND_DIGEST_LEN];
	char nonce[CREDBIND_NONCE_HEX + 1], dh[2 * CREDBIND_DIGEST_LEN + 1];
	size_t got = 0;

	while (got < sizeof(nb)) {
		ssize_t r = getrandom(nb + got, sizeof(nb) - got, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			snprintf(err, errlen, "getrandom: %s", strerror(errno));
			return -1;
		}
		got += (size_t)r;
	}
	_hex(nb, sizeof(nb), nonce);
	if (credbind_digest(rq, t, nonce, d, err, errlen) < 0)
		return -1;
	_hex(d, sizeof(d), dh);
	int n = snprintf(out, outlen, CREDBIND_TAG " %lld %s %s", t, nonce, dh);
	if (n < 0 || (size_t)n >= outlen) {
		snprintf(err, errlen, "request digest payload does not fit in %zu bytes", outlen);
		return -1;
	}
	return n;
}

/* A decimal TIME: digits only, no leading zero (but "0"), at most 18 digits. */
static int _parse_time(const char *s, size_t n, long long *t)
{
	long long v = 0;

	if (n == 0 || n > 18 || (n > 1 && s[0] == '0'))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	*t = v;
	return 0;
}

enum credbind_result credbind_check(const void *payload, size_t plen,
				    const struct credbind_req *rq, long long now,
				    long long *t, unsigned char digest[CREDBIND_DIGEST_LEN],
				    char *err, size_t errlen)
{
	static const char tag[] = CREDBIND_TAG " ";
	const char *p = payload, *sp;
	unsigned char want[CREDBIND_DIGEST_LEN], got[CREDBIND_DIGEST_LEN];
	char nonce[CREDBIND_NONCE_HEX + 1], e[128];
	long long ts;
	size_t tl;

	if (payload == NULL || plen == 0) {
		snprintf(err, errlen, "the MUNGE credential is not bound to its request (no "
			 "request digest in its payload): the client is older than this "
			 "stagehandd " PACKAGE_VERSION "; install stagehand " PACKAGE_VERSION
			 " on every node that sends requests over TCP (docs/security.md, "
			 "\"Bound credentials\")");
		return CREDBIND_EMPTY;
	}
	/* tag, TIME, " ", NONCE, " ", DIGEST and nothing else. */
	sp = plen > sizeof(tag) - 1 ? memchr(p + sizeof(tag) - 1, ' ',
					    plen - (sizeof(tag) - 1)) : NULL;
	tl = sp ? (size_t)(sp - p) - (sizeof(tag) - 1) : 0;
	if (plen <= sizeof(tag) - 1 || memcmp(p, tag, sizeof(tag) - 1) != 0 || sp == NULL ||
	    _parse_time(p + sizeof(tag) - 1, tl, &ts) < 0 ||
	    plen != (size_t)(sp - p) + 1 + CREDBIND_NONCE_HEX + 1 + 2 * CREDBIND_DIGEST_LEN ||
	    sp[1 + CREDBIND_NONCE_HEX] != ' ' ||
	    _unhex(sp + 1 + CREDBIND_NONCE_HEX + 1, 2 * CREDBIND_DIGEST_LEN, got) < 0) {
		snprintf(err, errlen, "the MUNGE credential's payload is not a request digest "
			 "(expected \"" CREDBIND_TAG " TIME NONCE DIGEST\"): a client of another "
			 "version, or not stagehand's");
		return CREDBIND_MALFORMED;
	}
	memcpy(nonce, sp + 1, CREDBIND_NONCE_HEX);
	nonce[CREDBIND_NONCE_HEX] = '\0';
	if (credbind_digest(rq, ts, nonce, want, e, sizeof(e)) < 0) {
		snprintf(err, errlen, "the MUNGE credential's payload is not a request digest "
			 "(%s)", e);
		return CREDBIND_MALFORMED;
	}
	if (CRYPTO_memcmp(want, got, sizeof(want)) != 0) {
		snprintf(err, errlen, "the MUNGE credential was made for another request (its "
			 "digest does not match this method, path, query and body): refused");
		return CREDBIND_MISMATCH;
	}
	if (ts < now - CREDBIND_WINDOW_S || ts > now + CREDBIND_WINDOW_S) {
		snprintf(err, errlen, "the MUNGE credential's request time is %lld s %s the "
			 "daemon's clock, outside the %d s window: check the clocks (NTP) of "
			 "the sending node and this host", ts < now ? now - ts : ts - now,
			 ts < now ? "behind" : "ahead of", CREDBIND_WINDOW_S);
		return CREDBIND_STALE;
	}
	*t = ts;
	if (digest)
		memcpy(digest, got, sizeof(got));
	return CREDBIND_OK;
}
