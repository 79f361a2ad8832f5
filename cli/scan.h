/*
 * scan.h - a scratch tree by label (scan.c): the walk behind
 * `stagehand scan` and `stagehand policy export --paths-from`.
 *
 * Owns: classifying labelled directories and totalling files and bytes.
 * Must never: follow a symlink, leave the root's filesystem, hold a list of
 * files, or delete anything but what scan_purge_tree is asked to.
 */
#ifndef STAGEHAND_CLI_SCAN_H
#define STAGEHAND_CLI_SCAN_H

#include <stddef.h>
#include <sys/types.h>
#include <time.h>

#include "labels.h"

enum scan_class {
	SCAN_TO_ARCHIVE = 0,   /* archive: ready, not archived yet */
	SCAN_PENDING,          /* pending: its job writes here (or the label is stale) */
	SCAN_EXEMPT,           /* exempt, younger than --older-than */
	SCAN_PURGE,            /* purge candidate: purge (a job's inputs after it), or exempt
				  with its newest file older than --older-than */
	SCAN_ARCHIVED,         /* archived: a verified copy exists (per the label) */
	SCAN_BAD,              /* a label with no or an unknown policy value */
	SCAN_UNLABELLED,       /* totals only: files under no labelled directory */
	SCAN_NCLASS
};

/* One labelled directory; its files are those not under a deeper labelled one. */
struct scan_tree {
	char *path;                    /* owned */
	struct label l;
	dev_t dev;
	ino_t ino;
	uid_t uid;                     /* the directory's owner */
	unsigned long long files, bytes, dirs;
	time_t newest;                 /* newest mtime of the directory and its own entries */
	int nested;                    /* 1: holds another labelled directory */
	enum scan_class cls;
};

struct scan_total {
	size_t trees;
	unsigned long long files, bytes;
};

struct scan_result {
	const char *ns;                /* borrowed */
	time_t now;
	int older_than_days;
	struct scan_tree *trees;       /* owned, walk order */
	size_t ntrees, cap;
	unsigned long long unlabelled_files, unlabelled_bytes;
	struct scan_total total[SCAN_NCLASS];
	int errors;                    /* paths that could not be read */
};

/* Static name of a class ("to_archive", ...). */
const char *scan_class_name(enum scan_class c);

/* The class of a tree at time now. */
enum scan_class scan_classify(const struct scan_tree *t, time_t now, int older_than_days);

/*
 * Walk root (absolute, symlink-free: see labels_root) with labels in ns.
 * quiet: do not print unreadable paths (they are still counted in errors).
 * Returns 0 (r filled; free with scan_result_free), or -1 (out of memory,
 * message printed).
 */
int scan_tree(const char *root, const char *ns, int older_than_days, int quiet,
	      struct scan_result *r);
void scan_result_free(struct scan_result *r);

/*
 * Remove a purge candidate as the calling process (me = its uid): only when
 * me is not root, the tree holds no other label, its directory and owner
 * label are me's, and its inode and exempt label are what the walk saw.
 * Never follows a symlink or crosses a mount point. 0, or -1 with err.
 */
int scan_purge_tree(const struct scan_tree *t, const char *ns, uid_t me, char *err,
		    size_t errlen);

#endif /* STAGEHAND_CLI_SCAN_H */
