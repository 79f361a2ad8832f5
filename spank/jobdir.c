/*
 * jobdir.c - symlink-safe mkdir -p and xattr labels (see jobdir.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/xattr.h"
#include "jobdir.h"

#define OPEN_DIR_FLAGS (O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)

/* Explain why openat() of one component failed. */
static void _why(int dirfd, const char *comp, const char *path, int e,
		 char *err, size_t errlen)
{
	struct stat st;

	if ((e == ELOOP || e == ENOTDIR) &&
	    fstatat(dirfd, comp, &st, AT_SYMLINK_NOFOLLOW) == 0) {
		if (S_ISLNK(st.st_mode)) {
			snprintf(err, errlen, "'%s' in '%s' is a symbolic link; stagehand "
				 "does not follow links when it creates job directories: "
				 "remove the link or name a real directory", comp, path);
			return;
		}
		if (!S_ISDIR(st.st_mode)) {
			snprintf(err, errlen, "'%s' in '%s' exists and is not a directory",
				 comp, path);
			return;
		}
	}
	snprintf(err, errlen, "cannot open '%s' in '%s': %s", comp, path, strerror(e));
}

int jobdir_open(int basefd, const char *path, char *err, size_t errlen)
{
	char comp[256];
	const char *p = path;
	int cur;

	if (path == NULL || *path == '\0') {
		snprintf(err, errlen, "empty directory name");
		return -1;
	}
	if (*p == '/') {
		cur = open("/", OPEN_DIR_FLAGS);
		while (*p == '/')
			p++;
	} else {
		cur = openat(basefd, ".", OPEN_DIR_FLAGS);
	}
	if (cur < 0) {
		snprintf(err, errlen, "cannot open the starting directory of '%s': %s",
			 path, strerror(errno));
		return -1;
	}
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);
		if (n >= sizeof(comp)) {
			snprintf(err, errlen, "a component of '%s' is longer than %zu bytes",
				 path, sizeof(comp) - 1);
			close(cur);
			return -1;
		}
		memcpy(comp, p, n);
		comp[n] = '\0';
		p += n;
		while (*p == '/')
			p++;
		if (n == 0 || strcmp(comp, ".") == 0)
			continue;
		if (strcmp(comp, "..") == 0) {
			snprintf(err, errlen, "'..' in '%s' is not allowed", path);
			close(cur);
			return -1;
		}
		int next = openat(cur, comp, OPEN_DIR_FLAGS);
		if (next < 0 && errno == ENOENT) {
			if (mkdirat(cur, comp, 0777) < 0 && errno != EEXIST) {
				snprintf(err, errlen, "cannot create '%s' in '%s': %s", comp,
					 path, strerror(errno));
				close(cur);
				return -1;
			}
			/* Re-open: whatever is there now (ours, or a racing
			 * creator's) passes the same no-link check. */
			next = openat(cur, comp, OPEN_DIR_FLAGS);
		}
		if (next < 0) {
			_why(cur, comp, path, errno, err, errlen);
			close(cur);
			return -1;
		}
		close(cur);
		cur = next;
	}
	return cur;
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
