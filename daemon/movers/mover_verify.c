/* mover_verify.c - see mover_verify.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checksum.h"
#include "fdclose.h"
#include "grow.h"
#include "mover_verify.h"
#include "resolve.h"
#include "worker.h"

#define BUF_BYTES (1u << 20)
#define CANCEL_POLL_MS 200

/* The child's exit statuses. */
enum { V_OK = 0, V_BECOME = 3, V_OPEN = 4, V_SETUP = 5, V_ORPHAN = 6 };

void mover_verify_ents_free(struct mover_verify_ent *e, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(e[i].relpath);
		free(e[i].cks_src);
		free(e[i].cks_dst);
	}
	free(e);
}

void mover_verify_result_free(struct mover_verify_result *res)
{
	for (size_t i = 0; res->bad && i < res->mismatched; i++)
		free(res->bad[i]);
	free(res->bad);
	res->bad = NULL;
}

struct _coll {
	struct mover_verify_ent *e;
	size_t n, cap;
};

static int _collect(const struct queue_item *it, void *arg)
{
	struct _coll *c = arg;
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

int mover_verify_collect(struct queue *q, const struct queue_request *r,
			 struct mover_verify_ent **e, size_t *n, char *err, size_t errlen)
{
	struct _coll c = { 0 };

	if (queue_item_list(q, r->id, QI_DONE, 0, _collect, &c, err, errlen) < 0) {
		mover_verify_ents_free(c.e, c.n);
		return -1;
	}
	*e = c.e;
	*n = c.n;
	return 0;
}

/* ---- the child ---- */

/* Hash fd with the algorithm of want ("algo:hex") into got; 0, or an errno. */
static int _hash(int fd, const char *want, char *buf, char got[CKSUM_HEX_MAX], int64_t *bytes)
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
	while ((n = read(fd, buf, BUF_BYTES)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			int e = errno;

			cksum_abort(&c);
			return e;
		}
		cksum_update(&c, buf, (size_t)n);
		*bytes += n;
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
	x = _hash(fd, e->cks_dst, buf, got, bytes);
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
	    _hash(fd, e->cks_dst, buf, got, bytes) == 0 && strcmp(got, e->cks_dst) != 0)
		snprintf(why, whylen, "'%s': its source reads %s, but its mover recorded %s for "
			 "the source and the copy", e->relpath, got, e->cks_dst);
	close(fd);
}

static void _put(FILE *out, uint32_t idx, const char *why)
{
	uint16_t len = (uint16_t)strnlen(why, 1000);

	fwrite(&idx, sizeof(idx), 1, out);
	fwrite(&len, sizeof(len), 1, out);
	fwrite(why, 1, len, out);
}

static void _child(const struct queue_request *r, const struct mover_verify_ent *e, size_t n,
		   int wfd, const gid_t *groups, int ngroups, pid_t parent)
{
	char *buf, why[1024];
	int64_t bytes = 0;
	int droot, sroot;
	FILE *out;

	signal(SIGPIPE, SIG_IGN);
	/* Nothing of the daemon's stays open as the owner (as the plan's listing). */
	if (wfd != 3) {
		if (dup2(wfd, 3) < 0)
			_exit(V_SETUP);
		wfd = 3;
	}
	if (fd_close_from(4) < 0)
		_exit(V_SETUP);
	if (worker_become(r->uid, r->gid, groups, ngroups) < 0)
		_exit(V_BECOME);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(V_ORPHAN);
	prctl(PR_SET_NAME, "stagehand-vrfy");
	/* The request's own paths are resolved normally, with the owner's identity;
	   below them, no link is followed (resolve.h). */
	droot = open(r->dest, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (droot < 0)
		_exit(V_OPEN);
	sroot = open(r->source, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	out = fdopen(wfd, "w");
	buf = malloc(BUF_BYTES);
	if (!out || !buf)
		_exit(V_SETUP);
	for (size_t i = 0; i < n; i++) {
		_one(droot, sroot, &e[i], buf, &bytes, why, sizeof(why));
		if (why[0])
			_put(out, (uint32_t)i, why);
	}
	/* The end: an index past the list, and the bytes hashed as the text. */
	snprintf(why, sizeof(why), "%lld", (long long)bytes);
	_put(out, UINT32_MAX, why);
	_exit(fclose(out) == 0 ? V_OK : V_SETUP);
}

/* The child's whole output; the child is killed here if *cancel is set. */
static int _read_all(int fd, pid_t pid, const _Atomic int *cancel, char **buf, size_t *len)
{
	size_t cap = 1 << 12;
	int killed = 0;

	*len = 0;
	if (!(*buf = malloc(cap)))
		return -1;
	for (;;) {
		struct pollfd pf = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (grow_array((void **)buf, &cap, *len + 1, 1, 1 << 12) < 0)
			return -1;
		if (!killed && cancel && atomic_load(cancel)) {
			kill(pid, SIGKILL);
			killed = 1;
		}
		if (!killed && poll(&pf, 1, CANCEL_POLL_MS) == 0)
			continue;
		n = read(fd, *buf + *len, cap - *len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return killed ? -1 : 0;
		*len += (size_t)n;
	}
}

static double _now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int mover_verify_run(const struct queue_request *r, const struct mover_verify_ent *e, size_t n,
		     const _Atomic int *cancel, struct mover_verify_result *res, char *err,
		     size_t errlen)
{
	gid_t groups[256];
	int ngroups = 256, fds[2], status = 0, ended = 0, rc = -1;
	char *buf = NULL;
	size_t len = 0, off = 0, cap = 0;
	double t0 = _now();
	pid_t pid, me = getpid();

	memset(res, 0, sizeof(*res));
	worker_groups(r->uid, r->gid, groups, &ngroups);
	if (pipe2(fds, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -1;
	}
	pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (pid == 0) {
		close(fds[0]);
		_child(r, e, n, fds[1], groups, ngroups, me);
	}
	close(fds[1]);
	if (_read_all(fds[0], pid, cancel, &buf, &len) < 0)
		snprintf(err, errlen, "reading the verification of %s: %s", r->dest,
			 cancel && atomic_load(cancel) ? "cancelled" : strerror(errno));
	close(fds[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (!WIFEXITED(status) || WEXITSTATUS(status) != V_OK) {
		int x = WIFEXITED(status) ? WEXITSTATUS(status) : -1;

		snprintf(err, errlen, "reading back %s as uid %u failed (%s, status %d)", r->dest,
			 (unsigned)r->uid,
			 x == V_BECOME ? "it could not switch to the owner" :
			 x == V_OPEN ? "the owner cannot open the destination" :
			 x == V_SETUP ? "it could not set up or write its findings" :
			 WIFSIGNALED(status) ? "killed by a signal" : "unexpected exit", status);
		goto out;
	}
	while (off + sizeof(uint32_t) + sizeof(uint16_t) <= len) {
		uint32_t idx;
		uint16_t l;
		char why[1024];

		memcpy(&idx, buf + off, sizeof(idx));
		memcpy(&l, buf + off + sizeof(idx), sizeof(l));
		off += sizeof(idx) + sizeof(l);
		if (l >= sizeof(why) || off + l > len)
			break;
		memcpy(why, buf + off, l);
		why[l] = '\0';
		off += l;
		if (idx == UINT32_MAX) {
			res->bytes = strtoll(why, NULL, 10);
			ended = 1;
			break;
		}
		if (idx >= n)
			break;
		if (!res->mismatched)
			snprintf(res->first, sizeof(res->first), "%s", why);
		if (grow_array((void **)&res->bad, &cap, res->mismatched + 1, sizeof(*res->bad),
			       16) < 0 || !(res->bad[res->mismatched] = strdup(e[idx].relpath))) {
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
	rc = res->mismatched ? 1 : 0;
out:
	res->seconds = _now() - t0;
	free(buf);
	return rc;
}
