/* queue_labels.c - see queue_labels.h. */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <string.h>

#include "queue_labels.h"
#include "queue_private.h"

/* The columns of queue_label_requests' select; the state is read by name. Strings borrowed. */
#define LABEL_COL(type, field) QP_COL(type, struct queue_label_req, field)
static const struct qp_col _label_cols[] = {
	LABEL_COL(QC_I64, id), LABEL_COL(QC_I64, job_id), LABEL_COL(QC_I64, uid),
	LABEL_COL(QC_BORROW, action), LABEL_COL(QC_BORROW, dest), LABEL_COL(QC_BORROW, error),
	LABEL_COL(QC_SKIP, state), LABEL_COL(QC_I64, updated), LABEL_COL(QC_I64, files_total),
};

int queue_label_requests(struct queue *q, const char *source,
			 int (*fn)(const struct queue_label_req *r, void *arg), void *arg,
			 char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	st = qp_readf(q, "SELECT id, job_id, uid, action, dest, error, state, updated, files_total"
		      " FROM requests WHERE source = ?1 ORDER BY id DESC LIMIT 256", err, errlen,
		      "t", source);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct queue_label_req r;
		const char *s = (const char *)sqlite3_column_text(st, 6);

		memset(&r, 0, sizeof(r));
		if (!s || queue_state_from_name(s, &r.state) < 0)
			continue;
		if (qp_row(st, _label_cols, QP_NCOLS(_label_cols), &r, err, errlen) < 0) {
			rc = -1;
			break;
		}
		if (!r.action)
			continue;
		if (fn(&r, arg))
			break;
	}
	return qp_read_end(q, st, rc, err, errlen);
}

int queue_label_audit(struct queue *q, int64_t id, int64_t *rows, int64_t *bytes,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	*rows = 0;
	*bytes = 0;
	st = qp_readf(q, "SELECT CASE WHEN a.n > 0 THEN a.n ELSE i.n END,"
		      " CASE WHEN a.n > 0 THEN a.b ELSE i.b END FROM"
		      " (SELECT count(*) AS n, COALESCE(sum(bytes), 0) AS b FROM audit"
		      "  WHERE request_id = ?1) a,"
		      " (SELECT count(*) AS n, COALESCE(sum(size), 0) AS b FROM items"
		      "  WHERE request_id = ?1 AND state = 'done') i", err, errlen, "I", id);
	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*rows = sqlite3_column_int64(st, 0);
		*bytes = sqlite3_column_int64(st, 1);
	}
	return qp_read_end(q, st, rc, err, errlen);
}
