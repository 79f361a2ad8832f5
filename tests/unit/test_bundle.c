/*
 * test_bundle.c - common/bundle.c: the index writer and its one strict
 * decoder. Round trips, the name-length edge (BUNDLE_PATH_MAX - 1 bytes is
 * the longest name, in plain and hex form alike), hostile lines one field
 * at a time, and the whole-index cross-checks.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "tests/tap.h"

#define XXH "xxh128:00112233445566778899aabbccddeeff"

static int _decode(const char *line, struct bundle_line *l, char *why)
{
	return bundle_line_decode(line, strlen(line), l, why, 256);
}

/* A name of n bytes: "d/" components of 200 'a's, so each stays under NAME_MAX. */
static char *_long_name(size_t n)
{
	char *s = malloc(n + 1);

	for (size_t i = 0; i < n; i++)
		s[i] = (i % 201 == 200) ? '/' : 'a';
	if (n && s[n - 1] == '/')
		s[n - 1] = 'b';
	s[n] = '\0';
	return s;
}

static void _test_round_trip(void)
{
	struct bundle_line e = {
		.type = BUNDLE_L_ENTRY, .path = "dir/f\xff.txt", .kind = BUNDLE_K_FILE,
		.num = 7, .offset = 1024, .size = 5, .mode = 0640, .mtime_ns = 1700000000123456789LL,
	}, l;
	struct bundle_header h = {
		.algo = CKSUM_SHA256, .source = "/scratch/u/run", .dest = "/archive/u/run",
		.request = 42, .job = 1234, .created = 1700000000, .uid = 1001,
	};
	char why[256], *line;

	memcpy(e.cks, XXH, sizeof(XXH));
	line = bundle_entry_line(&e);
	ok(line && strstr(line, "\"path_hex\"") && line[strlen(line) - 1] == '\n',
	   "a name that is not UTF-8 is written as path_hex");
	ok(line && _decode(line, &l, why) == 0, "the entry decodes: %s", line ? why : "no line");
	ok(l.type == BUNDLE_L_ENTRY && l.kind == BUNDLE_K_FILE && strcmp(l.path, e.path) == 0 &&
	   l.num == 7 && l.offset == 1024 && l.size == 5 && l.mode == 0640 &&
	   l.mtime_ns == e.mtime_ns && strcmp(l.cks, XXH) == 0, "every field comes back");
	bundle_line_clear(&l);
	free(line);

	e.kind = BUNDLE_K_LINK;
	e.target = "../elsewhere";
	e.path = "ln";
	line = bundle_entry_line(&e);
	ok(line && _decode(line, &l, why) == 0 && l.kind == BUNDLE_K_LINK &&
	   strcmp(l.target, "../elsewhere") == 0, "a symlink round-trips with its target");
	bundle_line_clear(&l);
	free(line);

	line = bundle_bundle_line(3, 10240, XXH, 4);
	ok(line && strncmp(line, "{\"bundle\":\"bundle-000003.tar\"", 29) == 0 &&
	   _decode(line, &l, why) == 0 && l.type == BUNDLE_L_BUNDLE && l.num == 3 &&
	   l.size == 10240 && l.members == 4, "a bundle line round-trips");
	bundle_line_clear(&l);
	free(line);

	line = bundle_header_line(&h);
	ok(line && _decode(line, &l, why) == 0 && l.type == BUNDLE_L_HEADER &&
	   l.algo == CKSUM_SHA256, "the header round-trips (sha256)");
	bundle_line_clear(&l);
	free(line);
}

/*
 * The edge the two decoders disagreed on (restore.c '>=' vs xfer_bundle.c
 * '>'): a name must fit a PATH_MAX-sized buffer with its NUL, so 4095
 * bytes is the longest, in either form; the writer refuses what the
 * decoder would reject.
 */
static void _test_name_edge(void)
{
	char *ok_name = _long_name(BUNDLE_PATH_MAX - 1), *long_name = _long_name(BUNDLE_PATH_MAX);
	struct bundle_line e = { .type = BUNDLE_L_ENTRY, .kind = BUNDLE_K_DIR, .mode = 0755 }, l;
	char why[256], *line, *hex, *text;
	size_t n;

	e.path = ok_name;
	line = bundle_entry_line(&e);
	ok(line && _decode(line, &l, why) == 0 && strlen(l.path) == BUNDLE_PATH_MAX - 1,
	   "a %d-byte name is written and decoded", BUNDLE_PATH_MAX - 1);
	bundle_line_clear(&l);
	free(line);
	e.path = long_name;
	ok(bundle_entry_line(&e) == NULL, "a %d-byte name is not written", BUNDLE_PATH_MAX);

	for (int k = 0; k < 2; k++) {
		const char *name = k ? long_name : ok_name;

		n = strlen(name);
		hex = malloc(2 * n + 1);
		for (size_t i = 0; i < n; i++)
			snprintf(hex + 2 * i, 3, "%02x", (unsigned char)name[i]);
		text = malloc(2 * n + 100);
		snprintf(text, 2 * n + 100, "{\"path_hex\":\"%s\",\"type\":\"dir\",\"mode\":493,"
			 "\"mtime_ns\":0}", hex);
		if (k)
			ok(_decode(text, &l, why) < 0, "a %zu-byte name in hex is rejected", n);
		else
			ok(_decode(text, &l, why) == 0 && strlen(l.path) == n,
			   "a %zu-byte name in hex is decoded", n);
		bundle_line_clear(&l);
		snprintf(text, 2 * n + 100, "{\"path\":\"%s\",\"type\":\"dir\",\"mode\":493,"
			 "\"mtime_ns\":0}", name);
		if (k)
			ok(_decode(text, &l, why) < 0, "a %zu-byte plain name is rejected", n);
		else
			ok(_decode(text, &l, why) == 0, "a %zu-byte plain name is decoded", n);
		bundle_line_clear(&l);
		free(text);
		free(hex);
	}
	free(ok_name);
	free(long_name);
}

static void _test_hostile_lines(void)
{
	static const char *const bad[] = {
		"", "[]", "{}", "not json",
		"{\"stagehand_index\":2,\"checksum\":\"xxh128\"}",
		"{\"stagehand_index\":1,\"checksum\":\"crc32\"}",
		"{\"path\":\"/etc/passwd\",\"type\":\"dir\",\"mode\":493,\"mtime_ns\":0}",
		"{\"path\":\"a/../../x\",\"type\":\"dir\",\"mode\":493,\"mtime_ns\":0}",
		"{\"path\":\"a//b\",\"type\":\"dir\",\"mode\":493,\"mtime_ns\":0}",
		"{\"path\":\".\",\"type\":\"dir\",\"mode\":493,\"mtime_ns\":0}",
		"{\"path\":\"a\",\"type\":\"fifo\",\"mode\":493,\"mtime_ns\":0}",
		"{\"path\":\"a\",\"type\":\"dir\",\"mode\":65535,\"mtime_ns\":0}",
		"{\"path\":\"a\",\"type\":\"dir\",\"mode\":-1,\"mtime_ns\":0}",
		"{\"path\":\"a\",\"type\":\"dir\",\"mode\":493}",
		"{\"path\":\"a\",\"path_hex\":\"62\",\"type\":\"dir\",\"mode\":493,\"mtime_ns\":0}",
		"{\"path_hex\":\"6\",\"type\":\"dir\",\"mode\":493,\"mtime_ns\":0}",
		"{\"path_hex\":\"6100\",\"type\":\"dir\",\"mode\":493,\"mtime_ns\":0}",
		"{\"path_hex\":\"zz\",\"type\":\"dir\",\"mode\":493,\"mtime_ns\":0}",
		"{\"path\":\"a\",\"type\":\"dir\",\"mode\":493,\"mtime_ns\":0,"
		"\"bundle\":\"bundle-000001.tar\",\"offset\":512}",
		"{\"path\":\"a\",\"type\":\"file\",\"mode\":420,\"mtime_ns\":0,\"size\":1,"
		"\"checksum\":\"" XXH "\",\"bundle\":\"bundle-1.tar\",\"offset\":512}",
		"{\"path\":\"a\",\"type\":\"file\",\"mode\":420,\"mtime_ns\":0,\"size\":1,"
		"\"checksum\":\"" XXH "\",\"bundle\":\"bundle-000001.tar\",\"offset\":0}",
		"{\"path\":\"a\",\"type\":\"file\",\"mode\":420,\"mtime_ns\":0,\"size\":1,"
		"\"checksum\":\"" XXH "\",\"bundle\":\"bundle-000001.tar\",\"offset\":513}",
		"{\"path\":\"a\",\"type\":\"file\",\"mode\":420,\"mtime_ns\":0,\"size\":1,"
		"\"checksum\":\"" XXH "\",\"offset\":512}",
		"{\"path\":\"a\",\"type\":\"file\",\"mode\":420,\"mtime_ns\":0,\"size\":-1,"
		"\"checksum\":\"" XXH "\"}",
		"{\"path\":\"a\",\"type\":\"file\",\"mode\":420,\"mtime_ns\":0,\"size\":1,"
		"\"checksum\":\"xxh128:0G\"}",
		"{\"path\":\"a\",\"type\":\"file\",\"mode\":420,\"mtime_ns\":0,\"size\":1}",
		"{\"path\":\"a\",\"type\":\"symlink\",\"mode\":511,\"mtime_ns\":0}",
		"{\"path\":\"a\",\"type\":\"symlink\",\"mode\":511,\"mtime_ns\":0,\"target\":\"\"}",
		"{\"path\":\"a\",\"path\":\"b\",\"type\":\"dir\",\"mode\":493,\"mtime_ns\":0}",
		"{\"bundle\":\"bundle-000001.tar\",\"size\":-5,\"checksum\":\"" XXH "\",\"members\":1}",
		"{\"bundle\":\"bundle-000001.tar\",\"size\":5,\"members\":1}",
		"{\"bundle\":\"../x.tar\",\"size\":5,\"checksum\":\"" XXH "\",\"members\":1}",
		"{\"bundle\":\"bundle-000000.tar\",\"size\":5,\"checksum\":\"" XXH "\",\"members\":1}",
	};
	int rejected = 0;

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct bundle_line l;
		char why[256];

		if (_decode(bad[i], &l, why) < 0)
			rejected++;
		else
			tap_diag("accepted: %s", bad[i]);
		bundle_line_clear(&l);
	}
	ok(rejected == (int)(sizeof(bad) / sizeof(bad[0])), "%d of %zu hostile lines rejected",
	   rejected, sizeof(bad) / sizeof(bad[0]));
}

static int _index(const char *text, long *line, char *why)
{
	struct bundle_index idx;
	int rc = bundle_index_decode(text, strlen(text), &idx, line, why, 256);

	bundle_index_free(&idx);
	return rc;
}

#define HDR "{\"stagehand_index\":1,\"checksum\":\"xxh128\"}\n"
#define B1 "{\"bundle\":\"bundle-000001.tar\",\"size\":2048,\"checksum\":\"" XXH "\",\"members\":1}\n"
#define F(path, off, size) "{\"path\":\"" path "\",\"type\":\"file\",\"mode\":420,\"mtime_ns\":0," \
	"\"size\":" #size ",\"checksum\":\"" XXH "\",\"bundle\":\"bundle-000001.tar\",\"offset\":" #off "}\n"

static void _test_index(void)
{
	struct bundle_index idx;
	char why[256] = "";
	long line;
	const char *good = HDR B1 F("b", 512, 1536) F("a", 1024, 10)
		"{\"path\":\"big\",\"type\":\"file\",\"mode\":420,\"mtime_ns\":0,\"size\":9,"
		"\"checksum\":\"" XXH "\"}\n";

	ok(bundle_index_decode(good, strlen(good), &idx, &line, why, sizeof(why)) == 0,
	   "a good index decodes (%s)", why);
	ok(idx.nbundles == 1 && idx.nents == 3 && strcmp(idx.ents[0].path, "a") == 0 &&
	   idx.ent_lines[0] == 4 && idx.ent_lines[1] == 3 && idx.ents[2].num == 0,
	   "entries sorted by path, with their line numbers");
	bundle_index_free(&idx);

	ok(_index(B1 HDR, &line, why) < 0 && line == 1, "header not first: line %ld (%s)", line, why);
	ok(_index(HDR B1 B1, &line, why) < 0 && line == 3, "bundle listed twice: line %ld", line);
	ok(_index(HDR F("a", 512, 1) B1, &line, why) < 0 && line == 2,
	   "member before its bundle: line %ld (%s)", line, why);
	ok(_index(HDR B1 F("a", 512, 1537), &line, why) < 0 && line == 3,
	   "member one byte past the end of its bundle: %s", why);
	ok(_index(HDR B1 F("a", 512, 1536), &line, why) == 0, "member ending at the bundle's end");
	ok(_index(HDR B1 F("a", 512, 1) F("a", 1024, 1), &line, why) < 0 && line == 4,
	   "the same path twice: line %ld (%s)", line, why);
	ok(_index(HDR HDR, &line, why) < 0 && line == 2, "a second header");
	ok(_index("", &line, why) < 0, "an empty index");
	ok(bundle_index_decode(HDR "\0", sizeof(HDR), &idx, &line, why, sizeof(why)) < 0,
	   "a NUL byte");
	bundle_index_free(&idx);
}

int main(void)
{
	_test_round_trip();
	_test_name_edge();
	_test_hostile_lines();
	_test_index();
	ok(bundle_name_parse("bundle-000123.tar") == 123 && bundle_name_parse("bundle-00012.tar") == 0 &&
	   bundle_name_parse("bundle-000123.tgz") == 0, "bundle names parsed strictly");
	return tap_done();
}
