/*
 * test_mpu.c - S3 multipart upload without a server: how a file is cut into
 * parts, the ETag S3 gives the object, which ETags and answers are taken
 * from a server, the S3PartSize key, and the daemon's record of an upload
 * in progress (queue_mpu.h).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "conf.h"
#include "queue.h"
#include "queue_mpu.h"
#include "tests/tap.h"
#include "xfer_url_int.h"
#include "xfer_url_xml.h"

#define MiB (1LL << 20)

static void _test_plan(void)
{
	struct url__mpu_plan p;
	char err[256];

	ok(url__mpu_plan(12 * MiB, 5 * MiB, &p, err, sizeof(err)) == 0 && p.nparts == 3 &&
	   p.part_size == 5 * MiB && !p.raised, "12 MiB in parts of 5 MiB: 3 parts (%d)", p.nparts);
	ok(url__mpu_plan(15 * MiB, 5 * MiB, &p, err, sizeof(err)) == 0 && p.nparts == 3,
	   "15 MiB in parts of 5 MiB: exactly 3 parts, no empty fourth (%d)", p.nparts);
	ok(url__mpu_plan(15 * MiB + 1, 5 * MiB, &p, err, sizeof(err)) == 0 && p.nparts == 4,
	   "one byte more: a fourth part of 1 byte (%d)", p.nparts);
	ok(url__mpu_plan(10000 * 5 * MiB, 5 * MiB, &p, err, sizeof(err)) == 0 &&
	   p.nparts == 10000 && !p.raised, "10,000 parts exactly: the part size is kept");
	ok(url__mpu_plan(10000 * 5 * MiB + 1, 5 * MiB, &p, err, sizeof(err)) == 0 && p.raised &&
	   p.part_size == 6 * MiB && p.nparts == 8334,
	   "one byte more: parts raised to the next whole MiB (%lld bytes, %d parts)",
	   (long long)p.part_size, p.nparts);
	ok(url__mpu_plan(1LL << 40, 64 * MiB, &p, err, sizeof(err)) == 0 && p.raised &&
	   p.nparts <= 10000 && p.part_size % MiB == 0 && p.part_size == 105 * MiB,
	   "1 TiB in parts of 64 MiB would be 16,384: parts of 105 MiB, %d of them", p.nparts);
	ok(url__mpu_plan(5LL << 40, 5 * MiB, &p, err, sizeof(err)) == 0 && p.nparts <= 10000 &&
	   (int64_t)p.nparts * p.part_size >= (5LL << 40) && p.part_size <= (5LL << 30),
	   "5 TiB, S3's largest object, fits (%d parts of %lld bytes)", p.nparts,
	   (long long)p.part_size);
	ok(url__mpu_plan((5LL << 40) + 1, 5 * MiB, &p, err, sizeof(err)) < 0 &&
	   strstr(err, "5 TiB"), "one byte more than 5 TiB is refused: %s", err);
	ok(url__mpu_plan(12 * MiB, 4 * MiB, &p, err, sizeof(err)) < 0,
	   "a part under S3's 5 MiB minimum is no plan");
}

static void _test_etag(void)
{
	/* md5("abc"), md5("def"); the object's ETag is md5 of their 32 bytes, "-2". */
	static const char two[][33] = { "900150983cd24fb0d6963f7d28e17f72",
					"4ed9407630eb1000c0f6b63842defa7d" };
	static const char upper[][33] = { "900150983CD24FB0D6963F7D28E17F72" };
	static const char bad[][33] = { "900150983cd24fb0d6963f7d28e17fzz" };
	char out[64];

	ok(url__mpu_etag(two, 2, out, sizeof(out)) == 0 &&
	   strcmp(out, "4c8e93283780e078db9e0c6b9b3f8043-2") == 0, "two parts: %s", out);
	ok(url__mpu_etag(two, 1, out, sizeof(out)) == 0 &&
	   strcmp(out, "af5da9f45af7a300e3aded972f8ff687-1") == 0,
	   "one part: the md5 of its md5, '-1' (not the part's own md5): %s", out);
	ok(url__mpu_etag(upper, 1, out, sizeof(out)) == 0 &&
	   strcmp(out, "af5da9f45af7a300e3aded972f8ff687-1") == 0, "upper-case hex reads the same");
	ok(url__mpu_etag(bad, 1, out, sizeof(out)) < 0, "a part md5 that is not hex: no ETag");
	ok(url__mpu_etag(two, 0, out, sizeof(out)) < 0, "no parts: no ETag");
	ok(url__mpu_etag(two, 2, out, 20) < 0, "an ETag that does not fit is an error");

	ok(url__mpu_etag_ok("\"900150983cd24fb0d6963f7d28e17f72\"") &&
	   url__mpu_etag_ok("\"4c8e93283780e078db9e0c6b9b3f8043-2\"") &&
	   url__mpu_etag_ok("\"a1b2/c+d=e_f.g:h\""), "usual ETags are taken");
	ok(!url__mpu_etag_ok("900150983cd24fb0d6963f7d28e17f72") && !url__mpu_etag_ok("\"\"") &&
	   !url__mpu_etag_ok("\"a\"b\"") && !url__mpu_etag_ok("\"a<b>\"") &&
	   !url__mpu_etag_ok("\"a&amp;\"") && !url__mpu_etag_ok("\"a b\"") &&
	   !url__mpu_etag_ok("\"a\x01\"") && !url__mpu_etag_ok("\""),
	   "unquoted, empty, or with a quote, '<', '&', a blank or a control char: refused");
	{
		char longtag[120];

		memset(longtag, 'a', sizeof(longtag) - 1);
		longtag[0] = longtag[sizeof(longtag) - 2] = '"';
		longtag[sizeof(longtag) - 1] = '\0';
		ok(!url__mpu_etag_ok(longtag), "an ETag of %zu bytes is refused", strlen(longtag));
	}
}

static int _parse(const char *doc, struct urlx_listing *l, char *err)
{
	return urlx_parse(URLX_S3_MPU, doc, strlen(doc), l, err, 256);
}

static void _test_xml(void)
{
	struct urlx_listing l;
	char err[256], big[6000];

	ok(_parse("<?xml version=\"1.0\"?><InitiateMultipartUploadResult xmlns=\"http://s3."
		  "amazonaws.com/doc/2006-03-01/\"><Bucket>b</Bucket><Key>k</Key><UploadId> abc.D-e_9"
		  " </UploadId></InitiateMultipartUploadResult>", &l, err) == 0 &&
	   !strcmp(l.mpu.root, "InitiateMultipartUploadResult") &&
	   !strcmp(l.mpu.upload_id, "abc.D-e_9"), "Initiate: the upload id (%s)", l.mpu.upload_id);
	urlx_free(&l);
	ok(_parse("<ListPartsResult><UploadId>u</UploadId><NextPartNumberMarker>2"
		  "</NextPartNumberMarker><IsTruncated>true</IsTruncated>"
		  "<Part><PartNumber>1</PartNumber><ETag>\"aa\"</ETag><Size>5242880</Size></Part>"
		  "<Part><PartNumber>x2</PartNumber><ETag>&quot;bb&quot;</ETag><Size>7</Size></Part>"
		  "<Part><PartNumber>3</PartNumber><Size>7</Size></Part>"
		  "<Other><Part><PartNumber>9</PartNumber><ETag>\"cc\"</ETag></Part></Other>"
		  "</ListPartsResult>", &l, err) == 0 && l.n == 2 && l.dropped == 1 &&
	   l.items[0].part == 1 && l.items[0].size == 5242880 &&
	   !strcmp(l.items[0].name, "\"aa\"") && l.items[1].part == -1 &&
	   !strcmp(l.items[1].name, "\"bb\"") && l.truncated && l.mpu.next_marker == 2,
	   "ListParts: parts with number, ETag and size; a number that is no number is -1, a part "
	   "without an ETag dropped, a Part below another element ignored");
	urlx_free(&l);
	ok(_parse("<CompleteMultipartUploadResult><Location>x</Location><ETag>\"4c8e-2\"</ETag>"
		  "</CompleteMultipartUploadResult>", &l, err) == 0 &&
	   !strcmp(l.mpu.etag, "\"4c8e-2\""), "Complete: the object's ETag (%s)", l.mpu.etag);
	urlx_free(&l);
	ok(_parse("\n   \n<Error><Code>InternalError</Code><Message>We encountered an internal "
		  "error.</Message></Error>", &l, err) == 0 && !strcmp(l.mpu.root, "Error") &&
	   !strcmp(l.mpu.code, "InternalError") && strstr(l.mpu.message, "internal"),
	   "an Error after the blanks S3 sends while it completes: its code and message");
	urlx_free(&l);
	ok(_parse("<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY a \"aaaa\">]>"
		  "<InitiateMultipartUploadResult><UploadId>&a;</UploadId>"
		  "</InitiateMultipartUploadResult>", &l, err) < 0 && strstr(err, "DOCTYPE"),
	   "a DOCTYPE is refused: %s", err);
	urlx_free(&l);
	snprintf(big, sizeof(big), "<InitiateMultipartUploadResult><UploadId>%01100d"
		 "</UploadId></InitiateMultipartUploadResult>", 0);
	ok(_parse(big, &l, err) < 0 && strstr(err, "upload id too long"),
	   "an upload id of 1100 bytes is refused: %s", err);
	urlx_free(&l);
	snprintf(big, sizeof(big), "<CompleteMultipartUploadResult><ETag>\"%0200d\"</ETag>"
		 "</CompleteMultipartUploadResult>", 0);
	ok(_parse(big, &l, err) < 0 && strstr(err, "ETag too long"),
	   "an object ETag of 202 bytes is refused: %s", err);
	urlx_free(&l);
	snprintf(big, sizeof(big), "<Error><Code>%0300d</Code><Message>m</Message></Error>", 0);
	ok(_parse(big, &l, err) == 0 && l.mpu.code[0] == '\0' && !strcmp(l.mpu.message, "m"),
	   "an error code too long to keep is left out, not overflowed");
	urlx_free(&l);
	ok(_parse("<ListPartsResult><Part><PartNumber>99999999999999999999</PartNumber>"
		  "<ETag>\"a\"</ETag><Size>-5</Size></Part></ListPartsResult>", &l, err) == 0 &&
	   l.n == 1 && l.items[0].part == -1 && l.items[0].size == -1,
	   "a part number past int64 and a negative size read as unknown (-1)");
	urlx_free(&l);
	ok(_parse("<ListPartsResult><Part><PartNumber>1", &l, err) < 0,
	   "a truncated document is an error, not a partial list");
	urlx_free(&l);
}

static void _test_conf(void)
{
	struct conf *c = conf_create();
	char err[256];

	ok(c && c->s3_part_size == (uint64_t)(64 * MiB), "S3PartSize defaults to 64M");
	ok(c && conf_parse_line(c, "S3PartSize=5M", "t", 1, err, sizeof(err)) == 0 &&
	   c->s3_part_size == (uint64_t)(5 * MiB), "S3PartSize=5M, S3's minimum, is taken");
	conf_destroy(c);
	c = conf_create();
	ok(c && conf_parse_line(c, "S3PartSize=4M", "t", 1, err, sizeof(err)) < 0 &&
	   strstr(err, "5M to 5G"), "S3PartSize=4M is refused: %s", err);
	conf_destroy(c);
	c = conf_create();
	ok(c && conf_parse_line(c, "S3PartSize=6G", "t", 1, err, sizeof(err)) < 0,
	   "S3PartSize=6G (over S3's 5 GiB part) is refused");
	conf_destroy(c);
	c = conf_create();
	ok(c && conf_parse_line(c, "S3PartSize=5G", "t", 1, err, sizeof(err)) == 0,
	   "S3PartSize=5G is taken");
	{
		struct xfer_ctx ctx = { .conf = c };
		struct url__run r = { .ctx = &ctx, .proto = P_S3 };

		c->s3_part_size = 5 * MiB;
		ok(!url__mpu_wanted(&r, 5 * MiB) && url__mpu_wanted(&r, 5 * MiB + 1),
		   "a file larger than S3PartSize goes in parts, one of its size in one PUT");
		r.proto = P_HTTP;
		ok(!url__mpu_wanted(&r, 1LL << 40), "only S3 uploads go in parts");
	}
	conf_destroy(c);
}

static struct xfer_rec _rec(int code, int64_t a, int64_t b, int64_t c, const char *cks)
{
	struct xfer_rec r;

	memset(&r, 0, sizeof(r));
	r.type = XR_MPU;
	r.code = code;
	r.a = a;
	r.b = b;
	r.c = c;
	snprintf(r.cks, sizeof(r.cks), "%s", cks ? cks : "");
	return r;
}

static void _test_queue(void)
{
	static const char md5[] = "900150983cd24fb0d6963f7d28e17f72";
	char dir[] = "/tmp/test_mpu_XXXXXX", db[300], err[512];
	struct xfer_mpu_ent *e = NULL;
	struct xfer_rec rec;
	struct queue *q;
	size_t n = 9;

	if (!mkdtemp(dir)) {
		ok(0, "a scratch directory");
		return;
	}
	snprintf(db, sizeof(db), "%s/q.db", dir);
	q = queue_open(db, err, sizeof(err));
	ok(q != NULL, "a database with the upload tables (%s)", q ? "ok" : err);
	if (!q)
		return;
	rec = _rec(XFER_MPU_BEGIN, 12 * MiB, 1234, 5 * MiB, NULL);
	ok(queue_mpu_apply(q, 7, &rec, "d/big.bin", "up-1", err, sizeof(err)) == 0, "begin");
	rec = _rec(XFER_MPU_PART, 2, 5 * MiB, 0, md5);
	ok(queue_mpu_apply(q, 7, &rec, "d/big.bin", "up-1", err, sizeof(err)) == 0, "part 2");
	rec = _rec(XFER_MPU_PART, 1, 5 * MiB, 0, md5);
	ok(queue_mpu_apply(q, 7, &rec, "d/big.bin", "up-1", err, sizeof(err)) == 0, "part 1");
	rec = _rec(XFER_MPU_PART, 3, 2 * MiB, 0, md5);
	ok(queue_mpu_apply(q, 7, &rec, "d/big.bin", "up-0", err, sizeof(err)) == 0,
	   "a part of another upload id is taken as a no-op");
	ok(queue_mpu_load(q, 7, &e, &n, err, sizeof(err)) == 0 && n == 1 &&
	   !strcmp(e[0].relpath, "d/big.bin") && !strcmp(e[0].upload_id, "up-1") &&
	   e[0].size == 12 * MiB && e[0].mtime_ns == 1234 && e[0].part_size == 5 * MiB &&
	   e[0].nparts == 2 && e[0].parts[0].number == 1 && e[0].parts[1].number == 2 &&
	   !strcmp(e[0].parts[1].md5, md5), "load: the upload and its 2 parts by number");
	queue_mpu_free(e, n);
	ok(queue_mpu_load(q, 8, &e, &n, err, sizeof(err)) == 0 && n == 0 && !e,
	   "another request has none");
	rec = _rec(XFER_MPU_PART, 10001, 5 * MiB, 0, md5);
	ok(queue_mpu_apply(q, 7, &rec, "d/big.bin", "up-1", err, sizeof(err)) < 0,
	   "part 10001 is refused: %s", err);
	rec = _rec(XFER_MPU_PART, 3, 5 * MiB, 0, "not-an-md5");
	ok(queue_mpu_apply(q, 7, &rec, "d/big.bin", "up-1", err, sizeof(err)) < 0,
	   "a part md5 that is not 32 hex digits is refused");
	rec = _rec(XFER_MPU_BEGIN, 12 * MiB, 1, 1 * MiB, NULL);
	ok(queue_mpu_apply(q, 7, &rec, "d/big.bin", "up-2", err, sizeof(err)) < 0,
	   "a begin with parts under 5 MiB is refused");
	rec = _rec(XFER_MPU_BEGIN, 12 * MiB, 1, 5 * MiB, NULL);
	ok(queue_mpu_apply(q, 7, &rec, "d/big.bin", "up 2", err, sizeof(err)) < 0 &&
	   queue_mpu_apply(q, 7, &rec, "", "up-2", err, sizeof(err)) < 0,
	   "an upload id with a blank, or no relpath, is refused");
	ok(queue_mpu_apply(q, 7, &rec, "d/big.bin", "up-2", err, sizeof(err)) == 0 &&
	   queue_mpu_load(q, 7, &e, &n, err, sizeof(err)) == 0 && n == 1 &&
	   !strcmp(e[0].upload_id, "up-2") && e[0].nparts == 0,
	   "a new begin for the file replaces the upload and forgets its parts");
	queue_mpu_free(e, n);
	rec = _rec(XFER_MPU_END, 0, 0, 0, NULL);
	ok(queue_mpu_apply(q, 7, &rec, "d/big.bin", "up-2", err, sizeof(err)) == 0 &&
	   queue_mpu_load(q, 7, &e, &n, err, sizeof(err)) == 0 && n == 0,
	   "end forgets it");
	queue_close(q);
	tap_rmtree(dir);
}

int main(void)
{
	_test_plan();
	_test_etag();
	_test_xml();
	_test_conf();
	_test_queue();
	return tap_done();
}
