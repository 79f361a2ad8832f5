/* test_stmt.c - the queue's statement helpers: every bind letter, bad formats, a column map. */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include "queue.h"
#include "queue_private.h"
#include "qtest.h"
#include "tests/tap.h"

struct row {
	int i;
	int64_t big, pos, unset, none;
	uid_t uid;
	double d;
	char *str;
	const char *borrowed;
	char fixed[8];
	int64_t skipped;
};

static const struct qp_col _map[] = {
	QP_COL(QC_INT, struct row, i),
	QP_COL(QC_I64, struct row, big),
	QP_COL(QC_I64N, struct row, pos),
	QP_COL(QC_I64N, struct row, unset),
	QP_COL(QC_I64, struct row, none),
	QP_COL(QC_ID, struct row, uid),
	QP_COL(QC_DOUBLE, struct row, d),
	QP_COL(QC_STR, struct row, str),
	QP_COL(QC_BORROW, struct row, borrowed),
	QP_COL(QC_CHARS, struct row, fixed),
	QP_COL(QC_SKIP, struct row, skipped),
};

static sqlite3_stmt *_prep(sqlite3 *db, const char *sql)
{
	sqlite3_stmt *st = NULL;

	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
		tap_diag("prepare: %s", sqlite3_errmsg(db));
	return st;
}

/* Every letter once, the NULL forms of P and U, then the row read back by the map. */
static void _test_letters(sqlite3 *db)
{
	sqlite3_stmt *st = _prep(db, "INSERT INTO t VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)");
	struct row r;
	char err[256] = "";
	int rc;

	rc = qp_bindf(st, err, sizeof(err), "iIPUnUdttti", 7, (int64_t)1 << 40, (int64_t)5,
		      (int64_t)-1, (int64_t)1001, 2.5, "owned", "borrowed", "short", 99);
	ok(rc == 0, "bind: every letter (%s)", err);
	ok(sqlite3_step(st) == SQLITE_DONE, "the row is stored");
	sqlite3_finalize(st);
	st = _prep(db, "SELECT typeof(c), typeof(d), typeof(e) FROM t");
	ok(st && sqlite3_step(st) == SQLITE_ROW &&
	   strcmp((const char *)sqlite3_column_text(st, 0), "integer") == 0 &&
	   strcmp((const char *)sqlite3_column_text(st, 1), "null") == 0 &&
	   strcmp((const char *)sqlite3_column_text(st, 2), "null") == 0,
	   "P > 0 binds its value, U < 0 and n bind NULL");
	sqlite3_finalize(st);

	st = _prep(db, "SELECT * FROM t");
	memset(&r, 0, sizeof(r));
	r.skipped = 42;
	ok(st && sqlite3_step(st) == SQLITE_ROW, "row read");
	rc = qp_row(st, _map, QP_NCOLS(_map), &r, err, sizeof(err));
	ok(rc == 0, "map: the row is read (%s)", err);
	ok(r.i == 7 && r.big == (int64_t)1 << 40 && r.pos == 5, "map: int, int64, int64");
	ok(r.unset == -1 && r.none == 0, "map: NULL reads -1 (QC_I64N) or 0 (QC_I64)");
	ok(r.uid == 1001 && r.d == 2.5, "map: uid and double");
	is_str(r.str, "owned", "map: QC_STR is a copy");
	is_str(r.borrowed, "borrowed", "map: QC_BORROW points into the row");
	is_str(r.fixed, "short", "map: QC_CHARS copied into the array");
	ok(r.skipped == 42, "map: QC_SKIP leaves its field alone");
	free(r.str);
	sqlite3_finalize(st);
}

/* A format that does not fit the statement, and maps that do not fit the struct or the row. */
static void _test_bad(sqlite3 *db)
{
	sqlite3_stmt *st = _prep(db, "SELECT ?1, ?2");
	struct row r;
	char err[256] = "";
	static const struct qp_col wrong[] = { { QC_INT, offsetof(struct row, big),
						  sizeof(int64_t) } };
	static const struct qp_col unknown[] = { { 99, 0, sizeof(int) } };
	static const struct qp_col toolong[] = { QP_COL(QC_CHARS, struct row, fixed) };

	ok(qp_bindf(st, err, sizeof(err), "ix", 1) < 0 && strstr(err, "unknown letter 'x'"),
	   "bind: an unknown letter is an error (%s)", err);
	ok(qp_bindf(st, err, sizeof(err), "i", 1) < 0 && strstr(err, "2 parameters"),
	   "bind: too few letters is an error (%s)", err);
	ok(qp_bindf(st, err, sizeof(err), "iii", 1, 2, 3) < 0, "bind: too many letters too");
	ok(qp_bindf(st, NULL, 0, "tP", "x", (int64_t)0) == 0, "bind: no err buffer is fine");
	ok(sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 1) == SQLITE_NULL,
	   "P of 0 binds NULL");
	sqlite3_finalize(st);

	st = _prep(db, "SELECT 'longer than eight', 2");
	memset(&r, 0, sizeof(r));
	ok(st && sqlite3_step(st) == SQLITE_ROW, "row read");
	ok(qp_row(st, wrong, 1, &r, err, sizeof(err)) < 0 && strstr(err, "does not fit"),
	   "map: a type on a field of another size is an error (%s)", err);
	ok(qp_row(st, unknown, 1, &r, err, sizeof(err)) < 0, "map: an unknown type is an error");
	ok(qp_row(st, toolong, 1, &r, err, sizeof(err)) < 0 && strstr(err, "longer"),
	   "map: a text longer than its array is an error (%s)", err);
	ok(qp_row(st, _map, QP_NCOLS(_map), &r, err, sizeof(err)) < 0 && strstr(err, "map of"),
	   "map: more columns than the row has is an error (%s)", err);
	sqlite3_finalize(st);
}

/* In another thread: 0 if the readers' lock is free (a read that failed did not keep it). */
static void *_try_rlock(void *arg)
{
	struct queue *q = arg;
	intptr_t busy = pthread_mutex_trylock(&q->rlock) != 0;

	if (!busy)
		pthread_mutex_unlock(&q->rlock);
	return (void *)busy;
}

/* The statement makers on a queue: a bad format leaves nothing open, a good one works. */
/*
 * Reads in the writer's own transaction run on its connection: kept
 * prepared (SQLITE_STMTSTATUS_RUN counts the runs of one statement), and one
 * read nested in another of the same SQL gets a statement of its own.
 */
static void _test_writer_reads(struct queue *q)
{
	static const char *const sql = "SELECT ?1 * 2 UNION ALL SELECT ?1 * 3";
	sqlite3_stmt *a, *b;
	char err[256] = "";
	int ra = 0, rb = 0;

	qp_begin(q);
	a = qp_readf(q, sql, err, sizeof(err), "i", 5);
	ok(a && sqlite3_step(a) == SQLITE_ROW && sqlite3_column_int(a, 0) == 10,
	   "writer's read: the first row (%s)", err);
	if (!a)
		goto out;
	ok(qp_read_end(q, a, SQLITE_ROW, err, sizeof(err)) == 0, "writer's read: ended early");
	a = qp_readf(q, sql, err, sizeof(err), "i", 7);
	ok(a && sqlite3_step(a) == SQLITE_ROW && sqlite3_column_int(a, 0) == 14 &&
	   sqlite3_stmt_status(a, SQLITE_STMTSTATUS_RUN, 0) == 2,
	   "writer's read again: the same statement, kept prepared (runs: %d)",
	   a ? sqlite3_stmt_status(a, SQLITE_STMTSTATUS_RUN, 0) : -1);
	if (!a)
		goto out;
	b = qp_readf(q, sql, err, sizeof(err), "i", 100);
	ok(b && b != a && sqlite3_step(b) == SQLITE_ROW && sqlite3_column_int(b, 0) == 200,
	   "a read nested in one still stepping gets its own statement");
	if (b) {
		while (sqlite3_step(b) == SQLITE_ROW)
			rb++;
		ok(qp_read_end(q, b, SQLITE_DONE, err, sizeof(err)) == 0 && rb == 1,
		   "the nested read ends (%s)", err);
	}
	while (sqlite3_step(a) == SQLITE_ROW)
		ra = sqlite3_column_int(a, 0);
	ok(ra == 21 && qp_read_end(q, a, SQLITE_DONE, err, sizeof(err)) == 0,
	   "the outer read goes on where it was (%d)", ra);
out:
	qp_end(q, 0, 0, err, sizeof(err));
}

struct _first {
	int64_t id;
	int n;
};

static int _first_id(const struct queue_request *r, void *arg)
{
	struct _first *f = arg;

	if (!f->n++)
		f->id = r->id;
	return 0;
}

/*
 * A list by uid, by job or of what needs attention reads what its index
 * finds, not the whole table: 4,000 requests, of which the failed ones
 * asked for are the oldest (ids 1 and 2), which a scan in id order, newest
 * first, reaches last; uid 4343 also owns 2,000 finished ones, which its
 * "needs attention" list must not read either. Counted in SQLite's VM
 * steps (a count, not a time): a scan takes more than one step a row.
 */
static void _test_list_indexed(struct queue *q)
{
	static const struct {
		const char *what;
		struct queue_filter f;
		int n;
		int64_t id;          /* the newest listed */
	} cases[] = {
		{ "by uid", { .uid = 4242, .state = -1, .limit = 1 }, 1, 1 },
		{ "by job", { .uid = -1, .job_id = 77777, .state = -1 }, 1, 1 },
		{ "needing attention", { .uid = -1, .state = -1, .attention_since = 50 }, 2, 2 },
		{ "by uid and job", { .uid = 4242, .job_id = 77777, .state = -1 }, 1, 1 },
		{ "by job, needing attention", { .uid = -1, .job_id = 77777, .state = -1,
						 .attention_since = 50 }, 1, 1 },
		{ "by uid, needing attention", { .uid = 4343, .state = -1, .attention_since = 50 },
		  1, 2 },
		{ "by uid and state", { .uid = 4242, .state = QS_FAILED_FINAL }, 1, 1 },
	};
	char err[256] = "";
	sqlite3 *db = q->rdb ? q->rdb : q->db;

	ok(qp_exec(q, "INSERT INTO requests (uid, gid, user, job_id, action, source, state,"
		   " created, updated) VALUES (4242, 1, 'u', 77777, 'archive', '/s',"
		   " 'failed_final', 0, 100), (4343, 1, 'v', 88888, 'archive', '/s',"
		   " 'failed_final', 0, 100);"
		   "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 3998)"
		   " INSERT INTO requests (uid, gid, user, job_id, action, source, state,"
		   " created, updated) SELECT CASE WHEN i % 2 THEN 1000 + i % 10 ELSE 4343 END,"
		   " 1, 'u', i, 'archive', '/s', 'done', 0, 0 FROM n", err, sizeof(err)) == 0,
	   "4,000 requests (%s)", err);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		struct _first got = { 0, 0 };
		long steps;

		qtest_vm_steps(db);
		if (queue_request_list(q, &cases[i].f, _first_id, &got, err, sizeof(err)) < 0)
			tap_diag("%s: %s", cases[i].what, err);
		steps = qtest_vm_steps(db);
		ok(got.n == cases[i].n && got.id == cases[i].id && steps < 1000,
		   "list %s: %d request%s from %lld (%d from %lld), %ld VM steps (a scan of the "
		   "table takes over 4,000)", cases[i].what, cases[i].n, cases[i].n == 1 ? "" : "s",
		   (long long)cases[i].id, got.n, (long long)got.id, steps);
	}
}

/*
 * The archive a stage-in's source lies in: the deepest done archive
 * destination at or above the path, the newest of those; read from the
 * index, not from 4,000 other done archives (VM steps counted).
 */
static void _test_archive_of(struct queue *q)
{
	static const struct {
		const char *path;
		int found;
		const char *dest;
		const char *job;     /* the found request's job id, as text */
	} cases[] = {
		{ "/arch/p/x/y", 1, "/arch/p", "3" },
		{ "/arch/p/deep/z", 1, "/arch/p/deep", "2" },
		{ "/arch/p/deep", 1, "/arch/p/deep", "2" },
		{ "/arch/p/deeper/z", 1, "/arch/p", "3" },
		{ "/arch/p/", 1, "/arch/p", "3" },
		{ "/arch/p//x", 1, "/arch/p", "3" },
		{ "/arch/q/x", 0, NULL, NULL },
		{ "/arch/r/x", 0, NULL, NULL },
		{ "/arch", 0, NULL, NULL },
		{ "/", 0, NULL, NULL },
		{ "relative/p", 0, NULL, NULL },
	};
	char err[256] = "";
	sqlite3 *db = q->rdb ? q->rdb : q->db;

	ok(qp_exec(q, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE"
		   " i < 4000) INSERT INTO requests (uid, gid, user, job_id, action, source, dest,"
		   " state, created, updated) SELECT 1, 1, 'u', 100000 + i, 'archive', '/s',"
		   " '/arch/u/' || i, 'done', 0, 0 FROM n;"
		   "INSERT INTO requests (uid, gid, user, job_id, action, source, dest, state,"
		   " created, updated) VALUES"
		   " (1, 1, 'u', 1, 'archive', '/s', '/arch/p', 'done', 0, 0),"
		   " (1, 1, 'u', 2, 'archive', '/s', '/arch/p/deep', 'done', 0, 0),"
		   " (1, 1, 'u', 3, 'archive', '/s', '/arch/p', 'done', 0, 0),"
		   " (1, 1, 'u', 4, 'archive', '/s', '/arch/q', 'failed_final', 0, 0),"
		   " (1, 1, 'u', 5, 'stage_in', '/s', '/arch/r', 'done', 0, 0)", err,
		   sizeof(err)) == 0, "4,005 requests with destinations (%s)", err);
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		int64_t req = 0, job = 0;
		char *dest = NULL, jobtext[24] = "";
		long steps;
		int rc;

		qtest_vm_steps(db);
		rc = queue_archive_of(q, cases[i].path, &req, &dest, err, sizeof(err));
		steps = qtest_vm_steps(db);
		if (rc == 1) {
			sqlite3_stmt *st = _prep(q->db, "SELECT job_id FROM requests WHERE id=?1");

			sqlite3_bind_int64(st, 1, req);
			if (st && sqlite3_step(st) == SQLITE_ROW)
				job = sqlite3_column_int64(st, 0);
			sqlite3_finalize(st);
			snprintf(jobtext, sizeof(jobtext), "%lld", (long long)job);
		}
		ok(rc == cases[i].found && (!cases[i].dest || (dest && !strcmp(dest, cases[i].dest) &&
		   !strcmp(jobtext, cases[i].job))) && steps < 1000,
		   "archive of %s: %s (got %d, %s, job %s), %ld VM steps", cases[i].path,
		   cases[i].dest ? cases[i].dest : "none", rc, dest ? dest : "-", jobtext, steps);
		free(dest);
	}
}

/* queue_count_states against a count of the table itself: 1 when every state agrees. */
static int _counts_agree(struct queue *q, const char *when)
{
	int64_t got[QS_COUNT], want[QS_COUNT] = { 0 };
	char err[256] = "";
	sqlite3_stmt *st = _prep(q->db, "SELECT state, count(*) FROM requests GROUP BY state");
	int same = 1;

	while (st && sqlite3_step(st) == SQLITE_ROW) {
		enum queue_state k;

		if (queue_state_from_name((const char *)sqlite3_column_text(st, 0), &k) == 0)
			want[k] = sqlite3_column_int64(st, 1);
	}
	sqlite3_finalize(st);
	if (queue_count_states(q, got, err, sizeof(err)) < 0) {
		tap_diag("%s: %s", when, err);
		return 0;
	}
	for (int k = 0; k < QS_COUNT; k++)
		if (got[k] != want[k]) {
			tap_diag("%s: %s counted %lld, the table holds %lld", when,
				 queue_state_name((enum queue_state)k), (long long)got[k],
				 (long long)want[k]);
			same = 0;
		}
	return same;
}

/*
 * The requests of each state are counted as they change (triggers), not by
 * reading the table: right after inserts, state changes and deletes, in a
 * few VM steps at 8,000 requests.
 */
static void _test_counts(struct queue *q)
{
	int64_t n[QS_COUNT];
	char err[256] = "";
	sqlite3 *db = q->rdb ? q->rdb : q->db;
	long steps;

	ok(_counts_agree(q, "after the inserts"), "counts by state: as the table, after inserts");
	ok(qp_exec(q, "UPDATE requests SET state='cancelled' WHERE id <= 30;"
		   "UPDATE requests SET state='queued' WHERE id > 30 AND id <= 40;"
		   "UPDATE requests SET state='done' WHERE id > 40 AND id <= 45;"
		   "UPDATE requests SET updated=1 WHERE id <= 100", err, sizeof(err)) == 0 &&
	   _counts_agree(q, "after state changes"),
	   "counts by state: as the table, after state changes and other updates (%s)", err);
	ok(qp_exec(q, "DELETE FROM requests WHERE id > 20 AND id <= 35", err, sizeof(err)) == 0 &&
	   _counts_agree(q, "after deletes"), "counts by state: as the table, after deletes (%s)",
	   err);
	qtest_vm_steps(db);
	queue_count_states(q, n, err, sizeof(err));
	steps = qtest_vm_steps(db);
	ok(steps < 200, "counts by state: %ld VM steps at 8,000 requests (a count of the table "
	   "takes over 8,000)", steps);
}

/* A database from before the counts: made and filled at the next open, as the table says. */
static void _test_counts_fill(const char *path)
{
	sqlite3 *db = NULL;
	struct queue *q;
	char err[256] = "";
	int rc = sqlite3_open(path, &db);

	if (rc == SQLITE_OK)
		rc = sqlite3_exec(db, "DROP TRIGGER request_counts_ins; DROP TRIGGER request_counts_upd;"
				  "DROP TRIGGER request_counts_del; DROP TABLE request_counts;"
				  /* 0.x kept no record of migrations (queue_schema.c) */
				  "DROP TABLE schema_migrations;"
				  "UPDATE requests SET state='failed_final' WHERE id <= 5;"
				  "INSERT INTO requests (uid, gid, user, action, source, state, created,"
				  " updated) VALUES (1, 1, 'u', 'archive', '/s', 'running', 0, 0)",
				  NULL, NULL, NULL);
	sqlite3_close(db);
	ok(rc == SQLITE_OK, "a database as an older stagehandd left it");
	q = queue_open(path, err, sizeof(err));
	ok(q && _counts_agree(q, "reopened"), "counts by state: made and filled at open (%s)",
	   err);
	if (q)
		queue_close(q);
}

static void _test_queue(void)
{
	char dir[] = "/tmp/test_stmt_XXXXXX", path[300], err[256] = "";
	struct queue *q;
	sqlite3_stmt *st;
	pthread_t t;
	void *busy = (void *)1;
	static const char *const sql = "SELECT ?1 + ?2";

	if (!mkdtemp(dir)) {
		ok(0, "a temporary directory");
		return;
	}
	snprintf(path, sizeof(path), "%s/q.db", dir);
	q = queue_open(path, err, sizeof(err));
	ok(q != NULL, "queue opened (%s)", err);
	if (!q)
		return;
	ok(qp_execf(q, "UPDATE jobs SET runs=?2 WHERE job_id=?1", err, sizeof(err), "Iq",
		    (int64_t)1, 2) < 0 && strstr(err, "'q'"), "qp_execf: a bad letter (%s)", err);
	err[0] = 0;
	ok(qp_execf(q, "UPDATE jobs SET runs=?2 WHERE job_id=?1", err, sizeof(err), "Ii",
		    (int64_t)1, 2) == 0, "qp_execf: a good format runs (%s)", err);
	ok(qp_cachedf(q, sql, err, sizeof(err), "i", 1) == NULL, "qp_cachedf: too few letters");
	st = qp_cachedf(q, sql, err, sizeof(err), "ii", 1, 2);
	ok(st && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 3,
	   "qp_cachedf: the cached statement serves again");
	if (st)
		sqlite3_reset(st);
	ok(qp_readf(q, sql, err, sizeof(err), "iz", 1, 2) == NULL, "qp_readf: a bad letter");
	if (pthread_create(&t, NULL, _try_rlock, q) == 0)
		pthread_join(t, &busy);
	ok(busy == NULL, "qp_readf: a failed read leaves the readers' lock free");
	st = qp_prepf(q, sql, err, sizeof(err), "IU", (int64_t)40, (int64_t)2);
	ok(st && sqlite3_step(st) == SQLITE_ROW && sqlite3_column_int(st, 0) == 42,
	   "qp_prepf: bound and read");
	sqlite3_finalize(st);
	_test_writer_reads(q);
	_test_list_indexed(q);
	_test_archive_of(q);
	_test_counts(q);
	queue_close(q);
	_test_counts_fill(path);
	qtest_remove_db(path, dir);
}

int main(void)
{
	sqlite3 *db = NULL;

	if (sqlite3_open(":memory:", &db) != SQLITE_OK ||
	    sqlite3_exec(db, "CREATE TABLE t (a, b, c, d, e, f, g, h, i, j, k)", NULL, NULL,
			 NULL) != SQLITE_OK) {
		tap_diag("cannot open a database in memory");
		sqlite3_close(db);
		return 77;
	}
	_test_letters(db);
	_test_bad(db);
	sqlite3_close(db);
	_test_queue();
	return tap_done();
}
