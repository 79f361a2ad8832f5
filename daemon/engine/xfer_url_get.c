/*
 * xfer_url_get.c - the url endpoint as a source (stage_in from a URL),
 * driven by the engine (xfer_pipeline.c): the listing of a remote tree
 * handed to the walk callbacks, and the download of one file into the
 * destination's temporary file.
 *
 * A download is checked against the server's checksum or size here; the
 * driver then makes the file durable, reads it back and renames it. A
 * partial temporary file is resumed (HTTP Range, FTP REST, SFTP offset)
 * when the server still describes the file as it did when the partial
 * download began (its validator kept in an xattr of the temporary file); a
 * stopped download keeps its partial file for the next attempt.
 *
 * Must never: accept a server-supplied name with '..', '/' at its start or
 * control characters (url__safe_rel, applied by every listing).
 */
#include "config.h"

#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "xfer_url_int.h"
#include "xfer_util.h"

#define PARTIAL_XATTR "user.stagehand-partial"

/* A download: where it goes and how far an earlier attempt got. */
struct _dl {
	const char *url, *rel;
	int fd;                      /* the destination's temporary file (the driver's) */
	const struct url__meta *m;
	int64_t off;                 /* bytes kept from a partial file */
};

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
	s->werr = xfer_engine_write(s->r->ctx, s->fd, b, n, -1);
	if (s->werr)
		return 0;
	_sink_update(s, b, n);
	s->got += (int64_t)n;
	return n;
}

/*
 * The offset to resume at: what an earlier attempt left in the temporary
 * file is kept only if the server still describes the file as it did then.
 * 0, or -1 with out->why.
 */
static int _dl_resume_at(struct _dl *d, struct xfer_stream *out)
{
	const struct url__meta *m = d->m;
	char validator[256], old[256];
	struct stat st;
	ssize_t vl;

	if (snprintf(validator, sizeof(validator), "%s|%lld|%lld", m->etag, (long long)m->size,
		     (long long)m->mtime) >= (int)sizeof(validator))
		validator[0] = '\0';
	if (fstat(d->fd, &st) < 0)
		return url__why(out, "cannot stat the temporary file for '%s': %s", d->rel,
				strerror(errno));
	vl = fgetxattr(d->fd, PARTIAL_XATTR, old, sizeof(old) - 1);
	if (vl > 0)
		old[vl] = '\0';
	/* http(s)/s3: Range, ftp: REST, sftp: offset; all served here can resume. */
	d->off = 0;
	if (st.st_size > 0 && vl > 0 && validator[0] && strcmp(old, validator) == 0 &&
	    (m->size < 0 || st.st_size < m->size))
		d->off = st.st_size;
	if (!d->off && (ftruncate(d->fd, 0) < 0 ||
			(validator[0] && fsetxattr(d->fd, PARTIAL_XATTR, validator, strlen(validator),
						   0) < 0 && errno != ENOTSUP)))
		return url__why(out, "cannot prepare temporary file for '%s': %s", d->rel,
				strerror(errno));
	return 0;
}

/*
 * Start the sink's digests; the bytes of a partial file count towards every
 * checksum. 1 when the partial file cannot be read (start again at 0),
 * 0, or -1 when out of memory.
 */
static int _sink_start(struct url__run *r, struct _dl *d, struct _sink *s)
{
	int64_t at = 0;

	memset(s, 0, sizeof(*s));
	s->r = r;
	s->fd = d->fd;
	s->want_sha = d->m->sha256[0] != '\0';
	s->want_md5 = !s->want_sha && d->m->md5[0];
	if (cksum_init(&s->ck, r->ctx->algo) < 0 ||
	    (s->want_sha && cksum_init(&s->sha, CKSUM_SHA256) < 0) ||
	    (s->want_md5 && cksum_init(&s->md5, CKSUM_MD5) < 0)) {
		_sink_abort(s);
		return -1;
	}
	while (at < d->off) {
		ssize_t n = pread(d->fd, r->buf, (size_t)(d->off - at) < URL_CHUNK ?
				  (size_t)(d->off - at) : URL_CHUNK, at);

		if (n <= 0)
			break;
		_sink_update(s, r->buf, (size_t)n);
		at += n;
	}
	if (at != d->off) {
		_sink_abort(s);
		return 1;
	}
	if (d->off > 0)
		xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: resuming '%s' at byte %lld of %lld "
			  "(%s)", (long long)r->ctx->request_id, d->rel, (long long)d->off,
			  (long long)d->m->size, r->proto == P_FTP ? "FTP REST" :
			  r->proto == P_SFTP ? "SFTP offset" : "HTTP Range");
	return 0;
}

/*
 * The transfer itself, into s (resuming at d->off). 0; or -1 with out->why
 * (out->keep: the partial file is worth resuming; stopped: always).
 */
static int _dl_body(struct url__run *r, struct _dl *d, struct _sink *s, struct xfer_stream *out)
{
	char why[XFER_TEXT_MAX];
	struct curl_slist *hdrs;
	CURL *c;
	CURLcode rc;
	int tries = 0, k;

	out->keep = 1;
again:
	k = _sink_start(r, d, s);
	if (k > 0) {
		d->off = 0;
		if (ftruncate(d->fd, 0) < 0) {
			/* the write of the download fails and says so */
		}
		k = _sink_start(r, d, s);
	}
	if (k < 0)
		return url__why(out, "out of memory");
	if (lseek(d->fd, d->off, SEEK_SET) < 0) {
		_sink_abort(s);
		return url__why(out, "seek in temporary file: %s", strerror(errno));
	}
	c = url__easy(r, d->url, &hdrs);
	if (!c) {
		_sink_abort(s);
		return url__why(out, "out of memory");
	}
	curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, _write);
	curl_easy_setopt(c, CURLOPT_WRITEDATA, s);
	if (d->off > 0)
		curl_easy_setopt(c, CURLOPT_RESUME_FROM_LARGE, (curl_off_t)d->off);
	rc = curl_easy_perform(c);
	if (rc == CURLE_OK) {
		url__easy_done(c, hdrs);
		return 0;
	}
	_sink_abort(s);
	if (url__stopped(r)) {
		url__easy_done(c, hdrs);
		return -1;
	}
	if (d->off > 0 && tries++ == 0 && (rc == CURLE_RANGE_ERROR ||
					   rc == CURLE_BAD_DOWNLOAD_RESUME)) {
		xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: '%s': the server cannot resume; "
			  "starting again", (long long)r->ctx->request_id, d->rel);
		url__easy_done(c, hdrs);
		d->off = 0;
		if (ftruncate(d->fd, 0) == 0)
			goto again;
		c = NULL;
	}
	if (s->werr)
		snprintf(why, sizeof(why), "writing the temporary file: %s", strerror(s->werr));
	else if (c)
		out->final = url__describe(r, c, rc, why, sizeof(why));
	else
		snprintf(why, sizeof(why), "cannot truncate the temporary file");
	if (c)
		url__easy_done(c, hdrs);
	out->keep = !out->final;
	return url__why(out, "download of '%s' failed: %s", d->rel, why);
}

/*
 * Check what arrived against the strongest thing the server told us: its
 * sha256 or md5, else the size. out->token gets what was compared
 * ("sha256:…", "md5:…", "size:N"), out->cks the site's checksum of the
 * data. 0, or -1 with the mismatch in out->why.
 */
static int _dl_check(struct _dl *d, struct _sink *s, struct xfer_stream *out)
{
	const struct url__meta *m = d->m;
	char md5[CKSUM_HEX_MAX], sha[CKSUM_HEX_MAX];

	out->bytes = d->off + s->got;
	out->keep = 0;
	cksum_final(&s->ck, out->cks);
	md5[0] = sha[0] = '\0';
	if (s->want_md5)
		cksum_final(&s->md5, md5);
	if (s->want_sha)
		cksum_final(&s->sha, sha);
	if (m->size >= 0 && out->bytes != m->size)
		return url__why(out, "size mismatch for '%s': the server announced %lld bytes, %lld "
				"arrived", d->rel, (long long)m->size, (long long)out->bytes);
	if (m->sha256[0] && strcmp(m->sha256, cksum_hex(sha)) != 0)
		return url__why(out, "checksum mismatch for '%s': sha256 from the %s is %s, the "
				"data received has %s", d->rel, m->how, m->sha256, cksum_hex(sha));
	if (!m->sha256[0] && m->md5[0] && strcmp(m->md5, cksum_hex(md5)) != 0)
		return url__why(out, "checksum mismatch for '%s': md5 from the %s is %s, the data "
				"received has %s", d->rel, m->how, m->md5, cksum_hex(md5));
	if (m->sha256[0])
		snprintf(out->token, sizeof(out->token), "%s", sha);
	else if (m->md5[0])
		snprintf(out->token, sizeof(out->token), "%s", md5);
	else
		snprintf(out->token, sizeof(out->token), "size:%lld", (long long)out->bytes);
	return 0;
}

/* Download dir/name into fd, checked by the server's word (xfer_endpoint.h). */
int url__fetch(struct xfer_ep *ep, int dir, const char *name, int fd, struct xfer_stream *out)
{
	struct url__run *r = &ep->r;
	char rel[XFER_PATH_MAX + 1], url[XFER_PATH_MAX * 2];
	struct _dl d = { url, rel, fd, &ep->m, 0 };
	struct _sink s;
	struct stat cur;
	int e;

	/* What the server said when the driver asked (stat), or asked now. */
	if ((e = url__ep_stat(ep, dir, name, &cur)) != 0 ||
	    url__ep_url(ep, dir, name, rel, sizeof(rel), url, sizeof(url)) < 0) {
		out->final = e != EIO;
		return url__why(out, "cannot stat '%s': %s", name, strerror(e ? e : ENAMETOOLONG));
	}
	if (_dl_resume_at(&d, out) < 0 || _dl_body(r, &d, &s, out) < 0 || _dl_check(&d, &s, out) < 0)
		return -1;
	fremovexattr(fd, PARTIAL_XATTR);
	xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: '%s' verified by %s (%s)",
		  (long long)r->ctx->request_id, rel,
		  ep->m.sha256[0] || ep->m.md5[0] ? ep->m.how : "size", out->token);
	return 0;
}

/* ---- the remote side of a request ---- */

/* The file's name: the URL's last path component, decoded; 0 or -1 with msg. */
static int _leaf_name(struct url__run *r, char *base, size_t baselen, char *msg, size_t msglen)
{
	const char *ub = strrchr(url__url_path(r->proto == P_S3 ? r->url + 5 : r->url), '/');
	int dec_len;
	CURL *esc;
	char *dec;

	ub = ub ? ub + 1 : "";
	if (strchr(ub, '?')) {
		snprintf(msg, msglen, "URLs with a query string are not supported: name the file "
			 "by its path");
		return -1;
	}
	esc = curl_easy_init();
	dec = esc ? curl_easy_unescape(esc, ub, 0, &dec_len) : NULL;
	if (!dec || snprintf(base, baselen, "%s", dec) >= (int)baselen || !url__safe_rel(base) ||
	    strchr(base, '/')) {
		curl_free(dec);
		curl_easy_cleanup(esc);
		snprintf(msg, msglen, "the URL does not end in a usable file name");
		return -1;
	}
	curl_free(dec);
	curl_easy_cleanup(esc);
	return 0;
}

/* One remote file: what the server says it is (a failure is the request's). */
static int _open_file(struct xfer_ep *ep, struct xfer_root *root, char *msg, size_t msglen)
{
	struct url__run *r = &ep->r;
	char why[XFER_TEXT_MAX];
	int final = 0;

	if (url__url_for(r, r->proto == P_S3 ? r->s3_key : r->url, ep->file_url,
			 sizeof(ep->file_url)) < 0) {
		snprintf(msg, msglen, "URL too long");
		return XFER_FINAL;
	}
	if (url__stat_remote(r, ep->file_url, &ep->m, &final, why, sizeof(why)) < 0) {
		snprintf(msg, msglen, "cannot stat %.300s: %.600s", r->url, why);
		return final ? XFER_FINAL : XFER_RETRYABLE;
	}
	if (_leaf_name(r, root->name, sizeof(root->name), msg, msglen) < 0)
		return XFER_FINAL;
	/* The driver asks again (stat): the answer just given. */
	ep->mdir = root->dir;
	snprintf(ep->mname, sizeof(ep->mname), "%s", root->name);
	return url__ep_stat(ep, root->dir, root->name, &root->st) ? XFER_RETRYABLE : XFER_OK;
}

static int _ent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct url__ent *)a)->rel, ((const struct url__ent *)b)->rel);
}

/*
 * A remote tree: its listing, sorted, so that the entries below any
 * directory are contiguous (the walk, url__list). A directory holds no
 * times of the server's: UTIME_OMIT leaves the local one's.
 */
static int _open_tree(struct xfer_ep *ep, struct xfer_root *root, char *msg, size_t msglen)
{
	struct url__run *r = &ep->r;
	char why[XFER_TEXT_MAX];
	int final = 0, rc;

	if (r->proto == P_S3)
		rc = url__list_s3(r, &final, why, sizeof(why));
	else if (r->proto == P_HTTP)
		rc = url__list_dav(r, r->url, "", 0, &final, why, sizeof(why));
	else
		rc = url__list_ls(r, r->url, "", 0, &final, why, sizeof(why));
	if (rc < 0) {
		snprintf(msg, msglen, "cannot list %.300s: %.600s", r->url, why);
		return final ? XFER_FINAL : XFER_RETRYABLE;
	}
	qsort(r->ents, r->nents, sizeof(*r->ents), _ent_cmp);
	root->st.st_mode = S_IFDIR | 0755;
	root->st.st_atim.tv_nsec = root->st.st_mtim.tv_nsec = UTIME_OMIT;
	root->skipped = r->skipped;
	return XFER_OK;
}

int url__open_source(struct xfer_ctx *ctx, struct xfer_ep **epp, struct xfer_root *root,
		     char *msg, size_t msglen)
{
	int rc = url__ep_new(ctx, ctx->source, epp, msg, msglen);
	struct xfer_ep *ep = *epp;

	if (rc != XFER_OK)
		return rc;
	root->dir = 0;
	ep->r.buf = malloc(URL_CHUNK);
	if (!ep->r.buf) {
		snprintf(msg, msglen, "out of memory");
		return XFER_RETRYABLE;
	}
	if (ep->r.url[strlen(ep->r.url) - 1] == '/')
		return _open_tree(ep, root, msg, msglen);
	return _open_file(ep, root, msg, msglen);
}

/* ---- the walk of a listed tree ---- */

/* The entries below drel ("a/b") from *i on are left out. */
static void _skip_below(const struct url__run *r, const char *drel, size_t *i)
{
	size_t n = strlen(drel);

	while (*i < r->nents && strncmp(r->ents[*i].rel, drel, n) == 0 && r->ents[*i].rel[n] == '/')
		(*i)++;
}

/*
 * A directory of the walk, name in dir (its relpath drel): visited, then
 * entered and walked as the local walk does (xfer_walk_tree), with a
 * directory handle of the endpoint's.
 */
static void _walk(struct xfer_ep *ep, struct xfer_walk *w, struct xfer_walk_dir *dir,
		  size_t *i);

static void _walk_sub(struct xfer_ep *ep, struct xfer_walk *w, struct xfer_walk_dir *dir,
		      const char *name, const char *drel, size_t *i)
{
	struct stat st = { .st_mode = S_IFDIR | 0755 };
	struct xfer_walk_dir sub = { -1, drel, dir->depth + 1, &st, NULL };
	char hrel[XFER_PATH_MAX + 1];

	st.st_atim.tv_nsec = st.st_mtim.tv_nsec = UTIME_OMIT;
	if (w->visit(w, dir, name, drel, &st) != 1) {
		_skip_below(&ep->r, drel, i);
		return;
	}
	if (dir->depth >= XFER_WALK_DEPTH) {
		w->fail(w, drel, ELOOP, "tree deeper than 256 levels at");
		_skip_below(&ep->r, drel, i);
		return;
	}
	snprintf(hrel, sizeof(hrel), "%s/", drel);	/* drel is shorter than XFER_PATH_MAX */
	if ((sub.fd = url__ep_add_dir(ep, hrel)) < 0) {
		w->fail(w, drel, ENOMEM, "cannot open source directory");
		_skip_below(&ep->r, drel, i);
		return;
	}
	if (w->enter && w->enter(w, dir, &sub, name) < 0) {
		_skip_below(&ep->r, drel, i);
		return;
	}
	_walk(ep, w, &sub, i);
	if (w->leave)
		w->leave(w, dir, &sub, name);
}

/* The entries of dir: ents[*i] on, as long as they are below dir->rel. */
static void _walk(struct xfer_ep *ep, struct xfer_walk *w, struct xfer_walk_dir *dir,
		  size_t *i)
{
	const struct url__run *r = &ep->r;
	size_t pl = strlen(dir->rel);

	while (*i < r->nents && !xfer_stopped(w->ctx)) {
		const struct url__ent *e = &r->ents[*i];
		const char *tail, *slash;
		char name[NAME_MAX + 1], drel[XFER_PATH_MAX];
		struct stat st = { .st_mode = S_IFREG | 0644, .st_size = e->size > 0 ? e->size : 0 };

		if (pl && (strncmp(e->rel, dir->rel, pl) != 0 || e->rel[pl] != '/'))
			return;
		tail = e->rel + (pl ? pl + 1 : 0);
		slash = strchr(tail, '/');
		if (!slash) {
			(*i)++;
			w->visit(w, dir, tail, e->rel, &st);
			continue;
		}
		/* url__safe_rel: every component is 1 to NAME_MAX bytes */
		snprintf(name, sizeof(name), "%.*s", (int)(slash - tail), tail);
		snprintf(drel, sizeof(drel), "%.*s", (int)(slash - e->rel), e->rel);
		_walk_sub(ep, w, dir, name, drel, i);
	}
}

/* A listed tree through the walk callbacks (xfer_endpoint.h list), from the root. */
void url__list(struct xfer_ep *ep, struct xfer_walk *w, struct xfer_walk_dir *root)
{
	size_t i = 0;

	/* The handles of an earlier walk are no longer in use: the driver walks once at a time. */
	while (ep->ndirs > 1)
		free(ep->dirs[--ep->ndirs]);
	ep->mdir = -1;
	_walk(ep, w, root, &i);
}
