/* queue_audit.c - see queue_audit.h. */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <string.h>

#include "queue_audit.h"
#include "queue_private.h"

/* ?1 job (NULL any), ?2 uid (NULL any), ?3 since, ?4 limit. */
#define QA_WHERE " WHERE (?1 IS NULL OR a.job_id = ?1) AND (?2 IS NULL OR a.uid = ?2)" \
	" AND a.ended >= ?3"

static const char *const _sql[] = {
	[QA_BY_JOB] = "SELECT a.job_id, a.uid, max(r.user), r.action, count(DISTINCT a.request_id),"
		" count(*), sum(a.bytes), min(a.started), max(a.ended), NULL, NULL, NULL"
		" FROM audit a JOIN requests r ON r.id = a.request_id" QA_WHERE
		" GROUP BY a.job_id, a.uid, r.action ORDER BY min(a.started), a.job_id LIMIT ?4",
	[QA_BY_USER] = "SELECT count(DISTINCT a.job_id), a.uid, max(r.user), NULL,"
		" count(DISTINCT a.request_id), count(*), sum(a.bytes), min(a.started),"
		" max(a.ended), NULL, NULL, NULL"
		" FROM audit a JOIN requests r ON r.id = a.request_id" QA_WHERE
		" GROUP BY a.uid ORDER BY a.uid LIMIT ?4",
	[QA_BY_FILE] = "SELECT a.job_id, a.uid, r.user, r.action, 1, 1, a.bytes, a.started,"
		" a.ended, a.path_src, a.path_dst, a.checksum"
		" FROM audit a JOIN requests r ON r.id = a.request_id" QA_WHERE
		" ORDER BY a.id LIMIT ?4",
};

/* The columns every select of _sql has, in order. Strings borrowed from the row. */
#define AUDIT_COL(type, field) QP_COL(type, struct queue_audit_row, field)
static const struct qp_col _row_cols[] = {
	AUDIT_COL(QC_I64, job_id), AUDIT_COL(QC_I64, uid), AUDIT_COL(QC_BORROW, user),
	AUDIT_COL(QC_BORROW, action), AUDIT_COL(QC_I64, requests), AUDIT_COL(QC_I64, files),
	AUDIT_COL(QC_I64, bytes), AUDIT_COL(QC_I64, first), AUDIT_COL(QC_I64, last),
	AUDIT_COL(QC_BORROW, src), AUDIT_COL(QC_BORROW, dst), AUDIT_COL(QC_BORROW, checksum),
};

int queue_audit_rows(struct queue *q, const struct queue_audit_filter *f,
		     int (*fn)(const struct queue_audit_row *r, void *arg), void *arg,
		     char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc, n = 0;

	st = qp_bulkf(q, _sql[f->by], err, errlen, "PUII", f->job_id, f->uid, f->since,
		      f->limit > 0 ? f->limit : (int64_t)1);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct queue_audit_row r;

		memset(&r, 0, sizeof(r));
		if (qp_row(st, _row_cols, QP_NCOLS(_row_cols), &r, err, errlen) < 0) {
			rc = -1;
			break;
		}
		n++;
		if (fn(&r, arg))
			break;
	}
	return qp_read_end(q, st, rc, err, errlen) < 0 ? -1 : n;
}

/* The columns of queue_audit_after's select, in order. */
#define ENTRY_COL(type, field) QP_COL(type, struct queue_audit_entry, field)
static const struct qp_col _entry_cols[] = {
	ENTRY_COL(QC_I64, id), ENTRY_COL(QC_I64, uid), ENTRY_COL(QC_BORROW, user),
	ENTRY_COL(QC_BORROW, src), ENTRY_COL(QC_BORROW, dst), ENTRY_COL(QC_I64, bytes),
};

int queue_audit_after(struct queue *q, int64_t after, int64_t limit,
		      int (*fn)(const struct queue_audit_entry *e, void *arg), void *arg,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc, n = 0;

	st = qp_bulkf(q, "SELECT a.id, a.uid, r.user, a.path_src, a.path_dst, a.bytes"
		      " FROM audit a LEFT JOIN requests r ON r.id = a.request_id"
		      " WHERE a.id > ?1 ORDER BY a.id LIMIT ?2", err, errlen, "II", after,
		      limit > 0 ? limit : (int64_t)1);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct queue_audit_entry e;

		memset(&e, 0, sizeof(e));
		if (qp_row(st, _entry_cols, QP_NCOLS(_entry_cols), &e, err, errlen) < 0) {
			rc = -1;
			break;
		}
		n++;
		if (fn(&e, arg))
			break;
	}
	return qp_read_end(q, st, rc, err, errlen) < 0 ? -1 : n;
}

/* The columns of queue_notice_next's select, in order. Strings borrowed from the row. */
#define NOTICE_COL(type, field) QP_COL(type, struct queue_notice, field)
static const struct qp_col _notice_cols[] = {
	NOTICE_COL(QC_I64, id), NOTICE_COL(QC_I64, job_id), NOTICE_COL(QC_I64, uid),
	NOTICE_COL(QC_BORROW, user), NOTICE_COL(QC_BORROW, state), NOTICE_COL(QC_BORROW, source),
	NOTICE_COL(QC_BORROW, dest), NOTICE_COL(QC_BORROW, error), NOTICE_COL(QC_I64, files),
	NOTICE_COL(QC_I64, bytes), NOTICE_COL(QC_BORROW, action),
};

int queue_notice_next(struct queue *q, int64_t since,
		      void (*fn)(const struct queue_notice *n, void *arg), void *arg,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st;
	struct queue_notice n;
	int rc;

	qp_begin(q);
	/* Every transfer (archive, stage-in, stage-out) when done, failed for good
	   or cancelled, in both modes: nothing else tells a user whose job has
	   ended, or waits held or in BurstBufferStageIn with no one looking. */
	st = qp_prepf(q, "SELECT r.id, COALESCE(r.job_id, 0), r.uid, r.user, r.state, r.source,"
		     " r.dest, r.error, r.files_done, r.bytes_done, r.action FROM requests r"
		     " WHERE r.action IN ('archive', 'stage_in', 'stage_out')"
		     " AND r.state IN ('done', 'failed_final', 'cancelled')"
		     " AND r.updated >= ?1 AND NOT EXISTS (SELECT 1 FROM notices n"
		     " WHERE n.request_id = r.id AND n.state = r.state)"
		     " ORDER BY r.updated, r.id LIMIT 1", err, errlen, "I", since);
	if (!st)
		return qp_end(q, -1, 0, err, errlen);
	rc = sqlite3_step(st);
	if (rc == SQLITE_DONE) {
		sqlite3_finalize(st);
		return qp_end(q, 0, 0, err, errlen);
	}
	if (rc != SQLITE_ROW) {
		qp_err(err, errlen, "database: %s", sqlite3_errmsg(q->db));
		sqlite3_finalize(st);
		return qp_end(q, -1, 0, err, errlen);
	}
	memset(&n, 0, sizeof(n));
	if (qp_row(st, _notice_cols, QP_NCOLS(_notice_cols), &n, err, errlen) < 0 ||
	    qp_execf(q, "INSERT INTO notices (request_id, state, at) VALUES (?1, ?2, ?3)", err,
		     errlen, "ItI", n.id, n.state, qp_now()) < 0) {
		sqlite3_finalize(st);
		return qp_end(q, -1, 0, err, errlen);
	}
	fn(&n, arg);
	sqlite3_finalize(st);
	return qp_end(q, 0, 0, err, errlen) < 0 ? -1 : 1;
}
