/*
 * checksum.h - content checksums used to verify every copied file, and the
 * digests remote servers state (S3 ETag, Content-MD5, Digest headers).
 *
 * Owns: a small table of algorithms chosen by name: "xxh128" (XXH3 128-bit
 * from libxxhash: not cryptographic, but fast enough to verify at disk
 * speed), "sha256" and "md5" (OpenSSL's libcrypto EVP interface, which picks
 * SHA-NI/AVX2 code at run time). Results are lower-case hex strings prefixed
 * by the algorithm: "xxh128:…", "sha256:…", "md5:…". Also base64 decoding
 * (libcrypto's EVP_DecodeBlock behind a strict length/padding check).
 *
 * Must never: allocate after cksum_init, or fail on any input once
 * initialised. Shared by the daemon and the CLI (libstagehand_data).
 */
#ifndef STAGEHAND_CHECKSUM_H
#define STAGEHAND_CHECKSUM_H

#include <stddef.h>

#define CKSUM_HEX_MAX 80	/* "sha256:" + 64 hex + NUL fits */

/* md5 is never a site's verification algorithm: only for what servers state. */
enum cksum_algo { CKSUM_XXH128 = 0, CKSUM_SHA256, CKSUM_MD5 };

struct cksum {
	enum cksum_algo algo;
	void *xxh;		/* XXH3_state_t, owned (xxh128) */
	void *evp;		/* EVP_MD_CTX, owned (sha256, md5) */
};

/* Look up a verification algorithm by name (xxh128, sha256). 0, or -1 for another name. */
int cksum_algo_from_name(const char *name, enum cksum_algo *out);
/* The name of an algorithm ("xxh128", "sha256", "md5"); static string. */
const char *cksum_algo_name(enum cksum_algo algo);

/*
 * Returns 0, or -1 when memory is exhausted (c then holds nothing to
 * release). A zero-filled struct cksum may be passed to cksum_abort.
 */
int cksum_init(struct cksum *c, enum cksum_algo algo);
void cksum_update(struct cksum *c, const void *data, size_t len);
/* Write "algo:hex" into out (CKSUM_HEX_MAX bytes) and release c. */
void cksum_final(struct cksum *c, char out[CKSUM_HEX_MAX]);
/* Release c without a result; safe to call twice or on a zero-filled c. */
void cksum_abort(struct cksum *c);
/* The hex part of an "algo:hex" string (borrowed pointer into s). */
const char *cksum_hex(const char *s);

/*
 * Decode standard base64 (RFC 4648, '=' padding required, no whitespace or
 * line breaks) of n bytes at in into out (outcap bytes). Returns the decoded
 * length, or -1 for malformed input or an output that does not fit.
 */
long cksum_b64_decode(const char *in, size_t n, unsigned char *out, size_t outcap);

#endif /* STAGEHAND_CHECKSUM_H */
