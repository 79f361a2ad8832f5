/*
 * resolve.c - open a path below a root without following any link (see
 * resolve.h for what a path means and why this is written here).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#if defined(__has_include)
#if __has_include(<linux/openat2.h>)
#include <linux/openat2.h>
#define _HAVE_OPENAT2_H 1
#endif
#endif

#include "resolve.h"

/* Headers older than Linux 5.6 lack these; without SYS_openat2 the probe says walk. */
#ifndef _HAVE_OPENAT2_H
struct open_how {
	uint64_t flags;
	uint64_t mode;
	uint64_t resolve;
};
#define RESOLVE_NO_MAGICLINKS 0x02
#define RESOLVE_NO_SYMLINKS 0x04
#define RESOLVE_BENEATH 0x08
#endif

#define _RESOLVE_HOW (RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)

enum { _M_UNSET, _M_OPENAT2, _M_WALK };

/* The way chosen, once per process (a benign race: every thread picks the same). */
static int _method = _M_UNSET;

static void _err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void _err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (!err || !errlen)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);	/* a cut message still names the component */
	va_end(ap);
}

static int _openat2(int dir, const char *name, int flags, mode_t mode)
{
#ifdef SYS_openat2
	struct open_how how;

	memset(&how, 0, sizeof(how));
	how.flags = (uint64_t)(unsigned)flags;
	/* openat2 refuses a mode without O_CREAT or O_TMPFILE (EINVAL). */
	if ((flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE)
		how.mode = mode;
	how.resolve = _RESOLVE_HOW;
	return (int)syscall(SYS_openat2, dir, name, &how, sizeof(how));
#else
	(void)dir, (void)name, (void)flags, (void)mode;
	errno = ENOSYS;
	return -1;
#endif
}

/* Does openat2 with our resolve flags work here? Any failure means no. */
static int _probe(void)
{
	int root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC), fd;

	if (root < 0)
		return 0;
	fd = _openat2(root, ".", O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
	close(root);
	if (fd < 0)
		return 0;	/* ENOSYS, E2BIG, EINVAL, EPERM (seccomp): walk */
	close(fd);
	return 1;
}

static int _choose(void)
{
	int m = __atomic_load_n(&_method, __ATOMIC_ACQUIRE), e = errno;
	const char *v;

	if (m != _M_UNSET)
		return m;
	v = secure_getenv("STAGEHAND_RESOLVE");
	m = (v && strcmp(v, "walk") == 0) || !_probe() ? _M_WALK : _M_OPENAT2;
	__atomic_store_n(&_method, m, __ATOMIC_RELEASE);
	errno = e;
	return m;
}

const char *resolve_method(void)
{
	return _choose() == _M_OPENAT2 ? "openat2" : "walk";
}

void resolve_force_walk(int on)
{
	__atomic_store_n(&_method, on ? _M_WALK : _M_UNSET, __ATOMIC_RELEASE);
}

/*
 * path without '.' and empty components into norm (outlen bytes); "" for
 * the root itself. 0, or -1 with errno and err: absolute, '..', too long.
 */
static int _normalise(const char *path, char *norm, size_t normlen, char *err, size_t errlen)
{
	const char *p = path;
	size_t o = 0;

	if (*p == '/') {
		_err(err, errlen, "'%s' is absolute; only a path below its directory is opened",
		     path);
		errno = EINVAL;
		return -1;
	}
	while (*p) {
		size_t n = strcspn(p, "/");

		if (n == 2 && p[0] == '.' && p[1] == '.') {
			_err(err, errlen, "'..' in '%s' is not allowed", path);
			errno = EINVAL;
			return -1;
		}
		if (n > NAME_MAX) {
			_err(err, errlen, "a component of '%.200s...' is longer than %d bytes",
			     path, NAME_MAX);
			errno = ENAMETOOLONG;
			return -1;
		}
		if (n > 0 && !(n == 1 && p[0] == '.')) {
			if (o + (o > 0) + n >= normlen) {
				_err(err, errlen, "'%.200s...' is longer than %zu bytes", path,
				     normlen - 1);
				errno = ENAMETOOLONG;
				return -1;
			}
			if (o > 0)
				norm[o++] = '/';
			memcpy(norm + o, p, n);
			o += n;
		}
		p += n;
		while (*p == '/')
			p++;
	}
	norm[o] = '\0';
	return 0;
}

/*
 * Why opening comp in dir failed with e: a link is named with its target
 * (ELOOP, whatever the step said), a non-directory as such. Returns the
 * errno to report.
 */
static int _why(int dir, const char *comp, const char *path, int e, char *err, size_t errlen)
{
	struct stat st;
	char target[256];
	ssize_t tl;

	if ((e == ELOOP || e == ENOTDIR) && fstatat(dir, comp, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISLNK(st.st_mode)) {
			tl = readlinkat(dir, comp, target, sizeof(target) - 1);
			target[tl > 0 ? tl : 0] = '\0';
			_err(err, errlen, "'%s' in '%s' is a symbolic link (to '%s')", comp, path,
			     target);
			return ELOOP;
		}
		if (e == ENOTDIR && !S_ISDIR(st.st_mode)) {
			_err(err, errlen, "'%s' in '%s' exists and is not a directory", comp, path);
			return ENOTDIR;
		}
	}
	_err(err, errlen, "cannot open '%s' in '%s': %s", comp, path, strerror(e));
	return e;
}

/*
 * openat2 refused norm with e: find the component to blame, stepping down
 * with lstat and O_NOFOLLOW (for the message only: nothing opened here is
 * returned). Returns the errno to report.
 */
static int _diagnose(int rootfd, char *norm, const char *path, int e, char *err,
		     size_t errlen)
{
	char *comp = norm, *slash;
	int cur = rootfd;

	while ((slash = strchr(comp, '/'))) {
		struct stat st;
		int next;

		*slash = '\0';
		if (fstatat(cur, comp, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISDIR(st.st_mode))
			break;
		next = openat(cur, comp, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (next < 0)
			break;
		if (cur != rootfd)
			close(cur);
		cur = next;
		comp = slash + 1;
	}
	e = _why(cur, comp, path, e, err, errlen);
	if (cur != rootfd)
		close(cur);
	return e;
}

/* One component from dir, the way chosen; O_NOFOLLOW and O_CLOEXEC added. */
static int _step(int m, int dir, const char *name, int flags, mode_t mode)
{
	int fd;

	flags |= O_NOFOLLOW | O_CLOEXEC;
	fd = m == _M_OPENAT2 ? _openat2(dir, name, flags, mode) : openat(dir, name, flags, mode);
	/* O_PATH | O_NOFOLLOW opens a link itself (on both ways): refused too. */
	if (fd >= 0 && (flags & O_PATH)) {
		struct stat st;

		if (fstat(fd, &st) < 0 || S_ISLNK(st.st_mode)) {
			close(fd);
			errno = ELOOP;
			return -1;
		}
	}
	return fd;
}

/* How the walk opens: the resolver (_M_*), open's flags and mode, mkdir of missing ones. */
struct _how {
	int m;
	int flags;
	mode_t mode;
	int mk;
};

/* The walk: one step per component of norm, making missing ones with mkdir (h->mk). */
static int _walk(const struct _how *h, int rootfd, char *norm, const char *path, char *err,
		 size_t errlen)
{
	int m = h->m, flags = h->flags, mk = h->mk;
	mode_t mode = h->mode;
	char *comp = norm, *slash;
	int cur = rootfd, next, e;

	for (;;) {
		int last, f;

		slash = strchr(comp, '/');
		last = slash == NULL;
		if (slash)
			*slash = '\0';
		/* O_PATH: a directory the owner may search but not list is crossed. */
		f = last ? flags : O_PATH | O_DIRECTORY;
		next = _step(m, cur, comp, f, mode);
		if (next < 0 && errno == ENOENT && mk) {
			if (mkdirat(cur, comp, mode) < 0 && errno != EEXIST) {
				e = errno;
				_err(err, errlen, "cannot create '%s' in '%s': %s", comp, path,
				     strerror(e));
				goto fail;
			}
			/* Opened again: whatever is there now (ours, or a racing
			   creator's) passes the same no-link check. */
			next = _step(m, cur, comp, f, mode);
		}
		if (next < 0) {
			e = _why(cur, comp, path, errno, err, errlen);
			goto fail;
		}
		if (cur != rootfd)
			close(cur);
		cur = next;
		if (last)
			return cur;
		comp = slash + 1;
	}
fail:
	if (cur != rootfd)
		close(cur);
	errno = e;
	return -1;
}

int resolve_open(int rootfd, const char *path, int flags, mode_t mode, unsigned opts,
		 char *err, size_t errlen)
{
	char norm[PATH_MAX];
	int m = _choose(), mk = (opts & RESOLVE_OPEN_MKDIR) != 0, fd, e;

	if (!path || (mk && (flags & O_CREAT))) {
		_err(err, errlen, "resolve_open: %s", !path ? "no path" :
		     "O_CREAT and RESOLVE_OPEN_MKDIR together");
		errno = EINVAL;
		return -1;
	}
	if (_normalise(path, norm, sizeof(norm), err, errlen) < 0)
		return -1;
	if (mk)
		flags |= O_DIRECTORY;
	if (norm[0] == '\0') {	/* the root itself: reopened with flags */
		fd = openat(rootfd, ".", flags | O_CLOEXEC, mode);
		if (fd < 0) {
			e = errno;
			_err(err, errlen, "cannot open '%s' (the directory itself): %s",
			     path, strerror(e));
			errno = e;
		}
		return fd;
	}
	if (m == _M_WALK || mk)
		return _walk(&(struct _how){ m, flags, mode, mk }, rootfd, norm, path, err, errlen);
	fd = _step(m, rootfd, norm, flags, mode);
	if (fd < 0) {
		e = _diagnose(rootfd, norm, path, errno, err, errlen);
		errno = e;
	}
	return fd;
}
