/*
 * test_fdclose.c - common/fdclose.c: every descriptor from a number up is
 * closed and the ones below it kept, by close_range and by the
 * /proc/self/fd listing alone; close_range refused (a seccomp filter
 * returning EPERM for it, as an old one does) still closes them all through
 * the listing; and a listing that cannot be read (a tmpfs over /proc, root
 * only) reports its errno instead of success. Each case runs in a child,
 * since it closes the process's descriptors.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdclose.h"
#include "tests/tap.h"

/* The numbers the cases open: some below 10, one past 100 and one far up. */
static const int _fds[] = { 5, 7, 9, 12, 130, 1000 };
#define NFDS (sizeof(_fds) / sizeof(_fds[0]))

static int _open_fds(void)
{
	for (size_t i = 0; i < NFDS; i++)
		if (dup2(2, _fds[i]) != _fds[i])
			return -1;
	return 0;
}

/* Exit status of a child: 0 when fds >= 10 are closed and 5, 7, 9 open. */
static int _check_left(void)
{
	for (size_t i = 0; i < NFDS; i++) {
		int open_now = fcntl(_fds[i], F_GETFD) >= 0;

		if (open_now != (_fds[i] < 10))
			return 10 + (int)i;
	}
	return 0;
}

/* close_range answers EPERM; everything else allowed. */
static int _refuse_close_range(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_close_range, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

enum { CASE_RANGE, CASE_LISTING, CASE_REFUSED, CASE_NO_PROC };

static int _child(int which)
{
	if (_open_fds() < 0)
		return 2;
	switch (which) {
	case CASE_RANGE:
		if (fd_close_from(10) < 0)
			return 3;
		break;
	case CASE_LISTING:
		if (fd__close_from_listing(10) < 0)
			return 3;
		break;
	case CASE_REFUSED:
		if (_refuse_close_range() < 0)
			return 4;
		if (syscall(SYS_close_range, 10U, ~0U, 0) == 0 || errno != EPERM)
			return 5;	/* the filter did not take */
		if (fd_close_from(10) < 0)
			return 3;
		break;
	case CASE_NO_PROC:
		if (unshare(CLONE_NEWNS) < 0 ||
		    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ||
		    mount("none", "/proc", "tmpfs", 0, NULL) < 0)
			return 77;
		if (fd__close_from_listing(10) == 0)
			return 6;	/* success claimed without a listing */
		if (errno != ENOENT)
			return 7;
		return fcntl(1000, F_GETFD) >= 0 ? 0 : 8;	/* and nothing claimed closed */
	}
	return _check_left();
}

static int _run(int which)
{
	pid_t pid = fork();
	int st = 0;

	if (pid == 0)
		_exit(_child(which));
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

int main(void)
{
	int rc;

	rc = _run(CASE_RANGE);
	ok(rc == 0, "close_range: 12, 130 and 1000 closed, 5, 7 and 9 kept (child %d)", rc);
	rc = _run(CASE_LISTING);
	ok(rc == 0, "the /proc/self/fd listing alone: the same (child %d)", rc);
	rc = _run(CASE_REFUSED);
	ok(rc == 0, "close_range refused with EPERM by a seccomp filter: all closed through "
	   "the listing (child %d)", rc);
	rc = _run(CASE_NO_PROC);
	if (rc == 77)
		tap_diag("skipped the unreadable listing: no mount namespace here (not root?)");
	else
		ok(rc == 0, "no /proc/self/fd: -1 with ENOENT, not a success (child %d)", rc);
	return tap_done();
}
