/*
 * xattr.h - stagehand labels as extended attributes on an open file.
 *
 * Owns: the names of the labels ("<ns>.stagehand.<name>", ns "user" or
 * "trusted") and setting/reading them on a file descriptor: the one label
 * writer of the daemon, the CLI and the SPANK plugin. Working on an fd
 * (never a path) is deliberate: callers open the file with the owner's
 * identity and O_NOFOLLOW, so a label is never written through a planted
 * symlink.
 *
 * Must never: open paths, exit, or log.
 */
#ifndef STAGEHAND_XATTR_H
#define STAGEHAND_XATTR_H

#include <stddef.h>
#include <sys/types.h>

#define XATTR_POLICY   "policy"    /* exempt | pending | archive | archived */
#define XATTR_LOCATION "location"  /* where the archive copy is */
#define XATTR_JOB      "job"       /* Slurm job id */
#define XATTR_OWNER    "owner"     /* uid */

/*
 * Build "<ns>.stagehand.<name>" into out. ns is "user" or "trusted", with or
 * without the trailing dot (both spellings are in use). Returns 0, or -1
 * when ns is empty or out is too small.
 */
int xattr_name(const char *ns, const char *name, char *out, size_t outlen);

/* Set label name=value on fd. Returns 0, or -1 with a message in err. */
int xattr_set_label(int fd, const char *ns, const char *name, const char *value,
		    char *err, size_t errlen);

/*
 * Read label name on fd into buf (NUL-terminated). Returns the value length,
 * 0 with buf "" when the label is absent, or -1 with a message in err.
 */
ssize_t xattr_get_label(int fd, const char *ns, const char *name, char *buf, size_t buflen,
			char *err, size_t errlen);

#endif /* STAGEHAND_XATTR_H */
