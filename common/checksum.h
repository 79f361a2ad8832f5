/*
 * checksum.h - content checksums used to verify every copied file.
 *
 * Owns: a small table of algorithms chosen by name: "sha256" (implemented
 * here, FIPS 180-4) and "xxh128" (XXH3 128-bit from libxxhash: not
 * cryptographic, but fast enough to verify at disk speed). Results are
 * lower-case hex strings prefixed by the algorithm: "xxh128:…", "sha256:…".
 *
 * Must never: allocate after cksum_init, or fail on any input.
 */
#ifndef STAGEHAND_CHECKSUM_H
#define STAGEHAND_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#define CKSUM_HEX_MAX 80	/* "sha256:" + 64 hex + NUL fits */

struct sha256_ctx {
	uint32_t h[8];
	uint64_t len;		/* bytes hashed */
	uint8_t buf[64];
	size_t nbuf;
};

void sha256_init(struct sha256_ctx *c);
void sha256_update(struct sha256_ctx *c, const void *data, size_t len);
void sha256_final(struct sha256_ctx *c, uint8_t out[32]);

enum cksum_algo { CKSUM_XXH128 = 0, CKSUM_SHA256 };

struct cksum {
	enum cksum_algo algo;
	struct sha256_ctx sha;
	void *xxh;		/* XXH3_state_t, owned */
};

/* Look up an algorithm by name. Returns 0 or -1 for an unknown name. */
int cksum_algo_from_name(const char *name, enum cksum_algo *out);

/* Returns 0, or -1 when memory is exhausted. */
int cksum_init(struct cksum *c, enum cksum_algo algo);
void cksum_update(struct cksum *c, const void *data, size_t len);
/* Write "algo:hex" into out (CKSUM_HEX_MAX bytes) and release c. */
void cksum_final(struct cksum *c, char out[CKSUM_HEX_MAX]);
/* Release c without a result. */
void cksum_abort(struct cksum *c);

#endif /* STAGEHAND_CHECKSUM_H */
