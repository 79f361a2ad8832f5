/* http.c - see http.h. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

/* A daemon answer bigger than this is not something the CLI can show. */
#define HTTP_MAX_RESPONSE (64u * 1024 * 1024)
/* One call, connect to last byte: a long queue listing fits easily. */
#define HTTP_TIMEOUT_MS 60000

struct http {
	struct dclient_target t;
};

struct http *http_open(const struct dclient_target *t)
{
	struct http *h = calloc(1, sizeof(*h));

	if (h)
		h->t = *t;
	return h;
}

void http_close(struct http *h)
{
	free(h);
}

const char *http_target(const struct http *h)
{
	return h->t.label;
}

const struct dclient_target *http_dclient_target(const struct http *h)
{
	return &h->t;
}

/* One exchange; the body (NUL-terminated, possibly empty) goes to *out. */
static int _perform(struct http *h, const char *method, const char *path,
		    const char *payload, long *status, char **out,
		    char *err, size_t errlen)
{
	struct dclient_resp r;

	if (dclient_request(&h->t, method, path, payload, HTTP_TIMEOUT_MS, HTTP_MAX_RESPONSE,
			    &r, err, errlen) < 0)
		return -1;
	*status = r.status;
	*out = r.body;	/* NUL-terminated, owned by the caller now */
	return 0;
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
