/*
 * doctor_fs.c - the doctor's scratch checks (see doctor.h): each scratch
 * root takes the configured xattr namespace, and its per-user directories
 * belong to their users and are not writable by others.
 *
 * The xattr probe is a fresh file made with O_EXCL | O_NOFOLLOW and removed
 * at once; nothing else on scratch is written. Directories are read with
 * lstat only: a symlink is reported, never followed.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "doctor.h"

#define MAX_ENTRIES 100000   /* per root: enough for any site's user list */

static const char *_xattr_hint(int e, int trusted)
{
	if (e == ENOTSUP)
		return trusted ? "this file system does not keep trusted.* xattrs: use "
			"XattrNamespace=user (and xattr_ns=user) or a file system that does" :
			"enable user xattrs on this file system (ext4/XFS: on by default; "
			"mount option user_xattr; Lustre: -o user_xattr; NFS: v4.2 with "
			"xattr support) or use XattrNamespace=trusted";
	if (e == EPERM || e == EACCES)
		return trusted ? "trusted.* needs root (CAP_SYS_ADMIN): run the doctor as root" :
			"run the doctor as root, or as a user with a directory on this root";
	return "check the file system's health and mount options";
}

/* Probe one directory: 0 ok, else an errno with what failed in step. */
static int _probe(const char *dir, const char *name, const char **step)
{
	char path[PATH_MAX], v[4];
	int fd, e = 0;

	if (snprintf(path, sizeof(path), "%s/.stagehand-doctor.%ld", dir, (long)getpid()) >=
	    (int)sizeof(path))
		return *step = "path", ENAMETOOLONG;
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return *step = "create a probe file", errno;
	if (fsetxattr(fd, name, "ok", 2, 0) < 0) {
		e = errno;
		*step = "fsetxattr";
	} else if (fgetxattr(fd, name, v, sizeof(v)) != 2 || memcmp(v, "ok", 2) != 0) {
		e = errno ? errno : EIO;
		*step = "fgetxattr";
	}
	close(fd);
	unlink(path);
	return e;
}

void doctor_check_xattrs(struct doctor *dr)
{
	const struct conf *c = dr->conf;
	int trusted = c->xattr_ns == CONF_XATTR_TRUSTED;
	char name[64];

	snprintf(name, sizeof(name), "%sstagehand.doctor", conf_xattr_prefix(c));
	if (!c->scratch_roots[0]) {
		doctor_add(dr, "xattr", DOC_WARN, "list the scratch file systems in ScratchRoots= "
			   "so they can be checked", "%s sets no ScratchRoots: nothing to probe",
			   dr->conf_path);
		return;
	}
	if (trusted && geteuid() != 0) {
		doctor_add(dr, "xattr", DOC_SKIP, NULL, "XattrNamespace=trusted: only root can "
			   "probe trusted.* xattrs; run the doctor as root");
		return;
	}
	for (char **r = c->scratch_roots; *r; r++) {
		char dir[PATH_MAX];
		const char *step = "";
		int e;
		struct passwd *pw = geteuid() ? getpwuid(geteuid()) : NULL;

		/* An ordinary user probes in their own directory below the root. */
		if (!pw || snprintf(dir, sizeof(dir), "%s/%s", *r, pw->pw_name) >= (int)sizeof(dir))
			snprintf(dir, sizeof(dir), "%s", *r);
		e = _probe(dir, name, &step);
		if (e)
			doctor_add(dr, "xattr", DOC_FAIL, _xattr_hint(e, trusted), "%s: %s on a "
				   "probe file in %s failed: %s (labels are %s*)", *r, step, dir,
				   strerror(e), conf_xattr_prefix(c));
		else
			doctor_add(dr, "xattr", DOC_OK, NULL, "%s keeps %s xattrs", *r, name);
	}
}

/* One per-user directory: 0 fine, 1 a problem was added. */
static int _user_dir(struct doctor *dr, const char *root, const char *ent)
{
	char path[PATH_MAX];
	struct passwd *pw = getpwnam(ent);
	struct stat st;

	if (!pw || snprintf(path, sizeof(path), "%s/%s", root, ent) >= (int)sizeof(path) ||
	    lstat(path, &st) < 0)
		return 0;
	if (S_ISLNK(st.st_mode)) {
		doctor_add(dr, "scratch", DOC_FAIL, "replace the symlink with a directory owned "
			   "by the user (mode 0700); the daemon refuses to follow it",
			   "%s is a symlink, not %s's directory", path, ent);
		return 1;
	}
	if (!S_ISDIR(st.st_mode))
		return 0;
	if (st.st_uid != pw->pw_uid) {
		doctor_add(dr, "scratch", DOC_FAIL, "chown the directory to its user "
			   "(chown USER: DIR) or remove it so the daemon makes it (CreateUserDirs=yes)",
			   "%s belongs to uid %u, not to %s (uid %u)", path, (unsigned)st.st_uid,
			   ent, (unsigned)pw->pw_uid);
		return 1;
	}
	if (st.st_mode & S_IWOTH) {
		doctor_add(dr, "scratch", DOC_FAIL, "chmod o-w the directory (the daemon makes "
			   "them 0700)", "%s is writable by every user (mode %04o)", path,
			   (unsigned)(st.st_mode & 07777));
		return 1;
	}
	return 0;
}

void doctor_check_scratch(struct doctor *dr)
{
	const struct conf *c = dr->conf;

	for (char **r = c->scratch_roots; *r; r++) {
		struct stat st;
		DIR *d;
		struct dirent *e;
		int n = 0, bad = 0, users = 0;

		if (lstat(*r, &st) < 0 || !S_ISDIR(st.st_mode)) {
			doctor_add(dr, "scratch", DOC_FAIL, "mount the scratch file system, or fix "
				   "ScratchRoots= in stagehand.conf", "%s: %s", *r,
				   errno && !S_ISDIR(st.st_mode) ? strerror(errno) : "not a directory");
			continue;
		}
		if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
			doctor_add(dr, "scratch", DOC_FAIL, "chmod o-w (or +t) the root: users must "
				   "not rename or remove each other's directories",
				   "%s is writable by every user without the sticky bit (mode %04o)", *r,
				   (unsigned)(st.st_mode & 07777));
			bad++;
		}
		d = opendir(*r);
		if (!d) {
			doctor_add(dr, "scratch", DOC_WARN, "run the doctor as root to check every "
				   "user's directory", "cannot list %s: %s", *r, strerror(errno));
			continue;
		}
		while ((e = readdir(d)) && n++ < MAX_ENTRIES) {
			if (e->d_name[0] == '.')
				continue;
			if (getpwnam(e->d_name))
				users++;
			bad += _user_dir(dr, *r, e->d_name);
		}
		closedir(d);
		if (geteuid() != 0 && !c->create_user_dirs) {
			struct passwd *pw = getpwuid(geteuid());
			char mine[PATH_MAX];

			if (pw && snprintf(mine, sizeof(mine), "%s/%s", *r, pw->pw_name) <
			    (int)sizeof(mine) && lstat(mine, &st) < 0) {
				doctor_add(dr, "scratch", DOC_FAIL, "ask the admins to make it, or set "
					   "CreateUserDirs=yes", "%s: %s (CreateUserDirs=no: nothing "
					   "makes it)", mine, strerror(errno));
				bad++;
			}
		}
		if (!bad)
			doctor_add(dr, "scratch", DOC_OK, NULL, "%s: %d per-user director%s owned by "
				   "their users, none writable by others", *r, users,
				   users == 1 ? "y" : "ies");
	}
}
