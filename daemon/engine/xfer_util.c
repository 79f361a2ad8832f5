/*
 * xfer_util.c - helpers shared by the transfer backends (see xfer_util.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "grow.h"
#include "log.h"
#include "resolve.h"
#include "xattr.h"
#include "xfer_util.h"

int64_t xfer_ns(const struct timespec *ts)
{
	return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec;
}

int xfer_join(char *out, size_t outlen, const char *prefix, const char *name)
{
	int n = *prefix ? snprintf(out, outlen, "%s/%s", prefix, name)
			: snprintf(out, outlen, "%s", name);

	return (n < 0 || (size_t)n >= outlen) ? -1 : 0;
}

void xfer_mkdir_why(const char *path, int e, char *why, size_t whylen)
{
	char parent[XFER_PATH_MAX];
	const char *sl = strrchr(path, '/');
	struct stat st;

	snprintf(parent, sizeof(parent), "%.*s", sl && sl != path ? (int)(sl - path) : 1, path);
	if ((e == EACCES || e == EPERM || e == EROFS) && stat(parent, &st) == 0) {
		char owner[32];

		if (st.st_uid == 0)
			snprintf(owner, sizeof(owner), "root");
		else
			snprintf(owner, sizeof(owner), "uid %u", (unsigned)st.st_uid);
		snprintf(why, whylen, "mkdir %s: %s (%s: owner %s, mode %04o; you are uid %u)", path,
			 strerror(e), parent, owner, (unsigned)(st.st_mode & 07777),
			 (unsigned)geteuid());
		return;
	}
	snprintf(why, whylen, "mkdir %s: %s", path, strerror(e));
}

int xfer_mkparents(const char *path, char *why, size_t whylen)
{
	char buf[XFER_PATH_MAX];

	if (snprintf(buf, sizeof(buf), "%s", path) >= (int)sizeof(buf)) {
		snprintf(why, whylen, "path too long: %.200s", path);
		return -1;
	}
	for (char *p = buf + 1; *p; p++) {
		struct stat st;

		if (*p != '/')
			continue;
		*p = '\0';
		/* The first step that fails is the one reported, with its errno. */
		if (mkdir(buf, 0755) < 0 && errno != EEXIST) {
			int e = errno;

			/* EACCES on a directory that is there (a parent one may not
			   write in): go on down the path. */
			if (!(stat(buf, &st) == 0 && S_ISDIR(st.st_mode))) {
				xfer_mkdir_why(buf, e, why, whylen);
				return -1;
			}
		}
		*p = '/';
	}
	return 0;
}

int xfer_open_beneath(const char *beneath, const char *path, int flags, char *why,
		      size_t whylen)
{
	size_t bl = strlen(beneath);
	const char *rel = path;	/* below beneath: what the messages name */
	char rwhy[XFER_TEXT_MAX / 2];
	int cur, fd, e;

	while (bl > 1 && beneath[bl - 1] == '/')
		bl--;
	if (strcmp(beneath, "/") == 0)
		bl = 0;
	else if (strncmp(path, beneath, bl) != 0 || (path[bl] != '/' && path[bl] != '\0')) {
		snprintf(why, whylen, "%s is not below %s", path, beneath);
		errno = EINVAL;
		return -1;
	}
	cur = open(bl ? beneath : "/", O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (cur < 0) {
		e = errno;
		snprintf(why, whylen, "cannot open %s: %s", bl ? beneath : "/", strerror(e));
		errno = e;
		return -1;
	}
	rel += bl;
	while (*rel == '/')
		rel++;
	/* Below beneath, nothing is followed (common/resolve.h). */
	fd = resolve_open(cur, rel, flags, 0, 0, rwhy, sizeof(rwhy));
	e = errno;
	close(cur);
	if (fd < 0) {
		if (e == ELOOP)
			snprintf(why, whylen, "%s; stagehand does not follow links in #DATA "
				 "directories: nothing is copied through it", rwhy);
		else
			snprintf(why, whylen, "%s", rwhy);
	}
	errno = e;
	return fd;
}

int xfer_open_source(const struct xfer_ctx *ctx, struct stat *st, char *msg, size_t msglen)
{
	const int flags = O_RDONLY | O_NOCTTY | O_NONBLOCK;
	char why[XFER_TEXT_MAX / 2];
	int fd, e;

	if (ctx->beneath)
		fd = xfer_open_beneath(ctx->beneath, ctx->source, flags, why, sizeof(why));
	else {
		fd = open(ctx->source, flags | O_CLOEXEC);
		if (fd < 0)
			snprintf(why, sizeof(why), "cannot open source %s: %s", ctx->source,
				 strerror(errno));
	}
	if (fd >= 0 && fstat(fd, st) == 0)
		return fd;
	e = errno;
	if (fd >= 0) {
		snprintf(msg, msglen, "cannot stat source %s: %s", ctx->source, strerror(e));
		close(fd);
		errno = e;
		return -1;
	}
	if (ctx->line > 0)
		snprintf(msg, msglen, "#DATA line %d: %s", ctx->line, why);
	else
		snprintf(msg, msglen, "%s", why);
	errno = e;
	return -1;
}

int xfer_grow(void **p, size_t n, size_t *cap, size_t elem, size_t first)
{
	return grow_array(p, cap, n + 1, elem, first);
}

int xfer_err_final(int err)
{
	return err == EACCES || err == EPERM || err == ENOENT || err == ELOOP || err == ENOTDIR ||
	       err == EISDIR || err == ENAMETOOLONG;
}

void xfer_label(struct xfer_ctx *ctx, int fd, const char *name, const char *value)
{
	char err[256];

	if (ctx->label_via_daemon) {
		if (xfer_emit_label_fd(ctx, fd, name, value) < 0)
			xfer_logf(ctx, LOG_LVL_WARN, "request %lld: cannot pass label fd: %s",
				  (long long)ctx->request_id, strerror(errno));
		return;
	}
	if (xattr_set_label(fd, ctx->xattr_ns, name, value, err, sizeof(err)) < 0)
		xfer_logf(ctx, LOG_LVL_WARN, "request %lld: %s on %s",
			  (long long)ctx->request_id, err, ctx->source);
}

void xfer_label_all(struct xfer_ctx *ctx, int fd, const char *policy, const char *location)
{
	char num[32];

	xfer_label(ctx, fd, XATTR_POLICY, policy);
	if (location)
		xfer_label(ctx, fd, XATTR_LOCATION, location);
	if (ctx->job_id > 0) {
		snprintf(num, sizeof(num), "%lld", (long long)ctx->job_id);
		xfer_label(ctx, fd, XATTR_JOB, num);
	}
	snprintf(num, sizeof(num), "%u", (unsigned)ctx->uid);
	xfer_label(ctx, fd, XATTR_OWNER, num);
}

void xfer_copy_xattrs(int sfd, int dfd, const char *ns)
{
	char names[8192], val[8192], skip[64];
	ssize_t n = flistxattr(sfd, names, sizeof(names));

	/* Labels describe the life of the source copy; the copy starts unlabelled. */
	if (snprintf(skip, sizeof(skip), "%sstagehand.", ns) >= (int)sizeof(skip))
		skip[0] = '\0';
	for (ssize_t i = 0; n > 0 && i < n; i += (ssize_t)strlen(names + i) + 1) {
		const char *nm = names + i;
		ssize_t vl;

		if (strncmp(nm, "user.", 5) != 0 || (skip[0] && strncmp(nm, skip, strlen(skip)) == 0))
			continue;
		vl = fgetxattr(sfd, nm, val, sizeof(val));
		if (vl >= 0)
			fsetxattr(dfd, nm, val, (size_t)vl, 0);
	}
}
