/* test_checksum.c - SHA-256 against FIPS 180 vectors; xxh128 streaming. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "checksum.h"
#include "tap.h"

static void _sha_hex(const void *data, size_t len, size_t step, char *out)
{
	struct cksum c;
	const char *p = data;

	cksum_init(&c, CKSUM_SHA256);
	for (size_t off = 0; off < len; off += step)
		cksum_update(&c, p + off, len - off < step ? len - off : step);
	cksum_final(&c, out);
}

int main(void)
{
	char out[CKSUM_HEX_MAX], out2[CKSUM_HEX_MAX];
	const char *m448 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
	char *million = malloc(1000000);
	enum cksum_algo a;

	_sha_hex("", 0, 1, out);
	ok(strcmp(out, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0,
	   "sha256 of the empty string");
	_sha_hex("abc", 3, 3, out);
	ok(strcmp(out, "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0,
	   "sha256 of 'abc'");
	_sha_hex(m448, strlen(m448), 7, out);
	ok(strcmp(out, "sha256:248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0,
	   "sha256 of the 448-bit message, fed 7 bytes at a time");
	memset(million, 'a', 1000000);
	_sha_hex(million, 1000000, 4093, out);
	ok(strcmp(out, "sha256:cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0,
	   "sha256 of one million 'a'");
	_sha_hex(million, 64, 64, out);
	_sha_hex(million, 64, 1, out2);
	ok(strcmp(out, out2) == 0, "sha256: block-sized input, whole vs byte by byte");

	{
		struct cksum c;
		XXH128_hash_t h = XXH3_128bits(million, 1000000);
		XXH128_canonical_t can;
		char want[CKSUM_HEX_MAX];

		XXH128_canonicalFromHash(&can, h);
		strcpy(want, "xxh128:");
		for (int i = 0; i < 16; i++)
			snprintf(want + 7 + 2 * i, 3, "%02x", can.digest[i]);
		cksum_init(&c, CKSUM_XXH128);
		for (size_t off = 0; off < 1000000; off += 65521)
			cksum_update(&c, million + off, 1000000 - off < 65521 ? 1000000 - off : 65521);
		cksum_final(&c, out);
		ok(strcmp(out, want) == 0, "xxh128 streamed equals one-shot XXH3-128 (%s)", out);
		ok(strlen(out) == 7 + 32, "xxh128 hex is 32 digits");
	}
	million[500000] = 'b';
	_sha_hex(million, 1000000, 4093, out2);
	ok(strcmp(out, out2) != 0, "a changed byte changes the checksum");
	ok(cksum_algo_from_name("SHA256", &a) == 0 && a == CKSUM_SHA256, "name lookup sha256");
	ok(cksum_algo_from_name("xxh128", &a) == 0 && a == CKSUM_XXH128, "name lookup xxh128");
	ok(cksum_algo_from_name("md5", &a) < 0, "unknown algorithm refused");
	free(million);
	return tap_done();
}
