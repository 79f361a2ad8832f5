/* queue_drain.c - see queue_drain.h. */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "queue_drain.h"
#include "queue_private.h"

int queue_drain_set(struct queue *q, const char *reason, int64_t by_uid, int64_t now,
		    int *already, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc = -1, was = 0;

	qp_begin(q);
	st = qp_prep(q, "SELECT 1 FROM drain WHERE id = 1", err, errlen);
	if (!st)
		goto out;
	was = sqlite3_step(st) == SQLITE_ROW;
	sqlite3_finalize(st);
	/* A second drain keeps the first one's time and admin: maintenance began then. */
	rc = qp_execf(q, "INSERT INTO drain (id, since, by_uid, reason) VALUES (1, ?1, ?2,"
		      " COALESCE(?3, '')) ON CONFLICT(id) DO UPDATE SET"
		      " reason = COALESCE(?3, reason)", err, errlen, "IIt", now, by_uid,
		      reason && *reason ? reason : NULL);
out:
	rc = qp_end(q, rc, 1, err, errlen);
	if (rc == 0 && already)
		*already = was;
	return rc;
}

int queue_drain_clear(struct queue *q, int *was, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc = -1, n = 0;

	qp_begin(q);
	st = qp_prep(q, "DELETE FROM drain", err, errlen);
	if (st) {
		rc = qp_step_done(q, st, err, errlen);
		n = sqlite3_changes(q->db);
	}
	rc = qp_end(q, rc, 1, err, errlen);
	if (rc == 0 && was)
		*was = n > 0;
	return rc;
}

int queue_drain_get(struct queue *q, struct queue_drain *out, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	memset(out, 0, sizeof(*out));
	st = qp_read(q, "SELECT since, by_uid, reason FROM drain WHERE id = 1", err, errlen);
	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		out->since = sqlite3_column_int64(st, 0);
		out->by_uid = sqlite3_column_int64(st, 1);
		out->reason = qp_col_dup(st, 2);
		if (!out->reason) {
			qp_err(err, errlen, "out of memory");
			return qp_read_end(q, st, -1, err, errlen);
		}
	}
	if (qp_read_end(q, st, rc, err, errlen) < 0) {
		queue_drain_free(out);
		return -1;
	}
	return out->reason ? 1 : 0;
}

void queue_drain_free(struct queue_drain *out)
{
	if (!out)
		return;
	free(out->reason);
	out->reason = NULL;
}
