/* mover_verify.c - see mover_verify.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checksum.h"
#include "durable.h"
#include "grow.h"
#include "monoclock.h"
#include "mover_child.h"
#include "mover_verify.h"
#include "queue_shards.h"
#include "resolve.h"

#define BUF_BYTES (1u << 20)

void mover_verify_set_free(struct mover_verify_set *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->e[i].relpath);
		free(s->e[i].cks_src);
		free(s->e[i].cks_dst);
	}
	for (size_t i = 0; i < s->nr; i++) {
		free(s->rg[i].relpath);
		free(s->rg[i].cks);
	}
	free(s->e);
	free(s->rg);
	memset(s, 0, sizeof(*s));
}

void mover_verify_result_free(struct mover_verify_result *res)
{
	for (size_t i = 0; res->bad && i < res->mismatched; i++)
		free(res->bad[i]);
	free(res->bad);
	free(res->badr);
	res->bad = NULL;
	res->badr = NULL;
}

static int _collect(const struct queue_item *it, void *arg)
{
	struct mover_verify_set *c = arg;
	struct mover_verify_ent *x;

	if (strcmp(it->type, "file") != 0)
		return 0;
	if (grow_array((void **)&c->e, &c->cap, c->n + 1, sizeof(*c->e), 256) < 0)
		return 1;
	x = &c->e[c->n];
	memset(x, 0, sizeof(*x));
	x->relpath = strdup(it->relpath);
	x->cks_src = strdup(it->checksum_src ? it->checksum_src : "");
	x->cks_dst = strdup(it->checksum_dst ? it->checksum_dst : "");
	x->size = it->size;
	x->mtime_ns = it->mtime_ns;
	c->n++;
	return !x->relpath || !x->cks_src || !x->cks_dst;
}

static int _collect_range(const char *relpath, int64_t off, int64_t len, int64_t src_size,
			  int64_t mtime_ns, const char *cks, void *arg)
{
	struct mover_verify_set *c = arg;
	struct mover_verify_range *x;

	if (grow_array((void **)&c->rg, &c->rcap, c->nr + 1, sizeof(*c->rg), 64) < 0)
		return 1;
	x = &c->rg[c->nr++];
	*x = (struct mover_verify_range){ strdup(relpath), off, len, src_size, mtime_ns,
					  strdup(cks) };
	return !x->relpath || !x->cks;
}

int mover_verify_collect(struct queue *q, const struct queue_request *r,
			 struct mover_verify_set *s, char *err, size_t errlen)
{
	memset(s, 0, sizeof(*s));
	if (queue_item_list(q, r->id, QI_DONE, 0, _collect, s, err, errlen) < 0 ||
	    queue_ranges_done(q, r->id, _collect_range, s, err, errlen) < 0) {
		mover_verify_set_free(s);
		return -1;
	}
	return 0;
}

/* ---- the child ---- */

/*
 * Hash fd (len < 0: from where it is to its end; else len bytes from off)
 * with the algorithm of want ("algo:hex") into got; 0, or an errno (EINVAL:
 * want names no algorithm the daemon has; EIO: the file ends before len).
 */
static int _hash(int fd, const char *want, char *buf, char got[CKSUM_HEX_MAX], int64_t *bytes,
		 int64_t off, int64_t len)
{
	const char *colon = strchr(want, ':');
	char name[16];
	enum cksum_algo algo;
	struct cksum c;
	ssize_t n;

	if (!colon || colon - want >= (ptrdiff_t)sizeof(name))
		return EINVAL;
	memcpy(name, want, (size_t)(colon - want));
	name[colon - want] = '\0';
	if (cksum_algo_from_name(name, &algo) < 0)
		return EINVAL;
	if (cksum_init(&c, algo) < 0)
		return ENOMEM;
	for (;;) {
		size_t want_n = len < 0 || len > (int64_t)BUF_BYTES ? BUF_BYTES : (size_t)len;

		if (len == 0)
			break;
		n = len < 0 ? read(fd, buf, want_n) : pread(fd, buf, want_n, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0 && (n < 0 || len > 0)) {
			int e = n < 0 ? errno : EIO;

			cksum_abort(&c);
			return e;
		}
		if (n == 0)
			break;
		cksum_update(&c, buf, (size_t)n);
		*bytes += n;
		if (len > 0) {
			off += n;
			len -= n;
		}
	}
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	cksum_final(&c, got);
	return 0;
}

/* One file: "" when it matches, else why into why. */
static void _one(int droot, int sroot, const struct mover_verify_ent *e, char *buf,
		 int64_t *bytes, char *why, size_t whylen)
{
	char got[CKSUM_HEX_MAX], rerr[512];
	struct stat st;
	int fd, x;

	why[0] = '\0';
	fd = resolve_open(droot, e->relpath, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, 0, rerr,
			  sizeof(rerr));
	if (fd < 0) {
		snprintf(why, whylen, "'%s' at the destination cannot be read back: %s", e->relpath,
			 rerr);
		return;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(why, whylen, "'%s' at the destination is not a regular file", e->relpath);
		close(fd);
		return;
	}
	x = _hash(fd, e->cks_dst, buf, got, bytes, 0, -1);
	close(fd);
	if (x == EINVAL) {
		snprintf(why, whylen, "'%s': the mover recorded no checksum the daemon can compute "
			 "('%.80s')", e->relpath, e->cks_dst);
		return;
	}
	if (x) {
		snprintf(why, whylen, "'%s' at the destination: read: %s", e->relpath, strerror(x));
		return;
	}
	if (strcmp(got, e->cks_dst) != 0) {
		snprintf(why, whylen, "'%s' at the destination reads %s, but its mover recorded %s",
			 e->relpath, got, e->cks_dst);
		return;
	}
	/* The source as the mover saw it (same size and mtime), if it is still there:
	   removed (keep=no) or changed since, the final pass deals with it. */
	if (sroot < 0)
		return;
	fd = resolve_open(sroot, e->relpath, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, 0, NULL, 0);
	if (fd < 0)
		return;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == e->size &&
	    (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec == e->mtime_ns &&
	    _hash(fd, e->cks_dst, buf, got, bytes, 0, -1) == 0 && strcmp(got, e->cks_dst) != 0)
		snprintf(why, whylen, "'%s': its source reads %s, but its mover recorded %s for "
			 "the source and the copy", e->relpath, got, e->cks_dst);
	close(fd);
}

/* The directory relpath's last name is in, below root (root itself for a plain name); -1, err. */
static int _parent(int root, const char *relpath, const char **base, char *err, size_t errlen)
{
	const char *slash = strrchr(relpath, '/');
	char dir[4096];

	*base = slash ? slash + 1 : relpath;
	if (!slash)
		return dup(root);
	if ((size_t)(slash - relpath) >= sizeof(dir)) {
		snprintf(err, errlen, "path too long");
		return -1;
	}
	memcpy(dir, relpath, (size_t)(slash - relpath));
	dir[slash - relpath] = '\0';
	return resolve_open(root, dir, O_RDONLY | O_DIRECTORY, 0, 0, err, errlen);
}

/* One byte range of a big file: "" when it matches, else why into why. */
static void _range(int64_t req, int droot, int sroot, const struct mover_verify_range *g,
		   char *buf, int64_t *bytes, char *why, size_t whylen)
{
	char got[CKSUM_HEX_MAX], rerr[512], tmp[512];
	const char *base;
	struct stat st;
	int dir, fd, x;

	why[0] = '\0';
	dir = _parent(droot, g->relpath, &base, rerr, sizeof(rerr));
	if (dir < 0) {
		snprintf(why, whylen, "'%s' bytes %lld+%lld at the destination cannot be read back: "
			 "%s", g->relpath, (long long)g->off, (long long)g->len, rerr);
		return;
	}
	/* Where the movers wrote it: the temporary file the final pass renames. */
	if (durable_tmpname(tmp, sizeof(tmp), base, req) < 0) {
		close(dir);
		snprintf(why, whylen, "'%s': name too long", g->relpath);
		return;
	}
	fd = openat(dir, tmp, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	close(dir);
	if (fd < 0) {
		snprintf(why, whylen, "'%s' bytes %lld+%lld: the destination's temporary file %s "
			 "cannot be read back: %s", g->relpath, (long long)g->off,
			 (long long)g->len, tmp, strerror(errno));
		return;
	}
	x = fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ? EIO :
	    _hash(fd, g->cks, buf, got, bytes, g->off, g->len);
	close(fd);
	if (x) {
		snprintf(why, whylen, "'%s' bytes %lld+%lld at the destination: %s", g->relpath,
			 (long long)g->off, (long long)g->len,
			 x == EINVAL ? "no checksum the daemon can compute was recorded" :
			 strerror(x));
		return;
	}
	if (strcmp(got, g->cks) != 0) {
		snprintf(why, whylen, "'%s' bytes %lld+%lld at the destination read %s, but its "
			 "mover recorded %s", g->relpath, (long long)g->off, (long long)g->len, got,
			 g->cks);
		return;
	}
	if (sroot < 0 ||
	    (fd = resolve_open(sroot, g->relpath, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, 0, NULL,
			       0)) < 0)
		return;
	if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size == g->src_size &&
	    (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec == g->mtime_ns &&
	    _hash(fd, g->cks, buf, got, bytes, g->off, g->len) == 0 && strcmp(got, g->cks) != 0)
		snprintf(why, whylen, "'%s' bytes %lld+%lld: the source reads %s, but its mover "
			 "recorded %s", g->relpath, (long long)g->off, (long long)g->len, got, g->cks);
	close(fd);
}

static void _put(FILE *out, uint32_t idx, const char *why)
{
	mover_child_put(out, &idx, sizeof(idx), why, (uint16_t)strnlen(why, 1000));
}

/* The child (mover_child_start), as the owner: a record for each mismatch, then the end. */
static void _child(const struct queue_request *r, int wfd, const void *arg)
{
	const struct mover_verify_set *s = arg;
	char *buf, why[1024];
	int64_t bytes = 0;
	int droot, sroot;
	FILE *out;

	/* The request's own paths are resolved normally, with the owner's identity;
	   below them, no link is followed (resolve.h). */
	droot = open(r->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (droot < 0)
		_exit(MOVER_CHILD_OPEN);
	sroot = open(r->source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	out = fdopen(wfd, "w");
	buf = malloc(BUF_BYTES);
	if (!out || !buf)
		_exit(MOVER_CHILD_SETUP);
	for (size_t i = 0; i < s->n; i++) {
		_one(droot, sroot, &s->e[i], buf, &bytes, why, sizeof(why));
		if (why[0])
			_put(out, (uint32_t)i, why);
	}
	for (size_t i = 0; i < s->nr; i++) {
		_range(r->id, droot, sroot, &s->rg[i], buf, &bytes, why, sizeof(why));
		if (why[0])
			_put(out, (uint32_t)(s->n + i), why);
	}
	/* The end: an index past the list, and the bytes hashed as the text. */
	snprintf(why, sizeof(why), "%lld", (long long)bytes);
	_put(out, UINT32_MAX, why);
	_exit(fclose(out) == 0 ? MOVER_CHILD_OK : MOVER_CHILD_SETUP);
}

int mover_verify_run(const struct queue_request *r, const struct mover_verify_set *s,
		     const _Atomic int *cancel, struct mover_verify_result *res, char *err,
		     size_t errlen)
{
	int fd, status = 0, ended = 0, rc = -1;
	char *buf = NULL, why[1024];
	size_t len = 0, off = 0, cap = 0, rcap = 0, n = s->n;
	double t0 = mono_s();
	uint32_t idx;
	pid_t pid;

	memset(res, 0, sizeof(*res));
	if (mover_child_start(r, "stagehand-vrfy", _child, s, &pid, &fd, err, errlen) < 0)
		return -1;
	if (mover_child_finish(fd, pid, cancel, &buf, &len, &status) != 0)
		snprintf(err, errlen, "reading the verification of %s: %s", r->dest,
			 cancel && atomic_load(cancel) ? "cancelled" : strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != MOVER_CHILD_OK) {
		int x = WIFEXITED(status) ? WEXITSTATUS(status) : -1;

		snprintf(err, errlen, "reading back %s as uid %u failed (%s, status %d)", r->dest,
			 (unsigned)r->uid,
			 x == MOVER_CHILD_BECOME ? "it could not switch to the owner" :
			 x == MOVER_CHILD_OPEN ? "the owner cannot open the destination" :
			 x == MOVER_CHILD_SETUP ? "it could not set up or write its findings" :
			 WIFSIGNALED(status) ? "killed by a signal" : "unexpected exit", status);
		goto out;
	}
	while (mover_child_next(buf, len, &off, &idx, sizeof(idx), why, sizeof(why))) {
		if (idx == UINT32_MAX) {
			res->bytes = strtoll(why, NULL, 10);
			ended = 1;
			break;
		}
		if (idx >= n + s->nr)
			break;
		if (!res->mismatched && !res->rmismatched)
			snprintf(res->first, sizeof(res->first), "%s", why);
		if (idx >= n) {
			if (grow_array((void **)&res->badr, &rcap, res->rmismatched + 1,
				       sizeof(*res->badr), 16) < 0) {
				snprintf(err, errlen, "out of memory");
				goto out;
			}
			res->badr[res->rmismatched++] = idx - n;
			continue;
		}
		if (grow_array((void **)&res->bad, &cap, res->mismatched + 1, sizeof(*res->bad),
			       16) < 0 || !(res->bad[res->mismatched] = strdup(s->e[idx].relpath))) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
		res->mismatched++;
	}
	if (!ended) {
		snprintf(err, errlen, "reading back %s: the checker's findings are cut short",
			 r->dest);
		goto out;
	}
	res->files = n;
	res->ranges = s->nr;
	rc = res->mismatched || res->rmismatched ? 1 : 0;
out:
	res->seconds = mono_s() - t0;
	free(buf);
	return rc;
}
