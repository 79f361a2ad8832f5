/* Unit tests: symlink-safe mkdir -p and labels (jobdir.c). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "jobdir.h"
#include "tests/tap.h"

static const char *getx(const char *path, const char *name)
{
	static char v[128];
	ssize_t n = getxattr(path, name, v, sizeof(v) - 1);
	if (n < 0)
		return "(none)";
	v[n] = '\0';
	return v;
}

static int _rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	chmod(path, 0700);
	return remove(path);
}

int main(void)
{
	char dir[] = "/tmp/sh-jobdir-XXXXXX", err[512], p[512];
	struct stat st;

	/* Keep the test on the build tree's filesystem family: /tmp. */
	if (mkdtemp(dir) == NULL)
		return 99;
	if (setxattr(dir, "user.stagehand.probe", "1", 1, 0) < 0 && errno == ENOTSUP) {
		printf("1..0 # SKIP no user xattrs on %s\n", dir);
		rmdir(dir);
		return 77;
	}
	int base = open(dir, O_RDONLY | O_DIRECTORY);

	int fd = jobdir_open(base, "results/run1", err, sizeof(err));
	ok(fd >= 0, "nested directory created (%s)", fd < 0 ? err : "");
	snprintf(p, sizeof(p), "%s/results/run1", dir);
	ok(stat(p, &st) == 0 && S_ISDIR(st.st_mode), "it exists");
	ok(jobdir_label(fd, "user", "pending", 12, 1001, err, sizeof(err)) == 0,
	   "labelled (%s)", err);
	is_str(getx(p, "user.stagehand.policy"), "pending", "policy label");
	is_str(getx(p, "user.stagehand.job"), "12", "job label");
	is_str(getx(p, "user.stagehand.owner"), "1001", "owner label");
	close(fd);

	fd = jobdir_open(base, "results/run1", err, sizeof(err));
	ok(fd >= 0, "existing directory opens again (mkdir -p)");
	ok(jobdir_label(fd, "user", "exempt", 13, 1001, err, sizeof(err)) == 0 &&
	   strcmp(getx(p, "user.stagehand.policy"), "exempt") == 0 &&
	   strcmp(getx(p, "user.stagehand.job"), "13") == 0, "labels replaced");
	close(fd);

	fd = jobdir_open(base, "./a//b/./c/", err, sizeof(err));
	snprintf(p, sizeof(p), "%s/a/b/c", dir);
	ok(fd >= 0 && stat(p, &st) == 0, "'.' and '//' tolerated");
	if (fd >= 0)
		close(fd);

	/* A symlink anywhere in the user's part is refused, and nothing is
	 * created through it. */
	char tgt[] = "/tmp/sh-jobdir-target-XXXXXX";
	if (mkdtemp(tgt) == NULL)
		return 99;
	snprintf(p, sizeof(p), "%s/link", dir);
	ok(symlink(tgt, p) == 0, "symlink planted");
	fd = jobdir_open(base, "link/out", err, sizeof(err));
	ok(fd < 0, "symlinked component refused");
	contains(err, "'link' in 'link/out' is a symbolic link", "message names the link");
	snprintf(p, sizeof(p), "%s/out", tgt);
	ok(stat(p, &st) < 0, "nothing created in the link's target");
	fd = jobdir_open(base, "link", err, sizeof(err));
	ok(fd < 0, "symlink as the last component refused");

	snprintf(p, sizeof(p), "%s/file", dir);
	close(open(p, O_CREAT | O_WRONLY, 0600));
	fd = jobdir_open(base, "file/x", err, sizeof(err));
	ok(fd < 0, "regular file in the path refused");
	contains(err, "not a directory", "message says not a directory");

	fd = jobdir_open(base, "a/../..", err, sizeof(err));
	ok(fd < 0, "'..' refused");
	fd = jobdir_open(base, "", err, sizeof(err));
	ok(fd < 0, "empty path refused");

	/* Absolute paths are walked from / without following links. */
	snprintf(p, sizeof(p), "%s/abs/x", dir);
	fd = jobdir_open(AT_FDCWD, p, err, sizeof(err));
	ok(fd >= 0, "absolute path created");
	if (fd >= 0)
		close(fd);
	snprintf(p, sizeof(p), "%s/link/y", dir);
	fd = jobdir_open(AT_FDCWD, p, err, sizeof(err));
	ok(fd < 0, "absolute path through a link refused");

	if (getuid() != 0) {
		snprintf(p, sizeof(p), "%s/ro", dir);
		mkdir(p, 0500);
		fd = jobdir_open(base, "ro/x", err, sizeof(err));
		ok(fd < 0, "permission denied reported");
		contains(err, "cannot create 'x'", "message names the component");
	}

	close(base);
	nftw(dir, _rm, 16, FTW_DEPTH | FTW_PHYS);
	nftw(tgt, _rm, 16, FTW_DEPTH | FTW_PHYS);
	return tap_done();
}
