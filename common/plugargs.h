/*
 * plugargs.h - the stagehand.so arguments from plugstack.conf.
 *
 * Owns: defaults, strict parsing and validation of "key=value" words.
 * Must never: log, exit or touch the filesystem (the caller decides what an
 * error means in its SPANK context).
 */
#ifndef STAGEHAND_PLUGARGS_H
#define STAGEHAND_PLUGARGS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

#define PLUGARGS_DEFAULT_SPOOL "/var/spool/stagehand"
#define PLUGARGS_DEFAULT_SCRATCH "/scratch"

struct plugargs {
	char socket[108];      /* socket=: daemon's UNIX socket (sun_path limit);
				  "" = not given */
	char server[300];      /* server=HOST:PORT: the daemon over TCP + MUNGE;
				  "" = not given. With neither, conf's Server=,
				  else its SocketPath (dclient_find) */
	char conf[PATH_MAX];   /* conf=: stagehand.conf to read them from; "" = the
				  default file, which may be absent */
	bool fail_on_error;    /* on_error=fail: a job whose inputs are not
				  confirmed, or whose directories cannot be
				  made, does not start; warn: it starts */
	int timeout_ms;        /* stage-in confirmation request budget */
	int end_timeout_ms;    /* job-end event request budget (slurmstepd
				  waits for it, so keep it short) */
	int spool_max;         /* spooled events delivered per job end */
	char spool[PATH_MAX];  /* root-only directory for undelivered events */
	char xattr_ns[16];     /* label namespace: "user" (written by the task as
				  the owner) or "trusted" (written by root on
				  descriptors the owner opened) */
	char scratch[PATH_MAX];/* site scratch root: input dir lives below */
	size_t max_script;     /* bytes of batch script read at most */
};

/* Fill a with the documented defaults. */
void plugargs_init(struct plugargs *a);

/*
 * Parse ac words of argv ("key=value") over the values already in a.
 * Returns 0, or -1 with the first offending word and the reason in err;
 * a is then partly updated and must not be used.
 */
int plugargs_parse(struct plugargs *a, int ac, char **av, char *err, size_t errlen);

#endif /* STAGEHAND_PLUGARGS_H */
