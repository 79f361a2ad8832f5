/* queue_labels.c - see queue_labels.h. */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <string.h>

#include "queue_labels.h"
#include "queue_private.h"

int queue_label_requests(struct queue *q, const char *source,
			 int (*fn)(const struct queue_label_req *r, void *arg), void *arg,
			 char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	st = qp_read(q, "SELECT id, job_id, uid, action, dest, error, state, updated, files_total"
		     " FROM requests WHERE source = ?1 ORDER BY id DESC LIMIT 256", err, errlen);
	if (!st)
		return -1;
	qp_bind_text(st, 1, source);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct queue_label_req r;
		const char *s = (const char *)sqlite3_column_text(st, 6);

		memset(&r, 0, sizeof(r));
		r.id = sqlite3_column_int64(st, 0);
		r.job_id = sqlite3_column_int64(st, 1);
		r.uid = sqlite3_column_int64(st, 2);
		r.action = (const char *)sqlite3_column_text(st, 3);
		r.dest = (const char *)sqlite3_column_text(st, 4);
		r.error = (const char *)sqlite3_column_text(st, 5);
		if (!s || queue_state_from_name(s, &r.state) < 0)
			continue;
		r.updated = sqlite3_column_int64(st, 7);
		r.files_total = sqlite3_column_int64(st, 8);
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
	st = qp_read(q, "SELECT count(*), COALESCE(sum(bytes), 0) FROM audit WHERE request_id = ?1",
		     err, errlen);
	if (!st)
		return -1;
	sqlite3_bind_int64(st, 1, id);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*rows = sqlite3_column_int64(st, 0);
		*bytes = sqlite3_column_int64(st, 1);
	}
	return qp_read_end(q, st, rc, err, errlen);
}
