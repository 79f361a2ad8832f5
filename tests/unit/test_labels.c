/*
 * test_labels.c - label reading, the scan's classification and purge, and
 * the policy exports, on real directories with real user.* xattrs (the
 * build tree's filesystem must support them; the test skips otherwise).
 *
 * Golden files: tests/unit/policy/NAME.golden ($STAGEHAND_POLICY_GOLDEN);
 * STAGEHAND_UPDATE_GOLDEN=1 rewrites them from the current output.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "labels.h"
#include "policy.h"
#include "scan.h"
#include "tests/tap.h"

static char base[1024];

static void _mkdir(const char *rel)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", base, rel);
	if (mkdir(p, 0755) < 0 && errno != EEXIST) {
		printf("Bail out! mkdir %s: %s\n", p, strerror(errno));
		exit(1);
	}
}

static void _file(const char *rel, size_t size, time_t mtime)
{
	char p[PATH_MAX];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", base, rel);
	f = fopen(p, "w");
	if (!f) {
		printf("Bail out! create %s: %s\n", p, strerror(errno));
		exit(1);
	}
	for (size_t i = 0; i < size; i++)
		fputc('x', f);
	fclose(f);
	if (mtime) {
		struct timespec ts[2] = { { mtime, 0 }, { mtime, 0 } };

		utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW);
	}
}

static void _age(const char *rel, time_t mtime)
{
	char p[PATH_MAX];
	struct timespec ts[2] = { { mtime, 0 }, { mtime, 0 } };

	snprintf(p, sizeof(p), "%s/%s", base, rel);
	utimensat(AT_FDCWD, p, ts, AT_SYMLINK_NOFOLLOW);
}

static int _label(const char *rel, const char *policy, const char *job, const char *owner)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", base, rel);
	if (policy && setxattr(p, "user.stagehand.policy", policy, strlen(policy), 0) < 0)
		return -1;
	if (job && setxattr(p, "user.stagehand.job", job, strlen(job), 0) < 0)
		return -1;
	if (owner && setxattr(p, "user.stagehand.owner", owner, strlen(owner), 0) < 0)
		return -1;
	return 0;
}

static const struct scan_tree *_find(const struct scan_result *r, const char *rel)
{
	char p[PATH_MAX];

	snprintf(p, sizeof(p), "%s/%s", base, rel);
	for (size_t i = 0; i < r->ntrees; i++)
		if (!strcmp(r->trees[i].path, p))
			return &r->trees[i];
	return NULL;
}

static void _rm_rf(const char *path)
{
	/* The test's own tree: nftw-free, depth small. */
	char cmd[PATH_MAX + 16];
	pid_t pid;

	(void)cmd;
	pid = fork();
	if (pid == 0) {
		execlp("rm", "rm", "-rf", "--one-file-system", path, (char *)NULL);
		_exit(127);
	}
	if (pid > 0) {
		int st;

		waitpid(pid, &st, 0);
	}
}

static void test_read(void)
{
	struct label l;
	char p[PATH_MAX], lp[PATH_MAX], err[512];
	int rc;

	_mkdir("r");
	_mkdir("r/plain");
	_mkdir("r/target");
	_label("r/target", "exempt", "77", "1000");
	snprintf(p, sizeof(p), "%s/r/target", base);
	snprintf(lp, sizeof(lp), "%s/r/link", base);
	symlink(p, lp);
	setxattr(p, "user.stagehand.location", "/archive/x", 10, 0);

	rc = labels_read(p, "user.", &l, err, sizeof(err));
	tap_ok(rc == 1 && !strcmp(l.policy, "exempt") && !strcmp(l.job, "77") &&
	       !strcmp(l.owner, "1000") && !strcmp(l.location, "/archive/x"),
	       "labels_read: policy, job, owner, location of a labelled directory");
	rc = labels_read(p, "trusted.", &l, err, sizeof(err));
	tap_ok(rc == 0 && l.policy[0] == '\0', "labels_read: another namespace sees no labels");
	snprintf(p, sizeof(p), "%s/r/plain", base);
	tap_ok(labels_read(p, "user.", &l, err, sizeof(err)) == 0, "labels_read: unlabelled = 0");
	tap_ok(labels_read(lp, "user.", &l, err, sizeof(err)) == 0 && l.policy[0] == '\0',
	       "labels_read: a symlink to a labelled directory is not followed");
	snprintf(p, sizeof(p), "%s/r/missing", base);
	rc = labels_read(p, "user.", &l, err, sizeof(err));
	tap_ok(rc == -1 && strstr(err, "missing"), "labels_read: a missing path is an error naming it (%s)",
	       err);
	tap_ok(labels_root(lp, p, sizeof(p), err, sizeof(err)) < 0 && strstr(err, "symbolic link"),
	       "labels_root: a symlink root is refused (%s)", err);
	tap_ok(labels_policy_known("archived") && !labels_policy_known("Exempt") &&
	       !labels_policy_known(""), "policy values are exact");
	tap_ok(labels_policy_known("purge") && labels_policy_known("skipped"),
	       "purge and skipped are known policy values");
}

static void test_namespace(void)
{
	char ns[16], conf[PATH_MAX];
	FILE *f;

	tap_ok(labels_namespace("trusted", ns, sizeof(ns)) == 0 && !strcmp(ns, "trusted."),
	       "--namespace trusted -> trusted.");
	tap_ok(labels_namespace("user.", ns, sizeof(ns)) == 0 && !strcmp(ns, "user."),
	       "--namespace user. -> user.");
	tap_ok(labels_namespace("system.", ns, sizeof(ns)) < 0, "--namespace system. refused");
	snprintf(conf, sizeof(conf), "%s/stagehand.conf", base);
	f = fopen(conf, "w");
	fprintf(f, "# test\nXattrNamespace=trusted\n");
	fclose(f);
	setenv("STAGEHAND_CONF", conf, 1);
	tap_ok(labels_namespace(NULL, ns, sizeof(ns)) == 0 && !strcmp(ns, "trusted."),
	       "XattrNamespace=trusted from the config file");
	f = fopen(conf, "w");
	fprintf(f, "XattrNamespace=bogus\n");
	fclose(f);
	tap_ok(labels_namespace(NULL, ns, sizeof(ns)) < 0, "a bad XattrNamespace is an error");
	unsetenv("STAGEHAND_CONF");
}

static void test_scan(void)
{
	time_t now = time(NULL), old = now - 40 * 86400;
	struct scan_result r;
	const struct scan_tree *t;
	char root[PATH_MAX], out[PATH_MAX], err[512];

	_mkdir("s");
	_mkdir("s/job1");
	_mkdir("s/job1/tmp");           /* exempt, old: purge candidate */
	_mkdir("s/job1/tmp/deep");
	_file("s/job1/tmp/a", 1000, old);
	_file("s/job1/tmp/deep/b", 24, old);
	_age("s/job1/tmp/deep", old);
	_age("s/job1/tmp", old);
	_label("s/job1/tmp", "exempt", "101", "4242");
	_mkdir("s/job1/fresh");         /* exempt, recent */
	_file("s/job1/fresh/c", 10, 0);
	_label("s/job1/fresh", "exempt", "101", "4242");
	_mkdir("s/job1/results");       /* archive, holds a nested exempt dir */
	_file("s/job1/results/r1", 300, 0);
	_mkdir("s/job1/results/scratch");
	_file("s/job1/results/scratch/s1", 5, old);
	_age("s/job1/results/scratch", old);
	_label("s/job1/results", "archive", "101", "4242");
	_label("s/job1/results/scratch", "exempt", "101", "4242");
	_mkdir("s/job2");
	_label("s/job2", "pending", "102", "4242");
	_file("s/job2/p", 7, 0);
	_mkdir("s/done");
	_label("s/done", "archived", "100", "4242");
	_mkdir("s/weird");
	_label("s/weird", "keep-forever", NULL, NULL);
	_mkdir("s/job3");               /* a job's staged inputs after its end: purge, recent */
	_mkdir("s/job3/input");
	_file("s/job3/input/in.dat", 2000, 0);
	_label("s/job3/input", "purge", "103", "4242");
	_file("s/loose1", 50, 0);
	_file("s/job1/loose2", 60, 0);
	/* A symlink to a big labelled tree outside: never followed. */
	_mkdir("outside");
	_mkdir("outside/big");
	_file("outside/big/huge", 4096, 0);
	_label("outside/big", "archive", "9", "4242");
	snprintf(out, sizeof(out), "%s/outside/big", base);
	snprintf(root, sizeof(root), "%s/s/link-out", base);
	symlink(out, root);

	snprintf(root, sizeof(root), "%s/s", base);
	tap_ok(scan_tree(root, "user.", 30, 1, &r) == 0, "scan_tree runs");
	tap_ok(r.ntrees == 8, "8 labelled trees (got %zu): the symlinked one is not followed",
	       r.ntrees);
	t = _find(&r, "s/job1/tmp");
	tap_ok(t && t->cls == SCAN_PURGE && t->files == 2 && t->bytes == 1024 && !t->nested,
	       "old exempt tree: purge_candidate, 2 files, 1024 bytes");
	t = _find(&r, "s/job1/fresh");
	tap_ok(t && t->cls == SCAN_EXEMPT && t->files == 1, "recent exempt tree: exempt");
	t = _find(&r, "s/job1/results");
	tap_ok(t && t->cls == SCAN_TO_ARCHIVE && t->files == 1 && t->bytes == 300 && t->nested,
	       "archive tree: to_archive, its own file only, marked nested");
	t = _find(&r, "s/job1/results/scratch");
	tap_ok(t && t->cls == SCAN_PURGE && t->files == 1 && t->bytes == 5,
	       "exempt tree inside an archive tree counts its own file");
	t = _find(&r, "s/job2");
	tap_ok(t && t->cls == SCAN_PENDING, "pending tree");
	t = _find(&r, "s/done");
	tap_ok(t && t->cls == SCAN_ARCHIVED, "archived tree");
	t = _find(&r, "s/weird");
	tap_ok(t && t->cls == SCAN_BAD, "unknown policy value: bad_label");
	tap_ok(r.unlabelled_files == 3 && r.unlabelled_bytes == 110,
	       "unlabelled: 2 files (110 bytes) and the symlink (got %llu files, %llu bytes)",
	       r.unlabelled_files, r.unlabelled_bytes);
	t = _find(&r, "s/job3/input");
	tap_ok(t && t->cls == SCAN_PURGE && t->files == 1 && t->bytes == 2000,
	       "a purge-labelled tree is a purge candidate whatever its age, not a bad label");
	tap_ok(r.total[SCAN_PURGE].trees == 3 && r.total[SCAN_PURGE].files == 4 &&
	       r.total[SCAN_PURGE].bytes == 3029, "purge_candidate totals: 3 trees, 4 files, 3029 bytes");
	scan_result_free(&r);

	tap_ok(scan_tree(root, "user.", 100, 1, &r) == 0 &&
	       _find(&r, "s/job1/tmp")->cls == SCAN_EXEMPT, "--older-than 100: no longer a candidate");
	scan_result_free(&r);

	/* Purge: refusals first, then a real removal. */
	scan_tree(root, "user.", 30, 1, &r);
	t = _find(&r, "s/job1/tmp");
	tap_ok(scan_purge_tree(t, "user.", 0, err, sizeof(err)) < 0 && strstr(err, "root"),
	       "purge refuses root (%s)", err);
	tap_ok(scan_purge_tree(t, "user.", 4242, err, sizeof(err)) < 0 && strstr(err, "not yours"),
	       "purge refuses a directory the caller does not own (%s)", err);
	snprintf(out, sizeof(out), "%s/s/job1/tmp", base);
	chown(out, 4242, 4242);
	scan_result_free(&r);
	scan_tree(root, "user.", 30, 1, &r);
	t = _find(&r, "s/job1/tmp");
	tap_ok(scan_purge_tree(t, "user.", 4243, err, sizeof(err)) < 0 && strstr(err, "not yours"),
	       "purge refuses another uid (%s)", err);
	_label("s/job1/tmp", "archive", NULL, NULL);
	tap_ok(scan_purge_tree(t, "user.", 4242, err, sizeof(err)) < 0 && strstr(err, "no longer exempt"),
	       "purge refuses when the label changed after the scan (%s)", err);
	_label("s/job1/tmp", "exempt", NULL, NULL);
	tap_ok(scan_purge_tree(t, "user.", 4242, err, sizeof(err)) == 0 && access(out, F_OK) < 0,
	       "purge removes the owner's old exempt tree");
	snprintf(out, sizeof(out), "%s/s/job1/results/scratch", base);
	chown(out, 4242, 4242);
	scan_result_free(&r);
	scan_tree(root, "user.", 30, 1, &r);
	t = _find(&r, "s/job1/results");
	tap_ok(scan_purge_tree(t, "user.", 4242, err, sizeof(err)) < 0,
	       "purge refuses a tree that is not an exempt candidate (%s)", err);
	t = _find(&r, "s/job1/results/scratch");
	tap_ok(scan_purge_tree(t, "user.", 4242, err, sizeof(err)) == 0 && access(out, F_OK) < 0,
	       "an exempt tree inside an archive tree is removed alone");
	snprintf(out, sizeof(out), "%s/s/job1/results/r1", base);
	tap_ok(access(out, F_OK) == 0, "the archive tree's files stay");
	scan_result_free(&r);
}

/* Compare text with a golden file (or rewrite it). */
static void _golden(const char *name, const char *text)
{
	const char *dir = getenv("STAGEHAND_POLICY_GOLDEN");
	char p[PATH_MAX], *want = NULL;
	size_t n = 0;
	FILE *f;

	if (!dir) {
		tap_ok(0, "golden %s: STAGEHAND_POLICY_GOLDEN is not set", name);
		return;
	}
	snprintf(p, sizeof(p), "%s/%s.golden", dir, name);
	if (getenv("STAGEHAND_UPDATE_GOLDEN")) {
		f = fopen(p, "w");
		if (f) {
			fputs(text, f);
			fclose(f);
		}
	}
	f = fopen(p, "r");
	if (f) {
		want = malloc(1 << 20);
		n = want ? fread(want, 1, (1 << 20) - 1, f) : 0;
		if (want)
			want[n] = '\0';
		fclose(f);
	}
	if (!tap_ok(want && !strcmp(want, text), "policy export matches %s.golden", name))
		tap_diag("got:\n%s", text);
	free(want);
}

static char *_export_rbh(const char *format, const char *ns, const char *paths_from,
			 const char *rbh, const struct policy_paths *p)
{
	struct policy_opts o = { .format = format, .ns = ns, .paths_from = paths_from,
				 .pool = "hsm", .archive_id = 1, .hold_tag = 5301,
				 .archive_tag = 5302, .rbh_policies = rbh, .exempt_days = 30 };
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	policy_export(f, &o, p);
	fclose(f);
	return buf;
}

static void _export(const char *name, const char *format, const char *ns, const char *paths_from,
		    const struct policy_paths *p)
{
	char *buf = _export_rbh(format, ns, paths_from, "posix", p);

	_golden(name, buf);
	free(buf);
}

/*
 * The body of the top-level block "head {" in text (up to its closing "}" at
 * the start of a line), as a new string, or NULL if there is none.
 */
static char *_block(const char *text, const char *head)
{
	const char *a = strstr(text, head), *b;

	if (!a || (a != text && a[-1] != '\n'))
		return NULL;
	b = strstr(a, "\n}\n");
	return b ? strndup(a, (size_t)(b - a)) : NULL;
}

/* Does block "head {" of text hold every string of want and none of avoid? */
static int _block_has(const char *text, const char *head, const char *const *want,
		      const char *const *avoid)
{
	char *b = _block(text, head);
	int ok = b != NULL;

	for (int i = 0; ok && want && want[i]; i++)
		ok = strstr(b, want[i]) != NULL;
	for (int i = 0; ok && avoid && avoid[i]; i++)
		ok = strstr(b, avoid[i]) == NULL;
	free(b);
	return ok;
}

/*
 * The POSIX Robinhood export, read as Robinhood would: it must load without
 * the Lustre HSM definitions, keep exempt, pending/skipped and purge in
 * classes of their own, purge the purge class, archive nothing but the
 * archive class, and recheck ignored entries (a label flipped since the scan).
 */
static void test_robinhood_posix(const struct policy_paths *p)
{
	static const char *const ign[] = { "ignore_fileclass = stagehand_exempt;",
		"ignore_fileclass = stagehand_hold;", "ignore_fileclass = stagehand_purge;", NULL };
	static const char *const exempt[] = { "== \"exempt\"", "/scratch/alice/90/tmp", NULL };
	static const char *const not_exempt[] = { "pending", "skipped", "purge\"", "archive\"",
		"/scratch/alice/run/tmp", NULL };
	static const char *const hold[] = { "== \"pending\"", "== \"skipped\"",
		"/scratch/alice/run/tmp", NULL };
	static const char *const not_hold[] = { "exempt", "purge\"", "archive\"",
		"/scratch/alice/90/tmp", NULL };
	static const char *const purge[] = { "== \"purge\"", "/scratch/alice/77/input", NULL };
	static const char *const not_purge[] = { "exempt", "pending", "skipped", "archive\"", NULL };
	static const char *const recheck[] = { "recheck_ignored_entries = yes;", NULL };
	static const char *const purge_rules[] = { "target_fileclass = stagehand_purge;",
		"target_fileclass = stagehand_exempt;", "condition { last_mod > 30d }",
		"ignore_fileclass = stagehand_hold;", "ignore_fileclass = stagehand_archive;", NULL };
	static const char *const purge_def[] = { "status_manager = none;",
		"default_action = common.unlink;", "scope { type == file }", NULL };
	static const char *const only_archive[] = { "target_fileclass = stagehand_archive;", NULL };
	static const char *const no_default[] = { "rule default", "target_fileclass = stagehand_exempt",
		"target_fileclass = stagehand_hold", "target_fileclass = stagehand_purge", NULL };
	char *t = _export_rbh("robinhood", "user.", "/scratch", "posix", p);
	char *l = _export_rbh("robinhood", "user.", "/scratch", "lhsm", p);

	tap_ok(t && !strstr(t, "lhsm"), "robinhood posix: no lhsm definition or rule");
	tap_ok(t && _block_has(t, "define_policy stagehand_archive {", NULL, NULL) &&
	       _block_has(t, "define_policy stagehand_purge {", purge_def, NULL),
	       "robinhood posix: defines its own archive and purge policies");
	tap_ok(t && _block_has(t, "fileclass stagehand_exempt {", exempt, not_exempt),
	       "robinhood posix: exempt has a class of its own");
	tap_ok(t && _block_has(t, "fileclass stagehand_hold {", hold, not_hold),
	       "robinhood posix: pending and skipped share a class without exempt");
	tap_ok(t && _block_has(t, "fileclass stagehand_purge {", purge, not_purge),
	       "robinhood posix: purge has a class of its own");
	tap_ok(t && _block_has(t, "stagehand_purge_rules {", purge_rules, NULL),
	       "robinhood posix: the purge rules take purge at once and exempt after 30 days");
	tap_ok(t && _block_has(t, "stagehand_archive_rules {", ign, NULL) &&
	       _block_has(t, "stagehand_archive_rules {", only_archive, no_default),
	       "robinhood posix: the archive rules ignore exempt, hold and purge, archive only "
	       "the archive class");
	tap_ok(t && _block_has(t, "stagehand_archive_parameters {", recheck, NULL) &&
	       _block_has(t, "stagehand_purge_parameters {", recheck, NULL),
	       "robinhood posix: both policies recheck ignored entries");
	tap_ok(l && _block_has(l, "lhsm_archive_rules {", ign, NULL) &&
	       _block_has(l, "lhsm_release_rules {", ign, NULL) &&
	       _block_has(l, "lhsm_archive_parameters {", recheck, NULL) &&
	       _block_has(l, "stagehand_purge_rules {", purge_rules, NULL) &&
	       !strstr(l, "define_policy stagehand_archive"),
	       "robinhood lhsm: the lhsm blocks ignore the three classes, recheck, and purge");
	free(t);
	free(l);
}

static void test_policy(void)
{
	struct policy_paths none = { 0 }, p = { 0 };
	static char *hold[] = { "/scratch/alice/run/tmp", "/scratch/bob/it's_100%" };
	static char *exempt[] = { "/scratch/alice/90/tmp" };
	static char *arch[] = { "/scratch/alice/run/results" };
	static char *purge[] = { "/scratch/alice/77/input" };
	struct policy_opts o = { .format = "nosuch", .ns = "user." };
	int rc;

	_export("gpfs-user", "gpfs", "user.", NULL, &none);
	_export("gpfs-trusted", "gpfs", "trusted.", NULL, &none);
	_export("robinhood-user", "robinhood", "user.", NULL, &none);
	_export("dmf-user", "dmf", "user.", NULL, &none);
	_export("lustre-hsm-trusted", "lustre-hsm", "trusted.", NULL, &none);
	p.v[POLICY_HOLD] = hold;
	p.n[POLICY_HOLD] = 2;
	p.v[POLICY_ARCHIVE] = arch;
	p.n[POLICY_ARCHIVE] = 1;
	p.v[POLICY_PURGE] = purge;
	p.n[POLICY_PURGE] = 1;
	p.v[POLICY_EXEMPT] = exempt;
	p.n[POLICY_EXEMPT] = 1;
	test_robinhood_posix(&p);
	_export("gpfs-paths", "gpfs", "user.", "/scratch", &p);
	_export("robinhood-paths", "robinhood", "user.", "/scratch", &p);
	{
		char *buf = _export_rbh("robinhood", "user.", "/scratch", "lhsm", &p);

		_golden("robinhood-lhsm-paths", buf);
		free(buf);
	}
	{
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);

		o.format = "robinhood";
		o.paths_from = "/scratch";
		rc = policy_export(f, &o, &p);
		fclose(f);
		tap_ok(rc == 0 && strstr(buf, "tree == \"/scratch/bob/it's_100%\""),
		       "robinhood carries quotes and %% in tree paths");
		free(buf);
	}
	{
		static char *bad[] = { "/scratch/a\"b", "/scratch/glob*", "/scratch/new\nline" };
		struct policy_paths q = { 0 };
		char *buf = NULL;
		size_t len = 0;
		FILE *f = open_memstream(&buf, &len);

		q.v[POLICY_HOLD] = bad;
		q.n[POLICY_HOLD] = 3;
		o.format = "robinhood";
		rc = policy_export(f, &o, &q);
		fclose(f);
		tap_ok(rc == 3 && !strstr(buf, "a\"b") && !strstr(buf, "glob*"),
		       "robinhood leaves out paths with quotes, glob or control characters (%d)", rc);
		free(buf);
		buf = NULL;
		f = open_memstream(&buf, &len);
		o.format = "gpfs";
		rc = policy_export(f, &o, &q);
		fclose(f);
		tap_ok(rc == 1 && strstr(buf, "a\"b") && strstr(buf, "glob*"),
		       "gpfs carries quotes and globs, leaves out a newline (%d)", rc);
		free(buf);
	}
	o.format = "nosuch";
	tap_ok(policy_export(stdout, &o, &none) == -1, "unknown format refused");
}

int main(void)
{
	const char *top = getenv("STAGEHAND_TEST_TMP");
	char probe[PATH_MAX];

	snprintf(base, sizeof(base), "%s/labels-test.XXXXXX", top ? top : ".");
	if (!mkdtemp(base)) {
		printf("Bail out! mkdtemp %s: %s\n", base, strerror(errno));
		return 1;
	}
	snprintf(probe, sizeof(probe), "%s", base);
	if (setxattr(probe, "user.stagehand.probe", "1", 1, 0) < 0) {
		printf("1..0 # SKIP user.* xattrs not supported in %s: %s\n", base, strerror(errno));
		rmdir(base);
		return 0;
	}
	removexattr(probe, "user.stagehand.probe");
	test_read();
	test_namespace();
	test_scan();
	test_policy();
	_rm_rf(base);
	return tap_done();
}
