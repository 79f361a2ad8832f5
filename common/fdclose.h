/*
 * fdclose.h - close every descriptor from a number up, or fail saying so:
 * what a process forked from the daemon does before it runs as a job's
 * owner or holds on to a socket (a worker, the worker spawner, the mover
 * planner's listing child).
 *
 * Why not closefrom(3): glibc's aborts the process when it cannot close
 * them, and close_range(2) alone fails on kernels before 5.9 and under
 * seccomp filters older than the call (SystemCallFilter= with an old
 * libseccomp), where it returns ENOSYS or EPERM and closes nothing. The
 * callers need the failure, to report it and stop before touching anything.
 */
#ifndef STAGEHAND_FDCLOSE_H
#define STAGEHAND_FDCLOSE_H

/*
 * Close every descriptor >= low: close_range(2), else each one listed in
 * /proc/self/fd. 0 when none is left open; -1 with errno (the listing's,
 * or EMFILE when one would not close) when one may be.
 */
int fd_close_from(int low);

/* The /proc/self/fd way alone (what fd_close_from falls back to): for tests. */
int fd__close_from_listing(int low);

#endif /* STAGEHAND_FDCLOSE_H */
