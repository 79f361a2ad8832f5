/*
 * userdir.h - the per-user directories below the site's roots.
 *
 * Owns: ArchiveRoot/USER and ScratchRoots/USER, made by root for a user when
 * a request needs them (CreateUserDirs=yes): mkdirat() relative to an
 * O_DIRECTORY|O_NOFOLLOW descriptor of the root, fchownat() with
 * AT_SYMLINK_NOFOLLOW, mode 0700. Also the admin's view of the roots for
 * stagehandd --check-config.
 * Must never: create anything else as root, follow a symlink below a root,
 * or accept a USER entry that is not a directory owned by USER.
 */
#ifndef STAGEHAND_USERDIR_H
#define STAGEHAND_USERDIR_H

#include <stddef.h>
#include <stdio.h>
#include <sys/types.h>

#include "conf.h"

/*
 * Make sure root/user is a directory owned by uid: made (mode 0700, group
 * gid) when missing. Returns 1 when it was made, 0 when it was there
 * already, -1 with err saying what is wrong and what to do.
 */
int userdir_ensure(const char *root, const char *user, uid_t uid, gid_t gid, char *err,
		   size_t errlen);

/*
 * For a request of user (uid, gid) writing to dest: the root/USER directory
 * of ArchiveRoot or a ScratchRoot that dest lies in, made when missing and
 * c->create_user_dirs is set. Returns 0 (nothing to do, or done), or -1 with
 * err.
 */
int userdir_for_dest(const struct conf *c, const char *dest, const char *user, uid_t uid,
		     gid_t gid, char *err, size_t errlen);

/*
 * --check-config: one "warning: ..." line on out for each root users cannot
 * reach or use (missing, not a directory, no search permission for others,
 * not writable by users while CreateUserDirs=no). Returns the count.
 */
int userdir_check_roots(const struct conf *c, FILE *out);

#endif /* STAGEHAND_USERDIR_H */
