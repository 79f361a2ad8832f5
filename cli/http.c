/* http.c - see http.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <curl/curl.h>
#include <munge.h>

#include "http.h"

/* A daemon answer bigger than this is not something the CLI can show. */
#define HTTP_MAX_RESPONSE (64u * 1024 * 1024)
#define HTTP_CONNECT_TIMEOUT_S 5L
#define HTTP_TIMEOUT_S 60L

struct http {
	CURL *curl;
	char *socket_path;	/* UNIX socket, or NULL for TCP */
	char *server;		/* "host:port" for TCP, or NULL */
	char target[512];	/* what messages call the daemon */
};

struct _buf {
	char *data;
	size_t len;
	int overflow;
};

static int _curl_ready;

static size_t _write_cb(char *ptr, size_t size, size_t nmemb, void *userdata)
{
	struct _buf *b = userdata;
	size_t n = size * nmemb;
	char *p;

	if (b->len + n + 1 > HTTP_MAX_RESPONSE) {
		b->overflow = 1;
		return 0;
	}
	p = realloc(b->data, b->len + n + 1);
	if (!p)
		return 0;
	b->data = p;
	memcpy(b->data + b->len, ptr, n);
	b->len += n;
	b->data[b->len] = '\0';
	return n;
}

struct http *http_open(const char *socket_path, const char *server,
		       char *err, size_t errlen)
{
	struct http *h;
	int n;

	if ((socket_path == NULL) == (server == NULL)) {
		snprintf(err, errlen, "internal error: give either a socket path or a server");
		return NULL;
	}
	if (socket_path && strlen(socket_path) >= sizeof(((struct sockaddr_un *)0)->sun_path)) {
		snprintf(err, errlen, "socket path '%s' is too long for a UNIX socket (max %zu bytes)",
			 socket_path, sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
		return NULL;
	}
	if (server && (!strchr(server, ':') || strchr(server, '/'))) {
		snprintf(err, errlen, "bad server '%s': expected HOST:PORT, e.g. mover1:6820", server);
		return NULL;
	}
	if (!_curl_ready) {
		if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
			snprintf(err, errlen, "cannot initialize libcurl");
			return NULL;
		}
		_curl_ready = 1;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	h->curl = curl_easy_init();
	h->socket_path = socket_path ? strdup(socket_path) : NULL;
	h->server = server ? strdup(server) : NULL;
	if (!h->curl || (socket_path && !h->socket_path) || (server && !h->server)) {
		snprintf(err, errlen, "out of memory");
		http_close(h);
		return NULL;
	}
	n = snprintf(h->target, sizeof(h->target), "%s", socket_path ? socket_path : server);
	if (n < 0 || (size_t)n >= sizeof(h->target)) {
		snprintf(err, errlen, "daemon address is too long");
		http_close(h);
		return NULL;
	}
	return h;
}

void http_close(struct http *h)
{
	if (!h)
		return;
	if (h->curl)
		curl_easy_cleanup(h->curl);
	free(h->socket_path);
	free(h->server);
	free(h);
}

const char *http_target(const struct http *h)
{
	return h->target;
}

/*
 * libcurl reports "couldn't connect" without the reason; connect() once
 * ourselves to learn whether the socket is missing, refused or forbidden.
 * Returns the errno of a failed connect, 0 if it connected.
 */
static int _probe_unix(const char *path)
{
	struct sockaddr_un sa;
	int fd, rc = 0;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, strlen(path) + 1);	/* length checked in http_open */
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		rc = errno;
	close(fd);
	return rc;
}

static void _transport_error(struct http *h, CURLcode rc, const char *detail,
			     char *err, size_t errlen)
{
	const char *why = detail && *detail ? detail : curl_easy_strerror(rc);

	if (h->socket_path && (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST)) {
		int e = _probe_unix(h->socket_path);

		if (e)
			why = strerror(e);
	}
	if (rc == CURLE_COULDNT_CONNECT || rc == CURLE_COULDNT_RESOLVE_HOST ||
	    rc == CURLE_OPERATION_TIMEDOUT)
		snprintf(err, errlen,
			 "cannot reach stagehandd at %s: %s (is the daemon running? systemctl status stagehandd)",
			 h->target, why);
	else
		snprintf(err, errlen, "talking to stagehandd at %s failed: %s", h->target, why);
}

/*
 * Perform one exchange; the body (NUL-terminated, possibly empty) is
 * returned in *out for the caller to free.
 */
static int _perform(struct http *h, const char *method, const char *path,
		    const char *payload, long *status, char **out,
		    char *err, size_t errlen)
{
	char url[1024], errbuf[CURL_ERROR_SIZE], hdr[1024];
	struct curl_slist *headers = NULL, *tmp;
	struct _buf b = { NULL, 0, 0 };
	char *cred = NULL;
	CURLcode rc;
	int n, ret = -1;

	n = snprintf(url, sizeof(url), "http://%s%s",
		     h->socket_path ? "localhost" : h->server, path);
	if (n < 0 || (size_t)n >= sizeof(url)) {
		snprintf(err, errlen, "request path too long: %.64s...", path);
		return -1;
	}
	curl_easy_reset(h->curl);
	errbuf[0] = '\0';
	curl_easy_setopt(h->curl, CURLOPT_URL, url);
	curl_easy_setopt(h->curl, CURLOPT_ERRORBUFFER, errbuf);
	curl_easy_setopt(h->curl, CURLOPT_NOSIGNAL, 1L);
	curl_easy_setopt(h->curl, CURLOPT_CONNECTTIMEOUT, HTTP_CONNECT_TIMEOUT_S);
	curl_easy_setopt(h->curl, CURLOPT_TIMEOUT, HTTP_TIMEOUT_S);
	curl_easy_setopt(h->curl, CURLOPT_WRITEFUNCTION, _write_cb);
	curl_easy_setopt(h->curl, CURLOPT_WRITEDATA, &b);
	curl_easy_setopt(h->curl, CURLOPT_USERAGENT, "stagehand/" PACKAGE_VERSION);
	if (h->socket_path)
		curl_easy_setopt(h->curl, CURLOPT_UNIX_SOCKET_PATH, h->socket_path);

	if (h->server) {
		munge_err_t merr = munge_encode(&cred, NULL, NULL, 0);

		if (merr != EMUNGE_SUCCESS) {
			snprintf(err, errlen,
				 "cannot create a MUNGE credential for %s: %s (is munged running on this host?)",
				 h->target, munge_strerror(merr));
			goto out;
		}
		n = snprintf(hdr, sizeof(hdr), HTTP_MUNGE_HEADER ": %s", cred);
		if (n < 0 || (size_t)n >= sizeof(hdr)) {
			snprintf(err, errlen, "MUNGE credential unexpectedly long (%zu bytes)", strlen(cred));
			goto out;
		}
		if (!(tmp = curl_slist_append(headers, hdr)))
			goto oom;
		headers = tmp;
	}
	if (!(tmp = curl_slist_append(headers, "Accept: application/json")))
		goto oom;
	headers = tmp;
	if (!strcmp(method, "POST")) {
		if (!(tmp = curl_slist_append(headers, "Content-Type: application/json")))
			goto oom;
		headers = tmp;
		/* libcurl's default "Expect: 100-continue" only adds a round trip. */
		if (!(tmp = curl_slist_append(headers, "Expect:")))
			goto oom;
		headers = tmp;
		curl_easy_setopt(h->curl, CURLOPT_POST, 1L);
		curl_easy_setopt(h->curl, CURLOPT_POSTFIELDS, payload ? payload : "");
		curl_easy_setopt(h->curl, CURLOPT_POSTFIELDSIZE, (long)(payload ? strlen(payload) : 0));
	} else if (strcmp(method, "GET")) {
		curl_easy_setopt(h->curl, CURLOPT_CUSTOMREQUEST, method);
	}
	curl_easy_setopt(h->curl, CURLOPT_HTTPHEADER, headers);

	rc = curl_easy_perform(h->curl);
	if (rc != CURLE_OK) {
		if (b.overflow)
			snprintf(err, errlen, "stagehandd at %s sent more than %u MiB; refusing it",
				 h->target, HTTP_MAX_RESPONSE >> 20);
		else
			_transport_error(h, rc, errbuf, err, errlen);
		goto out;
	}
	curl_easy_getinfo(h->curl, CURLINFO_RESPONSE_CODE, status);
	if (!b.data && !(b.data = strdup("")))
		goto oom;
	*out = b.data;
	b.data = NULL;
	ret = 0;
	goto out;
oom:
	snprintf(err, errlen, "out of memory");
out:
	curl_slist_free_all(headers);
	free(cred);
	free(b.data);
	return ret;
}

int http_call(struct http *h, const char *method, const char *path,
	      json_t *body, long *status, json_t **resp, char **raw,
	      char *err, size_t errlen)
{
	char *payload = NULL, *text = NULL;
	json_error_t jerr;
	int rc;

	*resp = NULL;
	if (raw)
		*raw = NULL;
	if (body && !(payload = json_dumps(body, JSON_COMPACT))) {
		snprintf(err, errlen, "cannot encode the request as JSON");
		return -1;
	}
	rc = _perform(h, method, path, payload, status, &text, err, errlen);
	free(payload);
	if (rc < 0)
		return -1;
	if (*text)
		*resp = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (!*resp && raw) {
		*raw = text;
		text = NULL;
	}
	free(text);
	return 0;
}

int http_get_text(struct http *h, const char *path, long *status,
		  char **text, char *err, size_t errlen)
{
	return _perform(h, "GET", path, NULL, status, text, err, errlen);
}
