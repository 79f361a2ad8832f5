/*
 * jobplan.c - a job's #DATA plan, expanded for the job (see jobplan.h).
 */
#include "config.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobplan.h"

bool jobplan_has_directives(const char *script, size_t len)
{
	static const char tag[] = "#DATA";
	const size_t tl = sizeof(tag) - 1;
	size_t i = 0;

	while (i < len) {
		if (len - i >= tl && memcmp(script + i, tag, tl) == 0)
			return true;
		const char *nl = memchr(script + i, '\n', len - i);
		if (nl == NULL)
			break;
		i = (size_t)(nl - script) + 1;
	}
	return false;
}

void jobplan_free(struct jobplan *jp)
{
	if (jp == NULL)
		return;
	for (size_t i = 0; i < jp->ndirs; i++)
		free(jp->dirs[i].abs);
	free(jp->dirs);
	json_decref(jp->plan);
	free(jp->archive_env);
	free(jp->exempt_env);
	free(jp);
}

/* Expand the string member key of action obj in place (if it is a string). */
static int _expand_member(json_t *obj, const char *key,
			  const struct dsl_expand_ctx *ctx, int line,
			  char *err, size_t errlen)
{
	char out[PATH_MAX], e[512];
	json_t *v = json_object_get(obj, key);

	if (!json_is_string(v))
		return 0;
	if (dsl_expand(json_string_value(v), ctx, out, sizeof(out), e, sizeof(e)) < 0) {
		snprintf(err, errlen, "line %d: %s=%s: %s", line, key,
			 json_string_value(v), e);
		return -1;
	}
	return json_object_set_new(obj, key, json_string(out)) == 0 ? 0 : -1;
}

/* Append ":" + s to *env (a growing owned string). */
static int _env_append(char **env, const char *s)
{
	size_t old = *env ? strlen(*env) : 0, add = strlen(s);
	char *n = realloc(*env, old + add + 2);

	if (n == NULL)
		return -1;
	if (old)
		n[old++] = ':';
	memcpy(n + old, s, add + 1);
	*env = n;
	return 0;
}

int jobplan_build(const char *script, size_t len, const struct dsl_config *cfg,
		  const struct dsl_expand_ctx *ctx, const char *workdir,
		  struct jobplan **out, char *err, size_t errlen)
{
	struct dsl_plan *plan = NULL;
	struct jobplan *jp = NULL;
	int rc = -1;

	*out = NULL;
	if (!jobplan_has_directives(script, len))
		return 0;
	if (workdir == NULL || workdir[0] != '/') {
		snprintf(err, errlen, "the job's working directory is unknown");
		return -1;
	}
	plan = dsl_parse(script, len, cfg);
	if (plan == NULL) {
		snprintf(err, errlen, "out of memory parsing the #DATA lines");
		return -1;
	}
	if (plan->nerrors > 0) {
		const struct dsl_diag *d = &plan->errors[0];
		snprintf(err, errlen, "line %d: %s (%zu #DATA error%s; check the script "
			 "with 'stagehand check')", d->line, d->message ? d->message : d->code,
			 plan->error_count, plan->error_count == 1 ? "" : "s");
		goto out;
	}
	if (plan->ndirs == 0) {
		rc = 0;   /* only ignored lines (after a command, misspelt) */
		goto out;
	}
	jp = calloc(1, sizeof(*jp));
	if (jp == NULL || (jp->dirs = calloc(plan->ndirs, sizeof(*jp->dirs))) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	jp->plan = dsl_plan_to_json(plan);
	json_t *acts = json_object_get(jp->plan, "actions");
	if (!json_is_array(acts) || json_array_size(acts) != plan->ndirs) {
		snprintf(err, errlen, "internal error: plan JSON does not match the plan");
		goto out;
	}
	for (size_t i = 0; i < plan->ndirs; i++) {
		const struct dsl_directive *d = &plan->dirs[i];
		json_t *a = json_array_get(acts, i);

		if (_expand_member(a, "path", ctx, d->line, err, errlen) < 0 ||
		    _expand_member(a, "to", ctx, d->line, err, errlen) < 0)
			goto out;
		if (d->action == DSL_STAGE_IN) {
			jp->has_stage_in = true;
			continue;
		}
		if (d->action != DSL_ARCHIVE && d->action != DSL_EXEMPT)
			continue;
		const char *p = json_string_value(json_object_get(a, "path"));
		char abs[PATH_MAX];
		int n = p[0] == '/' ? snprintf(abs, sizeof(abs), "%s", p)
				    : snprintf(abs, sizeof(abs), "%s%s%s", workdir,
					       workdir[strlen(workdir) - 1] == '/' ? "" : "/",
					       p);
		if (n < 0 || (size_t)n >= sizeof(abs)) {
			snprintf(err, errlen, "line %d: '%s' in %s is longer than %zu bytes",
				 d->line, p, workdir, sizeof(abs) - 1);
			goto out;
		}
		if (strchr(abs, ':') != NULL) {
			snprintf(err, errlen, "line %d: '%s' contains ':', which cannot be "
				 "listed in STAGEHAND_*_DIRS: rename the directory", d->line,
				 abs);
			goto out;
		}
		struct jobplan_dir *jd = &jp->dirs[jp->ndirs];
		jd->abs = strdup(abs);
		jd->policy = d->action == DSL_EXEMPT ? "exempt" : "pending";
		jd->line = d->line;
		if (jd->abs == NULL ||
		    _env_append(d->action == DSL_EXEMPT ? &jp->exempt_env : &jp->archive_env,
				abs) < 0) {
			free(jd->abs);
			snprintf(err, errlen, "out of memory");
			goto out;
		}
		jp->ndirs++;
	}
	*out = jp;
	jp = NULL;
	rc = 0;
out:
	jobplan_free(jp);
	dsl_plan_free(plan);
	return rc;
}
