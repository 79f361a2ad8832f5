/*
 * api_bb.c - the daemon's side of burst-buffer mode (SubmitMode=bb): what
 * Slurm's burst_buffer/lua hooks ask for, through `stagehand bb` over the
 * UNIX socket, from slurmscriptd (root, on the controller host).
 *
 * Owns: accepting a job for stage-in at setup (slurm_watch's tick creates
 * its requests, in the order setups arrive, which is the order Slurm gives
 * pools to jobs), answering where stage-in and the after-job transfers
 * stand, and handing the job's staged inputs to the cleanup at teardown.
 *
 * Identity, work dir and plan come from slurmctld's record of the job
 * (sjob_get, read by the API's prep stage before the writer takes the call:
 * api_bb_prepare), never from the caller. Must never: ask slurmctld on the
 * writer's thread, wait for a transfer (the
 * CLI polls), touch user data (workers do, as the owner), or accept a call
 * from anyone but root on this host.
 */
#include "config.h"

#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_bb.h"
#include "urlredact.h"
#include "cleanup.h"
#include "lifecycle.h"
#include "log.h"
#include "queue.h"
#include "pool.h"
#include "queue_pool.h"
#include "slurm_jobs.h"
#include "slurm_watch.h"

/* queue_job.hold_state while a job waits for slurm_watch's tick to stage it. */
#define HS_BB_SETUP "bb-setup"
/*
 * ... and once data-in saw its inputs staged and wrote the job's status: a
 * state the Slurm watch does not follow (its own "released" may come first,
 * with a "waiting" status that this one replaces).
 */
#define HS_BB_READY "bb-staged"

static int _root_here(const struct api_caller *who, struct api_reply *out)
{
	if (who->uid == 0 && !who->tcp)
		return 1;
	api_error(out, 403, "burst-buffer calls come from slurmscriptd as root over the UNIX "
		  "socket (this is uid %u%s)", (unsigned)who->uid, who->tcp ? " over TCP" : "");
	return 0;
}

/*
 * The size Slurm reserved for the job at setup (body {"size":BYTES,"pool":NAME},
 * from the hook's bb_size and pool): 0 and NULL when it has none. Returns -1
 * with out filled when the body is malformed.
 */
static int _setup_size(json_t *body, int64_t job, int64_t *size, const char **pool,
		       struct api_reply *out)
{
	json_t *s = json_object_get(body, "size"), *p = json_object_get(body, "pool");

	*size = 0;
	*pool = NULL;
	if (!s && !p)
		return 0;
	if (!json_is_integer(s) || json_integer_value(s) < 0 ||
	    (p && !json_is_null(p) && !json_is_string(p))) {
		api_error(out, 400, "job %lld: setup takes {\"size\": bytes, \"pool\": name}",
			  (long long)job);
		return -1;
	}
	*size = json_integer_value(s);
	*pool = json_is_string(p) ? json_string_value(p) : NULL;
	/* Slurm says "(null)" for a job without capacity=: no reservation. */
	if (*pool && (!**pool || !strcmp(*pool, "(null)")))
		*pool = NULL;
	if (!*pool)
		*size = 0;
	return 0;
}

void api_bb_prepare(struct daemon *d, const struct api_caller *who, int64_t job, const char *op)
{
	struct api_order *o = who->order;

	if (who->uid != 0 || !d->conf->slurm_watch || job <= 0 || job > (int64_t)UINT32_MAX ||
	    !strcmp(op, "data-in"))
		return;
	o->job = calloc(1, sizeof(*o->job));
	if (!o->job)
		return;
	o->job_rc = sjob_get((uint32_t)job, o->job, o->job_err, sizeof(o->job_err));
}

/*
 * slurmctld's record of job: the prep stage's (borrowed from the work order;
 * *own untouched) when there is one, else asked now into *own (the caller
 * clears it). 0, 1 unknown, -1 with err.
 */
static int _record(const struct api_caller *who, int64_t job, struct sjob *own,
		   const struct sjob **j, char *err, size_t errlen)
{
	int rc;

	memset(own, 0, sizeof(*own));
	if (who->order && who->order->job) {
		*j = who->order->job;
		snprintf(err, errlen, "%s", who->order->job_err);
		return who->order->job_rc;
	}
	rc = sjob_get((uint32_t)job, own, err, errlen);
	*j = own;
	return rc;
}

/* setup: record the job from slurmctld's record; its requests follow at the next tick. */
static void _setup(struct daemon *d, const struct api_caller *who, int64_t job, json_t *body,
		   struct api_reply *out)
{
	struct sjob own;
	const struct sjob *j;
	struct queue_job *qj = NULL;
	struct passwd pw, *res = NULL;
	char err[512], tmp[4096];
	const char *pool;
	int64_t size;
	int rc;

	if (_setup_size(body, job, &size, &pool, out) < 0)
		return;
	rc = _record(who, job, &own, &j, err, sizeof(err));
	if (rc != 0) {
		api_error(out, rc > 0 ? 404 : 503, "%s", rc > 0 ? "slurmctld does not know this job" : err);
		sjob_clear(&own);
		return;
	}
	if (!j->plan_json) {
		/* A #DATA job without a record: job_submit.lua did not run. */
		out->status = 200;
		out->body = json_pack("{s:I,s:s}", "job_id", (json_int_t)job, "state", "none");
		sjob_clear(&own);
		return;
	}
	if (queue_job_get(d->q, job, &qj, err, sizeof(err)) < 0) {
		api_error(out, 500, "%s", err);
		sjob_clear(&own);
		return;
	}
	/* A second setup (slurmctld restarted) changes nothing already under way. */
	if (!qj || !qj->hold_state || !strcmp(qj->hold_state, "none") ||
	    !strcmp(qj->hold_state, "cancelled")) {
		if (getpwuid_r(j->uid, &pw, tmp, sizeof(tmp), &res) != 0 || !res) {
			api_error(out, 500, "uid %u has no user name on the staging host",
				  (unsigned)j->uid);
			goto out;
		}
		struct queue_job_rec rec = { job, j->uid, j->gid, res->pw_name, j->work_dir,
					     j->plan_json };

		if (queue_job_upsert(d->q, &rec, err, sizeof(err)) < 0 ||
		    queue_job_set_hold_state(d->q, job, HS_BB_SETUP, err, sizeof(err)) < 0) {
			api_error(out, 500, "%s", err);
			goto out;
		}
		if (size > 0 && queue_pool_set(d->q, job, pool, size, err, sizeof(err)) < 0) {
			api_error(out, 500, "%s", err);
			goto out;
		}
		if (size > 0)
			log_info("job %lld: burst-buffer setup: stage-in queued, %lld bytes in pool %s",
				 (long long)job, (long long)size, pool);
		else
			log_info("job %lld: burst-buffer setup: stage-in queued (no capacity=: its "
				 "size is what its inputs hold)", (long long)job);
		daemon_wake(d);
	}
	out->status = 200;
	out->body = json_pack("{s:I,s:s}", "job_id", (json_int_t)job, "state", "accepted");
out:
	queue_job_free(qj);
	sjob_clear(&own);
}

/*
 * Inputs staged: the job's status text says so, once. It is the last one
 * Slurm takes: 22.05 refuses any update of a job that has ended
 * (ESLURM_JOB_FINISHED), stage-out included, so it must not read "waiting"
 * (the job's outcome after that is in 'stagehand status' and, for a failed
 * stage-out, in Slurm's Reason). Marking the job HS_BB_READY first keeps the
 * Slurm watch from writing its "waiting for Slurm to start" over it.
 */
static void _staged_status(struct daemon *d, const struct api_caller *who, int64_t job)
{
	int64_t bytes = 0;
	int counted = 0, nreq = 0;
	char err[512], text[512];

	if (queue_job_set_hold_state(d->q, job, HS_BB_READY, err, sizeof(err)) < 0)
		log_warn("job %lld: %s", (long long)job, err);
	if (queue_pool_need(d->q, job, &bytes, &counted, &nreq, err, sizeof(err)) < 0)
		log_warn("job %lld: %s", (long long)job, err);
	if (nreq)
		snprintf(text, sizeof(text), "stagehand: %d input%s staged (%lld bytes) before the "
			 "job started; archives and stage-outs run after it (stagehand status %lld)",
			 nreq, nreq == 1 ? "" : "s", (long long)bytes, (long long)job);
	else
		snprintf(text, sizeof(text), "stagehand: no inputs to stage; archives and "
			 "stage-outs run after the job (stagehand status %lld)", (long long)job);
	api_set_status(who, job, text);
}

/* data-in: "waiting" (not staged yet), "ready" or "failed" with what to do. */
static void _data_in(struct daemon *d, const struct api_caller *who, int64_t job,
		     struct api_reply *out)
{
	struct queue_job *qj = NULL;
	const char *st = "none", *hs;
	char *error = NULL, err[512], msg[1024];
	const char *state;

	if (queue_job_get(d->q, job, &qj, err, sizeof(err)) != 0) {
		api_error(out, qj ? 500 : 404, "no burst-buffer setup for job %lld", (long long)job);
		queue_job_free(qj);
		return;
	}
	hs = qj->hold_state ? qj->hold_state : "none";
	if (queue_job_stage_in(d->q, job, &st, &error, err, sizeof(err)) < 0) {
		api_error(out, 500, "%s", err);
		queue_job_free(qj);
		return;
	}
	msg[0] = '\0';
	if (!strcmp(hs, HS_BB_SETUP) || !strcmp(st, "pending") || !strcmp(st, "staging")) {
		state = "waiting";
	} else if (!strcmp(hs, "invalid") || (!strcmp(hs, "failed") && strcmp(st, "failed"))) {
		state = "failed";
		snprintf(msg, sizeof(msg), "stagehand refused the job's stage-in plan: see "
			 "'scontrol show job %lld' (AdminComment) - fix the #DATA line and resubmit",
			 (long long)job);
	} else if (!strcmp(st, "failed") && error && strstr(error, POOL_OVER_TEXT)) {
		/* pool.c's text says what to do: a retry would fail the same way. */
		state = "failed";
		snprintf(msg, sizeof(msg), "stage-in failed: %.900s", error);
	} else if (!strcmp(st, "failed")) {
		state = "failed";
		snprintf(msg, sizeof(msg), "stage-in failed: %.600s - fix it, run 'stagehand retry "
			 "%lld' and resubmit (Slurm does not call data_in again)",
			 error ? error : "unknown error", (long long)job);
	} else {
		state = "ready";
		if (strcmp(hs, HS_BB_READY) != 0)
			_staged_status(d, who, job);
	}
	out->status = 200;
	/* Slurm shows the message (SystemComment): a URL's query hidden (urlredact.h). */
	{
		char shown[sizeof(msg)];

		url_redact(msg, shown, sizeof(shown));
		out->body = json_pack("{s:I,s:s,s:s}", "job_id", (json_int_t)job, "state", state,
				      "message", shown);
	}
	free(error);
	queue_job_free(qj);
}

struct after {
	int total, done, failed;
	char first_error[600], first_source[300];
};

static int _after(const struct queue_request *r, void *arg)
{
	struct after *a = arg;

	/* Not the job's after-job transfers: its stage-in, and the 'purge'
	   label and removal of its inputs that teardown asks for. */
	if (!strcmp(r->action, "stage_in") || !strcmp(r->action, "purge") ||
	    (!strcmp(r->action, "label") && strstr(r->options, "\"purge\"")))
		return 0;
	a->total++;
	if (r->state == QS_DONE || r->state == QS_CANCELLED)
		a->done++;
	else if (r->state == QS_FAILED_FINAL && a->failed++ == 0) {
		snprintf(a->first_error, sizeof(a->first_error), "%s", r->error ? r->error : "?");
		snprintf(a->first_source, sizeof(a->first_source), "%s of %s (request r%lld)",
			 r->action, r->source ? r->source : "?", (long long)r->id);
	}
	return 0;
}

/* Does slurmctld list the job as pending (not ended, not cancelled)? */
static int _still_pending(const struct api_caller *who, int64_t job)
{
	struct sjob own;
	const struct sjob *j;
	char err[256];
	int pending;

	if (_record(who, job, &own, &j, err, sizeof(err)) != 0) {
		sjob_clear(&own);
		return 0;
	}
	pending = !strcmp(sjob_state_name(j->state), "PENDING");
	sjob_clear(&own);
	return pending;
}

/* data-out: "waiting" until every after-job request is verified, then "done" or "failed". */
static void _data_out(struct daemon *d, const struct api_caller *who, int64_t job,
		      struct api_reply *out)
{
	struct queue_filter f = { .uid = -1, .job_id = job, .state = -1, .limit = 0 };
	struct queue_job *qj = NULL;
	struct after a;
	char err[512], msg[1200], shown[1200];
	const char *state;

	memset(&a, 0, sizeof(a));
	msg[0] = '\0';
	if (queue_job_get(d->q, job, &qj, err, sizeof(err)) < 0) {
		api_error(out, 500, "%s", err);
		return;
	}
	if (qj && !qj->end_state && qj->runs > 0 && _still_pending(who, job)) {
		/* A run lost with its node, requeued (the watch recorded it): its
		   outputs are archived after the final run, nothing now. */
		state = "done";
		snprintf(msg, sizeof(msg), "stagehand: %s: outputs are archived after the final "
			 "run", qj->last_run ? qj->last_run : "run requeued");
	} else if (!qj || !qj->end_state || !qj->end_processed) {
		/* The end event (SPANK plugin, epilog or slurmctld's record) is on its
		   way, or none comes (the node was lost): the watch reads the job. */
		if (!qj || !qj->end_state)
			slurm_watch_follow(job);
		state = "waiting";
	} else if (queue_request_list(d->q, &f, _after, &a, err, sizeof(err)) < 0) {
		api_error(out, 500, "%s", err);
		queue_job_free(qj);
		return;
	} else if (a.failed) {
		state = "failed";
		snprintf(msg, sizeof(msg), "stagehand: %s failed: %.500s - fix it and run "
			 "'stagehand retry %lld'; an admin ends stage-out with 'scancel --hurry %lld' "
			 "(dependents then start without the archive)", a.first_source,
			 a.first_error, (long long)job, (long long)job);
	} else if (a.done < a.total) {
		state = "waiting";
	} else {
		state = "done";
	}
	out->status = 200;
	url_redact(msg, shown, sizeof(shown));	/* as in data-in's answer */
	out->body = json_pack("{s:I,s:s,s:s,s:i,s:i}", "job_id", (json_int_t)job, "state", state,
			      "message", shown, "requests", a.total, "verified", a.done);
	queue_job_free(qj);
}


/*
 * A hurried teardown ('scancel --hurry J': Slurm skips or ends stage-out):
 * what is left of the job's archives and stage-outs is cancelled, so the
 * daemon stops copying what Slurm no longer waits for, and NotifyCommand
 * says "cancelled". One made after this (the job's end reported later)
 * still runs.
 */
static void _hurry(struct daemon *d, int64_t job)
{
	char err[512];
	int n = 0;

	if (queue_job_cancel_stage_out(d->q, job, "cancelled: stage-out ended by 'scancel --hurry'",
				       &n, err, sizeof(err)) < 0)
		log_warn("job %lld: teardown (hurry): its archives and stage-outs go on: %s",
			 (long long)job, err);
	else if (n > 0) {
		log_info("job %lld: teardown (hurry): %d unfinished archive or stage-out "
			 "request%s cancelled", (long long)job, n, n == 1 ? "" : "s");
		daemon_wake(d);
	}
}

/*
 * teardown: label SCRATCH/USER/JOB/input 'purge' and schedule the removal of
 * what stagehand staged there, after InputRetention (cleanup.h).
 */
static void _teardown(struct daemon *d, const struct api_caller *who, int64_t job, json_t *body,
		      struct api_reply *out)
{
	struct queue_job *qj = NULL;
	char err[512], dir[4096];
	int64_t lid = 0, pid = 0;
	int hurry = json_is_true(json_object_get(body, "hurry"));

	if (queue_job_get(d->q, job, &qj, err, sizeof(err)) != 0 || !qj) {
		out->status = 200;
		out->body = json_pack("{s:I,s:s}", "job_id", (json_int_t)job, "state", "nothing");
		queue_job_free(qj);
		return;
	}
	/*
	 * A job still pending is torn down by a restarted slurmctld (24.05 and
	 * later), which sets it up and stages it in again next: its stage-in
	 * goes on, nothing is labelled, and its inputs keep their pool space,
	 * which Slurm reserves again at that setup.
	 */
	if (_still_pending(who, job)) {
		log_info("job %lld: teardown of a job still pending (slurmctld restarted?): its "
			 "stage-in goes on", (long long)job);
		out->status = 200;
		out->body = json_pack("{s:I,s:s}", "job_id", (json_int_t)job, "state", "pending");
		queue_job_free(qj);
		return;
	}
	/* Its inputs no longer hold pool space that Slurm gives back now. */
	if (queue_pool_torn_down(d->q, job, err, sizeof(err)) < 0)
		log_warn("job %lld: teardown: %s", (long long)job, err);
	if (hurry)
		_hurry(d, job);
	if (cleanup_schedule(d, qj, &lid, &pid, err, sizeof(err)) < 0) {
		log_warn("job %lld: teardown: its staged inputs stay: %s", (long long)job, err);
		api_error(out, 500, "cannot label or schedule the removal of job %lld's inputs: %s",
			  (long long)job, err);
	} else if (!lid && !pid) {
		out->status = 200;
		out->body = json_pack("{s:I,s:s}", "job_id", (json_int_t)job, "state", "nothing");
	} else {
		if (cleanup_input_dir(d->conf, qj, dir, sizeof(dir)) != 0)
			snprintf(dir, sizeof(dir), "?");
		log_info("job %lld: teardown%s: %s labelled for purge (requests %lld, %lld)",
			 (long long)job, hurry ? " (hurry)" : "", dir, (long long)lid, (long long)pid);
		out->status = 200;
		out->body = json_pack("{s:I,s:s,s:s}", "job_id", (json_int_t)job, "state",
				      "labelled", "path", dir);
	}
	queue_job_free(qj);
}

void api_bb(struct daemon *d, const struct api_caller *who, int64_t job, const char *op,
	    json_t *body, struct api_reply *out)
{
	if (!_root_here(who, out))
		return;
	if (!d->conf->slurm_watch) {
		api_error(out, 409, "burst-buffer mode needs SlurmWatch=yes (the daemon reads the "
			  "job from slurmctld)");
		return;
	}
	if (job <= 0 || job > (int64_t)UINT32_MAX)
		api_error(out, 404, "%lld is not a Slurm job id", (long long)job);
	else if (!strcmp(op, "setup"))
		_setup(d, who, job, body, out);
	else if (!strcmp(op, "data-in"))
		_data_in(d, who, job, out);
	else if (!strcmp(op, "data-out"))
		_data_out(d, who, job, out);
	else if (!strcmp(op, "teardown"))
		_teardown(d, who, job, body, out);
	else
		api_error(out, 404, "no burst-buffer call '%.64s' (setup, data-in, data-out, "
			  "teardown)", op);
}
