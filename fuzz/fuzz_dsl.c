/*
 * fuzz_dsl.c - libFuzzer target for the #DATA parser (common/dsl.c).
 *
 * The input is a whole batch script. The first byte picks a site config
 * (defaults, tight limits, stage-in roots and a short scheme list) so the
 * limit paths are reached too; the rest is the script. For every script
 * this checks what the library promises:
 *   - dsl_parse never crashes and never reads past len (ASan);
 *   - a plan without errors survives dsl_plan_to_json -> dsl_plan_from_json
 *     under the same config, unchanged (the daemon reads plans back that
 *     way, so a plan the parser makes must always be accepted again);
 *   - dsl_expand of every path and destination, with user and job names
 *     taken from the input, either fails with a message or returns a
 *     NUL-terminated path that fits the buffer and has no '..' component
 *     and no control character but tab.
 * A broken promise aborts, which libFuzzer reports as a crash.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void _die(const char *what, const char *detail)
{
	fprintf(stderr, "fuzz_dsl: broken promise: %s: %s\n", what, detail ? detail : "");
	abort();
}

static void _config(uint8_t sel, struct dsl_config *cfg)
{
	static const char *const schemes[] = { "https", "s3", NULL };
	static const char *const roots[] = { "/archive", "/data/in", NULL };

	dsl_config_init(cfg);
	if (sel & 1) {
		cfg->max_directives = 3;
		cfg->max_line = 80;
		cfg->max_path = 32;
	}
	if (sel & 2)
		cfg->stage_in_roots = roots;
	if (sel & 4)
		cfg->allowed_schemes = schemes;
}

static int _same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

static void _round_trip(const struct dsl_plan *p, const struct dsl_config *cfg)
{
	char err[512];
	json_t *j = dsl_plan_to_json(p);
	struct dsl_plan *q;

	if (!j)
		_die("dsl_plan_to_json returned NULL for a valid plan", NULL);
	q = dsl_plan_from_json(j, cfg, err, sizeof(err));
	if (!q) {
		char *txt = json_dumps(j, JSON_COMPACT);

		fprintf(stderr, "plan: %s\nerror: %s\n", txt ? txt : "?", err);
		free(txt);
		_die("dsl_plan_from_json refused a plan made by dsl_parse", err);
	}
	if (q->ndirs != p->ndirs)
		_die("round trip changed the number of directives", NULL);
	for (size_t i = 0; i < p->ndirs; i++) {
		const struct dsl_directive *a = &p->dirs[i], *b = &q->dirs[i];

		if (a->action != b->action || a->line != b->line || !_same(a->path, b->path) ||
		    !_same(a->to, b->to) || a->when != b->when || a->keep != b->keep)
			_die("round trip changed a directive", a->path);
	}
	dsl_plan_free(q);
	json_decref(j);
}

static void _check_expanded(const char *tmpl, const char *out, size_t outlen)
{
	size_t n = strnlen(out, outlen);

	if (n == outlen)
		_die("dsl_expand result is not NUL-terminated", tmpl);
	if (strstr(out, "://"))
		return;	/* URLs are copied unchanged */
	for (const char *c = out; *c; c++) {
		/* The grammar allows a tab (through quotes); nothing else below 0x20. */
		if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f)
			_die("dsl_expand result has a control character", tmpl);
		if (c[0] == '.' && c[1] == '.' && (c == out || c[-1] == '/') &&
		    (c[2] == '/' || c[2] == '\0'))
			_die("dsl_expand result has a '..' component", out);
	}
}

static void _expand_all(const struct dsl_plan *p, const uint8_t *data, size_t size)
{
	char user[24], name[24], out[4096], small[16], err[512];
	struct dsl_expand_ctx ctx = { 0 };
	size_t un = size < 23 ? size : 23, nn;

	/* User and job name come from the input: they are user text in real life. */
	memcpy(user, data, un);
	user[un] = '\0';
	nn = size > un ? (size - un < 23 ? size - un : 23) : 0;
	memcpy(name, data + un, nn);
	name[nn] = '\0';
	ctx.job_id = size * 7919u;
	ctx.user = user;
	ctx.job_name = (size & 1) ? name : NULL;
	ctx.array_job_id = (size & 2) ? size : 0;
	ctx.array_task_id = (size & 4) ? (long)size : -1;
	for (size_t i = 0; i < p->ndirs; i++) {
		const char *t[2] = { p->dirs[i].path, p->dirs[i].to };

		for (int k = 0; k < 2; k++) {
			if (!t[k])
				continue;
			if (dsl_expand(t[k], &ctx, out, sizeof(out), err, sizeof(err)) == 0)
				_check_expanded(t[k], out, sizeof(out));
			else if (!err[0])
				_die("dsl_expand failed without a message", t[k]);
			if (dsl_expand(t[k], &ctx, small, sizeof(small), err, sizeof(err)) == 0)
				_check_expanded(t[k], small, sizeof(small));
		}
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dsl_config cfg;
	struct dsl_plan *p;

	if (size == 0)
		return 0;
	_config(data[0], &cfg);
	p = dsl_parse((const char *)data + 1, size - 1, &cfg);
	if (!p)
		return 0;	/* out of memory */
	for (size_t i = 0; i < p->nerrors; i++)
		if (!p->errors[i].message || !p->errors[i].message[0])
			_die("an error without a message", p->errors[i].code);
	if (p->nerrors == 0) {
		_round_trip(p, &cfg);
		_expand_all(p, data + 1, size - 1);
	} else {
		json_t *d = dsl_diags_to_json(p->errors, p->nerrors);

		if (!d)
			_die("dsl_diags_to_json returned NULL", NULL);
		json_decref(d);
	}
	dsl_plan_free(p);
	return 0;
}
