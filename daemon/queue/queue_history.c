/* queue_history.c - see queue_history.h. */
#include "config.h"

#include <sqlite3.h>
#include <string.h>

#include "queue_history.h"
#include "queue_private.h"


/*
 * A request's rows, at most ?2 of them a statement (?1 the request), the
 * first by primary key. The tables without a rowid are matched on the rest
 * of their primary key.
 */
static const char *const _rows_sql[] = {
	"DELETE FROM items WHERE request_id=?1 AND relpath IN"
	" (SELECT relpath FROM items WHERE request_id=?1 ORDER BY relpath LIMIT ?2)",
	"DELETE FROM shards WHERE request_id=?1 AND idx IN"
	" (SELECT idx FROM shards WHERE request_id=?1 ORDER BY idx LIMIT ?2)",
	"DELETE FROM shard_files WHERE request_id=?1 AND relpath IN"
	" (SELECT relpath FROM shard_files WHERE request_id=?1 ORDER BY relpath LIMIT ?2)",
	"DELETE FROM shard_ranges WHERE request_id=?1 AND (relpath, off) IN"
	" (SELECT relpath, off FROM shard_ranges WHERE request_id=?1 ORDER BY relpath, off"
	" LIMIT ?2)",
	"DELETE FROM s3_uploads WHERE request_id=?1 AND relpath IN"
	" (SELECT relpath FROM s3_uploads WHERE request_id=?1 ORDER BY relpath LIMIT ?2)",
	"DELETE FROM s3_upload_parts WHERE request_id=?1 AND (relpath, part) IN"
	" (SELECT relpath, part FROM s3_upload_parts WHERE request_id=?1 ORDER BY relpath, part"
	" LIMIT ?2)",
};
#define NROWS_SQL (sizeof(_rows_sql) / sizeof(_rows_sql[0]))

/* A candidate: the oldest prunable request finished before `before` whose job has ended. */
struct _cand {
	int64_t id, updated;
};

/*
 * The next candidate, 1; 0 when there is none; -1 with err. A request of a
 * job whose end is not processed yet is passed over: a stage_in's items are
 * what the input cleanup removes at the job's end (cleanup.c).
 */
static int _next(struct queue *q, int64_t before, struct _cand *c, char *err, size_t errlen)
{
	/* A read in the writer's own transaction (qp_read: its connection, kept prepared). */
	sqlite3_stmt *st = qp_readf(q, "SELECT id, updated FROM requests"
				    " INDEXED BY requests_prunable WHERE " PRUNABLE
				    " AND updated < ?1 AND (job_id IS NULL OR NOT EXISTS (SELECT 1"
				    " FROM jobs WHERE jobs.job_id = requests.job_id AND"
				    " jobs.end_processed = 0)) ORDER BY updated LIMIT 1", err,
				    errlen, "I", before);
	int rc;

	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		c->id = sqlite3_column_int64(st, 0);
		c->updated = sqlite3_column_int64(st, 1);
	}
	return qp_read_end(q, st, rc, err, errlen) < 0 ? -1 : rc == SQLITE_ROW;
}

/*
 * Up to *left of candidate c's rows removed, *left and done->rows counted
 * down and up. 1 when they are all gone, 0 when the budget ran out first,
 * -1 with err.
 */
static int _rows(struct queue *q, const struct _cand *c, int64_t *left,
		 struct queue_pruned *done, char *err, size_t errlen)
{
	for (size_t i = 0; i < NROWS_SQL; i++) {
		sqlite3_stmt *st;
		int64_t n;

		st = qp_cachedf(q, _rows_sql[i], err, errlen, "II", c->id, *left);
		if (!st || qp_step_reset(q, st, err, errlen) < 0)
			return -1;
		n = sqlite3_changes(q->db);
		*left -= n;
		done->rows += n;
		if (*left <= 0)
			return 0;	/* maybe more in this table: the next call goes on */
	}
	return 1;
}

int queue_history_prune(struct queue *q, int64_t before, int budget, struct queue_pruned *done,
			char *err, size_t errlen)
{
	int64_t left = budget > 0 ? budget : 1;
	struct queue_pruned now = { 0 };	/* added to done once committed */
	struct _cand c;
	int rc = 0, more = 0, r;

	qp_begin(q);
	while (left > 0 && (r = _next(q, before, &c, err, errlen)) != 0) {
		if (r < 0 || (r = _rows(q, &c, &left, &now, err, errlen)) < 0) {
			rc = -1;
			break;
		}
		if (r == 0) {
			more = 1;	/* this request again, next time */
			break;
		}
		if (qp_execf(q, "UPDATE requests SET pruned = ?2 WHERE id = ?1", err, errlen, "II",
			     c.id, c.updated) < 0) {
			rc = -1;
			break;
		}
		now.requests++;
		left--;	/* a request costs one at least, rows or not */
		more = left <= 0;
	}
	if (qp_end(q, rc, 0, err, errlen) < 0)
		return -1;
	done->requests += now.requests;
	done->rows += now.rows;
	return more;
}

int queue_audit_prune(struct queue *q, int64_t before, int budget, struct queue_pruned *done,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int64_t n = 0;
	int rc = -1, old = 0;

	qp_begin(q);
	/* Nothing to do (the usual answer) when the oldest row is not old: one row read. */
	st = qp_read(q, "SELECT ended FROM audit ORDER BY id LIMIT 1", err, errlen);
	if (st) {
		rc = sqlite3_step(st);
		old = rc == SQLITE_ROW && sqlite3_column_int64(st, 0) < before;
		rc = qp_read_end(q, st, rc, err, errlen);
	}
	/* The budget oldest rows by id (the order they were added in), the old ones of them. */
	if (rc == 0 && old) {
		st = qp_cachedf(q, "DELETE FROM audit WHERE id IN (SELECT id FROM (SELECT id, ended"
				" FROM audit ORDER BY id LIMIT ?2) WHERE ended < ?1)", err, errlen,
				"II", before, (int64_t)(budget > 0 ? budget : 1));
		rc = st ? qp_step_reset(q, st, err, errlen) : -1;
		if (rc == 0)
			n = sqlite3_changes(q->db);
	}
	if (qp_end(q, rc, 0, err, errlen) < 0)
		return -1;
	done->audit += n;
	return n > 0;
}
