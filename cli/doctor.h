/*
 * doctor.h - 'stagehand doctor': what the checks share (doctor.c runs them
 * and prints; doctor_fs.c checks scratch roots; doctor_lua.c runs the
 * site's Lua hooks under lua5.1).
 *
 * Owns: the result list and the facts found along the way (which
 * slurm.conf, which Lua scripts, the plugstack arguments). Must never:
 * change the site's setup; every probe it leaves behind is removed.
 */
#ifndef STAGEHAND_CLI_DOCTOR_H
#define STAGEHAND_CLI_DOCTOR_H

#include <limits.h>
#include <stddef.h>

#include "conf.h"
#include "plugargs.h"

enum doctor_status { DOC_OK = 0, DOC_WARN, DOC_FAIL, DOC_SKIP };

#define DOCTOR_MAX_RESULTS 64

struct doctor_result {
	char name[32];               /* stable check name, e.g. "slurm.conf" */
	enum doctor_status status;
	char message[1024];          /* what was found, with file and line */
	char hint[512];              /* what to do about it; "" when ok */
};

struct doctor {
	const struct conf *conf;     /* borrowed: stagehand.conf as loaded */
	const char *conf_path;       /* borrowed */
	char slurm_conf[PATH_MAX];   /* the slurm.conf read; "" = none found */
	char lua_script[PATH_MAX];   /* job_submit.lua or burst_buffer.lua to run */
	char lua_bin[PATH_MAX];      /* interpreter (lua5.1 unless --lua) */
	int have_plugin;             /* a stagehand.so line was found and parsed */
	struct plugargs args;        /* its arguments (valid when have_plugin) */
	char daemon_version[64];     /* from /v1/health; "" = not reached */
	struct doctor_result r[DOCTOR_MAX_RESULTS];
	int n;
};

/* Add a result; hint may be NULL. Returns the result (never NULL: the last
   slot is reused when full). */
struct doctor_result *doctor_add(struct doctor *dr, const char *name, enum doctor_status st,
				 const char *hint, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* doctor_fs.c: xattrs on each scratch root, and per-user directory modes. */
void doctor_check_xattrs(struct doctor *dr);
void doctor_check_scratch(struct doctor *dr);

/* doctor_lua.c: the Lua version against the daemon's, and the Lua site
   settings against stagehand.conf. */
void doctor_check_lua(struct doctor *dr);

/*
 * doctor_run.c: run argv (PATH searched, env as given) with stdin
 * /dev/null; returns what it printed on stdout and stderr, at most max
 * bytes, NUL-terminated (new, the caller frees), or NULL with err filled:
 * it could not start, or it ran past timeout_ms (*timed_out set; killed).
 */
char *doctor_capture(char *const argv[], char *const env[], int timeout_ms, size_t max,
		     int *timed_out, char *err, size_t errlen);

/* doctor_release.c: the Slurm release the plugin at so was built for,
   against the slurmd on this node (a plugin loads only in its own release). */
void doctor_check_release(struct doctor *dr, const char *so);

#endif
