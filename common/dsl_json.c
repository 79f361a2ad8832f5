/*
 * dsl_json.c - a plan to and from JSON (docs/directives.md, "The plan").
 *
 * Owns: the JSON form of plans and diagnostics, and re-validating a plan
 * that comes back from outside (the job's comment/admin field, the daemon's
 * API). dsl_plan_from_json() never trusts what it reads: every path and
 * option goes through the same dsl__check_path_value() as a script line, and
 * must already be in normal form.
 *
 * Must never: abort on any JSON input; accept a field it does not know.
 */
#include "config.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl.h"
#include "dsl_int.h"
#include "log.h"

/* Set obj[key] = val (val stolen); false when either is NULL or the set fails. */
static bool _set(json_t *obj, const char *key, json_t *val)
{
	if (!val)
		return false;
	return json_object_set_new(obj, key, val) == 0;
}

static json_t *_str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* {"line":N,"jobs":["J","J_K",...]}: new reference, NULL when out of memory. */
static json_t *_after_json(const struct dsl_plan *plan)
{
	json_t *o = json_object(), *jobs = json_array();
	char buf[24];

	if (!o || !jobs || !_set(o, "line", json_integer(plan->after_line)))
		goto fail;
	for (size_t i = 0; i < plan->nafter; i++)
		if (json_array_append_new(jobs, json_string(dsl_after_format(&plan->after[i], buf,
									     sizeof(buf)))))
			goto fail;
	if (json_object_set_new(o, "jobs", jobs)) /* steals jobs */
		jobs = NULL;
	else
		return o;
fail:
	json_decref(jobs);
	json_decref(o);
	return NULL;
}

json_t *dsl_plan_to_json(const struct dsl_plan *plan)
{
	json_t *root = json_object(), *arr = json_array();
	size_t i;

	if (!root || !arr)
		goto fail;
	for (i = 0; plan && i < plan->ndirs; i++) {
		const struct dsl_directive *d = &plan->dirs[i];
		json_t *o = json_object();
		bool ok;

		if (!o)
			goto fail;
		ok = _set(o, "line", json_integer(d->line)) &&
		     _set(o, "action", json_string(dsl_action_name(d->action))) &&
		     _set(o, "path", json_string(d->path));
		if (ok && d->action != DSL_EXEMPT)
			ok = _set(o, "to", _str_or_null(d->to));
		if (ok && d->action == DSL_ARCHIVE)
			ok = _set(o, "when", json_string(d->when == DSL_WHEN_SUCCESS ? "success" : "always")) &&
			     _set(o, "keep", json_boolean(d->keep));
		if (!ok) {
			json_decref(o);
			goto fail;
		}
		if (json_array_append_new(arr, o)) /* steals o even when it fails */
			goto fail;
	}
	if (!_set(root, "version", json_integer(1)))
		goto fail;
	if (json_object_set_new(root, "actions", arr)) { /* steals arr */
		json_decref(root);
		return NULL;
	}
	if (plan && plan->after_line && !_set(root, "after", _after_json(plan))) {
		json_decref(root);
		return NULL;
	}
	return root;
fail:
	json_decref(arr);
	json_decref(root);
	return NULL;
}

json_t *dsl_diags_to_json(const struct dsl_diag *d, size_t n)
{
	json_t *arr = json_array();
	size_t i;

	if (!arr)
		return NULL;
	for (i = 0; i < n; i++) {
		json_t *o = json_object();

		if (!o || !_set(o, "line", json_integer(d[i].line)) ||
		    !_set(o, "code", json_string(d[i].code)) ||
		    !_set(o, "token", json_string(d[i].token ? d[i].token : "")) ||
		    !_set(o, "message", json_string(d[i].message ? d[i].message : ""))) {
			json_decref(o);
			json_decref(arr);
			return NULL;
		}
		if (json_array_append_new(arr, o)) { /* steals o even when it fails */
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

/* The fields each action carries, in the documented order. */
static const char *const _fields[4][7] = {
	[DSL_STAGE_IN]  = { "line", "action", "path", "to", NULL },
	[DSL_ARCHIVE]   = { "line", "action", "path", "to", "when", "keep", NULL },
	[DSL_EXEMPT]    = { "line", "action", "path", NULL },
	[DSL_STAGE_OUT] = { "line", "action", "path", "to", NULL },
};

static bool _has_field(enum dsl_action a, const char *key)
{
	size_t i;

	for (i = 0; _fields[a][i]; i++)
		if (!strcmp(_fields[a][i], key))
			return true;
	return false;
}

/* Which path field is checked: of action number idx, in role, under key. */
struct _path_at {
	size_t idx;
	const char *field;
	enum dsl__role role;
	const char *key;
};

/*
 * Check one path field (the JSON string js) of the action at->idx; on
 * success *out is a new normalised copy equal to it. Returns 0, or -1 with
 * err set.
 */
static int _path_field(const struct dsl__rules *r, const struct _path_at *at, const json_t *js,
		       char **out, char *err, size_t errlen)
{
	struct dsl__fail f = { .msg = NULL };
	const char *v = json_string_value(js), *field = at->field;
	size_t n = json_string_length(js), idx = at->idx;
	int rc = dsl__check_path_value(r, at->role, at->key, v, n, out, &f);

	if (rc < 0) {
		log_errf(err, errlen, "plan action %zu: out of memory checking '%s'", idx, field);
		free(f.msg);
		return -1;
	}
	if (rc > 0) {
		log_errf(err, errlen, "plan action %zu: bad '%s': %s [%s]", idx, field, f.msg, f.code);
		free(f.msg);
		return -1;
	}
	if (strlen(*out) != n || memcmp(*out, v, n)) {
		log_errf(err, errlen, "plan action %zu: '%s' is not in normal form ('%s', expected '%s')",
		     idx, field, v, *out);
		free(*out);
		*out = NULL;
		return -1;
	}
	return 0;
}

/* Read action number idx from o into d. Returns 0, or -1 with err set. */
static int _read_action(const struct dsl__rules *r, size_t idx, const json_t *o,
			struct dsl_directive *d, char *err, size_t errlen)
{
	const char *key, *name;
	json_t *val, *jl, *jp, *jt;
	int a = -1, i;

	if (!json_is_object(o)) {
		log_errf(err, errlen, "plan action %zu is not a JSON object", idx);
		return -1;
	}
	name = json_string_value(json_object_get(o, "action"));
	for (i = 0; name && i <= DSL_STAGE_OUT; i++)
		if (!strcmp(name, dsl__key_names[i]))
			a = i;
	if (a < 0) {
		log_errf(err, errlen, "plan action %zu: 'action' must be one of stage_in, archive, "
		     "exempt, stage_out", idx);
		return -1;
	}
	json_object_foreach((json_t *)o, key, val) {
		(void)val;
		if (!_has_field((enum dsl_action)a, key)) {
			log_errf(err, errlen, "plan action %zu (%s): unexpected field '%s'", idx, name, key);
			return -1;
		}
	}
	for (i = 0; _fields[a][i]; i++) {
		if (!json_object_get(o, _fields[a][i])) {
			log_errf(err, errlen, "plan action %zu (%s): missing field '%s'", idx, name,
			     _fields[a][i]);
			return -1;
		}
	}
	d->action = (enum dsl_action)a;
	d->when = DSL_WHEN_ALWAYS;
	d->keep = true;
	jl = json_object_get(o, "line");
	if (!json_is_integer(jl) || json_integer_value(jl) < 1 || json_integer_value(jl) > INT_MAX) {
		log_errf(err, errlen, "plan action %zu (%s): 'line' must be a positive integer", idx, name);
		return -1;
	}
	d->line = (int)json_integer_value(jl);
	jp = json_object_get(o, "path");
	if (!json_is_string(jp)) {
		log_errf(err, errlen, "plan action %zu (%s): 'path' must be a string", idx, name);
		return -1;
	}
	if (_path_field(r, &(struct _path_at){ idx, "path",
			a == DSL_STAGE_IN ? DSL__ROLE_SOURCE : DSL__ROLE_DIR, name }, jp, &d->path,
			err, errlen))
		return -1;
	if (a != DSL_EXEMPT) {
		jt = json_object_get(o, "to");
		if (json_is_string(jt)) {
			if (_path_field(r, &(struct _path_at){ idx, "to",
					a == DSL_STAGE_IN ? DSL__ROLE_DIR : DSL__ROLE_DEST, "to" },
					jt, &d->to, err, errlen))
				return -1;
		} else if (!json_is_null(jt) || a == DSL_STAGE_OUT) {
			log_errf(err, errlen, "plan action %zu (%s): 'to' must be a string%s", idx, name,
			     a == DSL_STAGE_OUT ? "" : " or null");
			return -1;
		}
	}
	if (a == DSL_ARCHIVE) {
		const char *w = json_string_value(json_object_get(o, "when"));
		json_t *k = json_object_get(o, "keep");

		if (w && !strcmp(w, "always"))
			d->when = DSL_WHEN_ALWAYS;
		else if (w && !strcmp(w, "success"))
			d->when = DSL_WHEN_SUCCESS;
		else {
			log_errf(err, errlen, "plan action %zu (archive): 'when' must be \"always\" or \"success\"",
			     idx);
			return -1;
		}
		if (!json_is_boolean(k)) {
			log_errf(err, errlen, "plan action %zu (archive): 'keep' must be true or false", idx);
			return -1;
		}
		d->keep = json_is_true(k);
	}
	return 0;
}

/*
 * The plan's "after" object into plan->after*: the same rule as a script's
 * after= line, and each job already in the form dsl_after_format writes.
 * 0, or -1 with err set.
 */
static int _read_after(struct dsl_plan *plan, const json_t *o, char *err, size_t errlen)
{
	const json_t *jl = json_object_get(o, "line"), *jobs = json_object_get(o, "jobs"), *v;
	const char *key;
	json_t *val;
	size_t i;

	if (!json_is_object(o)) {
		log_errf(err, errlen, "plan: 'after' must be an object");
		return -1;
	}
	json_object_foreach((json_t *)o, key, val) {
		(void)val;
		if (strcmp(key, "line") && strcmp(key, "jobs")) {
			log_errf(err, errlen, "plan after: unexpected field '%s'", key);
			return -1;
		}
	}
	if (!json_is_integer(jl) || json_integer_value(jl) < 1 || json_integer_value(jl) > INT_MAX) {
		log_errf(err, errlen, "plan after: 'line' must be a positive integer");
		return -1;
	}
	if (!json_is_array(jobs) || json_array_size(jobs) == 0 ||
	    json_array_size(jobs) > DSL_MAX_AFTER) {
		log_errf(err, errlen, "plan after: 'jobs' must be an array of 1 to %d job ids",
			 DSL_MAX_AFTER);
		return -1;
	}
	plan->after = calloc(json_array_size(jobs), sizeof(*plan->after));
	if (!plan->after) {
		log_errf(err, errlen, "plan: out of memory");
		return -1;
	}
	json_array_foreach(jobs, i, v) {
		const char *s = json_string_value(v);
		char back[24];

		if (!s || dsl_after_read(s, json_string_length(v), &plan->after[i]) < 0 ||
		    strlen(dsl_after_format(&plan->after[i], back, sizeof(back))) !=
		    json_string_length(v) || strcmp(back, s) != 0) {
			log_errf(err, errlen, "plan after: job %zu is not a job id (\"J\" or \"J_K\")", i);
			return -1;
		}
		for (size_t k = 0; k < i; k++)
			if (plan->after[k].job_id == plan->after[i].job_id &&
			    plan->after[k].task_id == plan->after[i].task_id) {
				log_errf(err, errlen, "plan after: job %s named twice", s);
				return -1;
			}
		plan->nafter = i + 1;
	}
	plan->after_line = (int)json_integer_value(jl);
	return 0;
}

struct dsl_plan *dsl_plan_from_json(const json_t *j, const struct dsl_config *cfg,
				    char *err, size_t errlen)
{
	struct dsl__rules r;
	struct dsl_plan *plan;
	json_t *acts, *ver;
	const char *key;
	json_t *val;
	size_t i, n;

	if (err && errlen)
		err[0] = '\0';
	if (!json_is_object(j)) {
		log_errf(err, errlen, "plan is not a JSON object");
		return NULL;
	}
	json_object_foreach((json_t *)j, key, val) {
		(void)val;
		if (strcmp(key, "version") && strcmp(key, "actions") && strcmp(key, "after")) {
			log_errf(err, errlen, "plan: unexpected field '%s'", key);
			return NULL;
		}
	}
	ver = json_object_get(j, "version");
	if (!json_is_integer(ver) || json_integer_value(ver) != 1) {
		log_errf(err, errlen, "plan: 'version' must be 1");
		return NULL;
	}
	acts = json_object_get(j, "actions");
	if (!json_is_array(acts)) {
		log_errf(err, errlen, "plan: 'actions' must be an array");
		return NULL;
	}
	if (dsl__rules_init(&r, cfg)) {
		log_errf(err, errlen, "plan: out of memory");
		return NULL;
	}
	n = json_array_size(acts);
	if (n > r.max_directives) {
		log_errf(err, errlen, "plan: %zu actions; the limit is %zu", n, r.max_directives);
		dsl__rules_free(&r);
		return NULL;
	}
	plan = calloc(1, sizeof(*plan));
	if (plan && n)
		plan->dirs = calloc(n, sizeof(*plan->dirs));
	if (!plan || (n && !plan->dirs)) {
		log_errf(err, errlen, "plan: out of memory");
		free(plan);
		dsl__rules_free(&r);
		return NULL;
	}
	for (i = 0; i < n; i++) {
		struct dsl_directive *d = &plan->dirs[i];
		size_t other;
		int clash;

		plan->ndirs = i + 1; /* so dsl_plan_free releases what was read */
		if (_read_action(&r, i, json_array_get(acts, i), d, err, errlen))
			goto fail;
		clash = dsl__clash(plan->dirs, i, d, &other);
		if (clash == 1) {
			log_errf(err, errlen, "plan action %zu: %s of '%s' repeats action %zu", i,
			     dsl_action_name(d->action), d->path, other);
			goto fail;
		}
		if (clash == 2) {
			char *m = dsl__conflict_msg(&plan->dirs[other], d);

			log_errf(err, errlen, "plan action %zu: %s", i, m ? m : "conflict");
			free(m);
			goto fail;
		}
	}
	if (json_object_get(j, "after") &&
	    _read_after(plan, json_object_get(j, "after"), err, errlen) < 0)
		goto fail;
	dsl__rules_free(&r);
	return plan;
fail:
	dsl__rules_free(&r);
	dsl_plan_free(plan);
	return NULL;
}
