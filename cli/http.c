/* http.c - see http.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

/*
 * STAGEHAND_DUMP_REQUEST=FILE: write the request, credential included, to a
 * new FILE (never an existing file or a link: root may run this in a
 * directory others can write) instead of sending it. For the tests of
 * bound credentials, which need a real credential that was never used.
 * Always returns -1: nothing was sent, and err says where the bytes went.
 */
static int _dump(struct http *h, const char *file, const char *method, const char *path,
		 const char *payload, char *err, size_t errlen)
{
	char *req = NULL;
	size_t len = 0, off = 0;
	int fd;

	if (dclient_format_request(&h->t, &(struct dclient_call){ .method = method, .path = path,
				     .body = payload }, &req, &len, err, errlen) < 0)
		return -1;
	fd = open(file, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	while (fd >= 0 && off < len) {
		ssize_t w = write(fd, req + off, len - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	free(req);
	if (fd < 0 || off < len || close(fd) < 0) {
		snprintf(err, errlen, "STAGEHAND_DUMP_REQUEST: cannot write %s: %s", file,
			 strerror(errno));
		if (fd >= 0 && off < len)
			close(fd);
		return -1;
	}
	snprintf(err, errlen, "request %s %s for %s written to %s, not sent "
		 "(STAGEHAND_DUMP_REQUEST)", method, path, h->t.label, file);
	return -1;
}

/* One exchange; the body (NUL-terminated, possibly empty) goes to *out. */
static int _perform(struct http *h, const char *method, const char *path,
		    const char *payload, long *status, char **out,
		    char *err, size_t errlen)
{
	struct dclient_resp r;
	const char *dump = getenv("STAGEHAND_DUMP_REQUEST");

	if (dump && *dump)
		return _dump(h, dump, method, path, payload, err, errlen);
	if (dclient_request(&h->t, &(struct dclient_call){ .method = method, .path = path,
			      .body = payload, .timeout_ms = HTTP_TIMEOUT_MS,
			      .max_body = HTTP_MAX_RESPONSE }, &r, err, errlen) < 0)
		return -1;
	*status = r.status;
	*out = r.body;	/* NUL-terminated, owned by the caller now */
	return 0;
}

int http_call(struct http *h, const char *method, const char *path, json_t *body,
	      struct http_reply *out, char *err, size_t errlen)
{
	char *payload = NULL, *text = NULL;
	json_error_t jerr;
	int rc;

	*out = (struct http_reply){ 0 };
	if (body && !(payload = json_dumps(body, JSON_COMPACT))) {
		snprintf(err, errlen, "cannot encode the request as JSON");
		return -1;
	}
	rc = _perform(h, method, path, payload, &out->status, &text, err, errlen);
	free(payload);
	if (rc < 0)
		return -1;
	if (*text)
		out->json = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
	if (!out->json) {
		out->raw = text;
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
