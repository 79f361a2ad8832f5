/* api_decode.c - see api_decode.h. Pure: called by api_handlers.c and fuzz/fuzz_api.c. */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_decode.h"
#include "queue_sluid.h"

#define ID_MAX_UID 4294967294LL	/* (uid_t)-1 is "no uid" to the kernel */

int api_decode_path(const char *url, struct api_path *p)
{
	char *save = NULL, *t;

	memset(p, 0, sizeof(*p));
	if (!url || snprintf(p->buf, sizeof(p->buf), "%s", url) >= (int)sizeof(p->buf))
		return -1;
	for (t = strtok_r(p->buf, "/", &save); t && p->nseg < API_SEG_MAX;
	     t = strtok_r(NULL, "/", &save))
		p->seg[p->nseg++] = t;
	return t ? -1 : 0;
}

int api_decode_num(const char *s, int64_t min, int64_t *out)
{
	char *end;
	long long v;

	if (!s || *s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v < min)
		return -1;
	*out = v;
	return 0;
}

int api_decode_id(const char *s, int64_t *out)
{
	return api_decode_num(s, 1, out);
}

int api_decode_body(const char *body, size_t len, json_t **out, char *err, size_t errlen)
{
	json_error_t je;
	json_t *jb;

	*out = NULL;
	if (!body || len == 0) {
		*out = json_object();
		if (!*out) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		return 0;
	}
	jb = json_loadb(body, len, JSON_REJECT_DUPLICATES, &je);
	if (!jb) {
		snprintf(err, errlen, "malformed JSON at line %d column %d: %s", je.line, je.column,
			 je.text);
		return -1;
	}
	if (!json_is_object(jb)) {
		json_decref(jb);
		snprintf(err, errlen, "the request body must be a JSON object");
		return -1;
	}
	*out = jb;
	return 0;
}

/* A string field, or NULL when absent or null; *bad set when it is another type. */
static const char *_str_field(json_t *o, const char *k, int *bad)
{
	json_t *v = json_object_get(o, k);

	if (!v || json_is_null(v))
		return NULL;
	if (!json_is_string(v)) {
		*bad = 1;
		return NULL;
	}
	return json_string_value(v);
}

/* An optional integer field in [lo, hi]: 0 (absent: *out untouched), or -1. */
static int _int_field(json_t *o, const char *k, json_int_t lo, json_int_t hi, int64_t *out)
{
	json_t *v = json_object_get(o, k);

	if (!v || json_is_null(v))
		return 0;
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return -1;
	*out = json_integer_value(v);
	return 0;
}

int api_decode_submit(json_t *body, struct api_submit *s, char *err, size_t errlen)
{
	json_t *opts = json_object_get(body, "options");
	int bad = 0;

	memset(s, 0, sizeof(*s));
	s->action = _str_field(body, "action", &bad);
	s->source = _str_field(body, "source", &bad);
	s->dest = _str_field(body, "dest", &bad);
	if (bad) {
		snprintf(err, errlen, "'action', 'source' and 'dest' must be strings");
		return -1;
	}
	if (s->action && strcmp(s->action, "purge") == 0) {
		/* Only stagehandd makes them, from its records of what it staged (cleanup.h). */
		snprintf(err, errlen, "'action' must be stage_in, stage_out, archive or label");
		return -1;
	}
	if (_int_field(body, "job_id", 1, INT64_MAX, &s->job_id) < 0) {
		snprintf(err, errlen, "'job_id' must be a positive integer");
		return -1;
	}
	if (opts && !json_is_null(opts)) {
		if (!json_is_object(opts)) {
			snprintf(err, errlen, "'options' must be a JSON object");
			return -1;
		}
		s->options_text = json_dumps(opts, JSON_COMPACT | JSON_SORT_KEYS);
		if (!s->options_text) {
			snprintf(err, errlen, "'options' cannot be stored (out of memory)");
			return -1;
		}
	}
	return 0;
}

int api_decode_list(api_arg_fn arg, void *cls, int (*is_state)(const char *name),
		    struct api_list_query *q, char *err, size_t errlen)
{
	const char *job = arg(cls, "job"), *state = arg(cls, "state");
	const char *all = arg(cls, "all"), *limit = arg(cls, "limit");
	const char *attention = arg(cls, "attention");
	int64_t v;

	memset(q, 0, sizeof(*q));
	q->limit = 1000;
	q->all = all && strcmp(all, "0") != 0;
	if (job) {
		if (api_decode_id(job, &v) < 0) {
			snprintf(err, errlen, "job=%.64s is not a job id", job);
			return -1;
		}
		q->job_id = v;
	}
	if (state) {
		if (!is_state(state)) {
			snprintf(err, errlen, "state=%.64s is not a state (queued, running, "
				 "verifying, done, failed_retryable, failed_final, cancelled)", state);
			return -1;
		}
		q->state = state;
	}
	if (limit) {
		if (api_decode_id(limit, &v) < 0 || v > API_LIST_LIMIT_MAX) {
			snprintf(err, errlen, "limit must be from 1 to %d", API_LIST_LIMIT_MAX);
			return -1;
		}
		q->limit = (int)v;
	}
	if (attention) {
		if (api_decode_id(attention, &v) < 0 || v > API_ATTENTION_DAYS_MAX) {
			snprintf(err, errlen, "attention must be a number of days from 1 to %d",
				 API_ATTENTION_DAYS_MAX);
			return -1;
		}
		q->attention_days = (int)v;
	}
	q->user = arg(cls, "user");
	if (q->user && !*q->user) {
		snprintf(err, errlen, "user= needs a user name or uid");
		return -1;
	}
	return 0;
}

int api_decode_job_end(json_t *body, struct api_job_end *e, char *err, size_t errlen)
{
	json_t *st = json_object_get(body, "state"), *plan = json_object_get(body, "plan");
	int64_t ec = 0;
	int bad = 0;

	memset(e, 0, sizeof(*e));
	e->uid = e->gid = -1;
	if (!json_is_string(st) || !*json_string_value(st)) {
		snprintf(err, errlen, "'state' is required: Slurm's job state name, e.g. COMPLETED");
		return -1;
	}
	e->state = json_string_value(st);
	if (_int_field(body, "exit_code", INT_MIN, INT_MAX, &ec) < 0) {
		snprintf(err, errlen, "'exit_code' must be an integer (a job's exit code)");
		return -1;
	}
	e->exit_code = (int)ec;
	if (_int_field(body, "uid", 0, ID_MAX_UID, &e->uid) < 0) {
		snprintf(err, errlen, "'uid' must be a non-negative integer (at most %lld)",
			 ID_MAX_UID);
		return -1;
	}
	if (_int_field(body, "gid", 0, ID_MAX_UID, &e->gid) < 0) {
		snprintf(err, errlen, "'gid' must be a non-negative integer (at most %lld)",
			 ID_MAX_UID);
		return -1;
	}
	e->user = _str_field(body, "user", &bad);
	e->work_dir = _str_field(body, "work_dir", &bad);
	e->refused = _str_field(body, "refused", &bad);
	e->sluid = _str_field(body, "sluid", &bad);
	if (bad) {
		snprintf(err, errlen, "'user', 'work_dir', 'refused' and 'sluid' must be strings");
		return -1;
	}
	if (e->sluid && !queue_sluid_valid(e->sluid)) {
		snprintf(err, errlen, "'sluid' must be Slurm's SLUID of the job (SLURM_JOB_SLUID: "
			 "1 to %d letters and digits)", QUEUE_SLUID_MAX);
		return -1;
	}
	if (e->refused && (!*e->refused || strlen(e->refused) > 4096)) {
		snprintf(err, errlen, "'refused' must be the plugin's message, 1 to 4096 bytes");
		return -1;
	}
	if (e->work_dir && e->work_dir[0] != '/') {
		snprintf(err, errlen, "'work_dir' must be an absolute path");
		return -1;
	}
	if (plan && !json_is_null(plan)) {
		if (!json_is_object(plan) || !json_is_array(json_object_get(plan, "actions"))) {
			snprintf(err, errlen, "'plan' must be an object with an 'actions' array "
				 "(docs/directives.md)");
			return -1;
		}
		e->plan_text = json_dumps(plan, JSON_COMPACT);
		if (!e->plan_text) {
			snprintf(err, errlen, "'plan' cannot be stored (out of memory)");
			return -1;
		}
	}
	return 0;
}

/* An absolute path of sane length, for the job-start event. */
static int _start_path_ok(const char *p)
{
	return p && p[0] == '/' && strlen(p) < API_START_PATH_MAX;
}

int api_decode_job_start(json_t *body, struct api_job_start *s, char *err, size_t errlen)
{
	json_t *dirs = json_object_get(body, "dirs"), *v;
	int bad = 0;
	size_t i;

	memset(s, 0, sizeof(*s));
	s->uid = -1;
	if (_int_field(body, "uid", 0, ID_MAX_UID, &s->uid) < 0) {
		snprintf(err, errlen, "'uid' must be a non-negative integer (at most %lld)",
			 ID_MAX_UID);
		return -1;
	}
	s->work_dir = _str_field(body, "work_dir", &bad);
	s->node = _str_field(body, "node", &bad);
	if (bad) {
		snprintf(err, errlen, "'work_dir' and 'node' must be strings");
		return -1;
	}
	if (s->work_dir && !_start_path_ok(s->work_dir)) {
		snprintf(err, errlen, "'work_dir' must be an absolute path (under %d bytes)",
			 API_START_PATH_MAX);
		return -1;
	}
	if (!dirs || json_is_null(dirs))
		return 0;
	if (!json_is_array(dirs) || json_array_size(dirs) > API_START_DIRS_MAX) {
		snprintf(err, errlen, "'dirs' must be an array of at most %d absolute paths",
			 API_START_DIRS_MAX);
		return -1;
	}
	json_array_foreach(dirs, i, v) {
		if (!json_is_string(v) || !_start_path_ok(json_string_value(v))) {
			snprintf(err, errlen, "'dirs'[%zu] must be an absolute path (under %d bytes)",
				 i, API_START_PATH_MAX);
			return -1;
		}
		s->dirs[s->ndirs++] = json_string_value(v);
	}
	return 0;
}
