/*
 * test_dsl.c - unit tests for common/dsl.h beyond the shared vectors:
 * plan JSON round-trip, rejection of tampered plans, dsl_expand() argument
 * handling, robustness against random input, and parse speed.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsl.h"
#include "tests/tap.h"

static const char _example[] =
	"#!/bin/bash\n"
	"#SBATCH --job-name=align\n"
	"#DATA stage_in=/archive/proj/ref/hg38.fa\n"
	"#DATA stage_in=https://data.example.org/panel.bed to=inputs/panel.bed\n"
	"#DATA exempt=tmp/\n"
	"#DATA archive=results/ when=success keep=yes\n"
	"#DATA stage_out=logs/ to=/project/lab/logs/%j\n"
	"srun ./align ...\n";

static void _test_roundtrip(void)
{
	struct dsl_plan *p = dsl_parse(_example, strlen(_example), NULL), *back;
	json_t *j, *j2;
	char err[256];
	char *s;

	tap_ok(p && p->ndirs == 5 && p->nerrors == 0 && p->nwarnings == 0, "doc example parses to 5 actions");
	j = dsl_plan_to_json(p);
	s = json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS);
	tap_ok(s && !strcmp(s, "{\"actions\":["
			    "{\"action\":\"stage_in\",\"line\":3,\"path\":\"/archive/proj/ref/hg38.fa\",\"to\":null},"
			    "{\"action\":\"stage_in\",\"line\":4,\"path\":\"https://data.example.org/panel.bed\",\"to\":\"inputs/panel.bed\"},"
			    "{\"action\":\"exempt\",\"line\":5,\"path\":\"tmp\"},"
			    "{\"action\":\"archive\",\"keep\":true,\"line\":6,\"path\":\"results\",\"to\":null,\"when\":\"success\"},"
			    "{\"action\":\"stage_out\",\"line\":7,\"path\":\"logs\",\"to\":\"/project/lab/logs/%j\"}"
			    "],\"version\":1}"), "plan JSON is exactly the documented form");
	if (s)
		tap_diag("%s", s);
	free(s);
	back = dsl_plan_from_json(j, NULL, err, sizeof(err));
	j2 = back ? dsl_plan_to_json(back) : NULL;
	tap_ok(back && json_equal(j, j2), "plan read back unchanged (%s)", back ? "ok" : err);
	tap_ok(back && back->dirs[3].when == DSL_WHEN_SUCCESS && back->dirs[3].keep &&
	       back->dirs[0].to == NULL && back->dirs[4].line == 7, "plan fields read back");
	json_decref(j);
	json_decref(j2);
	dsl_plan_free(back);
	dsl_plan_free(p);

	{
		struct dsl_plan empty = { 0 };
		json_t *e = dsl_plan_to_json(&empty);
		struct dsl_plan *eb = dsl_plan_from_json(e, NULL, err, sizeof(err));

		tap_ok(eb && eb->ndirs == 0, "an empty plan round-trips");
		dsl_plan_free(eb);
		json_decref(e);
	}
}

struct tamper {
	const char *json;
	const char *want;   /* substring of the error */
};

static void _test_tampered(void)
{
	static const struct tamper cases[] = {
		{ "[]", "not a JSON object" },
		{ "{\"version\":2,\"actions\":[]}", "'version' must be 1" },
		{ "{\"actions\":[]}", "'version' must be 1" },
		{ "{\"version\":1}", "'actions' must be an array" },
		{ "{\"version\":1,\"actions\":[],\"uid\":0}", "unexpected field 'uid'" },
		{ "{\"version\":1,\"actions\":[7]}", "action 0 is not a JSON object" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"delete\",\"path\":\"x\"}]}", "'action' must be one of" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"x\",\"to\":\"/y\"}]}", "unexpected field 'to'" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"archive\",\"path\":\"x\",\"to\":null,\"when\":\"always\"}]}", "missing field 'keep'" },
		{ "{\"version\":1,\"actions\":[{\"line\":0,\"action\":\"exempt\",\"path\":\"x\"}]}", "positive integer" },
		{ "{\"version\":1,\"actions\":[{\"line\":\"1\",\"action\":\"exempt\",\"path\":\"x\"}]}", "positive integer" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"../etc\"}]}", "path_traversal" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"a/../../b\"}]}", "path_traversal" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"tmp/\"}]}", "not in normal form" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"./tmp\"}]}", "not in normal form" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"\"}]}", "needs a value" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"/\"}]}", "path_empty" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"~/x\"}]}", "bad_path" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"a\\u0001b\"}]}", "control_char" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"out/%q\"}]}", "bad_pattern" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"archive\",\"path\":\"s3://b/x\",\"to\":null,\"when\":\"always\",\"keep\":true}]}", "url_not_allowed" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"stage_in\",\"path\":\"etc/passwd\",\"to\":null}]}", "path_not_absolute" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"stage_in\",\"path\":\"http://x/y\",\"to\":null}]}", "url_not_allowed" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"stage_in\",\"path\":\"HTTPS://x/y\",\"to\":null}]}", "not in normal form" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"stage_in\",\"path\":\"/a\",\"to\":\"https://x\"}]}", "url_not_allowed" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"stage_in\",\"path\":\"/a\",\"to\":5}]}", "'to' must be a string or null" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"stage_out\",\"path\":\"a\",\"to\":null}]}", "'to' must be a string" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"archive\",\"path\":\"x\",\"to\":null,\"when\":\"sometimes\",\"keep\":true}]}", "'when' must be" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"archive\",\"path\":\"x\",\"to\":null,\"when\":\"always\",\"keep\":\"yes\"}]}", "'keep' must be true or false" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"x\"},{\"line\":2,\"action\":\"exempt\",\"path\":\"x\"}]}", "repeats action 0" },
		{ "{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"exempt\",\"path\":\"x\"},{\"line\":2,\"action\":\"archive\",\"path\":\"x\",\"to\":null,\"when\":\"always\",\"keep\":false}]}", "is exempt (line 1) and archived here" },
	};
	size_t i;

	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_error_t jerr;
		json_t *j = json_loads(cases[i].json, JSON_DECODE_ANY, &jerr);
		char err[512] = "unset";
		struct dsl_plan *p = j ? dsl_plan_from_json(j, NULL, err, sizeof(err)) : NULL;

		if (!tap_ok(j && !p && strstr(err, cases[i].want), "tampered plan %zu rejected: %s", i, cases[i].want))
			tap_diag("json %s -> %s", cases[i].json, p ? "accepted" : err);
		dsl_plan_free(p);
		json_decref(j);
	}

	/* the config applies when reading back, too */
	{
		static const char *const roots[] = { "/archive", NULL };
		static const char *const schemes[] = { "https", NULL };
		struct dsl_config cfg;
		char err[512];
		json_t *j = json_loads("{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"stage_in\","
				       "\"path\":\"/etc/shadow\",\"to\":null}]}", 0, NULL);
		json_t *k = json_loads("{\"version\":1,\"actions\":[{\"line\":1,\"action\":\"stage_in\","
				       "\"path\":\"s3://b/k\",\"to\":null}]}", 0, NULL);
		struct dsl_plan *p;

		dsl_config_init(&cfg);
		cfg.stage_in_roots = roots;
		cfg.allowed_schemes = schemes;
		p = dsl_plan_from_json(j, &cfg, err, sizeof(err));
		tap_ok(!p && strstr(err, "path_not_allowed"), "read-back plan outside stage-in roots rejected");
		dsl_plan_free(p);
		p = dsl_plan_from_json(k, &cfg, err, sizeof(err));
		tap_ok(!p && strstr(err, "'s3' is not allowed"), "read-back plan with a scheme the site denies rejected");
		dsl_plan_free(p);
		p = dsl_plan_from_json(k, NULL, err, sizeof(err));
		tap_ok(p != NULL, "same plan accepted under the default config");
		dsl_plan_free(p);
		json_decref(j);
		json_decref(k);
	}

	/* more actions than the limit */
	{
		json_t *j = json_pack("{s:i,s:[]}", "version", 1, "actions");
		json_t *a = json_object_get(j, "actions");
		char err[256];
		struct dsl_plan *p;
		int i2;

		for (i2 = 0; i2 < 65; i2++) {
			char path[32];

			snprintf(path, sizeof(path), "d%d", i2);
			json_array_append_new(a, json_pack("{s:i,s:s,s:s}", "line", i2 + 1, "action", "exempt", "path", path));
		}
		p = dsl_plan_from_json(j, NULL, err, sizeof(err));
		tap_ok(!p && strstr(err, "the limit is 64"), "plan with 65 actions rejected");
		dsl_plan_free(p);
		json_decref(j);
	}

	/* a tiny error buffer still gets a terminated, cut message */
	{
		json_t *j = json_loads("{\"version\":3}", 0, NULL);
		char err[8];
		struct dsl_plan *p = dsl_plan_from_json(j, NULL, err, sizeof(err));

		tap_ok(!p && strlen(err) == 7, "short error buffer is filled and terminated");
		dsl_plan_free(p);
		json_decref(j);
	}
}

/* after= in the plan: written, read back, and every tampering refused. */
static void _test_after_json(void)
{
	static const char script[] = "#!/bin/bash\n#DATA after=4711:4712_3\n#DATA archive=out\n";
	static const struct tamper cases[] = {
		{ "{\"version\":1,\"actions\":[],\"after\":[\"12\"]}", "'after' must be an object" },
		{ "{\"version\":1,\"actions\":[],\"after\":{\"line\":2,\"jobs\":[\"12\"],\"x\":1}}", "unexpected field 'x'" },
		{ "{\"version\":1,\"actions\":[],\"after\":{\"line\":0,\"jobs\":[\"12\"]}}", "'line' must be a positive integer" },
		{ "{\"version\":1,\"actions\":[],\"after\":{\"line\":2,\"jobs\":[]}}", "1 to 64 job ids" },
		{ "{\"version\":1,\"actions\":[],\"after\":{\"line\":2,\"jobs\":[12]}}", "is not a job id" },
		{ "{\"version\":1,\"actions\":[],\"after\":{\"line\":2,\"jobs\":[\"012\"]}}", "is not a job id" },
		{ "{\"version\":1,\"actions\":[],\"after\":{\"line\":2,\"jobs\":[\"12;rm\"]}}", "is not a job id" },
		{ "{\"version\":1,\"actions\":[],\"after\":{\"line\":2,\"jobs\":[\"12\\u00003\"]}}", "is not a job id" },
		{ "{\"version\":1,\"actions\":[],\"after\":{\"line\":2,\"jobs\":[\"4294967294\"]}}", "is not a job id" },
		{ "{\"version\":1,\"actions\":[],\"after\":{\"line\":2,\"jobs\":[\"12\",\"12\"]}}", "named twice" },
	};
	struct dsl_plan *p = dsl_parse(script, sizeof(script) - 1, NULL), *back;
	json_t *j, *j2;
	char err[256], *s;

	tap_ok(p && p->nerrors == 0 && p->after_line == 2 && p->nafter == 2 &&
	       p->after[0].job_id == 4711 && p->after[0].task_id == -1 &&
	       p->after[1].job_id == 4712 && p->after[1].task_id == 3, "after= parsed into the plan");
	j = dsl_plan_to_json(p);
	s = json_dumps(json_object_get(j, "after"), JSON_COMPACT | JSON_SORT_KEYS);
	tap_ok(s && !strcmp(s, "{\"jobs\":[\"4711\",\"4712_3\"],\"line\":2}"),
	       "plan JSON has the documented after object (%s)", s ? s : "none");
	free(s);
	back = dsl_plan_from_json(j, NULL, err, sizeof(err));
	j2 = back ? dsl_plan_to_json(back) : NULL;
	tap_ok(back && json_equal(j, j2) && back->nafter == 2 && back->after[1].task_id == 3,
	       "after read back unchanged (%s)", back ? "ok" : err);
	json_decref(j);
	json_decref(j2);
	dsl_plan_free(back);
	dsl_plan_free(p);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *t = json_loads(cases[i].json, JSON_ALLOW_NUL, NULL);
		struct dsl_plan *tp = t ? dsl_plan_from_json(t, NULL, err, sizeof(err)) : NULL;

		if (!tap_ok(t && !tp && strstr(err, cases[i].want), "tampered after %zu rejected: %s", i,
			    cases[i].want))
			tap_diag("json %s -> %s", cases[i].json, tp ? "accepted" : t ? err : "not JSON");
		dsl_plan_free(tp);
		json_decref(t);
	}
}

static void _test_expand_args(void)
{
	struct dsl_expand_ctx ctx = { 7, "bob", "job", 0, -1 };
	char out[64], err[128];

	tap_ok(dsl_expand(NULL, &ctx, out, sizeof(out), err, sizeof(err)) == -1, "expand: NULL template is an error");
	tap_ok(dsl_expand("x", &ctx, out, 0, err, sizeof(err)) == -1, "expand: zero-size output is an error");
	tap_ok(dsl_expand("x/%j", &ctx, out, sizeof(out), NULL, 0) == 0 && !strcmp(out, "x/7"), "expand: NULL err buffer allowed");
	ctx.user = NULL;
	tap_ok(dsl_expand("a/%u/b", &ctx, out, sizeof(out), err, sizeof(err)) == 0 && !strcmp(out, "a/b"),
	       "expand: NULL user expands to nothing");
	ctx.job_id = 4294967295UL;
	tap_ok(dsl_expand("%A-%j", &ctx, out, sizeof(out), err, sizeof(err)) == 0 && !strcmp(out, "4294967295-4294967295"),
	       "expand: large job ids");
	tap_ok(dsl_expand("%a", &ctx, out, 1, err, sizeof(err)) == -1 && strstr(err, "limit"),
	       "expand: result that does not fit is an error (%s)", err);
}

static void _test_misc(void)
{
	struct dsl_plan *p = dsl_parse(NULL, 0, NULL);
	struct dsl_config c;

	tap_ok(p && p->ndirs == 0 && p->nerrors == 0 && p->nwarnings == 0, "NULL script parses to an empty plan");
	dsl_plan_free(p);
	dsl_plan_free(NULL);
	tap_ok(!strcmp(dsl_action_name(DSL_STAGE_IN), "stage_in") && !strcmp(dsl_action_name(DSL_STAGE_OUT), "stage_out") &&
	       !strcmp(dsl_action_name((enum dsl_action)42), "unknown"), "dsl_action_name");
	dsl_config_init(&c);
	tap_ok(c.max_directives == 64 && c.max_line == 4096 && c.max_path == 4095 && !c.allowed_schemes &&
	       !c.stage_in_roots, "dsl_config_init gives the documented defaults");

	/* a script that is not NUL-terminated: only len bytes are read */
	{
		static const char s[] = "#DATA archive=out";
		char *buf = malloc(sizeof(s) - 1);

		memcpy(buf, s, sizeof(s) - 1);
		p = dsl_parse(buf, 13, NULL); /* "#DATA archive" */
		tap_ok(p && p->nerrors == 1 && !strcmp(p->errors[0].code, "bad_syntax"), "only len bytes are read");
		dsl_plan_free(p);
		p = dsl_parse(buf, sizeof(s) - 1, NULL);
		tap_ok(p && p->ndirs == 1 && !strcmp(p->dirs[0].path, "out"), "unterminated buffer parses");
		dsl_plan_free(p);
		free(buf);
	}
}

/* Random scripts built from grammar-heavy pieces: no crash, invariants hold. */
static void _test_random(void)
{
	static const char *const pieces[] = {
		"#DATA ", "#DATA", "#data ", "archive=", "stage_in=", "exempt=", "stage_out=", "to=", "when=",
		"keep=", "success", "no", "/archive/", "..", ".", "/", "%j", "%q", "%", "\"", "\\", " ", "\t",
		"\n", "\r\n", "#", "x", "https://", "file://", "~", "$", "\xff", "\xc3\xa9", "", "=", "echo\n",
		"#SBATCH -N1\n", "\x01",
	};
	const size_t np = sizeof(pieces) / sizeof(pieces[0]);
	uint32_t seed = 12345;
	int iter, bad = 0;

	for (iter = 0; iter < 3000; iter++) {
		char buf[512];
		size_t len = 0, k, n;
		struct dsl_plan *p;
		char *copy;

		seed = seed * 1103515245u + 12345u;
		n = (seed >> 16) % 60;
		for (k = 0; k < n; k++) {
			const char *pc;
			size_t pl;

			seed = seed * 1103515245u + 12345u;
			pc = pieces[(seed >> 16) % np];
			pl = strlen(pc);
			if (len + pl >= sizeof(buf))
				break;
			memcpy(buf + len, pc, pl);
			len += pl;
		}
		seed = seed * 1103515245u + 12345u;
		if (len && (seed >> 16) % 4 == 0)
			buf[(seed >> 8) % len] = '\0';
		copy = malloc(len ? len : 1);
		memcpy(copy, buf, len);
		p = dsl_parse(copy, len, NULL);
		if (!p) {
			bad++;
		} else {
			json_t *a = dsl_plan_to_json(p), *w = dsl_diags_to_json(p->warnings, p->nwarnings),
			       *e = dsl_diags_to_json(p->errors, p->nerrors);

			if (!a || !w || !e || (p->nerrors && p->ndirs))
				bad++;
			if (a && !p->nerrors) {
				char err[256];
				struct dsl_plan *b = dsl_plan_from_json(a, NULL, err, sizeof(err));

				if (!b) {
					bad++;
					tap_diag("valid plan not read back: %s", err);
				}
				dsl_plan_free(b);
			}
			json_decref(a);
			json_decref(w);
			json_decref(e);
		}
		dsl_plan_free(p);
		free(copy);
	}
	tap_ok(bad == 0, "3000 random scripts: no failure, plans valid, diagnostics are JSON (%d bad)", bad);
}

static double _now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int _cmpd(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* Median time of 101 parses of a script, in microseconds. */
static double _median_us(const char *s, size_t len)
{
	double t[101];
	int i;

	for (i = 0; i < 101; i++) {
		double t0 = _now();
		struct dsl_plan *p = dsl_parse(s, len, NULL);

		t[i] = (_now() - t0) * 1e6;
		dsl_plan_free(p);
	}
	qsort(t, 101, sizeof(t[0]), _cmpd);
	return t[50];
}

static void _test_speed(void)
{
	char *s = malloc(200000);
	size_t len = 0;
	int i;
	double us, us2;
	struct dsl_plan *p;
	len += (size_t)snprintf(s + len, 200000 - len, "#!/bin/bash\n");
	for (i = 0; i < 20; i++)
		len += (size_t)snprintf(s + len, 200000 - len, "#SBATCH --option-%d=value\n", i);
	for (i = 0; i < 10; i++)
		len += (size_t)snprintf(s + len, 200000 - len, "#DATA archive=results/run-%d when=success\n", i);
	for (i = 0; i < 969; i++)
		len += (size_t)snprintf(s + len, 200000 - len, "srun ./step --input=data/%d.dat --verbose # step\n", i);
	p = dsl_parse(s, len, NULL);
	tap_ok(p && p->ndirs == 10 && p->nerrors == 0, "1,000-line script parses (%zu bytes)", len);
	dsl_plan_free(p);
	us = _median_us(s, len);

	/* the worst legal case: 64 directives and long comment lines in the block */
	len = (size_t)snprintf(s, 200000, "#!/bin/bash\n");
	for (i = 0; i < 64; i++)
		len += (size_t)snprintf(s + len, 200000 - len,
					"#DATA stage_out=\"out dir/%d\" to=https://data.example.org/a/b/c/%%j/%d\n", i, i);
	for (i = 0; i < 935; i++)
		len += (size_t)snprintf(s + len, 200000 - len, "# a comment line %d with some words in it\n", i);
	p = dsl_parse(s, len, NULL);
	tap_ok(p && p->ndirs == 64 && p->nerrors == 0, "1,000 lines with 64 directives parse");
	dsl_plan_free(p);
	us2 = _median_us(s, len);
	tap_diag("median parse time: %.1f us (10 directives), %.1f us (64 directives)", us, us2);
	/* Judged only when asked (STAGEHAND_TEST_TIMING=1): a shared machine is noisy. */
	if (tap_timing())
		tap_ok(us < 100 && us2 < 100, "a 1,000-line script parses in under 100 us (%.1f, %.1f)", us, us2);
	free(s);
}

int main(void)
{
	_test_roundtrip();
	_test_tampered();
	_test_after_json();
	_test_expand_args();
	_test_misc();
	_test_random();
	_test_speed();
	return tap_done();
}
