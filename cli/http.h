/*
 * http.h - the CLI's transport to stagehandd: HTTP/1.1 with JSON bodies over
 * the daemon's UNIX socket (identity from the kernel) or over TCP with a
 * MUNGE credential in the X-Stagehand-Munge header.
 *
 * Owns: one libcurl handle per connection context, request/response framing,
 * and turning transport failures into messages a user can act on. Must
 * never: print, exit, or put anything identity-related in a body (the daemon
 * ignores body uids; identity is the socket peer or the MUNGE credential).
 */
#ifndef STAGEHAND_CLI_HTTP_H
#define STAGEHAND_CLI_HTTP_H

#include <jansson.h>

/* The header that carries a MUNGE credential on TCP (docs/api.md). */
#define HTTP_MUNGE_HEADER "X-Stagehand-Munge"

struct http;

/*
 * Open a context for one daemon. Exactly one of socket_path (a UNIX socket)
 * or server ("host:port", TCP + MUNGE) is non-NULL. Nothing is connected
 * yet. Returns a new context the caller frees with http_close(), or NULL
 * with err filled.
 */
struct http *http_open(const char *socket_path, const char *server,
		       char *err, size_t errlen);
void http_close(struct http *h);

/* Where this context talks to, for messages. Borrowed; lives as long as h. */
const char *http_target(const struct http *h);

/*
 * One request. method is "GET" or "POST"; path starts with "/" (e.g.
 * "/v1/health"); body may be NULL (borrowed, serialized as JSON).
 *
 * Returns 0 when the daemon answered: *status holds the HTTP status and
 * *resp a new reference to the decoded JSON body (NULL when the body was
 * empty or not JSON; then *raw, if raw is non-NULL, receives a malloc'd copy
 * of the text for the caller to free). Returns -1 when the daemon could not
 * be reached or the exchange broke, with err saying where and what to do.
 */
int http_call(struct http *h, const char *method, const char *path,
	      json_t *body, long *status, json_t **resp, char **raw,
	      char *err, size_t errlen);

/*
 * Fetch a path as plain text (for /metrics). Returns 0 with *text a
 * malloc'd NUL-terminated string the caller frees, -1 with err filled.
 */
int http_get_text(struct http *h, const char *path, long *status,
		  char **text, char *err, size_t errlen);

#endif /* STAGEHAND_CLI_HTTP_H */
