/*
 * scan.c - `stagehand scan ROOT`: a scratch tree by label, for sites with no
 * policy engine (and as the path source of `policy export --paths-from`).
 *
 * Every labelled directory starts a tree; each file counts in the innermost
 * labelled directory above it, or as unlabelled data. The walk never
 * follows a symlink, never leaves ROOT's filesystem, and keeps only the
 * labelled directories in memory (never a list of files).
 *
 * --purge removes purge candidates (exempt trees older than --older-than
 * days, and 'purge' trees: a job's staged inputs after its end), with the
 * caller's own identity, and only trees the caller owns (directory and
 * owner label), that hold no other label and whose label and inode have
 * not changed since the walk. Root is refused: root does not delete users'
 * data on a label's word.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "grow.h"
#include "labels.h"
#include "scan.h"
#include "xattr.h"

#define STACK_MAX 256
#define RM_DEPTH_MAX 512

static const char *const _class_names[SCAN_NCLASS] = {
	"to_archive", "pending", "exempt", "purge_candidate", "archived", "bad_label",
	"unlabelled",
};

const char *scan_class_name(enum scan_class c)
{
	return (unsigned)c < SCAN_NCLASS ? _class_names[c] : "?";
}

struct _stack {
	int level;
	size_t idx;
};

struct _walk {
	struct scan_result *r;
	struct _stack st[STACK_MAX];
	int depth;
	int quiet;
};

static int _push_tree(struct scan_result *r, const char *path, const struct stat *st,
		      const struct label *l)
{
	struct scan_tree *t;

	if (grow_array((void **)&r->trees, &r->cap, r->ntrees + 1, sizeof(*r->trees), 64) < 0)
		return -1;
	t = &r->trees[r->ntrees];
	memset(t, 0, sizeof(*t));
	t->path = strdup(path);
	if (!t->path)
		return -1;
	t->l = *l;
	t->dev = st->st_dev;
	t->ino = st->st_ino;
	t->uid = st->st_uid;
	t->newest = st->st_mtime;
	r->ntrees++;
	return 0;
}

static int _walk_cb(const char *path, const struct stat *st, int level, const char *err,
		    void *arg)
{
	struct _walk *w = arg;
	struct scan_result *r = w->r;
	struct label l;
	char e2[1024];
	int rc;

	if (!st) {
		if (!w->quiet)
			client_errx("scan: %s", err);
		r->errors++;
		return 0;
	}
	while (w->depth > 0 && w->st[w->depth - 1].level >= level)
		w->depth--;
	rc = 0;
	if (S_ISDIR(st->st_mode)) {
		rc = labels_read(path, r->ns, &l, e2, sizeof(e2));
		if (rc < 0) {
			if (!w->quiet)
				client_errx("scan: %s", e2);
			r->errors++;
			rc = 0;
		}
	}
	if (rc == 1) {
		for (int i = 0; i < w->depth; i++)
			r->trees[w->st[i].idx].nested = 1;
		if (_push_tree(r, path, st, &l) < 0) {
			client_errx("scan: out of memory after %zu labelled directories", r->ntrees);
			return -1;
		}
		if (w->depth < STACK_MAX) {
			w->st[w->depth].level = level;
			w->st[w->depth].idx = r->ntrees - 1;
			w->depth++;
		} else {
			if (!w->quiet)
				client_errx("scan: %s: labelled directories nested more than %d deep; "
					    "files below count in the outer one", path, STACK_MAX);
			r->errors++;
		}
	}
	if (w->depth > 0) {
		struct scan_tree *t = &r->trees[w->st[w->depth - 1].idx];

		if (S_ISDIR(st->st_mode)) {
			t->dirs++;
		} else {
			t->files++;
			if (S_ISREG(st->st_mode))
				t->bytes += (unsigned long long)st->st_size;
		}
		if (st->st_mtime > t->newest)
			t->newest = st->st_mtime;
	} else if (!S_ISDIR(st->st_mode)) {
		r->unlabelled_files++;
		if (S_ISREG(st->st_mode))
			r->unlabelled_bytes += (unsigned long long)st->st_size;
	}
	return 0;
}

enum scan_class scan_classify(const struct scan_tree *t, time_t now, int older_than_days)
{
	const char *p = t->l.policy;

	if (!strcmp(p, "archive"))
		return SCAN_TO_ARCHIVE;
	if (!strcmp(p, "pending"))
		return SCAN_PENDING;
	if (!strcmp(p, "archived"))
		return SCAN_ARCHIVED;
	if (!strcmp(p, "skipped"))	/* an archive= the job's end state skipped: kept as is */
		return SCAN_EXEMPT;
	if (!strcmp(p, "exempt"))
		return now - t->newest >= (time_t)older_than_days * 86400 ? SCAN_PURGE : SCAN_EXEMPT;
	/* A job's staged inputs after its end: stagehandd removes them after InputRetention. */
	if (!strcmp(p, "purge"))
		return SCAN_PURGE;
	return SCAN_BAD;
}

int scan_tree(const char *root, const char *ns, int older_than_days, int quiet,
	      struct scan_result *r)
{
	struct _walk *w;
	int rc;

	memset(r, 0, sizeof(*r));
	r->ns = ns;
	r->now = time(NULL);
	r->older_than_days = older_than_days;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -1;
	w->r = r;
	w->quiet = quiet;
	rc = labels_walk(root, 1, _walk_cb, w);
	free(w);
	if (rc < 0)
		return -1;
	for (size_t i = 0; i < r->ntrees; i++) {
		struct scan_tree *t = &r->trees[i];

		t->cls = scan_classify(t, r->now, older_than_days);
		r->total[t->cls].trees++;
		r->total[t->cls].files += t->files;
		r->total[t->cls].bytes += t->bytes;
	}
	r->total[SCAN_UNLABELLED].files = r->unlabelled_files;
	r->total[SCAN_UNLABELLED].bytes = r->unlabelled_bytes;
	return 0;
}

void scan_result_free(struct scan_result *r)
{
	for (size_t i = 0; i < r->ntrees; i++)
		free(r->trees[i].path);
	free(r->trees);
	memset(r, 0, sizeof(*r));
}

/* ---- purge ---- */

/* Remove everything in directory fd (on device dev), then nothing else. 0 or -1 with err. */
static int _rm_contents(int fd, dev_t dev, int depth, unsigned long long *files,
			char *err, size_t errlen)
{
	DIR *d;
	struct dirent *de;
	int rc = 0;

	if (depth > RM_DEPTH_MAX) {
		snprintf(err, errlen, "more than %d levels deep", RM_DEPTH_MAX);
		close(fd);
		return -1;
	}
	d = fdopendir(fd);
	if (!d) {
		snprintf(err, errlen, "cannot read a directory: %s", strerror(errno));
		close(fd);
		return -1;
	}
	while (rc == 0 && (errno = 0, de = readdir(d)) != NULL) {
		struct stat st;

		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
			snprintf(err, errlen, "%s: %s", de->d_name, strerror(errno));
			rc = -1;
			break;
		}
		if (st.st_dev != dev) {
			snprintf(err, errlen, "%s is on another filesystem (a mount point): left alone",
				 de->d_name);
			rc = -1;
			break;
		}
		if (S_ISDIR(st.st_mode)) {
			int sub = openat(dirfd(d), de->d_name,
					 O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);

			if (sub < 0) {
				snprintf(err, errlen, "%s: %s", de->d_name, strerror(errno));
				rc = -1;
				break;
			}
			rc = _rm_contents(sub, dev, depth + 1, files, err, errlen);
			if (rc == 0 && unlinkat(dirfd(d), de->d_name, AT_REMOVEDIR) < 0) {
				snprintf(err, errlen, "%s: %s", de->d_name, strerror(errno));
				rc = -1;
			}
		} else {
			if (unlinkat(dirfd(d), de->d_name, 0) < 0) {
				snprintf(err, errlen, "%s: %s", de->d_name, strerror(errno));
				rc = -1;
			} else {
				(*files)++;
			}
		}
	}
	closedir(d);
	return rc;
}

int scan_purge_tree(const struct scan_tree *t, const char *ns, uid_t me, char *err,
		    size_t errlen)
{
	char parent[PATH_MAX], full[128], val[64];
	const char *name;
	struct stat st;
	unsigned long long files = 0;
	int pfd, fd;
	ssize_t n;

	if (me == 0) {
		snprintf(err, errlen, "root does not purge users' data: run as the owner");
		return -1;
	}
	if (t->cls != SCAN_PURGE) {
		snprintf(err, errlen, "not a purge candidate (exempt past --older-than, or purge)");
		return -1;
	}
	if (t->nested) {
		snprintf(err, errlen, "it holds other labelled directories: left alone");
		return -1;
	}
	if (t->uid != me || strtoull(t->l.owner, NULL, 10) != (unsigned long long)me ||
	    !t->l.owner[0]) {
		snprintf(err, errlen, "not yours (directory uid %lu, owner label '%s')",
			 (unsigned long)t->uid, t->l.owner);
		return -1;
	}
	name = strrchr(t->path, '/');
	if (!name || name == t->path || !name[1]) {
		snprintf(err, errlen, "refusing to purge a filesystem root");
		return -1;
	}
	if ((size_t)(name - t->path) >= sizeof(parent)) {
		snprintf(err, errlen, "path too long");
		return -1;
	}
	memcpy(parent, t->path, (size_t)(name - t->path));
	parent[name - t->path] = '\0';
	name++;
	pfd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (pfd < 0) {
		snprintf(err, errlen, "cannot open %s: %s", parent, strerror(errno));
		return -1;
	}
	fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(err, errlen, "cannot open it again: %s", strerror(errno));
		if (fd >= 0)
			close(fd);
		close(pfd);
		return -1;
	}
	if (st.st_ino != t->ino || st.st_dev != t->dev || st.st_uid != me) {
		snprintf(err, errlen, "it changed since the scan (another directory now): left alone");
		close(fd);
		close(pfd);
		return -1;
	}
	if (xattr_name(ns, XATTR_POLICY, full, sizeof(full)) < 0 ||
	    (n = fgetxattr(fd, full, val, sizeof(val) - 1)) < 0 ||
	    ((val[n] = '\0'), strcmp(val, t->l.policy) != 0)) {
		snprintf(err, errlen, "its label is no longer %s: left alone", t->l.policy);
		close(fd);
		close(pfd);
		return -1;
	}
	if (_rm_contents(fd, st.st_dev, 0, &files, err, errlen) < 0) {
		close(pfd);
		return -1;
	}
	if (unlinkat(pfd, name, AT_REMOVEDIR) < 0) {
		snprintf(err, errlen, "cannot remove the directory itself: %s", strerror(errno));
		close(pfd);
		return -1;
	}
	close(pfd);
	return 0;
}

/* ---- command ---- */

static void _usage(FILE *fp)
{
	fprintf(fp,
		"usage: stagehand scan [--json] [--all] [--older-than DAYS] [--namespace NS] ROOT\n"
		"       stagehand scan --list POLICY[,POLICY...] [--print0] ROOT\n"
		"       stagehand scan --purge --yes [--older-than DAYS] ROOT\n"
		"\n"
		"Walk ROOT (one filesystem, symlinks never followed) and report it by label:\n"
		"archive-labelled trees not yet archived, pending trees, exempt trees whose newest\n"
		"file is older than DAYS and purge-labelled trees (a job's staged inputs after it\n"
		"ended: purge candidates), labels with bad values, unlabelled data,\n"
		"with file and byte totals per class. Dry run: nothing is changed.\n"
		"\n"
		"  --older-than DAYS  age of a purge candidate (default 30)\n"
		"  --all              list every labelled tree, not only the ones needing action\n"
		"  --json             one JSON document\n"
		"  --namespace NS     user. or trusted. (default: XattrNamespace of stagehand.conf)\n"
		"  --list POLICIES    print only the labelled directories with these policies, one\n"
		"                     per line (for scripts; see stagehand policy export)\n"
		"  --print0           with --list: end each path with NUL instead of newline\n"
		"  --purge --yes      remove the purge candidates you own (never as root)\n"
		"\n"
		"Exit: 0 done, 1 a purge left something behind, 2 usage error or unreadable parts.\n");
}

static int _in_list(const char *list, const char *policy)
{
	size_t n = strlen(policy);

	for (const char *p = list; *p;) {
		const char *c = strchr(p, ',');
		size_t len = c ? (size_t)(c - p) : strlen(p);

		if (len == n && !strncmp(p, policy, n))
			return 1;
		p += len + (c ? 1 : 0);
	}
	return 0;
}

static int _check_list(const char *list)
{
	for (const char *p = list; *p;) {
		const char *c = strchr(p, ',');
		size_t len = c ? (size_t)(c - p) : strlen(p);
		char w[32];

		if (len == 0 || len >= sizeof(w))
			goto bad;
		memcpy(w, p, len);
		w[len] = '\0';
		if (!labels_policy_known(w))
			goto bad;
		p += len + (c ? 1 : 0);
	}
	return *list ? 0 : -1;
bad:
	client_errx("scan: --list %s: give policies from exempt, pending, skipped, archive, archived, purge, "
		    "separated by commas", list);
	return -1;
}

static void _print_table(const struct scan_result *r, const char *root, int all)
{
	char b[32];
	size_t shown = 0;

	printf("%-15s %-9s %-9s %-6s %9s %11s %6s  %s\n", "CLASS", "POLICY", "JOB", "OWNER",
	       "FILES", "BYTES", "AGE_D", "PATH");
	for (size_t i = 0; i < r->ntrees; i++) {
		const struct scan_tree *t = &r->trees[i];

		if (!all && (t->cls == SCAN_EXEMPT || t->cls == SCAN_ARCHIVED))
			continue;
		shown++;
		printf("%-15s ", scan_class_name(t->cls));
		if (labels_policy_known(t->l.policy)) {
			printf("%-9s ", t->l.policy);
		} else {
			labels_print_safe(stdout, t->l.policy[0] ? t->l.policy : "(none)");
			fputc(' ', stdout);
		}
		printf("%-9s %-6s %9llu %11s %6lld  ", t->l.job[0] ? t->l.job : "-",
		       t->l.owner[0] ? t->l.owner : "-", t->files, labels_human(t->bytes, b, sizeof(b)),
		       (long long)((r->now - t->newest) / 86400));
		labels_print_safe(stdout, t->path);
		fputc('\n', stdout);
	}
	if (!shown)
		printf("(no labelled tree needs action)\n");
	printf("\ntotals under ");
	labels_print_safe(stdout, root);
	printf(" (labels %sstagehand.*; purge candidates: purge, or exempt with newest file older "
	       "than %d days):\n",
	       r->ns, r->older_than_days);
	for (int c = 0; c < SCAN_NCLASS; c++) {
		const struct scan_total *s = &r->total[c];

		if (c == SCAN_UNLABELLED)
			printf("  %-16s %7s   %10llu files %11s\n", scan_class_name(c), "",
			       s->files, labels_human(s->bytes, b, sizeof(b)));
		else
			printf("  %-16s %7zu trees %10llu files %11s\n", scan_class_name(c), s->trees,
			       s->files, labels_human(s->bytes, b, sizeof(b)));
	}
	if (r->errors)
		printf("  %d path(s) could not be read (see stderr): totals are incomplete\n",
		       r->errors);
}

static void _print_json(const struct scan_result *r, const char *root)
{
	json_t *trees = json_array(), *tot = json_object(), *doc;

	for (size_t i = 0; i < r->ntrees; i++) {
		const struct scan_tree *t = &r->trees[i];

		json_array_append_new(trees, json_pack("{s:o,s:s,s:o,s:o,s:o,s:o,s:I,s:I,s:I,s:I,s:I,s:b}",
			"path", labels_jstr(t->path), "class", scan_class_name(t->cls),
			"policy", t->l.policy[0] ? labels_jstr(t->l.policy) : json_null(),
			"job", t->l.job[0] ? labels_jstr(t->l.job) : json_null(),
			"owner", t->l.owner[0] ? labels_jstr(t->l.owner) : json_null(),
			"location", t->l.location[0] ? labels_jstr(t->l.location) : json_null(),
			"uid", (json_int_t)t->uid, "files", (json_int_t)t->files,
			"bytes", (json_int_t)t->bytes, "newest_mtime", (json_int_t)t->newest,
			"age_days", (json_int_t)((r->now - t->newest) / 86400), "nested", t->nested));
	}
	for (int c = 0; c < SCAN_NCLASS; c++)
		json_object_set_new(tot, scan_class_name(c), json_pack("{s:I,s:I,s:I}",
			"trees", (json_int_t)r->total[c].trees, "files", (json_int_t)r->total[c].files,
			"bytes", (json_int_t)r->total[c].bytes));
	doc = json_pack("{s:o,s:s,s:i,s:o,s:o,s:i}", "root", labels_jstr(root), "namespace", r->ns,
			"older_than_days", r->older_than_days, "trees", trees, "totals", tot,
			"errors", r->errors);
	labels_put_json(doc);
}

static int _by_path(const void *a, const void *b)
{
	return strcmp(((const struct scan_tree *)a)->path, ((const struct scan_tree *)b)->path);
}

/* What 'stagehand scan' was asked (_scan_options). */
struct _scan_opts {
	const char *ns, *list, *root;
	int json, all, older, print0, purge, yes;
};

/* The checks of option combinations, each with its own message: 0 or -1 (shown). */
static int _scan_combinations(const struct _scan_opts *o)
{
	const char *why = NULL;

	if (o->list && _check_list(o->list) < 0)
		return -1;
	if (o->print0 && !o->list)
		why = "--print0 goes with --list";
	else if (o->purge && !o->yes)
		why = "--purge deletes data: add --yes to confirm (run without --purge first to "
		      "see what would go)";
	else if (o->purge && (o->list || o->json))
		why = "--purge does not combine with --list or --json";
	else if (o->purge && getuid() == 0)
		why = "--purge refuses to run as root: root does not delete users' data on a "
		      "label's word; run it as the data's owner";
	if (why)
		client_errx("scan: %s", why);
	return why ? -1 : 0;
}

/* The command line into *o: 0 go on, 1 help shown, 2 a usage error shown. */
static int _scan_options(int argc, char **argv, struct _scan_opts *o)
{
	enum { O_JSON = 1, O_ALL, O_OLDER, O_NS, O_LIST, O_PRINT0, O_PURGE, O_YES, O_CONFIG };
	static const struct option lo[] = {
		{ "json", no_argument, NULL, O_JSON },
		{ "all", no_argument, NULL, O_ALL },
		{ "older-than", required_argument, NULL, O_OLDER },
		{ "namespace", required_argument, NULL, O_NS },
		{ "list", required_argument, NULL, O_LIST },
		{ "print0", no_argument, NULL, O_PRINT0 },
		{ "purge", no_argument, NULL, O_PURGE },
		{ "yes", no_argument, NULL, O_YES },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	*o = (struct _scan_opts){ .older = 30 };
	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case O_JSON: o->json = 1; break;
		case O_ALL: o->all = 1; break;
		case O_OLDER: {
			char *end;
			long v = strtol(optarg, &end, 10);

			if (*optarg < '0' || *optarg > '9' || *end || v > 100000) {
				client_errx("scan: --older-than %s: give a number of days from 0 to "
					    "100000", optarg);
				return 2;
			}
			o->older = (int)v;
			break;
		}
		case O_NS: o->ns = optarg; break;
		case O_LIST: o->list = optarg; break;
		case O_PRINT0: o->print0 = 1; break;
		case O_PURGE: o->purge = 1; break;
		case O_YES: o->yes = 1; break;
		case O_CONFIG: client_opt_config = optarg; break;
		case 'h': _usage(stdout); return 1;
		default:
			client_errx("scan: bad option '%s': unknown, or missing its value (see "
				    "'stagehand scan --help')", argv[optind - 1]);
			return 2;
		}
	}
	if (optind != argc - 1) {
		client_errx("scan: give exactly one ROOT directory");
		return 2;
	}
	o->root = argv[optind];
	return _scan_combinations(o) < 0 ? 2 : 0;
}

/* --list: the trees of the listed policies, one path a line (or NUL-ended). 0 or 2. */
static int _scan_list(const struct scan_result *r, const char *list, int print0)
{
	int rc = 0;

	for (size_t i = 0; i < r->ntrees; i++) {
		const struct scan_tree *t = &r->trees[i];

		if (!_in_list(list, t->l.policy))
			continue;
		if (!print0 && strchr(t->path, '\n')) {
			client_errx("scan: a labelled path contains a newline; use --print0 "
				    "(skipped: %zu bytes)", strlen(t->path));
			rc = 2;
			continue;
		}
		fputs(t->path, stdout);
		fputc(print0 ? '\0' : '\n', stdout);
	}
	return rc;
}

/* --purge: the purge trees (and old exempt ones) the caller owns, removed. 0, or 1 if one was kept. */
static int _scan_purge(const struct scan_result *r, const char *ns, int older)
{
	char err[PATH_MAX + 256];
	uid_t me = getuid();
	int removed = 0, rc = 0;

	printf("\npurge (purge trees and exempt trees older than %d days that you own):\n",
	       older);
	for (size_t i = 0; i < r->ntrees; i++) {
		const struct scan_tree *t = &r->trees[i];
		int ok;

		if (t->cls != SCAN_PURGE)
			continue;
		ok = scan_purge_tree(t, ns, me, err, sizeof(err)) == 0;
		printf("  %s ", ok ? "removed" : "kept   ");
		labels_print_safe(stdout, t->path);
		if (ok) {
			removed++;
		} else {
			fputs(": ", stdout);
			labels_print_safe(stdout, err);
			rc = 1;
		}
		fputc('\n', stdout);
	}
	printf("  %d tree(s) removed\n", removed);
	return rc;
}

int cmd_scan(int argc, char **argv)
{
	struct _scan_opts o;
	char ns[16], root[PATH_MAX], err[PATH_MAX + 256];
	struct scan_result r;
	int rc = _scan_options(argc, argv, &o);

	if (rc)
		return rc == 1 ? 0 : 2;
	if (labels_namespace(o.ns, ns, sizeof(ns)) < 0)
		return 2;
	if (labels_root(o.root, root, sizeof(root), err, sizeof(err)) < 0) {
		client_errx("scan: %s", err);
		return 2;
	}
	if (scan_tree(root, ns, o.older, 0, &r) < 0) {
		scan_result_free(&r);
		return 2;
	}
	qsort(r.trees, r.ntrees, sizeof(*r.trees), _by_path);
	if (o.list)
		rc = _scan_list(&r, o.list, o.print0);
	else if (o.json)
		_print_json(&r, root);
	else
		_print_table(&r, root, o.all);
	if (o.purge && _scan_purge(&r, ns, o.older))
		rc = 1;
	if (rc == 0 && r.errors)
		rc = 2;
	scan_result_free(&r);
	return rc;
}
