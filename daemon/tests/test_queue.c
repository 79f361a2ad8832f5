/* test_queue.c - the state machine, transactions, recovery and the audit trail. */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <time.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "queue.h"
#include "queue_pool.h"
#include "queue_private.h"	/* the connections, for _test_claim_cost */
#include "qtest.h"
#include "tests/tap.h"

static char _dir[] = "/tmp/test_queue_XXXXXX";
static char _db[300];

static int64_t _create_as(struct queue *q, int64_t uid, const char *user, const char *action,
			  int64_t job, int retries)
{
	struct queue_new_request nr = { uid, uid, user, job, action, "/src", "/dst", NULL, retries };
	int64_t id = 0;
	char err[256];

	if (queue_request_create(q, &nr, &id, err, sizeof(err)) < 0)
		printf("# create: %s\n", err);
	return id;
}

static int64_t _create(struct queue *q, const char *action, int64_t job, int retries)
{
	return _create_as(q, 1001, "alice", action, job, retries);
}

/*
 * Reads from another thread do not wait for the main loop's batch: while this
 * thread holds a batch open (its lock and transaction), a reader thread's
 * counts and lists answer from the last commit, without the batch's rows.
 * The batch stays open until the reader has answered, or 20 s have passed:
 * a reader that waits for the batch's lock (as before the readers'
 * connection) is caught by the timeout, on any machine.
 */
struct _reader {
	struct queue *q;
	int64_t queued;      /* queued requests the reader counted, -1 = failed */
	int listed;          /* requests of job 4242 the reader listed */
};

static int _count_listed(const struct queue_request *r, void *arg)
{
	(void)r;
	(*(int *)arg)++;
	return 0;
}

static void *_reader_main(void *arg)
{
	struct _reader *rd = arg;
	struct queue_filter f = { .uid = -1, .job_id = 4242, .state = -1, .limit = 0 };
	int64_t counts[QS_COUNT];
	char err[256];

	rd->queued = queue_count_states(rd->q, counts, err, sizeof(err)) < 0 ? -1 : counts[QS_QUEUED];
	if (queue_request_list(rd->q, &f, _count_listed, &rd->listed, err, sizeof(err)) < 0)
		rd->queued = -1;
	return NULL;
}

static void _test_reader(struct queue *q)
{
	struct _reader rd = { q, -2, 0 };
	struct queue_filter f = { .uid = -1, .job_id = 4242, .state = -1, .limit = 0 };
	int64_t counts[QS_COUNT], before;
	struct timespec until;
	pthread_t t;
	char err[256];
	int mine = 0, joined;

	ok(queue_count_states(q, counts, err, sizeof(err)) == 0, "counted before the batch");
	before = counts[QS_QUEUED];
	ok(queue_batch_begin(q) == 0, "batch open");
	_create(q, "stage_in", 4242, 1);
	queue_request_list(q, &f, _count_listed, &mine, err, sizeof(err));
	ok(mine == 1, "inside its batch, the writer reads its own new request");
	pthread_create(&t, NULL, _reader_main, &rd);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 20;
	joined = pthread_timedjoin_np(t, NULL, &until) == 0;
	ok(joined, "a reader thread answers while the batch is open");
	ok(rd.queued == before && rd.listed == 0,
	   "from the last commit: %lld queued (want %lld), %d of the batch's requests (want 0)",
	   (long long)rd.queued, (long long)before, rd.listed);
	ok(queue_batch_end(q, err, sizeof(err)) == 0, "batch committed");
	if (!joined)
		pthread_join(t, NULL);
	rd.queued = -2;
	rd.listed = 0;
	pthread_create(&t, NULL, _reader_main, &rd);
	pthread_join(t, NULL);
	ok(rd.queued == before + 1 && rd.listed == 1, "after the commit the reader sees it");
}

/* Burst-buffer sizes: a job's reservation, its inputs as counted, what a pool holds. */
static void _test_pool(struct queue *q)
{
	int64_t size = -1, need = -1, held = -1, a, b;
	int counted = -1, nreq = -1;
	char *pool = NULL, err[256];

	ok(queue_pool_get(q, 900, &size, &pool, err, sizeof(err)) == 0 && size == 0 && !pool,
	   "pool: a job without capacity= has no size");
	ok(queue_pool_set(q, 900, "/scratch", 1000, err, sizeof(err)) == 0 &&
	   queue_pool_get(q, 900, &size, &pool, err, sizeof(err)) == 1 && size == 1000 &&
	   pool && !strcmp(pool, "/scratch"), "pool: the reservation is kept");
	free(pool);
	a = _create(q, "stage_in", 900, 0);
	b = _create(q, "stage_in", 900, 0);
	_create(q, "archive", 900, 0);
	ok(queue_pool_need(q, 900, &need, &counted, &nreq, err, sizeof(err)) == 0 && need == 0 &&
	   counted == 0 && nreq == 2, "pool: two stage_in requests, none counted yet");
	queue_request_totals(q, a, 2, 700, 0, err, sizeof(err));
	queue_request_totals(q, b, 1, 400, 0, err, sizeof(err));
	ok(queue_pool_need(q, 900, &need, &counted, &nreq, err, sizeof(err)) == 0 && need == 1100 &&
	   counted == 2, "pool: the job's inputs are the sum of its stage_in totals (archives aside)");
	queue_request_set_state(q, b, -1, QS_CANCELLED, "by test", err, sizeof(err));
	ok(queue_pool_need(q, 900, &need, &counted, &nreq, err, sizeof(err)) == 0 && need == 700,
	   "pool: a cancelled stage_in no longer counts");
	ok(queue_pool_held(q, "/scratch", &held, err, sizeof(err)) == 0 && held == 0,
	   "pool: nothing copied, nothing held");
	{
		struct queue_audit au = { 900, 1001, "/src/f", "/dst/f", "xxh128:aa", 700, 1, 2 };

		queue_item_start(q, a, &(struct queue_item_meta){ "f", "file", 700, 5, 0644 }, err,
				 sizeof(err));
		queue_item_copied(q, a, "f", "xxh128:aa", err, sizeof(err));
		queue_item_done(q, a, "f", "xxh128:aa", &au, err, sizeof(err));
	}
	ok(queue_pool_held(q, "/scratch", &held, err, sizeof(err)) == 0 && held == 700 &&
	   queue_pool_held(q, "/elsewhere", &b, err, sizeof(err)) == 0 && b == 0,
	   "pool: what was copied for the job is held by its pool only");
	ok(queue_pool_torn_down(q, 900, err, sizeof(err)) == 0 &&
	   queue_pool_held(q, "/scratch", &held, err, sizeof(err)) == 0 && held == 0 &&
	   queue_pool_get(q, 900, &size, &pool, err, sizeof(err)) == 1,
	   "pool: teardown keeps the record, held by nothing");
	free(pool);
}

/* The id the next claim picks, or -1; the claimed request stays running. */
static int64_t _claim_id(struct queue *q, int64_t now)
{
	struct queue_request *r = NULL;
	char err[256];
	int64_t id = -1;

	if (queue_request_claim(q, now, &r, err, sizeof(err)) == 0)
		id = r->id;
	queue_request_free(r);
	return id;
}

/*
 * Fair dispatch: stage-in first, then the user with the fewest requests in
 * flight, then the oldest. Uses its own job ids and uids so the states the
 * rest of this file checks are unaffected (all claimed here end cancelled).
 */
static void _test_fair(struct queue *q)
{
	int64_t a1, a2, a3, b1, s1, got[4];
	struct queue_request *none = NULL;
	char err[256];

	a1 = _create_as(q, 2001, "usera", "archive", 501, 3);
	a2 = _create_as(q, 2001, "usera", "archive", 502, 3);
	a3 = _create_as(q, 2001, "usera", "archive", 503, 3);
	b1 = _create_as(q, 2002, "userb", "archive", 601, 3);
	s1 = _create_as(q, 2001, "usera", "stage_in", 504, 3);
	for (int i = 0; i < 4; i++)
		got[i] = _claim_id(q, 5000);
	ok(got[0] == s1, "fair: the stage-in, queued last, is claimed first");
	ok(got[1] == b1, "fair: then the user with nothing in flight, though its request is newer");
	ok(got[2] == a1, "fair: at equal shares, the oldest request");
	ok(got[3] == a2, "fair: the other user has nothing queued: the next of the busy user");
	ok(queue_request_claim_ex(q, 5000, 0, &none, err, sizeof(err)) == 1,
	   "fair: with after-job copies barred, a3 waits");
	queue_request_free(none);
	for (int i = 0; i < 4; i++)
		queue_request_set_state(q, got[i], -1, QS_CANCELLED, "by test", err, sizeof(err));
	queue_request_set_state(q, a3, -1, QS_CANCELLED, "by test", err, sizeof(err));

	/* One worker: nothing is in flight at any claim, so users take turns. */
	{
		int64_t c1 = _create_as(q, 3001, "userc", "archive", 701, 3);
		int64_t c2 = _create_as(q, 3001, "userc", "archive", 702, 3);
		int64_t c3 = _create_as(q, 3001, "userc", "archive", 703, 3);
		int64_t d1 = _create_as(q, 3002, "userd", "archive", 801, 3);
		int64_t d2 = _create_as(q, 3002, "userd", "archive", 802, 3);
		int64_t want[5] = { c1, d1, c2, d2, c3 }, seq[5];
		int in_turn = 1;

		for (int i = 0; i < 5; i++) {
			seq[i] = _claim_id(q, 6000);
			queue_request_set_state(q, seq[i], -1, QS_CANCELLED, "by test", err,
						sizeof(err));
			if (seq[i] != want[i]) {
				in_turn = 0;
				printf("# claim %d: got request %lld, want %lld\n", i, (long long)seq[i],
				     (long long)want[i]);
			}
		}
		ok(in_turn, "fair: with one worker, two users' archives alternate");
	}
}

/* SQLite's virtual-machine steps, counted in tens by a progress handler:
   what a statement costs, the same on a fast machine and a slow one. */
static int _step_t(void *arg)
{
	++*(long *)arg;
	return 0;
}

static long _steps_of_claim(struct queue *q, int64_t now, int64_t *id)
{
	long k = 0;

	sqlite3_progress_handler(q->db, 10, _step_t, &k);
	sqlite3_progress_handler(q->rdb, 10, _step_t, &k);
	*id = _claim_id(q, now);
	sqlite3_progress_handler(q->db, 0, NULL, NULL);
	sqlite3_progress_handler(q->rdb, 0, NULL, NULL);
	return k;
}

static int _keep_one(const struct queue_request *r, void *arg)
{
	*(int64_t *)arg = r->id;
	return 0;
}

static long _steps_of_list_one(struct queue *q, int64_t id, int64_t *got)
{
	struct queue_filter f = { .uid = -1, .state = -1, .id_min = id, .id_max = id };
	char err[256];
	long k = 0;

	*got = 0;
	sqlite3_progress_handler(q->rdb, 10, _step_t, &k);
	queue_request_list(q, &f, _keep_one, got, err, sizeof(err));
	sqlite3_progress_handler(q->rdb, 0, NULL, NULL);
	return k;
}

/*
 * A claim, and a list by id range, cost the same whatever the queue holds:
 * counted in SQLite's steps, not timed. Another user's 4,000 queued archives
 * are added between two measurements; a claim that read every queued row
 * (as the grouped query before requests_claim did) costs tens of thousands
 * of steps more, and so does a list whose range does not bound the scan.
 */
static void _test_claim_cost(struct queue *q)
{
	int64_t s1, s2, got1, got2, l1, l2, first = 0, id;
	long c1, c2, r1, r2;
	char err[256];
	int n = 0;

	first = _create_as(q, 5002, "userf", "archive", 0, 3);
	s1 = _create_as(q, 5001, "usere", "stage_in", 901, 3);
	c1 = _steps_of_claim(q, 7000, &got1);
	queue_request_set_state(q, s1, -1, QS_CANCELLED, "by test", err, sizeof(err));
	r1 = _steps_of_list_one(q, s1, &l1);
	ok(queue_batch_begin(q) == 0, "claim cost: a batch for 4,000 archives");
	for (int i = 0; i < 4000; i++)
		n += _create_as(q, 5002, "userf", "archive", 0, 3) > 0;
	ok(queue_batch_end(q, err, sizeof(err)) == 0 && n == 4000, "claim cost: 4,000 queued");
	s2 = _create_as(q, 5001, "usere", "stage_in", 902, 3);
	c2 = _steps_of_claim(q, 7000, &got2);
	r2 = _steps_of_list_one(q, s1, &l2);
	printf("# claim: %ld and %ld tens of steps; list of one: %ld and %ld\n", c1, c2, r1, r2);
	ok(got1 == s1 && got2 == s2, "claim cost: the stage-ins are claimed before the archives");
	ok(c2 <= c1 + 1, "claim cost: 4,000 more queued requests add no steps to a claim");
	ok(l1 == s1 && l2 == s1 && r2 <= r1 + 1,
	   "claim cost: listing one request by its id reads that row, not the table");
	queue_request_set_state(q, s2, -1, QS_CANCELLED, "by test", err, sizeof(err));
	queue_batch_begin(q);
	for (id = first; first && id <= s2; id++)
		queue_request_set_state(q, id, -1, QS_CANCELLED, "by test", err, sizeof(err));
	queue_batch_end(q, err, sizeof(err));
}

/* A list whose callback lists again with the same statement (the readers'
   statements are cached): the outer list must see every row once. */
struct _nested {
	struct queue *q;
	int outer, inner;
};

static int _count_one(const struct queue_request *r, void *arg)
{
	(void)r;
	++*(int *)arg;
	return 0;
}

static int _list_again(const struct queue_request *r, void *arg)
{
	struct _nested *n = arg;
	struct queue_filter f = { .uid = -1, .state = -1, .id_min = r->id, .id_max = r->id };
	char err[256];

	n->outer++;
	queue_request_list(n->q, &f, _count_one, &n->inner, err, sizeof(err));
	return 0;
}

static void _test_nested_list(struct queue *q)
{
	struct queue_filter f = { .uid = 6001, .state = -1 };
	struct _nested n = { q, 0, 0 };
	char err[256];
	int64_t id[3];

	for (int i = 0; i < 3; i++)
		id[i] = _create_as(q, 6001, "userg", "archive", 0, 3);
	ok(queue_request_list(q, &f, _list_again, &n, err, sizeof(err)) == 0 && n.outer == 3 &&
	   n.inner == 3, "a list inside a list's callback: 3 rows outside (got %d), 3 inside "
	   "(got %d)", n.outer, n.inner);
	for (int i = 0; i < 3; i++)
		queue_request_set_state(q, id[i], -1, QS_CANCELLED, "by test", err, sizeof(err));
}

static enum queue_state _state(struct queue *q, int64_t id)
{
	struct queue_request *r = NULL;
	enum queue_state s = QS_COUNT;

	if (queue_request_get(q, id, &r, NULL, 0) == 0) {
		s = r->state;
		queue_request_free(r);
	}
	return s;
}

static int _audit_rows(int64_t req)
{
	sqlite3 *db;
	sqlite3_stmt *st;
	int n = -1;

	sqlite3_open(_db, &db);
	sqlite3_prepare_v2(db, "SELECT count(*) FROM audit WHERE request_id=?1", -1, &st, NULL);
	sqlite3_bind_int64(st, 1, req);
	if (sqlite3_step(st) == SQLITE_ROW)
		n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return n;
}

/* One integer from the database file, read with a connection of the test's own. */
static int64_t _sql_int(const char *sql)
{
	sqlite3 *db;
	sqlite3_stmt *st;
	int64_t v = -1;

	if (sqlite3_open_v2(_db, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
		if (sqlite3_step(st) == SQLITE_ROW)
			v = sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
	}
	sqlite3_close(db);
	return v;
}

static int64_t _files_done(struct queue *q, int64_t id)
{
	struct queue_request *r = NULL;
	int64_t v = -1;
	char err[256];

	if (queue_request_get(q, id, &r, err, sizeof(err)) == 0)
		v = r->files_done * 1000000 + r->bytes_done;
	queue_request_free(r);
	return v;
}

/*
 * A mover's verified files stored as a run (queue_items_files_done): each
 * counted once, redone ones refreshed and not counted, an item a worker
 * started counted when it becomes done, a checksum mismatch stopping the
 * run at that file, and the same inside a batch.
 */
static void _test_files_done(struct queue *q)
{
	struct queue_file_done f[3] = {
		{ "a", "x:1", "x:1", 10, 1, 0644, { 0, 1001, "/s/a", "/d/a", "x:1", 10, 1, 2 } },
		{ "b", "x:2", "x:2", 20, 1, 0644, { 0, 1001, "/s/b", "/d/b", "x:2", 20, 1, 2 } },
		{ "c", "x:3", "x:3", 30, 1, 0644, { 0, 1001, "/s/c", "/d/c", "x:3", 30, 1, 2 } },
	};
	int64_t id = _create(q, "archive", 0, 3), id2;
	char err[256] = "", sql[128], sql2[128];
	int stored = -1;

	ok(queue_items_files_done(q, id, f, 3, &stored, err, sizeof(err)) == 0 && stored == 3,
	   "three verified files stored as one run%s%s", *err ? ": " : "", err);
	ok(_files_done(q, id) == 3 * 1000000 + 60, "counted once each: 3 files, 60 bytes (%lld)",
	   (long long)_files_done(q, id));
	ok(queue_items_files_done(q, id, f, 3, &stored, err, sizeof(err)) == 0 && stored == 3 &&
	   _files_done(q, id) == 3 * 1000000 + 60, "reported again: refreshed, not counted again");
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM audit WHERE request_id=%lld", (long long)id);
	snprintf(sql2, sizeof(sql2), "SELECT sum(attempts) FROM items WHERE request_id=%lld",
		 (long long)id);
	ok(_sql_int(sql) == 3 && _sql_int(sql2) == 6, "one audit row per file (%lld); the second "
	   "report counted as an attempt (%lld)", (long long)_sql_int(sql), (long long)_sql_int(sql2));

	id2 = _create(q, "archive", 0, 3);
	queue_item_start(q, id2, &(struct queue_item_meta){ "b", "file", 20, 1, 0644 }, err,
			 sizeof(err));
	f[2].cks_dst = "x:bad";
	ok(queue_items_files_done(q, id2, f, 3, &stored, err, sizeof(err)) == 1 && stored == 2 &&
	   strstr(err, "'c'") != NULL, "a mismatch stops the run at that file: 2 stored (%s)", err);
	ok(_files_done(q, id2) == 2 * 1000000 + 30,
	   "the started item is counted when done, the refused one is not (%lld)",
	   (long long)_files_done(q, id2));
	snprintf(sql, sizeof(sql), "SELECT count(*) FROM items WHERE request_id=%lld AND "
		 "relpath='c'", (long long)id2);
	ok(_sql_int(sql) == 0, "the refused file is not stored");
	f[2].cks_dst = "x:3";
	ok(queue_batch_begin(q) == 0, "batch");
	ok(queue_items_files_done(q, id2, f + 2, 1, &stored, err, sizeof(err)) == 0 && stored == 1,
	   "inside a batch");
	ok(queue_batch_end(q, err, sizeof(err)) == 0 && _files_done(q, id2) == 3 * 1000000 + 60,
	   "... counted once the batch commits");
}

/* queue_atomic_*: all or none, alone and inside a batch. */
static void _test_atomic(struct queue *q)
{
	char err[256] = "";
	int64_t before = _sql_int("SELECT count(*) FROM requests"), a, b;
	int t;

	t = queue_atomic_begin(q);
	a = _create(q, "archive", 0, 3);
	b = _create(q, "archive", 0, 3);
	ok(t == 1 && a > 0 && b > 0, "atomic: two requests made in a transaction of its own");
	ok(queue_atomic_end(q, t, 0, err, sizeof(err)) == 0 &&
	   _sql_int("SELECT count(*) FROM requests") == before, "rolled back: neither is kept");
	t = queue_atomic_begin(q);
	_create(q, "archive", 0, 3);
	_create(q, "archive", 0, 3);
	ok(queue_atomic_end(q, t, 1, err, sizeof(err)) == 0 &&
	   _sql_int("SELECT count(*) FROM requests") == before + 2, "committed: both are kept");
	ok(queue_batch_begin(q) == 0, "batch");
	_create(q, "archive", 0, 3);
	t = queue_atomic_begin(q);
	_create(q, "archive", 0, 3);
	ok(t == 0 && queue_atomic_end(q, t, 0, err, sizeof(err)) == 0, "atomic inside a batch: "
	   "rolled back");
	ok(queue_batch_end(q, err, sizeof(err)) == 0 &&
	   _sql_int("SELECT count(*) FROM requests") == before + 3,
	   "the batch keeps its own change, not the rolled-back one");
}

int main(void)
{
	struct queue *q;
	struct queue_request *r = NULL;
	char err[512], *e = NULL;
	const char *st;
	int64_t id, id2, counts[QS_COUNT], jobs[4];
	int final, nr, ni, dup;
	struct queue_audit au = { 7, 1001, "/src/f", "/dst/f", "xxh128:aa", 10, 1, 2 };

	if (!mkdtemp(_dir))
		return 77;
	snprintf(_db, sizeof(_db), "%s/q.db", _dir);

	/* The state machine as a table. */
	ok(queue_transition_ok(QS_QUEUED, QS_RUNNING), "queued -> running");
	ok(!queue_transition_ok(QS_QUEUED, QS_DONE), "queued -/-> done (no done without running)");
	ok(!queue_transition_ok(QS_RUNNING, QS_DONE), "running -/-> done (must verify first)");
	ok(queue_transition_ok(QS_RUNNING, QS_VERIFYING) && queue_transition_ok(QS_VERIFYING, QS_DONE),
	   "running -> verifying -> done");
	ok(!queue_transition_ok(QS_DONE, QS_CANCELLED) && !queue_transition_ok(QS_DONE, QS_QUEUED),
	   "done is terminal");
	ok(queue_transition_ok(QS_FAILED_FINAL, QS_QUEUED) && queue_transition_ok(QS_CANCELLED, QS_QUEUED),
	   "failed_final and cancelled may be retried");
	ok(queue_transition_ok(QS_RUNNING, QS_CANCELLED) && queue_transition_ok(QS_QUEUED, QS_CANCELLED),
	   "unfinished requests may be cancelled");

	q = queue_open(_db, err, sizeof(err));
	ok(q != NULL, "open creates the database (%s)", q ? "ok" : err);
	if (!q)
		return tap_done();
	id = _create(q, "stage_in", 7, 2);
	ok(id > 0 && _state(q, id) == QS_QUEUED, "new request is queued");
	ok(queue_request_set_state(q, id, -1, QS_DONE, NULL, err, sizeof(err)) == 1 &&
	   _state(q, id) == QS_QUEUED, "queued -> done refused, nothing changed");

	ok(queue_request_claim(q, 100, &r, err, sizeof(err)) == 0 && r->id == id &&
	   r->state == QS_RUNNING && r->attempts == 1, "claim: running, attempt 1");
	queue_request_free(r);
	ok(queue_request_claim(q, 100, &r, err, sizeof(err)) == 1, "nothing else to claim");

	/* Items: nothing is done without a matching checksum. */
	ok(queue_item_start(q, id, &(struct queue_item_meta){ "a/f", "file", 10, 5, 0644 }, err,
			    sizeof(err)) == 0, "item start");
	ok(queue_item_done(q, id, "a/f", "xxh128:bb", &au, err, sizeof(err)) < 0,
	   "item done refused before a source checksum is known");
	ok(queue_item_copied(q, id, "a/f", "xxh128:aa", err, sizeof(err)) == 0, "item copied");
	ok(queue_item_done(q, id, "a/f", "xxh128:bb", &au, err, sizeof(err)) < 0 &&
	   strstr(err, "does not match"), "item done refused on checksum mismatch");
	ok(queue_item_done(q, id, "a/f", "xxh128:aa", &au, err, sizeof(err)) == 0, "item verified");
	ok(queue_request_get(q, id, &r, err, sizeof(err)) == 0 && r->files_done == 1 &&
	   r->bytes_done == 10, "request counters advanced");
	queue_request_free(r);
	ok(_audit_rows(id) == 1, "one audit row");

	/* A second file left half-done by a crash. */
	queue_item_start(q, id, &(struct queue_item_meta){ "b", "file", 3, 5, 0644 }, err,
			 sizeof(err));
	queue_item_copied(q, id, "b", "xxh128:cc", err, sizeof(err));
	queue_request_set_state(q, id, QS_RUNNING, QS_VERIFYING, NULL, err, sizeof(err));
	queue_close(q);
	q = queue_open(_db, err, sizeof(err));
	ok(q && queue_recover(q, &nr, &ni, err, sizeof(err)) == 0 && nr == 1 && ni == 1,
	   "recovery after reopen: 1 request, 1 item back to queued");
	ok(_state(q, id) == QS_QUEUED, "verifying request is queued again");
	ok(queue_request_claim(q, 200, &r, err, sizeof(err)) == 0 && r->attempts == 2 &&
	   r->files_done == 1 && r->bytes_done == 10, "reclaimed: attempt 2, verified work kept");
	queue_request_free(r);
	/* The redo of an already-audited file must not duplicate the audit row. */
	queue_item_start(q, id, &(struct queue_item_meta){ "a/f", "file", 10, 5, 0644 }, err,
			 sizeof(err));
	queue_item_copied(q, id, "a/f", "xxh128:aa", err, sizeof(err));
	ok(queue_item_done(q, id, "a/f", "xxh128:aa", &au, err, sizeof(err)) == 0 &&
	   _audit_rows(id) == 1, "redone file: still one audit row");

	/* Failure, backoff, final. */
	ok(queue_request_fail(q, id, &(struct queue_failure){ "disk full", 1, 30, 1000 }, &final,
			      err, sizeof(err)) == 0 &&
	   !final && _state(q, id) == QS_FAILED_RETRYABLE, "retryable failure");
	ok(queue_request_get(q, id, &r, err, sizeof(err)) == 0 && r->next_attempt_at == 1000 + 60,
	   "backoff doubles: attempt 2 waits 60 s");
	queue_request_free(r);
	ok(queue_requeue_due(q, 1059, err, sizeof(err)) == 0 && _state(q, id) == QS_FAILED_RETRYABLE,
	   "not requeued before its time");
	ok(queue_requeue_due(q, 1060, err, sizeof(err)) == 1 && _state(q, id) == QS_QUEUED,
	   "requeued when due");
	queue_request_claim(q, 1060, &r, err, sizeof(err));
	queue_request_free(r);
	ok(queue_request_fail(q, id, &(struct queue_failure){ "disk full", 1, 30, 1100 }, &final,
			      err, sizeof(err)) == 0 &&
	   final && _state(q, id) == QS_FAILED_FINAL, "out of retries: failed_final");
	ok(queue_request_retry(q, id, err, sizeof(err)) == 0 && _state(q, id) == QS_QUEUED,
	   "retry of failed_final: queued");
	ok(queue_request_get(q, id, &r, err, sizeof(err)) == 0 && r->attempts == 0, "retry resets attempts");
	queue_request_free(r);
	ok(queue_request_retry(q, id, err, sizeof(err)) == 1, "retry of a queued request refused");

	/* Permission-type failures are final at once. */
	id2 = _create(q, "stage_in", 7, 3);
	queue_request_claim(q, 2000, &r, err, sizeof(err));
	queue_request_free(r);
	queue_request_claim(q, 2000, &r, err, sizeof(err));
	queue_request_free(r);
	ok(queue_request_fail(q, id2, &(struct queue_failure){ "Permission denied", 0, 30, 2000 },
			      &final, err, sizeof(err)) == 0 &&
	   final, "non-retryable failure is final");

	/* Job summary and cancel. */
	ok(queue_job_stage_in(q, 7, &st, &e, err, sizeof(err)) == 0 && strcmp(st, "failed") == 0 &&
	   e && strstr(e, "Permission denied"), "job stage_in summary: failed with the error");
	free(e);
	ok(queue_request_set_state(q, id, -1, QS_CANCELLED, "by test", err, sizeof(err)) == 0 &&
	   _state(q, id) == QS_CANCELLED, "cancel a queued request");
	ok(queue_job_stage_in(q, 99, &st, &e, err, sizeof(err)) == 0 && strcmp(st, "none") == 0,
	   "unknown job: none");

	/* Job-end events: stored once. */
	ok(queue_job_end(q, &(struct queue_job_end_rec){ { 7, 1001, 1001, "alice", "/w", "{}" }, "COMPLETED", 0, NULL, 3000 },
			 &dup, err, sizeof(err)) == 0 && !dup, "job end stored");
	ok(queue_job_end(q, &(struct queue_job_end_rec){ { 7, 1001, 1001, "alice", "/w", "{}" }, "FAILED", 1, NULL, 3001 },
			 &dup, err, sizeof(err)) == 0 && dup, "second job end is a duplicate");
	ok(queue_job_ends_pending(q, jobs, 4, err, sizeof(err)) == 1 && jobs[0] == 7, "one pending end");
	ok(queue_job_end_processed(q, 7, err, sizeof(err)) == 0 &&
	   queue_job_ends_pending(q, jobs, 4, err, sizeof(err)) == 0, "processed end not pending");
	{
		struct queue_job *j = NULL;

		ok(queue_job_get(q, 7, &j, err, sizeof(err)) == 0 && strcmp(j->end_state, "COMPLETED") == 0,
		   "the first event's state is kept");
		queue_job_free(j);
		/* Refusal and notes (schema 2). */
		ok(queue_job_end(q, &(struct queue_job_end_rec){ { 17, 1001, 1001, "alice", "/w", "{}" }, "FAILED", 1, "'r' is a symbolic link", 3002 },
			 &dup, err, sizeof(err)) == 0 &&
		   queue_job_add_note(q, 17, "{\"line\":3,\"reason\":\"x\"}", err, sizeof(err)) == 0 &&
		   queue_job_add_note(q, 17, "{\"line\":3,\"reason\":\"x\"}", err, sizeof(err)) == 0 &&
		   queue_job_add_note(q, 17, "{\"line\":4,\"reason\":\"y\"}", err, sizeof(err)) == 0 &&
		   queue_job_get(q, 17, &j, err, sizeof(err)) == 0 && j->refused &&
		   strcmp(j->refused, "'r' is a symbolic link") == 0 && j->notes &&
		   strcmp(j->notes, "[{\"line\":3,\"reason\":\"x\"},{\"line\":4,\"reason\":\"y\"}]") == 0,
		   "refusal stored; notes appended once each (%s)", j ? j->notes : "?");
		queue_job_free(j);
	}
	ok(queue_count_states(q, counts, err, sizeof(err)) == 0 && counts[QS_CANCELLED] == 1 &&
	   counts[QS_FAILED_FINAL] == 1, "counts by state");

	/* Drain checkpoint. */
	id = _create(q, "archive", 8, 3);
	queue_request_claim(q, 4000, &r, err, sizeof(err));
	queue_request_free(r);
	queue_item_start(q, id, &(struct queue_item_meta){ "x", "file", 1, 1, 0600 }, err,
			 sizeof(err));
	ok(queue_request_checkpoint(q, id, err, sizeof(err)) == 0 && _state(q, id) == QS_QUEUED,
	   "checkpoint: running -> queued");
	queue_request_set_state(q, id, -1, QS_CANCELLED, "by test", err, sizeof(err));
	_test_fair(q);
	_test_claim_cost(q);
	_test_nested_list(q);
	_test_pool(q);
	_test_reader(q);
	_test_files_done(q);
	_test_atomic(q);
	queue_close(q);
	qtest_remove_db(_db, _dir);
	return tap_done();
}
