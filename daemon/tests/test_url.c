/*
 * test_url.c - the url endpoint's parsers: S3 and WebDAV listings (expat),
 * checksum headers, names from servers, the walk of a listed tree,
 * backend choice by scheme, and its stagehand.conf keys.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "conf.h"
#include "tests/tap.h"
#include "xfer_url_int.h"
#include "xfer_url_xml.h"

static void _hdr(struct url__run *r, struct url__meta *m, const char *line)
{
	struct url__hctx h = { r, m };
	char buf[512];

	snprintf(buf, sizeof(buf), "%s", line);
	url__header(buf, 1, strlen(buf), &h);
}

/* A new config with one line parsed; NULL (and err) when the line is refused. */
static struct conf *_parse1(const char *line, char *err)
{
	struct conf *c = conf_create();

	if (c && conf_parse_line(c, line, "t", 1, err, 256) < 0) {
		conf_destroy(c);
		return NULL;
	}
	return c;
}

static int _parse(enum urlx_kind k, const char *doc, struct urlx_listing *l, char *err)
{
	return urlx_parse(k, doc, strlen(doc), l, err, 256);
}

static void _test_listings(void)
{
	static const char s3[] =
		"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
		"<ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
		"<Name>b</Name><Prefix>run/</Prefix><KeyCount>3</KeyCount>"
		"<IsTruncated>true</IsTruncated>"
		"<Contents><Key>run/a &amp; b.txt</Key><Size>12</Size>"
		"<Owner><ID>x</ID></Owner></Contents>"
		"<Contents><Key>run/&#x41;</Key><Size> 7 </Size></Contents>"
		"<Contents><Size>5</Size></Contents>"
		"<NextContinuationToken>tok+/=</NextContinuationToken></ListBucketResult>";
	static const char dav[] =
		"<?xml version=\"1.0\" encoding=\"utf-8\" ?>"
		"<D:multistatus xmlns:D=\"DAV:\"><D:response><D:href>/d/</D:href><D:propstat><D:prop>"
		"<D:resourcetype><D:collection/></D:resourcetype></D:prop></D:propstat></D:response>"
		"<d:response xmlns:d=\"DAV:\"><d:href>/d/f%20x.bin</d:href><d:propstat><d:prop>"
		"<d:resourcetype/><d:getcontentlength>1048576</d:getcontentlength></d:prop>"
		"</d:propstat></d:response>"
		"<D:response><D:href>/d/sub/</D:href><D:propstat><D:prop><D:resourcetype>"
		"<D:collection/></D:resourcetype><D:getcontentlength>junk</D:getcontentlength>"
		"</D:prop></D:propstat></D:response></D:multistatus>";
	struct urlx_listing l;
	char err[256] = "", *doc;
	size_t n;

	ok(_parse(URLX_S3, s3, &l, err) == 0, "S3 listing parsed (%s)", err);
	ok(l.n == 2 && strcmp(l.items[0].name, "run/a & b.txt") == 0 && l.items[0].size == 12 &&
	   strcmp(l.items[1].name, "run/A") == 0 && l.items[1].size == 7,
	   "S3 keys decoded (entities, character references), sizes read");
	ok(l.dropped == 1 && l.truncated && strcmp(l.token, "tok+/=") == 0,
	   "S3: a Contents without a Key is dropped and counted; truncation and token read");
	urlx_free(&l);
	ok(_parse(URLX_DAV, dav, &l, err) == 0, "WebDAV multistatus parsed (%s)", err);
	ok(l.n == 3 && l.items[0].is_dir && strcmp(l.items[1].name, "/d/f%20x.bin") == 0 &&
	   !l.items[1].is_dir && l.items[1].size == 1048576 && l.items[2].is_dir &&
	   l.items[2].size == -1, "DAV: any prefix, collections, sizes (junk is unknown)");
	urlx_free(&l);

	ok(_parse(URLX_S3, "<?xml version=\"1.0\"?><!DOCTYPE x [<!ENTITY a \"aaaa\">]>"
		  "<ListBucketResult><Contents><Key>&a;</Key></Contents></ListBucketResult>",
		  &l, err) < 0 && strstr(err, "DOCTYPE"), "a DOCTYPE is refused: %s", err);
	urlx_free(&l);
	ok(_parse(URLX_DAV, "<D:multistatus xmlns:D=\"DAV:\"><D:response><D:href>/x",
		  &l, err) < 0 && strstr(err, "not well-formed") && l.n == 0,
	   "a truncated document is an error, not a partial listing: %s", err);
	urlx_free(&l);
	ok(_parse(URLX_S3, "<a><Contents><Key>k</Key></Contents>", &l, err) < 0,
	   "unclosed root refused");
	urlx_free(&l);
	ok(_parse(URLX_S3, "<ListBucketResult><Contents><Key>\x01</Key></Contents>"
		  "</ListBucketResult>", &l, err) < 0, "a control character is not XML: refused");
	urlx_free(&l);
	n = URLX_NAME_MAX + 100;
	doc = malloc(n + 200);
	snprintf(doc, n + 200, "<ListBucketResult><Contents><Key>%0*d</Key><Size>1</Size></Contents>"
		 "<Contents><Key>ok</Key></Contents></ListBucketResult>", (int)n, 0);
	ok(_parse(URLX_S3, doc, &l, err) == 0 && l.n == 1 && l.dropped == 1 &&
	   strcmp(l.items[0].name, "ok") == 0 && l.items[0].size == -1,
	   "a key of %zu bytes is dropped and counted, the next one kept", n);
	urlx_free(&l);
	free(doc);
}

/* ---- the walk of a listed tree (url__list) ---- */

struct _trace {
	struct xfer_ep *ep;
	char s[1024];
	char url[256];               /* what the url of "sp ace" came out as */
	int fails;
};

static void _tr(struct _trace *t, const char *what, const char *rel)
{
	size_t n = strlen(t->s);

	snprintf(t->s + n, sizeof(t->s) - n, "%s%s:%s", n ? " " : "", what, rel);
}

static int _tv(struct xfer_walk *w, struct xfer_walk_dir *dir, const char *name, const char *rel,
	       const struct stat *st)
{
	struct _trace *t = w->arg;
	char r2[XFER_PATH_MAX + 1];

	if (strlen(rel) < 64)
		_tr(t, S_ISDIR(st->st_mode) ? "d" : "f", rel);
	if (strcmp(name, "sp ace") == 0)
		url__ep_url(t->ep, dir->fd, name, r2, sizeof(r2), t->url, sizeof(t->url));
	return S_ISDIR(st->st_mode) && strcmp(name, "skip") != 0;
}

static int _te(struct xfer_walk *w, struct xfer_walk_dir *dir, struct xfer_walk_dir *sub,
	       const char *name)
{
	(void)dir;
	(void)name;
	if (strlen(sub->rel) < 64)
		_tr(w->arg, "in", sub->rel);
	return 0;
}

static void _tl(struct xfer_walk *w, struct xfer_walk_dir *dir, struct xfer_walk_dir *sub,
		const char *name)
{
	(void)dir;
	(void)name;
	if (strlen(sub->rel) < 64)
		_tr(w->arg, "out", sub->rel);
}

static void _tf(struct xfer_walk *w, const char *rel, int err, const char *what)
{
	(void)rel;
	(void)what;
	((struct _trace *)w->arg)->fails += err == ELOOP;
}

static void _test_walk(void)
{
	static const char *const ents[] = { "a.txt", "d-1", "d/e/sp ace", "d/skip/x", "d/x", "z" };
	struct xfer_ctx ctx;
	struct xfer_ep *ep = calloc(1, sizeof(*ep));
	struct _trace t = { ep, "", "", 0 };
	struct xfer_walk w = { &ctx, &t, _tv, _te, _tl, _tf };
	struct xfer_walk_dir root = { 0, "", 0, NULL, NULL };
	char deep[XFER_WALK_DEPTH * 2 + 16] = "";	/* "a/" 257 times, then "f" */

	memset(&ctx, 0, sizeof(ctx));
	ep->r.proto = P_HTTP;
	ep->r.url = "http://h/base/";
	ep->esc = curl_easy_init();
	url__ep_add_dir(ep, "");
	for (size_t i = 0; i < sizeof(ents) / sizeof(ents[0]); i++)
		url__add_ent(&ep->r, ents[i], 1);
	url__list(ep, &w, &root);
	ok(strcmp(t.s, "f:a.txt f:d-1 d:d in:d d:d/e in:d/e f:d/e/sp ace out:d/e d:d/skip "
		   "f:d/x out:d f:z") == 0, "a sorted listing walks as a tree: %s", t.s);
	ok(strcmp(t.url, "http://h/base/d/e/sp%20ace") == 0, "a directory handle names its "
	   "URL, each component escaped: %s", t.url);
	/* a listing deeper than the walk's limit: the part below it is left out, and said */
	for (int i = 0; i <= XFER_WALK_DEPTH; i++)
		memcpy(deep + 2 * i, "a/", 2);
	deep[2 * (XFER_WALK_DEPTH + 1)] = 'f';
	for (size_t i = 0; i < ep->r.nents; i++)
		free(ep->r.ents[i].rel);
	ep->r.nents = 0;
	url__add_ent(&ep->r, deep, 1);
	t.s[0] = '\0';
	url__list(ep, &w, &root);
	ok(t.fails == 1 && !strstr(t.s, "f:"), "a tree deeper than %d levels fails once there",
	   XFER_WALK_DEPTH);
	ok(ep->ndirs == XFER_WALK_DEPTH + 1, "one handle per directory walked (%zu)", ep->ndirs);
	url__ep_close(ep, &(struct xfer_root){ .dir = 0 });
}

/*
 * xfer_endpoints_for for a request: 10 url -> local, 20 local -> url, 0 any
 * other pair, or XFER_FINAL.
 */
static int _pair(const char *action, const char *source, const char *dest)
{
	struct xfer_ctx c = { .action = action, .source = source, .dest = dest };
	const struct xfer_endpoint *s, *d;
	char err[256];
	int rc = xfer_endpoints_for(&c, &s, &d, err, sizeof(err));

	if (rc != XFER_OK)
		return rc;
	return s == &xfer_ep_url && d == &xfer_ep_local ? 10 :
	       s == &xfer_ep_local && d == &xfer_ep_url ? 20 : 0;
}

/* S3SitePrefix: the site's keys sign only below the owner's own prefix. */
static void _test_site_prefix(void)
{
	static const struct {
		const char *bucket, *key;
		int ok;
		const char *what;
	} cases[] = {
		{ "archive", "bob/run1/out.dat", 1, "bob's own prefix" },
		{ "archive", "bob/", 1, "bob's prefix itself (a tree)" },
		{ "archive", "alice/run1/out.dat", 0, "alice's prefix" },
		{ "archive", "bobby/x", 0, "a prefix that only starts like bob's" },
		{ "archive", "bob", 0, "bob without '/' (a listing would match bobby/)" },
		{ "archive", "bob/../alice/x", 0, "'..' out of it" },
		{ "archive", "bob/./x", 0, "a '.' component" },
		{ "archive", "bob//x", 0, "an empty component" },
		{ "archive", "/bob/x", 0, "a leading '/'" },
		{ "archive", "bob/%2e%2e/alice/x", 0, "encoded twice ('%' after decoding)" },
		{ "archive", "bob/a\\..\\x", 0, "a backslash" },
		{ "archive", "bob/a\tb", 0, "a control character" },
		{ "other", "bob/x", 0, "another bucket" },
		{ "archive", "", 0, "the bucket's root" },
	};
	char err[512];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int v = url__s3_site_key_ok("s3://archive/%u/", "bob", cases[i].bucket, cases[i].key,
					    err, sizeof(err));

		ok(v == cases[i].ok, "site keys for bob, s3://%s/%s: %s (%s)", cases[i].bucket,
		   cases[i].key, cases[i].ok ? "allowed" : "refused", cases[i].what);
		if (!cases[i].ok)
			contains(err, "s3://archive/bob/", "... the message names bob's prefix");
	}
	ok(url__s3_site_key_ok("s3://archive/users/%u/in/", "bob", "archive", "users/bob/in/x",
			       err, sizeof(err)) == 1, "%%u in the middle of a prefix");
	ok(url__s3_site_key_ok("s3://archive/users/%u/in/", "bob", "archive", "users/bob/x",
			       err, sizeof(err)) == 0, "... and only below all of it");
	ok(url__s3_site_key_ok(NULL, "bob", "archive", "bob/x", err, sizeof(err)) == 0,
	   "no S3SitePrefix: the site's keys are used nowhere");
	contains(err, "S3SitePrefix is not set", "... saying so");
}

int main(void)
{
	char err[256];
	struct url__run r;
	struct url__meta m;
	struct conf *c;
	_test_listings();
	_test_walk();
	memset(&r, 0, sizeof(r));
	r.proto = P_S3;
	memset(&m, 0, sizeof(m));
	_hdr(&r, &m, "ETag: \"900150983cd24fb0d6963f7d28e17f72\"\r\n");
	ok(strcmp(m.md5, "900150983cd24fb0d6963f7d28e17f72") == 0 && strcmp(m.how, "S3 ETag") == 0,
	   "S3 single-part ETag is an md5");
	memset(&m, 0, sizeof(m));
	_hdr(&r, &m, "ETag: \"900150983cd24fb0d6963f7d28e17f72-3\"\r\n");
	ok(m.md5[0] == '\0', "S3 multipart ETag is not an md5");
	r.proto = P_HTTP;
	memset(&m, 0, sizeof(m));
	_hdr(&r, &m, "ETag: \"900150983cd24fb0d6963f7d28e17f72\"\r\n");
	ok(m.md5[0] == '\0' && strcmp(m.etag, "\"900150983cd24fb0d6963f7d28e17f72\"") == 0,
	   "an HTTP ETag is only a validator");
	memset(&m, 0, sizeof(m));
	/* sha-256 of "abc" in base64 */
	_hdr(&r, &m, "Digest: md5=kAFQmDzST7DWlj99KOF/cg==, SHA-256=ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=\r\n");
	ok(strcmp(m.sha256, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0,
	   "Digest sha-256 decoded: %s", m.sha256);
	ok(strcmp(m.md5, "900150983cd24fb0d6963f7d28e17f72") == 0, "Digest md5 decoded: %s", m.md5);
	memset(&m, 0, sizeof(m));
	_hdr(&r, &m, "Repr-Digest: sha-256=:ungWv48Bz+pBQUDeXa4iI7ADYaOWF3qctBD/YfIAFa0=:\r\n");
	ok(strncmp(m.sha256, "ba7816bf", 8) == 0, "Repr-Digest (RFC 9530) decoded");
	memset(&m, 0, sizeof(m));
	_hdr(&r, &m, "x-checksum-sha256: BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD\r\n");
	ok(strncmp(m.sha256, "ba7816bf", 8) == 0 && strstr(m.how, "X-Checksum-Sha256"),
	   "X-Checksum-Sha256, any case");
	memset(&m, 0, sizeof(m));
	_hdr(&r, &m, "Content-MD5: kAFQmDzST7DWlj99KOF/cg\r\n");
	ok(strcmp(m.md5, "900150983cd24fb0d6963f7d28e17f72") == 0, "Content-MD5 without padding");
	memset(&m, 0, sizeof(m));
	_hdr(&r, &m, "X-Checksum-Sha256: not-hex\r\n");
	_hdr(&r, &m, "Content-MD5: garbage!!\r\n");
	ok(m.sha256[0] == '\0' && m.md5[0] == '\0', "malformed checksum headers are ignored");

	ok(url__safe_rel("a/b/c.txt") && url__safe_rel("with space") && url__safe_rel(".hidden"),
	   "ordinary names are safe");
	ok(!url__safe_rel("../x") && !url__safe_rel("a/../x") && !url__safe_rel("/abs") &&
	   !url__safe_rel("a//b") && !url__safe_rel("a/./b") && !url__safe_rel("") &&
	   !url__safe_rel("a/") && !url__safe_rel("a\nb") && !url__safe_rel(".."),
	   "names that escape or are malformed are refused");
	ok(strcmp(url__url_path("https://h:1/a/b?q"), "/a/b?q") == 0 &&
	   strcmp(url__url_path("https://h"), "/") == 0 && strcmp(url__url_path("/x/y"), "/x/y") == 0,
	   "path of a URL");

	ok(_pair("stage_in", "https://h/x", "/d") == 10 &&
	   _pair("stage_in", "S3://b/k", "/d") == 10 &&
	   _pair("stage_in", "sftp://h/x", "/d") == 10 &&
	   _pair("archive", "/s", "s3://b/k") == 20,
	   "URL schemes choose the url endpoint, on the URL's side");
	ok(_pair("stage_in", "file:///x", "/d") == XFER_FINAL, "file:// has no endpoint");
	ok(_pair("stage_in", "https://h/x", "s3://b/k") == XFER_FINAL &&
	   _pair("archive", "https://h/x", "/d") == XFER_FINAL &&
	   _pair("label", "https://h/x", NULL) == XFER_FINAL,
	   "a URL to a URL, a URL archived to a path and a label of a URL are refused");

	c = conf_create();
	ok(c && strcmp(c->s3_region, "us-east-1") == 0 && !c->s3_endpoint && !c->s3_credentials_file &&
	   !c->url_ca_file, "URL backend defaults");
	conf_destroy(c);
	c = _parse1("S3Endpoint=https://s3.example.org/", err);
	ok(c && strcmp(c->s3_endpoint, "https://s3.example.org") == 0, "S3Endpoint, trailing '/' dropped");
	conf_destroy(c);
	ok(!_parse1("S3Endpoint=https://key:secret@s3.example.org", err) && strstr(err, "t:1") &&
	   strstr(err, "credentials"), "S3Endpoint with credentials: %s", err);
	ok(!_parse1("S3Endpoint=s3.example.org", err) && strstr(err, "http"),
	   "S3Endpoint must be a URL: %s", err);
	c = _parse1("S3Region=eu-west-3", err);
	ok(c && strcmp(c->s3_region, "eu-west-3") == 0, "S3Region");
	conf_destroy(c);
	ok(!_parse1("S3Region=eu west", err) && strstr(err, "S3Region"), "bad S3Region: %s", err);
	c = _parse1("S3CredentialsFile=/etc/stagehand/s3.conf", err);
	ok(c && strcmp(c->s3_credentials_file, "/etc/stagehand/s3.conf") == 0, "S3CredentialsFile");
	conf_destroy(c);
	ok(!_parse1("S3CredentialsFile=relative", err) && strstr(err, "S3CredentialsFile"),
	   "S3CredentialsFile must be absolute: %s", err);
	c = _parse1("URLCAFile=/etc/ssl/site-ca.pem", err);
	ok(c && strcmp(c->url_ca_file, "/etc/ssl/site-ca.pem") == 0, "URLCAFile");
	conf_destroy(c);
	c = _parse1("URLCAFile=system", err);
	ok(c && !c->url_ca_file, "URLCAFile=system: the system's CA store");
	conf_destroy(c);

	_test_site_prefix();
	c = conf_create();
	ok(c && !c->s3_site_prefix && (!c->outbound_allow || !c->outbound_allow[0]),
	   "S3SitePrefix and OutboundAllow: none by default");
	conf_destroy(c);
	c = _parse1("S3SitePrefix=s3://archive/%u/", err);
	ok(c && c->s3_site_prefix && strcmp(c->s3_site_prefix, "s3://archive/%u/") == 0,
	   "S3SitePrefix=s3://archive/%%u/");
	conf_destroy(c);
	ok(!_parse1("S3SitePrefix=s3://archive/shared/", err) && strstr(err, "%u"),
	   "S3SitePrefix without %%u refused: %s", err);
	ok(!_parse1("S3SitePrefix=s3://archive/%u", err) && strstr(err, "end in '/'"),
	   "S3SitePrefix without a final '/' refused: %s", err);
	ok(!_parse1("S3SitePrefix=s3://Archive/%u/", err) && strstr(err, "bucket"),
	   "S3SitePrefix with a bad bucket refused: %s", err);
	ok(!_parse1("S3SitePrefix=s3://archive/%u/../x/", err) && strstr(err, "'..'"),
	   "S3SitePrefix with '..' refused: %s", err);
	ok(!_parse1("S3SitePrefix=s3://archive/%u/?acl/", err) && strstr(err, "'?'"),
	   "S3SitePrefix with '?' refused: %s", err);
	ok(!_parse1("S3SitePrefix=https://archive/%u/", err) && strstr(err, "s3://"),
	   "S3SitePrefix must be s3://: %s", err);
	c = _parse1("OutboundAllow=127.0.0.1/32, 10.235.0.0/24,fd12::/16", err);
	ok(c && c->outbound_allow && c->outbound_allow[2] && !c->outbound_allow[3] &&
	   strcmp(c->outbound_allow[1], "10.235.0.0/24") == 0, "OutboundAllow: three networks");
	conf_destroy(c);
	ok(!_parse1("OutboundAllow=10.1.2.3/8", err) && strstr(err, "OutboundAllow") &&
	   strstr(err, "bits set"), "OutboundAllow with host bits refused: %s", err);
	ok(!_parse1("OutboundAllow=s3.example.org", err) && strstr(err, "not an IPv4"),
	   "OutboundAllow takes no names: %s", err);
	return tap_done();
}
