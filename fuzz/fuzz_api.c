/*
 * fuzz_api.c - libFuzzer target for the daemon's request decoder
 * (daemon/api/api_decode.c): what api_handlers.c does with a path, a query and
 * a body before any handler acts on them.
 *
 * Input format (what fuzz/seeds/api/ holds): the first line is
 * "METHOD /path?query", the rest is the body. The query is split at '&' and
 * '=' as libmicrohttpd would (no percent decoding). Every decoder runs on
 * every input; a job-end plan that decodes is also read back with
 * dsl_plan_from_json, as the daemon's lifecycle code does. A decoded value
 * that breaks the decoder's promises (a NULL state, a relative work_dir,
 * options that are not an object, an id <= 0) aborts.
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_decode.h"
#include "dsl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NARGS 16

struct _query {
	char *key[NARGS], *val[NARGS];
	int n;
};

static const char *_arg(void *cls, const char *key)
{
	struct _query *q = cls;

	for (int i = 0; i < q->n; i++)
		if (strcmp(q->key[i], key) == 0)
			return q->val[i];
	return NULL;
}

static int _is_state(const char *name)
{
	static const char *const states[] = { "queued", "running", "verifying", "done",
		"failed_retryable", "failed_final", "cancelled", NULL };

	for (const char *const *s = states; *s; s++)
		if (strcmp(*s, name) == 0)
			return 1;
	return 0;
}

static void _die(const char *what)
{
	fprintf(stderr, "fuzz_api: broken promise: %s\n", what);
	abort();
}

static void _query_split(char *qs, struct _query *q)
{
	char *save = NULL;

	for (char *t = strtok_r(qs, "&", &save); t && q->n < NARGS; t = strtok_r(NULL, "&", &save)) {
		char *eq = strchr(t, '=');

		if (eq)
			*eq++ = '\0';
		q->key[q->n] = t;
		q->val[q->n] = eq ? eq : "";	/* MHD gives "" for "key" alone too */
		q->n++;
	}
}

static void _body(const char *body, size_t len)
{
	char err[512];
	json_t *jb = NULL;
	struct api_submit s;
	struct api_job_end e;
	struct api_job_start js;

	err[0] = '\0';
	if (api_decode_body(body, len, &jb, err, sizeof(err)) < 0) {
		if (jb || !err[0])
			_die("a refused body without a message, or with a value");
		return;
	}
	if (!json_is_object(jb))
		_die("decoded body is not an object");
	if (api_decode_submit(jb, &s, err, sizeof(err)) == 0) {
		if (s.job_id < 0)
			_die("negative job_id");
		if (s.options_text) {
			json_t *o = json_loads(s.options_text, 0, NULL);

			if (!json_is_object(o))
				_die("options_text is not a JSON object");
			json_decref(o);
			free(s.options_text);
		}
	}
	if (api_decode_job_end(jb, &e, err, sizeof(err)) == 0) {
		if (!e.state || !e.state[0])
			_die("job end without a state");
		if (e.work_dir && e.work_dir[0] != '/')
			_die("relative work_dir accepted");
		if (e.uid < -1 || e.gid < -1 || e.uid > 4294967294LL)
			_die("uid/gid out of range");
		if (e.plan_text) {
			json_t *pj = json_loads(e.plan_text, 0, NULL);
			struct dsl_plan *p;

			if (!json_is_object(pj))
				_die("plan_text is not a JSON object");
			p = dsl_plan_from_json(pj, NULL, err, sizeof(err));
			dsl_plan_free(p);
			json_decref(pj);
			free(e.plan_text);
		}
	}
	if (api_decode_job_start(jb, &js, err, sizeof(err)) == 0) {
		if ((js.work_dir && js.work_dir[0] != '/') || js.ndirs > API_START_DIRS_MAX)
			_die("job start with a relative work_dir or too many dirs");
		for (size_t i = 0; i < js.ndirs; i++)
			if (!js.dirs[i] || js.dirs[i][0] != '/')
				_die("job start with a relative dir");
	}
	json_decref(jb);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *nl = memchr(data, '\n', size);
	size_t hl = nl ? (size_t)(nl - data) : size;
	char *head = malloc(hl + 1), *sp, *url, *qs;
	struct _query q = { .n = 0 };
	struct api_path p;
	struct api_list_query lq;
	char err[512];
	int64_t id;

	if (!head)
		return 0;
	memcpy(head, data, hl);
	head[hl] = '\0';	/* a NUL inside the line ends it, as in C strings */
	sp = strchr(head, ' ');
	url = sp ? sp + 1 : head;
	qs = strchr(url, '?');
	if (qs)
		*qs++ = '\0';
	if (api_decode_path(url, &p) == 0) {
		if (p.nseg < 0 || p.nseg > API_SEG_MAX)
			_die("segment count out of range");
		for (int i = 0; i < p.nseg; i++) {
			if (!p.seg[i] || !p.seg[i][0] || strchr(p.seg[i], '/'))
				_die("empty segment or '/' inside one");
			if (api_decode_id(p.seg[i], &id) == 0 && id <= 0)
				_die("id <= 0 accepted");
		}
	}
	if (qs)
		_query_split(qs, &q);
	if (api_decode_list(_arg, &q, _is_state, &lq, err, sizeof(err)) == 0) {
		if (lq.limit < 1 || lq.limit > API_LIST_LIMIT_MAX || lq.job_id < 0)
			_die("list query out of range");
		if (lq.state && !_is_state(lq.state))
			_die("unknown state accepted");
	}
	if (nl)
		_body((const char *)nl + 1, size - hl - 1);
	free(head);
	return 0;
}
