/*
 * xfer_url_get.c - the url endpoint's downloads (stage_in from a URL).
 *
 * Each file is written to a temporary name in its destination directory
 * (opened with O_NOFOLLOW relative to its parent), checked against the
 * server's checksum or size, fsynced, read back and renamed. A partial
 * temporary file is resumed (HTTP Range, FTP REST, SFTP offset) when the
 * server still describes the file as it did when the partial download began
 * (validator kept in an xattr); a stopped download keeps its partial file
 * for the next attempt.
 *
 * Must never: accept a server-supplied name with '..', '/' at its start or
 * control characters (url__safe_rel), or write through a symlink locally.
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

#include "durable.h"
#include "log.h"
#include "xfer_url_int.h"
#include "xfer_util.h"

#define PARTIAL_XATTR "user.stagehand-partial"

/* Where a download goes and how far an earlier attempt got. */
struct _dl {
	const char *url, *name, *rel;
	int ddir, fd;
	const struct url__meta *m;
	char tmp[NAME_MAX + 1];
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
 * The temporary file, and the offset to resume at: a partial file of an
 * earlier attempt is kept only if the server still describes the file as it
 * did then, and it is ours, plain and alone. 0, or -1 after reporting why.
 */
static int _dl_open(struct url__run *r, struct _dl *d)
{
	const struct url__meta *m = d->m;
	char validator[256], old[256];
	struct stat st;
	ssize_t vl;
	int e;

	if (durable_tmpname(d->tmp, sizeof(d->tmp), d->name, r->ctx->request_id) < 0) {
		xfer_failf(&r->t, d->rel, 1, "name too long: '%s'", d->rel);
		return -1;
	}
	if (snprintf(validator, sizeof(validator), "%s|%lld|%lld", m->etag, (long long)m->size,
		     (long long)m->mtime) >= (int)sizeof(validator))
		validator[0] = '\0';
	d->fd = openat(d->ddir, d->tmp, O_RDWR | O_CREAT | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC, 0600);
	if (d->fd < 0) {
		e = errno;
		xfer_failf(&r->t, d->rel, e == EACCES || e == ELOOP || e == ENOENT || e == EPERM,
			   "cannot create a temporary file for '%s': %s", d->rel, strerror(e));
		return -1;
	}
	if (fstat(d->fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != getuid() ||
	    st.st_nlink != 1) {
		close(d->fd);
		xfer_failf(&r->t, d->rel, 1, "temporary file %s for '%s' is not a plain file of "
			   "yours: remove it", d->tmp, d->rel);
		return -1;
	}
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
						   0) < 0 && errno != ENOTSUP))) {
		e = errno;
		close(d->fd);
		unlinkat(d->ddir, d->tmp, 0);
		xfer_failf(&r->t, d->rel, 0, "cannot prepare temporary file for '%s': %s", d->rel,
			   strerror(e));
		return -1;
	}
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
 * The transfer itself, into s (resuming at d->off). 0; or -1 after
 * reporting the failure, or silently when stopped (the partial file is
 * kept for the next attempt when it can resume).
 */
static int _dl_body(struct url__run *r, struct _dl *d, struct _sink *s)
{
	char why[XFER_TEXT_MAX];
	struct curl_slist *hdrs;
	CURL *c;
	CURLcode rc;
	int final = 0, tries = 0, k;

again:
	k = _sink_start(r, d, s);
	if (k > 0) {
		d->off = 0;
		if (ftruncate(d->fd, 0) < 0) {
			/* the write of the download fails and says so */
		}
		k = _sink_start(r, d, s);
	}
	if (k < 0) {
		close(d->fd);
		xfer_failf(&r->t, d->rel, 0, "out of memory");
		return -1;
	}
	if (lseek(d->fd, d->off, SEEK_SET) < 0) {
		int e = errno;

		_sink_abort(s);
		close(d->fd);
		xfer_failf(&r->t, d->rel, 0, "seek in temporary file: %s", strerror(e));
		return -1;
	}
	c = url__easy(r, d->url, &hdrs);
	if (!c) {
		_sink_abort(s);
		close(d->fd);
		xfer_failf(&r->t, d->rel, 0, "out of memory");
		return -1;
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
		close(d->fd);
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
		final = url__describe(r, c, rc, why, sizeof(why));
	else
		snprintf(why, sizeof(why), "cannot truncate the temporary file");
	if (c)
		url__easy_done(c, hdrs);
	close(d->fd);
	if (final)
		unlinkat(d->ddir, d->tmp, 0);
	xfer_failf(&r->t, d->rel, final, "download of '%s' failed: %s", d->rel, why);
	return -1;
}

/*
 * Check what arrived against the strongest thing the server told us: its
 * sha256 or md5, else the size. token gets what was compared ("sha256:…",
 * "md5:…", "size:N"). 0, or -1 after reporting the mismatch.
 */
static int _dl_check(struct url__run *r, struct _dl *d, struct _sink *s, char *cks, char *token)
{
	const struct url__meta *m = d->m;
	char md5[CKSUM_HEX_MAX], sha[CKSUM_HEX_MAX], why[XFER_TEXT_MAX];
	int64_t got = d->off + s->got;

	cksum_final(&s->ck, cks);
	md5[0] = sha[0] = '\0';
	if (s->want_md5)
		cksum_final(&s->md5, md5);
	if (s->want_sha)
		cksum_final(&s->sha, sha);
	why[0] = '\0';
	if (m->size >= 0 && got != m->size)
		snprintf(why, sizeof(why), "size mismatch for '%s': the server announced %lld bytes, "
			 "%lld arrived", d->rel, (long long)m->size, (long long)got);
	else if (m->sha256[0] && strcmp(m->sha256, cksum_hex(sha)) != 0)
		snprintf(why, sizeof(why), "checksum mismatch for '%s': sha256 from the %s is %s, "
			 "the data received has %s", d->rel, m->how, m->sha256, cksum_hex(sha));
	else if (!m->sha256[0] && m->md5[0] && strcmp(m->md5, cksum_hex(md5)) != 0)
		snprintf(why, sizeof(why), "checksum mismatch for '%s': md5 from the %s is %s, "
			 "the data received has %s", d->rel, m->how, m->md5, cksum_hex(md5));
	if (why[0]) {
		close(d->fd);
		unlinkat(d->ddir, d->tmp, 0);
		xfer_failf(&r->t, d->rel, 0, "%s", why);
		return -1;
	}
	if (m->sha256[0])
		snprintf(token, CKSUM_HEX_MAX, "%s", sha);
	else if (m->md5[0])
		snprintf(token, CKSUM_HEX_MAX, "%s", md5);
	else
		snprintf(token, CKSUM_HEX_MAX, "size:%lld", (long long)got);
	return 0;
}

/* Metadata, fsync, read back from the device and compare, rename. 0 or an errno. */
static int _dl_store(struct url__run *r, struct _dl *d, const char *cks)
{
	struct xfer_buf tb = { r->buf, URL_CHUNK };
	char got[CKSUM_HEX_MAX];
	int e = 0;

	fremovexattr(d->fd, PARTIAL_XATTR);
	if (fchmod(d->fd, 0644) < 0)
		e = errno;
	if (!e && d->m->mtime >= 0) {
		struct timespec ts[2] = { { d->m->mtime, 0 }, { d->m->mtime, 0 } };

		if (futimens(d->fd, ts) < 0)
			e = errno;
	}
	if (!e && fsync(d->fd) < 0)
		e = errno;
	if (!e)
		e = xfer_engine_readback(r->ctx, &tb, d->fd, XFER_S_NOPACE, NULL, got);
	if (!e && strcmp(got, cks) != 0)
		e = EIO;
	if (e) {
		close(d->fd);
		if (e != EINTR)
			unlinkat(d->ddir, d->tmp, 0);
		return e;
	}
	return durable_commit(d->ddir, d->tmp, d->name, d->fd, 0);
}

/*
 * Fetch url into ddir/name (rel names it in records). m: what the server
 * said about it. Verification: sha256 or md5 from the server when given,
 * else the size.
 */
static void _fetch(struct url__run *r, const char *url, int ddir, const char *name,
		   const char *rel, const struct url__meta *m)
{
	struct _dl d = { .url = url, .name = name, .rel = rel, .ddir = ddir, .fd = -1, .m = m };
	int64_t mtime_ns = m->mtime >= 0 ? m->mtime * 1000000000LL : -1;
	int64_t started = (int64_t)time(NULL);
	char cks[CKSUM_HEX_MAX], token[CKSUM_HEX_MAX];
	struct _sink s;
	struct stat st;
	int e;

	/* Resume set: verified by an earlier attempt and unchanged on both sides. */
	if (xfer_engine_want(r->ctx, rel, m->size, mtime_ns) == XFER_WANT_KEPT &&
	    fstatat(ddir, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
	    st.st_size == m->size) {
		xfer_tally_add(&r->t, &r->t.kept);
		return;
	}
	xfer_emit(r->ctx, XR_ITEM_START, 0, m->size >= 0 ? m->size : 0, mtime_ns < 0 ? 0 : mtime_ns,
		  0644, NULL, rel, "file");
	if (_dl_open(r, &d) < 0 || _dl_body(r, &d, &s) < 0 || _dl_check(r, &d, &s, cks, token) < 0)
		return;
	e = _dl_store(r, &d, cks);
	if (e) {
		if (e != EINTR)
			xfer_failf(&r->t, rel, 0, "storing '%s' failed: %s", rel,
				   e == EIO ? "the data read back differs from the data received" :
				   strerror(e));
		return;
	}
	/* Both records carry what the verification compared: "sha256:…", "md5:…", "size:N". */
	xfer_emit(r->ctx, XR_ITEM_COPIED, 0, 0, 0, 0, token, rel, NULL);
	xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: '%s' verified by %s (%s)",
		  (long long)r->ctx->request_id, rel,
		  m->sha256[0] || m->md5[0] ? m->how : "size", token);
	xfer_emit(r->ctx, XR_ITEM_DONE, 0, d.off + s.got, started, (int64_t)time(NULL), token, rel,
		  "file");
	xfer_tally_add(&r->t, &r->t.verified);
}

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

/* One remote file: dest names the copy, or an existing directory to put it in. */
static int _get_one(struct url__run *r)
{
	struct xfer_ctx *ctx = r->ctx;
	char msg[XFER_TEXT_MAX], url[XFER_PATH_MAX * 2], base[NAME_MAX + 1], dir[XFER_PATH_MAX];
	const char *leaf = base;
	struct url__meta m;
	struct stat dst;
	int final = 0, droot;

	if (url__url_for(r, r->proto == P_S3 ? r->s3_key : r->url, url, sizeof(url)) < 0)
		return url__finish(r, XFER_FINAL, "URL too long");
	if (url__stat_remote(r, url, &m, &final, msg, sizeof(msg)) < 0) {
		char full[XFER_TEXT_MAX];

		snprintf(full, sizeof(full), "cannot stat %.300s: %.600s", r->url, msg);
		return url__finish(r, final ? XFER_FINAL : XFER_RETRYABLE, full);
	}
	xfer_emit(ctx, XR_TOTALS, 0, 1, m.size >= 0 ? m.size : 0, 0, NULL, NULL, NULL);
	r->t.files = 1;
	if (_leaf_name(r, base, sizeof(base), msg, sizeof(msg)) < 0)
		return url__finish(r, XFER_FINAL, msg);
	if (stat(ctx->dest, &dst) == 0 && S_ISDIR(dst.st_mode)) {
		droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	} else {
		const char *db = strrchr(ctx->dest, '/');

		if (xfer_mkparents(ctx->dest, msg, sizeof(msg)) < 0)
			return url__finish(r, XFER_FINAL, msg);
		snprintf(dir, sizeof(dir), "%.*s", db == ctx->dest ? 1 : (int)(db - ctx->dest),
			 ctx->dest);
		droot = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		leaf = db + 1;
	}
	if (droot < 0) {
		snprintf(msg, sizeof(msg), "cannot open destination directory for %s: %s",
			 ctx->dest, strerror(errno));
		return url__finish(r, XFER_FINAL, msg);
	}
	_fetch(r, url, droot, leaf, leaf, &m);
	close(droot);
	return -1;
}

static int _ent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct url__ent *)a)->rel, ((const struct url__ent *)b)->rel);
}

/* Each listed file: asked about, then fetched below droot. */
static void _get_ents(struct url__run *r, CURL *esc, int droot)
{
	char msg[XFER_TEXT_MAX], url[XFER_PATH_MAX * 2];
	int final = 0;

	for (size_t i = 0; i < r->nents && !url__stopped(r); i++) {
		const char *rel = r->ents[i].rel, *slash = strrchr(rel, '/');
		struct url__meta m;
		int pfd;

		if (url__remote_url(r, esc, rel, url, sizeof(url)) < 0) {
			xfer_failf(&r->t, rel, 1, "URL too long for '%s'", rel);
			continue;
		}
		if (url__stat_remote(r, url, &m, &final, msg, sizeof(msg)) < 0) {
			if (!url__stopped(r))
				xfer_failf(&r->t, rel, final, "cannot stat '%s': %s", rel, msg);
			continue;
		}
		pfd = xfer_open_dir(droot, rel, slash ? (size_t)(slash - rel) : 0, 0755);
		if (pfd < 0) {
			xfer_failf(&r->t, rel, errno == ELOOP || errno == EACCES || errno == ENOTDIR,
				   "cannot create the directory of '%s': %s", rel, strerror(errno));
			continue;
		}
		_fetch(r, url, pfd, slash ? slash + 1 : rel, rel, &m);
		close(pfd);
	}
}

/* A remote tree: listed, then each file fetched. */
static int _get_tree(struct url__run *r)
{
	struct xfer_ctx *ctx = r->ctx;
	char msg[XFER_TEXT_MAX];
	int final = 0, droot, rc;
	CURL *esc;

	if (r->proto == P_S3)
		rc = url__list_s3(r, &final, msg, sizeof(msg));
	else if (r->proto == P_HTTP)
		rc = url__list_dav(r, r->url, "", 0, &final, msg, sizeof(msg));
	else
		rc = url__list_ls(r, r->url, "", 0, &final, msg, sizeof(msg));
	if (rc < 0) {
		char full[XFER_TEXT_MAX];

		snprintf(full, sizeof(full), "cannot list %.300s: %.600s", r->url, msg);
		return url__finish(r, final ? XFER_FINAL : XFER_RETRYABLE, full);
	}
	qsort(r->ents, r->nents, sizeof(*r->ents), _ent_cmp);
	r->t.files = (int64_t)r->nents;
	for (size_t i = 0; i < r->nents; i++)
		r->t.bytes += r->ents[i].size > 0 ? r->ents[i].size : 0;
	xfer_emit(ctx, XR_TOTALS, 0, r->t.files, r->t.bytes, r->t.skipped, NULL, NULL, NULL);
	if (xfer_mkparents(ctx->dest, msg, sizeof(msg)) < 0)
		return url__finish(r, XFER_FINAL, msg);
	if (mkdir(ctx->dest, 0755) < 0 && errno != EEXIST) {
		xfer_mkdir_why(ctx->dest, errno, msg, sizeof(msg));
		return url__finish(r, XFER_FINAL, msg);
	}
	droot = open(ctx->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	esc = curl_easy_init();
	if (droot < 0 || !esc) {
		snprintf(msg, sizeof(msg), "cannot open destination directory %s: %s", ctx->dest,
			 strerror(errno));
		if (droot >= 0)
			close(droot);
		curl_easy_cleanup(esc);
		return url__finish(r, XFER_FINAL, msg);
	}
	_get_ents(r, esc, droot);
	curl_easy_cleanup(esc);
	fsync(droot);
	close(droot);
	return -1;
}

int url__stage_in(struct url__run *r)
{
	return r->url[strlen(r->url) - 1] == '/' ? _get_tree(r) : _get_one(r);
}
