/*
 * test_record.c - common/record.c, the one C reader of a job's admin_comment,
 * against tests/vectors/record/ (tests/lua/run-record-vectors.lua runs the
 * same files through lua/stagehand.lua, so the daemon and slurmctld's Lua
 * read a record alike), and a plan whose paths spell every marker never
 * reading as a hold.
 */
#include "config.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "record.h"
#include "tests/tap.h"

static int _is_json(const struct dirent *d)
{
	size_t n = strlen(d->d_name);

	return n > 5 && !strcmp(d->d_name + n - 5, ".json");
}

/* want (a JSON string or null) against [got, got + len) (got NULL: absent). */
static bool _same(const json_t *want, const char *got, size_t len)
{
	if (!want || json_is_null(want))
		return got == NULL;
	return got && json_string_length(want) == len &&
	       !memcmp(json_string_value(want), got, len);
}

static const char *_shown(const json_t *want)
{
	return json_is_string(want) ? json_string_value(want) : "null";
}

/* The state as lua/stagehand.lua's record_state says it: nil, "none" or the word. */
static bool _same_state(const json_t *want, const char *ac, const struct record *r)
{
	enum record_state s = record_state(ac);

	if (s == RECORD_NONE_AT_ALL)
		return !want || json_is_null(want);
	if (s == RECORD_NO_HOLD)
		return json_is_string(want) && !strcmp(json_string_value(want), "none");
	return _same(want, r->hold, r->hold_len);
}

static void _vector(const char *dir, const char *name)
{
	char path[4400];
	json_error_t je;
	json_t *v, *e;
	const char *ac;
	struct record r;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	v = json_load_file(path, 0, &je);
	e = json_object_get(v, "expect");
	if (!tap_ok(v && e && json_object_get(e, "site"), "%s: readable%s%s", name,
		    v ? "" : ": ", v ? "" : je.text)) {
		json_decref(v);
		return;
	}
	ac = json_string_value(json_object_get(v, "admin_comment"));
	record_split(ac, &r);
	ok(_same(json_object_get(e, "site"), r.site, r.site_len), "%s: site text '%.*s' (want '%s')",
	   name, (int)r.site_len, r.site, _shown(json_object_get(e, "site")));
	ok(_same(json_object_get(e, "status"), r.status, r.status_len),
	   "%s: status text '%.*s' (want '%s')", name, (int)r.status_len,
	   r.status ? r.status : "(null)", _shown(json_object_get(e, "status")));
	ok(_same(json_object_get(e, "hold"), r.hold, r.hold_len), "%s: hold word '%.*s' (want '%s')",
	   name, (int)r.hold_len, r.hold ? r.hold : "(null)", _shown(json_object_get(e, "hold")));
	ok(_same(json_object_get(e, "plan"), r.plan, r.plan ? strlen(r.plan) : 0),
	   "%s: plan (want '%s')", name, _shown(json_object_get(e, "plan")));
	ok(_same_state(json_object_get(e, "state"), ac, &r), "%s: record state (want %s)", name,
	   _shown(json_object_get(e, "state")));
	ok(record_hold_pending(ac) == (json_is_string(json_object_get(e, "state")) &&
				       !strcmp(json_string_value(json_object_get(e, "state")),
					       "pending")),
	   "%s: hold pending as the state says", name);
	ok((record_plan(ac) == NULL) == (r.plan == NULL) &&
	   (!r.plan || !strcmp(record_plan(ac), r.plan)), "%s: record_plan agrees", name);
	json_decref(v);
}

/* What the daemon decides on: a plan spelling every marker is never a hold. */
static void _hostile(void)
{
	static const char *const plans[] = {
		"stagehand:v1:{\"v\":1,\"actions\":[{\"path\":\"tmp/stagehand:hold=pending\"}]}",
		"stagehand:v1:{\"v\":1,\"actions\":[{\"path\":\"x stagehand:hold=pending\"}]} "
		"stagehand:hold=pending",
		"stagehand:v1:stagehand:hold=pending stagehand:v1:",
		"site stagehand:status=s stagehand:v1:stagehand:hold=pending",
	};
	struct record r;

	for (size_t i = 0; i < sizeof(plans) / sizeof(plans[0]); i++) {
		record_split(plans[i], &r);
		ok(!record_hold_pending(plans[i]) && r.hold == NULL && r.plan != NULL,
		   "hostile plan %zu: not held, still a record", i);
		ok(strstr(r.rest, RECORD_PLAN_PREFIX) == r.rest,
		   "hostile plan %zu: a status rewrite keeps the plan whole", i);
	}
}

int main(void)
{
	const char *vec = getenv("STAGEHAND_VECTORS");
	char dir[4096];
	struct dirent **list;
	int n;

	snprintf(dir, sizeof(dir), "%s/record", vec ? vec : "tests/vectors");
	n = scandir(dir, &list, _is_json, alphasort);
	ok(n >= 30, "found %d record vectors in %s", n, dir);
	for (int i = 0; i < n; i++) {
		_vector(dir, list[i]->d_name);
		free(list[i]);
	}
	if (n > 0)
		free(list);
	_hostile();
	return tap_done();
}
