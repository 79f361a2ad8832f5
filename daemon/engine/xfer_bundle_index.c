/*
 * xfer_bundle_index.c - the bundle endpoint's journal and index: what was
 * archived, in which bundle and at which offset, written durably as it goes
 * (the journal) and at the end (the index), and read again to resume. The
 * format is common/bundle.c's; see xfer_bundle.c for the layout.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "durable.h"
#include "log.h"
#include "xfer_bundle_int.h"
#include "xfer_util.h"

#define INDEX_TMP ".index.jsonl.tmp"
#define JOURNAL_MAX (1LL << 32)

int bundle__write(struct xfer_ep *r, int fd, const void *p, size_t n)
{
	int e = xfer_engine_write(r->ctx, fd, p, n, -1);

	if (e) {
		errno = e;
		return -1;
	}
	return 0;
}

int bundle__cksum(struct xfer_ep *r, int fd, char *cks, int64_t *len)
{
	struct xfer_buf tb = { r->buf, BUNDLE_CHUNK };

	return xfer_engine_readback(r->ctx, &tb, fd, 0, len, cks);
}

struct bundle__rec *bundle__push(struct bundle__vec *v)
{
	if (xfer_grow((void **)&v->v, v->n, &v->cap, sizeof(*v->v), 256) < 0)
		return NULL;
	memset(&v->v[v->n], 0, sizeof(v->v[0]));
	return &v->v[v->n++];
}

void bundle__vec_free(struct bundle__vec *v)
{
	for (size_t i = 0; i < v->n; i++) {
		free(v->v[i].rel);
		free(v->v[i].target);
	}
	free(v->v);
	memset(v, 0, sizeof(*v));
}

static int _cmp_rel(const void *a, const void *b)
{
	const struct bundle__rec *x = a, *y = b;
	int c = strcmp(x->rel, y->rel);

	return c ? c : (x->seq > y->seq) - (x->seq < y->seq);
}

void bundle__sort(struct bundle__vec *v)
{
	if (v->n)	/* an empty vector's v->v is NULL, which qsort must not get */
		qsort(v->v, v->n, sizeof(v->v[0]), _cmp_rel);
}

struct bundle__rec *bundle__find(struct bundle__vec *v, const char *rel)
{
	size_t lo = 0, hi = v->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(rel, v->v[mid].rel);

		if (c == 0)
			return &v->v[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

struct bundle__bmeta *bundle__meta(struct xfer_ep *r, int num)
{
	for (size_t i = 0; i < r->nbm; i++)
		if (r->bm[i].num == num)
			return &r->bm[i];
	return NULL;
}

struct bundle__bmeta *bundle__meta_add(struct xfer_ep *r, int num)
{
	struct bundle__bmeta *b = bundle__meta(r, num);

	if (b)
		return b;
	if (xfer_grow((void **)&r->bm, r->nbm, &r->capbm, sizeof(*r->bm), 16) < 0)
		return NULL;
	b = &r->bm[r->nbm++];
	memset(b, 0, sizeof(*b));
	b->num = num;
	return b;
}

/* One index/journal line for a record; new string with '\n', or NULL. */
char *bundle__rec_line(const struct bundle__rec *e)
{
	struct bundle_line l = {
		.type = BUNDLE_L_ENTRY, .path = e->rel, .target = e->target,
		.kind = e->type == E_FILE ? BUNDLE_K_FILE : e->type == E_LINK ? BUNDLE_K_LINK :
			BUNDLE_K_DIR,
		.num = e->bundle, .offset = e->offset, .size = e->size, .mode = e->mode,
		.mtime_ns = e->mtime_ns,
	};

	memcpy(l.cks, e->cks, sizeof(l.cks));
	return bundle_entry_line(&l);
}

char *bundle__bundle_line(const struct bundle__bmeta *b)
{
	return bundle_bundle_line(b->num, b->size, b->cks, b->members);
}

static char *_header_line(struct xfer_ep *r)
{
	struct bundle_header h = {
		.algo = r->ctx->algo, .source = r->ctx->source, .dest = r->ctx->dest,
		.request = r->ctx->request_id, .job = r->ctx->job_id, .uid = r->ctx->uid,
		.created = (int64_t)time(NULL),
	};

	return bundle_header_line(&h);
}

/* Append text to the journal and make it durable. */
int bundle__journal(struct xfer_ep *r, const char *text)
{
	if (r->jfd < 0) {
		r->jfd = openat(r->bdir, JOURNAL_NAME, O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW |
				O_CLOEXEC, 0600);
		if (r->jfd < 0)
			return -1;
		if (lseek(r->jfd, 0, SEEK_END) == 0) {
			char *h = _header_line(r);
			int rc = h ? bundle__write(r, r->jfd, h, strlen(h)) : -1;

			free(h);
			if (rc < 0)
				return -1;
		}
	}
	if (bundle__write(r, r->jfd, text, strlen(text)) < 0 || fsync(r->jfd) < 0)
		return -1;
	return 0;
}

void bundle__load_journal(struct xfer_ep *r)
{
	struct stat st;
	int fd, from_index = 0;
	char *text;
	long line = 0;

	fd = openat(r->bdir, INDEX_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd >= 0) {
		from_index = 1;
	} else {
		fd = openat(r->bdir, JOURNAL_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0)
			return;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > JOURNAL_MAX ||
	    !(text = malloc((size_t)st.st_size + 1))) {
		close(fd);
		return;
	}
	{
		size_t got = 0;

		while (got < (size_t)st.st_size) {
			ssize_t n = read(fd, text + got, (size_t)st.st_size - got);

			if (n <= 0)
				break;
			got += (size_t)n;
		}
		text[got] = '\0';
	}
	close(fd);
	/*
	 * The one strict decoder (common/bundle.c): a line it rejects (a torn
	 * last line, or one edited by hand) is left out, and what it listed is
	 * archived again.
	 */
	for (char *s = text, *e; s && *s; s = e) {
		struct bundle_line l;
		char why[256];

		e = strchr(s, '\n');
		if (e)
			*e++ = '\0';
		line++;
		if (bundle_line_decode(s, strlen(s), &l, why, sizeof(why)) < 0)
			continue;
		if (l.type == BUNDLE_L_BUNDLE) {
			struct bundle__bmeta *b = bundle__meta_add(r, l.num);

			if (b) {
				b->size = l.size;
				b->members = l.members;
				memcpy(b->cks, l.cks, sizeof(b->cks));
			}
		} else if (l.type == BUNDLE_L_ENTRY && l.kind != BUNDLE_K_DIR) {
			struct bundle__rec *x = bundle__push(&r->jr);

			if (x) {
				x->type = l.kind == BUNDLE_K_FILE ? E_FILE : E_LINK;
				x->rel = l.path;	/* moved */
				x->target = l.target;
				l.path = l.target = NULL;
				x->size = l.size;
				x->mode = l.mode;
				x->mtime_ns = l.mtime_ns;
				x->bundle = l.num;
				x->offset = l.offset;
				x->seq = line;
				memcpy(x->cks, l.cks, sizeof(x->cks));
			}
		}
		bundle_line_clear(&l);
	}
	free(text);
	/* From now on the journal is appended to: a finished index becomes it. */
	if (from_index)
		renameat(r->bdir, INDEX_NAME, r->bdir, JOURNAL_NAME);
}

/* Verify each listed bundle; drop records of bundles that are not intact. */
void bundle__check_kept(struct xfer_ep *r)
{
	for (size_t i = 0; i < r->nbm && !xfer_stopped(r->ctx); i++) {
		struct bundle__bmeta *b = &r->bm[i];
		char bn[BUNDLE_NAME_SIZE], got[CKSUM_HEX_MAX];
		int64_t members = 0, len = 0;
		int fd;

		bundle_name(bn, b->num);
		for (size_t k = 0; k < r->jr.n; k++)
			members += r->jr.v[k].bundle == b->num;
		fd = openat(r->bdir, bn, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 || !b->cks[0] || members < b->members) {
			if (fd >= 0)
				close(fd);
			continue;
		}
		if (bundle__cksum(r, fd, got, &len) == 0 && len == b->size && strcmp(got, b->cks) == 0)
			b->kept = 1;
		else
			xfer_logf(r->ctx, LOG_LVL_WARN, "request %lld: %s/%s/%s does not match its "
				  "journal record; its members are packed again",
				  (long long)r->ctx->request_id, r->ctx->dest, BUNDLE_DIR, bn);
		close(fd);
	}
	/* Keep the records in intact bundles (and plain files); later lines win. */
	{
		size_t w = 0;

		for (size_t k = 0; k < r->jr.n; k++) {
			struct bundle__rec *x = &r->jr.v[k];
			struct bundle__bmeta *b = x->bundle ? bundle__meta(r, x->bundle) : NULL;

			if (x->bundle && (!b || !b->kept)) {
				free(x->rel);
				free(x->target);
				continue;
			}
			r->jr.v[w++] = *x;
		}
		r->jr.n = w;
		bundle__sort(&r->jr);
		w = 0;
		for (size_t k = 0; k < r->jr.n; k++) {
			if (k + 1 < r->jr.n && strcmp(r->jr.v[k].rel, r->jr.v[k + 1].rel) == 0) {
				free(r->jr.v[k].rel);
				free(r->jr.v[k].target);
				continue;
			}
			r->jr.v[w++] = r->jr.v[k];
		}
		r->jr.n = w;
	}
}

/* Remove what the bundle folder holds besides kept bundles and the journal. */
void bundle__sweep(struct xfer_ep *r, int only_unreferenced)
{
	int fd = dup(r->bdir);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	struct dirent *de;

	if (!d) {
		if (fd >= 0)
			close(fd);
		return;
	}
	rewinddir(d);
	while ((de = readdir(d))) {
		int num = bundle_name_parse(de->d_name);
		struct bundle__bmeta *b = num ? bundle__meta(r, num) : NULL;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0 ||
		    strcmp(de->d_name, JOURNAL_NAME) == 0 || strcmp(de->d_name, INDEX_NAME) == 0)
			continue;
		if (num > r->next_bundle)
			r->next_bundle = num;
		if (b && b->kept && (!only_unreferenced || b->refs > 0))
			continue;
		if (!num && only_unreferenced)
			continue;
		if (unlinkat(r->bdir, de->d_name, 0) == 0 && num)
			xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: removed %s %s/%s/%s",
				  (long long)r->ctx->request_id, only_unreferenced ? "superseded" :
				  "unverified", r->ctx->dest, BUNDLE_DIR, de->d_name);
	}
	closedir(d);
	for (size_t i = 0; i < r->nbm; i++)
		if (r->bm[i].num > r->next_bundle)
			r->next_bundle = r->bm[i].num;
}

int bundle__write_index(struct xfer_ep *r, char *msg, size_t msglen)
{
	struct bundle__vec out = { 0 };
	char *h = _header_line(r), want[CKSUM_HEX_MAX], got[CKSUM_HEX_MAX];
	struct cksum ck;
	int fd, e = 0;
	int64_t len = 0;

	/* Everything archived now or kept, plus earlier members not superseded. */
	for (size_t i = 0; i < r->src.n; i++)
		if (r->src.v[i].done || r->src.v[i].type == E_DIR) {
			struct bundle__rec *x = bundle__push(&out);

			if (!x) {
				e = ENOMEM;
				break;
			}
			*x = r->src.v[i];
		}
	for (size_t i = 0; !e && i < r->jr.n; i++)
		if (!r->jr.v[i].done && !bundle__find(&r->src, r->jr.v[i].rel)) {
			struct bundle__rec *x = bundle__push(&out);

			if (!x) {
				e = ENOMEM;
				break;
			}
			*x = r->jr.v[i];
		}
	if (e || !h || cksum_init(&ck, r->ctx->algo) < 0) {
		free(out.v);
		free(h);
		snprintf(msg, msglen, "out of memory writing the index");
		return -1;
	}
	bundle__sort(&out);
	for (size_t i = 0; i < out.n; i++) {
		struct bundle__bmeta *b = out.v[i].bundle ? bundle__meta(r, out.v[i].bundle) : NULL;

		if (b)
			b->refs++;
	}
	fd = durable_create(r->bdir, INDEX_TMP, O_RDWR);
	if (fd < 0) {
		e = errno;
		goto fail;
	}
	cksum_update(&ck, h, strlen(h));
	if (bundle__write(r, fd, h, strlen(h)) < 0)
		e = errno;
	for (size_t i = 0; !e && i < r->nbm; i++) {
		char *l;

		if (!r->bm[i].kept || !r->bm[i].refs)
			continue;
		l = bundle__bundle_line(&r->bm[i]);
		if (!l || bundle__write(r, fd, l, strlen(l)) < 0)
			e = l ? errno : ENOMEM;
		else
			cksum_update(&ck, l, strlen(l));
		free(l);
	}
	for (size_t i = 0; !e && i < out.n; i++) {
		char *l = bundle__rec_line(&out.v[i]);

		if (!l || bundle__write(r, fd, l, strlen(l)) < 0)
			e = l ? errno : ENOMEM;
		else
			cksum_update(&ck, l, strlen(l));
		free(l);
	}
	cksum_final(&ck, want);
	if (!e && fsync(fd) < 0)
		e = errno;
	if (!e)
		e = bundle__cksum(r, fd, got, &len);
	if (!e && strcmp(got, want) != 0)
		e = EIO;
	if (e)
		close(fd);
	else
		e = durable_commit(r->bdir, INDEX_TMP, INDEX_NAME, fd, DURABLE_DIRSYNC);
fail:
	free(out.v);
	free(h);
	if (e) {
		unlinkat(r->bdir, INDEX_TMP, 0);
		snprintf(msg, msglen, "cannot write the index %s/%s/%s: %s", r->ctx->dest, BUNDLE_DIR,
			 INDEX_NAME, strerror(e));
		return -1;
	}
	if (r->jfd >= 0) {
		close(r->jfd);
		r->jfd = -1;
	}
	unlinkat(r->bdir, JOURNAL_NAME, 0);
	bundle__sweep(r, 1);
	xfer_logf(r->ctx, LOG_LVL_INFO, "request %lld: index %s/%s/%s written (%zu entries, %s)",
		  (long long)r->ctx->request_id, r->ctx->dest, BUNDLE_DIR, INDEX_NAME, out.n, got);
	return 0;
}
