/*
 * queue_cleanup.c - the queue's rows for the input cleanup (cleanup.h): a
 * purge request stored with its items and the time it may run, and the
 * counts /metrics shows. A purge request is an ordinary request (state
 * machine, retries, cancel); only its items are made before it runs.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "cleanup.h"
#include "queue.h"
#include "queue_private.h"

int queue_cleanup_create(struct queue *q, const struct queue_new_request *nr, int64_t not_before,
			 const struct cleanup_item *items, size_t n, int64_t *id_out,
			 char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int64_t now = qp_now(), id;
	int rc = -1;

	qp_begin(q);
	/* The claim skips a queued request until next_attempt_at (queue_request_claim_ex). */
	st = qp_prep(q, "INSERT INTO requests (uid, gid, user, job_id, action, source, dest,"
		     " options, state, max_retries, next_attempt_at, created, updated) VALUES"
		     " (?1,?2,?3,?4,'purge',?5,NULL,?6,'queued',?7,?8,?9,?9)", err, errlen);
	if (!st)
		goto out;
	sqlite3_bind_int64(st, 1, nr->uid);
	sqlite3_bind_int64(st, 2, nr->gid);
	qp_bind_text(st, 3, nr->user);
	if (nr->job_id > 0)
		sqlite3_bind_int64(st, 4, nr->job_id);
	else
		sqlite3_bind_null(st, 4);
	qp_bind_text(st, 5, nr->source);
	qp_bind_text(st, 6, nr->options ? nr->options : "{}");
	sqlite3_bind_int(st, 7, nr->max_retries);
	if (not_before > now)
		sqlite3_bind_int64(st, 8, not_before);
	else
		sqlite3_bind_null(st, 8);
	sqlite3_bind_int64(st, 9, now);
	if (qp_step_done(q, st, err, errlen) < 0)
		goto out;
	id = sqlite3_last_insert_rowid(q->db);
	st = qp_prep(q, "INSERT OR IGNORE INTO items (request_id, relpath, type, size, mtime, state)"
		     " VALUES (?1,?2,'file',?3,?4,'queued')", err, errlen);
	if (!st)
		goto out;
	for (size_t i = 0; i < n; i++) {
		sqlite3_bind_int64(st, 1, id);
		qp_bind_text(st, 2, items[i].relpath);
		sqlite3_bind_int64(st, 3, items[i].size);
		sqlite3_bind_int64(st, 4, items[i].mtime_ns);
		if (sqlite3_step(st) != SQLITE_DONE) {
			qp_err(err, errlen, "database: %s", sqlite3_errmsg(q->db));
			sqlite3_finalize(st);
			goto out;
		}
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
	}
	sqlite3_finalize(st);
	st = qp_prep(q, "UPDATE requests SET files_total=?2, bytes_total=(SELECT coalesce(sum(size),0)"
		     " FROM items WHERE request_id=?1) WHERE id=?1", err, errlen);
	if (!st)
		goto out;
	sqlite3_bind_int64(st, 1, id);
	sqlite3_bind_int64(st, 2, (int64_t)n);
	if (qp_step_done(q, st, err, errlen) < 0)
		goto out;
	*id_out = id;
	rc = 0;
out:
	return qp_end(q, rc, 1, err, errlen);
}

int queue_cleanup_counts(struct queue *q, struct cleanup_counts *c, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	memset(c, 0, sizeof(*c));
	st = qp_read(q, "SELECT"
		     " (SELECT count(*) FROM requests WHERE action='purge' AND state IN"
		     "  ('queued','running','verifying','failed_retryable')),"
		     " (SELECT count(*) FROM requests WHERE action='purge' AND state='done'),"
		     " (SELECT count(*) FROM items i JOIN requests r ON r.id=i.request_id"
		     "  WHERE r.action='purge' AND i.state='done'),"
		     " (SELECT coalesce(sum(i.size),0) FROM items i JOIN requests r"
		     "  ON r.id=i.request_id WHERE r.action='purge' AND i.state='done')", err, errlen);
	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		c->pending = sqlite3_column_int64(st, 0);
		c->done = sqlite3_column_int64(st, 1);
		c->files_freed = sqlite3_column_int64(st, 2);
		c->bytes_freed = sqlite3_column_int64(st, 3);
	}
	return qp_read_end(q, st, rc, err, errlen);
}
