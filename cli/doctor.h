/*
 * doctor.h - 'stagehand doctor': what the checks share (doctor.c runs them
 * and prints; doctor_fs.c checks scratch roots; doctor_lua.c runs the
 * site's Lua hooks under lua5.1; doctor_role.c has the checks only one kind
 * of host needs; doctor_rules.c which role runs which check).
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

/* The kind of host checked (--role); DEFAULT: no --role, the checks of
   before roles existed. The names are what --role takes (doctor_rules.c). */
enum doctor_role {
	DOCTOR_ROLE_DEFAULT = 0,
	DOCTOR_ROLE_CONTROLLER,      /* slurmctld: slurm.conf hooks, Lua, TrustedUids */
	DOCTOR_ROLE_DAEMON,          /* stagehandd: its files, listeners, roots */
	DOCTOR_ROLE_NODE,            /* slurmd: the plugin, scratch, the daemon */
	DOCTOR_ROLE_LOGIN,           /* users' commands: stagehand, sbatch, the daemon */
};

/* The checks a role runs (a bit set; doctor_role_checks()). */
enum doctor_check {
	DC_CONFIG = 1u << 0,         /* stagehand.conf parses */
	DC_SLURM = 1u << 1,          /* slurm.conf names a Lua hook */
	DC_PLUGSTACK = 1u << 2,      /* the stagehand.so line, its release, scratch= */
	DC_DAEMON = 1u << 3,         /* health over the plugin's (else the conf's) target */
	DC_CLIENT = 1u << 4,         /* Server= (or a local socket) and health over it */
	DC_MUNGE = 1u << 5,          /* a credential round trip */
	DC_XATTR = 1u << 6,          /* scratch roots keep the label namespace */
	DC_SCRATCH = 1u << 7,        /* scratch roots' and user directories' modes */
	DC_LUA = 1u << 8,            /* the hook loads; VERSION and site_config() agree */
	DC_LUA_MODULES = 1u << 9,    /* the hook scripts and their modules are found */
	DC_LUA_VERSION = 1u << 10,   /* the Lua release Slurm's plugin loads */
	DC_TRUSTED = 1u << 11,       /* a non-root SlurmUser is in TrustedUids */
	DC_STATE = 1u << 12,         /* StateDB's directory is writable */
	DC_LISTEN = 1u << 13,        /* the daemon answers on SocketPath and ListenAddress */
	DC_ARCHIVE = 1u << 14,       /* ArchiveRoot is reachable */
	DC_SBATCH = 1u << 15,        /* sbatch runs */
	DC_CLI = 1u << 16,           /* stagehand is on PATH */
	DC_STAGEHANDD = 1u << 17,    /* stagehandd --check-config */
};

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
	char daemon_scratch[PATH_MAX]; /* its first ScratchRoots entry (/v1/health);
					  "" = not reached, or a daemon too old to say */
	enum doctor_role role;       /* --role */
	int hook_lua;                /* slurm.conf: JobSubmitPlugins has lua */
	int hook_bb;                 /* slurm.conf: BurstBufferType=burst_buffer/lua */
	char plugindir[PATH_MAX];    /* slurm.conf's PluginDir (first entry), else
					  scontrol's, else the build's default */
	const char *plugindir_from;  /* static: where plugindir came from */
	char slurm_user[64];         /* slurm.conf's SlurmUser; "" = unset (root) */
	int slurm_user_line;         /* its line, 0 = unset */
	char plug_where[PATH_MAX + 16]; /* "plugstack.conf:LINE" of the stagehand.so line */
	struct doctor_result r[DOCTOR_MAX_RESULTS];
	int n;
};

/* Add a result; hint may be NULL. Returns the result (never NULL: the last
   slot is reused when full). */
struct doctor_result *doctor_add(struct doctor *dr, const char *name, enum doctor_status st,
				 const char *hint, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

/* Set the hint of the last result added (a fix that names paths or values). */
void doctor_hint(struct doctor *dr, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

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

/* doctor_role.c: the checks only some roles run (doctor_role_checks()). */
void doctor_check_lua_version(struct doctor *dr, int lua_given);
void doctor_check_lua_modules(struct doctor *dr);
void doctor_check_trusted(struct doctor *dr);
void doctor_check_state(struct doctor *dr);
void doctor_check_archive(struct doctor *dr);
void doctor_check_sbatch(struct doctor *dr);
void doctor_check_cli(struct doctor *dr);
void doctor_check_stagehandd(struct doctor *dr);
/* PluginDir as `scontrol show config` says it, when slurm.conf does not set it. */
void doctor_plugindir(struct doctor *dr);

/* doctor_rules.c: pure (tests/unit/test_doctor.c). */
int doctor_role_parse(const char *name);           /* a role, or -1: not a role name */
const char *doctor_role_name(enum doctor_role role); /* static */
const char *doctor_role_list(void);                /* static: "controller, daemon, ..." */
unsigned doctor_role_checks(enum doctor_role role); /* DC_* bits */
/* 1 if the decimal uid is in list (NULL-terminated numbers, TrustedUids). */
int doctor_uid_listed(unsigned long uid, char *const *list);
/* The Lua release ("5.1") a Slurm plugin's bytes name ("liblua5.1.so.0",
   "liblua-5.3.so"): 1 found, 0 not. */
int doctor_lua_linked(const char *buf, size_t len, char *ver, size_t verlen);
/* The first entry of "PluginDir = DIR[:DIR]" in scontrol show config's output
   into dir: 1 found, 0 not. */
int doctor_scontrol_plugindir(const char *out, char *dir, size_t dirlen);
/* The release ("5.1") in an interpreter's -v banner ("Lua 5.1.5  Copyright"). */
int doctor_lua_banner(const char *out, char *ver, size_t verlen);
/* 1 if two paths name the same directory as text (trailing '/' aside). */
int doctor_same_dir(const char *a, const char *b);

#endif
