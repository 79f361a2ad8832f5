/* mover_child.c - see mover_child.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdclose.h"
#include "grow.h"
#include "mover_child.h"
#include "worker.h"

#define CANCEL_POLL_MS 200
#define READ_CHUNK (1 << 16)

/* In the child, before anything of the owner's is opened; _exits on failure. */
static void _become(const struct queue_request *r, int wfd, const gid_t *groups, int ngroups,
		    pid_t parent, const char *name)
{
	signal(SIGPIPE, SIG_IGN);
	/* Nothing of the daemon's stays open as the owner: the database, the
	   API's sockets, the worker spawner's socket (whose end it would also
	   keep from closing), other children's pipes. Only the pipe, as 3. */
	if (wfd != 3) {
		if (dup2(wfd, 3) < 0)
			_exit(MOVER_CHILD_SETUP);
		wfd = 3;
	}
	if (fd_close_from(4) < 0)
		_exit(MOVER_CHILD_SETUP);
	if (worker_become(r->uid, r->gid, groups, ngroups) < 0)
		_exit(MOVER_CHILD_BECOME);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* The daemon died before the signal was set: nobody reads. */
	if (getppid() != parent)
		_exit(MOVER_CHILD_ORPHAN);
	prctl(PR_SET_NAME, name);	/* what ps and top show for it */
}

int mover_child_start(const struct queue_request *r, const char *name, mover_child_fn body,
		      const void *arg, pid_t *pid, int *fd, char *err, size_t errlen)
{
	gid_t groups[256];
	int ngroups = 256, fds[2];
	pid_t me = getpid();

	/* The owner's groups come from NSS, which a child of a threaded process must not ask. */
	worker_groups(r->uid, r->gid, groups, &ngroups);
	if (pipe2(fds, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "pipe: %s", strerror(errno));
		return -1;
	}
	*pid = fork();
	if (*pid < 0) {
		snprintf(err, errlen, "fork: %s", strerror(errno));
		close(fds[0]);
		close(fds[1]);
		return -1;
	}
	if (*pid == 0) {
		close(fds[0]);
		_become(r, fds[1], groups, ngroups, me, name);
		body(r, 3, arg);
		_exit(MOVER_CHILD_SETUP);	/* body ends with _exit; never reached */
	}
	close(fds[1]);
	*fd = fds[0];
	return 0;
}

/* The reading half of mover_child_finish. */
static int _read_all(int fd, pid_t pid, const _Atomic int *cancel, char **buf, size_t *len)
{
	size_t cap = READ_CHUNK;
	int killed = 0;

	*len = 0;
	*buf = malloc(cap);
	if (!*buf)
		return -1;
	for (;;) {
		ssize_t n;

		if (grow_array((void **)buf, &cap, *len + 1, 1, READ_CHUNK) < 0)
			return -1;
		if (!killed && cancel) {
			struct pollfd pf = { .fd = fd, .events = POLLIN };

			if (atomic_load(cancel)) {
				kill(pid, SIGKILL);
				killed = 1;
			} else if (poll(&pf, 1, CANCEL_POLL_MS) == 0) {
				continue;
			}
		}
		n = read(fd, *buf + *len, cap - *len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		if (n == 0)
			return killed;
		*len += (size_t)n;
	}
}

int mover_child_finish(int fd, pid_t pid, const _Atomic int *cancel, char **buf, size_t *len,
		       int *status)
{
	int rc = _read_all(fd, pid, cancel, buf, len), e = errno;

	close(fd);
	*status = 0;
	while (waitpid(pid, status, 0) < 0 && errno == EINTR)
		;
	errno = e;	/* the caller's message is about the read */
	return rc;
}

void mover_child_put(FILE *out, const void *head, size_t hlen, const char *text, uint16_t len)
{
	fwrite(head, hlen, 1, out);
	fwrite(&len, sizeof(len), 1, out);
	fwrite(text, 1, len, out);
}

int mover_child_next(const char *buf, size_t len, size_t *off, void *head, size_t hlen,
		     char *text, size_t cap)
{
	uint16_t n;

	if (*off + hlen + sizeof(n) > len)
		return 0;
	memcpy(head, buf + *off, hlen);
	memcpy(&n, buf + *off + hlen, sizeof(n));
	*off += hlen + sizeof(n);
	if (n >= cap || *off + n > len)
		return 0;
	memcpy(text, buf + *off, n);
	text[n] = '\0';
	*off += n;
	return 1;
}
