/*
 * test_resolve: common/resolve.c on both of its ways, openat2 and the
 * component walk, against one table of hostile paths (a link in the last
 * and in a middle component, '..', absolute paths, /proc magic links,
 * empty and '.' components, overlong names), then the cases that need more
 * than one call: a directory swapped for a link between calls, O_CREAT and
 * mkdir -p through the resolver, hard links. Each case must give the same
 * errno and the same message on both ways.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/resolve.h"
#include "tests/tap.h"

enum { R_TREE, R_PROC };	/* which root a case opens below */

struct rcase {
	const char *name;	/* what is checked */
	int root;		/* R_TREE: the scratch tree; R_PROC: /proc/self */
	const char *path;
	int flags;
	unsigned opts;
	int want;		/* 0: a descriptor; else this errno */
	const char *says;	/* in the message (failures), or NULL */
};

static const struct rcase cases[] = {
	{ "plain file", R_TREE, "a/b/f.txt", O_RDONLY, 0, 0, NULL },
	{ "link as the last component", R_TREE, "a/lnkfile", O_RDONLY, 0, ELOOP,
	  "'lnkfile' in 'a/lnkfile' is a symbolic link (to 'b/f.txt')" },
	{ "link as the last component, O_PATH", R_TREE, "a/lnkfile", O_PATH, 0, ELOOP,
	  "'lnkfile' in 'a/lnkfile' is a symbolic link" },
	{ "link as the last component, O_DIRECTORY", R_TREE, "a/lnkdir", O_RDONLY | O_DIRECTORY,
	  0, ELOOP, "'lnkdir' in 'a/lnkdir' is a symbolic link (to 'b')" },
	{ "link in a middle component", R_TREE, "a/lnkdir/f.txt", O_RDONLY, 0, ELOOP,
	  "'lnkdir' in 'a/lnkdir/f.txt' is a symbolic link (to 'b')" },
	{ "relative link climbing out", R_TREE, "a/up/etc/passwd", O_RDONLY, 0, ELOOP,
	  "'up' in 'a/up/etc/passwd' is a symbolic link (to '../..')" },
	{ "absolute link in the middle", R_TREE, "abslink/passwd", O_RDONLY, 0, ELOOP,
	  "'abslink' in 'abslink/passwd' is a symbolic link (to '/etc')" },
	{ "dangling link", R_TREE, "dangling", O_RDONLY, 0, ELOOP, "is a symbolic link" },
	{ "'..' escape", R_TREE, "../x", O_RDONLY, 0, EINVAL, "'..' in '../x' is not allowed" },
	{ "'..' that stays below is refused too", R_TREE, "a/../a/b/f.txt", O_RDONLY, 0, EINVAL,
	  "'..' in 'a/../a/b/f.txt' is not allowed" },
	{ "trailing '..'", R_TREE, "a/b/..", O_RDONLY, 0, EINVAL, "is not allowed" },
	{ "absolute path", R_TREE, "/etc/passwd", O_RDONLY, 0, EINVAL, "'/etc/passwd' is absolute" },
	{ "link to /proc/self/fd", R_TREE, "magic/0", O_RDONLY, 0, ELOOP,
	  "'magic' in 'magic/0' is a symbolic link (to '/proc/self/fd')" },
	{ "link to /proc/self/root", R_TREE, "proot/etc/passwd", O_RDONLY, 0, ELOOP,
	  "'proot' in 'proot/etc/passwd' is a symbolic link (to '/proc/self/root')" },
	{ "magic link /proc/self/root in the middle", R_PROC, "root/etc/passwd", O_RDONLY, 0,
	  ELOOP, "'root' in 'root/etc/passwd' is a symbolic link (to '/')" },
	{ "magic link /proc/self/cwd, last", R_PROC, "cwd", O_RDONLY, 0, ELOOP,
	  "'cwd' in 'cwd' is a symbolic link" },
	{ "magic link /proc/self/fd/0, last", R_PROC, "fd/0", O_RDONLY, 0, ELOOP,
	  "'0' in 'fd/0' is a symbolic link" },
	{ "magic link /proc/self/exe, last", R_PROC, "exe", O_RDONLY, 0, ELOOP,
	  "'exe' in 'exe' is a symbolic link" },
	{ "empty and '.' components ignored", R_TREE, "./a//b/./f.txt", O_RDONLY, 0, 0, NULL },
	{ "trailing '/' ignored", R_TREE, "a/b/", O_RDONLY | O_DIRECTORY, 0, 0, NULL },
	{ "empty path: the root itself", R_TREE, "", O_RDONLY | O_DIRECTORY, 0, 0, NULL },
	{ "'.': the root itself", R_TREE, ".", O_RDONLY | O_DIRECTORY, 0, 0, NULL },
	{ "'.//./': the root itself", R_TREE, ".//./", O_RDONLY | O_DIRECTORY, 0, 0, NULL },
	{ "a file in a middle component", R_TREE, "file/x", O_RDONLY, 0, ENOTDIR,
	  "'file' in 'file/x' exists and is not a directory" },
	{ "a missing middle component", R_TREE, "a/none/x", O_RDONLY, 0, ENOENT,
	  "cannot open 'none' in 'a/none/x': No such file or directory" },
	{ "a missing last component", R_TREE, "a/b/none", O_RDONLY, 0, ENOENT,
	  "cannot open 'none' in 'a/b/none': No such file or directory" },
	{ "O_DIRECTORY on a file", R_TREE, "a/b/f.txt", O_RDONLY | O_DIRECTORY, 0, ENOTDIR,
	  "'f.txt' in 'a/b/f.txt' exists and is not a directory" },
	{ "O_CREAT through a link in the middle", R_TREE, "a/lnkdir/new", O_WRONLY | O_CREAT,
	  0, ELOOP, "'lnkdir' in 'a/lnkdir/new' is a symbolic link" },
	{ "O_CREAT at a dangling link", R_TREE, "dangling", O_WRONLY | O_CREAT, 0, ELOOP,
	  "'dangling' in 'dangling' is a symbolic link (to 'nowhere')" },
	{ "mkdir -p through a link in the middle", R_TREE, "a/lnkdir/made", O_RDONLY,
	  RESOLVE_OPEN_MKDIR, ELOOP, "'lnkdir' in 'a/lnkdir/made' is a symbolic link" },
	{ "mkdir -p at a link, last", R_TREE, "a/lnkdir", O_RDONLY, RESOLVE_OPEN_MKDIR, ELOOP,
	  "'lnkdir' in 'a/lnkdir' is a symbolic link" },
	{ "mkdir -p at a dangling link", R_TREE, "dangling/x", O_RDONLY, RESOLVE_OPEN_MKDIR,
	  ELOOP, "'dangling' in 'dangling/x' is a symbolic link" },
	{ "mkdir -p through a file", R_TREE, "file/x", O_RDONLY, RESOLVE_OPEN_MKDIR, ENOTDIR,
	  "'file' in 'file/x' exists and is not a directory" },
	{ "mkdir -p with '..'", R_TREE, "m/../../x", O_RDONLY, RESOLVE_OPEN_MKDIR, EINVAL,
	  "is not allowed" },
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

static char tree[PATH_MAX];
static char msgs[2][NCASES][512];
static int errs[2][NCASES];

static void _mk(const char *rel, int dir, const char *link)
{
	char p[PATH_MAX * 2];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", tree, rel);
	if (link)
		fd = symlink(link, p);
	else if (dir)
		fd = mkdir(p, 0755);
	else if ((fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0644)) >= 0)
		fd = (write(fd, "x", 1) == 1 ? 0 : -1) + close(fd);
	if (fd < 0) {
		printf("Bail out! cannot make %s: %s\n", p, strerror(errno));
		exit(99);
	}
}

static int _exists(const char *rel)
{
	char p[PATH_MAX * 2];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", tree, rel);
	return lstat(p, &st) == 0;
}

/* The table on the way chosen now (w: 0 openat2, 1 walk). */
static void _table(int w, int tfd, int pfd)
{
	for (size_t i = 0; i < NCASES; i++) {
		const struct rcase *c = &cases[i];
		char *err = msgs[w][i];
		int fd;

		err[0] = '\0';
		errno = 0;
		fd = resolve_open(c->root == R_PROC ? pfd : tfd, c->path, c->flags, 0600, c->opts,
				  err, sizeof(msgs[0][0]));
		errs[w][i] = fd < 0 ? errno : 0;
		if (c->want == 0)
			ok(fd >= 0, "%s: %s: opened (%s)", resolve_method(), c->name, err);
		else
			ok(fd < 0 && errno == c->want && strstr(err, c->says),
			   "%s: %s: errno %d (%s), '%s'", resolve_method(), c->name, errs[w][i],
			   strerror(c->want), err);
		if (fd >= 0)
			close(fd);
	}
	ok(!_exists("a/b/new") && !_exists("nowhere") && !_exists("a/b/made"),
	   "%s: nothing was made through a link", resolve_method());
}

/* A directory swapped for a link between two calls: the second refuses it. */
static void _swap(int w, int tfd)
{
	char err[512], p[64], old[64], s[16];
	int fd;

	snprintf(s, sizeof(s), "s%d", w);
	_mk(s, 1, NULL);
	snprintf(p, sizeof(p), "%s/d", s);
	_mk(p, 1, NULL);
	snprintf(p, sizeof(p), "%s/d/f", s);
	_mk(p, 0, NULL);
	snprintf(p, sizeof(p), "%s/other", s);
	_mk(p, 1, NULL);
	snprintf(p, sizeof(p), "%s/other/f", s);
	_mk(p, 0, NULL);
	snprintf(p, sizeof(p), "%s/d/f", s);
	fd = resolve_open(tfd, p, O_RDONLY, 0, 0, err, sizeof(err));
	ok(fd >= 0, "%s: swap: first call opens %s (%s)", resolve_method(), p, fd < 0 ? err : "");
	if (fd >= 0)
		close(fd);
	snprintf(p, sizeof(p), "%s/d", s);
	snprintf(old, sizeof(old), "%s/d.old", s);
	ok(renameat(tfd, p, tfd, old) == 0 && symlinkat("other", tfd, p) == 0,
	   "%s swapped for a link to %s/other", p, s);
	snprintf(p, sizeof(p), "%s/d/f", s);
	fd = resolve_open(tfd, p, O_RDONLY, 0, 0, err, sizeof(err));
	ok(fd < 0 && errno == ELOOP && strstr(err, "'d' in '") &&
	   strstr(err, "/d/f' is a symbolic link (to 'other')"),
	   "%s: swap: the second call refuses it (%s)", resolve_method(), err);
	snprintf(p, sizeof(p), "%s/d", s);
	fd = resolve_open(tfd, p, O_RDONLY | O_DIRECTORY, 0, RESOLVE_OPEN_MKDIR, err,
			  sizeof(err));
	ok(fd < 0 && errno == ELOOP, "%s: swap: mkdir -p refuses it too (%s)", resolve_method(),
	   err);
}

/* O_CREAT, mkdir -p, hard links and a search-only directory through the resolver. */
static void _create(int w, int tfd)
{
	const char *way = resolve_method();
	char err[512], name[64], dir[64];
	struct stat st;
	mode_t um = umask(022);
	int fd;

	snprintf(name, sizeof(name), "a/b/created-%d", w);
	fd = resolve_open(tfd, name, O_WRONLY | O_CREAT | O_EXCL, 0640, 0, err, sizeof(err));
	ok(fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 0777) == 0640,
	   "%s: O_CREAT|O_EXCL makes a new file with its mode (%s)", way, fd < 0 ? err : "");
	if (fd >= 0)
		close(fd);
	fd = resolve_open(tfd, name, O_WRONLY | O_CREAT | O_EXCL, 0640, 0, err, sizeof(err));
	ok(fd < 0 && errno == EEXIST, "%s: O_EXCL again: EEXIST (%s)", way, err);
	ok(resolve_open(tfd, "x", O_RDONLY | O_CREAT, 0600, RESOLVE_OPEN_MKDIR, err,
			sizeof(err)) < 0 && errno == EINVAL,
	   "%s: O_CREAT with RESOLVE_OPEN_MKDIR is refused", way);

	snprintf(dir, sizeof(dir), "m%d/n/o", w);
	fd = resolve_open(tfd, dir, O_RDONLY, 0750, RESOLVE_OPEN_MKDIR, err, sizeof(err));
	ok(fd >= 0 && fstat(fd, &st) == 0 && S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0750,
	   "%s: mkdir -p makes every component with its mode (%s)", way, fd < 0 ? err : "");
	if (fd >= 0)
		close(fd);
	fd = resolve_open(tfd, dir, O_RDONLY, 0750, RESOLVE_OPEN_MKDIR, err, sizeof(err));
	ok(fd >= 0, "%s: mkdir -p of what exists opens it (%s)", way, fd < 0 ? err : "");
	if (fd >= 0)
		close(fd);

	/* A hard link is the file itself: opened; st_nlink tells the caller. */
	snprintf(name, sizeof(name), "hard-%d", w);
	ok(linkat(tfd, "a/b/f.txt", tfd, name, 0) == 0, "hard link %s to a/b/f.txt", name);
	fd = resolve_open(tfd, name, O_RDONLY, 0, 0, err, sizeof(err));
	ok(fd >= 0 && fstat(fd, &st) == 0 && st.st_nlink >= 2,
	   "%s: a hard link is opened (not a link it can refuse); st_nlink %lu says so",
	   way, fd >= 0 ? (unsigned long)st.st_nlink : 0ul);
	if (fd >= 0)
		close(fd);
	unlinkat(tfd, name, 0);
	umask(um);

	/* A directory the caller may search but not list is crossed (O_PATH). */
	if (geteuid() != 0) {
		fd = resolve_open(tfd, "xonly/inner/f", O_RDONLY, 0, 0, err, sizeof(err));
		ok(fd >= 0, "%s: a search-only directory is crossed (%s)", way, fd < 0 ? err : "");
		if (fd >= 0)
			close(fd);
	}
}

int main(void)
{
	const char *tmp = getenv("STAGEHAND_TEST_TMP");
	char err[512], longname[NAME_MAX + 2], *longpath;
	int tfd, pfd, ways;

	snprintf(tree, sizeof(tree), "%s/resolve-XXXXXX", tmp && *tmp ? tmp : "/tmp");
	if (!mkdtemp(tree)) {
		printf("Bail out! mkdtemp %s: %s\n", tree, strerror(errno));
		return 99;
	}
	_mk("a", 1, NULL);
	_mk("a/b", 1, NULL);
	_mk("a/b/f.txt", 0, NULL);
	_mk("a/lnkfile", 0, "b/f.txt");
	_mk("a/lnkdir", 0, "b");
	_mk("a/up", 0, "../..");
	_mk("abslink", 0, "/etc");
	_mk("dangling", 0, "nowhere");
	_mk("magic", 0, "/proc/self/fd");
	_mk("proot", 0, "/proc/self/root");
	_mk("file", 0, NULL);
	_mk("xonly", 1, NULL);
	_mk("xonly/inner", 1, NULL);
	_mk("xonly/inner/f", 0, NULL);
	{
		char p[PATH_MAX * 2];

		snprintf(p, sizeof(p), "%s/xonly", tree);
		chmod(p, 0111);
	}
	tfd = open(tree, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	pfd = open("/proc/self", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (tfd < 0 || pfd < 0) {
		printf("Bail out! cannot open %s or /proc/self\n", tree);
		return 99;
	}

	/* How the way is chosen: STAGEHAND_RESOLVE=walk, read at the first call. */
	setenv("STAGEHAND_RESOLVE", "walk", 1);
	resolve_force_walk(0);
	is_str(resolve_method(), "walk", "STAGEHAND_RESOLVE=walk chooses the walk");
	unsetenv("STAGEHAND_RESOLVE");
	resolve_force_walk(0);
	tap_diag("this kernel: %s", resolve_method());
	ways = strcmp(resolve_method(), "openat2") == 0 ? 2 : 1;
	if (ways == 1)
		tap_diag("no openat2 here: the openat2 cases are not run");

	for (int w = 2 - ways; w < 2; w++) {
		resolve_force_walk(w);
		is_str(resolve_method(), w ? "walk" : "openat2", "now on %s",
		       w ? "the walk" : "openat2");
		_table(w, tfd, pfd);
		_swap(w, tfd);
		_create(w, tfd);

		memset(longname, 'n', NAME_MAX + 1);
		longname[NAME_MAX + 1] = '\0';
		ok(resolve_open(tfd, longname, O_RDONLY, 0, 0, err, sizeof(err)) < 0 &&
		   errno == ENAMETOOLONG && strstr(err, "is longer than 255 bytes"),
		   "%s: a component of NAME_MAX + 1 bytes: ENAMETOOLONG (%s)", resolve_method(),
		   err);
		longname[NAME_MAX] = '\0';
		ok(resolve_open(tfd, longname, O_RDONLY, 0, 0, err, sizeof(err)) < 0 &&
		   errno == ENOENT, "%s: one of NAME_MAX bytes is looked up (ENOENT)",
		   resolve_method());
		longpath = malloc(PATH_MAX * 2);
		for (int i = 0; i < PATH_MAX; i++)
			memcpy(longpath + 2 * i, "a/", 2);
		longpath[2 * PATH_MAX - 1] = '\0';
		ok(resolve_open(tfd, longpath, O_RDONLY, 0, 0, err, sizeof(err)) < 0 &&
		   errno == ENAMETOOLONG, "%s: a path of PATH_MAX bytes or more: ENAMETOOLONG (%s)",
		   resolve_method(), err);
		free(longpath);
	}
	if (ways == 2)
		for (size_t i = 0; i < NCASES; i++)
			ok(errs[0][i] == errs[1][i] && strcmp(msgs[0][i], msgs[1][i]) == 0,
			   "same result on both ways: %s ('%s' / '%s')", cases[i].name,
			   msgs[0][i], msgs[1][i]);

	resolve_force_walk(0);
	close(pfd);
	close(tfd);
	{
		char p[PATH_MAX * 2];

		snprintf(p, sizeof(p), "%s/xonly", tree);
		chmod(p, 0755);
	}
	tap_rmtree(tree);
	return tap_done();
}
