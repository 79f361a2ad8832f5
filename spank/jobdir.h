/*
 * jobdir.h - create a job's declared directories and label them.
 *
 * Owns: "mkdir -p" below a base directory that never follows a symlink
 * (resolve_open with RESOLVE_OPEN_MKDIR, common/resolve.h), and the
 * user.stagehand.* labels written on the directory's own descriptor.
 * Must never: follow a symlink, climb above the base ('..' is refused), or
 * change the identity it runs with (jobdir_open's caller is already the job
 * owner; jobdir_label_owned's caller is root and is handed a descriptor).
 */
#ifndef STAGEHAND_JOBDIR_H
#define STAGEHAND_JOBDIR_H

#include <stddef.h>
#include <sys/types.h>

/*
 * Open (creating what is missing, mode 0777 & ~umask) the directory path
 * below basefd. path may be absolute (then walked from "/"; basefd unused)
 * or relative to basefd (AT_FDCWD for the working directory). Returns an
 * O_DIRECTORY descriptor owned by the caller, or -1 with a message naming
 * the component that failed in err.
 */
int jobdir_open(int basefd, const char *path, char *err, size_t errlen);

/*
 * Write <ns>.stagehand.policy = policy, <ns>.stagehand.job = job_id and
 * <ns>.stagehand.owner = uid on the directory fd. Returns 0 or -1 with err.
 */
int jobdir_label(int fd, const char *ns, const char *policy, unsigned long job_id,
		 uid_t uid, char *err, size_t errlen);

/*
 * Root's half of trusted labelling: fd is a directory the job owner opened
 * (never a path root resolves). Refuses unless fstat says it is a directory
 * owned by uid; then labels it as jobdir_label does. Returns 0, or -1 with
 * err saying why nothing was written.
 */
int jobdir_label_owned(int fd, const char *ns, const char *policy,
		       unsigned long job_id, uid_t uid, char *err, size_t errlen);

#endif /* STAGEHAND_JOBDIR_H */
