/* mover_plan.c - see mover_plan.h. */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bundle.h"
#include "grow.h"
#include "mover_child.h"
#include "mover_plan.h"
#include "xfer.h"

#define PLAN_DEPTH_MAX 256

int mover_plan_add(struct mover_plan *p, const char *relpath, int64_t size)
{
	if (grow_array((void **)&p->f, &p->cap, p->n + 1, sizeof(*p->f), 1024) < 0)
		return -1;
	p->f[p->n].relpath = strdup(relpath);
	if (!p->f[p->n].relpath)
		return -1;
	p->f[p->n].size = size;
	p->f[p->n].ranged = 0;
	p->f[p->n].off = 0;
	p->f[p->n].len = size;
	p->f[p->n].idx = 0;
	p->n++;
	p->bytes += size;
	p->files++;
	return 0;
}

/*
 * How many ranges a file of size bytes becomes with shards of shard_bytes,
 * and how long each is (*len; the last is shorter). 1: it stays whole.
 */
static int64_t _ranges(int64_t size, uint64_t shard_bytes, int64_t *len)
{
	int64_t n, l;

	*len = size;
	if (!shard_bytes || size <= 0 || (uint64_t)size <= shard_bytes)
		return 1;
	n = (int64_t)(((uint64_t)size + shard_bytes - 1) / shard_bytes);
	l = (size + n - 1) / n;
	l = (l + MOVER_RANGE_ALIGN - 1) / MOVER_RANGE_ALIGN * MOVER_RANGE_ALIGN;
	/* Rounding up may leave fewer ranges than first counted. */
	n = (size + l - 1) / l;
	if (n > 1)
		*len = l;
	return n;
}

/* Replace every file larger than shard_bytes by its ranges. 0 or -1 (out of memory). */
static int _split(struct mover_plan *p, uint64_t shard_bytes)
{
	size_t n = p->n;

	for (size_t i = 0; i < n; i++) {
		int64_t len, k = p->f[i].ranged ? 1 : _ranges(p->f[i].size, shard_bytes, &len);

		for (int64_t r = 1; r < k; r++) {
			struct mover_plan_file *e;

			if (mover_plan_add(p, p->f[i].relpath, p->f[i].size) < 0)
				return -1;
			p->bytes -= p->f[i].size;	/* the same file: counted once */
			p->files--;
			e = &p->f[p->n - 1];
			e->ranged = 1;
			e->off = r * len;
			e->len = r == k - 1 ? p->f[i].size - e->off : len;
		}
		if (k > 1) {
			p->f[i].ranged = 1;
			p->f[i].len = len;
		}
	}
	return 0;
}

void mover_plan_free(struct mover_plan *p)
{
	for (size_t i = 0; i < p->n; i++)
		free(p->f[i].relpath);
	free(p->f);
	memset(p, 0, sizeof(*p));
}

static int _by_size_desc(const void *a, const void *b)
{
	const struct mover_plan_file *x = a, *y = b;
	int c;

	if (x->len != y->len)
		return x->len > y->len ? -1 : 1;
	c = strcmp(x->relpath, y->relpath);
	return c ? c : x->off < y->off ? -1 : x->off > y->off;
}

int mover_plan_pack(struct mover_plan *p, uint64_t shard_bytes, int64_t shard_files,
		    int max_shards)
{
	int64_t by_bytes = shard_bytes ? (int64_t)(((uint64_t)p->bytes + shard_bytes - 1) /
						   shard_bytes) : 1;
	int64_t pieces = 0, by_files, k, *load;

	for (size_t i = 0; i < p->n; i++) {
		int64_t len;

		pieces += p->f[i].ranged ? 1 : _ranges(p->f[i].size, shard_bytes, &len);
	}
	by_files = shard_files > 0 ? (pieces + shard_files - 1) / shard_files : 1;
	k = by_bytes > by_files ? by_bytes : by_files;
	if (k > max_shards)
		k = max_shards;
	if (k > pieces)
		k = pieces;
	if (k < 2) {
		for (size_t i = 0; i < p->n; i++)
			p->f[i].idx = 0;
		return 1;
	}
	/* Split only once the request is split at all: a local worker copies files whole. */
	load = calloc((size_t)k, sizeof(*load));
	if (!load || _split(p, shard_bytes) < 0) {
		free(load);
		return 1;
	}
	/* Largest first, each to the shard with the fewest bytes so far (LPT):
	   within 4/3 of the best possible balance. Ties go to the lowest index,
	   so many equal small files, or the equal ranges of one file, are dealt
	   round robin. A shard never stays empty: there are at least k pieces
	   and the first k go one each. */
	qsort(p->f, p->n, sizeof(*p->f), _by_size_desc);
	for (size_t i = 0; i < p->n; i++) {
		int best = 0;

		for (int s = 1; s < k; s++)
			if (load[s] < load[best])
				best = s;
		p->f[i].idx = best;
		load[best] += p->f[i].len + 1;	/* +1: a file costs something even when empty */
	}
	free(load);
	return (int)k;
}

/* ---- the listing child ---- */

static int _excluded(char *const *ex, const char *rel)
{
	for (; ex && *ex; ex++)
		if (strcmp(*ex, rel) == 0)
			return 1;
	return 0;
}

/* One record per regular file: int64 size, uint16 length, the relpath. */
static void _walk(FILE *out, int dfd, const char *prefix, int depth, char *const *ex)
{
	struct dirent *de;
	int fd = dup(dfd);
	DIR *d;

	if (fd < 0 || depth > PLAN_DEPTH_MAX || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		return;	/* the engine reports an unreadable directory */
	}
	while ((de = readdir(d))) {
		char rel[XFER_PATH_MAX];
		struct stat st;
		int n;

		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		n = snprintf(rel, sizeof(rel), "%s%s%s", prefix, *prefix ? "/" : "", de->d_name);
		if (n < 0 || n >= (int)sizeof(rel) || fstatat(dfd, de->d_name, &st,
							      AT_SYMLINK_NOFOLLOW) < 0)
			continue;	/* reported by the engine's own walk */
		if (S_ISREG(st.st_mode)) {
			int64_t size = st.st_size;

			mover_child_put(out, &size, sizeof(size), rel, (uint16_t)n);
		} else if (S_ISDIR(st.st_mode) && !_excluded(ex, rel)) {
			int sub = openat(dfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW |
					 O_CLOEXEC);

			if (sub >= 0) {
				_walk(out, sub, rel, depth + 1, ex);
				close(sub);
			}
		}
	}
	closedir(d);
}

/* The listing child's own exit status besides mover_child.h's, read by mover_plan_list. */
enum { LIST_NOT_TREE = 2 };

/* The child (mover_child_start), as the owner: arg is the NULL-terminated exclude list. */
static void _child(const struct queue_request *r, int wfd, const void *arg)
{
	char *const *ex = arg;
	struct stat st;
	FILE *out;
	int root;

	/* The request's own path is resolved normally, with the owner's identity. */
	root = open(r->source, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (root < 0 || fstat(root, &st) < 0)
		_exit(MOVER_CHILD_OPEN);
	if (!S_ISDIR(st.st_mode))
		_exit(LIST_NOT_TREE);
	/* A bundled archive copy staged in is a restore (xfer_restore.c), not a
	   tree to split: one local worker runs it. */
	if (strcmp(r->action, "stage_in") == 0 &&
	    fstatat(root, BUNDLE_DIR "/" BUNDLE_INDEX_NAME, &st, AT_SYMLINK_NOFOLLOW) == 0)
		_exit(LIST_NOT_TREE);
	out = fdopen(wfd, "w");
	if (!out)
		_exit(MOVER_CHILD_SETUP);
	_walk(out, root, "", 0, ex);
	_exit(fclose(out) == 0 ? MOVER_CHILD_OK : MOVER_CHILD_SETUP);
}

/* options.exclude as a NULL-terminated array of borrowed strings from opts. */
static const char **_exclude(json_t *opts)
{
	json_t *v = json_object_get(opts, "exclude"), *e;
	const char **ex;
	size_t i, k = 0;

	if (!json_is_array(v) || json_array_size(v) > XFER_EXCLUDE_MAX)
		return NULL;
	ex = calloc(json_array_size(v) + 1, sizeof(*ex));
	if (!ex)
		return NULL;
	json_array_foreach(v, i, e)
		if (json_is_string(e))
			ex[k++] = json_string_value(e);
	return ex;
}

int mover_plan_list(const struct queue_request *r, struct mover_plan *p,
		    const _Atomic int *cancel, char *err, size_t errlen)
{
	int fd, status = 0, rc = -1;
	json_t *opts = json_loads(r->options, 0, NULL);
	const char **ex = _exclude(opts);
	char *buf = NULL, rel[XFER_PATH_MAX];
	size_t len = 0, off = 0;
	int64_t size;
	pid_t pid;

	if (mover_child_start(r, "stagehand-list", _child, ex, &pid, &fd, err, errlen) < 0)
		goto out;
	/* Not on a kill for *cancel (1): the child's status below says that. */
	if (mover_child_finish(fd, pid, cancel, &buf, &len, &status) < 0)
		snprintf(err, errlen, "reading the listing of %s: %s", r->source, strerror(errno));
	if (!WIFEXITED(status) ||
	    (WEXITSTATUS(status) != MOVER_CHILD_OK && WEXITSTATUS(status) != LIST_NOT_TREE)) {
		int x = WIFEXITED(status) ? WEXITSTATUS(status) : -1;

		snprintf(err, errlen, "listing %s as uid %u failed (%s, status %d)", r->source,
			 (unsigned)r->uid,
			 x == MOVER_CHILD_BECOME ? "it could not switch to the owner" :
			 x == MOVER_CHILD_OPEN ? "the owner cannot open it" :
			 x == MOVER_CHILD_SETUP ?
			 "it could not close the daemon's descriptors or write its list" :
			 WIFSIGNALED(status) ? "killed by a signal" : "unexpected exit",
			 status);
		goto out;
	}
	if (WEXITSTATUS(status) == LIST_NOT_TREE) {
		rc = 1;
		goto out;
	}
	while (mover_child_next(buf, len, &off, &size, sizeof(size), rel, sizeof(rel))) {
		if (mover_plan_add(p, rel, size) < 0) {
			snprintf(err, errlen, "out of memory listing %s", r->source);
			goto out;
		}
	}
	rc = 0;
out:
	free(buf);
	free(ex);
	json_decref(opts);
	return rc;
}
