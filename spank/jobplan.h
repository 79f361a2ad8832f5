/*
 * jobplan.h - one job's #DATA plan, with its patterns expanded.
 *
 * Owns: turning the batch script into what the plugin acts on: the
 * directories to create and label (absolute paths), whether inputs must be
 * confirmed, and the expanded plan sent with the job-end event.
 * Must never: touch the filesystem or the network (callers do that).
 */
#ifndef STAGEHAND_JOBPLAN_H
#define STAGEHAND_JOBPLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "common/dsl.h"

struct jobplan_dir {
	char *abs;              /* absolute path (working directory joined) */
	const char *policy;     /* "exempt" or "pending" (static) */
	int line;               /* #DATA line, for messages */
};

struct jobplan {
	struct jobplan_dir *dirs;  size_t ndirs;  /* exempt and archive dirs */
	bool has_stage_in;         /* confirm stage-in before the job runs */
	json_t *plan;              /* expanded plan JSON (owned) */
	char *archive_env;         /* "a:b" absolute archive dirs (owned) */
	char *exempt_env;          /* "a:b" absolute exempt dirs (owned) */
};

/* Does the script have a line starting with "#DATA"? (the fast path) */
bool jobplan_has_directives(const char *script, size_t len);

/*
 * Parse the script with the site's grammar settings (cfg may be NULL),
 * expand patterns for ctx and resolve relative directories against
 * workdir (absolute). Returns 0 and a new plan in *out (free with
 * jobplan_free), 0 and *out == NULL when there are no directives, or -1
 * with the first problem (line number and text) in err.
 */
int jobplan_build(const char *script, size_t len, const struct dsl_config *cfg,
		  const struct dsl_expand_ctx *ctx, const char *workdir,
		  struct jobplan **out, char *err, size_t errlen);

void jobplan_free(struct jobplan *jp);

#endif /* STAGEHAND_JOBPLAN_H */
