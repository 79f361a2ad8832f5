/*
 * labels.h - what tags, scan and policy share: the label namespace (option
 * or stagehand.conf), reading a path's stagehand labels without following
 * symlinks, a bounded walk of a tree, and the daemon connection for
 * `tags --verify`.
 *
 * Owns: nothing persistent. Must never: follow a symlink while reading
 * labels or walking, write a label, or send an identity to the daemon (the
 * daemon takes it from the socket peer or MUNGE).
 */
#ifndef STAGEHAND_CLI_LABELS_H
#define STAGEHAND_CLI_LABELS_H

#include <stddef.h>
#include <stdio.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "client.h"
#include "http.h"

/* The values of one path's stagehand labels ("" = absent). */
struct label {
	char policy[64];
	char job[32];
	char owner[32];
	char location[4096];
};

/* 1 if the policy value is one of exempt, pending, archive, archived, skipped, purge. */
int labels_policy_known(const char *policy);

/*
 * Resolve the namespace: opt ("user", "user.", "trusted", "trusted.") wins,
 * else XattrNamespace from the config file (--config, STAGEHAND_CONF, or the
 * default file; an unreadable default file is a note on stderr, not an
 * error), else "user.". Writes "user." or "trusted." into out (>= 16 bytes).
 * Returns 0, or -1 with a message printed (bad option, broken config).
 */
int labels_namespace(const char *opt, char *out, size_t outlen);

/*
 * Read path's labels (lgetxattr: a symlink's own attributes, never its
 * target's) into *l. Returns 1 when a policy, job or owner label is present,
 * 0 when none is, -1 on an error other than "no such attribute" /
 * "not supported" (err says which path and why).
 */
int labels_read(const char *path, const char *ns, struct label *l, char *err, size_t errlen);

/* Make an absolute, symlink-free path of a walk root. 0 or -1 with err. */
int labels_root(const char *in, char *out, size_t outlen, char *err, size_t errlen);

/*
 * Walk a tree, depth first, in directory order, never following symlinks;
 * with one_fs, never leaving root's filesystem. Memory is bounded by the
 * depth (one open directory per level, at most 64 at once; deeper trees are
 * reopened by path). fn gets the path, the lstat of the entry, and its depth
 * (root = 0); for an entry that could not be read, st is NULL and err says
 * why. fn returns 0 to go on, 1 to skip a directory's contents, -1 to stop.
 * Returns 0, or -1 when fn stopped the walk.
 */
typedef int (*labels_walk_fn)(const char *path, const struct stat *st, int depth,
			      const char *err, void *arg);
int labels_walk(const char *root, int one_fs, labels_walk_fn fn, void *arg);

/* Open the daemon per client.h's order (--socket, --server, env, config, default). NULL: printed. */
struct http *labels_connect(void);

/* "12.3 GiB" for n bytes into buf. Returns buf. */
const char *labels_human(unsigned long long n, char *buf, size_t len);

/* Print s with control characters and invalid UTF-8 as \xNN (for tables). */
void labels_print_safe(FILE *fp, const char *s);

/* A JSON string for any bytes: invalid UTF-8 becomes \xNN text. New reference. */
struct json_t;
struct json_t *labels_jstr(const char *s);

/* Print doc on stdout as indented JSON, keys in order; takes (steals) doc. */
void labels_put_json(struct json_t *doc);

#endif /* STAGEHAND_CLI_LABELS_H */
