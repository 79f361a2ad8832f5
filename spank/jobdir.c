/*
 * jobdir.c - symlink-safe mkdir -p and xattr labels (see jobdir.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/resolve.h"
#include "common/xattr.h"
#include "jobdir.h"

int jobdir_open(int basefd, const char *path, char *err, size_t errlen)
{
	char why[512];
	int root = basefd, fd, e;

	if (path == NULL || *path == '\0') {
		snprintf(err, errlen, "empty directory name");
		return -1;
	}
	if (*path == '/') {
		root = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (root < 0) {
			snprintf(err, errlen, "cannot open the starting directory of '%s': %s",
				 path, strerror(errno));
			return -1;
		}
		while (*path == '/')
			path++;
	}
	fd = resolve_open(root, path, O_RDONLY, 0777, RESOLVE_OPEN_MKDIR, why, sizeof(why));
	e = errno;
	if (root != basefd)
		close(root);
	if (fd < 0 && e == ELOOP)
		snprintf(err, errlen, "%s; stagehand does not follow links when it creates job "
			 "directories: remove the link or name a real directory", why);
	else if (fd < 0)
		snprintf(err, errlen, "%s", why);
	errno = e;
	return fd;
}

int jobdir_label(int fd, const char *ns, const char *policy, unsigned long job_id,
		 uid_t uid, char *err, size_t errlen)
{
	char num[32];

	if (xattr_set_label(fd, ns, "policy", policy, err, errlen) < 0)
		return -1;
	snprintf(num, sizeof(num), "%lu", job_id);
	if (xattr_set_label(fd, ns, "job", num, err, errlen) < 0)
		return -1;
	snprintf(num, sizeof(num), "%lu", (unsigned long)uid);
	return xattr_set_label(fd, ns, "owner", num, err, errlen);
}

int jobdir_label_owned(int fd, const char *ns, const char *policy,
		       unsigned long job_id, uid_t uid, char *err, size_t errlen)
{
	struct stat st;

	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "cannot inspect the directory before labelling it: %s",
			 strerror(errno));
		return -1;
	}
	if (!S_ISDIR(st.st_mode)) {
		snprintf(err, errlen, "not a directory; not labelled");
		return -1;
	}
	/* Root writes these labels: only on what the job owner owns, so a job
	 * cannot get an unforgeable label put on someone else's directory. */
	if (st.st_uid != uid) {
		snprintf(err, errlen, "the directory is owned by uid %lu, not by the job "
			 "owner (uid %lu); stagehand labels only the owner's directories: "
			 "name a directory you own", (unsigned long)st.st_uid,
			 (unsigned long)uid);
		return -1;
	}
	return jobdir_label(fd, ns, policy, job_id, uid, err, errlen);
}
