/*
 * http.h - the CLI's calls to stagehandd: JSON in, JSON out, over the one
 * daemon client (common/dclient.h: the UNIX socket, identity from the
 * kernel, or TCP with a MUNGE credential in the X-Stagehand-Munge header).
 *
 * Owns: JSON encoding and decoding around dclient_request, the CLI's
 * time and size limits, and turning transport failures into messages a
 * user can act on. Must never: print, exit, or put anything
 * identity-related in a body (the daemon ignores body uids; identity is the
 * socket peer or the MUNGE credential).
 */
#ifndef STAGEHAND_CLI_HTTP_H
#define STAGEHAND_CLI_HTTP_H

#include <jansson.h>

#include "dclient.h"

struct http;

/*
 * A context for the daemon at t (copied). Nothing is connected yet: every
 * call is one connection. Returns a new context the caller frees with
 * http_close(), or NULL when out of memory.
 */
struct http *http_open(const struct dclient_target *t);
void http_close(struct http *h);

/* Where this context talks to, for messages. Borrowed; lives as long as h. */
const char *http_target(const struct http *h);

/* The daemon h talks to, for callers that use dclient directly (the
 * job-end spool). Borrowed; lives as long as h. */
const struct dclient_target *http_dclient_target(const struct http *h);

/* The daemon's answer to http_call. */
struct http_reply {
	long status;	/* the HTTP status */
	json_t *json;	/* new: the decoded JSON body; NULL when empty or not JSON */
	char *raw;	/* new: the body's text when json is NULL (free it); else NULL */
};

/*
 * One request. method is "GET", "POST" or "DELETE"; path starts with "/"
 * (e.g. "/v1/health"); body may be NULL (borrowed, serialized as JSON).
 *
 * Returns 0 when the daemon answered, with *out filled (the caller owns
 * out->json and out->raw). Returns -1 when the daemon could not be reached
 * or the exchange broke, with err saying where and what to do (*out empty).
 */
int http_call(struct http *h, const char *method, const char *path, json_t *body,
	      struct http_reply *out, char *err, size_t errlen);

/*
 * Fetch a path as plain text (for /metrics). Returns 0 with *text a
 * malloc'd NUL-terminated string the caller frees, -1 with err filled.
 */
int http_get_text(struct http *h, const char *path, long *status,
		  char **text, char *err, size_t errlen);

#endif /* STAGEHAND_CLI_HTTP_H */
