/* durable.c - see durable.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <unistd.h>

#include "durable.h"

int durable_tmpname(char *out, size_t outlen, const char *name, int64_t id)
{
	int n = snprintf(out, outlen, ".%s.stagehand-%lld", name, (long long)id);

	if (n < 0 || (size_t)n >= outlen || n > NAME_MAX) {
		unsigned h = 5381;

		for (const char *p = name; *p; p++)
			h = h * 33 + (unsigned char)*p;
		n = snprintf(out, outlen, ".stagehand-%lld-%08x", (long long)id, h);
	}
	return (n < 0 || (size_t)n >= outlen) ? -1 : 0;
}

int durable_create(int dirfd, const char *tmp, int access)
{
	int flags = access | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
	int fd = openat(dirfd, tmp, flags, 0600);

	if (fd < 0 && errno == EEXIST && unlinkat(dirfd, tmp, 0) == 0)
		fd = openat(dirfd, tmp, flags, 0600);
	return fd;
}

int durable_commit(int dirfd, const char *tmp, const char *name, int fd, unsigned flags)
{
	int e = 0;

	if (fd >= 0 && (flags & DURABLE_FSYNC) && fsync(fd) < 0)
		e = errno;
	if (fd >= 0 && close(fd) < 0 && !e)
		e = errno;
	if (!e && renameat(dirfd, tmp, dirfd, name) < 0)
		e = errno;
	if (!e && (flags & DURABLE_DIRSYNC) && fsync(dirfd) < 0)
		e = errno;
	if (e)
		unlinkat(dirfd, tmp, 0);
	return e;
}
