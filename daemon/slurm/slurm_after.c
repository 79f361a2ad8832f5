/* slurm_after.c - see slurm_after.h. */
#include "config.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "queue_after.h"
#include "slurm_after.h"
#include "slurm_compat.h"

/* Seconds an ended job's end may take to reach the queue (the watch's own backstop takes 10). */
#define AFTER_END_GRACE 120
/* Jobs of one array (or one name) judged at most; beyond, the rest waits its turn. */
#define AFTER_MAX_TARGETS 512

const char *after_state_name(enum after_state s)
{
	switch (s) {
	case AFTER_DONE:    return "done";
	case AFTER_WAIT:    return "waiting";
	case AFTER_FAILED:  return "failed";
	case AFTER_REFUSED: return "refused";
	}
	return "?";
}

char *after_list_text(const struct dsl_after *list, size_t n, char *out, size_t outlen)
{
	size_t used = 0;

	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		char b[24];
		int k = snprintf(out + used, outlen - used, "%s%s", i ? ":" : "",
				 dsl_after_format(&list[i], b, sizeof(b)));

		if (k < 0 || (size_t)k >= outlen - used)
			break;	/* cut at a whole name */
		used += (size_t)k;
	}
	out[used] = '\0';
	return out;
}

/* The worst verdict so far and its text: refused > failed > waiting > done; the first text of a kind stays. */
struct verdict {
	enum after_state st;
	char *text;
	size_t textlen;
};

static void _say(struct verdict *v, enum after_state st, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static void _say(struct verdict *v, enum after_state st, const char *fmt, ...)
{
	va_list ap;

	if (st <= v->st)
		return;
	v->st = st;
	va_start(ap, fmt);
	vsnprintf(v->text, v->textlen, fmt, ap);  /* a cut text is still useful */
	va_end(ap);
}

static bool _final(uint32_t state)
{
	return sjob_state_is_final(state);
}

/* The first note of a job (an after-job action not done): true with it in out. */
static bool _first_note(const char *notes, char *out, size_t outlen)
{
	json_t *a = notes ? json_loads(notes, 0, NULL) : NULL, *n = json_array_get(a, 0);
	bool found = json_is_object(n);

	if (found)
		snprintf(out, outlen, "%s of %s (line %d) was not done: %.300s",
			 json_string_value(json_object_get(n, "action")) ?: "?",
			 json_string_value(json_object_get(n, "path")) ?: "?",
			 (int)json_integer_value(json_object_get(n, "line")),
			 json_string_value(json_object_get(n, "reason")) ?: "?");
	json_decref(a);
	return found;
}

/*
 * One job id (r: slurmctld's record, or NULL when the table does not have
 * it): has it ended for good, with every after-job transfer verified?
 */
static void _judge_job(struct queue *q, const struct after_view *v, const struct sjob *dep,
		       int64_t id, const struct sjob *r, const char *name, struct verdict *out)
{
	struct queue_job *qj = NULL;
	struct queue_after_sum s;
	char err[256], note[512];
	int64_t uid;

	if (queue_job_get(q, id, &qj, err, sizeof(err)) < 0) {
		_say(out, AFTER_WAIT, "waiting for job %s (stagehand's database: %.200s)", name, err);
		return;
	}
	uid = r ? (int64_t)r->uid : qj ? qj->uid : -1;
	if (uid >= 0 && uid != (int64_t)dep->uid) {
		_say(out, AFTER_REFUSED, "job %s belongs to another user: after= waits only for "
		     "your own jobs", name);
		goto out;
	}
	if (r && (!_final(r->state) || r->completing || r->requeue)) {
		_say(out, AFTER_WAIT, "waiting for job %s (%s%s) to end and its archive to be "
		     "verified", name, r->completing ? "COMPLETING" : sjob_state_name(r->state),
		     r->state == JOB_PENDING && r->restarts ? ", requeued" : "");
		goto out;
	}
	if (!qj || !qj->end_state) {
		const char *st = r ? sjob_state_name(r->state) : "CANCELLED";

		if ((r && !r->ran) || (qj && qj->hold_state && !strcmp(qj->hold_state, "cancelled")))
			_say(out, AFTER_FAILED, "job %s ended %s before it ran: its archive will never "
			     "come - scancel this job", name, st);
		else if (r && v->now - r->end_time < AFTER_END_GRACE)
			_say(out, AFTER_WAIT, "waiting for the end of job %s (%s) to reach stagehand",
			     name, st);
		else
			_say(out, AFTER_FAILED, "job %s ended %s but its end never reached stagehand, "
			     "so nothing of it was archived - ask your admin, or scancel this job",
			     name, st);
		goto out;
	}
	if (!qj->end_processed) {
		_say(out, AFTER_WAIT, "waiting for job %s's archive to be set up (it ended %s)", name,
		     qj->end_state);
		goto out;
	}
	if (_first_note(qj->notes, note, sizeof(note))) {
		_say(out, AFTER_FAILED, "job %s: %s - its archive will never come; scancel this job",
		     name, note);
		goto out;
	}
	if (queue_after_transfers(q, id, (int64_t)dep->uid, &s, err, sizeof(err)) < 0) {
		_say(out, AFTER_WAIT, "waiting for job %s (stagehand's database: %.200s)", name, err);
		goto out;
	}
	if (s.failed)
		_say(out, AFTER_FAILED, "job %s's archive failed: %.400s - fix it and run 'stagehand "
		     "retry %lld' (this job is released once it is verified), or scancel this job",
		     name, s.error ? s.error : "?", (long long)id);
	else if (s.active)
		_say(out, AFTER_WAIT, "waiting for job %s's archive: %lld/%lld files verified%s%.300s%s",
		     name, (long long)s.files_done, (long long)s.files_total,
		     s.retrying ? " (retrying after: " : "", s.retrying && s.error ? s.error : "",
		     s.retrying ? ")" : "");
	free(s.error);
out:
	queue_job_free(qj);
}

/* Does a pending array record still hold task k (its tasks have no job ids yet)? */
static bool _meta_has(const struct sjob *m, long k)
{
	uint32_t tasks[4096];
	size_t nt = sjob_array_tasks(m->array_tasks, tasks, 4096);

	for (size_t i = 0; i < nt; i++)
		if ((long)tasks[i] == k)
			return true;
	/* Expanded only so far: a task beyond may still be there; never refuse it. */
	return nt == 4096;
}

/* Not in the table nor the queue: ask slurmctld once, for a reason to refuse. */
static void _judge_missing(const struct after_view *v, const struct sjob *dep,
			   const struct dsl_after *a, const char *name, struct verdict *out)
{
	struct sjob j;
	char err[256];
	int rc = v->lookup ? v->lookup((uint32_t)a->job_id, &j, err, sizeof(err)) : 1;

	if (rc < 0) {
		_say(out, AFTER_WAIT, "waiting for slurmctld to say what job %s is (%.200s)", name,
		     err);
		return;
	}
	if (rc == 1) {
		_say(out, AFTER_REFUSED, "job %s is unknown to Slurm and to stagehand (mistyped, "
		     "or it ended long ago)", name);
		return;
	}
	if (j.uid != dep->uid)
		_say(out, AFTER_REFUSED, "job %s belongs to another user: after= waits only for "
		     "your own jobs", name);
	else if (!j.plan_json)
		_say(out, AFTER_REFUSED, "job %lu has no #DATA lines, so nothing of it is archived: "
		     "to wait for it, use sbatch --dependency=afterany:%s", a->job_id, name);
	else if (a->task_id >= 0)
		_say(out, AFTER_REFUSED, "job %lu has no task %ld", a->job_id, a->task_id);
	else
		_say(out, AFTER_WAIT, "waiting for job %s", name);  /* the next table has it */
	sjob_clear(&j);
}

/*
 * One name of the list: a job, a whole array (every task slurmctld or the
 * queue knows), or one task.
 *
 * What a name means is decided in one place, from the table, then the
 * queue, then one question to slurmctld.
 */
static void _judge_name(struct queue *q, const struct after_view *v, const struct sjob *dep,
			const struct dsl_after *a, struct verdict *out)
{
	int64_t ids[AFTER_MAX_TARGETS];
	const struct sjob *recs[AFTER_MAX_TARGETS];
	int nt = 0, nq;
	uint32_t base = dep->array_job_id ? dep->array_job_id : dep->job_id;
	char name[24], err[256];
	bool pending = false, cut = false;

	dsl_after_format(a, name, sizeof(name));
	if (a->job_id >= base) {
		_say(out, AFTER_REFUSED, a->job_id == base ? "a job cannot wait for itself "
		     "(after=%s)" : "job %s was submitted after this one: after= names earlier "
		     "jobs only", name);
		return;
	}
	for (size_t i = 0; i < v->n; i++) {
		const struct sjob *r = &v->jobs[i];
		bool mine = a->task_id < 0 ? (r->job_id == a->job_id || r->array_job_id == a->job_id)
					   : r->array_job_id == a->job_id;

		if (!mine)
			continue;
		if (SJOB_IS_ARRAY_META(r)) {
			if (a->task_id < 0 || _meta_has(r, a->task_id)) {
				if (r->uid != dep->uid) {
					_say(out, AFTER_REFUSED, "job %s belongs to another user: "
					     "after= waits only for your own jobs", name);
					return;
				}
				pending = true;
			}
			continue;
		}
		if (a->task_id >= 0 && (int64_t)r->array_task_id != a->task_id)
			continue;
		if (nt == AFTER_MAX_TARGETS) {
			cut = true;
			break;
		}
		recs[nt] = r;
		ids[nt++] = r->job_id;
	}
	/* Tasks (or the job) slurmctld has forgotten (MinJobAge): the queue still knows them. */
	nq = cut ? 0 : queue_after_tasks(q, a->job_id, a->task_id, ids + nt,
					 AFTER_MAX_TARGETS - nt, err, sizeof(err));
	if (nq > 0 && nq == AFTER_MAX_TARGETS - nt)
		cut = true;	/* the queue may hold more than there was room for */
	if (cut) {
		/*
		 * Judging only some tasks could release the dependent while
		 * others are still archiving: refuse, and say what to do.
		 */
		_say(out, AFTER_REFUSED, "job %s has more than %d tasks, and after= follows at "
		     "most %d: name some of its tasks (after=%lu_T:...), or split the array",
		     name, AFTER_MAX_TARGETS - 1, AFTER_MAX_TARGETS - 1, a->job_id);
		return;
	}
	for (int k = nt; nq > 0 && k < nt + nq; k++) {
		bool seen = false;

		for (int m = 0; m < nt && !seen; m++)
			seen = ids[m] == ids[k];
		if (!seen) {
			recs[nt] = NULL;
			ids[nt++] = ids[k];
		}
	}
	if (a->task_id < 0 && nt == 0 && !pending) {
		struct queue_job *qj = NULL;

		if (queue_job_get(q, (int64_t)a->job_id, &qj, err, sizeof(err)) == 0 && qj->uid >= 0) {
			recs[nt] = NULL;
			ids[nt++] = (int64_t)a->job_id;
		}
		queue_job_free(qj);
	}
	if (pending)
		_say(out, AFTER_WAIT, "waiting for job %s (PENDING) to end and its archive to be "
		     "verified", name);
	if (nt == 0 && !pending) {
		_judge_missing(v, dep, a, name, out);
		return;
	}
	for (int k = 0; k < nt; k++) {
		char tn[48];

		/* An array task is named as squeue names it. */
		if (recs[k] && recs[k]->array_job_id && recs[k]->array_task_id != SJOB_NO_TASK)
			snprintf(tn, sizeof(tn), "%u_%u", recs[k]->array_job_id, recs[k]->array_task_id);
		else if (a->task_id >= 0)
			snprintf(tn, sizeof(tn), "%s", name);
		else
			snprintf(tn, sizeof(tn), "%lld", (long long)ids[k]);
		_judge_job(q, v, dep, ids[k], recs[k], tn, out);
	}
}

enum after_state after_judge(struct queue *q, const struct after_view *v, const struct sjob *dep,
			     const struct dsl_after *list, size_t n, char *text, size_t textlen)
{
	struct verdict out = { .st = AFTER_DONE, .text = text, .textlen = textlen };

	text[0] = '\0';
	for (size_t i = 0; i < n; i++)
		_judge_name(q, v, dep, &list[i], &out);
	return out.st;
}
