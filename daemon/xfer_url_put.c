/*
 * xfer_url_put.c - the url endpoint's uploads (stage_out and archive to a
 * URL): one PUT/STOR per file of the local source (WebDAV collections are
 * created with MKCOL, FTP/SFTP directories by the upload), verified by the
 * S3 ETag (MD5 of what was sent) or by the size the server reports
 * afterwards. The local source is walked by the engine: no symlink is
 * followed, and symlinks and special files are skipped.
 */
#include "config.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
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

/* WebDAV: MKCOL url (ending in '/'); an existing collection is fine. */
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
	return -1;
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
		if (_mkcol(r, buf, err, errlen) < 0)
			return -1;
		buf[i + 1] = keep;
	}
	return 0;
}


/*
 * Send the open source s->fd to url; m gets what the server said in its
 * answer, md5h "md5:HEX" of what was sent. 0, or -1 after reporting the
 * failure (or silently when stopped).
 */
static int _put_send(struct url__run *r, struct _source *s, const char *url, const char *rel,
		     const struct stat *cur, struct url__meta *m, char *md5h)
{
	struct url__hctx h = { r, m };
	struct curl_slist *hdrs;
	char why[XFER_TEXT_MAX];
	CURL *c;
	CURLcode rc;
	int final = 0;

	m->size = m->mtime = -1;
	c = cksum_init(&s->md5, CKSUM_MD5) == 0 ? url__easy(r, url, &hdrs) : NULL;
	if (!c) {
		cksum_abort(&s->md5);
		xfer_failf(&r->t, rel, 0, "out of memory");
		return -1;
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
		if (url__stopped(r)) {
			url__easy_done(c, hdrs);
			return -1;
		}
		if (s->rerr)
			snprintf(why, sizeof(why), "reading the source: %s", strerror(s->rerr));
		else
			final = url__describe(r, c, rc, why, sizeof(why));
		url__easy_done(c, hdrs);
		xfer_failf(&r->t, rel, final, "upload of '%s' failed: %s", rel, why);
		return -1;
	}
	url__easy_done(c, hdrs);
	cksum_final(&s->md5, md5h);
	return 0;
}

/*
 * Verify an upload: the S3 ETag is the MD5 of what arrived; otherwise ask
 * the server for the size (and an md5 when it states one). token gets what
 * was compared. 0, or -1 after reporting the mismatch.
 */
static int _put_verify(struct url__run *r, const char *url, const char *rel,
		       const struct url__meta *m, int64_t sent, const char *md5, char *token)
{
	struct url__meta after;
	char why[XFER_TEXT_MAX];
	int final = 0;

	if (r->proto == P_S3 && m->md5[0]) {
		if (strcmp(m->md5, md5) != 0) {
			xfer_failf(&r->t, rel, 0, "checksum mismatch after upload of '%s': S3 ETag "
				   "%s, md5 of the data sent %s", rel, m->md5, md5);
			return -1;
		}
		snprintf(token, CKSUM_HEX_MAX, "md5:%s", md5);
		return 0;
	}
	if (url__stat_remote(r, url, &after, &final, why, sizeof(why)) < 0) {
		xfer_failf(&r->t, rel, 0, "cannot check '%s' after the upload: %s", rel, why);
		return -1;
	}
	if (after.size != sent) {
		xfer_failf(&r->t, rel, 0, "size mismatch after upload of '%s': sent %lld bytes, the "
			   "server has %lld", rel, (long long)sent, (long long)after.size);
		return -1;
	}
	/* A server that states a checksum: md5 we can compare. */
	if (after.md5[0] && !after.sha256[0] && strcmp(after.md5, md5) != 0) {
		xfer_failf(&r->t, rel, 0, "checksum mismatch after upload of '%s': %s says md5 %s, "
			   "sent %s", rel, after.how, after.md5, md5);
		return -1;
	}
	if (after.md5[0] && !after.sha256[0])
		snprintf(token, CKSUM_HEX_MAX, "md5:%s", md5);
	else
		snprintf(token, CKSUM_HEX_MAX, "size:%lld", (long long)sent);
	return 0;
}

/* PUT/STOR one local file (opened relative to sdir) to url, then verify it. */
static void _put(struct url__run *r, int sdir, const char *sname, const char *url,
		 const char *rel, const struct stat *st)
{
	struct url__meta m = { 0 }, after;
	struct _source s;
	struct stat cur;
	char md5h[CKSUM_HEX_MAX], token[CKSUM_HEX_MAX], why[XFER_TEXT_MAX];
	int64_t started = (int64_t)time(NULL);
	int final = 0;

	if (xfer_engine_want(r->ctx, rel, st->st_size, xfer_ns(&st->st_mtim)) == XFER_WANT_KEPT &&
	    url__stat_remote(r, url, &after, &final, why, sizeof(why)) == 0 &&
	    after.size == st->st_size) {
		xfer_tally_add(&r->t, &r->t.kept);
		return;
	}
	xfer_emit(r->ctx, XR_ITEM_START, 0, st->st_size, xfer_ns(&st->st_mtim),
		  (int64_t)(st->st_mode & 07777), NULL, rel, "file");
	memset(&s, 0, sizeof(s));
	s.r = r;
	s.fd = openat(sdir, sname, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (s.fd < 0) {
		xfer_failf(&r->t, rel, errno == EACCES || errno == ENOENT || errno == ELOOP,
			   "cannot open source '%s': %s", rel, strerror(errno));
		return;
	}
	if (fstat(s.fd, &cur) < 0 || !S_ISREG(cur.st_mode) || cur.st_ino != st->st_ino) {
		close(s.fd);
		xfer_failf(&r->t, rel, 0, "source '%s' changed while walking", rel);
		return;
	}
	fcntl(s.fd, F_SETFL, fcntl(s.fd, F_GETFL) & ~O_NONBLOCK);
	if (_put_send(r, &s, url, rel, &cur, &m, md5h) < 0) {
		close(s.fd);
		return;
	}
	if (fstat(s.fd, &cur) < 0 || cur.st_size != s.sent ||
	    xfer_ns(&cur.st_mtim) != xfer_ns(&st->st_mtim)) {
		close(s.fd);
		xfer_failf(&r->t, rel, 0, "source '%s' changed during the upload: will be redone", rel);
		return;
	}
	close(s.fd);
	/* md5h is "md5:HEX": the hex is compared. */
	if (_put_verify(r, url, rel, &m, s.sent, md5h + 4, token) < 0)
		return;
	xfer_emit(r->ctx, XR_ITEM_COPIED, 0, 0, 0, 0, token, rel, NULL);
	xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: '%s' uploaded, verified by %s",
		  (long long)r->ctx->request_id, rel, token);
	xfer_emit(r->ctx, XR_ITEM_DONE, 0, s.sent, started, (int64_t)time(NULL), token, rel, "file");
	xfer_tally_add(&r->t, &r->t.verified);
	xfer_engine_remove_source(r->ctx, sdir, sname, rel);
}

/* ---- the walk of the local tree ---- */

struct _putw {
	struct url__run *r;
	CURL *esc;
};

static int _put_visit(struct xfer_walk *w, struct xfer_walk_dir *dir, const char *name,
		      const char *rel, const struct stat *st)
{
	struct _putw *pw = w->arg;
	struct url__run *r = pw->r;
	char url[XFER_PATH_MAX * 2], why[XFER_TEXT_MAX];

	if (S_ISREG(st->st_mode)) {
		if (url__remote_url(r, pw->esc, rel, url, sizeof(url)) < 0)
			xfer_failf(&r->t, rel, 1, "URL too long for '%s'", rel);
		else
			_put(r, dir->fd, name, url, rel, st);
	} else if (S_ISDIR(st->st_mode) && xfer_excluded(r->ctx, rel)) {
		/* exempt= inside the tree: not uploaded, not removed */
		xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, rel, XFER_EXCLUDE_REASON);
	} else if (S_ISDIR(st->st_mode)) {
		char d[XFER_PATH_MAX + 1];

		if (r->proto != P_HTTP)
			return 1;
		snprintf(d, sizeof(d), "%s/", rel);
		if (url__remote_url(r, pw->esc, d, url, sizeof(url)) < 0)
			snprintf(why, sizeof(why), "URL too long");
		else if (_mkcol(r, url, why, sizeof(why)) == 0)
			return 1;
		xfer_failf(&r->t, rel, 0, "cannot create collection '%s': %s", rel, why);
	} else {
		char msg[256];

		snprintf(msg, sizeof(msg), "%s skipped: only regular files and directories are "
			 "uploaded", S_ISLNK(st->st_mode) ? "symlink" : "special file");
		xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, rel, msg);
	}
	return 0;
}

static void _put_fail(struct xfer_walk *w, const char *rel, int err, const char *what)
{
	struct _putw *pw = w->arg;

	xfer_fail(&pw->r->t, rel, err, what);
}

/* A local tree to a URL ending in '/'. -1 when the request goes on, else the result. */
static int _put_tree(struct url__run *r, CURL *esc, int sroot)
{
	struct _putw pw = { r, esc };
	struct xfer_walk w = { .ctx = r->ctx, .arg = &pw, .visit = _put_visit, .fail = _put_fail };
	struct xfer_walk_dir root = { sroot, "", 0, NULL, NULL };
	char msg[XFER_TEXT_MAX], full[XFER_TEXT_MAX];

	fcntl(sroot, F_SETFL, fcntl(sroot, F_GETFL) & ~O_NONBLOCK);
	if (r->url[strlen(r->url) - 1] != '/')
		return url__finish(r, XFER_FINAL, "a directory goes to a URL ending in '/' (the "
				   "remote directory or prefix)");
	xfer_count_tree(&r->t, sroot, 1);
	xfer_emit(r->ctx, XR_TOTALS, 0, r->t.files, r->t.bytes, r->t.skipped, NULL, NULL, NULL);
	if (r->proto == P_HTTP && _mkcol_path(r, r->url, msg, sizeof(msg)) < 0) {
		snprintf(full, sizeof(full), "cannot create the collection %.300s: %.600s", r->url,
			 msg);
		return url__finish(r, XFER_RETRYABLE, full);
	}
	xfer_walk_tree(&w, &root);
	return -1;
}

/* A single local file to a URL (ending in '/': the file keeps its name). */
static int _put_one(struct url__run *r, CURL *esc, const struct stat *st)
{
	struct xfer_ctx *ctx = r->ctx;
	const char *sb = strrchr(ctx->source, '/');
	char sdir[XFER_PATH_MAX], name[NAME_MAX + 1], leafurl[XFER_PATH_MAX * 2];
	char msg[XFER_TEXT_MAX];
	struct stat st2;
	int sparent;

	snprintf(name, sizeof(name), "%s", sb ? sb + 1 : ctx->source);
	snprintf(sdir, sizeof(sdir), "%.*s", sb == ctx->source ? 1 : (int)(sb - ctx->source),
		 ctx->source);
	sparent = open(sdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	xfer_emit(ctx, XR_TOTALS, 0, 1, st->st_size, 0, NULL, NULL, NULL);
	r->t.files = 1;
	if (r->url[strlen(r->url) - 1] == '/') {
		if (url__remote_url(r, esc, name, leafurl, sizeof(leafurl)) < 0)
			leafurl[0] = '\0';
	} else if (url__url_for(r, r->proto == P_S3 ? r->s3_key : r->url, leafurl,
				sizeof(leafurl)) < 0) {
		leafurl[0] = '\0';
	}
	if (sparent < 0 || !leafurl[0]) {
		snprintf(msg, sizeof(msg), "cannot open the directory of %s, or URL too long",
			 ctx->source);
		if (sparent >= 0)
			close(sparent);
		return url__finish(r, XFER_FINAL, msg);
	}
	if (r->proto == P_HTTP) {
		char parent[XFER_PATH_MAX * 2];
		char *ls;

		snprintf(parent, sizeof(parent), "%s", leafurl);
		ls = strrchr(parent, '/');
		if (ls && ls > strstr(parent, "://") + 2) {
			ls[1] = '\0';
			if (_mkcol_path(r, parent, msg, sizeof(msg)) < 0)
				xfer_logf(ctx, LOG_LVL_DEBUG, "MKCOL of the parent: %s", msg);
		}
	}
	if (fstatat(sparent, name, &st2, AT_SYMLINK_NOFOLLOW) < 0 || st2.st_ino != st->st_ino)
		xfer_failf(&r->t, name, 0, "source '%s' changed while walking", name);
	else
		_put(r, sparent, name, leafurl, name, &st2);
	close(sparent);
	return -1;
}

int url__stage_out(struct url__run *r)
{
	struct xfer_ctx *ctx = r->ctx;
	char msg[XFER_TEXT_MAX];
	struct stat st;
	int sroot, rc;
	CURL *esc;

	sroot = xfer_open_source(ctx, &st, msg, sizeof(msg));
	if (sroot < 0)
		return url__finish(r, XFER_FINAL, msg);
	if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
		close(sroot);
		snprintf(msg, sizeof(msg), "source %s is neither a file nor a directory", ctx->source);
		return url__finish(r, XFER_FINAL, msg);
	}
	esc = curl_easy_init();
	if (!esc) {
		close(sroot);
		return url__finish(r, XFER_RETRYABLE, "out of memory");
	}
	rc = S_ISDIR(st.st_mode) ? _put_tree(r, esc, sroot) : _put_one(r, esc, &st);
	curl_easy_cleanup(esc);
	if (rc < 0 && !url__stopped(r) && !r->t.failures && strcmp(ctx->action, "archive") == 0)
		xfer_label_all(r->ctx, sroot, "archived", r->ctx->dest);
	close(sroot);
	return rc;
}
