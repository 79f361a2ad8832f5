/* test_after.c - '#DATA after=' judged (slurm_after.c) against slurmctld's
 * table (fake records here) and a real queue. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "queue.h"
#include "queue_after.h"
#include "slurm_after.h"
#include "slurm_compat.h"
#include "tests/tap.h"
#include "qtest.h"

static char _dir[] = "/tmp/test_after_XXXXXX";
static char _db[300];
static struct queue *q;
static char text[1024];

/* The lookup's answers for jobs missing from the table: job 7 has no plan, 8 is another user's. */
static int _lookups;
static int _lookup(uint32_t id, struct sjob *out, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	_lookups++;
	memset(out, 0, sizeof(*out));
	out->job_id = id;
	out->state = JOB_COMPLETE;
	if (id == 7) {
		out->uid = 1001;
		return 0;
	}
	if (id == 8) {
		out->uid = 2002;
		out->plan_json = strdup("{\"version\":1,\"actions\":[]}");
		return 0;
	}
	return 1;
}

static struct sjob _rec(uint32_t id, uint32_t state, uid_t uid)
{
	struct sjob j;

	memset(&j, 0, sizeof(j));
	j.job_id = id;
	j.array_task_id = SJOB_NO_TASK;
	j.uid = uid;
	j.state = state;
	j.ran = state != JOB_PENDING;
	j.end_time = time(NULL) - 1000;
	return j;
}

/* Judge dependent 1000 (uid 1001) against table jobs[0..n) for the after= value spec. */
static enum after_state _judge(const struct sjob *jobs, size_t n, const char *spec)
{
	struct dsl_after list[8];
	size_t nl = 0;
	const char *p = spec;
	struct sjob dep = _rec(1000, JOB_PENDING, 1001);
	struct after_view v = { jobs, n, _lookup, time(NULL) };

	while (*p && nl < 8) {
		size_t l = strcspn(p, ":");

		if (dsl_after_read(p, l, &list[nl++]) < 0)
			return 99;
		p += l + (p[l] == ':');
	}
	return after_judge(q, &v, &dep, list, nl, text, sizeof(text));
}

static int64_t _req(int64_t job, const char *action, const char *options)
{
	struct queue_new_request nr = { 1001, 1001, "alice", job, action, "/s/results",
					strcmp(action, "label") ? "/archive/results" : NULL,
					options, 3 };
	int64_t id = 0;
	char err[256];

	if (queue_request_create(q, &nr, &id, err, sizeof(err)) < 0)
		printf("# create: %s\n", err);
	return id;
}

static void _to(int64_t id, enum queue_state s)
{
	char err[256];

	if (queue_request_set_state(q, id, -1, s, s == QS_FAILED_FINAL ? "No space left" : NULL,
				    err, sizeof(err)) != 0)
		printf("# set_state %lld: %s\n", (long long)id, err);
}

static void _ended(int64_t job, const char *state, int processed)
{
	char err[256];
	int dup;

	queue_job_end(q, &(struct queue_job_end_rec){ { job, 1001, 1001, "alice", "/w", "{}" }, state, 0, NULL, 10 },
			 &dup, err, sizeof(err));
	if (processed)
		queue_job_end_processed(q, job, err, sizeof(err));
}

#define IS(want, ...) do { enum after_state _g = (want); \
	ok(_got == _g, __VA_ARGS__); \
	if (_got != _g) printf("# got %s: %s\n", after_state_name(_got), text); } while (0)

int main(void)
{
	struct sjob t[8];
	enum after_state _got;
	char err[512], *a = NULL, *b = NULL, *c = NULL;
	int64_t r1, r2;
	int changed;

	q = qtest_open(_dir, _db, sizeof(_db));
	if (!q)
		return tap_done();

	/* Job 10 runs: wait. Another user's job, itself, a later job: refused. */
	t[0] = _rec(10, JOB_RUNNING, 1001);
	_got = _judge(t, 1, "10");
	IS(AFTER_WAIT, "a running job: wait");
	ok(strstr(text, "job 10 (RUNNING)") != NULL, "the text names the job and its state (%s)", text);
	t[1] = _rec(11, JOB_COMPLETE, 2002);
	_got = _judge(t, 2, "11");
	IS(AFTER_REFUSED, "another user's job: refused");
	ok(strstr(text, "belongs to another user") != NULL, "the text says whose (%s)", text);
	_got = _judge(t, 2, "1000");
	IS(AFTER_REFUSED, "itself: refused");
	_got = _judge(t, 2, "1001");
	IS(AFTER_REFUSED, "a later job: refused");
	ok(strstr(text, "submitted after this one") != NULL, "the text says why (%s)", text);

	/* Job 10 ended: its end must reach the queue, be processed, its archive verified. */
	t[0].state = JOB_COMPLETE;
	t[0].end_time = time(NULL) - 5;
	_got = _judge(t, 1, "10");
	IS(AFTER_WAIT, "ended, no end event yet (within the grace): wait");
	_ended(10, "COMPLETED", 0);
	_got = _judge(t, 1, "10");
	IS(AFTER_WAIT, "end stored, not processed: wait");
	queue_job_end_processed(q, 10, err, sizeof(err));
	r1 = _req(10, "archive", NULL);
	_got = _judge(t, 1, "10");
	IS(AFTER_WAIT, "archive queued: wait");
	ok(strstr(text, "archive: 0/0 files verified") != NULL, "the text shows progress (%s)", text);
	_to(r1, QS_RUNNING);
	_to(r1, QS_FAILED_FINAL);
	_got = _judge(t, 1, "10");
	IS(AFTER_FAILED, "archive failed: failed");
	ok(strstr(text, "No space left") && strstr(text, "stagehand retry 10"),
	   "the text has the archive's error and the retry (%s)", text);
	ok(queue_request_retry(q, r1, err, sizeof(err)) == 0, "archive retried");
	_got = _judge(t, 1, "10");
	IS(AFTER_WAIT, "retried: wait again");
	_to(r1, QS_RUNNING);
	_to(r1, QS_VERIFYING);
	_to(r1, QS_DONE);
	_got = _judge(t, 1, "10");
	IS(AFTER_DONE, "archive verified: done");
	/* A skipped archive's 'skipped' label is no archive; a stage_out is waited for. */
	r2 = _req(10, "label", "{\"policy\":\"skipped\"}");
	_got = _judge(t, 1, "10");
	IS(AFTER_DONE, "a 'skipped' label request is not waited for");
	r2 = _req(10, "stage_out", NULL);
	_got = _judge(t, 1, "10");
	IS(AFTER_WAIT, "a stage_out is waited for as well");
	_to(r2, QS_RUNNING);
	_to(r2, QS_VERIFYING);
	_to(r2, QS_DONE);
	/* Once slurmctld forgot it (MinJobAge), the queue alone answers. */
	_got = _judge(t, 0, "10");
	IS(AFTER_DONE, "forgotten by slurmctld, known to the queue: done");

	/* A job whose archive was skipped (a note): failed. No transfers, no notes: done. */
	t[2] = _rec(12, JOB_FAILED, 1001);
	_ended(12, "FAILED", 1);
	queue_job_add_note(q, 12, "{\"line\":3,\"action\":\"archive\",\"path\":\"results\","
			   "\"reason\":\"when=success and the job ended FAILED (exit 1)\"}", err, sizeof(err));
	_got = _judge(t + 2, 1, "12");
	IS(AFTER_FAILED, "archive skipped: failed");
	ok(strstr(text, "archive of results (line 3) was not done: when=success") != NULL,
	   "the text has the note (%s)", text);
	t[3] = _rec(13, JOB_COMPLETE, 1001);
	_ended(13, "COMPLETED", 1);
	_got = _judge(t + 3, 1, "13");
	IS(AFTER_DONE, "a job without after-job transfers: done once its end is processed");

	/* Cancelled before it ran: its archive never comes. */
	t[4] = _rec(14, JOB_CANCELLED, 1001);
	t[4].ran = false;
	_got = _judge(t + 4, 1, "14");
	IS(AFTER_FAILED, "cancelled while pending: failed");
	ok(strstr(text, "ended CANCELLED before it ran") != NULL, "the text says so (%s)", text);
	/* Requeued: pending again, wait for the final run. */
	t[5] = _rec(15, JOB_PENDING, 1001);
	t[5].restarts = 1;
	_got = _judge(t + 5, 1, "15");
	IS(AFTER_WAIT, "requeued: wait");
	ok(strstr(text, "PENDING, requeued") != NULL, "the text says requeued (%s)", text);

	/* Requeued after its end was processed ('scontrol requeue' of an ended job):
	   run 1's transfers are superseded; only the final run's count. */
	{
		struct queue_job *qj = NULL;
		int64_t a1, p1, l1, a2;
		int cancelled = -1, relabel = -1;

		t[5] = _rec(17, JOB_COMPLETE, 1001);
		_ended(17, "COMPLETED", 1);
		a1 = _req(17, "archive", NULL);
		_to(a1, QS_RUNNING);
		_to(a1, QS_FAILED_RETRYABLE);
		l1 = _req(17, "label", "{\"policy\":\"purge\"}");
		_to(l1, QS_RUNNING);
		_to(l1, QS_VERIFYING);
		_to(l1, QS_DONE);
		p1 = _req(17, "purge", NULL);
		queue_job_add_note(q, 17, "{\"line\":4,\"action\":\"stage_out\",\"path\":\"x\","
				   "\"reason\":\"no to=\"}", err, sizeof(err));
		_got = _judge(t + 5, 1, "17");
		IS(AFTER_FAILED, "run 1: a note: failed");
		ok(queue_job_rerun(q, 17, &(struct queue_rerun){ 1, "run 1 ended COMPLETED and was processed; requeued", NULL, 0 },
			 &cancelled, &relabel, err, sizeof(err)) == 0,
		   "rerun recorded (%s)", err);
		ok(cancelled == 2 && relabel == 1,
		   "the retrying archive and the queued purge cancelled (%d), the purge label seen (%d)",
		   cancelled, relabel);
		ok(queue_job_get(q, 17, &qj, err, sizeof(err)) == 0 && !qj->end_state &&
		   !qj->end_processed && !qj->notes && qj->runs == 1,
		   "end, processing and notes cleared, one earlier run");
		queue_job_free(qj);
		qj = NULL;
		{
			struct queue_request *r = NULL;

			ok(queue_request_get(q, p1, &r, err, sizeof(err)) == 0 &&
			   r->state == QS_CANCELLED && r->error && strstr(r->error, "superseded") &&
			   strstr(r->error, "job 17 ran again"),
			   "the purge is cancelled with the reason (%s)", r && r->error ? r->error : "-");
			queue_request_free(r);
		}
		t[5].state = JOB_RUNNING;
		t[5].restarts = 1;
		_got = _judge(t + 5, 1, "17");
		IS(AFTER_WAIT, "running again: wait, run 1's note and failure forgotten");
		t[5].state = JOB_COMPLETE;
		_ended(17, "COMPLETED", 1);
		a2 = _req(17, "archive", NULL);
		_got = _judge(t + 5, 1, "17");
		IS(AFTER_WAIT, "the final run's archive queued: wait");
		_to(a2, QS_RUNNING);
		_to(a2, QS_VERIFYING);
		_to(a2, QS_DONE);
		_got = _judge(t + 5, 1, "17");
		IS(AFTER_DONE, "the final run's archive verified: done (run 1's cancelled one is not its)");
		ok(queue_rerun_boundary(q, 17, err, sizeof(err)) == p1, "the boundary is run 1's last request");
		ok(queue_rerun_boundary(q, 16, err, sizeof(err)) == 0, "a job never rerun: 0");
		/* The rerun ended before the watcher saw it: its end is stored from slurmctld. */
		_ended(18, "COMPLETED", 1);
		ok(queue_job_rerun(q, 18, &(struct queue_rerun){ 1, "requeued", "FAILED", 3 },
			 &cancelled, &relabel, err, sizeof(err)) == 0 && cancelled == 0 && relabel == 0, "rerun of 18 recorded");
		ok(queue_job_get(q, 18, &qj, err, sizeof(err)) == 0 && qj->end_state &&
		   !strcmp(qj->end_state, "FAILED") && qj->end_exit_code == 3 && !qj->end_processed,
		   "its final end FAILED (exit 3) stored, to be processed");
		queue_job_free(qj);
	}

	/* Missing from the table and the queue: slurmctld is asked once. */
	_lookups = 0;
	_got = _judge(t, 0, "7");
	IS(AFTER_REFUSED, "a job without #DATA: refused");
	ok(strstr(text, "--dependency=afterany:7") != NULL && _lookups == 1,
	   "the text points at afterany, one lookup (%s)", text);
	_got = _judge(t, 0, "8");
	IS(AFTER_REFUSED, "another user's job slurmctld knows: refused");
	_got = _judge(t, 0, "9");
	IS(AFTER_REFUSED, "an unknown job: refused");
	ok(strstr(text, "unknown to Slurm and to stagehand") != NULL, "the text says so (%s)", text);

	/* Several: the worst wins; refused over failed over waiting. */
	t[0] = _rec(10, JOB_COMPLETE, 1001);
	t[6] = _rec(16, JOB_RUNNING, 1001);
	t[7] = _rec(14, JOB_CANCELLED, 1001);
	t[7].ran = false;
	_got = _judge(t, 1, "10");
	IS(AFTER_DONE, "one done");
	{
		struct sjob two[3] = { t[0], t[6], t[7] };

		_got = _judge(two, 2, "10:16");
		IS(AFTER_WAIT, "done and running: wait");
		_got = _judge(two, 3, "16:14");
		IS(AFTER_FAILED, "running and cancelled: failed");
		_got = _judge(two, 3, "16:14:9");
		IS(AFTER_REFUSED, "and an unknown job: refused");
	}

	/* Array 20: task 0 is job 21 (archived), task 1 is job 22 (running), task 2 pending. */
	{
		struct sjob arr[3];

		arr[0] = _rec(21, JOB_COMPLETE, 1001);
		arr[0].array_job_id = 20;
		arr[0].array_task_id = 0;
		arr[1] = _rec(22, JOB_RUNNING, 1001);
		arr[1].array_job_id = 20;
		arr[1].array_task_id = 1;
		arr[2] = _rec(20, JOB_PENDING, 1001);
		arr[2].array_job_id = 20;
		arr[2].array_task_id = SJOB_NO_TASK;
		arr[2].array_tasks = "2";
		_ended(21, "COMPLETED", 1);
		queue_job_set_array(q, 21, 20, 0, err, sizeof(err));
		r1 = _req(21, "archive", NULL);
		_to(r1, QS_RUNNING);
		_to(r1, QS_VERIFYING);
		_to(r1, QS_DONE);
		_got = _judge(arr, 3, "20_0");
		IS(AFTER_DONE, "array task 20_0 archived: done");
		_got = _judge(arr, 3, "20_1");
		IS(AFTER_WAIT, "task 20_1 running: wait");
		ok(strstr(text, "job 20_1 (RUNNING)") != NULL, "named as squeue names it (%s)", text);
		_got = _judge(arr, 3, "20_2");
		IS(AFTER_WAIT, "task 20_2 still in the pending array record: wait");
		_got = _judge(arr, 3, "20");
		IS(AFTER_WAIT, "the whole array: wait while a task has not ended");
		arr[1].state = JOB_COMPLETE;
		arr[2].state = JOB_COMPLETE;
		arr[2].array_task_id = 2;
		arr[2].array_tasks = NULL;
		_ended(22, "COMPLETED", 1);
		_ended(20, "COMPLETED", 1);
		_got = _judge(arr, 3, "20");
		IS(AFTER_DONE, "every task ended and archived: done");
		_got = _judge(arr, 3, "20_5");
		IS(AFTER_REFUSED, "a task the array does not have: refused (%s)", text);
	}

	/* The verdict kept for 'stagehand status', written only when it changes. */
	ok(queue_after_set(q, 1000, "10:16", "waiting", "waiting for job 16", &changed, err,
			   sizeof(err)) == 0 && changed, "verdict stored");
	ok(queue_after_set(q, 1000, "10:16", "waiting", "waiting for job 16", &changed, err,
			   sizeof(err)) == 0 && !changed, "the same verdict: not written again");
	ok(queue_after_get(q, 1000, &a, &b, &c, err, sizeof(err)) == 0 && !strcmp(a, "10:16") &&
	   !strcmp(b, "waiting") && !strcmp(c, "waiting for job 16"), "verdict read back");
	free(a);
	free(b);
	free(c);
	ok(queue_after_get(q, 999, &a, &b, &c, err, sizeof(err)) == 1, "a job without after=: none");

	queue_close(q);
	unlink(_db);
	{
		char p[320];

		snprintf(p, sizeof(p), "%s-wal", _db);
		unlink(p);
		snprintf(p, sizeof(p), "%s-shm", _db);
		unlink(p);
	}
	rmdir(_dir);
	return tap_done();
}
