/*
 * xfer_url.c - the "url" backend: http, https, s3, ftp, ftps and sftp
 * through libcurl.
 *
 * Runs only inside a worker that already has the owner's uid, gid and
 * groups: every credential file (~/.netrc, ~/.ssh, ~/.config/stagehand/
 * s3.conf) is read as the owner and must not be readable by anyone else.
 * The one exception is the site's S3CredentialsFile, read by xfer_url_prepare()
 * before the worker drops root.
 *
 * stage_in: the source is a URL (ending in '/' for a tree: WebDAV PROPFIND,
 * S3 ListObjectsV2, FTP/SFTP directory listings). Each file is written to a
 * temporary name in its destination directory (opened with O_NOFOLLOW
 * relative to its parent), checked against the server's checksum or size,
 * fsynced, read back and renamed. A partial temporary file is resumed (HTTP
 * Range, FTP REST, SFTP offset) when the server still describes the file as
 * it did when the partial download began (validator kept in an xattr); a
 * stopped download keeps its partial file for the next attempt.
 *
 * stage_out and archive: the source is a local file or tree, the
 * destination a URL: one PUT/STOR per file (WebDAV collections are created
 * with MKCOL, FTP/SFTP directories by the upload), verified by the S3 ETag
 * (MD5 of what was sent) or by the size the server reports afterwards.
 *
 * Must never: write credentials to a record, the log or the database (URLs
 * with a password are refused before this runs); follow a symlink on the
 * local side; accept a server-supplied name with '..', '/' at its start or
 * control characters.
 */
#include "config.h"

#include <ctype.h>
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"
#include "queue.h"
#include "xattr.h"
#include "xfer.h"
#include "xfer_url_int.h"
#include "xfer_util.h"

#define CHUNK (1u << 20)
#define PARTIAL_XATTR "user.stagehand-partial"

/* ---- site credentials, read before the worker drops root ---- */


static struct url__creds _site;
static char _site_err[512];

/*
 * Parse "key = value" lines: access_key_id / aws_access_key_id,
 * secret_access_key / aws_secret_access_key, session_token /
 * aws_session_token; '#' and '[section]' lines are ignored. The file must
 * be a regular file of the expected owner with no group/other permissions.
 */
static int _read_creds(const char *path, uid_t owner, struct url__creds *c, char *err, size_t errlen)
{
	char line[4096];
	struct stat st;
	FILE *f;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC | O_NONBLOCK), lineno = 0;

	memset(c, 0, sizeof(*c));
	if (fd < 0) {
		snprintf(err, errlen, "cannot open S3 credentials file %s: %s", path, strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		close(fd);
		snprintf(err, errlen, "S3 credentials file %s is not a regular file", path);
		return -1;
	}
	if ((st.st_mode & 077) || st.st_uid != owner) {
		close(fd);
		snprintf(err, errlen, "S3 credentials file %s is refused: it must belong to uid %u "
			 "and have mode 0600 (it has uid %u, mode %04o); run 'chmod 600 %s'", path,
			 (unsigned)owner, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), path);
		return -1;
	}
	f = fdopen(fd, "r");
	if (!f) {
		close(fd);
		snprintf(err, errlen, "cannot read S3 credentials file %s: %s", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), f)) {
		char *k = line, *v, *e;
		char *dst = NULL;
		size_t dl = 0;

		lineno++;
		while (isspace((unsigned char)*k))
			k++;
		if (!*k || *k == '#' || *k == ';' || *k == '[')
			continue;
		v = strchr(k, '=');
		if (!v) {
			snprintf(err, errlen, "%s:%d: expected key = value", path, lineno);
			fclose(f);
			return -1;
		}
		for (e = v; e > k && isspace((unsigned char)e[-1]); e--)
			;
		*e = '\0';
		for (v++; isspace((unsigned char)*v); v++)
			;
		for (e = v + strlen(v); e > v && isspace((unsigned char)e[-1]); e--)
			;
		*e = '\0';
		if (!strcasecmp(k, "access_key_id") || !strcasecmp(k, "aws_access_key_id")) {
			dst = c->access;
			dl = sizeof(c->access);
		} else if (!strcasecmp(k, "secret_access_key") ||
			   !strcasecmp(k, "aws_secret_access_key")) {
			dst = c->secret;
			dl = sizeof(c->secret);
		} else if (!strcasecmp(k, "session_token") || !strcasecmp(k, "aws_session_token")) {
			dst = c->token;
			dl = sizeof(c->token);
		}
		if (dst && snprintf(dst, dl, "%s", v) >= (int)dl) {
			snprintf(err, errlen, "%s:%d: value too long", path, lineno);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	if (!c->access[0] || !c->secret[0]) {
		snprintf(err, errlen, "S3 credentials file %s needs access_key_id and "
			 "secret_access_key", path);
		return -1;
	}
	c->have = 1;
	return 0;
}

static int _is_s3(const char *u)
{
	return u && strncasecmp(u, "s3://", 5) == 0;
}

void xfer_url_prepare(struct xfer_ctx *ctx)
{
	memset(&_site, 0, sizeof(_site));
	_site_err[0] = '\0';
	if (!ctx->conf || !ctx->conf->s3_credentials_file ||
	    !(_is_s3(ctx->source) || _is_s3(ctx->dest)))
		return;
	if (_read_creds(ctx->conf->s3_credentials_file, 0, &_site, _site_err,
			sizeof(_site_err)) < 0)
		memset(&_site, 0, sizeof(_site));
}

/* ---- the run ---- */




int url__stopped(struct url__run *r)
{
	return r->ctx->stop && *r->ctx->stop;
}

static void _fail_item(struct url__run *r, const char *rel, int final, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void _fail_item(struct url__run *r, const char *rel, int final, const char *fmt, ...)
{
	char msg[XFER_TEXT_MAX];
	va_list ap;

	va_start(ap, fmt);
	if (vsnprintf(msg, sizeof(msg), fmt, ap) >= (int)sizeof(msg))
		memcpy(msg + sizeof(msg) - 4, "...", 4);
	va_end(ap);
	xfer_emit(r->ctx, XR_ITEM_FAILED, final ? EACCES : EIO, 0, 0, 0, NULL, rel, msg);
	if (!r->failures)
		memcpy(r->first_error, msg, sizeof(r->first_error));
	r->failures++;
	if (final)
		r->final_failures++;
}

static int _finish(struct url__run *r, int result, const char *msg)
{
	xfer_emit(r->ctx, XR_RESULT, result, 0, 0, 0, NULL, NULL, msg);
	free(r->buf);
	for (size_t i = 0; i < r->nents; i++)
		free(r->ents[i].rel);
	free(r->ents);
	memset(&r->creds, 0, sizeof(r->creds));
	return result;
}

/* A name from a server or a tree: no '..', no '.', no empty component, no control char. */
int url__safe_rel(const char *rel)
{
	const char *p = rel;

	if (!*rel || *rel == '/')
		return 0;
	for (const char *c = rel; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f)
			return 0;
	while (*p) {
		const char *s = p;
		size_t n;

		while (*p && *p != '/')
			p++;
		n = (size_t)(p - s);
		if (n == 0 || n > NAME_MAX || (n == 1 && s[0] == '.') ||
		    (n == 2 && s[0] == '.' && s[1] == '.'))
			return 0;
		if (*p)
			p++;
		if (!*p && p[-1] == '/')
			return 0;
	}
	return 1;
}

int url__add_ent(struct url__run *r, const char *rel, int64_t size)
{
	if (r->nents == r->capents) {
		size_t cap = r->capents ? r->capents * 2 : 64;
		struct url__ent *e = realloc(r->ents, cap * sizeof(*e));

		if (!e)
			return -1;
		r->ents = e;
		r->capents = cap;
	}
	r->ents[r->nents].rel = strdup(rel);
	if (!r->ents[r->nents].rel)
		return -1;
	r->ents[r->nents].size = size;
	r->nents++;
	return 0;
}

static int _ent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct url__ent *)a)->rel, ((const struct url__ent *)b)->rel);
}

/* ---- curl ---- */

static int _xferinfo(void *p, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct url__run *r = p;

	(void)dt;
	(void)dn;
	(void)ut;
	(void)un;
	return url__stopped(r);
}

/* Build the request URL for rel (already escaped) under the remote root. */
static int _url_for(struct url__run *r, const char *root_rel, char *out, size_t outlen)
{
	int n;

	if (r->proto == P_S3)
		n = snprintf(out, outlen, "%s/%s", r->s3_base, root_rel);
	else
		n = snprintf(out, outlen, "%s", root_rel);
	return (n < 0 || (size_t)n >= outlen) ? -1 : 0;
}

/* Percent-encode each component of a relative path, keeping '/'. */
int url__escape_path(CURL *c, const char *rel, char *out, size_t outlen)
{
	size_t o = 0;
	const char *p = rel;

	while (*p) {
		const char *s = p;
		char *e;
		size_t n;

		while (*p && *p != '/')
			p++;
		e = curl_easy_escape(c, s, (int)(p - s));
		if (!e)
			return -1;
		n = strlen(e);
		if (o + n + 2 >= outlen) {
			curl_free(e);
			return -1;
		}
		memcpy(out + o, e, n);
		o += n;
		curl_free(e);
		if (*p == '/') {
			out[o++] = '/';
			p++;
		}
	}
	out[o] = '\0';
	return 0;
}

/* A new easy handle with the options every request shares. NULL: out of memory. */
CURL *url__easy(struct url__run *r, const char *url, struct curl_slist **hdrs)
{
	CURL *c = curl_easy_init();

	*hdrs = NULL;
	if (!c)
		return NULL;
	r->curl_err[0] = '\0';
	curl_easy_setopt(c, CURLOPT_URL, url);
	curl_easy_setopt(c, CURLOPT_ERRORBUFFER, r->curl_err);
	curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(c, CURLOPT_USERAGENT, "stagehand/" PACKAGE_VERSION);
	curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
	/* A stalled server: under 1 byte/s for two minutes fails the attempt. */
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);
	curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 120L);
	curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
	curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, _xferinfo);
	curl_easy_setopt(c, CURLOPT_XFERINFODATA, r);
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 1L);
	if (r->ctx->conf && r->ctx->conf->url_ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, r->ctx->conf->url_ca_file);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR,
			 r->proto == P_S3 ? (strncmp(r->s3_base, "https", 5) ? "http" : "https") :
			 r->proto == P_HTTP ? "http,https" : r->scheme);
#endif
	switch (r->proto) {
	case P_HTTP:
		/* Redirects only within http(s); credentials never follow to another host. */
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 1L);
		curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
#if LIBCURL_VERSION_NUM >= 0x075500
		curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
#endif
		/* fall through */
	case P_FTP:
		if (r->netrc[0]) {
			curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_OPTIONAL);
			curl_easy_setopt(c, CURLOPT_NETRC_FILE, r->netrc);
		}
		if (r->proto == P_FTP) {
			curl_easy_setopt(c, CURLOPT_FTP_CREATE_MISSING_DIRS,
					 (long)CURLFTP_CREATE_DIR_RETRY);
			if (strcmp(r->scheme, "ftps") == 0)
				curl_easy_setopt(c, CURLOPT_USE_SSL, (long)CURLUSESSL_ALL);
		}
		break;
	case P_SFTP:
		curl_easy_setopt(c, CURLOPT_SSH_AUTH_TYPES, (long)CURLSSH_AUTH_PUBLICKEY);
		curl_easy_setopt(c, CURLOPT_SSH_PRIVATE_KEYFILE, r->sshkey);
		curl_easy_setopt(c, CURLOPT_SSH_PUBLIC_KEYFILE, "");
		curl_easy_setopt(c, CURLOPT_SSH_KNOWNHOSTS, r->known_hosts);
		curl_easy_setopt(c, CURLOPT_FTP_CREATE_MISSING_DIRS, (long)CURLFTP_CREATE_DIR);
		if (r->user[0])
			curl_easy_setopt(c, CURLOPT_USERNAME, r->user);
		break;
	case P_S3:
#if HAVE_SIGV4
		curl_easy_setopt(c, CURLOPT_AWS_SIGV4, r->sigv4);
		curl_easy_setopt(c, CURLOPT_USERNAME, r->creds.access);
		curl_easy_setopt(c, CURLOPT_PASSWORD, r->creds.secret);
		*hdrs = curl_slist_append(*hdrs, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
		if (r->creds.token[0]) {
			char h[sizeof(r->creds.token) + 32];

			snprintf(h, sizeof(h), "x-amz-security-token: %s", r->creds.token);
			*hdrs = curl_slist_append(*hdrs, h);
			memset(h, 0, sizeof(h));
		}
#endif
		break;
	}
	if (*hdrs)
		curl_easy_setopt(c, CURLOPT_HTTPHEADER, *hdrs);
	return c;
}

void url__easy_done(CURL *c, struct curl_slist *hdrs)
{
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(c);
}

/*
 * Describe a failed curl call; returns 1 if a retry cannot help (not found,
 * permission, login, unknown host key) and 0 otherwise.
 */
int url__describe(struct url__run *r, CURL *c, CURLcode rc, char *out, size_t outlen)
{
	long code = 0;
	int final = 0;

	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	switch (rc) {
	case CURLE_REMOTE_FILE_NOT_FOUND:
	case CURLE_REMOTE_ACCESS_DENIED:
	case CURLE_LOGIN_DENIED:
	case CURLE_PEER_FAILED_VERIFICATION:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_UNSUPPORTED_PROTOCOL:
	case CURLE_URL_MALFORMAT:
	case CURLE_FILESIZE_EXCEEDED:
		final = 1;
		break;
	case CURLE_HTTP_RETURNED_ERROR:
		final = code == 400 || code == 401 || code == 403 || code == 404 || code == 405 ||
			code == 410;
		break;
	default:
		break;
	}
	if (rc == CURLE_PEER_FAILED_VERIFICATION && r->proto != P_SFTP)
		snprintf(out, outlen, "the server's TLS certificate is not trusted (%.300s): an admin "
			 "can name the site's CA bundle in URLCAFile", r->curl_err);
	else if (rc == CURLE_PEER_FAILED_VERIFICATION && r->proto == P_SFTP)
		snprintf(out, outlen, "the SSH host key of the server is not in %.300s (or does not "
			 "match): add it with ssh-keyscan, as you, after checking it", r->known_hosts);
	else if (rc == CURLE_HTTP_RETURNED_ERROR)
		snprintf(out, outlen, "server answered HTTP %ld%s", code,
			 code == 401 || code == 403 ? " (check your credentials and permissions)" :
			 code == 404 ? " (no such file)" : "");
	else
		snprintf(out, outlen, "%s%s%s", curl_easy_strerror(rc), r->curl_err[0] ? ": " : "",
			 r->curl_err);
	return final;
}

/*
 * Ask the server about one file: size, mtime, checksums, validator.
 * Returns 0, or -1 with a message (and *final) on failure.
 */
static int _stat_remote(struct url__run *r, const char *url, struct url__meta *m, int *final,
			char *err, size_t errlen)
{
	struct curl_slist *hdrs;
	struct url__hctx h = { r, m };
	CURL *c = url__easy(r, url, &hdrs);
	curl_off_t len = -1, ft = -1;
	CURLcode rc;

	memset(m, 0, sizeof(*m));
	m->size = m->mtime = -1;
	*final = 0;
	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
	curl_easy_setopt(c, CURLOPT_FILETIME, 1L);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, url__header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, url__discard);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		*final = url__describe(r, c, rc, err, errlen);
		url__easy_done(c, hdrs);
		return -1;
	}
	curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
	curl_easy_getinfo(c, CURLINFO_FILETIME_T, &ft);
	m->size = len;
	m->mtime = ft;
	url__easy_done(c, hdrs);
	if (!m->etag[0] && (m->size >= 0 || m->mtime >= 0))
		snprintf(m->etag, sizeof(m->etag), "size=%lld;mtime=%lld", (long long)m->size,
			 (long long)m->mtime);
	return 0;
}

/* ---- download ---- */

struct _sink {
	struct url__run *r;
	int fd;
	int64_t got;                 /* bytes written by this request */
	struct cksum ck;             /* the site's algorithm: checks the read-back */
	struct cksum md5;            /* only when the server gave an md5 (else unset) */
	struct cksum sha;            /* only when the server gave a sha256 (else unset) */
	int want_md5, want_sha;
	int werr;                    /* errno of a failed write */
};

static void _sink_update(struct _sink *s, const void *b, size_t n)
{
	cksum_update(&s->ck, b, n);
	if (s->want_md5)
		cksum_update(&s->md5, b, n);
	if (s->want_sha)
		cksum_update(&s->sha, b, n);
}

/* Release the sink's digests (safe on a zero-filled sink). */
static void _sink_abort(struct _sink *s)
{
	cksum_abort(&s->ck);
	cksum_abort(&s->md5);
	cksum_abort(&s->sha);
}

static size_t _write(char *b, size_t sz, size_t nm, void *p)
{
	struct _sink *s = p;
	size_t n = sz * nm;

	if (url__stopped(s->r))
		return 0;
	for (size_t w = 0; w < n;) {
		ssize_t k = write(s->fd, b + w, n - w);

		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0) {
			s->werr = errno;
			return 0;
		}
		w += (size_t)k;
	}
	_sink_update(s, b, n);
	s->got += (int64_t)n;
	xfer_bucket_wrote(s->r->ctx->bucket, s->fd, -1, n);
	xfer_bucket_take(s->r->ctx->bucket, n, s->r->ctx->stop);
	return n;
}

/* Read the file back from disk and compare with the checksum of what was received. */
static int _readback(struct url__run *r, int fd, const char *want)
{
	struct cksum ck;
	char got[CKSUM_HEX_MAX];
	off_t off = 0;
	ssize_t n;

	if (cksum_init(&ck, r->ctx->algo) < 0)
		return ENOMEM;
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	while ((n = pread(fd, r->buf, CHUNK, off)) > 0) {
		if (url__stopped(r)) {
			cksum_abort(&ck);
			return EINTR;
		}
		cksum_update(&ck, r->buf, (size_t)n);
		off += n;
	}
	if (n < 0) {
		cksum_abort(&ck);
		return errno;
	}
	cksum_final(&ck, got);
	return strcmp(got, want) ? EIO : 0;
}

/*
 * Fetch url into ddir/name (rel names it in records). m: what the server
 * said about it. Verification: sha256 or md5 from the server when given,
 * else the size.
 */
static void _fetch(struct url__run *r, const char *url, int ddir, const char *name, const char *rel,
		   const struct url__meta *m)
{
	const struct xfer_done_ent *de = xfer_done_find(r->ctx->done, r->ctx->ndone, rel);
	int64_t mtime_ns = m->mtime >= 0 ? m->mtime * 1000000000LL : 0;
	int64_t started = (int64_t)time(NULL), off = 0;
	char tmp[NAME_MAX + 1], validator[256], old[256], cks[CKSUM_HEX_MAX], token[CKSUM_HEX_MAX];
	char md5[CKSUM_HEX_MAX], sha[CKSUM_HEX_MAX], why[XFER_TEXT_MAX];
	struct _sink s;
	struct stat st;
	struct curl_slist *hdrs;
	CURL *c;
	CURLcode rc;
	ssize_t vl;
	int fd, e, tries = 0;

	/* Resume set: verified by an earlier attempt and unchanged on both sides. */
	if (de && m->mtime >= 0 && de->size == m->size && de->mtime_ns == mtime_ns &&
	    fstatat(ddir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
	    st.st_size == m->size) {
		r->kept++;
		return;
	}
	xfer_emit(r->ctx, XR_ITEM_START, 0, m->size >= 0 ? m->size : 0, mtime_ns, 0644, NULL, rel,
		  "file");
	if (xfer_tmpname(tmp, sizeof(tmp), name, r->ctx->request_id) < 0) {
		_fail_item(r, rel, 1, "name too long: '%s'", rel);
		return;
	}
	if (snprintf(validator, sizeof(validator), "%s|%lld|%lld", m->etag, (long long)m->size,
		     (long long)m->mtime) >= (int)sizeof(validator))
		validator[0] = '\0';
	fd = openat(ddir, tmp, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
	if (fd < 0) {
		e = errno;
		_fail_item(r, rel, e == EACCES || e == ELOOP || e == ENOENT || e == EPERM,
			   "cannot create a temporary file for '%s': %s", rel, strerror(e));
		return;
	}
	/* A partial file of an earlier attempt: resumed only if the server still
	 * describes the file as it did then, and it is ours, plain and alone. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
	    st.st_nlink != 1) {
		close(fd);
		_fail_item(r, rel, 1, "temporary file %s for '%s' is not a plain file of yours: "
			   "remove it", tmp, rel);
		return;
	}
	vl = fgetxattr(fd, PARTIAL_XATTR, old, sizeof(old) - 1);
	if (vl > 0)
		old[vl] = '\0';
	/* http(s)/s3: Range, ftp: REST, sftp: offset; all served here can resume. */
	if (st.st_size > 0 && vl > 0 && validator[0] && strcmp(old, validator) == 0 &&
	    (m->size < 0 || st.st_size < m->size))
		off = st.st_size;
	if (!off && (ftruncate(fd, 0) < 0 ||
		     (validator[0] && fsetxattr(fd, PARTIAL_XATTR, validator, strlen(validator), 0) < 0 &&
		      errno != ENOTSUP))) {
		e = errno;
		close(fd);
		unlinkat(ddir, tmp, 0);
		_fail_item(r, rel, 0, "cannot prepare temporary file for '%s': %s", rel, strerror(e));
		return;
	}
again:
	memset(&s, 0, sizeof(s));
	s.r = r;
	s.fd = fd;
	s.want_sha = m->sha256[0] != '\0';
	s.want_md5 = !s.want_sha && m->md5[0];
	if (cksum_init(&s.ck, r->ctx->algo) < 0 ||
	    (s.want_sha && cksum_init(&s.sha, CKSUM_SHA256) < 0) ||
	    (s.want_md5 && cksum_init(&s.md5, CKSUM_MD5) < 0)) {
		_sink_abort(&s);
		close(fd);
		_fail_item(r, rel, 0, "out of memory");
		return;
	}
	if (off > 0) {
		/* The bytes already here count towards every checksum. */
		int64_t at = 0;

		while (at < off) {
			ssize_t n = pread(fd, r->buf, (size_t)(off - at) < CHUNK ? (size_t)(off - at) :
					  CHUNK, at);

			if (n <= 0)
				break;
			_sink_update(&s, r->buf, (size_t)n);
			at += n;
		}
		if (at != off) {
			_sink_abort(&s);
			off = 0;
			if (ftruncate(fd, 0) < 0)
				e = errno;
			goto again;
		}
		xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: resuming '%s' at byte %lld of %lld "
			  "(%s)", (long long)r->ctx->request_id, rel, (long long)off,
			  (long long)m->size, r->proto == P_FTP ? "FTP REST" : r->proto == P_SFTP ?
			  "SFTP offset" : "HTTP Range");
	}
	if (lseek(fd, off, SEEK_SET) < 0) {
		e = errno;
		_sink_abort(&s);
		close(fd);
		_fail_item(r, rel, 0, "seek in temporary file: %s", strerror(e));
		return;
	}
	c = url__easy(r, url, &hdrs);
	if (!c) {
		_sink_abort(&s);
		close(fd);
		_fail_item(r, rel, 0, "out of memory");
		return;
	}
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, _write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, &s);
	if (off > 0)
		curl_easy_setopt(c, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)off);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		int final = 0;

		_sink_abort(&s);
		if (url__stopped(r)) {
			/* Kept for the next attempt when it can resume; else removed. */
			url__easy_done(c, hdrs);
			close(fd);
			return;
		}
		if (off > 0 && tries++ == 0 && (rc == CURLE_RANGE_ERROR ||
						rc == CURLE_BAD_DOWNLOAD_RESUME)) {
			xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: '%s': the server cannot "
				  "resume; starting again", (long long)r->ctx->request_id, rel);
			url__easy_done(c, hdrs);
			off = 0;
			if (ftruncate(fd, 0) == 0)
				goto again;
			c = NULL;
		}
		if (s.werr)
			snprintf(why, sizeof(why), "writing the temporary file: %s", strerror(s.werr));
		else if (c)
			final = url__describe(r, c, rc, why, sizeof(why));
		else
			snprintf(why, sizeof(why), "cannot truncate the temporary file");
		if (c)
			url__easy_done(c, hdrs);
		close(fd);
		if (final)
			unlinkat(ddir, tmp, 0);
		_fail_item(r, rel, final, "download of '%s' failed: %s", rel, why);
		return;
	}
	url__easy_done(c, hdrs);
	cksum_final(&s.ck, cks);
	md5[0] = sha[0] = '\0';
	if (s.want_md5)
		cksum_final(&s.md5, md5);
	if (s.want_sha)
		cksum_final(&s.sha, sha);
	/* Verify against the strongest thing the server told us. */
	e = 0;
	if (m->size >= 0 && off + s.got != m->size) {
		snprintf(why, sizeof(why), "size mismatch for '%s': the server announced %lld bytes, "
			 "%lld arrived", rel, (long long)m->size, (long long)(off + s.got));
		e = 1;
	} else if (m->sha256[0] && strcmp(m->sha256, cksum_hex(sha)) != 0) {
		snprintf(why, sizeof(why), "checksum mismatch for '%s': sha256 from the %s is %s, "
			 "the data received has %s", rel, m->how, m->sha256, cksum_hex(sha));
		e = 1;
	} else if (!m->sha256[0] && m->md5[0] && strcmp(m->md5, cksum_hex(md5)) != 0) {
		snprintf(why, sizeof(why), "checksum mismatch for '%s': md5 from the %s is %s, "
			 "the data received has %s", rel, m->how, m->md5, cksum_hex(md5));
		e = 1;
	}
	if (e) {
		close(fd);
		unlinkat(ddir, tmp, 0);
		_fail_item(r, rel, 0, "%s", why);
		return;
	}
	if (m->sha256[0])
		snprintf(token, sizeof(token), "%s", sha);
	else if (m->md5[0])
		snprintf(token, sizeof(token), "%s", md5);
	else
		snprintf(token, sizeof(token), "size:%lld", (long long)(off + s.got));
	fremovexattr(fd, PARTIAL_XATTR);
	e = 0;
	if (fchmod(fd, 0644) < 0)
		e = errno;
	if (!e && m->mtime >= 0) {
		struct timespec ts[2] = { { m->mtime, 0 }, { m->mtime, 0 } };

		if (futimens(fd, ts) < 0)
			e = errno;
	}
	if (!e && fsync(fd) < 0)
		e = errno;
	if (!e)
		e = _readback(r, fd, cks);
	if (close(fd) < 0 && !e)
		e = errno;
	if (!e && renameat(ddir, tmp, ddir, name) < 0)
		e = errno;
	if (e) {
		if (e != EINTR)
			unlinkat(ddir, tmp, 0);
		if (e != EINTR)
			_fail_item(r, rel, 0, "storing '%s' failed: %s", rel,
				   e == EIO ? "the data read back differs from the data received" :
				   strerror(e));
		return;
	}
	/* Both records carry what the verification compared: "sha256:…", "md5:…", "size:N". */
	xfer_emit(r->ctx, XR_ITEM_COPIED, 0, 0, 0, 0, token, rel, NULL);
	xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: '%s' verified by %s (%s)",
		  (long long)r->ctx->request_id, rel,
		  m->sha256[0] || m->md5[0] ? m->how : "size", token);
	xfer_emit(r->ctx, XR_ITEM_DONE, 0, off + s.got, started, (int64_t)time(NULL), token, rel,
		  "file");
	r->verified++;
}

/* ---- local destination of a download ---- */

/* Open (creating) the directory holding rel under droot, never through a symlink. */
static int _open_parent(int droot, const char *rel, const char **leaf)
{
	char comp[NAME_MAX + 1];
	const char *p = rel, *slash;
	int fd = dup(droot);

	while (fd >= 0 && (slash = strchr(p, '/'))) {
		size_t n = (size_t)(slash - p);
		int sub;

		if (n > NAME_MAX) {
			close(fd);
			errno = ENAMETOOLONG;
			return -1;
		}
		memcpy(comp, p, n);
		comp[n] = '\0';
		if (mkdirat(fd, comp, 0755) < 0 && errno != EEXIST) {
			int e = errno;

			close(fd);
			errno = e;
			return -1;
		}
		sub = openat(fd, comp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		close(fd);
		fd = sub;
		p = slash + 1;
	}
	*leaf = p;
	return fd;
}

static int _remote_url(struct url__run *r, CURL *esc, const char *rel, char *out, size_t outlen)
{
	char escd[XFER_PATH_MAX * 2];
	int n;

	if (url__escape_path(esc, rel, escd, sizeof(escd)) < 0)
		return -1;
	if (r->proto == P_S3)
		n = snprintf(out, outlen, "%s/%s%s", r->s3_base, r->s3_key, escd);
	else
		n = snprintf(out, outlen, "%s%s", r->url, escd);
	return (n < 0 || (size_t)n >= outlen) ? -1 : 0;
}

static int _stage_in(struct url__run *r)
{
	struct xfer_ctx *ctx = r->ctx;
	char msg[XFER_TEXT_MAX], url[XFER_PATH_MAX * 2];
	int tree = r->url[strlen(r->url) - 1] == '/', final = 0, droot;
	CURL *esc;

	if (!tree) {
		struct url__meta m;
		const char *leaf, *ub;
		char base[NAME_MAX + 1], dir[XFER_PATH_MAX];
		struct stat dst;
		int dec_len;
		char *dec;

		if (_url_for(r, r->proto == P_S3 ? r->s3_key : r->url, url, sizeof(url)) < 0)
			return _finish(r, XFER_FINAL, "URL too long");
		if (_stat_remote(r, url, &m, &final, msg, sizeof(msg)) < 0) {
			char full[XFER_TEXT_MAX];

			snprintf(full, sizeof(full), "cannot stat %.300s: %.600s", r->url, msg);
			return _finish(r, final ? XFER_FINAL : XFER_RETRYABLE, full);
		}
		xfer_emit(ctx, XR_TOTALS, 0, 1, m.size >= 0 ? m.size : 0, 0, NULL, NULL, NULL);
		r->files = 1;
		/* The file's name: the URL's last path component, decoded. */
		ub = strrchr(url__url_path(r->proto == P_S3 ? r->url + 5 : r->url), '/');
		ub = ub ? ub + 1 : "";
		if (strchr(ub, '?'))
			return _finish(r, XFER_FINAL, "URLs with a query string are not supported: "
				       "name the file by its path");
		esc = curl_easy_init();
		dec = esc ? curl_easy_unescape(esc, ub, 0, &dec_len) : NULL;
		if (!dec || snprintf(base, sizeof(base), "%s", dec) >= (int)sizeof(base) ||
		    !url__safe_rel(base) || strchr(base, '/')) {
			curl_free(dec);
			curl_easy_cleanup(esc);
			return _finish(r, XFER_FINAL, "the URL does not end in a usable file name");
		}
		curl_free(dec);
		curl_easy_cleanup(esc);
		if (stat(ctx->dest, &dst) == 0 && S_ISDIR(dst.st_mode)) {
			droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			leaf = base;
		} else {
			const char *db = strrchr(ctx->dest, '/');

			if (xfer_mkparents(ctx->dest, msg, sizeof(msg)) < 0)
				return _finish(r, XFER_FINAL, msg);
			snprintf(dir, sizeof(dir), "%.*s", db == ctx->dest ? 1 : (int)(db - ctx->dest),
				 ctx->dest);
			droot = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
			leaf = db + 1;
		}
		if (droot < 0) {
			snprintf(msg, sizeof(msg), "cannot open destination directory for %s: %s",
				 ctx->dest, strerror(errno));
			return _finish(r, XFER_FINAL, msg);
		}
		_fetch(r, url, droot, leaf, leaf, &m);
		close(droot);
	} else {
		int rc;

		if (r->proto == P_S3)
			rc = url__list_s3(r, &final, msg, sizeof(msg));
		else if (r->proto == P_HTTP)
			rc = url__list_dav(r, r->url, "", 0, &final, msg, sizeof(msg));
		else
			rc = url__list_ls(r, r->url, "", 0, &final, msg, sizeof(msg));
		if (rc < 0) {
			char full[XFER_TEXT_MAX];

			snprintf(full, sizeof(full), "cannot list %.300s: %.600s", r->url, msg);
			return _finish(r, final ? XFER_FINAL : XFER_RETRYABLE, full);
		}
		qsort(r->ents, r->nents, sizeof(*r->ents), _ent_cmp);
		r->files = (int64_t)r->nents;
		for (size_t i = 0; i < r->nents; i++)
			r->bytes += r->ents[i].size > 0 ? r->ents[i].size : 0;
		xfer_emit(ctx, XR_TOTALS, 0, r->files, r->bytes, r->skipped, NULL, NULL, NULL);
		if (xfer_mkparents(ctx->dest, msg, sizeof(msg)) < 0)
			return _finish(r, XFER_FINAL, msg);
		if (mkdir(ctx->dest, 0755) < 0 && errno != EEXIST) {
			xfer_mkdir_why(ctx->dest, errno, msg, sizeof(msg));
			return _finish(r, XFER_FINAL, msg);
		}
		droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		esc = curl_easy_init();
		if (droot < 0 || !esc) {
			snprintf(msg, sizeof(msg), "cannot open destination directory %s: %s",
				 ctx->dest, strerror(errno));
			if (droot >= 0)
				close(droot);
			curl_easy_cleanup(esc);
			return _finish(r, XFER_FINAL, msg);
		}
		for (size_t i = 0; i < r->nents && !url__stopped(r); i++) {
			const char *rel = r->ents[i].rel, *leaf;
			struct url__meta m;
			int pfd;

			if (_remote_url(r, esc, rel, url, sizeof(url)) < 0) {
				_fail_item(r, rel, 1, "URL too long for '%s'", rel);
				continue;
			}
			if (_stat_remote(r, url, &m, &final, msg, sizeof(msg)) < 0) {
				if (!url__stopped(r))
					_fail_item(r, rel, final, "cannot stat '%s': %s", rel, msg);
				continue;
			}
			pfd = _open_parent(droot, rel, &leaf);
			if (pfd < 0) {
				_fail_item(r, rel, errno == ELOOP || errno == EACCES || errno == ENOTDIR,
					   "cannot create the directory of '%s': %s", rel, strerror(errno));
				continue;
			}
			_fetch(r, url, pfd, leaf, rel, &m);
			close(pfd);
		}
		curl_easy_cleanup(esc);
		fsync(droot);
		close(droot);
	}
	return -1;	/* the caller finishes */
}

/* ---- upload ---- */

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
	xfer_bucket_take(s->r->ctx->bucket, (uint64_t)n, s->r->ctx->stop);
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

/* PUT/STOR one local file (opened relative to sdir) to url, then verify it. */
static void _put(struct url__run *r, int sdir, const char *sname, const char *url, const char *rel,
		 const struct stat *st)
{
	const struct xfer_done_ent *de = xfer_done_find(r->ctx->done, r->ctx->ndone, rel);
	struct url__meta m = { 0 }, after;
	struct url__hctx h = { r, &m };
	struct _source s;
	struct curl_slist *hdrs;
	struct stat cur;
	char md5h[CKSUM_HEX_MAX], token[CKSUM_HEX_MAX], why[XFER_TEXT_MAX];
	const char *md5 = md5h + 4;	/* the hex after "md5:" */
	int64_t started = (int64_t)time(NULL);
	CURL *c;
	CURLcode rc;
	int final = 0;

	if (de && de->size == st->st_size && de->mtime_ns == xfer_ns(&st->st_mtim) &&
	    _stat_remote(r, url, &after, &final, why, sizeof(why)) == 0 &&
	    after.size == st->st_size) {
		r->kept++;
		return;
	}
	xfer_emit(r->ctx, XR_ITEM_START, 0, st->st_size, xfer_ns(&st->st_mtim),
		  (int64_t)(st->st_mode & 07777), NULL, rel, "file");
	memset(&s, 0, sizeof(s));
	s.r = r;
	s.fd = openat(sdir, sname, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (s.fd < 0) {
		_fail_item(r, rel, errno == EACCES || errno == ENOENT || errno == ELOOP,
			   "cannot open source '%s': %s", rel, strerror(errno));
		return;
	}
	if (fstat(s.fd, &cur) < 0 || !S_ISREG(cur.st_mode) || cur.st_ino != st->st_ino) {
		close(s.fd);
		_fail_item(r, rel, 0, "source '%s' changed while walking", rel);
		return;
	}
	fcntl(s.fd, F_SETFL, fcntl(s.fd, F_GETFL) & ~O_NONBLOCK);
	m.size = m.mtime = -1;
	c = cksum_init(&s.md5, CKSUM_MD5) == 0 ? url__easy(r, url, &hdrs) : NULL;
	if (!c) {
		cksum_abort(&s.md5);
		close(s.fd);
		_fail_item(r, rel, 0, "out of memory");
		return;
	}
	curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, _read);
	curl_easy_setopt(c, CURLOPT_READDATA, &s);
	curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)cur.st_size);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, url__header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, url__discard);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		cksum_abort(&s.md5);
		close(s.fd);
		if (url__stopped(r)) {
			url__easy_done(c, hdrs);
			return;
		}
		if (s.rerr)
			snprintf(why, sizeof(why), "reading the source: %s", strerror(s.rerr));
		else
			final = url__describe(r, c, rc, why, sizeof(why));
		url__easy_done(c, hdrs);
		_fail_item(r, rel, final, "upload of '%s' failed: %s", rel, why);
		return;
	}
	url__easy_done(c, hdrs);
	cksum_final(&s.md5, md5h);
	if (fstat(s.fd, &cur) < 0 || cur.st_size != s.sent || xfer_ns(&cur.st_mtim) != xfer_ns(&st->st_mtim)) {
		close(s.fd);
		_fail_item(r, rel, 0, "source '%s' changed during the upload: will be redone", rel);
		return;
	}
	close(s.fd);
	/* Verify: the S3 ETag is the MD5 of what arrived; otherwise ask for the size. */
	if (r->proto == P_S3 && m.md5[0]) {
		if (strcmp(m.md5, md5) != 0) {
			_fail_item(r, rel, 0, "checksum mismatch after upload of '%s': S3 ETag %s, "
				   "md5 of the data sent %s", rel, m.md5, md5);
			return;
		}
		snprintf(token, sizeof(token), "md5:%s", md5);
	} else {
		if (_stat_remote(r, url, &after, &final, why, sizeof(why)) < 0) {
			_fail_item(r, rel, 0, "cannot check '%s' after the upload: %s", rel, why);
			return;
		}
		if (after.size != s.sent) {
			_fail_item(r, rel, 0, "size mismatch after upload of '%s': sent %lld bytes, "
				   "the server has %lld", rel, (long long)s.sent, (long long)after.size);
			return;
		}
		if (after.sha256[0] || after.md5[0]) {
			/* A server that states a checksum: md5 we can compare. */
			if (after.md5[0] && !after.sha256[0] && strcmp(after.md5, md5) != 0) {
				_fail_item(r, rel, 0, "checksum mismatch after upload of '%s': %s says "
					   "md5 %s, sent %s", rel, after.how, after.md5, md5);
				return;
			}
		}
		if (after.md5[0] && !after.sha256[0])
			snprintf(token, sizeof(token), "md5:%s", md5);
		else
			snprintf(token, sizeof(token), "size:%lld", (long long)s.sent);
	}
	xfer_emit(r->ctx, XR_ITEM_COPIED, 0, 0, 0, 0, token, rel, NULL);
	xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: '%s' uploaded, verified by %s",
		  (long long)r->ctx->request_id, rel, token);
	xfer_emit(r->ctx, XR_ITEM_DONE, 0, s.sent, started, (int64_t)time(NULL), token, rel, "file");
	r->verified++;
	if (!r->ctx->keep && strcmp(r->ctx->action, "archive") == 0 && unlinkat(sdir, sname, 0) < 0)
		xfer_logf(r->ctx, LOG_LVL_WARN, "request %lld: keep=no: cannot remove source '%s': %s",
			  (long long)r->ctx->request_id, rel, strerror(errno));
}

/* Upload the tree under sdir; prefix is its relpath ("" at the root). */
static void _put_tree(struct url__run *r, CURL *esc, int sdir, const char *prefix, int depth)
{
	DIR *d;
	struct dirent *de;
	int fd = dup(sdir);

	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		_fail_item(r, *prefix ? prefix : ".", 0, "cannot read directory '%s': %s",
			   *prefix ? prefix : ".", strerror(errno));
		return;
	}
	rewinddir(d);
	while ((de = readdir(d)) && !url__stopped(r)) {
		char rel[XFER_PATH_MAX], url[XFER_PATH_MAX * 2], why[XFER_TEXT_MAX];
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(rel, sizeof(rel), "%s%s%s", prefix, *prefix ? "/" : "", de->d_name) >=
		    (int)sizeof(rel)) {
			_fail_item(r, de->d_name, 1, "path too long under '%s'", prefix);
			continue;
		}
		if (fstatat(sdir, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			_fail_item(r, rel, 0, "cannot stat '%s': %s", rel, strerror(errno));
			continue;
		}
		if (S_ISREG(st.st_mode)) {
			if (_remote_url(r, esc, rel, url, sizeof(url)) < 0)
				_fail_item(r, rel, 1, "URL too long for '%s'", rel);
			else
				_put(r, sdir, de->d_name, url, rel, &st);
		} else if (S_ISDIR(st.st_mode) && xfer_excluded(r->ctx, rel)) {
			/* exempt= inside the tree: not uploaded, not removed */
			xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, rel, XFER_EXCLUDE_REASON);
		} else if (S_ISDIR(st.st_mode)) {
			int sub;

			if (depth >= MAX_DEPTH) {
				_fail_item(r, rel, 1, "tree deeper than %d levels at '%s'", MAX_DEPTH, rel);
				continue;
			}
			sub = openat(sdir, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
			if (sub < 0) {
				_fail_item(r, rel, 1, "cannot open directory '%s': %s", rel,
					   strerror(errno));
				continue;
			}
			if (r->proto == P_HTTP) {
				char dir[XFER_PATH_MAX + 1];

				snprintf(dir, sizeof(dir), "%s/", rel);
				if (_remote_url(r, esc, dir, url, sizeof(url)) < 0 ||
				    _mkcol(r, url, why, sizeof(why)) < 0) {
					_fail_item(r, rel, 0, "cannot create collection '%s': %s", rel, why);
					close(sub);
					continue;
				}
			}
			_put_tree(r, esc, sub, rel, depth + 1);
			close(sub);
		} else {
			char msg[256];

			snprintf(msg, sizeof(msg), "%s skipped: only regular files and directories "
				 "are uploaded", S_ISLNK(st.st_mode) ? "symlink" : "special file");
			xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, rel, msg);
		}
	}
	closedir(d);
}

/* ---- labels (archive to a URL) ---- */

static int _stage_out(struct url__run *r)
{
	struct xfer_ctx *ctx = r->ctx;
	char msg[XFER_TEXT_MAX];
	struct stat st;
	int sroot;
	CURL *esc;

	sroot = xfer_open_source(ctx, O_RDONLY | O_NOCTTY | O_NONBLOCK, msg, sizeof(msg));
	if (sroot >= 0 && fstat(sroot, &st) < 0) {
		snprintf(msg, sizeof(msg), "cannot stat source %s: %s", ctx->source, strerror(errno));
		close(sroot);
		sroot = -1;
	}
	if (sroot < 0)
		return _finish(r, XFER_FINAL, msg);
	esc = curl_easy_init();
	if (!esc) {
		close(sroot);
		return _finish(r, XFER_RETRYABLE, "out of memory");
	}
	if (S_ISDIR(st.st_mode)) {
		fcntl(sroot, F_SETFL, fcntl(sroot, F_GETFL) & ~O_NONBLOCK);
		if (r->url[strlen(r->url) - 1] != '/') {
			close(sroot);
			curl_easy_cleanup(esc);
			return _finish(r, XFER_FINAL, "a directory goes to a URL ending in '/' "
				       "(the remote directory or prefix)");
		}
		xfer_count_tree(r->ctx, sroot, "", 0, MAX_DEPTH, 1, &r->files, &r->bytes,
				&r->skipped);
		xfer_emit(ctx, XR_TOTALS, 0, r->files, r->bytes, r->skipped, NULL, NULL, NULL);
		if (r->proto == P_HTTP && _mkcol_path(r, r->url, msg, sizeof(msg)) < 0) {
			char full[XFER_TEXT_MAX];

			close(sroot);
			curl_easy_cleanup(esc);
			snprintf(full, sizeof(full), "cannot create the collection %.300s: %.600s", r->url,
				 msg);
			return _finish(r, XFER_RETRYABLE, full);
		}
		_put_tree(r, esc, sroot, "", 0);
	} else if (S_ISREG(st.st_mode)) {
		const char *sb = strrchr(ctx->source, '/');
		char sdir[XFER_PATH_MAX], name[NAME_MAX + 1], leafurl[XFER_PATH_MAX * 2];
		int sparent;
		struct stat st2;

		snprintf(name, sizeof(name), "%s", sb ? sb + 1 : ctx->source);
		snprintf(sdir, sizeof(sdir), "%.*s", sb == ctx->source ? 1 : (int)(sb - ctx->source),
			 ctx->source);
		sparent = open(sdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		xfer_emit(ctx, XR_TOTALS, 0, 1, st.st_size, 0, NULL, NULL, NULL);
		r->files = 1;
		/* A URL ending in '/' gets the file's own name. */
		if (r->url[strlen(r->url) - 1] == '/') {
			if (_remote_url(r, esc, name, leafurl, sizeof(leafurl)) < 0)
				leafurl[0] = '\0';
		} else if (_url_for(r, r->proto == P_S3 ? r->s3_key : r->url, leafurl,
				    sizeof(leafurl)) < 0) {
			leafurl[0] = '\0';
		}
		if (sparent < 0 || !leafurl[0]) {
			snprintf(msg, sizeof(msg), "cannot open the directory of %s, or URL too long",
				 ctx->source);
			if (sparent >= 0)
				close(sparent);
			close(sroot);
			curl_easy_cleanup(esc);
			return _finish(r, XFER_FINAL, msg);
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
		if (fstatat(sparent, name, &st2, AT_SYMLINK_NOFOLLOW) < 0 || st2.st_ino != st.st_ino)
			_fail_item(r, name, 0, "source '%s' changed while walking", name);
		else
			_put(r, sparent, name, leafurl, name, &st2);
		close(sparent);
	} else {
		close(sroot);
		curl_easy_cleanup(esc);
		snprintf(msg, sizeof(msg), "source %s is neither a file nor a directory", ctx->source);
		return _finish(r, XFER_FINAL, msg);
	}
	curl_easy_cleanup(esc);
	if (!url__stopped(r) && !r->failures && strcmp(ctx->action, "archive") == 0)
		xfer_label_all(r->ctx, sroot, "archived", r->ctx->dest);
	close(sroot);
	return -1;
}

/* ---- setup ---- */

/* A credential file of the user's: absent is fine (0, *have = 0); readable by others is not. */
static int _private_file(const char *path, int *have, char *err, size_t errlen)
{
	struct stat st;

	*have = 0;
	if (lstat(path, &st) < 0)
		return errno == ENOENT ? 0 : (snprintf(err, errlen, "cannot stat %s: %s", path,
						       strerror(errno)), -1);
	if (!S_ISREG(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077)) {
		snprintf(err, errlen, "%s is refused: credentials must be a regular file of yours "
			 "with mode 0600 (it has mode %04o); run 'chmod 600 %s'", path,
			 (unsigned)(st.st_mode & 07777), path);
		return -1;
	}
	*have = 1;
	return 0;
}

static int _setup(struct url__run *r, char *err, size_t errlen)
{
	struct xfer_ctx *ctx = r->ctx;
	const struct conf *conf = ctx->conf;
	const char *sep = strstr(r->url, "://");
	struct passwd pw, *pwp = NULL;
	char pwbuf[4096], path[PATH_MAX];
	size_t sl = sep ? (size_t)(sep - r->url) : 0;
	int have;

	if (!sep || sl == 0 || sl >= sizeof(r->scheme)) {
		snprintf(err, errlen, "not a URL: %.200s", r->url);
		return -1;
	}
	for (size_t i = 0; i < sl; i++)
		r->scheme[i] = (char)tolower((unsigned char)r->url[i]);
	r->scheme[sl] = '\0';
	if (!strcmp(r->scheme, "http") || !strcmp(r->scheme, "https"))
		r->proto = P_HTTP;
	else if (!strcmp(r->scheme, "s3"))
		r->proto = P_S3;
	else if (!strcmp(r->scheme, "ftp") || !strcmp(r->scheme, "ftps"))
		r->proto = P_FTP;
	else if (!strcmp(r->scheme, "sftp"))
		r->proto = P_SFTP;
	else {
		snprintf(err, errlen, "the url backend does not serve '%s' URLs", r->scheme);
		return -1;
	}
	/* Credentials never travel in the URL: it is stored, logged and shown. */
	{
		const char *auth = sep + 3, *end = auth + strcspn(auth, "/?#");
		const char *at = memchr(auth, '@', (size_t)(end - auth));

		if (at && memchr(auth, ':', (size_t)(at - auth))) {
			snprintf(err, errlen, "a password in the URL is refused: put it in ~/.netrc "
				 "(mode 0600) instead");
			return -1;
		}
	}
	if (getpwuid_r(getuid(), &pw, pwbuf, sizeof(pwbuf), &pwp) != 0 || !pwp) {
		snprintf(err, errlen, "uid %u has no passwd entry (home directory unknown)",
			 (unsigned)getuid());
		return -1;
	}
	snprintf(r->user, sizeof(r->user), "%s", pwp->pw_name);
	if (r->proto == P_HTTP || r->proto == P_FTP) {
		if (snprintf(path, sizeof(path), "%s/.netrc", pwp->pw_dir) >= (int)sizeof(path) ||
		    _private_file(path, &have, err, errlen) < 0)
			return -1;
		if (have)
			snprintf(r->netrc, sizeof(r->netrc), "%s", path);
	}
	if (r->proto == P_SFTP) {
		static const char *const keys[] = { "id_ed25519", "id_ecdsa", "id_rsa", NULL };
		const char *auth = sep + 3, *end = auth + strcspn(auth, "/?#");

		if (memchr(auth, '@', (size_t)(end - auth)))
			r->user[0] = '\0';	/* the URL names the remote user */
		for (int i = 0; keys[i] && !r->sshkey[0]; i++) {
			if (snprintf(path, sizeof(path), "%s/.ssh/%s", pwp->pw_dir, keys[i]) >=
			    (int)sizeof(path) || _private_file(path, &have, err, errlen) < 0)
				return -1;
			if (have)
				snprintf(r->sshkey, sizeof(r->sshkey), "%s", path);
		}
		if (!r->sshkey[0]) {
			snprintf(err, errlen, "sftp needs a key without passphrase in %s/.ssh "
				 "(id_ed25519, id_ecdsa or id_rsa)", pwp->pw_dir);
			return -1;
		}
		snprintf(r->known_hosts, sizeof(r->known_hosts), "%s/.ssh/known_hosts", pwp->pw_dir);
		if (access(r->known_hosts, R_OK) < 0) {
			snprintf(err, errlen, "sftp checks the server's host key against %.300s, which "
				 "cannot be read: %.300s", r->known_hosts, strerror(errno));
			return -1;
		}
	}
	if (r->proto == P_S3) {
		const char *b = r->url + 5, *slash = strchr(b, '/');
		size_t bl = slash ? (size_t)(slash - b) : strlen(b);
		int k, dl;
		CURL *esc;
		char *dec;

#if !HAVE_SIGV4
		snprintf(err, errlen, "this libcurl (%s) has no AWS SigV4 support: s3:// needs 7.75 "
			 "or later", LIBCURL_VERSION);
		return -1;
#endif
		if (bl == 0 || bl >= sizeof(r->s3_bucket)) {
			snprintf(err, errlen, "s3 URL without a bucket: use s3://BUCKET/KEY");
			return -1;
		}
		for (size_t i = 0; i < bl; i++)
			if (!islower((unsigned char)b[i]) && !isdigit((unsigned char)b[i]) &&
			    b[i] != '-' && b[i] != '.') {
				snprintf(err, errlen, "'%.*s' is not an S3 bucket name (lower-case "
					 "letters, digits, '-', '.')", (int)bl, b);
				return -1;
			}
		memcpy(r->s3_bucket, b, bl);
		r->s3_bucket[bl] = '\0';
		if (snprintf(r->s3_key, sizeof(r->s3_key), "%s", slash ? slash + 1 : "") >=
		    (int)sizeof(r->s3_key)) {
			snprintf(err, errlen, "S3 key too long");
			return -1;
		}
		esc = curl_easy_init();
		dec = esc ? curl_easy_unescape(esc, r->s3_key, 0, &dl) : NULL;
		if (!dec || snprintf(r->s3_key_dec, sizeof(r->s3_key_dec), "%s", dec) >=
		    (int)sizeof(r->s3_key_dec)) {
			curl_free(dec);
			curl_easy_cleanup(esc);
			snprintf(err, errlen, "S3 key too long or out of memory");
			return -1;
		}
		curl_free(dec);
		curl_easy_cleanup(esc);
		if (conf && conf->s3_endpoint)
			k = snprintf(r->s3_base, sizeof(r->s3_base), "%s/%s", conf->s3_endpoint,
				     r->s3_bucket);
		else
			k = snprintf(r->s3_base, sizeof(r->s3_base), "https://s3.%s.amazonaws.com/%s",
				     conf && conf->s3_region ? conf->s3_region : "us-east-1",
				     r->s3_bucket);
		if (k < 0 || (size_t)k >= sizeof(r->s3_base) ||
		    snprintf(r->sigv4, sizeof(r->sigv4), "aws:amz:%s:s3",
			     conf && conf->s3_region ? conf->s3_region : "us-east-1") >=
		    (int)sizeof(r->sigv4)) {
			snprintf(err, errlen, "S3 endpoint or region too long");
			return -1;
		}
		/* The user's own keys first (read as the user), else the site's. */
		if (snprintf(path, sizeof(path), "%s/.config/stagehand/s3.conf", pwp->pw_dir) >=
		    (int)sizeof(path))
			path[0] = '\0';
		if (path[0] && access(path, F_OK) == 0) {
			if (_read_creds(path, getuid(), &r->creds, err, errlen) < 0)
				return -1;
		} else if (_site.have) {
			r->creds = _site;
		} else {
			if (_site_err[0])
				snprintf(err, errlen, "no S3 credentials: %s has none and the site file "
					 "is unusable (%s)", path, _site_err);
			else
				snprintf(err, errlen, "no S3 credentials: create %s (mode 0600) with "
					 "access_key_id = ... and secret_access_key = ...", path);
			return -1;
		}
	}
	return 0;
}

static int _run_url(struct xfer_ctx *ctx)
{
	struct url__run r;
	char msg[XFER_TEXT_MAX], err[XFER_TEXT_MAX];
	int upload, rc;

	memset(&r, 0, sizeof(r));
	r.ctx = ctx;
	if (strcmp(ctx->action, "label") == 0)
		return _finish(&r, XFER_FINAL, "label requests take a local path, not a URL");
	upload = strcmp(ctx->action, "stage_in") != 0;
	r.url = upload ? ctx->dest : ctx->source;
	if (!r.url || !strstr(r.url, "://") || (upload && strstr(ctx->source, "://")) ||
	    (!upload && ctx->dest && strstr(ctx->dest, "://")))
		return _finish(&r, XFER_FINAL, "the url backend moves between one URL and one "
			       "local path");
	r.buf = malloc(CHUNK);
	if (!r.buf || curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK)
		return _finish(&r, XFER_RETRYABLE, "out of memory");
	if (_setup(&r, err, sizeof(err)) < 0)
		return _finish(&r, XFER_FINAL, err);
	rc = upload ? _stage_out(&r) : _stage_in(&r);
	if (rc >= 0)
		return rc;	/* finished already */
	if (url__stopped(&r))
		return _finish(&r, XFER_INTERRUPTED, "interrupted; will be resumed");
	xfer_emit(ctx, XR_PHASE, QS_VERIFYING, 0, 0, 0, NULL, NULL, NULL);
	if (!r.failures && r.verified + r.kept != r.files) {
		snprintf(msg, sizeof(msg), "the tree changed during the transfer (%lld files counted, "
			 "%lld verified): will be redone", (long long)r.files,
			 (long long)(r.verified + r.kept));
		return _finish(&r, XFER_RETRYABLE, msg);
	}
	if (r.failures)
		return _finish(&r, xfer_failed_result(r.failures, r.final_failures, r.first_error,
						      msg, sizeof(msg)), msg);
	return _finish(&r, XFER_OK, NULL);
}

static const char *const _schemes[] = { "http", "https", "s3", "ftp", "ftps", "sftp", NULL };

const struct xfer_backend xfer_backend_url = { "url", _schemes, _run_url };
