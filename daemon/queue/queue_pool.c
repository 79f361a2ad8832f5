/* queue_pool.c - see queue_pool.h. */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <string.h>

#include "queue_pool.h"
#include "queue_private.h"

int queue_pool_set(struct queue *q, int64_t job, const char *pool, int64_t size, char *err,
		   size_t errlen)
{
	int rc;

	qp_lock(q);
	rc = qp_execf(q, "INSERT INTO bb_pool (job_id, pool, size, torn_down, updated)"
		      " VALUES (?1, ?2, ?3, 0, ?4) ON CONFLICT(job_id) DO UPDATE SET"
		      " pool = ?2, size = ?3, torn_down = 0, updated = ?4", err, errlen, "ItII", job,
		      pool, size, qp_now());
	qp_unlock(q);
	return rc;
}

int queue_pool_get(struct queue *q, int64_t job, int64_t *size, char **pool, char *err,
		   size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	*size = 0;
	*pool = NULL;
	qp_lock(q);
	st = qp_prepf(q, "SELECT size, pool FROM bb_pool WHERE job_id = ?1", err, errlen, "I", job);
	if (!st) {
		qp_unlock(q);
		return -1;
	}
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*size = sqlite3_column_int64(st, 0);
		*pool = qp_col_dup(st, 1);
		rc = 1;
	} else if (rc == SQLITE_DONE) {
		rc = 0;
	} else {
		qp_err(err, errlen, "reading the job's pool size: %s", sqlite3_errmsg(q->db));
		rc = -1;
	}
	sqlite3_finalize(st);
	qp_unlock(q);
	return rc;
}

int queue_pool_need(struct queue *q, int64_t job, int64_t *bytes, int *counted, int *requests,
		    char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc = -1;

	*bytes = 0;
	*counted = *requests = 0;
	qp_lock(q);
	/* files_total > 0 once the worker's walk reported: an empty source counts 0 bytes. */
	st = qp_prepf(q, "SELECT COALESCE(sum(bytes_total), 0), count(*),"
		     " COALESCE(sum(files_total > 0 OR bytes_total > 0), 0) FROM requests"
		     " WHERE job_id = ?1 AND action = 'stage_in' AND state != 'cancelled'",
		     err, errlen, "I", job);
	if (st) {
		if (sqlite3_step(st) == SQLITE_ROW) {
			*bytes = sqlite3_column_int64(st, 0);
			*requests = sqlite3_column_int(st, 1);
			*counted = sqlite3_column_int(st, 2);
			rc = 0;
		} else {
			qp_err(err, errlen, "summing the job's inputs: %s", sqlite3_errmsg(q->db));
		}
		sqlite3_finalize(st);
	}
	qp_unlock(q);
	return rc;
}

int queue_pool_torn_down(struct queue *q, int64_t job, char *err, size_t errlen)
{
	int rc;

	qp_lock(q);
	rc = qp_execf(q, "UPDATE bb_pool SET torn_down = 1, updated = ?2 WHERE job_id = ?1",
		      err, errlen, "II", job, qp_now());
	qp_unlock(q);
	return rc;
}

int queue_pool_held(struct queue *q, const char *pool, int64_t *bytes, char *err,
		    size_t errlen)
{
	sqlite3_stmt *st;
	int rc = -1;

	*bytes = 0;
	qp_lock(q);
	st = qp_prepf(q, "SELECT COALESCE(sum(r.bytes_done), 0) FROM bb_pool b JOIN requests r"
		      " ON r.job_id = b.job_id WHERE b.pool = ?1 AND b.torn_down = 0"
		      " AND r.action = 'stage_in' AND r.state != 'cancelled'", err, errlen, "t", pool);
	if (st) {
		if (sqlite3_step(st) == SQLITE_ROW) {
			*bytes = sqlite3_column_int64(st, 0);
			rc = 0;
		} else {
			qp_err(err, errlen, "summing the pool's staged inputs: %s",
			       sqlite3_errmsg(q->db));
		}
		sqlite3_finalize(st);
	}
	qp_unlock(q);
	return rc;
}
