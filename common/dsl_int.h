/*
 * dsl_int.h - internals shared by the #DATA modules (dsl.c, dsl_json.c,
 * dsl_expand.c, dsl_rules.c). Not installed, not for other components.
 *
 * The point of this header: the rules for one value (a path, a URL, a
 * when/keep word) live in dsl_rules.c once, and both the script parser and
 * the plan reader (dsl_plan_from_json) call them, so a plan read back from
 * Slurm is held to exactly the rules a script is.
 */
#ifndef STAGEHAND_DSL_INT_H
#define STAGEHAND_DSL_INT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

#include "dsl.h"

/*
 * The keys; the first four are the actions (same order as enum dsl_action).
 * capacity (with its option pool) is the job's size in its burst-buffer
 * pool, a property of the whole script, not an action on a path: it is
 * parsed by its own rule (dsl.c, _capacity_line) into the plan's cap_*.
 * after (no options) is the same kind of line: the jobs whose archives this
 * one waits for (dsl.c, _after_line, into the plan's after*).
 */
enum dsl__key {
	DSL__K_STAGE_IN = 0,
	DSL__K_ARCHIVE,
	DSL__K_EXEMPT,
	DSL__K_STAGE_OUT,
	DSL__K_TO,
	DSL__K_WHEN,
	DSL__K_KEEP,
	DSL__K_CAPACITY,
	DSL__K_POOL,
	DSL__K_AFTER,
	DSL__NKEYS
};

extern const char *const dsl__key_names[DSL__NKEYS];

/* What a value must be. */
enum dsl__role {
	DSL__ROLE_SOURCE,  /* stage_in value: absolute path or URL, roots apply */
	DSL__ROLE_DIR,     /* archive/exempt/stage_out value, stage_in to=: path only */
	DSL__ROLE_DEST,    /* archive/stage_out to=: path or URL */
};

/* A config resolved for checking: defaults filled in, roots normalised. */
struct dsl__rules {
	const char *const *schemes;  /* borrowed; NULL-terminated */
	char **roots;                /* owned, normalised; NULL when any source is allowed */
	size_t nroots;
	size_t max_directives;
	size_t max_line;
	size_t max_path;
};

/* A failed check: a stable code and an owned message. */
struct dsl__fail {
	char code[32];
	char *msg;                   /* owned by the caller after a failure */
};

/* Fill r from cfg (NULL = defaults). Returns 0, or -1 when out of memory. */
int dsl__rules_init(struct dsl__rules *r, const struct dsl_config *cfg);
void dsl__rules_free(struct dsl__rules *r);

/*
 * Check one path/URL value of n bytes for role (key names the key, for
 * messages). On success returns 0 and *out is a new string (normalised path,
 * or URL with its scheme lower-cased) the caller frees. Returns 1 with f
 * filled when the value breaks a rule, -1 when out of memory.
 */
int dsl__check_path_value(const struct dsl__rules *r, enum dsl__role role, const char *key,
			  const char *v, size_t n, char **out, struct dsl__fail *f);

/* First control character (0x01-0x1f but tab, 0x7f) in v, or -1. */
long dsl__find_control(const char *v, size_t n);

/* Normalise a path of n bytes into a new string ("" when nothing is left). */
char *dsl__normalise(const char *v, size_t n);

/* True when v has a ".." component. */
bool dsl__has_dotdot(const char *v, size_t n);

/* True when n bytes at s are valid UTF-8 (strict). */
bool dsl__utf8_valid(const char *s, size_t n);

/* True when the value contains "://" (then it is a URL). */
bool dsl__is_url(const char *v, size_t n);

/* New string with printf-style contents, NULL when out of memory. */
char *dsl__strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Set f's code and a formatted message. Returns 1, or -1 when out of memory. */
int dsl__fail_set(struct dsl__fail *f, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* New NUL-terminated copy of n bytes, NULL when out of memory. */
char *dsl__strndup(const char *s, size_t n);

/*
 * Would d clash with an earlier directive of dirs[0..n)? Returns 0 when not;
 * 1 when it duplicates dirs[*other] (same action and path); 2 when it
 * conflicts with dirs[*other] (exempt against archive/stage_out).
 */
int dsl__clash(const struct dsl_directive *dirs, size_t n, const struct dsl_directive *d,
	       size_t *other);

/*
 * Check an after= value of n bytes (the job list "J[:J...]"). Returns 0 with
 * a new array in *out (*nout entries, duplicates dropped), 1 with f filled
 * when it breaks a rule, -1 when out of memory.
 */
int dsl__check_after_value(const char *v, size_t n, struct dsl_after **out, size_t *nout,
			   struct dsl__fail *f);

/* "'out' is exempt (line 3) and archived here: choose one" (new string). */
char *dsl__conflict_msg(const struct dsl_directive *earlier, const struct dsl_directive *d);

#endif /* STAGEHAND_DSL_INT_H */
