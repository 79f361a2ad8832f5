/*
 * queue_cleanup.c - the queue's rows for the input cleanup
 * (queue_cleanup.h): a purge request stored with its items and the time it
 * may run, and the counts /metrics shows. A purge request is an ordinary request (state
 * machine, retries, cancel); only its items are made before it runs.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "queue.h"
#include "queue_cleanup.h"
#include "queue_private.h"

int queue_cleanup_create(struct queue *q, const struct queue_new_request *nr, int64_t not_before,
			 const struct cleanup_item *items, size_t n, int64_t *id_out,
			 char *err, size_t errlen)
{
	struct queue_new_request pr = *nr;
	sqlite3_stmt *st;
	int64_t id;
	int rc = -1;

	/* Whatever the caller filled in, this is a purge and has no destination. */
	pr.action = "purge";
	pr.dest = NULL;
	qp_begin(q);
	if (qp_request_insert(q, &pr, not_before, &id, err, errlen) < 0)
		goto out;
	st = qp_prep(q, "INSERT OR IGNORE INTO items (request_id, relpath, type, size, mtime, state)"
		     " VALUES (?1,?2,'file',?3,?4,'queued')", err, errlen);
	if (!st)
		goto out;
	for (size_t i = 0; i < n; i++)
		if (qp_bindf(st, err, errlen, "ItII", id, items[i].relpath, items[i].size,
			     items[i].mtime_ns) < 0 || qp_step_reset(q, st, err, errlen) < 0) {
			sqlite3_finalize(st);
			goto out;
		}
	sqlite3_finalize(st);
	if (qp_execf(q, "UPDATE requests SET files_total=?2, bytes_total=(SELECT"
		     " coalesce(sum(size),0) FROM items WHERE request_id=?1) WHERE id=?1", err, errlen,
		     "II", id, (int64_t)n) < 0)
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
	/* The totals of the purges that are over, and the purges under way (few). */
	st = qp_read_bulk(q, "SELECT"
			  " (SELECT count(*) FROM requests WHERE action='purge' AND state IN"
			  "  ('queued','running','verifying','failed_retryable')),"
			  " t.done,"
			  " t.files + (SELECT count(*) FROM requests r JOIN items i"
			  "  ON i.request_id=r.id WHERE r.state IN ('queued','running','verifying',"
			  "  'failed_retryable') AND r.action='purge' AND i.state='done'),"
			  " t.bytes + (SELECT coalesce(sum(i.size),0) FROM requests r JOIN items i"
			  "  ON i.request_id=r.id WHERE r.state IN ('queued','running','verifying',"
			  "  'failed_retryable') AND r.action='purge' AND i.state='done')"
			  " FROM cleanup_totals t WHERE t.id = 1", err, errlen);
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
