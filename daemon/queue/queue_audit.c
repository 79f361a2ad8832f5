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

int queue_audit_rows(struct queue *q, const struct queue_audit_filter *f,
		     int (*fn)(const struct queue_audit_row *r, void *arg), void *arg,
		     char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc, n = 0;

	st = qp_read(q, _sql[f->by], err, errlen);
	if (!st)
		return -1;
	if (f->job_id > 0)
		sqlite3_bind_int64(st, 1, f->job_id);
	if (f->uid >= 0)
		sqlite3_bind_int64(st, 2, f->uid);
	sqlite3_bind_int64(st, 3, f->since);
	sqlite3_bind_int64(st, 4, f->limit > 0 ? f->limit : 1);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct queue_audit_row r;

		memset(&r, 0, sizeof(r));
		r.job_id = sqlite3_column_int64(st, 0);
		r.uid = sqlite3_column_int64(st, 1);
		r.user = (const char *)sqlite3_column_text(st, 2);
		r.action = (const char *)sqlite3_column_text(st, 3);
		r.requests = sqlite3_column_int64(st, 4);
		r.files = sqlite3_column_int64(st, 5);
		r.bytes = sqlite3_column_int64(st, 6);
		r.first = sqlite3_column_int64(st, 7);
		r.last = sqlite3_column_int64(st, 8);
		r.src = (const char *)sqlite3_column_text(st, 9);
		r.dst = (const char *)sqlite3_column_text(st, 10);
		r.checksum = (const char *)sqlite3_column_text(st, 11);
		n++;
		if (fn(&r, arg))
			break;
	}
	return qp_read_end(q, st, rc, err, errlen) < 0 ? -1 : n;
}

int queue_audit_under(struct queue *q, const char *root, int src, int64_t *files,
		      int64_t *bytes, char *err, size_t errlen)
{
	/* A prefix compare on whole components: root itself or root + '/'. */
	static const char *const sql[2] = {
		"SELECT count(*), COALESCE(sum(bytes), 0) FROM audit WHERE path_dst = ?1"
		" OR substr(path_dst, 1, length(?1) + 1) = ?1 || '/'",
		"SELECT count(*), COALESCE(sum(bytes), 0) FROM audit WHERE path_src = ?1"
		" OR substr(path_src, 1, length(?1) + 1) = ?1 || '/'",
	};
	sqlite3_stmt *st;
	int rc;

	*files = *bytes = 0;
	st = qp_read(q, sql[src ? 1 : 0], err, errlen);
	if (!st)
		return -1;
	qp_bind_text(st, 1, strcmp(root, "/") == 0 ? "" : root);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*files = sqlite3_column_int64(st, 0);
		*bytes = sqlite3_column_int64(st, 1);
	}
	return qp_read_end(q, st, rc, err, errlen);
}

int queue_notice_next(struct queue *q, int64_t since,
		      void (*fn)(const struct queue_notice *n, void *arg), void *arg,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st, *ins;
	struct queue_notice n;
	int rc;

	qp_begin(q);
	/* Archives when done or failed; stage-in and stage-out when failed (nothing
	   else tells a user whose job has ended, or waits held, with no one looking). */
	st = qp_prep(q, "SELECT r.id, COALESCE(r.job_id, 0), r.uid, r.user, r.state, r.source,"
		     " r.dest, r.error, r.files_done, r.bytes_done, r.action FROM requests r"
		     " WHERE ((r.action = 'archive' AND r.state IN ('done', 'failed_final'))"
		     " OR (r.action IN ('stage_in', 'stage_out') AND r.state = 'failed_final'))"
		     " AND r.updated >= ?1 AND NOT EXISTS (SELECT 1 FROM notices n"
		     " WHERE n.request_id = r.id AND n.state = r.state)"
		     " ORDER BY r.updated, r.id LIMIT 1", err, errlen);
	if (!st)
		return qp_end(q, -1, 0, err, errlen);
	sqlite3_bind_int64(st, 1, since);
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
	n.id = sqlite3_column_int64(st, 0);
	n.job_id = sqlite3_column_int64(st, 1);
	n.uid = sqlite3_column_int64(st, 2);
	n.user = (const char *)sqlite3_column_text(st, 3);
	n.state = (const char *)sqlite3_column_text(st, 4);
	n.source = (const char *)sqlite3_column_text(st, 5);
	n.dest = (const char *)sqlite3_column_text(st, 6);
	n.error = (const char *)sqlite3_column_text(st, 7);
	n.files = sqlite3_column_int64(st, 8);
	n.bytes = sqlite3_column_int64(st, 9);
	n.action = (const char *)sqlite3_column_text(st, 10);
	ins = qp_prep(q, "INSERT INTO notices (request_id, state, at) VALUES (?1, ?2, ?3)", err,
		      errlen);
	if (!ins) {
		sqlite3_finalize(st);
		return qp_end(q, -1, 0, err, errlen);
	}
	sqlite3_bind_int64(ins, 1, n.id);
	qp_bind_text(ins, 2, n.state);
	sqlite3_bind_int64(ins, 3, qp_now());
	if (qp_step_done(q, ins, err, errlen) < 0) {
		sqlite3_finalize(st);
		return qp_end(q, -1, 0, err, errlen);
	}
	fn(&n, arg);
	sqlite3_finalize(st);
	return qp_end(q, 0, 0, err, errlen) < 0 ? -1 : 1;
}
