/*
 * xfer_url.c - the "url" backend: http, https, s3, ftp, ftps and sftp
 * through libcurl.
 *
 * Runs only inside a worker that already has the owner's uid, gid and
 * groups: every credential file (~/.netrc, ~/.ssh, ~/.config/stagehand/
 * s3.conf) is read as the owner and must not be readable by anyone else.
 * The one exception is the site's S3CredentialsFile, read by prepare()
 * before the worker drops root.
 *
 * stage_in: the source is a URL (ending in '/' for a tree: WebDAV PROPFIND,
 * S3 ListObjectsV2, FTP/SFTP directory listings). Each file is written to a
 * temporary name in its destination directory (opened with O_NOFOLLOW
 * relative to its parent), checked against the server's checksum or size,
 * fsynced, read back and renamed. A partial temporary file is resumed (HTTP
 * Range, FTP REST, SFTP offset) when the server still describes the file as
 * it did when the partial download began (validator kept in an xattr).
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

#define CHUNK (1u << 20)
#define MAX_DEPTH 64
#define PARTIAL_XATTR "user.stagehand-partial"
#define HAVE_SIGV4 (LIBCURL_VERSION_NUM >= 0x074b00)	/* CURLOPT_AWS_SIGV4: 7.75 */

enum _proto { P_HTTP, P_S3, P_FTP, P_SFTP };

/* ---- MD5 (RFC 1321): the S3 ETag of a single-part object ---- */

struct _md5 {
	uint32_t s[4];
	uint64_t len;
	uint8_t buf[64];
	size_t n;
};

static const uint32_t _md5_k[64] = {
	0xd76aa478, 0xe8c7b756, 0x242070db, 0xc1bdceee, 0xf57c0faf, 0x4787c62a, 0xa8304613,
	0xfd469501, 0x698098d8, 0x8b44f7af, 0xffff5bb1, 0x895cd7be, 0x6b901122, 0xfd987193,
	0xa679438e, 0x49b40821, 0xf61e2562, 0xc040b340, 0x265e5a51, 0xe9b6c7aa, 0xd62f105d,
	0x02441453, 0xd8a1e681, 0xe7d3fbc8, 0x21e1cde6, 0xc33707d6, 0xf4d50d87, 0x455a14ed,
	0xa9e3e905, 0xfcefa3f8, 0x676f02d9, 0x8d2a4c8a, 0xfffa3942, 0x8771f681, 0x6d9d6122,
	0xfde5380c, 0xa4beea44, 0x4bdecfa9, 0xf6bb4b60, 0xbebfbc70, 0x289b7ec6, 0xeaa127fa,
	0xd4ef3085, 0x04881d05, 0xd9d4d039, 0xe6db99e5, 0x1fa27cf8, 0xc4ac5665, 0xf4292244,
	0x432aff97, 0xab9423a7, 0xfc93a039, 0x655b59c3, 0x8f0ccc92, 0xffeff47d, 0x85845dd1,
	0x6fa87e4f, 0xfe2ce6e0, 0xa3014314, 0x4e0811a1, 0xf7537e82, 0xbd3af235, 0x2ad7d2bb,
	0xeb86d391,
};
static const uint8_t _md5_r[64] = {
	7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22, 7, 12, 17, 22,
	5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20, 5, 9, 14, 20,
	4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23, 4, 11, 16, 23,
	6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21, 6, 10, 15, 21,
};

static void _md5_init(struct _md5 *m)
{
	m->s[0] = 0x67452301;
	m->s[1] = 0xefcdab89;
	m->s[2] = 0x98badcfe;
	m->s[3] = 0x10325476;
	m->len = 0;
	m->n = 0;
}

static void _md5_block(struct _md5 *m, const uint8_t *p)
{
	uint32_t w[16], a = m->s[0], b = m->s[1], c = m->s[2], d = m->s[3];

	for (int i = 0; i < 16; i++)
		w[i] = (uint32_t)p[i * 4] | (uint32_t)p[i * 4 + 1] << 8 |
		       (uint32_t)p[i * 4 + 2] << 16 | (uint32_t)p[i * 4 + 3] << 24;
	for (int i = 0; i < 64; i++) {
		uint32_t f, t;
		int g;

		if (i < 16) {
			f = (b & c) | (~b & d);
			g = i;
		} else if (i < 32) {
			f = (d & b) | (~d & c);
			g = (5 * i + 1) % 16;
		} else if (i < 48) {
			f = b ^ c ^ d;
			g = (3 * i + 5) % 16;
		} else {
			f = c ^ (b | ~d);
			g = (7 * i) % 16;
		}
		t = d;
		d = c;
		c = b;
		f += a + _md5_k[i] + w[g];
		b += (f << _md5_r[i]) | (f >> (32 - _md5_r[i]));
		a = t;
	}
	m->s[0] += a;
	m->s[1] += b;
	m->s[2] += c;
	m->s[3] += d;
}

static void _md5_update(struct _md5 *m, const void *data, size_t len)
{
	const uint8_t *p = data;

	m->len += len;
	while (len) {
		size_t k = 64 - m->n < len ? 64 - m->n : len;

		memcpy(m->buf + m->n, p, k);
		m->n += k;
		p += k;
		len -= k;
		if (m->n == 64) {
			_md5_block(m, m->buf);
			m->n = 0;
		}
	}
}

static void _md5_hex(struct _md5 *m, char out[33])
{
	uint64_t bits = m->len * 8;
	uint8_t pad = 0x80, zero = 0, lenb[8];

	_md5_update(m, &pad, 1);
	while (m->n != 56)
		_md5_update(m, &zero, 1);
	for (int i = 0; i < 8; i++)
		lenb[i] = (uint8_t)(bits >> (8 * i));
	_md5_update(m, lenb, 8);
	for (int i = 0; i < 16; i++)
		snprintf(out + 2 * i, 3, "%02x", (m->s[i / 4] >> (8 * (i % 4))) & 0xff);
}

/* ---- site credentials, read before the worker drops root ---- */

struct _creds {
	char access[256];
	char secret[256];
	char token[2048];
	int have;
};

static struct _creds _site;
static char _site_err[512];

/*
 * Parse "key = value" lines: access_key_id / aws_access_key_id,
 * secret_access_key / aws_secret_access_key, session_token /
 * aws_session_token; '#' and '[section]' lines are ignored. The file must
 * be a regular file of the expected owner with no group/other permissions.
 */
static int _read_creds(const char *path, uid_t owner, struct _creds *c, char *err, size_t errlen)
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

struct _meta {
	int64_t size;                /* -1 unknown */
	int64_t mtime;               /* seconds, -1 unknown */
	char md5[33];                /* hex, "" unknown */
	char sha256[65];             /* hex, "" unknown */
	char etag[128];              /* validator for resume, "" unknown */
	const char *how;             /* what md5/sha256 came from, for messages */
};

struct _ent {                        /* one remote file of a tree */
	char *rel;
	int64_t size;
};

struct _run {
	struct xfer_ctx *ctx;
	enum _proto proto;
	const char *url;             /* the remote side as given */
	char scheme[16];
	char s3_base[XFER_PATH_MAX]; /* s3: endpoint/bucket, no trailing '/' */
	char s3_key[XFER_PATH_MAX];  /* s3: key or prefix as written (no leading '/') */
	char s3_key_dec[XFER_PATH_MAX]; /* the same, percent-decoded (listing prefix) */
	char s3_bucket[256];
	char sigv4[160];
	struct _creds creds;
	char user[256];              /* local user name (sftp login when the URL has none) */
	char netrc[PATH_MAX];        /* "" = none */
	char sshkey[PATH_MAX], known_hosts[PATH_MAX];
	char *buf;                   /* CHUNK bytes */
	int64_t files, bytes, skipped, kept, verified;
	int failures, final_failures;
	char first_error[XFER_TEXT_MAX];
	char curl_err[CURL_ERROR_SIZE];
	struct _ent *ents;
	size_t nents, capents;
	int list_truncated;
};

static int _stopped(struct _run *r)
{
	return r->ctx->stop && *r->ctx->stop;
}

static void _fail_item(struct _run *r, const char *rel, int final, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

static void _fail_item(struct _run *r, const char *rel, int final, const char *fmt, ...)
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

static int _finish(struct _run *r, int result, const char *msg)
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
static int _safe_rel(const char *rel)
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

static int _add_ent(struct _run *r, const char *rel, int64_t size)
{
	if (r->nents == r->capents) {
		size_t cap = r->capents ? r->capents * 2 : 64;
		struct _ent *e = realloc(r->ents, cap * sizeof(*e));

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
	return strcmp(((const struct _ent *)a)->rel, ((const struct _ent *)b)->rel);
}

/* ---- curl ---- */

static int _xferinfo(void *p, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
	struct _run *r = p;

	(void)dt;
	(void)dn;
	(void)ut;
	(void)un;
	return _stopped(r);
}

/* Build the request URL for rel (already escaped) under the remote root. */
static int _url_for(struct _run *r, const char *root_rel, char *out, size_t outlen)
{
	int n;

	if (r->proto == P_S3)
		n = snprintf(out, outlen, "%s/%s", r->s3_base, root_rel);
	else
		n = snprintf(out, outlen, "%s", root_rel);
	return (n < 0 || (size_t)n >= outlen) ? -1 : 0;
}

/* Percent-encode each component of a relative path, keeping '/'. */
static int _escape_path(CURL *c, const char *rel, char *out, size_t outlen)
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
static CURL *_easy(struct _run *r, const char *url, struct curl_slist **hdrs)
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

static void _easy_done(CURL *c, struct curl_slist *hdrs)
{
	curl_slist_free_all(hdrs);
	curl_easy_cleanup(c);
}

/*
 * Describe a failed curl call; returns 1 if a retry cannot help (not found,
 * permission, login, unknown host key) and 0 otherwise.
 */
static int _describe(struct _run *r, CURL *c, CURLcode rc, char *out, size_t outlen)
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
	if (rc == CURLE_PEER_FAILED_VERIFICATION && r->proto == P_SFTP)
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

/* ---- metadata ---- */

static int _unhex(int ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	ch = tolower(ch);
	return ch >= 'a' && ch <= 'f' ? ch - 'a' + 10 : -1;
}

/* Base64 of a digest to lower-case hex; 0 or -1. */
static int _b64_hex(const char *in, size_t n, char *out, size_t want_bytes)
{
	static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	uint8_t bytes[64];
	size_t nb = 0;
	uint32_t acc = 0;
	int bits = 0;

	for (size_t i = 0; i < n && in[i] != '='; i++) {
		const char *p = strchr(t, in[i]);

		if (!p || !in[i])
			return -1;
		acc = acc << 6 | (uint32_t)(p - t);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			if (nb >= sizeof(bytes))
				return -1;
			bytes[nb++] = (uint8_t)(acc >> bits);
		}
	}
	if (nb != want_bytes)
		return -1;
	for (size_t i = 0; i < nb; i++)
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

struct _hctx {
	struct _run *r;
	struct _meta *m;
};

/* One response header: ETag, Digest, Repr-Digest, X-Checksum-*, Content-MD5. */
static size_t _header(char *b, size_t sz, size_t nm, void *p)
{
	struct _hctx *h = p;
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

static size_t _discard(char *b, size_t sz, size_t nm, void *p)
{
	(void)b;
	(void)p;
	return sz * nm;
}

/*
 * Ask the server about one file: size, mtime, checksums, validator.
 * Returns 0, or -1 with a message (and *final) on failure.
 */
static int _stat_remote(struct _run *r, const char *url, struct _meta *m, int *final,
			char *err, size_t errlen)
{
	struct curl_slist *hdrs;
	struct _hctx h = { r, m };
	CURL *c = _easy(r, url, &hdrs);
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
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, _header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, _discard);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		*final = _describe(r, c, rc, err, errlen);
		_easy_done(c, hdrs);
		return -1;
	}
	curl_easy_getinfo(c, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &len);
	curl_easy_getinfo(c, CURLINFO_FILETIME_T, &ft);
	m->size = len;
	m->mtime = ft;
	_easy_done(c, hdrs);
	if (!m->etag[0] && (m->size >= 0 || m->mtime >= 0))
		snprintf(m->etag, sizeof(m->etag), "size=%lld;mtime=%lld", (long long)m->size,
			 (long long)m->mtime);
	return 0;
}

/* ---- download ---- */

struct _sink {
	struct _run *r;
	int fd;
	int64_t got;                 /* bytes written by this request */
	struct cksum ck;
	struct _md5 md5;
	struct sha256_ctx sha;
	int werr;                    /* errno of a failed write */
};

static void _sink_update(struct _sink *s, const void *b, size_t n)
{
	cksum_update(&s->ck, b, n);
	_md5_update(&s->md5, b, n);
	sha256_update(&s->sha, b, n);
}

static size_t _write(char *b, size_t sz, size_t nm, void *p)
{
	struct _sink *s = p;
	size_t n = sz * nm;

	if (_stopped(s->r))
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
	xfer_bucket_take(s->r->ctx->bucket, n, s->r->ctx->stop);
	return n;
}

static int _tmpname(char *out, size_t outlen, const char *name, int64_t id)
{
	int n = snprintf(out, outlen, ".%s.stagehand-%lld", name, (long long)id);

	if (n < 0 || (size_t)n >= outlen || n > NAME_MAX) {
		unsigned h = 5381;

		for (const char *p = name; *p; p++)
			h = h * 33 + (unsigned char)*p;
		n = snprintf(out, outlen, ".stagehand-%lld-%08x", (long long)id, h);
	}
	return (n < 0 || (size_t)n >= outlen) ? -1 : 0;
}

/* Read the file back from disk and compare with the checksum of what was received. */
static int _readback(struct _run *r, int fd, const char *want)
{
	struct cksum ck;
	char got[CKSUM_HEX_MAX];
	off_t off = 0;
	ssize_t n;

	if (cksum_init(&ck, r->ctx->algo) < 0)
		return ENOMEM;
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	while ((n = pread(fd, r->buf, CHUNK, off)) > 0) {
		if (_stopped(r)) {
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

static int _resumable(const struct _run *r)
{
	return r->proto != P_SFTP || 1;	/* http(s)/s3: Range, ftp: REST, sftp: offset */
}

/*
 * Fetch url into ddir/name (rel names it in records). m: what the server
 * said about it. Verification: sha256 or md5 from the server when given,
 * else the size.
 */
static void _fetch(struct _run *r, const char *url, int ddir, const char *name, const char *rel,
		   const struct _meta *m)
{
	const struct xfer_done_ent *de = xfer_done_find(r->ctx->done, r->ctx->ndone, rel);
	int64_t mtime_ns = m->mtime >= 0 ? m->mtime * 1000000000LL : 0;
	int64_t started = (int64_t)time(NULL), off = 0;
	char tmp[NAME_MAX + 1], validator[256], old[256], cks[CKSUM_HEX_MAX], token[CKSUM_HEX_MAX];
	char md5[33], sha[65], why[XFER_TEXT_MAX];
	uint8_t shab[32];
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
	if (_tmpname(tmp, sizeof(tmp), name, r->ctx->request_id) < 0) {
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
	if (st.st_size > 0 && vl > 0 && validator[0] && strcmp(old, validator) == 0 &&
	    _resumable(r) && (m->size < 0 || st.st_size < m->size))
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
	if (cksum_init(&s.ck, r->ctx->algo) < 0) {
		close(fd);
		_fail_item(r, rel, 0, "out of memory");
		return;
	}
	_md5_init(&s.md5);
	sha256_init(&s.sha);
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
			cksum_abort(&s.ck);
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
		cksum_abort(&s.ck);
		close(fd);
		_fail_item(r, rel, 0, "seek in temporary file: %s", strerror(e));
		return;
	}
	c = _easy(r, url, &hdrs);
	if (!c) {
		cksum_abort(&s.ck);
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

		cksum_abort(&s.ck);
		if (_stopped(r)) {
			/* Kept for the next attempt when it can resume; else removed. */
			_easy_done(c, hdrs);
			close(fd);
			return;
		}
		if (off > 0 && tries++ == 0 && (rc == CURLE_RANGE_ERROR ||
						rc == CURLE_BAD_DOWNLOAD_RESUME)) {
			xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: '%s': the server cannot "
				  "resume; starting again", (long long)r->ctx->request_id, rel);
			_easy_done(c, hdrs);
			off = 0;
			if (ftruncate(fd, 0) == 0)
				goto again;
			c = NULL;
		}
		if (s.werr)
			snprintf(why, sizeof(why), "writing the temporary file: %s", strerror(s.werr));
		else if (c)
			final = _describe(r, c, rc, why, sizeof(why));
		else
			snprintf(why, sizeof(why), "cannot truncate the temporary file");
		if (c)
			_easy_done(c, hdrs);
		close(fd);
		if (final)
			unlinkat(ddir, tmp, 0);
		_fail_item(r, rel, final, "download of '%s' failed: %s", rel, why);
		return;
	}
	_easy_done(c, hdrs);
	cksum_final(&s.ck, cks);
	_md5_hex(&s.md5, md5);
	sha256_final(&s.sha, shab);
	for (int i = 0; i < 32; i++)
		snprintf(sha + 2 * i, 3, "%02x", shab[i]);
	/* Verify against the strongest thing the server told us. */
	e = 0;
	if (m->size >= 0 && off + s.got != m->size) {
		snprintf(why, sizeof(why), "size mismatch for '%s': the server announced %lld bytes, "
			 "%lld arrived", rel, (long long)m->size, (long long)(off + s.got));
		e = 1;
	} else if (m->sha256[0] && strcmp(m->sha256, sha) != 0) {
		snprintf(why, sizeof(why), "checksum mismatch for '%s': sha256 from the %s is %s, "
			 "the data received has %s", rel, m->how, m->sha256, sha);
		e = 1;
	} else if (!m->sha256[0] && m->md5[0] && strcmp(m->md5, md5) != 0) {
		snprintf(why, sizeof(why), "checksum mismatch for '%s': md5 from the %s is %s, "
			 "the data received has %s", rel, m->how, m->md5, md5);
		e = 1;
	}
	if (e) {
		close(fd);
		unlinkat(ddir, tmp, 0);
		_fail_item(r, rel, 0, "%s", why);
		return;
	}
	if (m->sha256[0])
		snprintf(token, sizeof(token), "sha256:%s", sha);
	else if (m->md5[0])
		snprintf(token, sizeof(token), "md5:%s", md5);
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
	if (m->n + n + 1 > m->cap) {
		size_t cap = m->cap ? m->cap : 65536;
		char *q;

		while (cap < m->n + n + 1)
			cap *= 2;
		q = realloc(m->p, cap);
		if (!q)
			return 0;
		m->p = q;
		m->cap = cap;
	}
	memcpy(m->p + m->n, b, n);
	m->n += n;
	m->p[m->n] = '\0';
	return n;
}

/* Fetch url's body into memory (a listing). body: request body or NULL. */
static int _get_mem(struct _run *r, const char *url, const char *method, const char *extra_hdr,
		    const char *body, struct _mem *out, int *final, char *err, size_t errlen)
{
	struct curl_slist *hdrs;
	CURL *c = _easy(r, url, &hdrs);
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
			*final = _describe(r, c, rc, err, errlen);
		_easy_done(c, hdrs);
		free(out->p);
		out->p = NULL;
		return -1;
	}
	_easy_done(c, hdrs);
	if (!out->p)
		out->p = strdup("");
	return out->p ? 0 : -1;
}

/*
 * The text of the next element whose local name is tag (any namespace
 * prefix), searching from *pos up to end; advances *pos past it. The
 * returned pointer and length point into the buffer.
 */
static const char *_xml_next(const char *pos, const char *end, const char *tag, size_t *len,
			     const char **after)
{
	size_t tl = strlen(tag);

	for (const char *p = pos; p && p < end; p++) {
		const char *q, *name, *close;

		p = memchr(p, '<', (size_t)(end - p));
		if (!p)
			return NULL;
		if (p[1] == '/' || p[1] == '?' || p[1] == '!')
			continue;
		name = p + 1;
		for (q = name; q < end && *q != '>' && *q != ' ' && *q != '/' && *q != ':'; q++)
			;
		if (q < end && *q == ':')
			name = q + 1;
		if ((size_t)(end - name) < tl || strncmp(name, tag, tl) != 0 ||
		    (name[tl] != '>' && name[tl] != ' ' && name[tl] != '/'))
			continue;
		q = memchr(name, '>', (size_t)(end - name));
		if (!q)
			return NULL;
		if (q[-1] == '/') {	/* <tag/> */
			*len = 0;
			*after = q + 1;
			return q + 1;
		}
		/* The matching close tag: "</" [prefix:] tag ">" */
		for (close = q + 1; close < end; close++) {
			const char *cn;

			close = memchr(close, '<', (size_t)(end - close));
			if (!close)
				return NULL;
			if (close[1] != '/')
				continue;
			cn = close + 2;
			for (const char *k = cn; k < end && *k != '>'; k++)
				if (*k == ':') {
					cn = k + 1;
					break;
				}
			if ((size_t)(end - cn) > tl && strncmp(cn, tag, tl) == 0 && cn[tl] == '>') {
				*len = (size_t)(close - (q + 1));
				*after = cn + tl + 1;
				return q + 1;
			}
		}
		return NULL;
	}
	return NULL;
}

/* XML text to a NUL-terminated string (the five predefined entities). */
static int _xml_text(const char *v, size_t n, char *out, size_t outlen)
{
	static const struct { const char *ent; char ch; } ents[] = {
		{ "&amp;", '&' }, { "&lt;", '<' }, { "&gt;", '>' }, { "&quot;", '"' }, { "&apos;", '\'' },
	};
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		char ch = v[i];

		if (ch == '&') {
			size_t k;

			for (k = 0; k < 5; k++) {
				size_t el = strlen(ents[k].ent);

				if (n - i >= el && strncmp(v + i, ents[k].ent, el) == 0) {
					ch = ents[k].ch;
					i += el - 1;
					break;
				}
			}
			if (k == 5)
				return -1;	/* numeric references: not used for names here */
		}
		if (o + 1 >= outlen)
			return -1;
		out[o++] = ch;
	}
	out[o] = '\0';
	return 0;
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
static int _list_s3(struct _run *r, int *final, char *err, size_t errlen)
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
		const char *p, *end, *v, *after;
		size_t n;
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
		if (_get_mem(r, url, NULL, NULL, NULL, &m, final, err, errlen) < 0) {
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
		end = m.p + m.n;
		p = m.p;
		while ((v = _xml_next(p, end, "Contents", &n, &after))) {
			const char *cend = v + n, *kv, *sv, *a2;
			size_t kn, sn;
			char key[XFER_PATH_MAX], num[32];

			p = after;
			kv = _xml_next(v, cend, "Key", &kn, &a2);
			sv = _xml_next(v, cend, "Size", &sn, &a2);
			if (!kv || _xml_text(kv, kn, key, sizeof(key)) < 0 ||
			    strncmp(key, r->s3_key_dec, plen) != 0)
				continue;
			if (!key[plen] || key[strlen(key) - 1] == '/')
				continue;	/* the prefix itself, or a "folder" marker */
			snprintf(num, sizeof(num), "%.*s", (int)(sn < 31 ? sn : 31), sv ? sv : "");
			if (!_safe_rel(key + plen)) {
				xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, "(unsafe name)",
					  "object name with '..', an empty component or a control "
					  "character skipped");
				r->skipped++;
				continue;
			}
			if (_add_ent(r, key + plen, strtoll(num, NULL, 10)) < 0) {
				snprintf(err, errlen, "out of memory");
				free(m.p);
				goto out;
			}
		}
		token[0] = '\0';
		if ((v = _xml_next(m.p, end, "IsTruncated", &n, &after)) && n == 4 &&
		    strncmp(v, "true", 4) == 0 &&
		    (v = _xml_next(m.p, end, "NextContinuationToken", &n, &after)))
			_xml_text(v, n, token, sizeof(token));
		free(m.p);
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
static const char *_url_path(const char *u)
{
	const char *p = strstr(u, "://");

	if (!p)
		return u;
	p = strchr(p + 3, '/');
	return p ? p : "/";
}

/* WebDAV PROPFIND Depth: 1 of dirurl (ending in '/'), recursively. */
static int _list_dav(struct _run *r, const char *dirurl, const char *prefix, int depth,
		     int *final, char *err, size_t errlen)
{
	static const char body[] = "<?xml version=\"1.0\" encoding=\"utf-8\"?>"
		"<D:propfind xmlns:D=\"DAV:\"><D:prop><D:resourcetype/><D:getcontentlength/>"
		"</D:prop></D:propfind>";
	struct _mem m;
	const char *p, *end, *v, *after, *base;
	size_t n, bl;
	CURL *esc;
	int rc = 0;

	if (depth > MAX_DEPTH) {
		snprintf(err, errlen, "tree deeper than %d levels", MAX_DEPTH);
		*final = 1;
		return -1;
	}
	if (_get_mem(r, dirurl, "PROPFIND", "Depth: 1", body, &m, final, err, errlen) < 0) {
		long dummy = 0;

		(void)dummy;
		if (strstr(err, "HTTP 405") || strstr(err, "HTTP 501"))
			snprintf(err, errlen, "the server does not list directories (WebDAV "
				 "PROPFIND refused): name the files one by one");
		return -1;
	}
	esc = curl_easy_init();
	if (!esc) {
		free(m.p);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	base = _url_path(dirurl);
	bl = strlen(base);
	end = m.p + m.n;
	p = m.p;
	while (rc == 0 && (v = _xml_next(p, end, "response", &n, &after))) {
		const char *rend = v + n, *hv, *a2, *cv, *rt;
		size_t hn, cn, rn;
		char href[XFER_PATH_MAX], *dec = NULL, rel[XFER_PATH_MAX], num[32];
		int dl, is_dir;
		const char *hp;

		p = after;
		hv = _xml_next(v, rend, "href", &hn, &a2);
		if (!hv || _xml_text(hv, hn, href, sizeof(href)) < 0)
			continue;
		dec = curl_easy_unescape(esc, _url_path(href), 0, &dl);
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
		rt = _xml_next(v, rend, "resourcetype", &rn, &a2);
		is_dir = rt && _xml_next(rt, rt + rn, "collection", &cn, &a2) != NULL;
		if (!*hp) {
			curl_free(dec);
			continue;	/* the collection itself */
		}
		snprintf(rel, sizeof(rel), "%s%s%.*s", prefix, *prefix ? "/" : "",
			 (int)(strlen(hp) - (hp[strlen(hp) - 1] == '/')), hp);
		curl_free(dec);
		if (!_safe_rel(rel) || strchr(rel + strlen(prefix) + (*prefix ? 1 : 0), '/')) {
			xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, "(unsafe name)",
				  "a name with '..', an empty component or a control character "
				  "was skipped");
			r->skipped++;
			continue;
		}
		if (is_dir) {
			char sub[XFER_PATH_MAX * 2], escd[XFER_PATH_MAX];
			const char *leaf = strrchr(rel, '/') ? strrchr(rel, '/') + 1 : rel;

			if (_escape_path(esc, leaf, escd, sizeof(escd)) < 0 ||
			    snprintf(sub, sizeof(sub), "%s%s/", dirurl, escd) >= (int)sizeof(sub)) {
				snprintf(err, errlen, "URL too long under %.300s", rel);
				rc = -1;
				break;
			}
			rc = _list_dav(r, sub, rel, depth + 1, final, err, errlen);
			continue;
		}
		cv = _xml_next(v, rend, "getcontentlength", &cn, &a2);
		snprintf(num, sizeof(num), "%.*s", (int)(cn < 31 ? cn : 31), cv ? cv : "-1");
		if (_add_ent(r, rel, cv ? strtoll(num, NULL, 10) : -1) < 0) {
			snprintf(err, errlen, "out of memory");
			rc = -1;
		}
	}
	curl_easy_cleanup(esc);
	free(m.p);
	return rc;
}

/*
 * FTP LIST / SFTP directory listing of dirurl (ending in '/'): "ls -l"
 * lines; 'd' recurses, '-' is a file, anything else is skipped.
 */
static int _list_ls(struct _run *r, const char *dirurl, const char *prefix, int depth,
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
	if (_get_mem(r, dirurl, NULL, NULL, NULL, &m, final, err, errlen) < 0)
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
			xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, prefix[0] ? prefix : ".",
				  msg);
			r->skipped++;
			continue;
		}
		if (snprintf(rel, sizeof(rel), "%s%s%s", prefix, *prefix ? "/" : "", f) >=
		    (int)sizeof(rel) || !_safe_rel(rel) || strchr(f, '/')) {
			xfer_emit(r->ctx, XR_ITEM_SKIPPED, 0, 0, 0, 0, NULL, "(unsafe name)",
				  "a name with '..', '/' or a control character was skipped");
			r->skipped++;
			continue;
		}
		if (line[0] == 'd') {
			char sub[XFER_PATH_MAX * 2], escd[XFER_PATH_MAX];

			if (_escape_path(esc, f, escd, sizeof(escd)) < 0 ||
			    snprintf(sub, sizeof(sub), "%s%s/", dirurl, escd) >= (int)sizeof(sub)) {
				snprintf(err, errlen, "URL too long under %.300s", rel);
				rc = -1;
				break;
			}
			rc = _list_ls(r, sub, rel, depth + 1, final, err, errlen);
		} else if (_add_ent(r, rel, size_s ? strtoll(size_s, NULL, 10) : -1) < 0) {
			snprintf(err, errlen, "out of memory");
			rc = -1;
		}
	}
	curl_easy_cleanup(esc);
	free(m.p);
	return rc;
}

/* ---- local destination of a download ---- */

/* mkdir -p of path's parents (as the owner; existing components are fine). */
static void _mkparents(const char *path)
{
	char buf[XFER_PATH_MAX];

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf))
		return;
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		mkdir(buf, 0755);
		*p = '/';
	}
}

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

static int _remote_url(struct _run *r, CURL *esc, const char *rel, char *out, size_t outlen)
{
	char escd[XFER_PATH_MAX * 2];
	int n;

	if (_escape_path(esc, rel, escd, sizeof(escd)) < 0)
		return -1;
	if (r->proto == P_S3)
		n = snprintf(out, outlen, "%s/%s%s", r->s3_base, r->s3_key, escd);
	else
		n = snprintf(out, outlen, "%s%s", r->url, escd);
	return (n < 0 || (size_t)n >= outlen) ? -1 : 0;
}

static int _stage_in(struct _run *r)
{
	struct xfer_ctx *ctx = r->ctx;
	char msg[XFER_TEXT_MAX], url[XFER_PATH_MAX * 2];
	int tree = r->url[strlen(r->url) - 1] == '/', final = 0, droot;
	CURL *esc;

	if (!tree) {
		struct _meta m;
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
		ub = strrchr(_url_path(r->proto == P_S3 ? r->url + 5 : r->url), '/');
		ub = ub ? ub + 1 : "";
		if (strchr(ub, '?'))
			return _finish(r, XFER_FINAL, "URLs with a query string are not supported: "
				       "name the file by its path");
		esc = curl_easy_init();
		dec = esc ? curl_easy_unescape(esc, ub, 0, &dec_len) : NULL;
		if (!dec || snprintf(base, sizeof(base), "%s", dec) >= (int)sizeof(base) ||
		    !_safe_rel(base) || strchr(base, '/')) {
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

			_mkparents(ctx->dest);
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
			rc = _list_s3(r, &final, msg, sizeof(msg));
		else if (r->proto == P_HTTP)
			rc = _list_dav(r, r->url, "", 0, &final, msg, sizeof(msg));
		else
			rc = _list_ls(r, r->url, "", 0, &final, msg, sizeof(msg));
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
		_mkparents(ctx->dest);
		if (mkdir(ctx->dest, 0755) < 0 && errno != EEXIST) {
			snprintf(msg, sizeof(msg), "cannot create destination directory %s: %s "
				 "(its parent must exist and be writable by you)", ctx->dest,
				 strerror(errno));
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
		for (size_t i = 0; i < r->nents && !_stopped(r); i++) {
			const char *rel = r->ents[i].rel, *leaf;
			struct _meta m;
			int pfd;

			if (_remote_url(r, esc, rel, url, sizeof(url)) < 0) {
				_fail_item(r, rel, 1, "URL too long for '%s'", rel);
				continue;
			}
			if (_stat_remote(r, url, &m, &final, msg, sizeof(msg)) < 0) {
				if (!_stopped(r))
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
	struct _run *r;
	int fd;
	int64_t sent;
	struct cksum ck;
	struct _md5 md5;
	int rerr;
};

static size_t _read(char *b, size_t sz, size_t nm, void *p)
{
	struct _source *s = p;
	ssize_t n;

	if (_stopped(s->r))
		return CURL_READFUNC_ABORT;
	do
		n = read(s->fd, b, sz * nm);
	while (n < 0 && errno == EINTR);
	if (n < 0) {
		s->rerr = errno;
		return CURL_READFUNC_ABORT;
	}
	cksum_update(&s->ck, b, (size_t)n);
	_md5_update(&s->md5, b, (size_t)n);
	s->sent += n;
	xfer_bucket_take(s->r->ctx->bucket, (uint64_t)n, s->r->ctx->stop);
	return (size_t)n;
}

/* WebDAV: MKCOL url (ending in '/'); an existing collection is fine. */
static int _mkcol(struct _run *r, const char *url, char *err, size_t errlen)
{
	struct curl_slist *hdrs;
	CURL *c = _easy(r, url, &hdrs);
	CURLcode rc;
	long code = 0;

	if (!c) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "MKCOL");
	curl_easy_setopt(c, CURLOPT_FAILONERROR, 0L);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, _discard);
	rc = curl_easy_perform(c);
	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	if (rc != CURLE_OK) {
		_describe(r, c, rc, err, errlen);
		_easy_done(c, hdrs);
		return -1;
	}
	_easy_done(c, hdrs);
	/* 201 created; 405 it exists already (nginx, Apache). */
	if (code == 201 || code == 405 || code == 200 || code == 204)
		return 0;
	snprintf(err, errlen, "MKCOL answered HTTP %ld", code);
	return -1;
}

/* MKCOL every collection from the server root down to url's path (inclusive). */
static int _mkcol_path(struct _run *r, const char *url, char *err, size_t errlen)
{
	char buf[XFER_PATH_MAX * 2];
	const char *path = _url_path(url);
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

static int64_t _ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

/* PUT/STOR one local file (opened relative to sdir) to url, then verify it. */
static void _put(struct _run *r, int sdir, const char *sname, const char *url, const char *rel,
		 const struct stat *st)
{
	const struct xfer_done_ent *de = xfer_done_find(r->ctx->done, r->ctx->ndone, rel);
	struct _meta m = { 0 }, after;
	struct _hctx h = { r, &m };
	struct _source s;
	struct curl_slist *hdrs;
	struct stat cur;
	char cks[CKSUM_HEX_MAX], md5[33], token[CKSUM_HEX_MAX], why[XFER_TEXT_MAX];
	int64_t started = (int64_t)time(NULL);
	CURL *c;
	CURLcode rc;
	int final = 0;

	if (de && de->size == st->st_size && de->mtime_ns == _ns(&st->st_mtim) &&
	    _stat_remote(r, url, &after, &final, why, sizeof(why)) == 0 &&
	    after.size == st->st_size) {
		r->kept++;
		return;
	}
	xfer_emit(r->ctx, XR_ITEM_START, 0, st->st_size, _ns(&st->st_mtim),
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
	if (cksum_init(&s.ck, r->ctx->algo) < 0) {
		close(s.fd);
		_fail_item(r, rel, 0, "out of memory");
		return;
	}
	_md5_init(&s.md5);
	m.size = m.mtime = -1;
	c = _easy(r, url, &hdrs);
	if (!c) {
		cksum_abort(&s.ck);
		close(s.fd);
		_fail_item(r, rel, 0, "out of memory");
		return;
	}
	curl_easy_setopt(c, CURLOPT_UPLOAD, 1L);
	curl_easy_setopt(c, CURLOPT_READFUNCTION, _read);
	curl_easy_setopt(c, CURLOPT_READDATA, &s);
	curl_easy_setopt(c, CURLOPT_INFILESIZE_LARGE, (curl_off_t)cur.st_size);
	curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, _header);
	curl_easy_setopt(c, CURLOPT_HEADERDATA, &h);
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, _discard);
	rc = curl_easy_perform(c);
	if (rc != CURLE_OK) {
		cksum_abort(&s.ck);
		close(s.fd);
		if (_stopped(r)) {
			_easy_done(c, hdrs);
			return;
		}
		if (s.rerr)
			snprintf(why, sizeof(why), "reading the source: %s", strerror(s.rerr));
		else
			final = _describe(r, c, rc, why, sizeof(why));
		_easy_done(c, hdrs);
		_fail_item(r, rel, final, "upload of '%s' failed: %s", rel, why);
		return;
	}
	_easy_done(c, hdrs);
	cksum_final(&s.ck, cks);
	_md5_hex(&s.md5, md5);
	if (fstat(s.fd, &cur) < 0 || cur.st_size != s.sent || _ns(&cur.st_mtim) != _ns(&st->st_mtim)) {
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

static void _count(struct _run *r, int dirfd, int depth)
{
	DIR *d;
	struct dirent *de;
	int fd = dup(dirfd);

	if (fd < 0 || depth > MAX_DEPTH || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (S_ISREG(st.st_mode)) {
			r->files++;
			r->bytes += st.st_size;
		} else if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd, de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub >= 0) {
				_count(r, sub, depth + 1);
				close(sub);
			}
		} else {
			r->skipped++;
		}
	}
	closedir(d);
}

/* Upload the tree under sdir; prefix is its relpath ("" at the root). */
static void _put_tree(struct _run *r, CURL *esc, int sdir, const char *prefix, int depth)
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
	while ((de = readdir(d)) && !_stopped(r)) {
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

static void _label(struct _run *r, int fd, const char *name, const char *value)
{
	char err[256];

	if (r->ctx->label_via_daemon) {
		if (xfer_emit_label_fd(r->ctx, fd, name, value) < 0)
			xfer_logf(r->ctx, LOG_LVL_WARN, "request %lld: cannot pass label fd: %s",
				  (long long)r->ctx->request_id, strerror(errno));
		return;
	}
	if (xattr_set_label(fd, r->ctx->xattr_ns, name, value, err, sizeof(err)) < 0)
		xfer_logf(r->ctx, LOG_LVL_WARN, "request %lld: %s on %s",
			  (long long)r->ctx->request_id, err, r->ctx->source);
}

static void _label_archived(struct _run *r, int fd)
{
	char num[32];

	_label(r, fd, XATTR_POLICY, "archived");
	_label(r, fd, XATTR_LOCATION, r->ctx->dest);
	if (r->ctx->job_id > 0) {
		snprintf(num, sizeof(num), "%lld", (long long)r->ctx->job_id);
		_label(r, fd, XATTR_JOB, num);
	}
	snprintf(num, sizeof(num), "%u", (unsigned)r->ctx->uid);
	_label(r, fd, XATTR_OWNER, num);
}

static int _stage_out(struct _run *r, int *is_dir)
{
	struct xfer_ctx *ctx = r->ctx;
	char msg[XFER_TEXT_MAX], url[XFER_PATH_MAX * 2];
	struct stat st;
	int sroot;
	CURL *esc;

	sroot = open(ctx->source, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (sroot < 0 || fstat(sroot, &st) < 0) {
		snprintf(msg, sizeof(msg), "cannot open source %s: %s", ctx->source, strerror(errno));
		if (sroot >= 0)
			close(sroot);
		return _finish(r, XFER_FINAL, msg);
	}
	esc = curl_easy_init();
	if (!esc) {
		close(sroot);
		return _finish(r, XFER_RETRYABLE, "out of memory");
	}
	*is_dir = S_ISDIR(st.st_mode);
	if (S_ISDIR(st.st_mode)) {
		fcntl(sroot, F_SETFL, fcntl(sroot, F_GETFL) & ~O_NONBLOCK);
		if (r->url[strlen(r->url) - 1] != '/') {
			close(sroot);
			curl_easy_cleanup(esc);
			return _finish(r, XFER_FINAL, "a directory goes to a URL ending in '/' "
				       "(the remote directory or prefix)");
		}
		_count(r, sroot, 0);
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
		(void)url;
	} else {
		close(sroot);
		curl_easy_cleanup(esc);
		snprintf(msg, sizeof(msg), "source %s is neither a file nor a directory", ctx->source);
		return _finish(r, XFER_FINAL, msg);
	}
	curl_easy_cleanup(esc);
	if (!_stopped(r) && !r->failures && strcmp(ctx->action, "archive") == 0)
		_label_archived(r, sroot);
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

static int _setup(struct _run *r, char *err, size_t errlen)
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
	struct _run r;
	char msg[XFER_TEXT_MAX], err[XFER_TEXT_MAX];
	int upload, is_dir = 0, rc;

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
	rc = upload ? _stage_out(&r, &is_dir) : _stage_in(&r);
	if (rc >= 0)
		return rc;	/* finished already */
	if (_stopped(&r))
		return _finish(&r, XFER_INTERRUPTED, "interrupted; will be resumed");
	xfer_emit(ctx, XR_PHASE, QS_VERIFYING, 0, 0, 0, NULL, NULL, NULL);
	if (!r.failures && r.verified + r.kept != r.files) {
		snprintf(msg, sizeof(msg), "the tree changed during the transfer (%lld files counted, "
			 "%lld verified): will be redone", (long long)r.files,
			 (long long)(r.verified + r.kept));
		return _finish(&r, XFER_RETRYABLE, msg);
	}
	if (r.failures) {
		if (snprintf(msg, sizeof(msg), "%d of the entries failed; first: %s", r.failures,
			     r.first_error) >= (int)sizeof(msg))
			memcpy(msg + sizeof(msg) - 4, "...", 4);
		return _finish(&r, r.final_failures == r.failures ? XFER_FINAL : XFER_RETRYABLE, msg);
	}
	(void)is_dir;
	return _finish(&r, XFER_OK, NULL);
}

static const char *const _schemes[] = { "http", "https", "s3", "ftp", "ftps", "sftp", NULL };

const struct xfer_backend xfer_backend_url = { "url", _schemes, _run_url };
