/* userdir.c - see userdir.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "userdir.h"

int userdir_ensure(const char *root, const char *user, uid_t uid, gid_t gid, char *err,
		   size_t errlen)
{
	struct stat st;
	int rfd, made = 0, e;

	if (!user || !*user || strchr(user, '/') || !strcmp(user, ".") || !strcmp(user, "..")) {
		snprintf(err, errlen, "user name '%s' cannot name a directory below %s",
			 user ? user : "", root);
		return -1;
	}
	rfd = open(root, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (rfd < 0) {
		snprintf(err, errlen, "cannot open %s: %s (it must be a directory, not a "
			 "symbolic link: check stagehand.conf)", root, strerror(errno));
		return -1;
	}
	if (mkdirat(rfd, user, 0700) == 0) {
		made = 1;
		/* The root is the site's (not writable by users, or sticky): nobody
		   but root can replace the entry between these calls. */
		if (fchownat(rfd, user, uid, gid, AT_SYMLINK_NOFOLLOW) < 0) {
			e = errno;
			unlinkat(rfd, user, AT_REMOVEDIR);
			close(rfd);
			snprintf(err, errlen, "cannot give %s/%s to uid %u: %s", root, user,
				 (unsigned)uid, strerror(e));
			return -1;
		}
	} else if (errno != EEXIST) {
		e = errno;
		close(rfd);
		snprintf(err, errlen, "mkdir %s/%s: %s", root, user, strerror(e));
		return -1;
	}
	if (fstatat(rfd, user, &st, AT_SYMLINK_NOFOLLOW) < 0) {
		e = errno;
		close(rfd);
		snprintf(err, errlen, "cannot stat %s/%s: %s", root, user, strerror(e));
		return -1;
	}
	close(rfd);
	if (!S_ISDIR(st.st_mode) || st.st_uid != uid) {
		snprintf(err, errlen, "%s/%s is %s owned by uid %u, not a directory of uid %u: "
			 "not used; the admin must remove or fix it", root, user,
			 S_ISLNK(st.st_mode) ? "a symbolic link" : S_ISDIR(st.st_mode) ?
			 "a directory" : "a file", (unsigned)st.st_uid, (unsigned)uid);
		return -1;
	}
	if (made)
		log_info("made %s/%s for uid %u (mode 0700)", root, user, (unsigned)uid);
	return made;
}

/* root is a prefix of path ending at a component boundary; "/" never counts. */
static int _below(const char *path, const char *root)
{
	size_t n = strlen(root);

	while (n > 1 && root[n - 1] == '/')
		n--;
	return n > 1 && strncmp(path, root, n) == 0 && path[n] == '/';
}

/* path lies in root/user (or is it). */
static int _in_user_dir(const char *path, const char *root, const char *user)
{
	size_t n = strlen(root), ul = strlen(user);

	while (n > 1 && root[n - 1] == '/')
		n--;
	return _below(path, root) && strncmp(path + n + 1, user, ul) == 0 &&
	       (path[n + 1 + ul] == '/' || path[n + 1 + ul] == '\0');
}

int userdir_for_dest(const struct conf *c, const char *dest, const char *user, uid_t uid,
		     gid_t gid, char *err, size_t errlen)
{
	const char *root = NULL;

	if (!c->create_user_dirs || !dest || dest[0] != '/' || !user || uid == 0)
		return 0;
	if (c->archive_root && _in_user_dir(dest, c->archive_root, user))
		root = c->archive_root;
	for (char **r = c->scratch_roots; !root && r && *r; r++)
		if (_in_user_dir(dest, *r, user))
			root = *r;
	if (!root)
		return 0;
	return userdir_ensure(root, user, uid, gid, err, errlen) < 0 ? -1 : 0;
}

static int _check_root(const struct conf *c, const char *key, const char *root, FILE *out)
{
	struct stat st;

	if (lstat(root, &st) < 0) {
		fprintf(out, "warning: %s %s: %s: users' transfers there will fail\n", key, root,
			strerror(errno));
		return 1;
	}
	if (!S_ISDIR(st.st_mode)) {
		fprintf(out, "warning: %s %s is not a directory%s\n", key, root,
			S_ISLNK(st.st_mode) ? " (a symbolic link: name the real directory)" : "");
		return 1;
	}
	if (!(st.st_mode & S_IXOTH)) {
		fprintf(out, "warning: %s %s has mode %04o: users cannot reach it (give it o+x: "
			"0755 owned by root, with CreateUserDirs=yes)\n", key, root,
			(unsigned)(st.st_mode & 07777));
		return 1;
	}
	if (!c->create_user_dirs && !(st.st_mode & S_IWOTH)) {
		fprintf(out, "warning: %s %s has mode %04o and CreateUserDirs=no: users cannot "
			"make their %s/USER directory; make one per user (owner USER, mode 0700) "
			"or set CreateUserDirs=yes\n", key, root, (unsigned)(st.st_mode & 07777),
			root);
		return 1;
	}
	if ((st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
		fprintf(out, "warning: %s %s has mode %04o: writable by all without the sticky "
			"bit, users can remove each other's directories (use 0755, or 1777)\n", key,
			root, (unsigned)(st.st_mode & 07777));
		return 1;
	}
	return 0;
}

int userdir_check_roots(const struct conf *c, FILE *out)
{
	int n = 0;

	if (c->archive_root && c->archive_mode == CONF_ARCHIVE_COPY)
		n += _check_root(c, "ArchiveRoot", c->archive_root, out);
	for (char **r = c->scratch_roots; r && *r; r++)
		n += _check_root(c, "ScratchRoots", *r, out);
	return n;
}
