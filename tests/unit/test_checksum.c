/*
 * test_checksum.c - common/checksum.c: SHA-256 against FIPS 180 vectors,
 * MD5 against RFC 1321's, xxh128 streaming against the one-shot call, and
 * the strict base64 decoder (RFC 4648 vectors and malformed input).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "checksum.h"
#include "tests/tap.h"

static void _hash(enum cksum_algo algo, const void *data, size_t len, size_t step, char *out)
{
	struct cksum c;
	const char *p = data;

	if (cksum_init(&c, algo) < 0) {
		snprintf(out, CKSUM_HEX_MAX, "cksum_init failed");
		return;
	}
	for (size_t off = 0; off < len; off += step)
		cksum_update(&c, p + off, len - off < step ? len - off : step);
	cksum_final(&c, out);
}

static void _sha_hex(const void *data, size_t len, size_t step, char *out)
{
	_hash(CKSUM_SHA256, data, len, step, out);
}

static void _test_md5(const char *million)
{
	char out[CKSUM_HEX_MAX];
	const char *digits = "1234567890123456789012345678901234567890"
			     "1234567890123456789012345678901234567890";

	_hash(CKSUM_MD5, "", 0, 1, out);
	is_str(out, "md5:d41d8cd98f00b204e9800998ecf8427e", "md5 of nothing");
	_hash(CKSUM_MD5, "abc", 3, 1, out);
	is_str(out, "md5:900150983cd24fb0d6963f7d28e17f72", "md5 of abc, byte by byte");
	_hash(CKSUM_MD5, digits, strlen(digits), 13, out);
	is_str(out, "md5:57edf4a22be3c955ac49da2e2107b67a", "md5 of 80 digits");
	_hash(CKSUM_MD5, million, 1000000, 4093, out);
	is_str(out, "md5:7707d6ae4e027c70eea2a935c2296f21", "md5 of one million 'a'");
	{
		/* 1 MiB + 3 bytes in uneven pieces: across block boundaries */
		static char big[(1 << 20) + 3];
		struct cksum c;

		memset(big, 'a', sizeof(big));
		ok(cksum_init(&c, CKSUM_MD5) == 0, "md5 context");
		for (size_t off = 0, step = 1; off < sizeof(big); off += step, step = step * 3 % 1000 + 1)
			cksum_update(&c, big + off, off + step > sizeof(big) ? sizeof(big) - off : step);
		cksum_final(&c, out);
		is_str(out, "md5:ff2c8815ad9e7686a3ae921be4fafaa9", "md5 fed in uneven pieces");
	}
}

static void _test_b64(void)
{
	unsigned char out[64];
	long n;

	n = cksum_b64_decode("", 0, out, sizeof(out));
	ok(n == 0, "base64: empty");
	n = cksum_b64_decode("Zg==", 4, out, sizeof(out));
	ok(n == 1 && memcmp(out, "f", 1) == 0, "base64: Zg== is f");
	n = cksum_b64_decode("Zm8=", 4, out, sizeof(out));
	ok(n == 2 && memcmp(out, "fo", 2) == 0, "base64: Zm8= is fo");
	n = cksum_b64_decode("Zm9vYmFy", 8, out, sizeof(out));
	ok(n == 6 && memcmp(out, "foobar", 6) == 0, "base64: Zm9vYmFy is foobar");
	n = cksum_b64_decode("+/+/", 4, out, sizeof(out));
	ok(n == 3 && out[0] == 0xfb && out[1] == 0xff && out[2] == 0xbf, "base64: + and /");
	n = cksum_b64_decode("Zm9vYmFy", 8, out, 5);
	ok(n == -1, "base64: output that does not fit is refused");
	n = cksum_b64_decode("Zm8=", 4, out, 2);
	ok(n == 2 && memcmp(out, "fo", 2) == 0, "base64: exact room despite padding");
	ok(cksum_b64_decode("Zm9", 3, out, sizeof(out)) == -1, "base64: length not a multiple of 4");
	ok(cksum_b64_decode("Zm=v", 4, out, sizeof(out)) == -1, "base64: '=' inside refused");
	ok(cksum_b64_decode("Z===", 4, out, sizeof(out)) == -1, "base64: three '=' refused");
	ok(cksum_b64_decode(" Zm8", 4, out, sizeof(out)) == -1, "base64: blank refused");
	ok(cksum_b64_decode("Zm-_", 4, out, sizeof(out)) == -1, "base64: URL alphabet refused");
	ok(cksum_b64_decode("Zm\0=", 4, out, sizeof(out)) == -1, "base64: NUL refused");
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
	_test_md5(million);
	{
		char sha_before[CKSUM_HEX_MAX], xxh_before[CKSUM_HEX_MAX];

		/* One byte changed: each algorithm against its own earlier result. */
		_sha_hex(million, 1000000, 4093, sha_before);
		_hash(CKSUM_XXH128, million, 1000000, 65521, xxh_before);
		million[500000] = 'b';
		_sha_hex(million, 1000000, 4093, out);
		_hash(CKSUM_XXH128, million, 1000000, 65521, out2);
		ok(strncmp(out, "sha256:", 7) == 0 && strcmp(out, sha_before) != 0,
		   "a changed byte changes the sha256 (%s)", out);
		ok(strncmp(out2, "xxh128:", 7) == 0 && strcmp(out2, xxh_before) != 0,
		   "a changed byte changes the xxh128 (%s)", out2);
	}
	ok(strcmp(cksum_hex("sha256:ab"), "ab") == 0, "cksum_hex skips the algorithm");
	_test_b64();
	ok(cksum_algo_from_name("SHA256", &a) == 0 && a == CKSUM_SHA256, "name lookup sha256");
	ok(cksum_algo_from_name("xxh128", &a) == 0 && a == CKSUM_XXH128, "name lookup xxh128");
	ok(cksum_algo_from_name("md5", &a) < 0, "unknown algorithm refused");
	free(million);
	return tap_done();
}
