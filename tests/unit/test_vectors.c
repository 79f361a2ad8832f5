/*
 * test_vectors.c - run every tests/vectors/NNNN-*.json through dsl_parse() and
 * every tests/vectors/expand/ files through dsl_expand(), comparing as
 * docs/directives.md ("Test vectors") and tests/vectors/README.md say.
 *
 * The folder comes from $STAGEHAND_VECTORS (set by tests/Makefile.am to
 * $(top_srcdir)/tests/vectors so VPATH builds find it) or the first
 * argument. Each vector is one TAP test named after its file; a failure
 * says what differed. Every valid plan is also written to JSON and read
 * back with dsl_plan_from_json() under the same config, which must accept
 * it unchanged.
 */
#include "config.h"

#include <dirent.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "checksum.h"
#include "dsl.h"
#include "tests/tap.h"

/* Decode base64 (common/checksum.c); new NUL-terminated buffer or NULL. */
static unsigned char *_b64(const char *in, size_t *outlen)
{
	size_t n = in ? strlen(in) : 0;
	unsigned char *out = malloc(n / 4 * 3 + 1);
	long got = out && in ? cksum_b64_decode(in, n, out, n / 4 * 3) : -1;

	if (got < 0) {
		free(out);
		return NULL;
	}
	out[got] = '\0';
	*outlen = (size_t)got;
	return out;
}

/* A NULL-terminated copy of a JSON array of strings (strings borrowed from j). */
static const char **_strlist(const json_t *arr)
{
	size_t i, n = json_array_size(arr);
	const char **l = calloc(n + 1, sizeof(*l));

	if (!l)
		return NULL;
	for (i = 0; i < n; i++)
		l[i] = json_string_value(json_array_get(arr, i));
	return l;
}

static char *_dump(const json_t *j)
{
	return json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
}

/* Compare diagnostics; on a difference print why and return false. */
static bool _cmp_diags(const char *what, const struct dsl_diag *got, size_t ngot, const json_t *exp)
{
	size_t i, n = json_array_size(exp);
	bool ok = true;

	if (n != ngot) {
		tap_diag("%s: expected %zu, got %zu", what, n, ngot);
		ok = false;
	}
	for (i = 0; i < n && i < ngot; i++) {
		const json_t *e = json_array_get(exp, i);
		const char *code = json_string_value(json_object_get(e, "code"));
		const char *tok = json_string_value(json_object_get(e, "token"));
		const char *mc = json_string_value(json_object_get(e, "message_contains"));
		long line = (long)json_integer_value(json_object_get(e, "line"));

		if (line != got[i].line || !code || strcmp(code, got[i].code)) {
			tap_diag("%s[%zu]: expected line %ld %s, got line %d %s", what, i, line,
				 code ? code : "?", got[i].line, got[i].code);
			ok = false;
		}
		if (tok && strcmp(tok, got[i].token)) {
			tap_diag("%s[%zu]: expected token '%s', got '%s'", what, i, tok, got[i].token);
			ok = false;
		}
		if (mc && !strstr(got[i].message, mc)) {
			tap_diag("%s[%zu]: message '%s' does not contain '%s'", what, i,
				 got[i].message, mc);
			ok = false;
		}
	}
	if (!ok)
		for (i = 0; i < ngot; i++)
			tap_diag("  got %s: line %d %s token '%s': %s", what, got[i].line, got[i].code,
				 got[i].token, got[i].message);
	return ok;
}

/*
 * expect.capacity: {"line":N,"size":BYTES,"pool":NAME|null}, or absent when
 * the script has no (valid) capacity line.
 */
static bool _cmp_capacity(const struct dsl_plan *plan, const json_t *exp)
{
	const char *pool;

	if (!exp) {
		if (plan->cap_line)
			tap_diag("capacity: expected none, got line %d size %llu", plan->cap_line,
				 plan->cap_size);
		return plan->cap_line == 0;
	}
	pool = json_string_value(json_object_get(exp, "pool"));
	if (plan->cap_line != json_integer_value(json_object_get(exp, "line")) ||
	    plan->cap_size != (unsigned long long)json_integer_value(json_object_get(exp, "size")) ||
	    (pool == NULL) != (plan->cap_pool == NULL) ||
	    (pool && strcmp(pool, plan->cap_pool) != 0)) {
		tap_diag("capacity: expected line %lld size %lld pool %s, got line %d size %llu pool %s",
			 json_integer_value(json_object_get(exp, "line")),
			 json_integer_value(json_object_get(exp, "size")), pool ? pool : "null",
			 plan->cap_line, plan->cap_size, plan->cap_pool ? plan->cap_pool : "null");
		return false;
	}
	return true;
}

static void _run_vector(const char *dir, const char *name)
{
	char path[4096];
	json_error_t jerr;
	json_t *v, *cfgj, *exp, *sj, *got_plan = NULL;
	struct dsl_config cfg;
	const char **schemes = NULL, **roots = NULL;
	unsigned char *script = NULL;
	size_t len = 0;
	struct dsl_plan *plan = NULL;
	bool ok = true;
	int w = snprintf(path, sizeof(path), "%s/%s", dir, name);

	if (w < 0 || (size_t)w >= sizeof(path)) {
		tap_ok(false, "%s (path too long)", name);
		return;
	}
	v = json_load_file(path, 0, &jerr);
	if (!v) {
		tap_ok(false, "%s: not JSON: %s line %d", name, jerr.text, jerr.line);
		return;
	}
	dsl_config_init(&cfg);
	cfgj = json_object_get(v, "config");
	if (cfgj) {
		json_t *x;

		if ((x = json_object_get(cfgj, "allowed_schemes")))
			cfg.allowed_schemes = schemes = _strlist(x);
		if ((x = json_object_get(cfgj, "stage_in_roots")))
			cfg.stage_in_roots = roots = _strlist(x);
		if ((x = json_object_get(cfgj, "max_directives")))
			cfg.max_directives = (size_t)json_integer_value(x);
		if ((x = json_object_get(cfgj, "max_line")))
			cfg.max_line = (size_t)json_integer_value(x);
		if ((x = json_object_get(cfgj, "max_path")))
			cfg.max_path = (size_t)json_integer_value(x);
	}
	if ((sj = json_object_get(v, "script_b64"))) {
		script = _b64(json_string_value(sj), &len);
	} else if ((sj = json_object_get(v, "script"))) {
		len = json_string_length(sj);
		script = malloc(len + 1);
		if (script)
			memcpy(script, json_string_value(sj), len + 1);
	}
	exp = json_object_get(v, "expect");
	if (!script || !json_is_object(exp) || !json_is_array(json_object_get(exp, "actions")) ||
	    !json_is_array(json_object_get(exp, "warnings")) ||
	    !json_is_array(json_object_get(exp, "errors"))) {
		tap_ok(false, "%s: malformed vector (script and expect.actions/warnings/errors needed)", name);
		goto out;
	}
	/* an exact-size heap copy lets valgrind/ASan catch any read past len */
	plan = dsl_parse((const char *)script, len, &cfg);
	if (!plan) {
		tap_ok(false, "%s: dsl_parse returned NULL", name);
		goto out;
	}
	got_plan = dsl_plan_to_json(plan);
	if (!got_plan || !json_equal(json_object_get(got_plan, "actions"), json_object_get(exp, "actions"))) {
		char *a = got_plan ? _dump(json_object_get(got_plan, "actions")) : NULL;
		char *b = _dump(json_object_get(exp, "actions"));

		tap_diag("actions differ:\n#   expected %s\n#   got      %s", b ? b : "?", a ? a : "(null)");
		free(a);
		free(b);
		ok = false;
	}
	ok &= _cmp_capacity(plan, json_object_get(exp, "capacity"));
	/* expect.after is the plan's "after" exactly, or absent when it has none */
	if (got_plan && !json_equal(json_object_get(got_plan, "after"), json_object_get(exp, "after")) &&
	    (json_object_get(got_plan, "after") || json_object_get(exp, "after"))) {
		char *a = _dump(json_object_get(got_plan, "after"));
		char *b = _dump(json_object_get(exp, "after"));

		tap_diag("after differs:\n#   expected %s\n#   got      %s", b ? b : "none",
			 a ? a : "none");
		free(a);
		free(b);
		ok = false;
	}
	ok &= _cmp_diags("warnings", plan->warnings, plan->nwarnings, json_object_get(exp, "warnings"));
	ok &= _cmp_diags("errors", plan->errors, plan->nerrors, json_object_get(exp, "errors"));
	{
		json_t *dw = dsl_diags_to_json(plan->warnings, plan->nwarnings);
		json_t *de = dsl_diags_to_json(plan->errors, plan->nerrors);

		if (!dw || !de) {
			tap_diag("dsl_diags_to_json failed (a token or message is not valid UTF-8?)");
			ok = false;
		}
		json_decref(dw);
		json_decref(de);
	}
	tap_ok(ok, "%s", name);
	if (plan->nerrors == 0 && got_plan) {
		char err[512];
		struct dsl_plan *back = dsl_plan_from_json(got_plan, &cfg, err, sizeof(err));
		json_t *again = back ? dsl_plan_to_json(back) : NULL;

		if (!tap_ok(back && again && json_equal(again, got_plan), "%s: plan JSON round-trip", name))
			tap_diag("dsl_plan_from_json: %s", back ? "plan changed" : err);
		json_decref(again);
		dsl_plan_free(back);
	}
out:
	json_decref(got_plan);
	dsl_plan_free(plan);
	free(script);
	free(schemes);
	free(roots);
	json_decref(v);
}

static void _run_expand(const char *dir, const char *name)
{
	char path[4096], err[512];
	json_error_t jerr;
	json_t *v, *ctxj, *exp, *x;
	struct dsl_expand_ctx ctx;
	const char *tmpl, *want, *want_err;
	size_t outlen = 4096;
	char *out;
	int rc, w = snprintf(path, sizeof(path), "%s/%s", dir, name);

	if (w < 0 || (size_t)w >= sizeof(path) || !(v = json_load_file(path, 0, &jerr))) {
		tap_ok(false, "expand/%s: cannot read", name);
		return;
	}
	memset(&ctx, 0, sizeof(ctx));
	ctx.array_task_id = -1;
	ctxj = json_object_get(v, "ctx");
	ctx.job_id = (unsigned long)json_integer_value(json_object_get(ctxj, "job_id"));
	ctx.user = json_string_value(json_object_get(ctxj, "user"));
	ctx.job_name = json_string_value(json_object_get(ctxj, "job_name"));
	ctx.array_job_id = (unsigned long)json_integer_value(json_object_get(ctxj, "array_job_id"));
	if ((x = json_object_get(ctxj, "array_task_id")))
		ctx.array_task_id = (long)json_integer_value(x);
	if ((x = json_object_get(v, "outlen")))
		outlen = (size_t)json_integer_value(x);
	tmpl = json_string_value(json_object_get(v, "template"));
	exp = json_object_get(v, "expect");
	want = json_string_value(json_object_get(exp, "result"));
	want_err = json_string_value(json_object_get(exp, "error_contains"));
	out = malloc(outlen ? outlen : 1);
	if (!tmpl || (!want && !want_err) || !out) {
		tap_ok(false, "expand/%s: malformed vector", name);
		free(out);
		json_decref(v);
		return;
	}
	rc = dsl_expand(tmpl, &ctx, out, outlen, err, sizeof(err));
	if (want) {
		if (!tap_ok(rc == 0 && !strcmp(out, want), "expand/%s", name))
			tap_diag("expected '%s', got %s '%s'", want, rc ? "error" : "result",
				 rc ? err : out);
	} else {
		if (!tap_ok(rc == -1 && strstr(err, want_err), "expand/%s", name))
			tap_diag("expected an error containing '%s', got %s '%s'", want_err,
				 rc ? "error" : "result", rc ? err : out);
	}
	free(out);
	json_decref(v);
}

static int _is_json(const struct dirent *d)
{
	size_t n = strlen(d->d_name);

	return n > 5 && !strcmp(d->d_name + n - 5, ".json");
}

static int _each(const char *dir, void (*fn)(const char *, const char *))
{
	struct dirent **list;
	int n, i;

	n = scandir(dir, &list, _is_json, alphasort);
	if (n < 0)
		return -1;
	for (i = 0; i < n; i++) {
		fn(dir, list[i]->d_name);
		free(list[i]);
	}
	free(list);
	return n;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : getenv("STAGEHAND_VECTORS");
	char edir[4096];
	int n, w;

	if (!dir)
		dir = "tests/vectors";
	n = _each(dir, _run_vector);
	if (n <= 0) {
		tap_ok(false, "no vectors found in '%s' (set STAGEHAND_VECTORS)", dir);
		return tap_done();
	}
	tap_diag("%d grammar vectors in %s", n, dir);
	w = snprintf(edir, sizeof(edir), "%s/expand", dir);
	if (w < 0 || (size_t)w >= sizeof(edir) || (n = _each(edir, _run_expand)) <= 0)
		tap_ok(false, "no expansion vectors found in '%s/expand'", dir);
	else
		tap_diag("%d expansion vectors", n);
	return tap_done();
}
