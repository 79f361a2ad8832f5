/*
 * test_history.c - HistoryRetention and AuditRetention in the queue: which
 * rows go (a finished request's per-file rows, old audit rows), which never
 * do (unfinished requests, done archives, the request rows), in slices of
 * the size asked, without reading again what is already pruned.
 */
#include "config.h"

#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "queue.h"
#include "queue_cleanup.h"
#include "queue_history.h"
#include "queue_labels.h"
#include "queue_private.h"
#include "qtest.h"
#include "tests/tap.h"

#define BEFORE 1000

/* A number from the database (-1 if the select fails). */
static int64_t _num(struct queue *q, const char *sql)
{
	sqlite3_stmt *st;
	int64_t v = -1;

	if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK)
		return -1;
	if (sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	return v;
}

/* Rows of request id in every table the prune empties. */
static int64_t _rows_of(struct queue *q, int64_t id)
{
	static const char *const t[] = { "items", "shards", "shard_files", "shard_ranges",
		"s3_uploads", "s3_upload_parts" };
	int64_t n = 0;

	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		char sql[128];

		snprintf(sql, sizeof(sql), "SELECT count(*) FROM %s WHERE request_id = %lld", t[i],
			 (long long)id);
		n += _num(q, sql);
	}
	return n;
}

/*
 * Eleven requests, each with 3-13 items: ids 1 (done stage_in), 3 (failed
 * archive), 4 (cancelled stage_out), 8 (done purge) finished before BEFORE;
 * 2 (a done archive) too; 5 finished after it; 6, 7, 9 not finished; 10 a
 * done stage_in of job 20, whose end is not processed yet (its input
 * cleanup needs the items); 11 a done stage_in without a job, last changed
 * at time 0.
 */
static int _seed(struct queue *q)
{
	char err[256] = "";

	if (qp_exec(q, "INSERT INTO requests (id, uid, gid, user, job_id, action, source, state,"
		    " created, updated) VALUES"
		    " (1, 1001, 1, 'u', 11, 'stage_in', '/s', 'done', 0, 100),"
		    " (2, 1001, 1, 'u', 12, 'archive', '/s', 'done', 0, 100),"
		    " (3, 1001, 1, 'u', 13, 'archive', '/s', 'failed_final', 0, 110),"
		    " (4, 1001, 1, 'u', 14, 'stage_out', '/s', 'cancelled', 0, 120),"
		    " (5, 1001, 1, 'u', 15, 'stage_in', '/s', 'done', 0, 5000),"
		    " (6, 1001, 1, 'u', 16, 'stage_in', '/s', 'queued', 0, 100),"
		    " (7, 1001, 1, 'u', 17, 'stage_in', '/s', 'failed_retryable', 0, 100),"
		    " (8, 1001, 1, 'u', 18, 'purge', '/s', 'running', 0, 130),"
		    " (9, 1001, 1, 'u', 19, 'stage_in', '/s', 'running', 0, 100),"
		    " (10, 1001, 1, 'u', 20, 'stage_in', '/s', 'done', 0, 100),"
		    " (11, 1001, 1, 'u', NULL, 'stage_in', '/s', 'done', 0, 0);"
		    "INSERT INTO jobs (job_id, uid, gid, user, end_processed, created, updated) VALUES"
		    " (11, 1001, 1, 'u', 1, 0, 0), (20, 1001, 1, 'u', 0, 0, 0);"
		    "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 12)"
		    " INSERT INTO items (request_id, relpath, size, state)"
		    " SELECT r, 'f' || i, i * 100, CASE WHEN i % 4 THEN 'done' ELSE 'failed' END"
		    " FROM n, (SELECT 1 AS r UNION ALL SELECT 2 UNION ALL"
		    " SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL"
		    " SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9 UNION ALL SELECT 10"
		    " UNION ALL SELECT 11)"
		    " WHERE i <= r + 2;"
		    "INSERT INTO shards (request_id, idx, updated) VALUES (1, 0, 0), (1, 1, 0),"
		    " (2, 0, 0);"
		    "INSERT INTO shard_files (request_id, relpath, idx, size) VALUES (1, 'a', 0, 1),"
		    " (1, 'b', 0, 1), (1, 'c', 1, 1), (2, 'a', 0, 1);"
		    "INSERT INTO shard_ranges (request_id, relpath, off, len, size, idx) VALUES"
		    " (1, 'big', 0, 8, 16, 0), (1, 'big', 8, 8, 16, 1);"
		    "INSERT INTO s3_uploads (request_id, relpath, upload_id, size, mtime, part_size,"
		    " started) VALUES (1, 'big', 'u1', 16, 0, 8, 0);"
		    "INSERT INTO s3_upload_parts (request_id, relpath, part, len, md5) VALUES"
		    " (1, 'big', 1, 8, 'x'), (1, 'big', 2, 8, 'y');"
		    /* The purge ends once its items are done, as a worker's do. */
		    "UPDATE requests SET state = 'done', updated = 130 WHERE id = 8;", err,
		    sizeof(err)) < 0) {
		tap_diag("seed: %s", err);
		return -1;
	}
	return 0;
}

/* Prune calls of budget until one says nothing is left (at most 100). */
static int _prune_all(struct queue *q, int budget, int64_t before, struct queue_pruned *p,
		      int64_t *most, char *err, size_t errlen)
{
	int calls = 0, r;

	*most = 0;
	do {
		int64_t rows = p->rows, reqs = p->requests;

		r = queue_history_prune(q, before, budget, p, err, errlen);
		if (p->rows - rows + (p->requests - reqs) > *most)
			*most = p->rows - rows + (p->requests - reqs);
		calls++;
	} while (r > 0 && calls < 100);
	return r < 0 ? -1 : calls;
}

static void _test_requests(struct queue *q)
{
	static const int64_t gone[] = { 1, 3, 4, 8, 11 }, kept[] = { 2, 5, 6, 7, 9, 10 };
	struct queue_pruned p = { 0 };
	struct cleanup_counts cc0, cc1;
	char err[256] = "";
	int64_t before_rows[12], most;
	int calls, bad = 0;
	long steps;

	for (int64_t i = 1; i <= 11; i++)
		before_rows[i] = _rows_of(q, i);
	queue_cleanup_counts(q, &cc0, err, sizeof(err));
	calls = _prune_all(q, 5, BEFORE, &p, &most, err, sizeof(err));
	ok(calls > 1 && calls < 100, "pruned in %d calls of at most 5 rows (%s)", calls, err);
	ok(most <= 5, "no call removed more than its budget (the most: %lld)",
	   (long long)most);
	for (size_t i = 0; i < sizeof(gone) / sizeof(gone[0]); i++)
		if (_rows_of(q, gone[i]) != 0) {
			tap_diag("request %lld: %lld rows left", (long long)gone[i],
				 (long long)_rows_of(q, gone[i]));
			bad++;
		}
	ok(bad == 0 && p.requests == 5 && p.rows == before_rows[1] + before_rows[3] +
	   before_rows[4] + before_rows[8] + before_rows[11], "the finished requests' rows are "
	   "gone (one last changed at time 0 too): 5 requests, %lld rows", (long long)p.rows);
	bad = 0;
	for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
		if (_rows_of(q, kept[i]) != before_rows[kept[i]]) {
			tap_diag("request %lld: %lld rows of %lld", (long long)kept[i],
				 (long long)_rows_of(q, kept[i]), (long long)before_rows[kept[i]]);
			bad++;
		}
	ok(bad == 0, "a done archive, a request finished after the cut, unfinished ones and "
	   "a stage_in whose job has not ended keep every row");
	ok(_num(q, "SELECT count(*) FROM requests") == 11, "every request row stays");
	ok(queue_cleanup_counts(q, &cc1, err, sizeof(err)) == 0 && cc0.files_freed > 0 &&
	   cc1.files_freed == cc0.files_freed && cc1.bytes_freed == cc0.bytes_freed,
	   "the input cleanup's counters are what they were (%lld files, %lld bytes; before "
	   "%lld, %lld)", (long long)cc1.files_freed, (long long)cc1.bytes_freed,
	   (long long)cc0.files_freed, (long long)cc0.bytes_freed);
	ok(_num(q, "SELECT count(*) FROM (SELECT state, count(*) AS n FROM requests GROUP BY"
		" state EXCEPT SELECT state, n FROM request_counts WHERE n > 0)") == 0,
	   "the counts by state still agree with the table");

	/* 4,000 old done archives: the prune must not read them to find nothing. */
	qp_exec(q, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4000)"
		" INSERT INTO requests (uid, gid, user, action, source, state, created, updated)"
		" SELECT 1001, 1, 'u', 'archive', '/s', 'done', 0, 50 FROM n", err, sizeof(err));
	qtest_vm_steps(q->db);
	ok(queue_history_prune(q, BEFORE, 5, &p, err, sizeof(err)) == 0,
	   "nothing left: the prune says so (%s)", err);
	steps = qtest_vm_steps(q->db);
	ok(steps < 200, "nothing left: %ld VM steps, past 4,000 done archives and the pruned "
	   "requests (a scan takes over 4,000)", steps);

	/* Request 5 finishes before the cut after all, job 20 ends: both go in turn. */
	qp_exec(q, "UPDATE requests SET updated = 500 WHERE id = 5;"
		"UPDATE jobs SET end_processed = 1 WHERE job_id = 20", err, sizeof(err));
	calls = _prune_all(q, 5, BEFORE, &p, &most, err, sizeof(err));
	ok(_rows_of(q, 5) == 0 && _rows_of(q, 10) == 0 && _rows_of(q, 2) == before_rows[2],
	   "a request finished later and one whose job has ended since are pruned in their "
	   "turn (%d calls)", calls);
	/* Request 1 retried and finished again: its new rows go too. */
	qp_exec(q, "INSERT INTO items (request_id, relpath, state) VALUES (1, 'again', 'done');"
		"UPDATE requests SET updated = 600 WHERE id = 1", err, sizeof(err));
	calls = _prune_all(q, 5, BEFORE, &p, &most, err, sizeof(err));
	ok(_rows_of(q, 1) == 0, "a request finished anew after its rows went is pruned again "
	   "(%d calls)", calls);
}

static void _test_audit(struct queue *q)
{
	struct queue_pruned p = { 0 };
	char err[256] = "";
	int calls = 0, r;
	int64_t most = 0;
	long steps;

	int64_t rows = -1, bytes = -1;

	qp_exec(q, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 15)"
		" INSERT INTO audit (job_id, uid, request_id, path_src, path_dst, bytes, checksum,"
		" started, ended) SELECT 1, 1001, CASE WHEN i <= 3 THEN 2 ELSE 1 END, '/s/' || i,"
		" '/d/' || i, i, 'x' || i, 0, CASE WHEN i <= 10 THEN i * 10 ELSE 5000 END FROM n",
		err, sizeof(err));
	queue_label_audit(q, 2, &rows, &bytes, err, sizeof(err));
	ok(rows == 3 && bytes == 6, "the done archive's verified files, from its audit rows: "
	   "%lld, %lld bytes", (long long)rows, (long long)bytes);
	do {
		int64_t a = p.audit;

		r = queue_audit_prune(q, BEFORE, 4, &p, err, sizeof(err));
		if (p.audit - a > most)
			most = p.audit - a;
		calls++;
	} while (r > 0 && calls < 100);
	ok(r == 0 && p.audit == 10 && most <= 4, "audit: the 10 old rows removed, at most 4 a "
	   "call, in %d calls (%s)", calls, err);
	ok(_num(q, "SELECT count(*) FROM audit WHERE ended >= 1000") == 5 &&
	   _num(q, "SELECT count(*) FROM audit") == 5, "audit: the 5 newer rows stay");
	/* Its audit rows gone, a done archive is still known verified (tags --verify). */
	rows = bytes = -1;
	ok(queue_label_audit(q, 2, &rows, &bytes, err, sizeof(err)) == 0 && rows == 3 &&
	   bytes == 600, "the done archive's verified files once its audit rows went: %lld, "
	   "%lld bytes, from its file rows in state done (3, 600)", (long long)rows,
	   (long long)bytes);
	qp_exec(q, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4000)"
		" INSERT INTO audit (job_id, uid, request_id, path_src, path_dst, bytes, checksum,"
		" started, ended) SELECT 1, 1001, 2, '/s/' || i, '/n/' || i, i, 'n' || i, 0, 6000"
		" FROM n", err, sizeof(err));
	qtest_vm_steps(q->db);
	r = queue_audit_prune(q, BEFORE, 2000, &p, err, sizeof(err));
	steps = qtest_vm_steps(q->db);
	ok(r == 0 && steps < 100, "audit: nothing old among 4,005 rows, found in %ld VM steps",
	   steps);
}

int main(void)
{
	char dir[] = "/tmp/test_history_XXXXXX", path[300], err[256] = "";
	struct queue *q;

	if (!mkdtemp(dir)) {
		ok(0, "a temporary directory");
		return tap_done();
	}
	snprintf(path, sizeof(path), "%s/q.db", dir);
	q = queue_open(path, err, sizeof(err));
	ok(q != NULL, "queue opened (%s)", err);
	if (q && _seed(q) == 0) {
		_test_requests(q);
		_test_audit(q);
	}
	queue_close(q);
	q = queue_open(path, err, sizeof(err));
	ok(q && _num(q, "SELECT count(*) FROM pragma_table_info('requests') WHERE name ="
		     " 'pruned'") == 1, "opened again: the pruned column is there once (%s)", err);
	queue_close(q);
	qtest_remove_db(path, dir);
	return tap_done();
}
