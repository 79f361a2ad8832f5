/* test_jobs.c - array tasks and requeued runs in the queue's jobs table, and
 * the task list of a pending array's record (sjob_array_tasks). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "queue.h"
#include "slurm_jobs.h"
#include "tests/tap.h"
#include "qtest.h"

static char _dir[] = "/tmp/test_jobs_XXXXXX";
static char _db[300];

static int64_t _req(struct queue *q, int64_t job, const char *src, const char *options)
{
	struct queue_new_request nr = { 1001, 1001, "alice", job, "stage_in", src, "/dst",
					options, 3 };
	int64_t id = 0;
	char err[256];

	if (queue_request_create(q, &nr, &id, err, sizeof(err)) < 0)
		printf("# create: %s\n", err);
	return id;
}

static const char *_si(struct queue *q, int64_t job)
{
	const char *st = "?";
	char *e = NULL, err[256];

	if (queue_job_stage_in(q, job, &st, &e, err, sizeof(err)) < 0)
		printf("# stage_in: %s\n", err);
	free(e);
	return st;
}

static void _tasks(const char *spec, const char *want)
{
	uint32_t t[16];
	char got[256] = "";
	size_t n = sjob_array_tasks(spec, t, 16), used = 0;

	for (size_t i = 0; i < n; i++)
		used += (size_t)snprintf(got + used, sizeof(got) - used, "%s%u", i ? "," : "", t[i]);
	ok(strcmp(got, want) == 0, "array tasks of '%s': %s (want %s)", spec, got, want);
}

int main(void)
{
	struct queue *q;
	struct queue_job *j = NULL;
	char err[512];
	int64_t shared, own1, own2, ids[8];
	int dup;

	q = qtest_open(_dir, _db, sizeof(_db));
	if (!q)
		return tap_done();

	/* Array 100: task 1 is job 101, task 2 is job 100 (the last keeps the array's id). */
	ok(queue_job_set_array(q, 101, 100, 1, err, sizeof(err)) == 0, "task 1 recorded");
	ok(queue_job_set_array(q, 100, 100, 2, err, sizeof(err)) == 0, "task 2 recorded");
	shared = _req(q, 100, "/shared", "{\"shared\":true}");
	own1 = _req(q, 101, "/p1", NULL);
	own2 = _req(q, 100, "/p2", NULL);
	ok(shared && own1 && own2, "requests made");
	ok(!strcmp(_si(q, 101), "pending"), "task 1 waits for its own and the shared input");
	queue_request_set_state(q, own1, -1, QS_RUNNING, NULL, err, sizeof(err));
	queue_request_set_state(q, own1, -1, QS_VERIFYING, NULL, err, sizeof(err));
	queue_request_set_state(q, own1, -1, QS_DONE, NULL, err, sizeof(err));
	ok(!strcmp(_si(q, 101), "staging"), "own input done, shared not yet: staging (%s)", _si(q, 101));
	queue_request_set_state(q, shared, -1, QS_RUNNING, NULL, err, sizeof(err));
	queue_request_set_state(q, shared, -1, QS_VERIFYING, NULL, err, sizeof(err));
	queue_request_set_state(q, shared, -1, QS_DONE, NULL, err, sizeof(err));
	ok(!strcmp(_si(q, 101), "ready"), "task 1 ready once the shared input is (%s)", _si(q, 101));
	ok(!strcmp(_si(q, 100), "pending") || !strcmp(_si(q, 100), "staging"),
	   "task 2 still waits for its own input (%s)", _si(q, 100));
	/* Task 2's own input failing does not touch task 1. */
	queue_request_set_state(q, own2, -1, QS_CANCELLED, "x", err, sizeof(err));
	ok(!strcmp(_si(q, 100), "failed"), "task 2 failed (%s)", _si(q, 100));
	ok(!strcmp(_si(q, 101), "ready"), "task 1 still ready (%s)", _si(q, 101));
	/* A job that is no array task does not count another job's shared requests. */
	_req(q, 200, "/other-shared", "{\"shared\":true}");
	ok(!strcmp(_si(q, 201), "none"), "job 201 (no array) has no stage-in (%s)", _si(q, 201));
	ok(queue_job_failed_requests(q, 101, ids, 8, err, sizeof(err)) == 0,
	   "task 1 has no failed request");

	ok(queue_job_get(q, 101, &j, err, sizeof(err)) == 0 && j->array_job_id == 100 &&
	   j->array_task_id == 1 && j->runs == 0 && j->last_run == NULL, "task 1's record");
	queue_job_free(j);
	j = NULL;

	/* Requeue: run 1's end is cleared and counted; a late event of run 1 changes nothing. */
	ok(queue_job_end(q, &(struct queue_job_end_rec){ { 300, 1001, 1001, "alice", "/w", "{}" }, "CANCELLED", 0, NULL, 10 },
			 &dup, err, sizeof(err)) == 0 && !dup, "run 1 end stored");
	ok(queue_job_requeued(q, 300, 1, "run 1 lost with node n2 (NODE_FAIL); requeued", err,
			      sizeof(err)) == 0, "run 1 requeued");
	ok(queue_job_end(q, &(struct queue_job_end_rec){ { 300, -1, -1, NULL, NULL, NULL }, "CANCELLED", 0, NULL, 11 },
			 &dup, err, sizeof(err)) == 0 && !dup, "a late event of run 1 is stored again");
	ok(queue_job_requeued(q, 300, 1, "run 1 ended CANCELLED on its node; requeued", err,
			      sizeof(err)) == 0, "and recognised");
	ok(queue_job_get(q, 300, &j, err, sizeof(err)) == 0 && j->runs == 1 && !j->end_state &&
	   j->last_run && strstr(j->last_run, "NODE_FAIL"), "one requeued run, NODE_FAIL kept (%s)",
	   j && j->last_run ? j->last_run : "-");
	queue_job_free(j);
	j = NULL;
	ok(queue_job_end(q, &(struct queue_job_end_rec){ { 300, -1, -1, NULL, NULL, NULL }, "COMPLETED", 0, NULL, 20 },
			 &dup, err, sizeof(err)) == 0 && !dup, "the final run's end is stored");
	ok(queue_job_set_end_state(q, 300, "TIMEOUT", 0, err, sizeof(err)) == 0, "state corrected");
	ok(queue_job_get(q, 300, &j, err, sizeof(err)) == 0 && !strcmp(j->end_state, "TIMEOUT"),
	   "end state TIMEOUT");
	queue_job_free(j);

	_tasks("1-8%4", "1,2,3,4,5,6,7,8");
	_tasks("3,5-7", "3,5,6,7");
	_tasks("0-9:3", "0,3,6,9");
	_tasks("2", "2");
	_tasks("", "");
	_tasks("x", "");
	_tasks("4-2", "");
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
