/* api_handlers.c - the endpoints of docs/api.md. Called with conf_lock held (read). */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <pwd.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_audit.h"
#include "api_bb.h"
#include "api_drain.h"
#include "api_labels.h"
#include "api_mover.h"
#include "monoclock.h"
#include "usercache.h"
#include "api.h"
#include "api_decode.h"
#include "dclient.h"
#include "api_private.h"
#include "lifecycle.h"
#include "log.h"
#include "metrics.h"
#include "queue.h"
#include "queue_after.h"
#include "queue_sluid.h"
#include "slurm_jobs.h"
#include "slurm_nodes.h"
#include "slurm_owner.h"
#include "slurm_watch.h"
#include "pace.h"
#include "urlredact.h"
#include "yield.h"

#define ITEMS_MAX 10000

/* A JSON string for any bytes: invalid UTF-8 is shown as \xNN text. New reference. */
static json_t *_jstr(const char *s)
{
	json_t *j;
	char *esc;
	size_t o = 0, n;

	if (!s)
		return json_null();
	j = json_string(s);
	if (j)
		return j;
	n = strlen(s);
	esc = malloc(n * 4 + 1);
	if (!esc)
		return json_null();
	for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
		if (*p < 0x80) {
			esc[o++] = (char)*p;
		} else {
			snprintf(esc + o, 5, "\\x%02x", *p);
			o += 4;
		}
	}
	esc[o] = '\0';
	j = json_string(esc);
	free(esc);
	return j ? j : json_null();
}

/* A text that may hold a URL, its query hidden (common/urlredact.h): what the API shows. */
static json_t *_jurl(const char *s)
{
	char *r = url_redact_dup(s);
	json_t *j = _jstr(r ? r : (s ? "(out of memory)" : NULL));

	free(r);
	return j;
}

static json_t *_opt_int(int64_t v)
{
	return v ? json_integer(v) : json_null();
}

static json_t *_request_json(const struct queue_request *r)
{
	json_t *o = json_object(), *opts = json_loads(r->options, 0, NULL);

	if (!o) {
		json_decref(opts);
		return NULL;
	}
	json_object_set_new(o, "id", json_integer(r->id));
	json_object_set_new(o, "uid", json_integer(r->uid));
	json_object_set_new(o, "gid", json_integer(r->gid));
	json_object_set_new(o, "user", _jstr(r->user));
	json_object_set_new(o, "job_id", _opt_int(r->job_id));
	json_object_set_new(o, "action", _jstr(r->action));
	json_object_set_new(o, "source", _jurl(r->source));
	json_object_set_new(o, "dest", _jurl(r->dest));
	json_object_set_new(o, "options", opts ? opts : json_object());
	json_object_set_new(o, "state", json_string(queue_state_name(r->state)));
	json_object_set_new(o, "attempts", json_integer(r->attempts));
	json_object_set_new(o, "max_retries", json_integer(r->max_retries));
	json_object_set_new(o, "next_attempt_at", _opt_int(r->next_attempt_at));
	json_object_set_new(o, "error", _jurl(r->error));
	json_object_set_new(o, "created", json_integer(r->created));
	json_object_set_new(o, "updated", json_integer(r->updated));
	json_object_set_new(o, "bytes_total", json_integer(r->bytes_total));
	json_object_set_new(o, "bytes_done", json_integer(r->bytes_done));
	json_object_set_new(o, "files_total", json_integer(r->files_total));
	json_object_set_new(o, "files_done", json_integer(r->files_done));
	json_object_set_new(o, "files_skipped", json_integer(r->files_skipped));
	return o;
}

static int _collect(const struct queue_request *r, void *arg)
{
	json_t *o = _request_json(r);

	if (o)
		json_array_append_new(arg, o);
	return 0;
}

struct _items {
	json_t *arr;
	int n;
	int truncated;
};

static int _collect_item(const struct queue_item *it, void *arg)
{
	struct _items *s = arg;

	if (s->n >= ITEMS_MAX) {
		s->truncated = 1;
		return 1;
	}
	json_array_append_new(s->arr, json_pack("{s:o,s:s,s:I,s:s,s:o,s:o}",
		"relpath", _jstr(it->relpath), "type", it->type, "size", (json_int_t)it->size,
		"state", queue_item_state_name(it->state),
		"checksum", _jstr(it->checksum_dst ? it->checksum_dst : it->checksum_src),
		"error", _jurl(it->error)));
	s->n++;
	return 0;
}

static int _parse_id(const char *s, int64_t *out)
{
	return api_decode_id(s, out);
}

/* Load request id for the caller; fills out with 404/403 on failure. NULL then. */
static struct queue_request *_own_request(struct daemon *d, const struct api_caller *who,
					  int64_t id, struct api_reply *out)
{
	struct queue_request *r = NULL;
	char err[512];
	int rc = queue_request_get(d->q, id, &r, err, sizeof(err));

	if (rc == 1) {
		api_error(out, 404, "request %lld does not exist", (long long)id);
		return NULL;
	}
	if (rc < 0) {
		api_error(out, 500, "%s", err);
		return NULL;
	}
	if (!who->admin && r->uid != who->uid) {
		queue_request_free(r);
		api_error(out, 403, "request %lld belongs to another user", (long long)id);
		return NULL;
	}
	return r;
}

static void _reply_request(struct daemon *d, int64_t id, unsigned status, struct api_reply *out)
{
	struct queue_request *r = NULL;
	char err[512];

	if (queue_request_get(d->q, id, &r, err, sizeof(err)) != 0) {
		api_error(out, 500, "request %lld: %s", (long long)id, err);
		return;
	}
	out->status = status;
	out->body = _request_json(r);
	queue_request_free(r);
}

static void _health(struct daemon *d, const struct api_caller *who, struct api_reply *out)
{
	int64_t counts[QS_COUNT];
	char err[256];
	json_t *q = json_object();

	if (queue_count_states(d->q, counts, err, sizeof(err)) == 0)
		for (int s = 0; s < QS_COUNT; s++)
			json_object_set_new(q, queue_state_name((enum queue_state)s),
					    json_integer(counts[s]));
	out->status = 200;
	out->body = json_pack("{s:s,s:s,s:i,s:b,s:o}", "status",
			      atomic_load(&d->draining) ? "draining" : "ok", "version",
			      PACKAGE_VERSION, "uid", (int)who->uid, "admin", who->admin, "queue", q);
	if (out->body) {	/* after-job transfers held back for running jobs (yield.h) */
		static const char *const modes[] = { "pause", "cap", "adaptive" };
		struct pace_stats ps;
		json_t *roots = json_array();

		pace_run_stats(&ps);
		json_object_set_new(out->body, "yield", json_pack(
			"{s:i,s:i,s:i,s:s,s:{s:i,s:i,s:f,s:f,s:f,s:I}}", "active",
			atomic_load(&d->metrics->yield_active), "busy_filesystems",
			atomic_load(&d->metrics->yield_busy_fs), "started_jobs",
			yield_jobs_started(), "mode", modes[d->conf->yield_mode % 3], "pace",
			"filesystems", ps.controllers, "held", ps.held, "rate", ps.rate,
			"idle_bandwidth", ps.idle, "capacity", ps.capacity, "backoffs",
			(json_int_t)ps.backoffs));
		/* An admin's drain: the daemon is up and accepts requests, so "ok". */
		json_object_set_new(out->body, "drain", api_drain_state(d));
		/* What the nodes' plugin must name as scratch= (stagehand doctor). */
		for (char **r = d->conf->scratch_roots; roots && r && *r; r++)
			json_array_append_new(roots, json_string(*r));
		json_object_set_new(out->body, "scratch_roots", roots);
	}
}

/* The owner entry of job in o (sorted by api_prepare), or NULL. */
static struct api_owner *_order_owner(const struct api_order *o, int64_t job)
{
	size_t lo = 0, hi = o ? o->nowners : 0;

	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if ((int64_t)o->owners[mid].job == job)
			return &o->owners[mid];
		if ((int64_t)o->owners[mid].job < job)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/*
 * Whose job is job, on slurmctld's word: 0 with *uid, 1 slurmctld does not
 * know it, -1 with out answered. From the work order when there is one (the
 * prep stage asked; the writer never asks slurmctld), else asked now (a
 * listener's thread, holding no lock).
 */
static int _slurm_owner(const struct api_caller *who, int64_t job, int64_t *uid,
			struct api_reply *out)
{
	struct sjob j;
	char err[256];
	int rc;

	if (who->order) {
		const struct api_owner *o = _order_owner(who->order, job);

		if (!o || o->uid == SOWNER_ERROR) {
			api_error(out, 503, "cannot ask slurmctld whose job %lld is: %s; submit again",
				  (long long)job, o && who->order->why[0] ? who->order->why :
				  "it was not asked before the request was stored");
			return -1;
		}
		*uid = o->uid;
		return o->uid == SOWNER_UNKNOWN_JOB ? 1 : 0;
	}
	rc = sjob_get((uint32_t)job, &j, err, sizeof(err));
	if (rc < 0) {
		api_error(out, 503, "cannot ask slurmctld whose job %lld is: %s; submit again",
			  (long long)job, err);
		return -1;
	}
	if (rc == 0) {
		*uid = (int64_t)j.uid;
		sjob_clear(&j);
	}
	return rc;
}

/*
 * A user's request may name only that user's own job, on slurmctld's word
 * (the queue learns of most jobs only at their end): a request on another
 * user's job would count toward its archives, its after= dependents and its
 * stage-in. A job slurmctld no longer lists is judged by the queue's record.
 * 0 ok, -1 with *out set.
 */
static int _own_job(struct daemon *d, const struct api_caller *who, int64_t job,
		    struct api_reply *out)
{
	struct queue_job *qj = NULL;
	char err[256];
	int64_t owner = -1;
	int rc, mine;

	if (job <= 0 || job > (int64_t)UINT32_MAX) {
		api_error(out, 400, "job id %lld is not a Slurm job id", (long long)job);
		return -1;
	}
	rc = _slurm_owner(who, job, &owner, out);
	if (rc < 0)
		return -1;
	if (rc == 0) {
		mine = owner == (int64_t)who->uid;
	} else {
		mine = queue_job_get(d->q, job, &qj, err, sizeof(err)) == 0 &&
		       qj->uid == (int64_t)who->uid;
		queue_job_free(qj);
	}
	if (!mine)
		api_error(out, 403, "job %lld is not yours (slurmctld%s): a request may name only "
			  "your own jobs", (long long)job, rc == 0 ? "" : " no longer lists it, "
			  "and stagehandd has no record of it as yours");
	return mine ? 0 : -1;
}

/*
 * Does the queue say job is another user's (its record, or a request of
 * another user on it)? Once per job per stage when the work order has the
 * job: a batch naming one job 10,000 times reads its rows once. 1, 0.
 */
static int _queue_other(struct daemon *d, const struct api_caller *who, int64_t job)
{
	struct api_owner *o = _order_owner(who->order, job);
	struct queue_job *j = NULL;
	char err[512];
	int other = 0;

	if (o && o->queue_checked)
		return o->queue_other;
	if (queue_job_get(d->q, job, &j, err, sizeof(err)) == 0) {
		other = j->uid >= 0 && j->uid != (int64_t)who->uid;
		queue_job_free(j);
	}
	/* A job known only through its requests belongs to their owner. */
	if (!other && queue_job_other_uid(d->q, job, who->uid, err, sizeof(err)) == 1)
		other = 1;
	if (o) {
		o->queue_checked = 1;
		o->queue_other = other;
	}
	return other;
}

/*
 * One request to create (a POST /v1/requests body, or one of its
 * "requests"), decoded and checked for the caller into lr (its options in
 * *opt_text: free it). 0, or -1 with out answered.
 */
static int _submit_check(struct daemon *d, const struct api_caller *who, json_t *body,
			 struct lifecycle_request *lr, char **opt_text, struct api_reply *out)
{
	struct api_submit s;
	char err[1024];

	*opt_text = NULL;
	if (!json_is_object(body)) {
		api_error(out, 400, "a request must be a JSON object");
		return -1;
	}
	if (api_decode_submit(body, &s, err, sizeof(err)) < 0) {
		api_error(out, 400, "%s", err);
		return -1;
	}
	memset(lr, 0, sizeof(*lr));
	lr->uid = who->uid;	/* the kernel's or MUNGE's word, never the body's */
	lr->gid = who->gid;
	lr->action = s.action;
	lr->source = s.source;
	lr->dest = s.dest;
	lr->job_id = s.job_id;
	lr->options = *opt_text = s.options_text;
	if (lr->job_id) {
		if (_queue_other(d, who, lr->job_id)) {
			api_error(out, 403, "job %lld belongs to another user", (long long)lr->job_id);
			goto fail;
		}
		if (!who->admin && d->conf->slurm_watch && _own_job(d, who, lr->job_id, out) < 0)
			goto fail;
	}
	if (lifecycle_check_request(d, lr, err, sizeof(err)) < 0) {
		api_error(out, 400, "%s", err);
		goto fail;
	}
	if (api_labels_policy_allowed(who, lr->action, lr->options, out) < 0)
		goto fail;
	return 0;
fail:
	free(*opt_text);
	*opt_text = NULL;
	return -1;
}

static void _submit_one(struct daemon *d, const struct api_caller *who, json_t *body,
			struct api_reply *out)
{
	struct lifecycle_request lr;
	char err[1024], *opt_text, name[64];
	int64_t id;

	if (_submit_check(d, who, body, &lr, &opt_text, out) < 0)
		return;
	if (usercache_name(who->uid, name, sizeof(name)) == 0)
		lr.user = name;
	if (lifecycle_create_request(d, &lr, &id, err, sizeof(err)) < 0) {
		free(opt_text);
		api_error(out, 500, "could not store the request: %s", err);
		return;
	}
	free(opt_text);
	_reply_request(d, id, 201, out);
}

/* out's error message prefixed with where it arose ("requests[3]: ..."). */
static void _error_at(struct api_reply *out, size_t i)
{
	const char *m = json_string_value(json_object_get(out->body, "error"));
	char *msg = strdup(m ? m : "refused");

	api_error(out, out->status, "requests[%zu]: %s; none of the requests was created", i,
		  msg ? msg : "refused");
	free(msg);
}

/* Each of list checked into lr[i], opts[i] (the caller frees them); 0, or -1 with
   out naming the first refused one. */
static int _check_all(struct daemon *d, const struct api_caller *who, json_t *list,
		      struct lifecycle_request *lr, char **opts, struct api_reply *out)
{
	for (size_t i = 0; i < json_array_size(list); i++)
		if (_submit_check(d, who, json_array_get(list, i), &lr[i], &opts[i], out) < 0) {
			_error_at(out, i);
			return -1;
		}
	return 0;
}

/*
 * {"requests": [...]}: several requests created in one transaction, all or
 * none (a site's workflow tool submitting a campaign's stage-ins pays one
 * fsync, not one each). Each is checked as a single one would be; the first
 * refused one is named and nothing is created.
 */
static void _submit_many(struct daemon *d, const struct api_caller *who, json_t *list,
			 struct api_reply *out)
{
	size_t n = json_array_size(list), i;
	struct lifecycle_request *lr = calloc(n ? n : 1, sizeof(*lr));
	char **opts = calloc(n ? n : 1, sizeof(*opts)), err[1024];
	int64_t *ids = calloc(n ? n : 1, sizeof(*ids));
	json_t *arr = NULL;
	int token = -1, ok = 1;
	char name[64];

	if (!lr || !opts || !ids) {
		api_error(out, 503, "out of memory");
		goto done;
	}
	if (_check_all(d, who, list, lr, opts, out) < 0)
		goto done;
	/* One user name lookup for them all (lifecycle_create_request's, else). */
	if (usercache_name(who->uid, name, sizeof(name)) == 0)
		for (i = 0; i < n; i++)
			lr[i].user = name;
	token = queue_atomic_begin(d->q);
	if (token < 0) {
		api_error(out, 503, "could not store the requests: the state database is busy; "
			  "submit again");
		goto done;
	}
	for (i = 0; i < n && ok; i++)
		if (lifecycle_create_request(d, &lr[i], &ids[i], err, sizeof(err)) < 0) {
			api_error(out, 500, "could not store requests[%zu]: %s; none of the requests "
				  "was created", i, err);
			ok = 0;
		}
	arr = ok ? json_array() : NULL;
	if (ok) {
		/* Read back in one query (newest first), put in the order sent. */
		struct queue_filter f = { .uid = who->uid, .state = -1, .id_min = ids[0],
					  .id_max = ids[n - 1] };

		ok = arr && queue_request_list(d->q, &f, _collect, arr, err, sizeof(err)) == 0 &&
		     json_array_size(arr) == n;
		for (i = 0; ok && i < n / 2; i++) {
			json_t *a = json_incref(json_array_get(arr, i));

			json_array_set(arr, i, json_array_get(arr, n - 1 - i));
			json_array_set_new(arr, n - 1 - i, a);
		}
		if (!ok)
			api_error(out, 500, "could not read back the requests created: %s; none of "
				  "them was kept", *err ? err : "a request is missing");
	}
	if (!ok && ids[0])
		log_warn("api: requests %lld and after, for uid %u, rolled back: %s",
			 (long long)ids[0], (unsigned)who->uid, err);
	if (queue_atomic_end(d->q, token, ok, err, sizeof(err)) < 0 && ok) {
		ok = 0;
		api_error(out, 500, "could not store the requests: %s; none was created, submit "
			  "again", err);
	}
	if (ok) {
		out->status = 201;
		out->body = json_pack("{s:O}", "requests", arr);
	}
done:
	json_decref(arr);
	for (i = 0; opts && i < n; i++)
		free(opts[i]);
	free(opts);
	free(lr);
	free(ids);
}

#define SUBMIT_MANY_MAX 10000

/* One limit of _user_limits: its key, the user's count and the limit. 0, or -1 with out. */
static int _over(struct api_reply *out, const char *key, const char *what, int64_t have,
		 int64_t adding, int64_t limit, uid_t uid)
{
	/* Requests: the new ones count. Files and bytes: not known before the walk,
	   so a user at the limit is refused. */
	if (limit <= 0 || (adding > 0 ? have + adding <= limit : have < limit))
		return 0;
	if (adding > 0)
		api_error(out, 429, "%s: uid %u has %lld live %s and this would add %lld, over the "
			  "limit of %lld: nothing was created. Wait for some to finish, or cancel "
			  "some (stagehand status; stagehand cancel ID), then submit again; an "
			  "admin can raise %s", key, (unsigned)uid, (long long)have, what,
			  (long long)adding, (long long)limit, key);
	else
		api_error(out, 429, "%s: uid %u has %lld %s not yet copied in its live requests, "
			  "at or over the limit of %lld: nothing was created. Wait for some to "
			  "finish, or cancel some (stagehand status; stagehand cancel ID), then "
			  "submit again; an admin can raise %s", key, (unsigned)uid,
			  (long long)have, what, (long long)limit, key);
	return -1;
}

/*
 * The per-user limits (MaxUserRequests, MaxUserItems, MaxUserQueuedBytes)
 * for n new requests: one indexed read of what the user has live
 * (queue_user_usage). Admins and root are exempt: their requests include
 * the after-job ones the daemon makes for every user's jobs. 0, or -1 with
 * out answered (429, or 500 when the count cannot be read).
 */
static int _user_limits(struct daemon *d, const struct api_caller *who, size_t n,
			struct api_reply *out)
{
	const struct conf *c = d->conf;
	struct queue_usage u;
	char err[512];

	if (who->admin || (c->max_user_requests <= 0 && c->max_user_items <= 0 &&
			   c->max_user_queued_bytes == 0))
		return 0;
	if (queue_user_usage(d->q, who->uid, &u, err, sizeof(err)) < 0) {
		api_error(out, 500, "cannot count your live requests (per-user limits): %s; submit "
			  "again", err);
		return -1;
	}
	if (_over(out, "MaxUserRequests", "requests", u.requests, (int64_t)n,
		  c->max_user_requests, who->uid) < 0 ||
	    _over(out, "MaxUserItems", "files", u.items, 0, c->max_user_items, who->uid) < 0 ||
	    _over(out, "MaxUserQueuedBytes", "bytes", u.bytes, 0,
		  (int64_t)c->max_user_queued_bytes, who->uid) < 0)
		return -1;
	return 0;
}

/* The body's shape: 0 with *list (NULL: a single request), or -1 with out answered. */
static int _submit_shape(struct daemon *d, json_t *body, json_t **list, struct api_reply *out)
{
	*list = json_object_get(body, "requests");
	if (atomic_load(&d->draining)) {
		api_error(out, 503, "stagehandd is shutting down: submit again when it is back");
		return -1;
	}
	if (*list && (!json_is_array(*list) || json_array_size(*list) == 0 ||
		      json_array_size(*list) > SUBMIT_MANY_MAX || json_object_size(body) != 1)) {
		api_error(out, 400, "'requests' must be the body's only key, an array of 1 to %d "
			  "requests, each as a single POST /v1/requests would send it",
			  SUBMIT_MANY_MAX);
		return -1;
	}
	return 0;
}

static void _submit(struct daemon *d, const struct api_caller *who, json_t *body,
		    struct api_reply *out)
{
	json_t *list;

	if (_submit_shape(d, body, &list, out) < 0 ||
	    _user_limits(d, who, list ? json_array_size(list) : 1, out) < 0)
		return;
	if (!list)
		_submit_one(d, who, body, out);
	else
		_submit_many(d, who, list, out);
}

static int _owner_cmp(const void *a, const void *b)
{
	uint32_t x = ((const struct api_owner *)a)->job, y = ((const struct api_owner *)b)->job;

	return x < y ? -1 : x > y;
}

/* The Slurm job id a request names, or 0. */
static uint32_t _named_job(json_t *r)
{
	json_int_t v = json_integer_value(json_object_get(r, "job_id"));

	return v > 0 && v <= (json_int_t)UINT32_MAX ? (uint32_t)v : 0;
}

/*
 * The owners of every job the requests name (one for a single request),
 * once each, into the work order: slurmctld's answers through the cache c.
 * Only for users (an admin may name any job) and with SlurmWatch=yes.
 */
static int _ask_owners(struct daemon *d, const struct api_caller *who, json_t *body,
		       json_t *list, struct sowner *c, struct api_reply *out)
{
	struct api_order *o = who->order;
	size_t n = list ? json_array_size(list) : 1, k = 0, i;
	uint32_t *ids;
	int64_t *uids;

	if (who->admin || !d->conf->slurm_watch)
		return 0;
	ids = malloc(n * sizeof(*ids));
	uids = malloc(n * sizeof(*uids));
	o->owners = calloc(n, sizeof(*o->owners));
	if (!ids || !uids || !o->owners) {
		free(ids);
		free(uids);
		api_error(out, 503, "out of memory");
		return -1;
	}
	for (i = 0; i < n; i++) {
		uint32_t j = _named_job(list ? json_array_get(list, i) : body);

		if (j)
			ids[k++] = j;
	}
	if (k && sowner_lookup(c, ids, k, uids, (int64_t)mono_ms(), o->why, sizeof(o->why)) < 0)
		log_warn("api: uid %u's request(s): %s", (unsigned)who->uid, o->why);
	for (i = 0; i < k; i++)
		o->owners[i] = (struct api_owner){ .job = ids[i], .uid = uids[i] };
	qsort(o->owners, k, sizeof(*o->owners), _owner_cmp);
	/* One entry per job (ids may repeat). */
	for (i = 0, n = 0; i < k; i++)
		if (n == 0 || o->owners[i].job != o->owners[n - 1].job)
			o->owners[n++] = o->owners[i];
	o->nowners = n;
	free(ids);
	free(uids);
	return 0;
}

/* The prep stage's POST /v1/requests: everything but storing. 1 refused, 0 go on. */
static int _prepare_submit(struct daemon *d, const struct api_caller *who, json_t *body,
			   struct sowner *c, struct api_reply *out)
{
	struct lifecycle_request *lr;
	char **opts;
	json_t *list;
	size_t n;
	int rc;

	if (!json_is_object(body))
		return 0;	/* the writer says what is wrong with it */
	if (_submit_shape(d, body, &list, out) < 0)
		return 1;
	n = list ? json_array_size(list) : 1;
	if (_user_limits(d, who, n, out) < 0 || _ask_owners(d, who, body, list, c, out) < 0)
		return 1;
	lr = calloc(n, sizeof(*lr));
	opts = calloc(n, sizeof(*opts));
	if (!lr || !opts) {
		free(lr);
		free(opts);
		api_error(out, 503, "out of memory");
		return 1;
	}
	rc = list ? _check_all(d, who, list, lr, opts, out) :
		    _submit_check(d, who, body, lr, opts, out);
	for (size_t i = 0; i < n; i++)
		free(opts[i]);
	free(opts);
	free(lr);
	/* The writer judges the queue's side again, on what is committed then. */
	for (size_t i = 0; i < who->order->nowners; i++)
		who->order->owners[i].queue_checked = 0;
	return rc < 0;
}

static const char *_query_arg(void *cls, const char *key)
{
	return MHD_lookup_connection_value(cls, MHD_GET_ARGUMENT_KIND, key);
}

static int _is_state(const char *name)
{
	enum queue_state s;

	return queue_state_from_name(name, &s) == 0;
}

static void _list(struct daemon *d, const struct api_caller *who, struct MHD_Connection *c,
		  struct api_reply *out)
{
	struct queue_filter f = { .uid = who->uid, .job_id = 0, .state = -1, .limit = 1000 };
	struct api_list_query lq;
	enum queue_state s;
	json_t *arr;
	char err[512];

	if (api_decode_list(_query_arg, c, _is_state, &lq, err, sizeof(err)) < 0) {
		api_error(out, 400, "%s", err);
		return;
	}
	if (lq.user) {
		struct passwd pw, *pwp = NULL;
		char buf[4096];
		int64_t uid;

		if (api_decode_num(lq.user, 0, &uid) < 0 || uid > 4294967294LL) {
			if (getpwnam_r(lq.user, &pw, buf, sizeof(buf), &pwp) != 0 || !pwp) {
				api_error(out, 404, "user=%.64s: no such user", lq.user);
				return;
			}
			uid = pwp->pw_uid;
		}
		if (!who->admin && uid != (int64_t)who->uid) {
			api_error(out, 403, "you may see only your own requests (uid %u); ask an "
				  "admin (AdminUsers/AdminGroups) for other users'", (unsigned)who->uid);
			return;
		}
		f.uid = uid;
	} else if (lq.all) {
		if (!who->admin) {
			api_error(out, 403, "all=1 is for admins; without it you see your own requests");
			return;
		}
		f.uid = -1;
	}
	if (lq.attention_days > 0)
		f.attention_since = (int64_t)time(NULL) - (int64_t)lq.attention_days * 86400;
	f.job_id = lq.job_id;
	if (lq.state && queue_state_from_name(lq.state, &s) == 0)
		f.state = (int)s;
	f.limit = lq.limit;
	arr = json_array();
	if (queue_request_list(d->q, &f, _collect, arr, err, sizeof(err)) < 0) {
		json_decref(arr);
		api_error(out, 500, "%s", err);
		return;
	}
	out->status = 200;
	out->body = json_pack("{s:o}", "requests", arr);
}

static void _get(struct daemon *d, const struct api_caller *who, struct MHD_Connection *c,
		 int64_t id, struct api_reply *out)
{
	const char *items = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "items");
	struct queue_request *r = _own_request(d, who, id, out);
	char err[512];

	if (!r)
		return;
	out->status = 200;
	out->body = _request_json(r);
	if (items && strcmp(items, "0") != 0 && out->body) {
		struct _items s = { json_array(), 0, 0 };

		if (queue_item_list(d->q, id, -1, 0, _collect_item, &s, err, sizeof(err)) < 0)
			log_err("request %lld: listing items: %s", (long long)id, err);
		json_object_set_new(out->body, "items", s.arr);
		json_object_set_new(out->body, "items_truncated", json_boolean(s.truncated));
	}
	queue_request_free(r);
}

/* POST /v1/requests/{id}/cancel (cancel) or /retry (!cancel), for its owner or an admin. */
static void _cancel_or_retry(struct daemon *d, const struct api_caller *who, int64_t id,
			     int cancel, struct api_reply *out)
{
	struct queue_request *r = _own_request(d, who, id, out);
	char err[512];
	int rc;

	if (!r)
		return;
	if (cancel)
		rc = queue_request_set_state(d->q, id, -1, QS_CANCELLED, "cancelled by uid", err,
					     sizeof(err));
	else
		rc = queue_request_retry(d->q, id, err, sizeof(err));
	if (rc == 1) {
		api_error(out, 409, "request %lld is %s: only %s requests can be %s", (long long)id,
			  queue_state_name(r->state), cancel ? "unfinished" : "failed or cancelled",
			  cancel ? "cancelled" : "retried");
	} else if (rc < 0) {
		api_error(out, 500, "%s", err);
	} else {
		log_info("request %lld: %s by uid %u", (long long)id,
			 cancel ? "cancelled" : "retry requested", (unsigned)who->uid);
		daemon_wake(d);	/* the main loop stops the worker, or dispatches the retry */
		_reply_request(d, id, 200, out);
	}
	queue_request_free(r);
}

/* 0 if the caller may see job; fills out otherwise. *j new or NULL. */
static int _job_access(struct daemon *d, const struct api_caller *who, int64_t job,
		       struct queue_job **j, int *nreq, struct api_reply *out)
{
	struct queue_filter f = { .uid = -1, .job_id = job, .state = -1, .limit = 1 };
	json_t *arr = json_array();
	char err[512];
	int rc = queue_job_get(d->q, job, j, err, sizeof(err));

	if (rc < 0) {
		json_decref(arr);
		api_error(out, 500, "%s", err);
		return -1;
	}
	queue_request_list(d->q, &f, _collect, arr, err, sizeof(err));
	*nreq = (int)json_array_size(arr);
	if (rc == 1 && *nreq == 0) {
		json_decref(arr);
		api_error(out, 404, "stagehandd knows nothing about job %lld", (long long)job);
		return -1;
	}
	if (!who->admin) {
		int64_t owner = *j && (*j)->uid >= 0 ? (*j)->uid :
				json_integer_value(json_object_get(json_array_get(arr, 0), "uid"));

		if (owner != (int64_t)who->uid) {
			json_decref(arr);
			queue_job_free(*j);
			*j = NULL;
			api_error(out, 403, "job %lld belongs to another user", (long long)job);
			return -1;
		}
	}
	json_decref(arr);
	return 0;
}

/* The job's notes of after-job actions not done (new reference; [] when none). */
static json_t *_skipped(const struct queue_job *j)
{
	json_t *n = j && j->notes ? json_loads(j->notes, 0, NULL) : NULL;

	if (json_is_array(n))
		return n;
	json_decref(n);
	return json_array();
}

/*
 * Tell the user in the job's status text (admin_comment, scontrol show job)
 * that after-job actions were skipped. Only possible now: Slurm refuses
 * updates once the job has finished, and the end event comes from
 * slurmstepd just before that. The user's own comment is not touched.
 */
static void _comment_skipped(const struct api_caller *who, int64_t job, const struct queue_job *j)
{
	json_t *n = _skipped(j), *first = json_array_get(n, 0);
	char text[512];
	int k;

	if (json_array_size(n) == 0) {
		json_decref(n);
		return;
	}
	k = snprintf(text, sizeof(text), "stagehand: %s of %s (line %d) skipped: %s%s",
		     json_string_value(json_object_get(first, "action")),
		     json_string_value(json_object_get(first, "path")),
		     (int)json_integer_value(json_object_get(first, "line")),
		     json_string_value(json_object_get(first, "reason")),
		     json_array_size(n) > 1 ? " (and more: stagehand status)" : "");
	(void)k;	/* a cut comment is still useful */
	json_decref(n);
	api_set_status(who, job, text);
}

/*
 * The same status before the job-end hook has processed the end (with
 * SlurmWatch=yes the hook first asks slurmctld whether the run really ended,
 * and by then Slurm refuses comment updates): the skips the plan will get,
 * judged from the event as stored. Only when=success archives and a refused
 * job are certain from the event alone; the hook records the notes.
 */
static void _comment_skipped_early(const struct api_caller *who, int64_t job,
				   const struct queue_job *j)
{
	json_t *plan = j->plan ? json_loads(j->plan, 0, NULL) : NULL, *a;
	bool success = j->end_state && strcmp(j->end_state, "COMPLETED") == 0 &&
		       j->end_exit_code == 0;
	char text[512];
	size_t i, nskip = 0;
	int k = -1;

	json_array_foreach(json_object_get(plan, "actions"), i, a) {
		const char *act = json_string_value(json_object_get(a, "action"));
		const char *path = json_string_value(json_object_get(a, "path"));
		const char *when = json_string_value(json_object_get(a, "when"));
		int line = (int)json_integer_value(json_object_get(a, "line"));

		if (!act || !path || (strcmp(act, "archive") && strcmp(act, "stage_out")))
			continue;
		if (!j->refused && (strcmp(act, "archive") || !when || strcmp(when, "success") ||
				    success))
			continue;
		if (nskip++ > 0)
			continue;
		if (j->refused)
			k = snprintf(text, sizeof(text), "stagehand: %s of %s (line %d) skipped: the "
				     "job was refused at start: %.300s", act, path, line, j->refused);
		else if (j->end_state && strcmp(j->end_state, "CANCELLED") == 0)
			/* A node cannot tell scancel from a time limit or preemption. */
			k = snprintf(text, sizeof(text), "stagehand: %s of %s (line %d) skipped: "
				     "when=success and the job was stopped (scancel, time limit or "
				     "preemption: 'stagehand status %lld' says which)", act, path,
				     line, (long long)job);
		else
			k = snprintf(text, sizeof(text), "stagehand: %s of %s (line %d) skipped: "
				     "when=success and the job ended %s (exit %d)", act, path, line,
				     j->end_state ? j->end_state : "?", j->end_exit_code);
	}
	json_decref(plan);
	if (k < 0)
		return;
	/* A cut comment is still useful; "and more" only when it fits. */
	if (nskip > 1 && (size_t)k + 32 < sizeof(text))
		snprintf(text + k, sizeof(text) - (size_t)k, " (and more: stagehand status)");
	api_set_status(who, job, text);
}

/* "sluid": the SLUID of the job's run stagehandd holds (Slurm 25.11+), when known. */
static void _job_sluid(struct daemon *d, int64_t job, json_t *body)
{
	char s[QUEUE_SLUID_MAX + 1], err[256];

	if (queue_job_sluid_get(d->q, job, s, sizeof(s), err, sizeof(err)) < 0)
		log_warn("job %lld: SLUID not read: %s", (long long)job, err);
	else if (s[0])
		json_object_set_new(body, "sluid", json_string(s));
}

static void _job(struct daemon *d, const struct api_caller *who, int64_t job,
		 struct api_reply *out)
{
	struct queue_job *j = NULL;
	struct queue_filter f = { .uid = -1, .job_id = job, .state = -1, .limit = 0 };
	const char *si_state;
	char *si_error = NULL, err[512];
	json_t *arr, *end = json_null();
	int nreq;

	if (_job_access(d, who, job, &j, &nreq, out) < 0)
		return;
	if (queue_job_stage_in(d->q, job, &si_state, &si_error, err, sizeof(err)) < 0) {
		queue_job_free(j);
		api_error(out, 500, "%s", err);
		return;
	}
	arr = json_array();
	queue_request_list(d->q, &f, _collect, arr, err, sizeof(err));
	if (j && j->end_state)
		end = json_pack("{s:s,s:i,s:I}", "state", j->end_state, "exit_code",
				j->end_exit_code, "received", (json_int_t)j->end_received);
	out->status = 200;
	out->body = json_pack("{s:I,s:o,s:o,s:o,s:{s:s,s:o},s:o,s:o,s:o,s:o}",
		"job_id", (json_int_t)job,
		"uid", j && j->uid >= 0 ? json_integer(j->uid) : json_null(),
		"user", _jstr(j ? j->user : NULL),
		"work_dir", _jstr(j ? j->work_dir : NULL),
		"stage_in", "state", si_state, "error", _jurl(si_error),
		"end", end, "requests", arr,
		"refused", _jurl(j ? j->refused : NULL),
		"skipped", _skipped(j));
	/* Requeued runs (not archived) and the array of a task: what slurmctld said. */
	if (out->body && j) {
		json_object_set_new(out->body, "runs_requeued", json_integer(j->runs));
		json_object_set_new(out->body, "last_requeued_run", _jstr(j->last_run));
		_job_sluid(d, job, out->body);
		if (j->array_job_id > 0 && j->array_task_id >= 0)
			json_object_set_new(out->body, "array",
					    json_pack("{s:I,s:I}", "job_id",
						      (json_int_t)j->array_job_id, "task_id",
						      (json_int_t)j->array_task_id));
	}
	/* '#DATA after=': what the job waits for, as the Slurm watch last judged it. */
	if (out->body) {
		char *aj = NULL, *as = NULL, *ar = NULL;

		if (queue_after_get(d->q, job, &aj, &as, &ar, err, sizeof(err)) == 0)
			json_object_set_new(out->body, "after",
					    json_pack("{s:s,s:s,s:s}", "jobs", aj, "state", as,
						      "reason", ar ? ar : ""));
		free(aj);
		free(as);
		free(ar);
	}
	free(si_error);
	queue_job_free(j);
}

/* "TCP from ADDR" or "UNIX socket", for the log of job events. */
static const char *_via(const struct api_caller *who, char *buf, size_t len)
{
	char a[INET6_ADDRSTRLEN] = "?";

	if (!who->tcp)
		return "UNIX socket";
	if (who->peer && who->peer->sa_family == AF_INET)
		inet_ntop(AF_INET, &((const struct sockaddr_in *)who->peer)->sin_addr, a, sizeof(a));
	else if (who->peer && who->peer->sa_family == AF_INET6)
		inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)who->peer)->sin6_addr, a, sizeof(a));
	snprintf(buf, len, "TCP from %s", a);
	return buf;
}

/* How long a job event over TCP may wait for slurmctld (the prep stage's
   events lane waits with it, never the writer; a cache hit answers at once). */
#define EVENT_LOOKUP_MS 500

/*
 * Job-start and job-end events (docs/security.md "Job events"): only from
 * root. Over the UNIX socket root is on this host and trusted; over TCP
 * the connection must come from the address of a node where slurmctld says
 * the job runs or ran (slurm_nodes.h). Returns 1 allowed, 0 refused (out
 * filled).
 */
static int _event_allowed(struct daemon *d, const struct api_caller *who, int64_t job,
			  const char *what, struct api_reply *out)
{
	char why[512], peer[INET6_ADDRSTRLEN + 16];
	enum snodes_verdict v;

	if (who->uid != 0) {
		api_error(out, 403, "%s events come from slurmstepd or the epilog, which run "
			  "as root: users cannot send them (this is uid %u)", what,
			  (unsigned)who->uid);
		return 0;
	}
	if (!who->tcp)
		return 1;
	/* The writer's: the prep stage asked slurmctld and let it through. */
	if (who->order && who->order->ready)
		return 1;
	if (!d->conf->slurm_watch) {
		api_error(out, 403, "%s events over TCP are checked against slurmctld, and this "
			  "daemon does not talk to it (SlurmWatch=no): send them over its UNIX "
			  "socket", what);
		return 0;
	}
	if (job <= 0 || job > (int64_t)UINT32_MAX) {
		api_error(out, 404, "%lld is not a Slurm job id", (long long)job);
		return 0;
	}
	_via(who, peer, sizeof(peer));
	v = snodes_check((uint32_t)job, who->peer, who->peer ? sizeof(struct sockaddr_storage) : 0,
			 EVENT_LOOKUP_MS, why, sizeof(why));
	if (v == SNODES_YES)
		return 1;
	if (v == SNODES_UNKNOWN) {
		log_warn("job %lld: %s event (%s) not checked: %s", (long long)job, what, peer, why);
		api_error(out, 503, "job %lld: %s event (%s) cannot be checked now: %s; try "
			  "again later", (long long)job, what, peer, why);
		return 0;
	}
	log_warn("job %lld: %s event from root (%s) refused: %s", (long long)job, what, peer, why);
	api_error(out, 403, "job %lld: %s event (%s) refused: %s. Over TCP, job events are "
		  "taken only from a node where slurmctld says the job runs or ran "
		  "(docs/security.md)", (long long)job, what, peer, why);
	return 0;
}

/*
 * An end event that names its run's SLUID (Slurm 25.11+) is matched to the
 * job's runs stagehandd has seen: an earlier run's SLUID is a late report
 * of a run whose end was already taken (a requeue gave the job a new one),
 * refused with 409, which the plugin and the CLI take as "already known":
 * never redelivered, never mixed into the job's record. A SLUID not seen
 * before becomes the current run: a requeued run (slurmctld may not have
 * told us of the requeue yet), or another job that had the same id. 0 to
 * go on, else the reply is set.
 */
static int _end_other_run(struct daemon *d, int64_t job, const char *sluid,
			  struct api_reply *out)
{
	char known[QUEUE_SLUID_MAX + 1], err[512];
	int rc = queue_job_sluid_record(d->q, job, sluid, known, sizeof(known), err, sizeof(err));

	if (rc < 0) {
		api_error(out, 500, "could not store the job-end event: %s", err);
		return -1;
	}
	if (rc == QS_SLUID_NEW)
		log_info("job %lld: end event of SLUID %s, a run after %s (requeued, or another "
			 "job that had the same id)", (long long)job, sluid, known);
	if (rc != QS_SLUID_EARLIER)
		return 0;
	log_warn("job %lld: end event of SLUID %s ignored: an earlier run of the job, whose "
		 "end was taken before; its current run is %s", (long long)job, sluid, known);
	api_error(out, 409, "job %lld: this end event is of SLUID %s, an earlier run whose "
		  "end stagehandd already took; the job's current run is SLUID %s: a late "
		  "report, ignored ('stagehand status %lld' shows the job)", (long long)job,
		  sluid, known, (long long)job);
	return 1;
}

static void _job_end(struct daemon *d, const struct api_caller *who, int64_t job, json_t *body,
		     struct api_reply *out)
{
	struct api_job_end e;
	json_t *ids;
	const char *user;
	char *plan_text, err[512], ubuf[4096], via[INET6_ADDRSTRLEN + 16];
	int64_t uid, gid, made_ids[64];
	int dup = 0, made = 0;
	struct passwd pw, *pwp = NULL;

	if (!_event_allowed(d, who, job, "job-end", out))
		return;
	if (api_decode_job_end(body, &e, err, sizeof(err)) < 0) {
		api_error(out, 400, "%s", err);
		return;
	}
	if (e.sluid && _end_other_run(d, job, e.sluid, out) != 0) {
		free(e.plan_text);
		return;
	}
	uid = e.uid;
	gid = e.gid;
	user = e.user;
	plan_text = e.plan_text;
	yield_job_end(d, job);	/* its file systems are free now */
	if (uid >= 0 && (gid < 0 || !user) &&
	    getpwuid_r((uid_t)uid, &pw, ubuf, sizeof(ubuf), &pwp) == 0 && pwp) {
		if (gid < 0)
			gid = pwp->pw_gid;
		if (!user)
			user = pwp->pw_name;
	}
	struct queue_job_end_rec er = { { job, uid, gid, user, e.work_dir, plan_text }, e.state,
					e.exit_code, e.refused, (int64_t)time(NULL) };

	if (queue_job_end(d->q, &er, &dup, err, sizeof(err)) < 0) {
		free(plan_text);
		api_error(out, 500, "could not store the job-end event: %s", err);
		return;
	}
	free(plan_text);
	ids = json_array();
	if (!dup) {
		atomic_fetch_add(&d->metrics->job_end_events, 1);
		log_info("job %lld: end event (%s) from uid %u (%s)", (long long)job,
			 e.state, (unsigned)who->uid, _via(who, via, sizeof(via)));
		/* Only database work: fast. If it fails, the main loop's hook tries again. */
		if (lifecycle_process_job_end(d, job, made_ids, 64, &made, err, sizeof(err)) < 0)
			log_err("job %lld: after-job requests deferred: %s", (long long)job, err);
		else {
			struct queue_job *qj = NULL;

			/* libslurm is initialised only with SlurmWatch=yes. The job has
			   not finished yet (the event comes from its slurmstepd), so
			   this is the moment its comment can still change. */
			if (d->conf->slurm_watch &&
			    queue_job_get(d->q, job, &qj, err, sizeof(err)) == 0) {
				if (qj->end_processed)
					_comment_skipped(who, job, qj);
				else
					_comment_skipped_early(who, job, qj);
			}
			queue_job_free(qj);
		}
		for (int i = 0; i < made; i++)
			json_array_append_new(ids, json_integer(made_ids[i]));
	}
	if (dup || made == 0) {
		/* A repeat, or the job-end hook processed this event first:
		 * answer with the job's after-job requests as they stand. */
		struct queue_filter f = { .uid = -1, .job_id = job, .state = -1, .limit = 0 };
		json_t *arr = json_array();
		size_t i;
		json_t *r;

		queue_request_list(d->q, &f, _collect, arr, err, sizeof(err));
		json_array_foreach(arr, i, r) {
			const char *a = json_string_value(json_object_get(r, "action"));

			if (a && strcmp(a, "stage_in") != 0)
				json_array_append(ids, json_object_get(r, "id"));
		}
		json_decref(arr);
	}
	out->status = 202;
	out->body = json_pack("{s:I,s:b,s:o}", "job_id", (json_int_t)job, "duplicate", dup,
			      "requests", ids);
}

/*
 * POST /v1/jobs/{job}/start (a job's tasks are about to run) and DELETE
 * (the job ended without an end event: no plan). See yield.h. Nothing here
 * touches the queue: the prep stage's events lane answers it whole, never
 * the writer. First half: checks, marks the job's paths busy and fills
 * st; 1 answered (a refusal, DELETE), 0 to settle (_job_start_finish).
 */
static int _job_start_mark(struct daemon *d, const struct api_caller *who, int64_t job,
			   json_t *body, int is_delete, struct api_start *st, struct api_reply *out)
{
	struct api_job_start s;
	const char *paths[API_START_DIRS_MAX + 1];
	size_t n = 0;
	char err[512];

	if (!_event_allowed(d, who, job, "job-start", out))
		return 1;
	if (is_delete) {
		int was = yield_job_end(d, job);

		out->status = 200;
		out->body = json_pack("{s:I,s:b}", "job_id", (json_int_t)job, "was_started", was);
		return 1;
	}
	if (api_decode_job_start(body, &s, err, sizeof(err)) < 0) {
		api_error(out, 400, "job %lld: %s", (long long)job, err);
		return 1;
	}
	if (s.work_dir)
		paths[n++] = s.work_dir;
	for (size_t i = 0; i < s.ndirs; i++)
		paths[n++] = s.dirs[i];
	if (s.node)
		slurm_watch_job_started(job, s.node);
	if (yield_job_start_mark(d, job, paths, n, &st->seq, err, sizeof(err)) < 0) {
		api_error(out, 503, "%s", err);
		return 1;
	}
	st->job = job;
	st->uid = s.uid;
	st->npaths = n;
	snprintf(st->node, sizeof(st->node), "%s", s.node ? s.node : "?");
	return 0;
}

void api_start_finish(struct daemon *d, const struct api_caller *who, struct api_start *st,
		      struct api_reply *out)
{
	char via[INET6_ADDRSTRLEN + 16];
	int settled = 0, mover = yield_job_start_settle(st->job, st->seq, &settled);

	log_info("job %lld: started on %s (uid %lld, %zu dirs; %s; %s); %s", (long long)st->job,
		 st->node, (long long)st->uid, st->npaths, _via(who, via, sizeof(via)),
		 settled ? "settled before the answer" : "answered before it settled",
		 mover ? "a mover job of this daemon: nothing yields to it" :
		 !d->conf->yield_to_jobs ? "YieldToJobs=no: nothing yields to it" :
		 d->conf->yield_mode == CONF_YIELD_ADAPTIVE ?
		 "after-job transfers on its file systems stay paced around its I/O" :
		 "after-job transfers on its file systems yield");
	out->status = 202;
	out->body = json_pack("{s:I,s:i,s:b}", "job_id", (json_int_t)st->job, "paths",
			      (int)st->npaths, "settled", settled);
	st->job = 0;
}

/* Both halves at once (a listener's, or the writer's should one reach it). */
static void _job_start(struct daemon *d, const struct api_caller *who, int64_t job, json_t *body,
		       int is_delete, struct api_reply *out)
{
	struct api_start st = { 0 };

	if (_job_start_mark(d, who, job, body, is_delete, &st, out) == 0)
		api_start_finish(d, who, &st, out);
}

static void _job_retry(struct daemon *d, const struct api_caller *who, int64_t job,
		       struct api_reply *out)
{
	struct queue_job *j = NULL;
	int64_t ids[256];
	char err[512];
	int nreq, n;
	json_t *arr;

	if (_job_access(d, who, job, &j, &nreq, out) < 0)
		return;
	queue_job_free(j);
	n = queue_job_failed_requests(d->q, job, ids, 256, err, sizeof(err));
	arr = json_array();
	for (int i = 0; i < n; i++)
		if (queue_request_retry(d->q, ids[i], err, sizeof(err)) == 0)
			json_array_append_new(arr, json_integer(ids[i]));
	if (n > 0)
		daemon_wake(d);
	out->status = 200;
	out->body = json_pack("{s:I,s:o}", "job_id", (json_int_t)job, "requeued", arr);
}

int api_route_is_submit(const char *method, const char *url)
{
	struct api_path p;

	return strcmp(method, "POST") == 0 && api_decode_path(url, &p) == 0 && p.nseg == 2 &&
	       strcmp(p.seg[0], "v1") == 0 && strcmp(p.seg[1], "requests") == 0;
}

int api_route_is_event(const char *method, const char *url)
{
	struct api_path p;

	if ((strcmp(method, "POST") != 0 && strcmp(method, "DELETE") != 0) ||
	    api_decode_path(url, &p) < 0 || p.nseg != 4 || strcmp(p.seg[0], "v1") != 0)
		return 0;
	if (strcmp(p.seg[1], "bb") == 0)
		return strcmp(method, "POST") == 0;
	return strcmp(p.seg[1], "jobs") == 0 &&
	       (strcmp(p.seg[3], "start") == 0 ||
		(strcmp(p.seg[3], "end") == 0 && strcmp(method, "POST") == 0));
}

int api_prepare(struct daemon *d, const struct api_caller *who, const char *method,
		const char *url, json_t *jb, struct sowner *c, struct api_reply *out)
{
	struct api_path p;
	int64_t job;
	int refused = 0;

	if ((strcmp(method, "POST") == 0 && !jb) || api_decode_path(url, &p) < 0)
		return 0;	/* the writer answers these as it always did */
	if (api_route_is_submit(method, url)) {
		refused = _prepare_submit(d, who, jb, c, out);
	} else if (api_route_is_event(method, url) && _parse_id(p.seg[2], &job) == 0) {
		if (strcmp(p.seg[1], "bb") == 0) {
			api_bb_prepare(d, who, job, p.seg[3]);
			who->order->ready = 1;
			return 0;
		}
		if (strcmp(p.seg[3], "start") == 0) {
			/* Answered here, whole: no queue work, and the wait for the main
			   loop to pause transfers is shared by the starts of a burst. */
			refused = _job_start_mark(d, who, job, jb, strcmp(method, "DELETE") == 0,
						  &who->order->start, out);
			who->order->ready = 1;
			return refused ? 1 : 2;
		}
		refused = !_event_allowed(d, who, job, "job-end", out);
	}
	who->order->ready = 1;
	return refused;
}

void api_set_status(const struct api_caller *who, int64_t job, const char *text)
{
	char err[256];

	if (who->order) {
		who->order->status_job = job;
		snprintf(who->order->status_text, sizeof(who->order->status_text), "%s", text);
		return;
	}
	if (sjob_set_status((uint32_t)job, text, err, sizeof(err)) < 0)
		log_warn("job %lld: %s", (long long)job, err);
}

void api_order_finish(struct api_order *o)
{
	char err[256];

	if (o->status_job <= 0)
		return;
	if (sjob_set_status((uint32_t)o->status_job, o->status_text, err, sizeof(err)) < 0)
		log_warn("job %lld: %s", (long long)o->status_job, err);
	o->status_job = 0;
}

void api_order_clear(struct api_order *o)
{
	if (o->job) {
		sjob_clear(o->job);
		free(o->job);
	}
	free(o->owners);
	memset(o, 0, sizeof(*o));
}

void api_route(struct daemon *d, const struct api_caller *who, struct MHD_Connection *c,
	       const char *method, const char *url, const char *body, size_t len,
	       struct api_reply *out)
{
	json_t *jb = NULL;
	char err[512] = "";

	if (strcmp(method, "POST") == 0 && api_decode_body(body, len, &jb, err, sizeof(err)) < 0)
		jb = NULL;
	api_route_json(d, who, c, method, url, jb, err, out);
	json_decref(jb);
}

/* One API call as the route table hands it to a handler. */
struct api_call {
	struct daemon *d;
	const struct api_caller *who;
	struct MHD_Connection *c;
	const char *method;
	char **seg;                  /* the path's segments, "v1" first */
	int nseg;
	int64_t id;                  /* the route's id segment ("#"), when it has one */
	json_t *body;                /* POST: the decoded body (borrowed) */
	struct api_reply *out;
};

static void _r_health(const struct api_call *a) { _health(a->d, a->who, a->out); }
static void _r_submit(const struct api_call *a) { _submit(a->d, a->who, a->body, a->out); }
static void _r_list(const struct api_call *a) { _list(a->d, a->who, a->c, a->out); }
static void _r_get(const struct api_call *a) { _get(a->d, a->who, a->c, a->id, a->out); }
static void _r_cancel(const struct api_call *a) { _cancel_or_retry(a->d, a->who, a->id, 1, a->out); }
static void _r_retry(const struct api_call *a) { _cancel_or_retry(a->d, a->who, a->id, 0, a->out); }
static void _r_job(const struct api_call *a) { _job(a->d, a->who, a->id, a->out); }
static void _r_job_end(const struct api_call *a) { _job_end(a->d, a->who, a->id, a->body, a->out); }
static void _r_job_retry(const struct api_call *a) { _job_retry(a->d, a->who, a->id, a->out); }
static void _r_job_start(const struct api_call *a) { _job_start(a->d, a->who, a->id, a->body, 0, a->out); }
static void _r_job_unstart(const struct api_call *a) { _job_start(a->d, a->who, a->id, a->body, 1, a->out); }
static void _r_drain(const struct api_call *a) { api_drain(a->d, a->who, a->method, a->body, a->out); }
static void _r_audit(const struct api_call *a) { api_audit(a->d, a->who, a->c, a->out); }
static void _r_bb(const struct api_call *a) { api_bb(a->d, a->who, a->id, a->seg[3], a->body, a->out); }
static void _r_labels(const struct api_call *a) { api_labels_verify(a->d, a->who, a->body, a->out); }
static void _r_mover(const struct api_call *a)
{
	api_mover_route(a->d, a->who, a->c, a->method, a->seg, a->nseg, a->body, a->out);
}

/*
 * The API under /v1/ (docs/api.md), one row a route: its method ("*": the
 * handler tells methods apart itself), its segments after "v1" (a literal,
 * "*" for any one, "#request" or "#job" for an id, parsed before the
 * handler runs) and its handler. A path no row has is 404; a path some rows
 * have but none with the method is 405, naming the methods it takes; an id
 * segment that is not an id is 404, before the method is looked at.
 */
static const struct api_route {
	const char *method, *path;
	void (*fn)(const struct api_call *a);
} _routes[] = {
	{ "GET", "health", _r_health },
	{ "POST", "requests", _r_submit },
	{ "GET", "requests", _r_list },
	{ "GET", "requests/#request", _r_get },
	{ "POST", "requests/#request/cancel", _r_cancel },
	{ "POST", "requests/#request/retry", _r_retry },
	{ "*", "requests/*/shards/*", _r_mover },
	{ "*", "requests/*/shards/*/*", _r_mover },
	{ "GET", "jobs/#job", _r_job },
	{ "POST", "jobs/#job/end", _r_job_end },
	{ "POST", "jobs/#job/retry", _r_job_retry },
	{ "POST", "jobs/#job/start", _r_job_start },
	{ "DELETE", "jobs/#job/start", _r_job_unstart },
	{ "*", "drain", _r_drain },
	{ "GET", "audit", _r_audit },
	{ "POST", "bb/#job/*", _r_bb },
	{ "POST", "labels/verify", _r_labels },
};

#define N_ROUTES (sizeof(_routes) / sizeof(_routes[0]))

/*
 * Does route r's path have the shape of seg[1..nseg) (the same segments,
 * ids and wildcards taken as they come)? 1 or 0; *idseg gets the index of
 * its id segment (0: none) and *idkind its kind ("request", "job").
 */
static int _route_shape(const struct api_route *r, char **seg, int nseg, int *idseg,
			const char **idkind)
{
	const char *p = r->path;
	int i = 1;

	*idseg = 0;
	for (; *p && i < nseg; i++) {
		const char *slash = strchr(p, '/');
		size_t n = slash ? (size_t)(slash - p) : strlen(p);

		if (*p == '#') {
			*idseg = i;
			*idkind = p[1] == 'j' ? "job" : "request";
		} else if (!(n == 1 && *p == '*') && (strlen(seg[i]) != n || strncmp(seg[i], p, n)))
			return 0;
		p += n + (slash ? 1 : 0);
	}
	return !*p && i == nseg;
}

/* 405 for a path whose routes take other methods: the reply names those. */
static void _route_405(const char *method, const char *url, const char *allowed,
		       struct api_reply *out)
{
	api_error(out, 405, "method %s not allowed on %.200s: use %s", method, url, allowed);
}

void api_route_json(struct daemon *d, const struct api_caller *who, struct MHD_Connection *c,
		    const char *method, const char *url, json_t *jb, const char *body_err,
		    struct api_reply *out)
{
	struct api_path p;
	struct api_call a = { d, who, c, method, p.seg, 0, 0, jb, out };
	const struct api_route *hit = NULL;
	char allowed[64] = "";
	int shaped = 0;

	out->status = 500;
	if (api_decode_path(url, &p) < 0) {
		api_error(out, 404, "no such path: %.200s", url);
		return;
	}
	a.nseg = p.nseg;
	if (strcmp(method, "POST") == 0 && !jb) {
		api_error(out, 400, "%s", body_err);
		return;
	}
	if (p.nseg == 1 && strcmp(p.seg[0], "metrics") == 0) {
		if (strcmp(method, "GET") != 0)
			api_error(out, 405, "use GET for /metrics");
		else if (!(out->text = api_metrics_render(d)))
			api_error(out, 500, "out of memory");
		else
			out->status = 200;
		return;
	}
	if (p.nseg < 2 || strcmp(p.seg[0], "v1") != 0) {
		api_error(out, 404, "no such path: %.200s (the API lives under /v1/)", url);
		return;
	}
	for (size_t i = 0; i < N_ROUTES; i++) {
		const struct api_route *r = &_routes[i];
		const char *kind = NULL;
		int idseg;

		if (!_route_shape(r, p.seg, p.nseg, &idseg, &kind))
			continue;
		if (idseg && api_decode_id(p.seg[idseg], &a.id) < 0) {
			api_error(out, 404, "'%.64s' is not a %s id", p.seg[idseg], kind);
			return;
		}
		shaped++;
		if (!hit && (strcmp(r->method, "*") == 0 || strcmp(r->method, method) == 0))
			hit = r;
		else if (strlen(allowed) + strlen(r->method) + 5 < sizeof(allowed))
			snprintf(allowed + strlen(allowed), sizeof(allowed) - strlen(allowed), "%s%s",
				 allowed[0] ? " or " : "", r->method);
	}
	if (hit)
		hit->fn(&a);
	else if (shaped)
		_route_405(method, url, allowed, out);
	else
		api_error(out, 404, "no such path: %.200s", url);
}
