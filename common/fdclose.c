/*
 * fdclose.c - see fdclose.h.
 *
 * Must never: allocate (callers run in a child forked from a threaded
 * process), or report success while a descriptor >= low is still open.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fdclose.h"

/* Parse a /proc/self/fd entry's name; -1 for "." and "..". */
static int _fd_of(const char *name)
{
	int v = 0;

	if (*name < '0' || *name > '9')
		return -1;
	for (; *name; name++) {
		if (*name < '0' || *name > '9' || v > 100000000)
			return -1;
		v = v * 10 + (*name - '0');
	}
	return v;
}

int fd__close_from_listing(int low)
{
	char buf[4096];
	int err = EMFILE;	/* what is left when a pass still finds one at the end */
	int dfd = open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (dfd < 0)
		return -1;
	/* Listed again until a pass finds none: closing while the directory is
	   read may move its entries. */
	for (int pass = 0; pass < 64; pass++) {
		int found = 0;
		ssize_t n;

		if (lseek(dfd, 0, SEEK_SET) < 0) {
			err = errno;
			break;
		}
		while ((n = getdents64(dfd, buf, sizeof(buf))) > 0) {
			for (ssize_t off = 0; off < n;) {
				struct dirent64 *e = (struct dirent64 *)(buf + off);
				int fd = _fd_of(e->d_name);

				off += e->d_reclen;
				if (fd >= low && fd != dfd) {
					found = 1;
					close(fd);
				}
			}
		}
		if (n < 0) {
			err = errno;
			break;
		}
		if (!found) {
			close(dfd);
			return 0;
		}
	}
	close(dfd);
	errno = err;
	return -1;
}

int fd_close_from(int low)
{
	if (syscall(SYS_close_range, (unsigned)low, ~0U, 0) == 0)
		return 0;
	return fd__close_from_listing(low);
}
