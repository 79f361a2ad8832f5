/*
 * api_labels.c - label verification (see api_labels.h).
 *
 * A label is trusted only when a record explains it:
 *   exempt    the job's plan has exempt= for this directory
 *   pending   the plan has archive= for it, and the job runs, or its
 *             archive is on its way (a stale pending label keeps an HSM
 *             engine away from data nobody will archive)
 *   archive   a label request (ArchiveMode=label) for this directory
 *   skipped   the plan has archive= for it and a label request of the job
 *             moved it there (when=success and the job did not succeed)
 *   archived  a done archive request with audit rows (verified copies)
 *             whose destination is the label's location
 * and the job belongs to the label's owner. Everything else is reported.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api_decode.h"
#include "api_labels.h"
#include "dsl.h"
#include "grow.h"
#include "log.h"
#include "queue.h"
#include "queue_labels.h"
#include "slurm_jobs.h"

#define PATH_MAX_LABEL 4095
#define STALE_AFTER_DEFAULT 86400
#define REQS_MAX 256

/* What the daemon knows about one job, for the labels of one call. */
struct _job {
	int64_t id;
	int known;                 /* 1: records or slurmctld know it */
	int64_t uid;               /* -1 unknown */
	char *user, *work_dir;     /* owned, may be NULL */
	json_t *plan;              /* owned plan object or NULL */
	int ended;                 /* 1: end event stored */
	char *end_state;           /* owned */
	int end_exit_code;
	int64_t end_received;
	const char *from;          /* "records" or "slurmctld" */
};

/* One request found for a path (copied out of the queue's callback). */
struct _req {
	int64_t id, job_id, uid, updated, files_total;
	char action[16];
	char *dest, *error;
	enum queue_state state;
};

struct _reqs {
	struct _req r[REQS_MAX];
	int n;
};

struct _ctx {
	struct daemon *d;
	const struct api_caller *who;
	int64_t now, stale_after;
	struct _job *jobs;          /* cache for this call */
	size_t njobs, cap;
	struct sjob *sj;            /* slurmctld's jobs, loaded at most once */
	size_t nsj;
	int sj_tried;
};

/* ---- small helpers ---- */

/* Collapse '//' and '/./', drop a trailing '/'. Returns 0 or -1 (too long). */
static int _norm(const char *in, char *out, size_t outlen)
{
	size_t o = 0;
	const char *p = in;

	if (outlen == 0)
		return -1;
	while (*p) {
		if (*p == '/') {
			while (*p == '/')
				p++;
			if (p[0] == '.' && (p[1] == '/' || p[1] == '\0')) {
				p++;
				continue;
			}
			if (o + 1 >= outlen)
				return -1;
			out[o++] = '/';
			continue;
		}
		if (o + 1 >= outlen)
			return -1;
		out[o++] = *p++;
	}
	while (o > 1 && out[o - 1] == '/')
		o--;
	if (o == 0)
		out[o++] = '/';
	out[o] = '\0';
	return 0;
}

static void _job_clear(struct _job *j)
{
	free(j->user);
	free(j->work_dir);
	free(j->end_state);
	json_decref(j->plan);
	memset(j, 0, sizeof(*j));
}

static json_t *_plan_load(const char *text)
{
	json_t *p = text ? json_loads(text, 0, NULL) : NULL;

	if (p && !json_is_array(json_object_get(p, "actions"))) {
		json_decref(p);
		return NULL;
	}
	return p;
}

static int _first_uid(const struct queue_request *r, void *arg)
{
	*(int64_t *)arg = r->uid;
	return 1;
}

/* slurmctld's view of job id (SlurmWatch=yes only); 0 found into j, -1 not. */
static int _from_slurm(struct _ctx *c, int64_t id, struct _job *j)
{
	char err[512];

	if (!c->d->conf->slurm_watch)
		return -1;
	if (!c->sj_tried) {
		c->sj_tried = 1;
		if (sjob_list(&c->sj, &c->nsj, err, sizeof(err)) < 0) {
			log_warn("label verification: %s", err);
			c->sj = NULL;
			c->nsj = 0;
		}
	}
	for (size_t i = 0; i < c->nsj; i++) {
		const struct sjob *s = &c->sj[i];

		if ((int64_t)s->job_id != id)
			continue;
		if (j->known && j->uid >= 0 && j->uid != (int64_t)s->uid)
			return -1;	/* records and slurmctld disagree: trust the records */
		j->known = 1;
		j->uid = s->uid;
		if (!j->work_dir && s->work_dir)
			j->work_dir = strdup(s->work_dir);
		if (!j->plan)
			j->plan = _plan_load(s->plan_json);
		j->from = "slurmctld";
		if (!j->ended && sjob_state_is_final(s->state) && !s->completing && s->end_time) {
			j->ended = 1;
			j->end_state = strdup(sjob_state_name(s->state));
			j->end_exit_code = s->exit_code;
			j->end_received = s->end_time;
		}
		return 0;
	}
	return -1;
}

/* The job, from the call's cache or looked up. Borrowed; NULL on a database error. */
static struct _job *_job(struct _ctx *c, int64_t id, char *err, size_t errlen)
{
	struct queue_job *qj = NULL;
	struct _job *j;
	int rc;

	for (size_t i = 0; i < c->njobs; i++)
		if (c->jobs[i].id == id)
			return &c->jobs[i];
	if (grow_array((void **)&c->jobs, &c->cap, c->njobs + 1, sizeof(*c->jobs), 16) < 0) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	j = &c->jobs[c->njobs];
	memset(j, 0, sizeof(*j));
	j->id = id;
	j->uid = -1;
	rc = queue_job_get(c->d->q, id, &qj, err, errlen);
	if (rc < 0)
		return NULL;
	if (rc == 0) {
		j->known = 1;
		j->from = "records";
		j->uid = qj->uid;
		j->user = qj->user ? strdup(qj->user) : NULL;
		j->work_dir = qj->work_dir ? strdup(qj->work_dir) : NULL;
		j->plan = _plan_load(qj->plan);
		if (qj->end_state) {
			j->ended = 1;
			j->end_state = strdup(qj->end_state);
			j->end_exit_code = qj->end_exit_code;
			j->end_received = qj->end_received;
		}
		queue_job_free(qj);
	}
	if (j->uid < 0) {
		/* A job seen only through requests: its owner is theirs. */
		struct queue_filter f = { .uid = -1, .job_id = id, .state = -1, .limit = 1 };
		int64_t uid = -1;

		if (queue_request_list(c->d->q, &f, _first_uid, &uid, err, errlen) < 0)
			return NULL;
		if (uid >= 0) {
			j->known = 1;
			j->uid = uid;
			if (!j->from)
				j->from = "records";
		}
	}
	if (!j->known || !j->plan)
		(void)_from_slurm(c, id, j);
	c->njobs++;
	return j;
}

/* Does the plan have `action` for a directory that resolves to path? */
static int _plan_has(const struct _job *j, const char *action, const char *path)
{
	json_t *acts = json_object_get(j->plan, "actions"), *a;
	size_t i;

	json_array_foreach(acts, i, a) {
		const char *act = json_string_value(json_object_get(a, "action"));
		const char *p = json_string_value(json_object_get(a, "path"));
		struct dsl_expand_ctx ec = { .job_id = (unsigned long)j->id,
					     .user = j->user ? j->user : "",
					     .job_name = NULL, .array_job_id = 0,
					     .array_task_id = -1 };
		char exp[PATH_MAX_LABEL + 1], e[256];
		const char *cand[2];

		if (!act || !p || strcmp(act, action) != 0)
			continue;
		cand[0] = p;
		cand[1] = dsl_expand(p, &ec, exp, sizeof(exp), e, sizeof(e)) == 0 ? exp : NULL;
		for (int k = 0; k < 2; k++) {
			char full[2 * PATH_MAX_LABEL + 2], n[2 * PATH_MAX_LABEL + 2];
			int w;

			if (!cand[k])
				continue;
			if (cand[k][0] == '/')
				w = snprintf(full, sizeof(full), "%s", cand[k]);
			else if (j->work_dir)
				w = snprintf(full, sizeof(full), "%s/%s", j->work_dir, cand[k]);
			else
				continue;
			if (w < 0 || (size_t)w >= sizeof(full) || _norm(full, n, sizeof(n)) < 0)
				continue;
			if (strcmp(n, path) == 0)
				return 1;
		}
	}
	return 0;
}

static int _collect_req(const struct queue_label_req *r, void *arg)
{
	struct _reqs *s = arg;
	struct _req *o;

	if (s->n >= REQS_MAX)
		return 1;
	o = &s->r[s->n];
	memset(o, 0, sizeof(*o));
	o->id = r->id;
	o->job_id = r->job_id;
	o->uid = r->uid;
	o->updated = r->updated;
	o->files_total = r->files_total;
	o->state = r->state;
	snprintf(o->action, sizeof(o->action), "%s", r->action);
	o->dest = r->dest ? strdup(r->dest) : NULL;
	o->error = r->error ? strdup(r->error) : NULL;
	s->n++;
	return 0;
}

static void _reqs_free(struct _reqs *s)
{
	for (int i = 0; i < s->n; i++) {
		free(s->r[i].dest);
		free(s->r[i].error);
	}
	s->n = 0;
}

static int _live(enum queue_state s)
{
	return s == QS_QUEUED || s == QS_RUNNING || s == QS_VERIFYING || s == QS_FAILED_RETRYABLE;
}

/* ---- verdicts ---- */

struct _verdict {
	int ok;
	const char *code;
	char reason[1024];
	int64_t request;            /* request that explains it, 0 none */
};

static void _set(struct _verdict *v, int ok, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static void _set(struct _verdict *v, int ok, const char *code, const char *fmt, ...)
{
	va_list ap;

	v->ok = ok;
	v->code = code;
	va_start(ap, fmt);
	vsnprintf(v->reason, sizeof(v->reason), fmt, ap);
	va_end(ap);
}

/* An archived label: a done archive request with verified files to the label's location. */
static void _check_archived(struct _ctx *c, const char *path, int64_t job_id, int64_t owner,
			    const char *location, const struct _reqs *rq, struct _verdict *v)
{
	int saw_other_dest = 0, saw_unverified = 0, saw_other_user = 0;
	char err[256];

	for (int i = 0; i < rq->n; i++) {
		const struct _req *r = &rq->r[i];
		int64_t rows = 0, bytes = 0;

		if (strcmp(r->action, "archive") != 0 || r->state != QS_DONE)
			continue;
		if (job_id > 0 && r->job_id != job_id)
			continue;
		if (!c->who->admin && r->uid != (int64_t)c->who->uid) {
			saw_other_user = 1;
			continue;
		}
		if (owner >= 0 && r->uid != owner)
			continue;
		if (!location || !r->dest || strcmp(location, r->dest) != 0) {
			saw_other_dest = 1;
			continue;
		}
		if (queue_label_audit(c->d->q, r->id, &rows, &bytes, err, sizeof(err)) < 0) {
			_set(v, 0, "error", "cannot read the audit trail: %s", err);
			return;
		}
		if (rows == 0 && r->files_total > 0) {
			saw_unverified = 1;
			continue;
		}
		v->request = r->id;
		_set(v, 1, "valid", "request r%lld copied and verified %lld file(s), %lld bytes, to %s",
		     (long long)r->id, (long long)rows, (long long)bytes, r->dest);
		return;
	}
	if (saw_other_dest)
		_set(v, 0, "location_mismatch", "no verified copy at %s: the archive request for %s "
		     "wrote elsewhere (see 'stagehand status'); the location label was changed",
		     location ? location : "(no location label)", path);
	else if (saw_unverified)
		_set(v, 0, "no_verified_copy", "the archive request has no audit record of a "
		     "verified file: do not delete the source; ask an admin");
	else if (saw_other_user)
		_set(v, 0, "not_yours", "the archive record of this directory belongs to another "
		     "user: only they or an admin can verify it");
	else
		_set(v, 0, "no_verified_copy", "stagehandd never finished a verified archive copy of "
		     "%s%s: the label is forged or its copy failed; archive it again "
		     "('stagehand submit archive') before trusting it", path,
		     job_id > 0 ? " for this job" : "");
}

static void _check_pending(struct _ctx *c, const struct _job *j, const char *path,
			   const struct _reqs *rq, struct _verdict *v)
{
	const struct _req *dead = NULL, *done = NULL;
	int success;

	if (!j->ended) {
		_set(v, 1, "running", "job %lld has not ended: archive=%s is still being written",
		     (long long)j->id, path);
		return;
	}
	for (int i = 0; i < rq->n; i++) {
		const struct _req *r = &rq->r[i];

		if (r->job_id != j->id || (strcmp(r->action, "archive") && strcmp(r->action, "label")))
			continue;
		if (_live(r->state)) {
			v->request = r->id;
			_set(v, 1, "in_progress", "job %lld ended; its %s request r%lld is %s",
			     (long long)j->id, r->action, (long long)r->id, queue_state_name(r->state));
			return;
		}
		if (r->state == QS_DONE && !done)
			done = r;
		else if (!dead)
			dead = r;
	}
	if (done) {
		v->request = done->id;
		_set(v, 0, "stale", "request r%lld (%s) finished but the label still says pending: "
		     "the daemon could not relabel it; ask an admin", (long long)done->id,
		     done->action);
		return;
	}
	if (dead) {
		v->request = dead->id;
		_set(v, 0, "stale", "job %lld ended %s; its %s request r%lld is %s%s%s: nothing will "
		     "archive this directory until 'stagehand retry r%lld'", (long long)j->id,
		     j->end_state ? j->end_state : "", dead->action, (long long)dead->id,
		     queue_state_name(dead->state), dead->error ? ": " : "",
		     dead->error ? dead->error : "", (long long)dead->id);
		return;
	}
	success = j->end_state && strcmp(j->end_state, "COMPLETED") == 0 && j->end_exit_code == 0;
	if (!success) {
		json_t *acts = json_object_get(j->plan, "actions"), *a;
		size_t i;
		int only_success = 0;

		json_array_foreach(acts, i, a) {
			const char *w = json_string_value(json_object_get(a, "when"));

			if (w && strcmp(w, "success") == 0)
				only_success = 1;
		}
		if (only_success) {
			_set(v, 0, "stale", "job %lld ended %s (exit %d) and archive=%s has "
			     "when=success: nothing will archive it, yet the label keeps every engine "
			     "away; remove or relabel it", (long long)j->id,
			     j->end_state ? j->end_state : "?", j->end_exit_code, path);
			return;
		}
	}
	if (c->now - j->end_received >= c->stale_after) {
		_set(v, 0, "stale", "job %lld ended %lld s ago and no archive request exists for %s",
		     (long long)j->id, (long long)(c->now - j->end_received), path);
		return;
	}
	_set(v, 1, "in_progress", "job %lld ended %lld s ago; its after-job requests are being made",
	     (long long)j->id, (long long)(c->now - j->end_received));
}

static void _check_archive(const struct _job *j, const struct _reqs *rq, struct _verdict *v)
{
	for (int i = 0; i < rq->n; i++) {
		const struct _req *r = &rq->r[i];

		if (strcmp(r->action, "label") != 0 || r->job_id != j->id)
			continue;
		if (r->state == QS_DONE || _live(r->state)) {
			v->request = r->id;
			_set(v, 1, r->state == QS_DONE ? "valid" : "in_progress",
			     "label request r%lld (%s) of job %lld", (long long)r->id,
			     queue_state_name(r->state), (long long)j->id);
			return;
		}
	}
	_set(v, 0, "no_record", "stagehandd never labelled this directory 'archive' for job %lld: "
	     "the label was set by hand; an engine would archive it on no one's request",
	     (long long)j->id);
}

/*
 * Long on purpose: one label's checks in the order a reviewer
 * reads them (path, policy, owner, job, the job's requests, the verdict),
 * each ending in its own answer; split up, each piece would need the whole
 * context and verdict passed in.
 */
static void _verify_one(struct _ctx *c, json_t *in, struct _verdict *v)
{
	const char *path_in = json_string_value(json_object_get(in, "path"));
	const char *policy = json_string_value(json_object_get(in, "policy"));
	const char *job_s = json_string_value(json_object_get(in, "job"));
	const char *owner_s = json_string_value(json_object_get(in, "owner"));
	const char *location = json_string_value(json_object_get(in, "location"));
	char path[PATH_MAX_LABEL + 1], err[512];
	int64_t job_id = 0, owner = -1;
	struct _reqs *rq;
	struct _job *j = NULL;

	memset(v, 0, sizeof(*v));
	if (!path_in || path_in[0] != '/' || strlen(path_in) > PATH_MAX_LABEL ||
	    _norm(path_in, path, sizeof(path)) < 0) {
		_set(v, 0, "bad_input", "'path' must be an absolute path of at most %d bytes",
		     PATH_MAX_LABEL);
		return;
	}
	if (!policy || (strcmp(policy, "exempt") && strcmp(policy, "pending") &&
			strcmp(policy, "archive") && strcmp(policy, "archived") &&
			strcmp(policy, "skipped") && strcmp(policy, "purge"))) {
		_set(v, 0, "bad_value", "policy label '%.64s' is not exempt, pending, archive, "
		     "archived, skipped or purge: engines will ignore it or misread it; remove it",
		     policy ? policy : "(none)");
		return;
	}
	if (owner_s && api_decode_num(owner_s, 0, &owner) < 0) {
		_set(v, 0, "owner_mismatch", "owner label '%.32s' is not a uid", owner_s);
		return;
	}
	if (job_s && (api_decode_num(job_s, 0, &job_id) < 0 || job_id == 0)) {
		_set(v, 0, "no_job", "job label '%.32s' is not a job id", job_s);
		return;
	}
	rq = calloc(1, sizeof(*rq));
	if (!rq) {
		_set(v, 0, "error", "out of memory");
		return;
	}
	if (queue_label_requests(c->d->q, path, _collect_req, rq, err, sizeof(err)) < 0) {
		_set(v, 0, "error", "%s", err);
		goto out;
	}
	if (!job_s) {
		/* Only an archive submitted without a job labels no job. */
		if (strcmp(policy, "archived") == 0)
			_check_archived(c, path, 0, owner, location, rq, v);
		else
			_set(v, 0, "no_job", "a '%s' label without a job label: stagehand always "
			     "records the job; it was set by hand", policy);
		goto out;
	}
	j = _job(c, job_id, err, sizeof(err));
	if (!j) {
		_set(v, 0, "error", "%s", err);
		goto out;
	}
	if (!j->known || (!c->who->admin && j->uid != (int64_t)c->who->uid)) {
		/* The same answer for a job nobody knows and someone else's job. */
		if (c->who->admin)
			_set(v, 0, "unknown_job", "stagehandd has no record of job %lld: the label "
			     "was set by hand or copied from elsewhere", (long long)job_id);
		else
			_set(v, 0, "unknown_job", "job %lld is not one of your jobs known to "
			     "stagehandd: the label was set by hand, copied from elsewhere, or "
			     "belongs to another user", (long long)job_id);
		goto out;
	}
	if (owner < 0 || owner != j->uid) {
		_set(v, 0, "owner_mismatch", "the owner label says %s but job %lld belongs to uid %lld",
		     owner_s ? owner_s : "(none)", (long long)job_id, (long long)j->uid);
		goto out;
	}
	if (strcmp(policy, "archived") == 0) {
		_check_archived(c, path, job_id, owner, location, rq, v);
		goto out;
	}
	if (strcmp(policy, "archive") == 0) {
		_check_archive(j, rq, v);
		goto out;
	}
	if (strcmp(policy, "skipped") == 0) {
		int labelled = 0;

		for (int i = 0; i < rq->n; i++)
			labelled |= rq->r[i].job_id == job_id && !strcmp(rq->r[i].action, "label");
		if (labelled && j->plan && _plan_has(j, "archive", path))
			_set(v, 1, "valid", "archive= of job %lld skipped (when=success; the job "
			     "did not succeed): stagehand status %lld says why", (long long)job_id,
			     (long long)job_id);
		else
			_set(v, 0, "no_record", "stagehandd never skipped an archive of %s for job "
			     "%lld: the label was set by hand", path, (long long)job_id);
		goto out;
	}
	if (strcmp(policy, "purge") == 0) {
		/* The job's end (hold mode) or teardown (bb mode) labels its staged inputs,
		   or, with InputRetention=0, the purge request itself does (cleanup.h). */
		int labelled = 0;

		for (int i = 0; i < rq->n; i++)
			labelled |= rq->r[i].job_id == job_id && (!strcmp(rq->r[i].action, "label") ||
								  !strcmp(rq->r[i].action, "purge"));
		if (labelled)
			_set(v, 1, "valid", "staged inputs of job %lld, done with at its end: "
			     "stagehandd removes them after InputRetention (stagehand status %lld "
			     "says when)", (long long)job_id, (long long)job_id);
		else
			_set(v, 0, "no_record", "stagehandd never labelled %s for purge for job "
			     "%lld: the label was set by hand", path, (long long)job_id);
		goto out;
	}
	if (!j->plan) {
		_set(v, 0, "no_plan", "stagehandd has no #DATA plan for job %lld, so nothing "
		     "explains a '%s' label here", (long long)job_id, policy);
		goto out;
	}
	if (!_plan_has(j, strcmp(policy, "exempt") == 0 ? "exempt" : "archive", path)) {
		_set(v, 0, "not_in_plan", "job %lld's #DATA lines have no %s= for %s: the label was "
		     "set by hand", (long long)job_id,
		     strcmp(policy, "exempt") == 0 ? "exempt" : "archive", path);
		goto out;
	}
	if (strcmp(policy, "exempt") == 0)
		_set(v, 1, "valid", "exempt= of job %lld (%s)", (long long)job_id, j->from);
	else
		_check_pending(c, j, path, rq, v);
out:
	_reqs_free(rq);
	free(rq);
}

void api_labels_verify(struct daemon *d, const struct api_caller *who, json_t *body,
		       struct api_reply *out)
{
	json_t *labels = json_object_get(body, "labels"), *sa = json_object_get(body, "stale_after");
	json_t *res, *l;
	struct _ctx c = { .d = d, .who = who, .now = (int64_t)time(NULL),
			  .stale_after = STALE_AFTER_DEFAULT };
	size_t i;
	int problems = 0;

	if (!json_is_array(labels)) {
		api_error(out, 400, "'labels' must be an array of {\"path\", \"policy\", \"job\", "
			  "\"owner\", \"location\"} objects");
		return;
	}
	if (json_array_size(labels) > API_LABELS_MAX) {
		api_error(out, 400, "%zu labels in one request; send at most %d per request",
			  json_array_size(labels), API_LABELS_MAX);
		return;
	}
	if (sa && !json_is_null(sa)) {
		if (!json_is_integer(sa) || json_integer_value(sa) < 0) {
			api_error(out, 400, "'stale_after' must be a number of seconds >= 0");
			return;
		}
		c.stale_after = json_integer_value(sa);
	}
	json_array_foreach(labels, i, l) {
		if (!json_is_object(l)) {
			api_error(out, 400, "labels[%zu] must be an object", i);
			return;
		}
		const char *k;
		json_t *val;

		json_object_foreach(l, k, val) {
			if (strcmp(k, "path") && strcmp(k, "policy") && strcmp(k, "job") &&
			    strcmp(k, "owner") && strcmp(k, "location")) {
				api_error(out, 400, "labels[%zu]: unknown field '%.64s' (known: path, "
					  "policy, job, owner, location)", i, k);
				return;
			}
			if (!json_is_string(val) && !json_is_null(val)) {
				api_error(out, 400, "labels[%zu].%s must be a string or null", i, k);
				return;
			}
		}
		if (!json_is_string(json_object_get(l, "path"))) {
			api_error(out, 400, "labels[%zu].path is required", i);
			return;
		}
	}
	res = json_array();
	json_array_foreach(labels, i, l) {
		struct _verdict v;

		_verify_one(&c, l, &v);
		if (!v.ok)
			problems++;
		json_t *reason = json_string(v.reason);

		json_array_append_new(res, json_pack("{s:O,s:b,s:s,s:o,s:o}",
			"path", json_object_get(l, "path"), "ok", v.ok, "code", v.code,
			"reason", reason ? reason : json_string("(reason not valid UTF-8)"),
			"request", v.request ? json_integer(v.request) : json_null()));
	}
	for (i = 0; i < c.njobs; i++)
		_job_clear(&c.jobs[i]);
	free(c.jobs);
	if (c.sj)
		sjob_free(c.sj, c.nsj);
	out->status = 200;
	out->body = json_pack("{s:o,s:i,s:I,s:s}", "results", res, "problems", problems,
			      "stale_after", (json_int_t)c.stale_after,
			      "namespace", conf_xattr_prefix(d->conf));
}

int api_labels_policy_allowed(const struct api_caller *who, const char *action,
			      const char *options, struct api_reply *out)
{
	json_t *o;
	const char *policy;
	int rc = 0;

	if (who->admin || !action || strcmp(action, "label") != 0 || !options)
		return 0;
	o = json_loads(options, 0, NULL);
	policy = json_string_value(json_object_get(o, "policy"));
	if (policy && strcmp(policy, "archive") != 0 && strcmp(policy, "skipped") != 0) {
		api_error(out, 403, "options.policy '%.64s' is written by stagehandd and admins "
			  "only: a label request of yours may ask for 'archive' (the default) or "
			  "'skipped' (docs/api.md, \"Options\")", policy);
		rc = -1;
	}
	json_decref(o);
	return rc;
}
