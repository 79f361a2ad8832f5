/* api_drain.c - see api_drain.h. */
#include "config.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "api_drain.h"
#include "log.h"
#include "queue.h"
#include "queue_drain.h"

/* Serializes drain and resume: the API threads of both listeners call them. */
static pthread_mutex_t _drain_lock = PTHREAD_MUTEX_INITIALIZER;

/* Transfers under way: running and verifying requests (mover jobs' included). */
static int64_t _running(struct daemon *d)
{
	int64_t counts[QS_COUNT];
	char err[256];

	if (queue_count_states(d->q, counts, err, sizeof(err)) < 0)
		return -1;
	return counts[QS_RUNNING] + counts[QS_VERIFYING];
}

static int64_t _queued(struct daemon *d)
{
	int64_t counts[QS_COUNT];
	char err[256];

	if (queue_count_states(d->q, counts, err, sizeof(err)) < 0)
		return -1;
	return counts[QS_QUEUED];
}

json_t *api_drain_state(struct daemon *d)
{
	int64_t since = atomic_load(&d->drained);
	struct queue_drain qd = { 0 };
	char err[256];
	json_t *o;

	/* The row is read only while drained; unreadable now, what the flag knows is said. */
	if (since && queue_drain_get(d->q, &qd, err, sizeof(err)) == 1)
		since = qd.since;
	o = json_pack("{s:b,s:o,s:o,s:o,s:I}", "drained", since != 0,
		      "since", since ? json_integer(since) : json_null(),
		      "by", qd.reason ? json_integer(qd.by_uid) : json_null(),
		      "reason", qd.reason ? json_string(qd.reason) : json_null(),
		      "running", (json_int_t)_running(d));
	queue_drain_free(&qd);
	return o ? o : json_object();
}

/* NULL (none) or the reason; -1 with a 400 in out when it is not acceptable. */
static int _reason(json_t *body, const char **reason, struct api_reply *out)
{
	const char *k;
	json_t *v;

	*reason = NULL;
	json_object_foreach(body, k, v) {
		if (strcmp(k, "reason") != 0) {
			api_error(out, 400, "unknown field '%.40s': a drain takes only 'reason'", k);
			return -1;
		}
	}
	v = json_object_get(body, "reason");
	if (!v || json_is_null(v))
		return 0;
	if (!json_is_string(v)) {
		api_error(out, 400, "'reason' must be a string");
		return -1;
	}
	*reason = json_string_value(v);
	if (strlen(*reason) > API_DRAIN_REASON_MAX) {
		api_error(out, 400, "'reason' is longer than %d bytes", API_DRAIN_REASON_MAX);
		return -1;
	}
	/* It goes into held jobs' status text and the log: one line of text. */
	for (const unsigned char *p = (const unsigned char *)*reason; *p; p++)
		if (*p < 0x20 || *p == 0x7f) {
			api_error(out, 400, "'reason' must be one line of text (no control "
				  "characters)");
			return -1;
		}
	return 0;
}

static void _drain(struct daemon *d, const struct api_caller *who, json_t *body,
		   struct api_reply *out)
{
	const char *reason;
	struct queue_drain qd;
	char err[512] = "";
	int already = 0;

	if (_reason(body, &reason, out) < 0)
		return;
	/* One drain or resume at a time (each listener has its thread), so the
	   flag and the durable record never disagree. */
	pthread_mutex_lock(&_drain_lock);
	if (queue_drain_set(d->q, reason, who->uid, (int64_t)time(NULL), &already, err,
			    sizeof(err)) < 0 ||
	    queue_drain_get(d->q, &qd, err, sizeof(err)) != 1) {
		pthread_mutex_unlock(&_drain_lock);
		api_error(out, 500, "could not record the drain: %s", err[0] ? err : "no drain record");
		return;
	}
	/* Stored first: the flag the main loop reads follows the durable record. */
	atomic_store(&d->drained, qd.since);
	pthread_mutex_unlock(&_drain_lock);
	if (!already)
		log_info("drained by uid %u%s%s: no new transfers start; %lld running finish; "
			 "requests are still accepted and queued", (unsigned)who->uid,
			 *qd.reason ? ": " : "", qd.reason, (long long)_running(d));
	else if (reason)
		log_info("drain reason changed by uid %u: %s", (unsigned)who->uid, qd.reason);
	queue_drain_free(&qd);
	out->status = 200;
	out->body = api_drain_state(d);
	json_object_set_new(out->body, "already", json_boolean(already));
}

static void _resume(struct daemon *d, const struct api_caller *who, struct api_reply *out)
{
	char err[512] = "";
	int was = 0;

	pthread_mutex_lock(&_drain_lock);
	if (queue_drain_clear(d->q, &was, err, sizeof(err)) < 0) {
		pthread_mutex_unlock(&_drain_lock);
		api_error(out, 500, "could not record the resume: %s", err);
		return;
	}
	atomic_store(&d->drained, 0);
	pthread_mutex_unlock(&_drain_lock);
	if (was)
		log_info("resumed by uid %u: transfers start again (%lld queued)",
			 (unsigned)who->uid, (long long)_queued(d));
	daemon_wake(d);
	out->status = 200;
	out->body = api_drain_state(d);
	json_object_set_new(out->body, "was_drained", json_boolean(was));
	json_object_set_new(out->body, "queued", json_integer(_queued(d)));
}

void api_drain(struct daemon *d, const struct api_caller *who, const char *method,
	       json_t *body, struct api_reply *out)
{
	int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");

	if (!get && !post && strcmp(method, "DELETE") != 0) {
		api_error(out, 405, "use GET, POST (drain) or DELETE (resume) for /v1/drain");
		return;
	}
	if (get) {
		out->status = 200;
		out->body = api_drain_state(d);
		return;
	}
	if (!who->admin) {
		api_error(out, 403, "%s is for admins (AdminUsers/AdminGroups in stagehand.conf); "
			  "this is uid %u", post ? "drain" : "resume", (unsigned)who->uid);
		return;
	}
	if (post)
		_drain(d, who, body, out);
	else
		_resume(d, who, out);
}
