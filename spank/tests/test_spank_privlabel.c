/*
 * Unit tests: trusted labels written by root on directories the job owner
 * created (privlabel.c, jobdir_label_owned). Needs root and the users
 * shtest and shtest2 (the test bed creates them); skips (77) otherwise.
 *
 * A tree owned by shtest gets symlinks to /etc and to shtest2's directory,
 * a directory owned by shtest2, one owned by root and one shtest cannot
 * reach. Afterwards every trusted.stagehand.policy in the tree (and on
 * /etc) is listed: exactly the expected directories carry one.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "jobdir.h"
#include "privlabel.h"
#include "tests/tap.h"

static char top[64];
static char *found[64];        /* paths below top with a trusted policy */
static int nfound;
static int nuser;              /* user.stagehand.* labels seen */

static const char *getx(const char *path, const char *name)
{
	static char v[128];
	ssize_t n = lgetxattr(path, name, v, sizeof(v) - 1);
	if (n < 0)
		return "(none)";
	v[n] = '\0';
	return v;
}

static int _scan(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	char v[64];
	if (lgetxattr(path, "trusted.stagehand.policy", v, sizeof(v)) >= 0 && nfound < 64)
		found[nfound++] = strdup(strcmp(path, top) ? path + strlen(top) + 1 : ".");
	if (lgetxattr(path, "user.stagehand.policy", v, sizeof(v)) >= 0)
		nuser++;
	return 0;
}

static int _cmp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int _rm(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb; (void)flag; (void)ftw;
	return remove(path);
}

static void mk(const char *rel, uid_t u, gid_t g, mode_t mode)
{
	char p[256];
	snprintf(p, sizeof(p), "%s/%s", top, rel);
	if (mkdir(p, mode) < 0 || chown(p, u, g) < 0 || chmod(p, mode) < 0) {
		printf("Bail out! cannot make %s: %s\n", p, strerror(errno));
		exit(99);
	}
}

static const char *at(const char *rel)
{
	static char p[4][256];
	static int k;
	k = (k + 1) % 4;
	snprintf(p[k], sizeof(p[k]), "%s/%s", top, rel);
	return p[k];
}

/* Run privlabel_prepare over (path, policy) pairs; returns its result. */
static int prep(const char *base, const struct privlabel_owner *o, size_t *failed,
		char *err, size_t errlen, int n, ...)
{
	struct privlabel_dir d[8];
	va_list ap;

	va_start(ap, n);
	for (int i = 0; i < n; i++) {
		d[i].path = va_arg(ap, const char *);
		d[i].policy = va_arg(ap, const char *);
	}
	va_end(ap);
	err[0] = '\0';
	return privlabel_prepare(base, d, (size_t)n, o, &(struct privlabel_run){ "trusted", 4242, 5000 },
				 failed, err, errlen);
}

int main(void)
{
	struct passwd *p1 = getpwnam("shtest"), *p2;
	struct passwd u1, u2;
	char err[1024], abs1[256];
	size_t failed;
	struct stat st;

	if (geteuid() != 0) {
		printf("1..0 # SKIP needs root (trusted.* labels)\n");
		return 77;
	}
	if (p1 == NULL) {
		printf("1..0 # SKIP no user shtest\n");
		return 77;
	}
	u1 = *p1;
	p2 = getpwnam("shtest2");
	if (p2 == NULL) {
		printf("1..0 # SKIP no user shtest2\n");
		return 77;
	}
	u2 = *p2;
	snprintf(top, sizeof(top), "/tmp/sh-privlabel-XXXXXX");
	if (mkdtemp(top) == NULL || chmod(top, 0755) < 0)
		return 99;
	if (setxattr(top, "trusted.stagehand.probe", "1", 1, 0) < 0) {
		printf("1..0 # SKIP no trusted xattrs on %s: %s\n", top, strerror(errno));
		rmdir(top);
		return 77;
	}
	removexattr(top, "trusted.stagehand.probe");

	mk("work", u1.pw_uid, u1.pw_gid, 0755);
	mk("other", u2.pw_uid, u2.pw_gid, 0755);
	mk("priv", u2.pw_uid, u2.pw_gid, 0700);
	mk("priv/mine", u1.pw_uid, u1.pw_gid, 0755);
	mk("grp", u2.pw_uid, u2.pw_gid, 0770);
	mk("work/foreign", u2.pw_uid, u2.pw_gid, 0777);
	mk("work/rootdir", 0, 0, 0755);
	if (symlink("/etc", at("work/etc")) < 0 ||
	    symlink(at("other"), at("work/otherlink")) < 0 ||
	    lchown(at("work/etc"), u1.pw_uid, u1.pw_gid) < 0 ||
	    lchown(at("work/otherlink"), u1.pw_uid, u1.pw_gid) < 0)
		return 99;
	int f = open(at("work/file"), O_CREAT | O_WRONLY, 0644);
	if (f < 0 || fchown(f, u1.pw_uid, u1.pw_gid) < 0)
		return 99;
	close(f);

	gid_t g1[] = { u1.pw_gid };
	gid_t g12[] = { u1.pw_gid, u2.pw_gid };
	struct privlabel_owner o = { .uid = u1.pw_uid, .gid = u1.pw_gid, .groups = g1,
				     .ngroups = 1, .umask = 027 };
	char W[256];
	snprintf(W, sizeof(W), "%s", at("work"));

	/* The normal case: relative and absolute, made by the owner, labelled
	 * trusted.* by root, nothing in user.*. */
	snprintf(abs1, sizeof(abs1), "%s/work/abs/x", top);
	ok(prep(W, &o, &failed, err, sizeof(err), 3, "results/run", "pending", "tmp", "exempt",
		abs1, "pending") == 0, "three directories prepared (%s)", err);
	ok(stat(at("work/results/run"), &st) == 0 && S_ISDIR(st.st_mode) &&
	   st.st_uid == u1.pw_uid && st.st_gid == u1.pw_gid, "created by the owner");
	ok((st.st_mode & 0777) == 0750, "with the owner's umask (mode %o)", st.st_mode & 0777);
	ok(stat(at("work/results"), &st) == 0 && st.st_uid == u1.pw_uid,
	   "intermediate directory owned by the owner too");
	is_str(getx(at("work/results/run"), "trusted.stagehand.policy"), "pending",
	       "trusted policy pending");
	is_str(getx(at("work/results/run"), "trusted.stagehand.job"), "4242", "trusted job");
	char num[32];
	snprintf(num, sizeof(num), "%lu", (unsigned long)u1.pw_uid);
	is_str(getx(at("work/results/run"), "trusted.stagehand.owner"), num, "trusted owner");
	is_str(getx(at("work/tmp"), "trusted.stagehand.policy"), "exempt", "trusted exempt");
	is_str(getx(abs1, "trusted.stagehand.policy"), "pending", "absolute path labelled");
	is_str(getx(at("work/results/run"), "user.stagehand.policy"), "(none)",
	       "no user.stagehand.policy written");
	is_str(getx(at("work/results"), "trusted.stagehand.policy"), "(none)",
	       "the parent is not labelled");

	/* Relabelled for a new job (an existing directory). */
	ok(prep(W, &o, &failed, err, sizeof(err), 1, "tmp", "pending") == 0 &&
	   strcmp(getx(at("work/tmp"), "trusted.stagehand.policy"), "pending") == 0,
	   "existing directory relabelled");
	ok(prep(W, &o, &failed, err, sizeof(err), 1, "tmp", "exempt") == 0, "and back");

	/* Symlink to /etc: refused by the owner's no-follow walk. */
	ok(prep(W, &o, &failed, err, sizeof(err), 2, "ok1", "exempt", "etc/x", "exempt") < 0,
	   "path through a symlink to /etc refused");
	ok(failed == 1, "the failing directory is named (index %zu)", failed);
	contains(err, "'etc' in 'etc/x' is a symbolic link", "message names the link");
	ok(lstat("/etc/x", &st) < 0, "nothing created in /etc");
	ok(prep(W, &o, &failed, err, sizeof(err), 1, "etc", "exempt") < 0 && failed == 0,
	   "symlink to /etc as the directory itself refused");
	contains(err, "is a symbolic link", "message says symbolic link");
	is_str(getx("/etc", "trusted.stagehand.policy"), "(none)", "/etc is not labelled");

	/* Symlink to another user's directory. */
	ok(prep(W, &o, &failed, err, sizeof(err), 1, "otherlink", "pending") < 0,
	   "symlink to shtest2's directory refused");
	ok(prep(W, &o, &failed, err, sizeof(err), 1, "otherlink/sub", "pending") < 0,
	   "path through it refused");
	ok(lstat(at("other/sub"), &st) < 0, "nothing created in shtest2's directory");

	/* A directory owned by someone else (writable by all): the owner can
	 * open it, root refuses to label it. */
	ok(prep(W, &o, &failed, err, sizeof(err), 1, "foreign", "exempt") < 0 && failed == 0,
	   "directory owned by shtest2 refused");
	char want[128];
	snprintf(want, sizeof(want), "owned by uid %lu, not by the job owner",
		 (unsigned long)u2.pw_uid);
	contains(err, want, "message names the owner");
	ok(prep(W, &o, &failed, err, sizeof(err), 1, "foreign/mine", "exempt") == 0,
	   "the owner's own directory inside it is labelled (%s)", err);

	/* The creator is not root: a root-owned directory is not writable... */
	ok(prep(W, &o, &failed, err, sizeof(err), 1, "rootdir/x", "exempt") < 0,
	   "no directory made where the owner may not write");
	contains(err, "cannot create 'x'", "message names the component");
	contains(err, "Permission denied", "permission denied");
	ok(lstat(at("work/rootdir/x"), &st) < 0, "nothing created there");
	/* ... and a 0700 directory of another user is not traversable. */
	ok(prep(W, &o, &failed, err, sizeof(err), 1, at("priv/mine"), "exempt") < 0,
	   "no walk through another user's 0700 directory");
	contains(err, "Permission denied", "permission denied");

	/* Supplementary groups are the ones given. */
	ok(prep(W, &o, &failed, err, sizeof(err), 1, at("grp/g"), "exempt") < 0,
	   "group-writable directory refused without the group");
	o.groups = g12;
	o.ngroups = 2;
	ok(prep(W, &o, &failed, err, sizeof(err), 1, at("grp/g"), "exempt") == 0,
	   "and made with it (%s)", err);
	o.groups = g1;
	o.ngroups = 1;

	/* A working directory the owner cannot open. */
	ok(prep(at("priv"), &o, &failed, err, sizeof(err), 1, "mine", "exempt") < 0 &&
	   failed == 1, "unreachable working directory refused, for no single directory");
	contains(err, "cannot open the working directory", "message says so");

	/* Regular file in the path; '..'. */
	ok(prep(W, &o, &failed, err, sizeof(err), 1, "file", "exempt") < 0,
	   "regular file refused");
	ok(prep(W, &o, &failed, err, sizeof(err), 1, "tmp/../..", "exempt") < 0,
	   "'..' refused");

	ok(prep(W, &o, &failed, err, sizeof(err), 0) == 0, "no directories: nothing to do");

	/* Root's half on its own: descriptor checks. */
	int fd = open(at("other"), O_RDONLY | O_DIRECTORY);
	ok(jobdir_label_owned(fd, "trusted", "exempt", 1, u1.pw_uid, err, sizeof(err)) < 0,
	   "label_owned refuses another user's directory");
	close(fd);
	fd = open(at("work/file"), O_RDONLY);
	ok(jobdir_label_owned(fd, "trusted", "exempt", 1, u1.pw_uid, err, sizeof(err)) < 0,
	   "label_owned refuses a file");
	contains(err, "not a directory", "message says not a directory");
	close(fd);

	/* Exactly these carry a trusted policy; no user.stagehand.* anywhere. */
	nftw(top, _scan, 16, FTW_PHYS);
	qsort(found, (size_t)nfound, sizeof(found[0]), _cmp);
	char list[2048] = "";
	for (int i = 0; i < nfound; i++) {
		size_t l = strlen(list);
		snprintf(list + l, sizeof(list) - l, "%s%s", i ? " " : "", found[i]);
		free(found[i]);
	}
	is_str(list, "grp/g work/abs/x work/foreign/mine work/ok1 work/results/run work/tmp",
	       "labelled: exactly the expected directories");
	ok(nuser == 0, "no user.stagehand.policy anywhere (%d)", nuser);
	for (const char *x = "/etc"; x; x = NULL) {
		bool dirty = lgetxattr(x, "trusted.stagehand.policy", err, sizeof(err)) >= 0;
		ok(!dirty, "/etc carries no label");
		if (dirty) {       /* never leave the machine labelled */
			removexattr(x, "trusted.stagehand.policy");
			removexattr(x, "trusted.stagehand.job");
			removexattr(x, "trusted.stagehand.owner");
		}
	}

	nftw(top, _rm, 16, FTW_DEPTH | FTW_PHYS);
	return tap_done();
}
