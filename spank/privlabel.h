/*
 * privlabel.h - job directories with root-only (trusted.*) labels.
 *
 * Owns: the split used when labels must be unforgeable. A child process
 * that has irrevocably become the job owner (supplementary groups, gid and
 * uid all set, root not regainable) creates each directory with jobdir_open
 * and hands the open descriptor to the root caller over a socketpair
 * (SCM_RIGHTS). Root then labels that descriptor with jobdir_label_owned:
 * a directory, owned by the job owner, or nothing is written.
 *
 * Must never: resolve a user path as root (root only ever sees descriptors
 * the owner opened), follow a symlink, label what the owner does not own,
 * or exit the calling process (the child leaves with _exit).
 */
#ifndef STAGEHAND_PRIVLABEL_H
#define STAGEHAND_PRIVLABEL_H

#include <stddef.h>
#include <sys/types.h>

/* One directory to create and label. */
struct privlabel_dir {
	const char *path;       /* relative to the base directory, or absolute
				   (walked from "/") */
	const char *policy;     /* "exempt" or "pending" */
};

/* Who creates the directories. */
struct privlabel_owner {
	uid_t uid;
	gid_t gid;
	const gid_t *groups;    /* supplementary groups (borrowed) */
	size_t ngroups;
	int umask;              /* umask for the creator, or -1 to keep the
				   caller's */
};

/* The labels the directories get, and how long making them may take. */
struct privlabel_run {
	const char *ns;         /* the xattr namespace: "trusted" (borrowed) */
	unsigned long job_id;
	int timeout_ms;         /* the whole run (the creator is killed after it) */
};

/*
 * As root: create dirs[0..n) below base (opened by the owner) and label each
 * with <run->ns>.stagehand.{policy,job,owner}. Stops at the first problem.
 * Returns 0, or -1 with err and *failed set to the index of the directory
 * that failed, or to n when the failure is not about one directory.
 */
int privlabel_prepare(const char *base, const struct privlabel_dir *dirs, size_t n,
		      const struct privlabel_owner *owner, const struct privlabel_run *run,
		      size_t *failed, char *err, size_t errlen);

#endif /* STAGEHAND_PRIVLABEL_H */
