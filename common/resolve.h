/*
 * resolve.h - the one path resolver: open a path below a directory
 * descriptor without following any link.
 *
 * Owns: turning a relative path into a descriptor below a root the caller
 * has opened, such that no component (middle or last) is a symbolic link,
 * /proc's "magic" links included, and nothing above the root is reached;
 * optionally making the missing directories on the way (mkdir -p). The
 * daemon's transfer workers, the SPANK plugin's job directories and the
 * CLI's restore all open user paths through resolve_open(), and nothing
 * else walks a user path.
 *
 * Must never: follow a link, climb above the root ('..' is refused outright,
 * even where it would stay below), take an absolute path, or change the
 * identity it runs with: callers run as the owner of the data already (a
 * worker after worker_become, the plugin's dropped child, the CLI as the
 * user), so the kernel's permission checks are the owner's.
 *
 * Two ways to do it, chosen once per process:
 *   openat2   one openat2(RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH |
 *             RESOLVE_NO_MAGICLINKS) call: the kernel refuses a link in any
 *             component (Linux 5.6 and later);
 *   walk      one openat(O_NOFOLLOW) per component from the root, the middle
 *             ones with O_PATH | O_DIRECTORY (search permission is enough to
 *             cross a directory, as for a path lookup).
 * openat2 is used when a probe at the first call says the kernel has it (no
 * ENOSYS, E2BIG, EINVAL or EPERM, the last from seccomp filters that predate
 * it); after a good probe every openat2 error is the answer, never a reason
 * to try the walk. STAGEHAND_RESOLVE=walk in the environment, read at that
 * first call, forces the walk (tests run both; a site may too): both are
 * equally strict, and the unit tests hold them to the same results.
 *
 * What a path means, the same on both ways:
 *   - relative to the root; an absolute path is refused (EINVAL);
 *   - a '..' component is refused (EINVAL);
 *   - '.' and empty components ("a//b", a trailing '/') are ignored; a path
 *     of nothing else ("", ".", "./") names the root itself, reopened;
 *   - a component longer than NAME_MAX, or a path of PATH_MAX bytes or more
 *     after that, is refused (ENAMETOOLONG);
 *   - a symbolic link in any component: ELOOP, the message naming the
 *     component and its target; a non-directory in a middle component:
 *     ENOTDIR.
 * A directory swapped for a link between two calls is refused by the second:
 * each call resolves afresh. Within one call, openat2 is atomic; the walk
 * holds a descriptor per step, so a swap behind it changes nothing.
 *
 * Hard links are not links this can refuse: a hard link is the file itself
 * under a second name, indistinguishable from the first. The kernel keeps a
 * user from hard-linking what they can neither read nor write
 * (fs.protected_hardlinks=1, see 0500-hostile.bats), and every caller acts
 * with the owner's identity, so what a hard link reaches is within the
 * owner's rights anyway. Where a second name would still matter (a
 * temporary file another process could also hold), the caller checks
 * st_nlink == 1 after the open (daemon/engine/xfer_local.c's resume file).
 *
 * Why hand-written: neither libc nor any library we could link offers
 * "open below a descriptor, following no link, with a fallback for kernels
 * without openat2": libpathrs (Rust, with a C API) does this, but Debian 12
 * has no package of it and it would bring a Rust library into slurmstepd;
 * glibc 2.36 has only the raw system call, and no fallback.
 */
#ifndef STAGEHAND_RESOLVE_H
#define STAGEHAND_RESOLVE_H

#include <stddef.h>
#include <sys/types.h>

/*
 * opts for resolve_open. RESOLVE_OPEN_MKDIR: path names a directory; every
 * missing component, the last included, is made with mkdirat(mode) (mode is
 * subject to the umask) and the last is opened with flags | O_DIRECTORY.
 * With it, each component is one step (openat2 or openat), since each may
 * have to be made.
 */
#define RESOLVE_OPEN_MKDIR 0x1u

/*
 * Open path below the directory rootfd (or AT_FDCWD) with the open(2) flags
 * (O_NOFOLLOW and O_CLOEXEC are always added; with O_CREAT, mode is the new
 * file's mode), never following a link (see above). Returns a descriptor the
 * caller owns, or -1 with errno set and, when err is not NULL, a message in
 * err naming the component that failed and how: "'results' in
 * 'results/run1' is a symbolic link (to '/etc')", "'a' in 'a/b' exists and
 * is not a directory", "cannot open 'b' in 'a/b': Permission denied",
 * "cannot create 'x' in 'ro/x': ...", "'..' in '../x' is not allowed".
 */
int resolve_open(int rootfd, const char *path, int flags, mode_t mode, unsigned opts,
		 char *err, size_t errlen);

/* The way resolve_open works in this process: "openat2" or "walk" (decided now if not yet). */
const char *resolve_method(void);

/*
 * For tests: 1 forces the walk from now on in this process; 0 goes back to
 * the automatic choice (probe and STAGEHAND_RESOLVE, decided again).
 */
void resolve_force_walk(int on);

#endif /* STAGEHAND_RESOLVE_H */
