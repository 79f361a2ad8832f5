/* xfer_url_parse.c - see xfer_url.c: what servers say (checksum headers, MD5, listings). */
#include "config.h"

#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "grow.h"
#include "xfer_url_int.h"
#include "xfer_url_xml.h"

/* ---- metadata ---- */

static int _unhex(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch = tolower(ch);
	return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/*
 * Base64 of a digest to lower-case hex; 0 or -1. Servers that leave out
 * the '=' padding are accepted, as they always were.
 */
static int _b64_hex(const char *in, size_t n, char *out, size_t want_bytes)
{
	char padded[96];
	unsigned char bytes[64];
	long nb;

	if (n + 3 > sizeof(padded))
		return -1;
	memcpy(padded, in, n);
	while (n % 4)
		padded[n++] = '=';
	nb = cksum_b64_decode(padded, n, bytes, sizeof(bytes));
	if (nb < 0 || (size_t)nb != want_bytes)
		return -1;
	for (size_t i = 0; i < want_bytes; i++)
		snprintf(out + 2 * i, 3, "%02x", bytes[i]);
	return 0;
}

static int _copy_hex(const char *v, size_t n, char *out, size_t hexlen)
{
	if (n != hexlen)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (_unhex((unsigned char)v[i]) < 0)
			return -1;
		out[i] = (char)tolower((unsigned char)v[i]);
	}
	out[n] = '\0';
	return 0;
}


/* One response header: ETag, Digest, Repr-Digest, X-Checksum-*, Content-MD5. */
size_t url__header(char *b, size_t sz, size_t nm, void *p)
{
	struct url__hctx *h = p;
	size_t n = sz * nm, kl;
	char *colon = memchr(b, ':', n);
	const char *v, *e;

	if (!colon)
		return n;
	if (n >= 5 && strncmp(b, "HTTP/", 5) == 0)
		return n;
	kl = (size_t)(colon - b);
	v = colon + 1;
	e = b + n;
	while (v < e && (*v == ' ' || *v == '\t'))
		v++;
	while (e > v && isspace((unsigned char)e[-1]))
		e--;
#define HK(name) (kl == sizeof(name) - 1 && strncasecmp(b, name, kl) == 0)
	if (HK("ETag")) {
		size_t l = (size_t)(e - v);

		if (l < sizeof(h->m->etag)) {
			memcpy(h->m->etag, v, l);
			h->m->etag[l] = '\0';
		}
		/* S3: the ETag of a single-part object is the MD5 of its bytes. */
		if (h->r->proto == P_S3 && l == 34 && v[0] == '"' &&
		    _copy_hex(v + 1, 32, h->m->md5, 32) == 0)
			h->m->how = "S3 ETag";
	} else if (HK("X-Checksum-Sha256")) {
		if (_copy_hex(v, (size_t)(e - v), h->m->sha256, 64) == 0)
			h->m->how = "X-Checksum-Sha256 header";
	} else if (HK("X-Checksum-Md5")) {
		if (_copy_hex(v, (size_t)(e - v), h->m->md5, 32) == 0)
			h->m->how = "X-Checksum-Md5 header";
	} else if (HK("Content-MD5")) {
		if (_b64_hex(v, (size_t)(e - v), h->m->md5, 16) == 0)
			h->m->how = "Content-MD5 header";
	} else if (HK("Digest") || HK("Repr-Digest")) {
		/* "sha-256=BASE64, md5=BASE64" (RFC 3230) or "sha-256=:BASE64:" (RFC 9530). */
		const char *t = v;

		while (t < e) {
			const char *q = t, *eq, *val, *ve;

			while (q < e && *q != ',')
				q++;
			eq = memchr(t, '=', (size_t)(q - t));
			if (eq) {
				val = eq + 1;
				ve = q;
				if (val < ve && *val == ':')
					val++;
				if (ve > val && ve[-1] == ':')
					ve--;
				if ((eq - t == 7 && strncasecmp(t, "sha-256", 7) == 0) &&
				    _b64_hex(val, (size_t)(ve - val), h->m->sha256, 32) == 0)
					h->m->how = "Digest header";
				else if ((eq - t == 3 && strncasecmp(t, "md5", 3) == 0) &&
					 !h->m->sha256[0] &&
					 _b64_hex(val, (size_t)(ve - val), h->m->md5, 16) == 0)
					h->m->how = "Digest header";
			}
			t = q < e ? q + 1 : q;
			while (t < e && *t == ' ')
				t++;
		}
	}
#undef HK
	return n;
}

size_t url__discard(char *b, size_t sz, size_t nm, void *p)
{
	(void)b;
	(void)p;
	return sz * nm;
}

/* ---- listings ---- */

struct _mem {
	char *p;
	size_t n, cap;
	int too_big;
};

#define LIST_MAX ((size_t)64 << 20)

static size_t _to_mem(char *b, size_t sz, size_t nm, void *p)
{
	struct _mem *m = p;
	size_t n = sz * nm;

	if (m->n + n + 1 > LIST_MAX) {
		m->too_big = 1;
		return 0;
	}
	if (grow_array((void **)&m->p, &m->cap, m->n + n + 1, 1, 65536) < 0)
		return 0;
	memcpy(m->p + m->n, b, n);
	m->n += n;
	m->p[m->n] = '\0';
	return n;
}

/* A listing's request: url with method (NULL: GET), one extra header and a body (or NULL). */
struct _list_req {
	const char *url, *method, *extra_hdr, *body;
};

/* Fetch q's answer into memory (a listing). */
static int _get_mem(struct url__run *r, const struct _list_req *q, struct _mem *out, int *final,
		    char *err, size_t errlen)
{
	const char *url = q->url, *method = q->method, *extra_hdr = q->extra_hdr, *body = q->body;
	struct curl_slist *hdrs;
	CURL *c = url__easy(r, url, &hdrs);
	CURLcode rc;

	memset(out, 0, sizeof(*out));
	*final = 0;
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (extra_hdr) {
		hdrs = curl_slist_append(hdrs, extra_hdr);
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	}
	if (method)
		curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	if (body)
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, _to_mem);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		if (out->too_big)
			snprintf(err, errlen, "directory listing larger than %zu MiB", LIST_MAX >> 20);
		else
			*final = url__describe(r, c, rc, err, errlen);
		url__easy_done(c, hdrs);
		free(out->p);
		out->p = NULL;
		return -1;
	}
	url__easy_done(c, hdrs);
	if (!out->p)
		out->p = strdup("");
	return out->p ? 0 : -1;
}

/* Listing entries the parser left out (no name, or one too long) are reported. */
static void _dropped(struct url__run *r, size_t n)
{
	char why[160];

	if (!n)
		return;
	snprintf(why, sizeof(why), "%zu listing entr%s without a usable name (missing, or "
		 "%d bytes or longer) skipped", n, n == 1 ? "y" : "ies", URLX_NAME_MAX);
	xfer_emit(r->ctx, &(struct xfer_note){
		.type = XR_ITEM_SKIPPED, .path = "(unusable name)", .text = why });
	r->skipped += (int64_t)n;
}

/* "%2F" back to "/" in place. */
static void _unescape_slash(char *s)
{
	char *o = s;

	if (!s)
		return;
	for (char *p = s; *p; p++) {
		if (p[0] == '%' && p[1] == '2' && (p[2] == 'F' || p[2] == 'f')) {
			*o++ = '/';
			p += 2;
		} else {
			*o++ = *p;
		}
	}
	*o = '\0';
}

/* S3 ListObjectsV2 under the request's prefix (which ends in '/'). */
int url__list_s3(struct url__run *r, int *final, char *err, size_t errlen)
{
	char token[1024] = "", url[XFER_PATH_MAX * 2], *ep = NULL, *et = NULL;
	size_t plen = strlen(r->s3_key_dec);
	CURL *esc = curl_easy_init();
	int rc = -1, raw_slash = 0;

	if (!esc) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	ep = curl_easy_escape(esc, r->s3_key_dec, 0);
	for (int page = 0; page < 100000; page++) {
		struct _mem m;
		struct urlx_listing lx;
		int k;

		curl_free(et);
		et = token[0] ? curl_easy_escape(esc, token, 0) : NULL;
		if (raw_slash) {
			_unescape_slash(ep);
			_unescape_slash(et);
		}
		k = snprintf(url, sizeof(url), "%s?list-type=2&prefix=%s%s%s", r->s3_base,
			     ep ? ep : "", et ? "&continuation-token=" : "", et ? et : "");
		if (k < 0 || (size_t)k >= sizeof(url)) {
			snprintf(err, errlen, "listing URL too long");
			break;
		}
		if (_get_mem(r, &(struct _list_req){ .url = url }, &m, final, err, errlen) < 0) {
			/*
			 * AWS signs '/' in a query value as %2F; some S3-compatible
			 * servers check the signature with '/' left as is. Once.
			 */
			if (!raw_slash && page == 0 && strstr(err, "HTTP 403") &&
			    (ep && strstr(ep, "%2F"))) {
				raw_slash = 1;
				page--;
				continue;
			}
			break;
		}
		if (urlx_parse(URLX_S3, m.p, m.n, &lx, err, errlen) < 0) {
			free(m.p);
			goto out;
		}
		free(m.p);
		for (size_t i = 0; i < lx.n; i++) {
			const char *key = lx.items[i].name;

			if (strncmp(key, r->s3_key_dec, plen) != 0)
				continue;
			if (!key[plen] || key[strlen(key) - 1] == '/')
				continue;	/* the prefix itself, or a "folder" marker */
			if (!url__safe_rel(key + plen)) {
				xfer_emit(r->ctx, &(struct xfer_note){
					.type = XR_ITEM_SKIPPED, .path = "(unsafe name)",
					.text = "object name with '..', an empty component or a "
						"control character skipped" });
				r->skipped++;
				continue;
			}
			if (url__add_ent(r, key + plen, lx.items[i].size < 0 ? 0 :
					 lx.items[i].size) < 0) {
				snprintf(err, errlen, "out of memory");
				urlx_free(&lx);
				goto out;
			}
		}
		_dropped(r, lx.dropped);
		token[0] = '\0';
		if (lx.truncated)
			snprintf(token, sizeof(token), "%s", lx.token);
		urlx_free(&lx);
		if (!token[0]) {
			rc = 0;
			break;
		}
	}
out:
	curl_free(ep);
	curl_free(et);
	curl_easy_cleanup(esc);
	return rc;
}

/* The path part of an absolute URL or of an absolute path ("/a/b/"). */
const char *url__url_path(const char *u)
{
	const char *p = strstr(u, "://");

	if (!p)
		return u;
	p = strchr(p + 3, '/');
	return p ? p : "/";
}

/* WebDAV PROPFIND Depth: 1 of dirurl (ending in '/'), recursively. */
int url__list_dav(struct url__run *r, const char *dirurl, const char *prefix, int depth,
		     int *final, char *err, size_t errlen)
{
	static const char body[] = "<?xml version=\"1.0\" encoding=\"utf-8\"?>"
		"<D:propfind xmlns:D=\"DAV:\"><D:prop><D:resourcetype/><D:getcontentlength/>"
		"</D:prop></D:propfind>";
	struct _mem m;
	struct urlx_listing lx;
	const char *base;
	size_t bl;
	CURL *esc;
	int rc = 0;

	if (depth > MAX_DEPTH) {
		snprintf(err, errlen, "tree deeper than %d levels", MAX_DEPTH);
		*final = 1;
		return -1;
	}
	if (_get_mem(r, &(struct _list_req){ dirurl, "PROPFIND", "Depth: 1", body }, &m, final, err,
		     errlen) < 0) {
		if (strstr(err, "HTTP 405") || strstr(err, "HTTP 501"))
			snprintf(err, errlen, "the server does not list directories (WebDAV "
				 "PROPFIND refused): name the files one by one");
		return -1;
	}
	if (urlx_parse(URLX_DAV, m.p, m.n, &lx, err, errlen) < 0) {
		free(m.p);
		return -1;
	}
	free(m.p);
	esc = curl_easy_init();
	if (!esc) {
		urlx_free(&lx);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	_dropped(r, lx.dropped);
	base = url__url_path(dirurl);
	bl = strlen(base);
	for (size_t i = 0; rc == 0 && i < lx.n; i++) {
		char *dec = NULL, rel[XFER_PATH_MAX];
		int dl, is_dir = lx.items[i].is_dir;
		const char *hp;

		dec = curl_easy_unescape(esc, url__url_path(lx.items[i].name), 0, &dl);
		if (!dec)
			continue;
		/* Compare decoded paths: the base may be escaped differently. */
		{
			int bdl;
			char *bdec = curl_easy_unescape(esc, base, (int)bl, &bdl);

			if (!bdec || strncmp(dec, bdec, (size_t)bdl) != 0) {
				curl_free(bdec);
				curl_free(dec);
				continue;
			}
			hp = dec + bdl;
			curl_free(bdec);
		}
		if (!*hp) {
			curl_free(dec);
			continue;	/* the collection itself */
		}
		snprintf(rel, sizeof(rel), "%s%s%.*s", prefix, *prefix ? "/" : "",
			 (int)(strlen(hp) - (hp[strlen(hp) - 1] == '/')), hp);
		curl_free(dec);
		if (!url__safe_rel(rel) || strchr(rel + strlen(prefix) + (*prefix ? 1 : 0), '/')) {
			xfer_emit(r->ctx, &(struct xfer_note){
				.type = XR_ITEM_SKIPPED, .path = "(unsafe name)",
				.text = "a name with '..', an empty component or a control "
					"character was skipped" });
			r->skipped++;
			continue;
		}
		if (is_dir) {
			char sub[XFER_PATH_MAX * 2], escd[XFER_PATH_MAX];
			const char *leaf = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;

			if (url__escape_path(esc, leaf, escd, sizeof(escd)) < 0 ||
			    snprintf(sub, sizeof(sub), "%s%s/", dirurl, escd) >= (int)sizeof(sub)) {
				snprintf(err, errlen, "URL too long under %.300s", rel);
				rc = -1;
				break;
			}
			rc = url__list_dav(r, sub, rel, depth + 1, final, err, errlen);
			continue;
		}
		if (url__add_ent(r, rel, lx.items[i].size) < 0) {
			snprintf(err, errlen, "out of memory");
			rc = -1;
		}
	}
	curl_easy_cleanup(esc);
	urlx_free(&lx);
	return rc;
}

/*
 * FTP LIST / SFTP directory listing of dirurl (ending in '/'): "ls -l"
 * lines; 'd' recurses, '-' is a file, anything else is skipped.
 */
int url__list_ls(struct url__run *r, const char *dirurl, const char *prefix, int depth,
		    int *final, char *err, size_t errlen)
{
	struct _mem m;
	char *line, *save = NULL;
	CURL *esc;
	int rc = 0;

	if (depth > MAX_DEPTH) {
		snprintf(err, errlen, "tree deeper than %d levels", MAX_DEPTH);
		*final = 1;
		return -1;
	}
	if (_get_mem(r, &(struct _list_req){ .url = dirurl }, &m, final, err, errlen) < 0)
		return -1;
	esc = curl_easy_init();
	if (!esc) {
		free(m.p);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (line = strtok_r(m.p, "\r\n", &save); rc == 0 && line;
	     line = strtok_r(NULL, "\r\n", &save)) {
		char *f = line, *size_s = NULL, rel[XFER_PATH_MAX];
		int field;

		/* perms links owner group size month day time|year name */
		for (field = 0; field < 8 && *f; field++) {
			while (*f && !isspace((unsigned char)*f))
				f++;
			while (*f && isspace((unsigned char)*f))
				f++;
			if (field == 3)
				size_s = f;
		}
		if (field < 8 || !*f || strcmp(f, ".") == 0 || strcmp(f, "..") == 0)
			continue;
		if (line[0] != 'd' && line[0] != '-') {
			char msg[XFER_TEXT_MAX];

			snprintf(msg, sizeof(msg), "'%.200s' skipped: only files and directories "
				 "are fetched", f);
			xfer_emit(r->ctx, &(struct xfer_note){
				.type = XR_ITEM_SKIPPED, .path = prefix[0] ? prefix : ".",
				.text = msg });
			r->skipped++;
			continue;
		}
		if (snprintf(rel, sizeof(rel), "%s%s%s", prefix, *prefix ? "/" : "", f) >=
		    (int)sizeof(rel) || !url__safe_rel(rel) || strchr(f, '/')) {
			xfer_emit(r->ctx, &(struct xfer_note){
				.type = XR_ITEM_SKIPPED, .path = "(unsafe name)",
				.text = "a name with '..', '/' or a control character was "
					"skipped" });
			r->skipped++;
			continue;
		}
		if (line[0] == 'd') {
			char sub[XFER_PATH_MAX * 2], escd[XFER_PATH_MAX];

			if (url__escape_path(esc, f, escd, sizeof(escd)) < 0 ||
			    snprintf(sub, sizeof(sub), "%s%s/", dirurl, escd) >= (int)sizeof(sub)) {
				snprintf(err, errlen, "URL too long under %.300s", rel);
				rc = -1;
				break;
			}
			rc = url__list_ls(r, sub, rel, depth + 1, final, err, errlen);
		} else if (url__add_ent(r, rel, size_s ? strtoll(size_s, NULL, 10) : -1) < 0) {
			snprintf(err, errlen, "out of memory");
			rc = -1;
		}
	}
	curl_easy_cleanup(esc);
	free(m.p);
	return rc;
}

