/* metrics_http.c - see metrics_http.h. */
#include "config.h"

#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "api.h"
#include "log.h"
#include "metrics.h"
#include "metrics_http.h"

#define METRICS_HTTP_CONNECTIONS 32  /* a few Prometheus servers, curl by hand */
#define METRICS_HTTP_TIMEOUT 10      /* seconds an idle scrape connection is kept */

struct metrics_http {
	struct MHD_Daemon *mhd;
};

static enum MHD_Result _reply(struct MHD_Connection *c, unsigned status, char *text,
			      const char *ctype)
{
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text,
								 MHD_RESPMEM_MUST_FREE);
	enum MHD_Result ret;

	if (!r) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
		MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
	ret = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return ret;
}

static enum MHD_Result _handle(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload,
			       size_t *upload_size, void **con_cls)
{
	struct daemon *d = cls;
	char *text;

	(void)version;
	(void)upload;
	if (!*con_cls) {	/* headers only so far: answer once the request is complete */
		*con_cls = c;
		return MHD_YES;
	}
	if (*upload_size) {	/* a body is never wanted here: drop it */
		*upload_size = 0;
		return MHD_YES;
	}
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
		return _reply(c, MHD_HTTP_METHOD_NOT_ALLOWED,
			      strdup("read-only: use GET /metrics\n"), "text/plain; charset=utf-8");
	if (strcmp(url, "/metrics") != 0)
		return _reply(c, MHD_HTTP_NOT_FOUND, strdup("only /metrics is served here\n"),
			      "text/plain; charset=utf-8");
	text = api_metrics_render(d);
	if (!text)
		return _reply(c, MHD_HTTP_INTERNAL_SERVER_ERROR, strdup("out of memory\n"),
			      "text/plain; charset=utf-8");
	return _reply(c, MHD_HTTP_OK, text, "text/plain; version=0.0.4; charset=utf-8");
}

struct metrics_http *metrics_http_start(struct daemon *d, char *err, size_t errlen)
{
	const struct conf *c = d->conf;
	struct metrics_http *m;
	struct addrinfo hints, *ai = NULL;
	char port[8];
	int gai;

	if (!c->metrics_host)
		return NULL;
	m = calloc(1, sizeof(*m));
	if (!m) {
		snprintf(err, errlen, "MetricsAddress: out of memory");
		return NULL;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
	snprintf(port, sizeof(port), "%u", (unsigned)c->metrics_port);
	gai = getaddrinfo(c->metrics_host, port, &hints, &ai);
	if (gai != 0) {
		snprintf(err, errlen, "MetricsAddress %s:%u: getaddrinfo: %s (give a numeric "
			 "address or a name this host resolves)", c->metrics_host,
			 (unsigned)c->metrics_port, gai_strerror(gai));
		free(m);
		return NULL;
	}
	/* MHD_USE_AUTO: epoll, not select(). The API's connections take the low
	   descriptors; select() cannot take one above 1024, and every scrape
	   was refused while the API held some 500 connections. */
	m->mhd = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_USE_ERROR_LOG |
				  (ai->ai_family == AF_INET6 ? MHD_USE_IPv6 : 0),
				  0, NULL, NULL, _handle, d,
				  MHD_OPTION_SOCK_ADDR, ai->ai_addr,
				  MHD_OPTION_CONNECTION_LIMIT, (unsigned)METRICS_HTTP_CONNECTIONS,
				  MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)METRICS_HTTP_TIMEOUT,
				  MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)(64 * 1024),
				  MHD_OPTION_END);
	freeaddrinfo(ai);
	if (!m->mhd) {
		snprintf(err, errlen, "MetricsAddress %s:%u: cannot listen (address in use, or "
			 "not an address of this host?)", c->metrics_host,
			 (unsigned)c->metrics_port);
		free(m);
		return NULL;
	}
	log_info("metrics: plain HTTP /metrics on %s:%u (read-only, no authentication)",
		 c->metrics_host, (unsigned)c->metrics_port);
	return m;
}

void metrics_http_stop(struct metrics_http *m)
{
	if (!m)
		return;
	MHD_stop_daemon(m->mhd);
	free(m);
}
