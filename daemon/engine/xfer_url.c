/*
 * xfer_url.c - the "url" backend: http, https, s3, ftp, ftps and sftp
 * through libcurl.
 *
 * Runs only inside a worker that already has the owner's uid, gid and
 * groups: every credential file (~/.netrc, ~/.ssh, ~/.config/stagehand/
 * s3.conf) is read as the owner and must not be readable by anyone else.
 * The one exception is the site's S3CredentialsFile, read by url__prepare()
 * before the worker drops root.
 *
 * The url endpoint of the engine (xfer_endpoint.h): its driver
 * (xfer_pipeline.c) owns the walk, the decisions per file, the durable
 * write of local files, failures, records and the verdict; this endpoint
 * only asks servers. This file: credentials, the request's setup, the
 * options every libcurl handle shares, what both sides share (directory
 * handles, stat). The source side (stage_in from a URL, ending in '/' for
 * a tree: WebDAV PROPFIND, S3 ListObjectsV2, FTP/SFTP directory listings)
 * is xfer_url_get.c, the destination side (stage_out and archive to a URL)
 * xfer_url_put.c, listings and response headers xfer_url_parse.c.
 *
 * Must never: write credentials to a record, the log or the database (URLs
 * with a password are refused before this runs); follow a symlink on the
 * local side; accept a server-supplied name with '..', '/' at its start or
 * control characters; open a connection the site's outbound policy refuses
 * (_open_socket); sign with the site's S3 keys outside the owner's
 * S3SitePrefix or for a key with a query; hand libcurl's own error text to
 * the user (it goes to the log; the user reads a class, url__describe).
 */
#include "config.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "conf.h"
#include "log.h"
#include "outbound.h"
#include "xfer.h"
#include "xfer_url_int.h"
#include "xfer_util.h"


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

void url__prepare(struct xfer_ctx *ctx)
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
	if (xfer_grow((void **)&r->ents, r->nents, &r->capents, sizeof(*r->ents), 64) < 0)
		return -1;
	r->ents[r->nents].rel = strdup(rel);
	if (!r->ents[r->nents].rel)
		return -1;
	r->ents[r->nents].size = size;
	r->nents++;
	return 0;
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
int url__url_for(struct url__run *r, const char *root_rel, char *out, size_t outlen)
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

int url__remote_url(struct url__run *r, CURL *esc, const char *rel, char *out, size_t outlen)
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

/*
 * libcurl's CURLOPT_OPENSOCKETFUNCTION: every connection, the first and
 * each redirect's, FTP's data connections and an SFTP session's, is opened
 * here, to the address DNS gave for this very attempt: the site's outbound
 * policy (common/outbound.h) is checked on it, so a name that resolved to
 * an allowed address before cannot resolve to a denied one now.
 */
static curl_socket_t _open_socket(void *p, curlsocktype purpose, struct curl_sockaddr *a)
{
	struct url__run *r = p;
	const char *rule;

	(void)purpose;
	if (!outbound_allowed(r->ctx->conf ? (const char *const *)r->ctx->conf->outbound_allow :
			      NULL, &a->addr, a->addrlen, &rule)) {
		r->denied = 1;
		r->denied_rule = rule;
		outbound_addr_text(&a->addr, a->addrlen, r->denied_addr, sizeof(r->denied_addr));
		return CURL_SOCKET_BAD;
	}
	return socket(a->family, a->socktype | SOCK_CLOEXEC, a->protocol);
}

/*
 * The schemes a redirect may lead to: http and https as AllowedSchemes
 * names them (a redirect is a new URL the user did not write: the site's
 * list holds for it as for #DATA lines). out "" when neither is allowed.
 */
static void _redir_schemes(const struct url__run *r, char *out, size_t outlen)
{
	char **l = r->ctx->conf ? r->ctx->conf->allowed_schemes : NULL;
	int http = !r->ctx->conf, https = !r->ctx->conf;

	for (; l && *l; l++) {
		http |= strcmp(*l, "http") == 0;
		https |= strcmp(*l, "https") == 0;
	}
	snprintf(out, outlen, "%s%s%s", https ? "https" : "", https && http ? "," : "",
		 http ? "http" : "");
}

/* A new easy handle with the options every request shares. NULL: out of memory. */
CURL *url__easy(struct url__run *r, const char *url, struct curl_slist **hdrs)
{
	CURL *c = curl_easy_init();

	*hdrs = NULL;
	if (!c)
		return NULL;
	r->curl_err[0] = '\0';
	r->denied = 0;
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
	curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, _open_socket);
	curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, r);
	if (r->ctx->conf && r->ctx->conf->url_ca_file)
		curl_easy_setopt(c, CURLOPT_CAINFO, r->ctx->conf->url_ca_file);
#if LIBCURL_VERSION_NUM >= 0x075500
	curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR,
			 r->proto == P_S3 ? (strncmp(r->s3_base, "https", 5) ? "http" : "https") :
			 r->proto == P_HTTP ? "http,https" : r->scheme);
#endif
	switch (r->proto) {
	case P_HTTP: {
		char redir[16];

		/*
		 * Redirects only to the schemes of http(s) AllowedSchemes names (none:
		 * not followed), each to an address the outbound policy allows
		 * (_open_socket); credentials never follow to another host.
		 */
		_redir_schemes(r, redir, sizeof(redir));
		curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, redir[0] ? 1L : 0L);
		curl_easy_setopt(c, CURLOPT_MAXREDIRS, 5L);
#if LIBCURL_VERSION_NUM >= 0x075500
		if (redir[0])
			curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, redir);
#else
		curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS,
				 (strstr(redir, "https") ? CURLPROTO_HTTPS : 0L) |
				 (strstr(redir, "http,") || !strcmp(redir, "http") ||
				  strstr(redir, ",http") ? CURLPROTO_HTTP : 0L));
#endif
	}
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
 * What the user is told of a failed call: a class, never libcurl's own
 * text (which names addresses, ports and TLS details of the service host's
 * network); the detail goes to the daemon's log with the URL curl ended at.
 */
static const char *_class(const struct url__run *r, CURLcode rc)
{
	if (r->denied)
		return "the server's address is not allowed by the site's outbound policy "
		       "(an admin can allow it with OutboundAllow in stagehand.conf)";
	switch (rc) {
	case CURLE_COULDNT_RESOLVE_HOST:
		return "the server's name could not be resolved";
	case CURLE_COULDNT_RESOLVE_PROXY:
		return "the proxy's name could not be resolved";
	case CURLE_COULDNT_CONNECT:
		return "connection refused or the server unreachable";
	case CURLE_OPERATION_TIMEDOUT:
		return "timed out";
	case CURLE_SSL_CONNECT_ERROR:
	case CURLE_SSL_CERTPROBLEM:
	case CURLE_SSL_CIPHER:
	case CURLE_SSL_ENGINE_NOTFOUND:
	case CURLE_SSL_ENGINE_SETFAILED:
	case CURLE_SSL_ENGINE_INITFAILED:
	case CURLE_SSL_CACERT_BADFILE:
	case CURLE_SSL_CRL_BADFILE:
	case CURLE_SSL_ISSUER_ERROR:
	case CURLE_SSL_SHUTDOWN_FAILED:
	case CURLE_USE_SSL_FAILED:
		return "TLS error";
	case CURLE_TOO_MANY_REDIRECTS:
		return "too many redirects";
	case CURLE_UNSUPPORTED_PROTOCOL:
		return "a scheme the site does not allow (AllowedSchemes), or a redirect to one";
	case CURLE_LOGIN_DENIED:
		return "login denied (check your credentials)";
	case CURLE_REMOTE_ACCESS_DENIED:
		return "access denied by the server (check your permissions there)";
	case CURLE_REMOTE_FILE_NOT_FOUND:
		return "no such file on the server";
	case CURLE_URL_MALFORMAT:
		return "malformed URL";
	case CURLE_FILESIZE_EXCEEDED:
		return "the file is larger than the server allows";
	case CURLE_ABORTED_BY_CALLBACK:
		return "stopped";
	case CURLE_GOT_NOTHING:
	case CURLE_RECV_ERROR:
	case CURLE_SEND_ERROR:
	case CURLE_PARTIAL_FILE:
	case CURLE_HTTP2:
	case CURLE_HTTP2_STREAM:
		return "the connection broke off";
	case CURLE_WEIRD_SERVER_REPLY:
	case CURLE_FTP_WEIRD_PASV_REPLY:
	case CURLE_FTP_WEIRD_227_FORMAT:
		return "the server's answer was not understood";
	case CURLE_SSH:
		return "SSH error";
	default:
		return "transfer failed";
	}
}

/*
 * Describe a failed curl call for the user (a class) and the log (the
 * detail); returns 1 if a retry cannot help (not found, permission, login,
 * unknown host key, an address the site refuses) and 0 otherwise.
 */
int url__describe(struct url__run *r, CURL *c, CURLcode rc, char *out, size_t outlen)
{
	long code = 0;
	int final = 0;
	char *eff = NULL;

	curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &code);
	curl_easy_getinfo(c, CURLINFO_EFFECTIVE_URL, &eff);
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
	final |= r->denied;
	if (rc == CURLE_PEER_FAILED_VERIFICATION && r->proto != P_SFTP)
		snprintf(out, outlen, "TLS error: the server's certificate is not trusted (an "
			 "admin can name the site's CA bundle in URLCAFile)");
	else if (rc == CURLE_PEER_FAILED_VERIFICATION && r->proto == P_SFTP)
		snprintf(out, outlen, "the SSH host key of the server is not in %.300s (or does not "
			 "match): add it with ssh-keyscan, as you, after checking it", r->known_hosts);
	else if (rc == CURLE_HTTP_RETURNED_ERROR)
		snprintf(out, outlen, "server answered HTTP %ld%s", code,
			 code == 401 || code == 403 ? " (check your credentials and permissions)" :
			 code == 404 ? " (no such file)" : "");
	else
		snprintf(out, outlen, "%s", _class(r, rc));
	if (rc != CURLE_ABORTED_BY_CALLBACK && rc != CURLE_HTTP_RETURNED_ERROR) {
		if (r->denied)
			xfer_logf(r->ctx, LOG_LVL_WARN, "request %lld: outbound policy: connection "
				  "to %s refused (%s), at %.1000s", (long long)r->ctx->request_id,
				  r->denied_addr, r->denied_rule, eff ? eff : r->url);
		else
			xfer_logf(r->ctx, LOG_LVL_WARN, "request %lld: curl error %d (%s)%s%s, "
				  "at %.1000s", (long long)r->ctx->request_id, (int)rc,
				  curl_easy_strerror(rc), r->curl_err[0] ? ": " : "", r->curl_err,
				  eff ? eff : r->url);
	}
	return final;
}

/*
 * Ask the server about one file: size, mtime, checksums, validator.
 * Returns 0, or -1 with a message (and *final) on failure.
 */
int url__stat_remote(struct url__run *r, const char *url, struct url__meta *m, int *final,
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

/* sftp: a key of the user's without passphrase, and the known hosts to check. */
static int _setup_sftp(struct url__run *r, const char *sep, const char *home, char *err,
		       size_t errlen)
{
	static const char *const keys[] = { "id_ed25519", "id_ecdsa", "id_rsa", NULL };
	const char *auth = sep + 3, *end = auth + strcspn(auth, "/?#");
	char path[PATH_MAX];
	int have;

	if (memchr(auth, '@', (size_t)(end - auth)))
		r->user[0] = '\0';	/* the URL names the remote user */
	for (int i = 0; keys[i] && !r->sshkey[0]; i++) {
		if (snprintf(path, sizeof(path), "%s/.ssh/%s", home, keys[i]) >=
		    (int)sizeof(path) || _private_file(path, &have, err, errlen) < 0)
			return -1;
		if (have)
			snprintf(r->sshkey, sizeof(r->sshkey), "%s", path);
	}
	if (!r->sshkey[0]) {
		snprintf(err, errlen, "sftp needs a key without passphrase in %s/.ssh "
			 "(id_ed25519, id_ecdsa or id_rsa)", home);
		return -1;
	}
	snprintf(r->known_hosts, sizeof(r->known_hosts), "%s/.ssh/known_hosts", home);
	if (access(r->known_hosts, R_OK) < 0) {
		snprintf(err, errlen, "sftp checks the server's host key against %.300s, which "
			 "cannot be read: %.300s", r->known_hosts, strerror(errno));
		return -1;
	}
	return 0;
}

/*
 * May the site's keys sign for bucket/key (key percent-decoded once, as the
 * server reads it)? Only below the owner's own prefix, S3SitePrefix with %u
 * made user: the same bucket, and a key that starts with the prefix's key
 * and holds no component that a client or a server could fold away ('.',
 * '..', empty), no backslash, no '%' left after decoding (encoded twice) and no
 * control character, so that what is checked is what is signed and stored.
 * 1, or 0 with err saying why and what to do instead.
 */
int url__s3_site_key_ok(const char *tmpl, const char *user, const char *bucket,
			const char *key, char *err, size_t errlen)
{
	char want[XFER_PATH_MAX], wb[256];
	const char *b, *slash, *p;
	size_t o = 0, bl, wl;

	if (!tmpl) {
		snprintf(err, errlen, "the site's S3 keys are not for users' own transfers "
			 "(S3SitePrefix is not set)");
		return 0;
	}
	/* Expand %u in the key part; conf_keys.c allows no other '%'. */
	b = tmpl + 5;
	slash = strchr(b, '/');
	bl = slash ? (size_t)(slash - b) : 0;
	if (!slash || bl >= sizeof(wb)) {
		snprintf(err, errlen, "S3SitePrefix '%s' is malformed", tmpl);
		return 0;
	}
	memcpy(wb, b, bl);
	wb[bl] = '\0';
	for (p = slash + 1; *p; p++) {
		const char *add = p;
		size_t n = 1;

		if (p[0] == '%' && p[1] == 'u') {
			add = user;
			n = strlen(user);
			p++;
		}
		if (o + n >= sizeof(want)) {
			snprintf(err, errlen, "S3SitePrefix is too long for user %s", user);
			return 0;
		}
		memcpy(want + o, add, n);
		o += n;
	}
	want[o] = '\0';
	wl = o;
	for (p = key; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == '\\' || *p == '%')
			goto outside;
	for (p = key; *p;) {
		const char *s = p;
		size_t n;

		while (*p && *p != '/')
			p++;
		n = (size_t)(p - s);
		if ((n == 0 && *p) || (n == 1 && s[0] == '.') || (n == 2 && s[0] == '.' && s[1] == '.'))
			goto outside;
		if (*p)
			p++;
	}
	if (strcmp(bucket, wb) == 0 && strncmp(key, want, wl) == 0)
		return 1;
outside:
	snprintf(err, errlen, "s3://%s/%s is outside s3://%s/%s, the one place where the site's "
		 "S3 keys may be used for you (no '.', '..' or empty components, nothing "
		 "encoded twice)", bucket, key, wb, want);
	return 0;
}

/* s3: bucket and key from the URL, the endpoint, and the credentials to sign with. */
static int _setup_s3(struct url__run *r, const char *home, char *err, size_t errlen)
{
	const struct conf *conf = r->ctx->conf;
	const char *b = r->url + 5, *slash = strchr(b, '/');
	char path[PATH_MAX];
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
	/* A query names another operation on the bucket (?acl, ?policy, ?delete...). */
	if (strpbrk(r->s3_key, "?#")) {
		snprintf(err, errlen, "'%c' in an S3 key is refused: s3://BUCKET/KEY names an "
			 "object or a prefix, never a query (such as ?acl or ?policy) or a "
			 "fragment", *strpbrk(r->s3_key, "?#"));
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
	if (strpbrk(r->s3_key_dec, "?#")) {
		snprintf(err, errlen, "'%c' (percent-encoded) in an S3 key is refused: name "
			 "objects without '?' or '#'", *strpbrk(r->s3_key_dec, "?#"));
		return -1;
	}
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
	/* The user's own keys first (read as the user), else the site's below the user's prefix. */
	if (snprintf(path, sizeof(path), "%s/.config/stagehand/s3.conf", home) >=
	    (int)sizeof(path))
		path[0] = '\0';
	if (path[0] && access(path, F_OK) == 0) {
		if (_read_creds(path, getuid(), &r->creds, err, errlen) < 0)
			return -1;
	} else if (_site.have) {
		char why[XFER_TEXT_MAX];

		if (!url__s3_site_key_ok(conf ? conf->s3_site_prefix : NULL, r->user,
					 r->s3_bucket, r->s3_key_dec, why, sizeof(why))) {
			snprintf(err, errlen, "S3 credentials refused: %s. You have no keys of "
				 "your own: to use this bucket and key, create %s (mode 0600) "
				 "with access_key_id = ... and secret_access_key = ... (keys "
				 "from your S3 service's administrators)", why, path);
			return -1;
		}
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
	return 0;
}

static int _setup(struct url__run *r, char *err, size_t errlen)
{
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
	if (r->proto == P_SFTP && _setup_sftp(r, sep, pwp->pw_dir, err, errlen) < 0)
		return -1;
	if (r->proto == P_S3 && _setup_s3(r, pwp->pw_dir, err, errlen) < 0)
		return -1;
	return 0;
}

/* ---- the endpoint: what both sides share ---- */

int url__why(struct xfer_stream *out, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(out->why, sizeof(out->why), fmt, ap);
	va_end(ap);
	return -1;
}

int url__ep_add_dir(struct xfer_ep *ep, const char *rel)
{
	char *d = strdup(rel);

	if (!d || xfer_grow((void **)&ep->dirs, ep->ndirs, &ep->capdirs, sizeof(*ep->dirs),
			    16) < 0) {
		free(d);
		return -1;
	}
	ep->dirs[ep->ndirs] = d;
	return (int)ep->ndirs++;
}

int url__ep_new(struct xfer_ctx *ctx, const char *url, struct xfer_ep **epp, char *msg,
		size_t msglen)
{
	struct xfer_ep *ep = calloc(1, sizeof(*ep));

	*epp = ep;
	if (!ep || !(ep->esc = curl_easy_init()) || url__ep_add_dir(ep, "") < 0) {
		snprintf(msg, msglen, "out of memory");
		return XFER_RETRYABLE;
	}
	ep->mdir = -1;
	ep->r.ctx = ctx;
	ep->r.url = url;
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		snprintf(msg, msglen, "out of memory");
		return XFER_RETRYABLE;
	}
	return _setup(&ep->r, msg, msglen) < 0 ? XFER_FINAL : XFER_OK;
}

void url__ep_close(struct xfer_ep *ep, struct xfer_root *root)
{
	root->dir = -1;
	for (size_t i = 0; i < ep->ndirs; i++)
		free(ep->dirs[i]);
	free(ep->dirs);
	for (size_t i = 0; i < ep->r.nents; i++)
		free(ep->r.ents[i].rel);
	free(ep->r.ents);
	free(ep->r.buf);
	curl_easy_cleanup(ep->esc);
	memset(&ep->r.creds, 0, sizeof(ep->r.creds));
	free(ep);
}

int url__ep_url(struct xfer_ep *ep, int dir, const char *name, char *rel, size_t rellen,
		char *url, size_t urllen)
{
	if (dir < 0 || (size_t)dir >= ep->ndirs ||
	    snprintf(rel, rellen, "%s%s", ep->dirs[dir], name) >= (int)rellen)
		return -1;
	if (ep->file_url[0])
		return snprintf(url, urllen, "%s", ep->file_url) >= (int)urllen ? -1 : 0;
	return url__remote_url(&ep->r, ep->esc, rel, url, urllen);
}

/*
 * What the server says dir/name is now (HEAD, asked once per file: fetch
 * uses the answer). A size it does not state is 0, an mtime it does not
 * state is the time of asking, so that no earlier attempt matches it. The
 * server's own words go to the log; the driver gets an errno.
 */
int url__ep_stat(struct xfer_ep *ep, int dir, const char *name, struct stat *st)
{
	char rel[XFER_PATH_MAX + 1], url[XFER_PATH_MAX * 2], why[XFER_TEXT_MAX];
	struct url__meta *m = &ep->m;
	int final;

	if (ep->mdir != dir || strcmp(ep->mname, name) != 0) {
		ep->mdir = -1;
		if (url__ep_url(ep, dir, name, rel, sizeof(rel), url, sizeof(url)) < 0 ||
		    snprintf(ep->mname, sizeof(ep->mname), "%s", name) >= (int)sizeof(ep->mname))
			return ENAMETOOLONG;
		if (url__stat_remote(&ep->r, url, m, &final, why, sizeof(why)) < 0) {
			if (!url__stopped(&ep->r))
				xfer_logf(ep->r.ctx, LOG_LVL_WARN, "request %lld: cannot stat '%s': %s",
					  (long long)ep->r.ctx->request_id, rel, why);
			/* The driver's message names the errno: no such file, refused, or else. */
			return url__stopped(&ep->r) ? EINTR : strstr(why, "HTTP 404") ? ENOENT :
			       final ? EACCES : EIO;
		}
		ep->mdir = dir;
	}
	memset(st, 0, sizeof(*st));
	st->st_mode = S_IFREG | 0644;
	st->st_size = m->size < 0 ? 0 : m->size;
	st->st_mtim.tv_sec = m->mtime >= 0 ? m->mtime : time(NULL);
	st->st_atim = st->st_mtim;
	return 0;
}

static const struct xfer_ep_tree _tree = { .mkdir = url__mkdir, .dir_done = url__dir_done };

static const struct xfer_ep_stream _stream = {
	.fetch = url__fetch, .put = url__put, .prepare = url__prepare,
};

static const char *const _schemes[] = { "http", "https", "s3", "ftp", "ftps", "sftp", NULL };

static const struct xfer_ep_request _request = {
	.open_source = url__open_source, .open_dest = url__open_dest, .close = url__ep_close,
};

const struct xfer_endpoint xfer_ep_url = {
	.name = "url", .schemes = _schemes, .request = &_request,
	.stat = url__ep_stat, .list = url__list,
	.tree = &_tree, .stream = &_stream,
};
