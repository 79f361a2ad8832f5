/*
 * xfer_url_mpu.c - S3 multipart upload, for a file larger than S3PartSize
 * (and so for any file over S3's 5 GiB limit of a single PUT).
 *
 * Owns: cutting a file into parts (url__mpu_plan), sending each with its
 * Content-MD5 so that the server checks it and comparing the ETag the
 * server answers with the MD5 of the bytes sent (a mismatch: the part is
 * sent again, a few times), completing the object and checking its ETag
 * (the MD5 of the parts' MD5s and "-N", url__mpu_etag) as the verification
 * of the whole. The upload id and each verified part go to the daemon as
 * records (XR_MPU, queue_mpu.h), so that the next attempt, after a daemon
 * killed or a drain, asks the server which parts it holds (ListParts) and
 * sends only the others; an upload the server no longer has (NoSuchUpload)
 * or one of another version of the source starts over, the stale one
 * aborted. A cancelled request aborts its upload.
 *
 * Must never: believe the server. Every answer is hostile until checked:
 * XML is read by xfer_url_xml.c (no DOCTYPE, bounded text), bodies are
 * bounded, a part number outside the plan, a size that is not the part's,
 * an ETag that is not a short quoted token or an upload id with a blank or
 * control character is refused or ignored (the part is sent again). A part
 * the server lists counts only when its ETag equals the md5 of our bytes:
 * the md5 recorded when it was sent, or a fresh hash of the local range.
 */
#include "config.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"
#include "xfer_url_int.h"
#include "xfer_url_xml.h"
#include "xfer_util.h"

#define BODY_MAX ((size_t)4 << 20)  /* an answer (ListParts of 1000 parts is ~300 KB) */
#define PART_TRIES 3                 /* sends of one part whose ETag does not match */
#define LIST_PAGES 64                /* ListParts pages (1000 parts each) */

/* ---- planning and the object's ETag (pure: unit-tested) ---- */

int url__mpu_plan(int64_t size, int64_t want, struct url__mpu_plan *p, char *err, size_t errlen)
{
	int64_t part = want;

	memset(p, 0, sizeof(*p));
	if (size <= 0 || want < URL_MPU_PART_MIN || want > URL_MPU_PART_MAX) {
		snprintf(err, errlen, "no multipart plan for %lld bytes in parts of %lld",
			 (long long)size, (long long)want);
		return -1;
	}
	if (size > URL_MPU_OBJECT_MAX) {
		snprintf(err, errlen, "%lld bytes is more than S3 stores in one object (5 TiB)",
			 (long long)size);
		return -1;
	}
	if ((size + part - 1) / part > URL_MPU_PARTS_MAX) {
		/* S3 takes at most 10,000 parts: the smallest whole MiB that fits. */
		part = (size + URL_MPU_PARTS_MAX - 1) / URL_MPU_PARTS_MAX;
		part = (part + (1 << 20) - 1) / (1 << 20) * (1 << 20);
		p->raised = 1;
	}
	p->part_size = part;
	p->nparts = (int)((size + part - 1) / part);
	return 0;
}

static int _unhex(int c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
	       c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* 32 hex digits to 16 bytes; 0 or -1. */
static int _md5_bytes(const char *hex, unsigned char out[16])
{
	for (int i = 0; i < 16; i++) {
		int h = _unhex((unsigned char)hex[2 * i]), l = h < 0 ? -1 :
			_unhex((unsigned char)hex[2 * i + 1]);

		if (h < 0 || l < 0)
			return -1;
		out[i] = (unsigned char)(h << 4 | l);
	}
	return hex[32] == '\0' ? 0 : -1;
}

int url__mpu_etag(const char (*md5s)[33], int n, char *out, size_t outlen)
{
	struct cksum c;
	char h[CKSUM_HEX_MAX];

	if (n < 1 || n > URL_MPU_PARTS_MAX || cksum_init(&c, CKSUM_MD5) < 0)
		return -1;
	for (int i = 0; i < n; i++) {
		unsigned char b[16];

		if (_md5_bytes(md5s[i], b) < 0) {
			cksum_abort(&c);
			return -1;
		}
		cksum_update(&c, b, sizeof(b));
	}
	cksum_final(&c, h);
	return snprintf(out, outlen, "%s-%d", cksum_hex(h), n) >= (int)outlen ? -1 : 0;
}

/*
 * An ETag as a server may write it: '"', 1 to 100 characters of
 * [A-Za-z0-9._:/+=-], '"'. Anything else (a blank, a quote, '<', a control
 * character) is refused: it goes back into the Complete document as is.
 */
int url__mpu_etag_ok(const char *e)
{
	size_t n = strlen(e);

	if (n < 3 || n > 102 || e[0] != '"' || e[n - 1] != '"')
		return 0;
	for (size_t i = 1; i + 1 < n; i++) {
		unsigned char c = (unsigned char)e[i];

		if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      strchr("._:/+=-", c)))
			return 0;
	}
	return 1;
}

/* An ETag that is an MD5 ("32 hex digits"): its hex, lower-case, into md5. 1, else 0. */
static int _etag_md5(const char *e, char md5[33])
{
	unsigned char b[16];
	char hex[33];

	if (strlen(e) != 34 || e[0] != '"' || e[33] != '"')
		return 0;
	memcpy(hex, e + 1, 32);
	hex[32] = '\0';
	if (_md5_bytes(hex, b) < 0)
		return 0;
	for (int i = 0; i < 16; i++)
		snprintf(md5 + 2 * i, 3, "%02x", b[i]);
	return 1;
}

/* An upload id: 1 to 1023 printable characters, no blank (it is escaped into URLs). */
static int _id_ok(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n >= URLX_TOKEN_MAX)
		return 0;
	for (const char *p = id; *p; p++)
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f)
			return 0;
	return 1;
}

static void _b64(const unsigned char *in, size_t n, char *out)
{
	static const char t[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	size_t o = 0;

	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned)in[i] << 16 | (i + 1 < n ? (unsigned)in[i + 1] << 8 : 0) |
			     (i + 2 < n ? in[i + 2] : 0);

		out[o++] = t[v >> 18 & 63];
		out[o++] = t[v >> 12 & 63];
		out[o++] = i + 1 < n ? t[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? t[v & 63] : '=';
	}
	out[o] = '\0';
}

/* ---- one upload ---- */

struct _part {
	int64_t off, len;
	char md5[33];                /* of our bytes; "" until known */
	char etag[URLX_ETAG_MAX];    /* as the server wrote it (for Complete) */
	int done;                    /* the server holds it, verified */
};

struct _mpu {
	struct url__run *r;
	const char *url, *rel;
	int sfd;
	struct url__mpu_plan plan;
	struct _part *parts;
	char id[URLX_TOKEN_MAX];
	char *buf;                   /* URL_CHUNK bytes */
	int opaque;                  /* a part's ETag is no MD5 (SSE-KMS): checked by size */
	int completed;               /* the server completed the upload (its id is spent) */
	int sent;                    /* parts sent by this attempt */
};

/* An answer, bounded. */
struct _body {
	char *p;
	size_t n;
	int too_big;
};

static size_t _to_body(char *b, size_t sz, size_t nm, void *arg)
{
	struct _body *m = arg;
	size_t n = sz * nm;
	char *q;

	if (m->n + n + 1 > BODY_MAX) {
		m->too_big = 1;
		return 0;
	}
	q = realloc(m->p, m->n + n + 1);
	if (!q)
		return 0;
	m->p = q;
	memcpy(m->p + m->n, b, n);
	m->n += n;
	m->p[m->n] = '\0';
	return n;
}

/* One S3 request of the multipart protocol (_call). */
struct _s3_req {
	const char *method;
	const char *url;
	const char *body;            /* XML to send, or NULL */
	size_t len;                  /* body's bytes */
	int nostop;                  /* a cancel's abort must reach the server after the stop */
};

/*
 * One request q: the answer into *doc (parsed, URLX_S3_MPU; an empty answer
 * is an empty doc). *code gets the HTTP status. 0 with *code < 300; else -1
 * with err (an S3 error's Code and Message when it sent one) and *final.
 */
static int _call(struct url__run *r, const struct _s3_req *q, struct urlx_listing *doc,
		 long *code, int *final, char *err, size_t errlen)
{
	const char *method = q->method, *url = q->url, *body = q->body;
	size_t len = q->len;
	int nostop = q->nostop;
	struct curl_slist *hdrs;
	struct _body b = { 0 };
	char why[XFER_TEXT_MAX];
	CURL *c = url__easy(r, url, &hdrs);
	CURLcode rc;

	memset(doc, 0, sizeof(*doc));
	doc->mpu.next_marker = -1;
	*code = 0;
	*final = 0;
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 0L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, _to_body);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &b);
	if (body) {
		hdrs = curl_slist_append(hdrs, "Content-Type: application/xml");
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
		curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
		curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)len);
	}
	if (nostop) {
		curl_easy_setopt(c, CURLOPT_NOPROGRESS, 1L);
		curl_easy_setopt(c, CURLOPT_TIMEOUT, 30L);
	}
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
	if (rc != CURLE_OK) {
		if (b.too_big)
			snprintf(err, errlen, "the server's answer is larger than %zu MiB",
				 BODY_MAX >> 20);
		else
			*final = url__describe(r, c, rc, err, errlen);
		url__easy_done(c, hdrs);
		free(b.p);
		return -1;
	}
	url__easy_done(c, hdrs);
	if (b.n && urlx_parse(URLX_S3_MPU, b.p, b.n, doc, why, sizeof(why)) < 0) {
		free(b.p);
		if (*code >= 300) {
			snprintf(err, errlen, "server answered HTTP %ld", *code);
			*final = *code == 400 || *code == 401 || *code == 403 || *code == 404;
		} else {
			snprintf(err, errlen, "%s", why);
		}
		return -1;
	}
	free(b.p);
	/* S3 may say 200 and then an Error document (CompleteMultipartUpload does). */
	if (*code >= 300 || strcmp(doc->mpu.root, "Error") == 0) {
		snprintf(err, errlen, "server answered HTTP %ld%s%s%s%s", *code,
			 doc->mpu.code[0] ? " " : "", doc->mpu.code, doc->mpu.message[0] ? ": " : "",
			 doc->mpu.message);
		*final = *code == 400 || *code == 401 || *code == 403 ||
			 (*code == 404 && strcmp(doc->mpu.code, "NoSuchUpload") != 0);
		return -1;
	}
	return 0;
}

/*
 * The document is the answer to op ("ListParts"...): AWS names it opResult,
 * some S3 servers (moto) opResponse, with the same members.
 */
static int _answers(const struct urlx_listing *doc, const char *op)
{
	size_t n = strlen(op);

	return strncmp(doc->mpu.root, op, n) == 0 &&
	       (strcmp(doc->mpu.root + n, "Result") == 0 ||
		strcmp(doc->mpu.root + n, "Response") == 0);
}

/* m->url, '?', pre and the upload id escaped; 0 or -1 (too long). */
static int _qurl(struct _mpu *m, const char *pre, const char *id, char *out, size_t outlen)
{
	char *e = curl_easy_escape(NULL, id, 0);
	int n;

	if (!e)
		return -1;
	n = snprintf(out, outlen, "%s?%s%s", m->url, pre, e);
	curl_free(e);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

/* The stale upload id goes (best effort: a lifecycle rule cleans what is left). */
static void _abort(struct _mpu *m, const char *id, const char *why)
{
	char url[XFER_PATH_MAX * 3], err[XFER_TEXT_MAX];
	struct urlx_listing doc;
	long code;
	int final;

	if (!_id_ok(id) || _qurl(m, "uploadId=", id, url, sizeof(url)) < 0)
		return;
	if (_call(m->r, &(struct _s3_req){ .method = "DELETE", .url = url, .nostop = 1 }, &doc,
		  &code, &final, err, sizeof(err)) < 0 &&
	    code != 404)
		xfer_logf(m->r->ctx, LOG_LVL_WARN, "request %lld: '%s': cannot abort S3 multipart "
			  "upload %s (%s): %s; a bucket lifecycle rule "
			  "(AbortIncompleteMultipartUpload) removes it", (long long)m->r->ctx->request_id,
			  m->rel, id, why, err);
	else
		xfer_logf(m->r->ctx, LOG_LVL_INFO, "request %lld: '%s': S3 multipart upload %s "
			  "aborted (%s)", (long long)m->r->ctx->request_id, m->rel, id, why);
	urlx_free(&doc);
	xfer_emit(m->r->ctx, &(struct xfer_note){
		.type = XR_MPU, .code = XFER_MPU_END, .path = m->rel, .text = id });
}

/* Hash the local bytes of part i into md5 (hex); 0, or -1 with err. */
static int _hash_part(struct _mpu *m, int i, char md5[33], char *err, size_t errlen)
{
	struct _part *p = &m->parts[i];
	char h[CKSUM_HEX_MAX];
	struct cksum c;
	int64_t done = 0;

	if (cksum_init(&c, CKSUM_MD5) < 0) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	while (done < p->len) {
		size_t want = (size_t)(p->len - done < URL_CHUNK ? p->len - done : URL_CHUNK);
		ssize_t n = pread(m->sfd, m->buf, want, p->off + done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 || url__stopped(m->r)) {
			cksum_abort(&c);
			snprintf(err, errlen, "%s", n < 0 ? strerror(errno) : n == 0 ?
				 "the source is shorter than it was" : "stopped");
			return -1;
		}
		cksum_update(&c, m->buf, (size_t)n);
		done += n;
	}
	cksum_final(&c, h);
	snprintf(md5, 33, "%s", cksum_hex(h));
	return 0;
}

/* ---- resume ---- */

static const struct xfer_mpu_ent *_recorded(const struct xfer_ctx *ctx, const char *rel)
{
	for (size_t i = 0; ctx->mpu && i < ctx->nmpu; i++)
		if (strcmp(ctx->mpu[i].relpath, rel) == 0)
			return &ctx->mpu[i];
	return NULL;
}

static const struct xfer_mpu_part *_recorded_part(const struct xfer_mpu_ent *e, int number)
{
	for (size_t i = 0; i < e->nparts; i++)
		if (e->parts[i].number == number)
			return &e->parts[i];
	return NULL;
}

/*
 * One part the server lists: it counts when it is a part of the plan, of
 * its size, and its ETag is the md5 of our bytes (recorded then, or hashed
 * now: a part whose record the daemon did not keep). 1 counted, 0 not, -1
 * with err (the source cannot be read).
 */
static int _listed(struct _mpu *m, const struct xfer_mpu_ent *e, const struct urlx_item *it,
		   char *err, size_t errlen)
{
	const struct xfer_mpu_part *rp;
	struct _part *p;
	char md5[33], local[33];

	if (it->part < 1 || it->part > m->plan.nparts || !it->name ||
	    !url__mpu_etag_ok(it->name))
		return 0;
	p = &m->parts[it->part - 1];
	if (it->size != p->len || p->done)
		return 0;
	rp = _recorded_part(e, (int)it->part);
	if (!_etag_md5(it->name, md5)) {
		/* No MD5 to compare (SSE-KMS): the record's word, since the server
		   checked each part's Content-MD5 when it was sent. */
		if (!rp || rp->len != p->len)
			return 0;
		m->opaque = 1;
		snprintf(p->md5, sizeof(p->md5), "%s", rp->md5);
	} else if (rp && rp->len == p->len && strcmp(rp->md5, md5) == 0) {
		snprintf(p->md5, sizeof(p->md5), "%s", md5);
	} else {
		if (_hash_part(m, (int)it->part - 1, local, err, errlen) < 0)
			return -1;
		if (strcmp(local, md5) != 0)
			return 0;
		snprintf(p->md5, sizeof(p->md5), "%s", md5);
		xfer_emit(m->r->ctx, &(struct xfer_note){
			.type = XR_MPU, .code = XFER_MPU_PART, .a = it->part, .b = p->len,
			.cks = md5, .path = m->rel, .text = m->id });
	}
	snprintf(p->etag, sizeof(p->etag), "%s", it->name);
	p->done = 1;
	return 1;
}

/*
 * Ask the server which parts of upload e it holds (ListParts, page by page)
 * and mark those that count. 0; 1 when the server no longer has the upload
 * (NoSuchUpload); -1 with err and *final.
 */
static int _list_parts(struct _mpu *m, const struct xfer_mpu_ent *e, int *have, int *final,
		       char *err, size_t errlen)
{
	char url[XFER_PATH_MAX * 3];
	long marker = 0, code;

	*have = 0;
	for (int page = 0; page < LIST_PAGES; page++) {
		struct urlx_listing doc;
		char pre[96];

		snprintf(pre, sizeof(pre), "max-parts=1000&part-number-marker=%ld&uploadId=", marker);
		if (_qurl(m, pre, e->upload_id, url, sizeof(url)) < 0) {
			snprintf(err, errlen, "URL too long");
			return -1;
		}
		if (_call(m->r, &(struct _s3_req){ .method = "GET", .url = url }, &doc, &code,
			  final, err, errlen) < 0) {
			int gone = code == 404 && strcmp(doc.mpu.code, "NoSuchUpload") == 0;

			urlx_free(&doc);
			return gone ? 1 : -1;
		}
		if (!_answers(&doc, "ListParts")) {
			snprintf(err, errlen, "ListParts answered a '%.40s' document", doc.mpu.root);
			urlx_free(&doc);
			return -1;
		}
		for (size_t i = 0; i < doc.n; i++) {
			int k = _listed(m, e, &doc.items[i], err, errlen);

			if (k < 0) {
				urlx_free(&doc);
				return -1;
			}
			*have += k;
		}
		/* The next page starts after a marker that moves forward, or not at all. */
		if (!doc.truncated || doc.mpu.next_marker <= marker ||
		    doc.mpu.next_marker >= URL_MPU_PARTS_MAX) {
			urlx_free(&doc);
			return 0;
		}
		marker = (long)doc.mpu.next_marker;
		urlx_free(&doc);
	}
	return 0;
}

/* ---- sending ---- */

struct _src {
	struct _mpu *m;
	int64_t off, left;
	struct cksum md5;
	int rerr;
};

static size_t _read(char *b, size_t sz, size_t nm, void *arg)
{
	struct _src *s = arg;
	size_t want = sz * nm;
	ssize_t n;

	if (url__stopped(s->m->r))
		return CURL_READFUNC_ABORT;
	if ((int64_t)want > s->left)
		want = (size_t)s->left;
	if (!want)
		return 0;
	do
		n = pread(s->m->sfd, b, want, s->off);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		s->rerr = n < 0 ? errno : EAGAIN;
		return CURL_READFUNC_ABORT;
	}
	cksum_update(&s->md5, b, (size_t)n);
	s->off += n;
	s->left -= n;
	xfer_engine_write(s->m->r->ctx, -1, b, (size_t)n, -1);
	return (size_t)n;
}

/*
 * UploadPart: part i with its Content-MD5, then its ETag checked against
 * the md5 of the bytes sent. 0; 1 the ETag differs (sent again by the
 * caller); -1 with err and *final.
 */
static int _send_part(struct _mpu *m, int i, int *final, char *err, size_t errlen)
{
	struct _part *p = &m->parts[i];
	struct url__meta meta = { 0 };
	struct url__hctx h = { m->r, &meta };
	struct _src s = { .m = m, .off = p->off, .left = p->len };
	char url[XFER_PATH_MAX * 3], hdr[64], sent[CKSUM_HEX_MAX], why[256], pre[48];
	char got[33] = "";
	unsigned char bin[16];
	struct curl_slist *hdrs;
	long code = 0;
	CURLcode rc;
	CURL *c;

	*final = 0;
	if (!p->md5[0] && _hash_part(m, i, p->md5, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "reading part %d of the source: %s", i + 1, why);
		return -1;
	}
	_md5_bytes(p->md5, bin);
	memcpy(hdr, "Content-MD5: ", 13);
	_b64(bin, sizeof(bin), hdr + 13);
	snprintf(pre, sizeof(pre), "partNumber=%d&uploadId=", i + 1);
	if (_qurl(m, pre, m->id, url, sizeof(url)) < 0) {
		snprintf(err, errlen, "URL too long");
		*final = 1;
		return -1;
	}
	if (cksum_init(&s.md5, CKSUM_MD5) < 0 || !(c = url__easy(m->r, url, &hdrs))) {
		cksum_abort(&s.md5);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	hdrs = curl_slist_append(hdrs, hdr);
	curl_easy_setopt(c, CURLOPT_HTTPHEADER, hdrs);
	curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, _read);
	curl_easy_setopt(c, CURLOPT_READDATA, &s);
	curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)p->len);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, url__header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, url__discard);
	meta.size = meta.mtime = -1;
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		cksum_abort(&s.md5);
		if (s.rerr)
			snprintf(err, errlen, "reading part %d of the source: %s", i + 1,
				 s.rerr == EAGAIN ? "the source is shorter than it was" :
				 strerror(s.rerr));
		else
			*final = url__describe(m->r, c, rc, err, errlen);
		/* 404: the upload is gone; the next attempt's ListParts starts it over. */
		curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
		if (code == 404)
			*final = 0;
		url__easy_done(c, hdrs);
		return -1;
	}
	url__easy_done(c, hdrs);
	cksum_final(&s.md5, sent);
	m->sent++;
	/* The bytes sent are the bytes hashed for the Content-MD5, or the source changed. */
	if (s.left || strcmp(cksum_hex(sent), p->md5) != 0) {
		snprintf(err, errlen, "the source changed while part %d was sent", i + 1);
		return -1;
	}
	if (!url__mpu_etag_ok(meta.etag)) {
		snprintf(err, errlen, "the server's ETag for part %d is missing or malformed", i + 1);
		return -1;
	}
	/* The ETag's own md5, not meta.md5: another header of the answer may have set that. */
	if (_etag_md5(meta.etag, got) && strcmp(got, p->md5) != 0) {
		snprintf(err, errlen, "S3 ETag of part %d is %s, the md5 of the bytes sent %s",
			 i + 1, got, p->md5);
		return 1;
	}
	if (!got[0])
		m->opaque = 1;	/* SSE-KMS: the server checked Content-MD5; no ETag to compare */
	snprintf(p->etag, sizeof(p->etag), "%s", meta.etag);
	p->done = 1;
	xfer_emit(m->r->ctx, &(struct xfer_note){
		.type = XR_MPU, .code = XFER_MPU_PART, .a = i + 1, .b = p->len, .cks = p->md5,
		.path = m->rel, .text = m->id });
	return 0;
}

/* CreateMultipartUpload: m->id. 0 or -1 with err and *final. */
static int _create(struct _mpu *m, int *final, char *err, size_t errlen)
{
	char url[XFER_PATH_MAX * 3];
	struct urlx_listing doc;
	long code;
	int n = snprintf(url, sizeof(url), "%s?uploads=", m->url);

	if (n < 0 || (size_t)n >= sizeof(url)) {
		snprintf(err, errlen, "URL too long");
		*final = 1;
		return -1;
	}
	if (_call(m->r, &(struct _s3_req){ .method = "POST", .url = url }, &doc, &code, final, err,
		  errlen) < 0) {
		urlx_free(&doc);
		return -1;
	}
	if (!_answers(&doc, "InitiateMultipartUpload") ||
	    !_id_ok(doc.mpu.upload_id)) {
		snprintf(err, errlen, "CreateMultipartUpload answered no usable upload id");
		urlx_free(&doc);
		return -1;
	}
	snprintf(m->id, sizeof(m->id), "%s", doc.mpu.upload_id);
	urlx_free(&doc);
	return 0;
}

/*
 * CompleteMultipartUpload with every part's ETag, then the object's ETag
 * compared with the one its parts' md5s make (when the answer has none:
 * asked with HEAD). token gets what verified it. 0 or -1 with err, *final.
 */
static int _complete(struct _mpu *m, char *token, size_t toklen, int *final, char *err,
		     size_t errlen)
{
	static const char head[] =
		"<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">";
	static const char tail[] = "</CompleteMultipartUpload>";
	size_t cap = sizeof(head) + sizeof(tail) + (size_t)m->plan.nparts * (64 + URLX_ETAG_MAX);
	char url[XFER_PATH_MAX * 3], want[64], got[URLX_ETAG_MAX];
	char (*md5s)[33] = calloc((size_t)m->plan.nparts, sizeof(*md5s));
	char *body = malloc(cap);
	struct urlx_listing doc;
	size_t o;
	long code;
	int rc = -1;

	if (!md5s || !body) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	o = (size_t)snprintf(body, cap, "%s", head);
	for (int i = 0; i < m->plan.nparts; i++) {
		o += (size_t)snprintf(body + o, cap - o, "<Part><PartNumber>%d</PartNumber>"
				      "<ETag>%s</ETag></Part>", i + 1, m->parts[i].etag);
		memcpy(md5s[i], m->parts[i].md5, sizeof(md5s[i]));
	}
	o += (size_t)snprintf(body + o, cap - o, "%s", tail);
	if (_qurl(m, "uploadId=", m->id, url, sizeof(url)) < 0 ||
	    url__mpu_etag((const char (*)[33])md5s, m->plan.nparts, want, sizeof(want)) < 0) {
		snprintf(err, errlen, "URL too long, or a part without its md5");
		*final = 1;
		goto out;
	}
	if (_call(m->r, &(struct _s3_req){ .method = "POST", .url = url, .body = body, .len = o },
		  &doc, &code, final, err, errlen) < 0) {
		urlx_free(&doc);
		goto out;
	}
	m->completed = 1;
	snprintf(got, sizeof(got), "%s", _answers(&doc, "CompleteMultipartUpload") ?
		 doc.mpu.etag : "");
	urlx_free(&doc);
	if (!got[0] || m->opaque) {
		struct url__meta after;
		char why[512];

		if (url__stat_remote(m->r, m->url, &after, final, why, sizeof(why)) < 0) {
			snprintf(err, errlen, "cannot check the object after completing it: %s", why);
			goto out;
		}
		if (after.size != m->parts[m->plan.nparts - 1].off +
		    m->parts[m->plan.nparts - 1].len) {
			snprintf(err, errlen, "size mismatch after upload: the server has %lld bytes",
				 (long long)after.size);
			*final = 0;
			goto out;
		}
		if (m->opaque) {
			snprintf(token, toklen, "size:%lld", (long long)after.size);
			rc = 0;
			goto out;
		}
		snprintf(got, sizeof(got), "%s", after.etag);
	}
	/* "HEX-N", quoted, as the parts' md5s make it (hex in either case). */
	if (strlen(got) != strlen(want) + 2 || got[0] != '"' ||
	    strncasecmp(got + 1, want, strlen(want)) != 0 || got[strlen(got) - 1] != '"') {
		snprintf(err, errlen, "checksum mismatch after upload: S3 ETag %.80s, the md5s of "
			 "the parts sent make \"%s\"", got, want);
		*final = 0;
		goto out;
	}
	snprintf(token, toklen, "s3etag:%s", want);
	rc = 0;
out:
	free(body);
	free(md5s);
	return rc;
}

/* ---- the endpoint's put, in parts ---- */

int url__mpu_wanted(const struct url__run *r, int64_t size)
{
	const struct conf *c = r->ctx->conf;
	int64_t part = c && c->s3_part_size ? (int64_t)c->s3_part_size : URL_MPU_PART_DEFAULT;

	return r->proto == P_S3 && size > part;
}

/* Start over: a new upload, its id recorded before any part goes. */
static int _fresh(struct _mpu *m, const struct stat *cur, int *final, char *err, size_t errlen)
{
	for (int i = 0; i < m->plan.nparts; i++)
		m->parts[i].done = 0;
	if (_create(m, final, err, errlen) < 0)
		return -1;
	xfer_emit(m->r->ctx, &(struct xfer_note){
		.type = XR_MPU, .code = XFER_MPU_BEGIN, .a = cur->st_size,
		.b = xfer_ns(&cur->st_mtim), .c = m->plan.part_size, .path = m->rel,
		.text = m->id });
	return 0;
}

/* Resume what an earlier attempt began, or start over (the stale upload aborted). */
static int _start(struct _mpu *m, const struct stat *cur, int *final, char *err, size_t errlen)
{
	struct xfer_ctx *ctx = m->r->ctx;
	const struct xfer_mpu_ent *e = _recorded(ctx, m->rel);
	int have, k;

	if (!e)
		return _fresh(m, cur, final, err, errlen);
	if (e->size != cur->st_size || e->mtime_ns != xfer_ns(&cur->st_mtim) ||
	    e->part_size != m->plan.part_size || !_id_ok(e->upload_id)) {
		_abort(m, e->upload_id, "the source or S3PartSize changed since it began");
		return _fresh(m, cur, final, err, errlen);
	}
	snprintf(m->id, sizeof(m->id), "%s", e->upload_id);
	k = _list_parts(m, e, &have, final, err, errlen);
	if (k < 0)
		return -1;
	if (k == 1) {
		xfer_logf(ctx, LOG_LVL_INFO, "request %lld: '%s': S3 multipart upload %s is gone "
			  "(NoSuchUpload): starting over", (long long)ctx->request_id, m->rel, m->id);
		_abort(m, e->upload_id, "NoSuchUpload");
		return _fresh(m, cur, final, err, errlen);
	}
	xfer_logf(ctx, LOG_LVL_INFO, "request %lld: '%s': resuming S3 multipart upload: %d of %d "
		  "parts on the server, %d to send", (long long)ctx->request_id, m->rel, have,
		  m->plan.nparts, m->plan.nparts - have);
	return 0;
}

int url__mpu_put(struct url__run *r, const char *url, const char *rel, int sfd,
		 const struct stat *cur, struct xfer_stream *out)
{
	struct xfer_ctx *ctx = r->ctx;
	const struct conf *c = ctx->conf;
	struct _mpu m = { .r = r, .url = url, .rel = rel, .sfd = sfd };
	char err[XFER_TEXT_MAX] = "";
	int final = 0, rc = -1;

	if (url__mpu_plan(cur->st_size, c && c->s3_part_size ? (int64_t)c->s3_part_size :
			  URL_MPU_PART_DEFAULT, &m.plan, err, sizeof(err)) < 0) {
		out->final = 1;
		return url__why(out, "cannot upload '%s': %s", rel, err);
	}
	if (m.plan.raised)
		xfer_logf(ctx, LOG_LVL_INFO, "request %lld: '%s': %lld bytes would be more than "
			  "S3's %d parts of S3PartSize: parts of %lld bytes instead",
			  (long long)ctx->request_id, rel, (long long)cur->st_size, URL_MPU_PARTS_MAX,
			  (long long)m.plan.part_size);
	m.parts = calloc((size_t)m.plan.nparts, sizeof(*m.parts));
	m.buf = malloc(URL_CHUNK);
	if (!m.parts || !m.buf) {
		snprintf(err, sizeof(err), "out of memory");
		goto out;
	}
	for (int i = 0; i < m.plan.nparts; i++) {
		m.parts[i].off = (int64_t)i * m.plan.part_size;
		m.parts[i].len = cur->st_size - m.parts[i].off < m.plan.part_size ?
				 cur->st_size - m.parts[i].off : m.plan.part_size;
	}
	if (_start(&m, cur, &final, err, sizeof(err)) < 0)
		goto out;
	for (int i = 0; i < m.plan.nparts; i++) {
		int k = 0;

		for (int t = 0; !m.parts[i].done && t < PART_TRIES; t++) {
			if ((k = _send_part(&m, i, &final, err, sizeof(err))) < 0)
				goto out;
			if (k == 1)
				xfer_logf(ctx, LOG_LVL_WARN, "request %lld: '%s': %s (try %d of %d)",
					  (long long)ctx->request_id, rel, err, t + 1, PART_TRIES);
		}
		if (!m.parts[i].done)
			goto out;	/* err: the last mismatch */
	}
	if (_complete(&m, out->token, sizeof(out->token), &final, err, sizeof(err)) < 0) {
		/* The upload stays for a retry unless the server refused it for good,
		   or completed it (an object that failed its check: the next attempt
		   uploads it anew). */
		if (m.completed)
			xfer_emit(ctx, &(struct xfer_note){
				.type = XR_MPU, .code = XFER_MPU_END, .path = rel, .text = m.id });
		else if (final)
			_abort(&m, m.id, "completing it failed");
		goto out;
	}
	xfer_emit(ctx, &(struct xfer_note){
		.type = XR_MPU, .code = XFER_MPU_END, .path = rel, .text = m.id });
	out->bytes = cur->st_size;
	xfer_logf(ctx, LOG_LVL_INFO, "request %lld: '%s' uploaded in %d parts of %lld bytes (%d "
		  "sent by this attempt)", (long long)ctx->request_id, rel, m.plan.nparts,
		  (long long)m.plan.part_size, m.sent);
	rc = 0;
out:
	if (rc < 0 && m.id[0] && !m.completed && ctx->stop && *ctx->stop == XFER_STOP_CANCEL)
		_abort(&m, m.id, "the request was cancelled");
	if (rc < 0 && !url__stopped(r)) {
		out->final = final;
		url__why(out, "multipart upload of '%s' failed: %s", rel, err);
	}
	free(m.parts);
	free(m.buf);
	return rc;
}
