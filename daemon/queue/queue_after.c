/* queue_after.c - see queue_after.h. */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "queue_after.h"
#include "queue_private.h"

static int _same(const char *a, const char *b)
{
	return (!a && !b) || (a && b && !strcmp(a, b));
}

int queue_after_set(struct queue *q, int64_t job_id, const char *jobs, const char *state,
		    const char *reason, int *changed, char *err, size_t errlen)
{
	char *oj = NULL, *os = NULL, *orr = NULL;
	int rc, found;

	if (changed)
		*changed = 0;
	found = queue_after_get(q, job_id, &oj, &os, &orr, err, errlen);
	if (found < 0)
		return -1;
	if (found == 0 && _same(oj, jobs) && _same(os, state) && _same(orr, reason)) {
		free(oj);
		free(os);
		free(orr);
		return 0;
	}
	free(oj);
	free(os);
	free(orr);
	if (changed)
		*changed = 1;
	qp_begin(q);
	rc = qp_execf(q, "INSERT INTO after_waits (job_id, jobs, state, reason, updated)"
		      " VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT(job_id) DO UPDATE SET"
		      " jobs = ?2, state = ?3, reason = ?4, updated = ?5", err, errlen, "ItttI",
		      job_id, jobs, state, reason, qp_now());
	/* A verdict the user was shown survives a power loss. */
	return qp_end(q, rc, 1, err, errlen);
}

int queue_after_get(struct queue *q, int64_t job_id, char **jobs, char **state, char **reason,
		    char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	*jobs = *state = *reason = NULL;
	st = qp_readf(q, "SELECT jobs, state, reason FROM after_waits WHERE job_id = ?1", err,
		      errlen, "I", job_id);
	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*jobs = qp_col_dup(st, 0);
		*state = qp_col_dup(st, 1);
		*reason = qp_col_dup(st, 2);
		if (!*jobs || !*state) {
			free(*jobs);
			free(*state);
			free(*reason);
			*jobs = *state = *reason = NULL;
			qp_err(err, errlen, "out of memory");
			qp_read_end(q, st, -1, err, errlen);
			return -1;
		}
	}
	if (qp_read_end(q, st, rc, err, errlen) < 0)
		return -1;
	return rc == SQLITE_ROW ? 0 : 1;
}

int queue_after_transfers(struct queue *q, int64_t job_id, int64_t uid,
			  struct queue_after_sum *s, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	memset(s, 0, sizeof(*s));
	st = qp_readf(q, "SELECT state, count(*), max(error), sum(files_done), sum(files_total)"
		     " FROM requests WHERE job_id = ?1 AND uid = ?2 AND (action IN ('archive', 'stage_out') OR"
		     " (action = 'label' AND json_extract(options, '$.policy') IS NULL))"
		     /* A run superseded by a rerun (queue_job_rerun) is not the final run. */
		     " AND id > COALESCE((SELECT before_id FROM job_reruns WHERE job_id = ?1), 0)"
		     " GROUP BY state", err, errlen, "II", job_id, uid);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *name = (const char *)sqlite3_column_text(st, 0);
		const char *e = (const char *)sqlite3_column_text(st, 2);
		int n = sqlite3_column_int(st, 1);
		enum queue_state qs;

		if (!name || queue_state_from_name(name, &qs) < 0)
			continue;
		s->total += n;
		s->files_done += sqlite3_column_int64(st, 3);
		s->files_total += sqlite3_column_int64(st, 4);
		if (qs == QS_DONE) {
			s->done += n;
		} else if (qs == QS_FAILED_FINAL || qs == QS_CANCELLED) {
			s->failed += n;
			free(s->error);  /* a final failure's error wins over a retry's */
			s->error = strdup(e ? e : qs == QS_CANCELLED ? "cancelled" : "failed");
		} else {
			s->active += n;
			if (qs == QS_FAILED_RETRYABLE) {
				s->retrying += n;
				if (!s->error && e)
					s->error = strdup(e);
			}
		}
	}
	if (qp_read_end(q, st, rc, err, errlen) < 0) {
		free(s->error);
		s->error = NULL;
		return -1;
	}
	return 0;
}

int queue_after_tasks(struct queue *q, int64_t array_job_id, int64_t task_id, int64_t *ids,
		      int max, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int n = 0, rc;

	st = qp_readf(q, "SELECT job_id FROM jobs WHERE array_job_id = ?1 AND"
		      " (?2 < 0 OR array_task_id = ?2) ORDER BY array_task_id LIMIT ?3", err, errlen,
		      "IIi", array_job_id, task_id, max);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < max)
		ids[n++] = sqlite3_column_int64(st, 0);
	return qp_read_end(q, st, rc, err, errlen) < 0 ? -1 : n;
}
