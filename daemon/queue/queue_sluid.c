/* queue_sluid.c - the SLUIDs of each job's runs (queue_sluid.h). */
#include <stdio.h>
#include <string.h>

#include "queue_private.h"
#include "queue_sluid.h"

/* The current run's SLUID of job_id into out ("" if none), inside the
 * caller's transaction. 0 or -1 with err. */
static int _current_locked(struct queue *q, int64_t job_id, char *out, size_t outlen,
			   char *err, size_t errlen)
{
	sqlite3_stmt *st = qp_prepf(q, "SELECT sluid FROM sluid_runs WHERE job_id=?1 ORDER BY"
				    " seq DESC LIMIT 1", err, errlen, "I", job_id);
	int rc;

	out[0] = '\0';
	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW && sqlite3_column_text(st, 0))
		snprintf(out, outlen, "%s", (const char *)sqlite3_column_text(st, 0));
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		qp_err(err, errlen, "reading job %lld's SLUID: %s", (long long)job_id,
		       sqlite3_errmsg(q->db));
		return -1;
	}
	return 0;
}

int queue_job_sluid_record(struct queue *q, int64_t job_id, const char *sluid, char *known,
			   size_t knownlen, char *err, size_t errlen)
{
	char cur[QUEUE_SLUID_MAX + 1];
	int rc = -1, seen = QS_SLUID_CURRENT;

	known[0] = '\0';
	qp_begin(q);
	if (_current_locked(q, job_id, cur, sizeof(cur), err, errlen) < 0)
		goto out;
	snprintf(known, knownlen, "%s", cur);
	if (strcmp(cur, sluid) == 0) {
		rc = 0;
		goto out;
	}
	/* Not the current run's: an earlier run's if it was recorded, else new. */
	rc = qp_execf(q, "INSERT INTO sluid_runs (job_id, sluid, at) VALUES (?1, ?2, ?3)"
		      " ON CONFLICT(job_id, sluid) DO NOTHING", err, errlen, "ItI", job_id,
		      sluid, qp_now());
	if (rc == 0)
		seen = sqlite3_changes(q->db) == 0 ? QS_SLUID_EARLIER :
		       cur[0] ? QS_SLUID_NEW : QS_SLUID_CURRENT;
out:
	rc = qp_end(q, rc, 1, err, errlen);
	return rc < 0 ? -1 : seen;
}

int queue_job_sluid_get(struct queue *q, int64_t job_id, char *out, size_t outlen, char *err,
			size_t errlen)
{
	sqlite3_stmt *st = qp_readf(q, "SELECT sluid FROM sluid_runs WHERE job_id=?1 ORDER BY"
				    " seq DESC LIMIT 1", err, errlen, "I", job_id);
	int rc;

	out[0] = '\0';
	if (!st)
		return -1;
	if ((rc = sqlite3_step(st)) == SQLITE_ROW && sqlite3_column_text(st, 0))
		snprintf(out, outlen, "%s", (const char *)sqlite3_column_text(st, 0));
	return qp_read_end(q, st, rc, err, errlen);
}
