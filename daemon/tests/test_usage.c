/*
 * test_usage.c - what a user has live, for the per-user limits
 * (queue_user_usage), and whether another user has a request on a job
 * (queue_job_other_uid): the counts, and their cost, which must grow with
 * that user's live requests only, not with the history or other users.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "queue.h"
#include "queue_private.h"	/* the readers' connection, to count its steps */
#include "qtest.h"
#include "tests/tap.h"

static char _dir[] = "/tmp/test_usage_XXXXXX";
static char _db[300];

static int64_t _create(struct queue *q, int64_t uid, int64_t job)
{
	struct queue_new_request nr = { uid, uid, "u", job, "archive", "/src", "/dst", NULL, 3 };
	int64_t id = 0;
	char err[256];

	if (queue_request_create(q, &nr, &id, err, sizeof(err)) < 0)
		printf("# create: %s\n", err);
	return id;
}

/* VM steps of one usage read for uid (on the readers' connection). */
static long _steps(struct queue *q, uid_t uid, struct queue_usage *u)
{
	char err[256];

	qtest_vm_steps(q->rdb);
	if (queue_user_usage(q, uid, u, err, sizeof(err)) < 0)
		printf("# usage: %s\n", err);
	return qtest_vm_steps(q->rdb);
}

/* n requests of uid in one batch, cancelled at once when cancel (history). */
static void _many(struct queue *q, int64_t uid, int n, int cancel)
{
	char err[256];

	queue_batch_begin(q);
	for (int i = 0; i < n; i++) {
		int64_t id = _create(q, uid, 0);

		if (cancel)
			queue_request_set_state(q, id, -1, QS_CANCELLED, "by test", err, sizeof(err));
	}
	queue_batch_end(q, err, sizeof(err));
}

int main(void)
{
	struct queue *q;
	struct queue_usage u;
	char err[512];
	int64_t a, b, c;
	long s1, s2;

	if (!mkdtemp(_dir))
		return 77;
	snprintf(_db, sizeof(_db), "%s/q.db", _dir);
	q = queue_open(_db, err, sizeof(err));
	ok(q != NULL, "open (%s)", q ? "ok" : err);
	if (!q)
		return tap_done();

	a = _create(q, 7001, 55);
	b = _create(q, 7001, 0);
	c = _create(q, 7001, 0);
	queue_request_totals(q, a, 10, 1000, 2, err, sizeof(err));
	queue_request_totals(q, b, 5, 500, 0, err, sizeof(err));
	queue_request_set_state(q, c, -1, QS_CANCELLED, "by test", err, sizeof(err));
	ok(queue_user_usage(q, 7001, &u, err, sizeof(err)) == 0 && u.requests == 2 &&
	   u.items == 13 && u.bytes == 1500,
	   "live: 2 requests, 13 files and 1500 bytes not yet copied (%lld, %lld, %lld)",
	   (long long)u.requests, (long long)u.items, (long long)u.bytes);
	ok(queue_user_usage(q, 7002, &u, err, sizeof(err)) == 0 && u.requests == 0 &&
	   u.items == 0 && u.bytes == 0, "another user: nothing");
	ok(queue_job_other_uid(q, 55, 7001, err, sizeof(err)) == 0, "job 55: only 7001's");
	ok(queue_job_other_uid(q, 55, 7002, err, sizeof(err)) == 1, "job 55: 7001's, not 7002's");
	ok(queue_job_other_uid(q, 56, 7002, err, sizeof(err)) == 0, "job 56: nobody's");

	/* Cost: 7002 has one live request; then 4,000 finished ones of its own and
	   4,000 live ones of another user. Its count reads the same rows. */
	_create(q, 7002, 0);
	s1 = _steps(q, 7002, &u);
	ok(u.requests == 1, "7002: one live request");
	_many(q, 7002, 4000, 1);
	_many(q, 7003, 4000, 0);
	s2 = _steps(q, 7002, &u);
	printf("# usage read: %ld steps, then %ld with 8,000 more rows\n", s1, s2);
	ok(u.requests == 1, "7002: still one live request");
	ok(s2 <= s1 + 2, "the count reads the user's live requests only (%ld, then %ld steps)",
	   s1, s2);
	ok(queue_user_usage(q, 7003, &u, err, sizeof(err)) == 0 && u.requests == 4000,
	   "7003: 4,000 live");

	queue_close(q);
	qtest_remove_db(_db, _dir);
	return tap_done();
}
