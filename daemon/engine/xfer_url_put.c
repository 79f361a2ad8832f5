/*
 * xfer_url_put.c - the url endpoint as a destination (stage_out and archive
 * to a URL), driven by the engine (xfer_pipeline.c): one PUT/STOR per file
 * (WebDAV collections are created with MKCOL, FTP/SFTP directories by the
 * upload), verified by the S3 ETag (MD5 of what was sent) or by the size
 * the server reports afterwards; an S3 file larger than S3PartSize goes up
 * in parts instead (xfer_url_mpu.c). The walk of the local source, the resume
 * decision, failure accounting, records, keep=no and labels are the
 * driver's.
 *
 * A name from the local walk is percent-encoded into the URL, never spliced
 * in raw.
 */
#include "config.h"

#include <curl/curl.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "xfer_url_int.h"
#include "xfer_util.h"

struct _source {
	struct url__run *r;
	int fd;
	int64_t sent;
	struct cksum md5;            /* compared with an S3 ETag or an md5 the server states */
	int rerr;
};

static size_t _read(char *b, size_t sz, size_t nm, void *p)
{
	struct _source *s = p;
	ssize_t n;

	if (url__stopped(s->r))
		return CURL_READFUNC_ABORT;
	do
		n = read(s->fd, b, sz * nm);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		s->rerr = errno;
		return CURL_READFUNC_ABORT;
	}
	cksum_update(&s->md5, b, (size_t)n);
	s->sent += n;
	/* libcurl sends these bytes next: the endpoint's write, charged by the engine. */
	xfer_engine_write(s->r->ctx, -1, b, (size_t)n, -1);
	return (size_t)n;
}

/* WebDAV: MKCOL url (ending in '/'); an existing collection is fine. 0, or an HTTP code. */
static int _mkcol(struct url__run *r, const char *url, char *err, size_t errlen)
{
	struct curl_slist *hdrs;
	CURL *c = url__easy(r, url, &hdrs);
	CURLcode rc;
	long code = 0;

	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "MKCOL");
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 0L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, url__discard);
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (rc != CURLE_OK) {
		url__describe(r, c, rc, err, errlen);
		url__easy_done(c, hdrs);
		return -1;
	}
	url__easy_done(c, hdrs);
	/* 201 created; 405 it exists already (nginx, Apache). */
	if (code == 201 || code == 405 || code == 200 || code == 204)
		return 0;
	snprintf(err, errlen, "MKCOL answered HTTP %ld", code);
	return code > 0 && code < 1000 ? (int)code : -1;
}

/* MKCOL every collection from the server root down to url's path (inclusive). */
static int _mkcol_path(struct url__run *r, const char *url, char *err, size_t errlen)
{
	char buf[XFER_PATH_MAX * 2];
	const char *path = url__url_path(url);
	size_t off = (size_t)(path - url);

	if (snprintf(buf, sizeof(buf), "%s", url) >= (int)sizeof(buf)) {
		snprintf(err, errlen, "URL too long");
		return -1;
	}
	for (size_t i = off + 1; buf[i]; i++) {
		char keep;

		if (buf[i] != '/')
			continue;
		keep = buf[i + 1];
		buf[i + 1] = '\0';
		if (_mkcol(r, buf, err, errlen) != 0)
			return -1;
		buf[i + 1] = keep;
	}
	return 0;
}

/*
 * Send the open source s->fd to url; m gets what the server said in its
 * answer, md5h "md5:HEX" of what was sent. 0, or -1 with out->why.
 */
static int _put_send(struct url__run *r, struct _source *s, const char *url, const char *rel,
		     const struct stat *cur, struct url__meta *m, char *md5h, struct xfer_stream *out)
{
	struct url__hctx h = { r, m };
	struct curl_slist *hdrs;
	char why[XFER_TEXT_MAX];
	CURL *c;
	CURLcode rc;

	m->size = m->mtime = -1;
	c = cksum_init(&s->md5, CKSUM_MD5) == 0 ? url__easy(r, url, &hdrs) : NULL;
	if (!c) {
		cksum_abort(&s->md5);
		return url__why(out, "out of memory");
	}
	curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, _read);
	curl_easy_setopt(c, CURLOPT_READDATA, s);
	curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)cur->st_size);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, url__header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, url__discard);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		cksum_abort(&s->md5);
		if (s->rerr)
			snprintf(why, sizeof(why), "reading the source: %s", strerror(s->rerr));
		else
			out->final = url__describe(r, c, rc, why, sizeof(why));
		url__easy_done(c, hdrs);
		return url__why(out, "upload of '%s' failed: %s", rel, why);
	}
	url__easy_done(c, hdrs);
	cksum_final(&s->md5, md5h);
	return 0;
}

/*
 * Verify an upload: the S3 ETag is the MD5 of what arrived; otherwise ask
 * the server for the size (and an md5 when it states one). out->token gets
 * what was compared. 0, or -1 with out->why.
 */
static int _put_verify(struct url__run *r, const char *url, const char *rel,
		       const struct url__meta *m, const char *md5, struct xfer_stream *out)
{
	struct url__meta after;
	char why[XFER_TEXT_MAX];
	int final = 0;

	if (r->proto == P_S3 && m->md5[0]) {
		if (strcmp(m->md5, md5) != 0)
			return url__why(out, "checksum mismatch after upload of '%s': S3 ETag %s, md5 "
				    "of the data sent %s", rel, m->md5, md5);
		snprintf(out->token, sizeof(out->token), "md5:%s", md5);
		return 0;
	}
	if (url__stat_remote(r, url, &after, &final, why, sizeof(why)) < 0)
		return url__why(out, "cannot check '%s' after the upload: %s", rel, why);
	if (after.size != out->bytes)
		return url__why(out, "size mismatch after upload of '%s': sent %lld bytes, the server "
			    "has %lld", rel, (long long)out->bytes, (long long)after.size);
	/* A server that states a checksum: md5 we can compare. */
	if (after.md5[0] && !after.sha256[0] && strcmp(after.md5, md5) != 0)
		return url__why(out, "checksum mismatch after upload of '%s': %s says md5 %s, sent %s",
			    rel, after.how, after.md5, md5);
	if (after.md5[0] && !after.sha256[0])
		snprintf(out->token, sizeof(out->token), "md5:%s", md5);
	else
		snprintf(out->token, sizeof(out->token), "size:%lld", (long long)out->bytes);
	return 0;
}

/* ---- the endpoint ---- */

/*
 * The remote side: a tree goes to a URL ending in '/' (WebDAV: its
 * collections made); a file to the URL as given, or under its own name
 * below a URL ending in '/'.
 */
int url__open_dest(struct xfer_ctx *ctx, const struct xfer_root *src, struct xfer_ep **epp,
		   struct xfer_root *root, char *msg, size_t msglen)
{
	char why[XFER_TEXT_MAX], rel[XFER_PATH_MAX + 1];
	struct url__run *r;
	struct xfer_ep *ep;
	int rc, slash;

	if ((rc = url__ep_new(ctx, ctx->dest, epp, msg, msglen)) != XFER_OK)
		return rc;
	ep = *epp;
	r = &ep->r;
	root->dir = 0;
	slash = r->url[strlen(r->url) - 1] == '/';
	if (S_ISDIR(src->st.st_mode) && !slash) {
		snprintf(msg, msglen, "a directory goes to a URL ending in '/' (the remote "
			 "directory or prefix)");
		return XFER_FINAL;
	}
	if (S_ISDIR(src->st.st_mode)) {
		if (r->proto != P_HTTP || _mkcol_path(r, r->url, why, sizeof(why)) == 0)
			return XFER_OK;
		snprintf(msg, msglen, "cannot create the collection %.300s: %.600s", r->url, why);
		return XFER_RETRYABLE;
	}
	snprintf(root->name, sizeof(root->name), "%s", src->name);
	if ((slash && url__ep_url(ep, root->dir, root->name, rel, sizeof(rel), ep->file_url,
				  sizeof(ep->file_url)) < 0) ||
	    (!slash && url__url_for(r, r->proto == P_S3 ? r->s3_key : r->url, ep->file_url,
				    sizeof(ep->file_url)) < 0)) {
		snprintf(msg, msglen, "URL too long for %s", ctx->source);
		return XFER_FINAL;
	}
	if (r->proto == P_HTTP) {
		char parent[XFER_PATH_MAX * 2];
		char *ls;

		snprintf(parent, sizeof(parent), "%s", ep->file_url);
		ls = strrchr(parent, '/');
		if (ls && ls > strstr(parent, "://") + 2) {
			ls[1] = '\0';
			if (_mkcol_path(r, parent, why, sizeof(why)) < 0)
				xfer_logf(ctx, LOG_LVL_DEBUG, "MKCOL of the parent: %s", why);
		}
	}
	return XFER_OK;
}

/* A collection for WebDAV (MKCOL); ftp and sftp make directories as they upload. */
int url__mkdir(struct xfer_ep *ep, int dir, const char *name, int *sub)
{
	char rel[XFER_PATH_MAX + 1], url[XFER_PATH_MAX * 2], why[XFER_TEXT_MAX] = "URL too long";
	size_t n;
	int code = -1;

	/* One byte kept for the '/' that makes rel a directory's. */
	if (url__ep_url(ep, dir, name, rel, sizeof(rel) - 1, url, sizeof(url)) < 0)
		return ENAMETOOLONG;
	n = strlen(rel);
	rel[n] = '/';
	rel[n + 1] = '\0';
	if (ep->r.proto == P_HTTP && (url__remote_url(&ep->r, ep->esc, rel, url, sizeof(url)) < 0 ||
				      (code = _mkcol(&ep->r, url, why, sizeof(why))) != 0)) {
		xfer_logf(ep->r.ctx, LOG_LVL_WARN, "request %lld: cannot create collection '%s': %s",
			  (long long)ep->r.ctx->request_id, rel, why);
		return code == 401 || code == 403 ? EACCES : code == 507 ? ENOSPC : EIO;
	}
	*sub = url__ep_add_dir(ep, rel);
	return *sub < 0 ? ENOMEM : 0;
}

/* A collection needs nothing once its members are in place. */
void url__dir_done(struct xfer_ep *ep, int dir, int sdir, const struct stat *st)
{
	(void)ep;
	(void)dir;
	(void)sdir;
	(void)st;
}

/* PUT/STOR one file from sfd, then verify it by the server's word (xfer_endpoint.h). */
int url__put(struct xfer_ep *ep, int dir, const char *name, int sfd, const struct stat *cur,
	     struct xfer_stream *out)
{
	struct url__run *r = &ep->r;
	struct url__meta m = { 0 };
	struct _source s = { .r = r, .fd = sfd };
	char rel[XFER_PATH_MAX + 1], url[XFER_PATH_MAX * 2], md5h[CKSUM_HEX_MAX];

	if (url__ep_url(ep, dir, name, rel, sizeof(rel), url, sizeof(url)) < 0) {
		out->final = 1;
		return url__why(out, "URL too long for '%s'", name);
	}
	if (url__mpu_wanted(r, cur->st_size))
		return url__mpu_put(r, url, rel, sfd, cur, out);
	if (_put_send(r, &s, url, rel, cur, &m, md5h, out) < 0)
		return -1;
	out->bytes = s.sent;
	/* md5h is "md5:HEX": the hex is compared. */
	if (_put_verify(r, url, rel, &m, md5h + 4, out) < 0)
		return -1;
	xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: '%s' uploaded, verified by %s",
		  (long long)r->ctx->request_id, rel, out->token);
	return 0;
}
