/*
 * dsl.h - the #DATA directive language (see docs/directives.md).
 *
 * Owns: turning a batch script's bytes into a plan (ordered directives) plus
 * warnings, or a list of errors; converting a plan to and from JSON; and
 * Slurm filename-pattern expansion. This is the one implementation of the
 * grammar in C; lua/job_submit.lua is held to the same tests/vectors/.
 *
 * Must never: touch the filesystem, the network or the environment; abort or
 * exit; read past the length it is given (scripts may contain NUL bytes).
 */
#ifndef STAGEHAND_DSL_H
#define STAGEHAND_DSL_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#define DSL_DEFAULT_MAX_DIRECTIVES 64
#define DSL_DEFAULT_MAX_LINE 4096
#define DSL_DEFAULT_MAX_PATH 4095

/*
 * What one dsl_parse() may cost and say, whatever the script holds (the Lua
 * parser has the same): at most DSL_SHOWN_DIAGS warnings and as many errors
 * are kept, each list then ending in one "more_warnings" / "more_errors"
 * diagnostic ("and N more ..."); only the first DSL_SCAN_LINES lines are read
 * line by line, past them one search for a line starting with "#DATA" gives
 * one "past_scan_limit" warning. slurmctld runs the Lua twin under its job
 * write lock: a 4 MB script of any shape parses in milliseconds
 * (tests/bench/submit-hostile).
 */
#define DSL_SHOWN_DIAGS 20
#define DSL_SCAN_LINES 10000
/*
 * The #DATA lines of one script, in bytes all together: past it one
 * "too_much_directive_text" error and no more lines are read, whatever
 * max_directives and max_line allow (such a plan is past MaxPlanBytes anyway).
 */
#define DSL_MAX_DIRECTIVE_BYTES 65536

enum dsl_action {
	DSL_STAGE_IN = 0,
	DSL_ARCHIVE,
	DSL_EXEMPT,
	DSL_STAGE_OUT,
};

enum dsl_when {
	DSL_WHEN_ALWAYS = 0,
	DSL_WHEN_SUCCESS,
};

/* Site settings that change what the grammar accepts. */
struct dsl_config {
	const char *const *allowed_schemes; /* NULL-terminated, lower case; NULL = defaults */
	const char *const *stage_in_roots;  /* NULL-terminated absolute dirs; NULL or empty = any */
	size_t max_directives;              /* directive lines per script; 0 = default */
	size_t max_line;                    /* bytes in one #DATA line; 0 = default */
	size_t max_path;                    /* bytes in one path or URL; 0 = default */
};

/* One parsed directive. Strings are owned by the plan. */
struct dsl_directive {
	int line;                /* 1-based line in the script */
	enum dsl_action action;
	char *path;              /* stage_in: source; others: directory. Normalised, unexpanded. */
	char *to;                /* destination or NULL for the site default */
	enum dsl_when when;      /* archive only */
	bool keep;               /* archive only */
};

/* A warning or an error. Strings are owned by the plan. */
struct dsl_diag {
	int line;
	char code[32];           /* stable code, e.g. "unknown_key" (docs/directives.md) */
	char *token;             /* offending text (may be "") */
	char *message;           /* what was wrong and what to do */
};

/* Largest capacity= in bytes: 2^53, so that the Lua parser holds it exactly. */
#define DSL_MAX_CAPACITY 9007199254740992ULL

/* Jobs one after= line may name, and the largest job id or task index. */
#define DSL_MAX_AFTER 64
#define DSL_MAX_JOB_ID 4294967293UL  /* below Slurm's NO_VAL */

/* One job named by '#DATA after=': a job (or a whole array), or one array task. */
struct dsl_after {
	unsigned long job_id;    /* 1..DSL_MAX_JOB_ID */
	long task_id;            /* array task index, or -1: the whole job (every task) */
};

struct dsl_plan {
	struct dsl_directive *dirs;  size_t ndirs;   /* empty when nerrors > 0 */
	/*
	 * '#DATA capacity=SIZE [pool=NAME]': the job's size in its burst-buffer
	 * pool (docs/directives.md). cap_line 0 = none; cap_pool NULL = the
	 * site's default pool. Not part of dsl_plan_to_json: Slurm, not
	 * stagehandd, accounts for it.
	 */
	int cap_line;
	unsigned long long cap_size; /* bytes, 1..DSL_MAX_CAPACITY */
	char *cap_pool;              /* owned; NULL when not given */
	/*
	 * '#DATA after=J[:J...]': the job may start only once every named job's
	 * after-job transfers are verified (docs/directives.md, "Waiting for
	 * another job's archive"). after_line 0 = none. Part of the plan's JSON
	 * ("after"): stagehandd holds the job until then.
	 */
	int after_line;
	struct dsl_after *after;     size_t nafter;  /* owned; in the order written */
	struct dsl_diag *warnings;   size_t nwarnings;
	struct dsl_diag *errors;     size_t nerrors;
	/* How many there were, those past DSL_SHOWN_DIAGS included. */
	size_t warning_count, error_count;
};

/* Fill cfg with the documented defaults. */
void dsl_config_init(struct dsl_config *cfg);

/*
 * Parse len bytes of a batch script. cfg may be NULL for defaults.
 * Returns a new plan (free with dsl_plan_free) even when the script has
 * errors; NULL only when memory is exhausted.
 */
struct dsl_plan *dsl_parse(const char *script, size_t len, const struct dsl_config *cfg);

void dsl_plan_free(struct dsl_plan *plan);

/*
 * An after= job as written in the plan's JSON: "J" or "J_K" into out
 * (outlen bytes, 24 is always enough). Returns out.
 */
char *dsl_after_format(const struct dsl_after *a, char *out, size_t outlen);

/*
 * Read one "J" or "J_K" of n bytes (no sign, no leading zero, J at least 1,
 * both at most DSL_MAX_JOB_ID). 0 with *a filled, or -1.
 */
int dsl_after_read(const char *s, size_t n, struct dsl_after *a);

/* Name of an action ("stage_in", ...) - static string. */
const char *dsl_action_name(enum dsl_action a);

/*
 * {"version":1,"actions":[...]} as documented, and "after":{"line":N,
 * "jobs":["J","J_K",...]} when the script has an after= line. New reference.
 * Warnings/errors are not included; see dsl_diags_to_json.
 */
json_t *dsl_plan_to_json(const struct dsl_plan *plan);

/* [{"line":..,"code":..,"token":..,"message":..}, ...]. New reference. */
json_t *dsl_diags_to_json(const struct dsl_diag *d, size_t n);

/*
 * Rebuild and re-validate a plan from JSON made by dsl_plan_to_json (or by
 * job_submit.lua). Every path and option is checked by the same rules as
 * dsl_parse, so a plan read back from Slurm is never trusted blindly.
 * Returns a new plan, or NULL with a message in err.
 */
struct dsl_plan *dsl_plan_from_json(const json_t *j, const struct dsl_config *cfg,
				    char *err, size_t errlen);

/* What the patterns expand to for one job. */
struct dsl_expand_ctx {
	unsigned long job_id;
	const char *user;        /* user name */
	const char *job_name;    /* may be NULL -> "" */
	unsigned long array_job_id;  /* 0 if not an array job (then %A = job_id) */
	long array_task_id;          /* -1 if not an array job (then %a = 0) */
};

/*
 * Expand %j %u %x %A %a %% in tmpl into out (outlen bytes). '/' in the user
 * or job name becomes '_'. The result is re-checked and normalised: a '..'
 * component, a control character or an empty result (or '/') is an error.
 * A URL (anything containing "://") is copied unchanged: URLs are not
 * pattern-expanded. Returns 0, or -1 with a message in err.
 */
int dsl_expand(const char *tmpl, const struct dsl_expand_ctx *ctx,
	       char *out, size_t outlen, char *err, size_t errlen);

#endif /* STAGEHAND_DSL_H */
