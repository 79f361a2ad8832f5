/* xfer.c - see xfer.h: endpoint choice, record protocol, excluded directories, resume set. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdpass.h"
#include "log.h"
#include "xfer.h"
#include "xfer_endpoint.h"
#include "xfer_engine.h"

/* Every endpoint, in the order the "unknown backend" message names them. */
static const struct xfer_endpoint *const _endpoints[] = {
	&xfer_ep_local,
	&xfer_ep_null,
	&xfer_ep_bundle,
	&xfer_ep_url,
	NULL,
};

const struct xfer_endpoint *xfer_endpoint_named(const struct xfer_ctx *ctx, char *msg,
					       size_t msglen)
{
	/* The URL side chooses: the source, or the dest of an upload. */
	const char *url = !strstr(ctx->source, "://") && ctx->dest && strstr(ctx->dest, "://") ?
			  ctx->dest : ctx->source;
	const char *sep = strstr(url, "://");

	if (ctx->backend) {
		for (int i = 0; _endpoints[i]; i++)
			if (strcmp(_endpoints[i]->name, ctx->backend) == 0)
				return _endpoints[i];
		snprintf(msg, msglen, "unknown backend '%s' (known: local, null, bundle, url)",
			 ctx->backend);
		return NULL;
	}
	if (sep) {
		size_t n = (size_t)(sep - url);

		for (int i = 0; _endpoints[i]; i++)
			for (const char *const *s = _endpoints[i]->schemes; s && *s; s++)
				if (strlen(*s) == n && strncasecmp(*s, url, n) == 0)
					return _endpoints[i];
		snprintf(msg, msglen, "no backend for scheme '%.*s' in this build: only "
			 "absolute paths can be transferred", (int)(n > 32 ? 32 : n), url);
		return NULL;
	}
	return &xfer_ep_local;
}

/* An endpoint that streams takes one URL side, the other a local path. */
static int _stream_side(const struct xfer_ctx *ctx, const struct xfer_endpoint *ep,
			const struct xfer_endpoint **src, const struct xfer_endpoint **dst,
			char *msg, size_t msglen)
{
	int upload = strcmp(ctx->action, "stage_in") != 0;
	const char *url = upload ? ctx->dest : ctx->source;

	if (strcmp(ctx->action, "label") == 0) {
		snprintf(msg, msglen, "label requests take a local path, not a URL");
		return XFER_FINAL;
	}
	if (!url || !strstr(url, "://") || (upload && strstr(ctx->source, "://")) ||
	    (!upload && ctx->dest && strstr(ctx->dest, "://"))) {
		snprintf(msg, msglen, "the %s backend moves between one URL and one local path",
			 ep->name);
		return XFER_FINAL;
	}
	if (!upload) {
		*src = ep;
		*dst = &xfer_ep_local;
	}
	return XFER_OK;
}

int xfer_endpoints_for(const struct xfer_ctx *ctx, const struct xfer_endpoint **src,
		       const struct xfer_endpoint **dst, char *msg, size_t msglen)
{
	const struct xfer_endpoint *ep = xfer_endpoint_named(ctx, msg, msglen);

	if (!ep)
		return XFER_FINAL;
	*src = &xfer_ep_local;
	*dst = ep;
	if (ep->stream)
		return _stream_side(ctx, ep, src, dst, msg, msglen);
	/* A grouping endpoint stores archives; anything else goes file by file. */
	if (ep->group && strcmp(ctx->action, "archive") != 0)
		*dst = &xfer_ep_local;
	return XFER_OK;
}

int xfer_run(struct xfer_ctx *ctx)
{
	const struct xfer_endpoint *src, *dst;
	char msg[XFER_TEXT_MAX];

	int rc = xfer_endpoints_for(ctx, &src, &dst, msg, sizeof(msg));

	if (rc != XFER_OK)
		return xfer_finish(ctx, rc, msg);
	return xfer_pipeline_run(ctx, src, dst);
}

void xfer_prepare(struct xfer_ctx *ctx)
{
	char msg[XFER_TEXT_MAX];
	const struct xfer_endpoint *ep = xfer_endpoint_named(ctx, msg, sizeof(msg));

	if (ep && ep->stream && ep->stream->prepare)
		ep->stream->prepare(ctx);
}

static int _write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static size_t _pack(char *out, const struct xfer_note *n)
{
	struct xfer_rec r;
	size_t pl = n->path ? strnlen(n->path, XFER_PATH_MAX) : 0;
	size_t tl = n->text ? strnlen(n->text, XFER_TEXT_MAX) : 0;

	memset(&r, 0, sizeof(r));
	r.type = n->type;
	r.code = n->code;
	r.a = n->a;
	r.b = n->b;
	r.c = n->c;
	r.d = n->d;
	r.e = n->e;
	if (n->cks)
		snprintf(r.cks, sizeof(r.cks), "%s", n->cks);
	if (n->cks2)
		snprintf(r.cks2, sizeof(r.cks2), "%s", n->cks2);
	r.path_len = (uint16_t)pl;
	r.text_len = (uint16_t)tl;
	memcpy(out, &r, sizeof(r));
	if (pl)
		memcpy(out + sizeof(r), n->path, pl);
	if (tl)
		memcpy(out + sizeof(r) + pl, n->text, tl);
	return sizeof(r) + pl + tl;
}

/* A worker may copy with several threads: one record goes out whole. */
static pthread_mutex_t _emit_lock = PTHREAD_MUTEX_INITIALIZER;

static int _send(struct xfer_ctx *ctx, const char *buf, size_t n)
{
	int rc;

	pthread_mutex_lock(&_emit_lock);
	rc = _write_all(ctx->chan, buf, n);
	pthread_mutex_unlock(&_emit_lock);
	return rc;
}

int xfer_emit(struct xfer_ctx *ctx, const struct xfer_note *n)
{
	char buf[sizeof(struct xfer_rec) + XFER_PATH_MAX + XFER_TEXT_MAX];

	return _send(ctx, buf, _pack(buf, n));
}

int xfer_emit_label_fd(struct xfer_ctx *ctx, int fd, const char *name, const char *value)
{
	char buf[sizeof(struct xfer_rec) + XFER_PATH_MAX + XFER_TEXT_MAX];
	char cbuf[FDPASS_SPACE];
	struct iovec iov;
	struct msghdr mh;
	size_t n = _pack(buf, &(struct xfer_note){ .type = XR_LABEL, .path = name, .text = value });
	ssize_t w;

	memset(&mh, 0, sizeof(mh));
	iov.iov_base = buf;
	iov.iov_len = n;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	fdpass_attach(&mh, cbuf, fd);
	pthread_mutex_lock(&_emit_lock);
	do
		w = sendmsg(ctx->chan, &mh, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	if (w >= 0 && (size_t)w != n && _write_all(ctx->chan, buf + w, n - (size_t)w) < 0)
		w = -1;
	pthread_mutex_unlock(&_emit_lock);
	return w < 0 ? -1 : 0;
}

void xfer_logf(struct xfer_ctx *ctx, int level, const char *fmt, ...)
{
	char text[XFER_TEXT_MAX];
	va_list ap;

	va_start(ap, fmt);
	log_verrf(text, sizeof(text), fmt, ap);
	va_end(ap);
	xfer_emit(ctx, &(struct xfer_note){ .type = XR_LOG, .code = level, .text = text });
}

ssize_t xfer_parse(const char *buf, size_t len, struct xfer_rec *rec,
		   char path[XFER_PATH_MAX + 1], char text[XFER_TEXT_MAX + 1])
{
	size_t need;

	if (len < sizeof(*rec))
		return 0;
	memcpy(rec, buf, sizeof(*rec));
	if (rec->type < XR_TOTALS || rec->type > XR_MPU || rec->path_len > XFER_PATH_MAX ||
	    rec->text_len > XFER_TEXT_MAX || memchr(rec->cks, '\0', sizeof(rec->cks)) == NULL ||
	    memchr(rec->cks2, '\0', sizeof(rec->cks2)) == NULL)
		return -1;
	need = sizeof(*rec) + rec->path_len + rec->text_len;
	if (len < need)
		return 0;
	memcpy(path, buf + sizeof(*rec), rec->path_len);
	path[rec->path_len] = '\0';
	memcpy(text, buf + sizeof(*rec) + rec->path_len, rec->text_len);
	text[rec->text_len] = '\0';
	if (strlen(path) != rec->path_len || strlen(text) != rec->text_len)
		return -1;	/* embedded NUL */
	return (ssize_t)need;
}

const struct xfer_done_ent *xfer_done_find(const struct xfer_done_ent *d, size_t n,
					   const char *relpath)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(relpath, d[mid].relpath);

		if (c == 0)
			return &d[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

int xfer_shard_skip(const struct xfer_ctx *ctx, const char *relpath)
{
	size_t lo = 0, hi;

	if (!ctx->shard)
		return 0;
	hi = ctx->shard->nfiles;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(relpath, ctx->shard->files[mid]);

		if (c == 0)
			return 0;
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return 1;
}

int xfer_exclude_check(const char *rel, char *err, size_t errlen)
{
	size_t n = rel ? strlen(rel) : 0;

	if (n == 0) {
		snprintf(err, errlen, "an exclude entry is empty");
		return -1;
	}
	if (n >= XFER_PATH_MAX) {
		snprintf(err, errlen, "an exclude entry is %zu bytes; the limit is %d", n,
			 XFER_PATH_MAX - 1);
		return -1;
	}
	if (rel[0] == '/' || rel[n - 1] == '/') {
		snprintf(err, errlen, "exclude entry '%.120s' must be relative to the source, "
			 "without a leading or trailing '/'", rel);
		return -1;
	}
	for (const char *c = rel; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f) {
			snprintf(err, errlen, "an exclude entry contains a control character");
			return -1;
		}
	for (const char *s = rel; s;) {
		const char *e = strchr(s, '/');
		size_t k = e ? (size_t)(e - s) : strlen(s);

		if (k == 0 || (k == 1 && s[0] == '.') || (k == 2 && s[0] == '.' && s[1] == '.')) {
			snprintf(err, errlen, "exclude entry '%.120s' has an empty, '.' or '..' "
				 "component", rel);
			return -1;
		}
		s = e ? e + 1 : NULL;
	}
	return 0;
}

int xfer_excluded(const struct xfer_ctx *ctx, const char *rel)
{
	if (!ctx || !ctx->exclude || !rel)
		return 0;
	for (const char *const *x = ctx->exclude; *x; x++)
		if (strcmp(*x, rel) == 0)
			return 1;
	return 0;
}
