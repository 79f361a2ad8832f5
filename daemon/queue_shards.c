/* queue_shards.c - see queue_shards.h. */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue_private.h"
#include "queue_shards.h"

/*
 * Version 3. shard_files is keyed by (request, relpath): a file is in one
 * shard of a plan; the index by shard serves the mover's fetch.
 */
const char *const queue_shards_schema =
	"CREATE TABLE IF NOT EXISTS shards ("
	" request_id INTEGER NOT NULL REFERENCES requests(id), idx INTEGER NOT NULL,"
	" state TEXT NOT NULL DEFAULT 'queued'"
	"  CHECK (state IN ('queued','submitted','done','failed')),"
	" slurm_job INTEGER NOT NULL DEFAULT 0, files INTEGER NOT NULL DEFAULT 0,"
	" bytes INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0, error TEXT,"
	" updated INTEGER NOT NULL, PRIMARY KEY (request_id, idx));"
	"CREATE TABLE IF NOT EXISTS shard_files ("
	" request_id INTEGER NOT NULL, relpath TEXT NOT NULL, idx INTEGER NOT NULL,"
	" size INTEGER NOT NULL, PRIMARY KEY (request_id, relpath)) WITHOUT ROWID;"
	"CREATE INDEX IF NOT EXISTS shard_files_idx ON shard_files(request_id, idx, relpath);";

/* Run at every open (databases of version 3 made before it lack it). */
const char *const queue_shards_index =
	"CREATE INDEX IF NOT EXISTS shards_job ON shards(slurm_job);";

static const char *const _names[] = { "queued", "submitted", "done", "failed" };

const char *queue_shard_state_name(enum queue_shard_state s)
{
	return (unsigned)s < 4 ? _names[s] : "?";
}

static int _state_from(const char *s)
{
	for (int i = 0; s && i < 4; i++)
		if (strcmp(s, _names[i]) == 0)
			return i;
	return -1;
}

void queue_shards_free(struct queue_shard *s, int n)
{
	for (int i = 0; s && i < n; i++)
		free(s[i].error);
	free(s);
}

int queue_shards_create(struct queue *q, int64_t req, int nshards,
			const struct queue_shard_file *files, size_t nfiles, char *err,
			size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int64_t now = qp_now();
	int rc = -1;
	char sql[160];

	qp_begin(q);
	snprintf(sql, sizeof(sql), "DELETE FROM shard_files WHERE request_id=%lld;"
		 "DELETE FROM shards WHERE request_id=%lld;", (long long)req, (long long)req);
	if (qp_exec(q, sql, err, errlen) < 0)
		goto out;
	st = qp_prep(q, "INSERT INTO shards (request_id, idx, updated) VALUES (?1, ?2, ?3)",
		     err, errlen);
	if (!st)
		goto out;
	for (int i = 0; i < nshards; i++) {
		sqlite3_bind_int64(st, 1, req);
		sqlite3_bind_int(st, 2, i);
		sqlite3_bind_int64(st, 3, now);
		if (sqlite3_step(st) != SQLITE_DONE) {
			qp_err(err, errlen, "database: %s", sqlite3_errmsg(q->db));
			goto out;
		}
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	st = qp_prep(q, "INSERT INTO shard_files (request_id, relpath, idx, size)"
		     " VALUES (?1, ?2, ?3, ?4)", err, errlen);
	if (!st)
		goto out;
	for (size_t i = 0; i < nfiles; i++) {
		sqlite3_bind_int64(st, 1, req);
		qp_bind_text(st, 2, files[i].relpath);
		sqlite3_bind_int(st, 3, files[i].idx);
		sqlite3_bind_int64(st, 4, files[i].size);
		if (sqlite3_step(st) != SQLITE_DONE) {
			qp_err(err, errlen, "database: shard file %s: %s", files[i].relpath,
			       sqlite3_errmsg(q->db));
			goto out;
		}
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	st = NULL;
	snprintf(sql, sizeof(sql), "UPDATE shards SET files=(SELECT count(*) FROM shard_files f"
		 " WHERE f.request_id=shards.request_id AND f.idx=shards.idx) WHERE request_id=%lld;",
		 (long long)req);
	if (qp_exec(q, sql, err, errlen) < 0)
		goto out;
	snprintf(sql, sizeof(sql), "UPDATE shards SET bytes=(SELECT COALESCE(sum(size),0) FROM"
		 " shard_files f WHERE f.request_id=shards.request_id AND f.idx=shards.idx)"
		 " WHERE request_id=%lld;", (long long)req);
	rc = qp_exec(q, sql, err, errlen) < 0 ? -1 : 0;
out:
	sqlite3_finalize(st);
	return qp_end(q, rc, 1, err, errlen);
}

int queue_shards_list(struct queue *q, int64_t req, struct queue_shard **out, int *n,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st;
	struct queue_shard *s = NULL;
	int cap = 0, rc;

	*out = NULL;
	*n = 0;
	st = qp_read(q, "SELECT idx, state, slurm_job, files, bytes, attempts, error FROM shards"
		     " WHERE request_id=?1 ORDER BY idx", err, errlen);
	if (!st)
		return -1;
	sqlite3_bind_int64(st, 1, req);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct queue_shard *e;
		int state = _state_from((const char *)sqlite3_column_text(st, 1));

		if (*n == cap) {
			cap = cap ? cap * 2 : 8;
			e = realloc(s, (size_t)cap * sizeof(*s));
			if (!e) {
				qp_err(err, errlen, "out of memory");
				rc = -1;
				break;
			}
			s = e;
		}
		e = &s[(*n)++];
		memset(e, 0, sizeof(*e));
		e->request_id = req;
		e->idx = sqlite3_column_int(st, 0);
		e->state = state < 0 ? QSH_QUEUED : (enum queue_shard_state)state;
		e->slurm_job = sqlite3_column_int64(st, 2);
		e->files = sqlite3_column_int64(st, 3);
		e->bytes = sqlite3_column_int64(st, 4);
		e->attempts = sqlite3_column_int(st, 5);
		e->error = qp_col_dup(st, 6);
	}
	if (qp_read_end(q, st, rc, err, errlen) < 0) {
		queue_shards_free(s, *n);
		*n = 0;
		return -1;
	}
	*out = s;
	return 0;
}

int queue_shard_files(struct queue *q, int64_t req, int idx,
		      int (*fn)(const char *relpath, int64_t size, void *arg), void *arg,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	st = qp_read(q, "SELECT relpath, size FROM shard_files WHERE request_id=?1 AND idx=?2"
		     " ORDER BY relpath", err, errlen);
	if (!st)
		return -1;
	sqlite3_bind_int64(st, 1, req);
	sqlite3_bind_int(st, 2, idx);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (fn((const char *)sqlite3_column_text(st, 0), sqlite3_column_int64(st, 1), arg))
			break;
	return qp_read_end(q, st, rc, err, errlen);
}

int queue_shard_done(struct queue *q, int64_t req, int idx,
		     int (*fn)(const char *relpath, int64_t size, int64_t mtime_ns, void *arg),
		     void *arg, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	st = qp_read(q, "SELECT i.relpath, i.size, i.mtime FROM shard_files f JOIN items i"
		     " ON i.request_id=f.request_id AND i.relpath=f.relpath"
		     " WHERE f.request_id=?1 AND f.idx=?2 AND i.state='done' AND i.type='file'"
		     " ORDER BY f.relpath", err, errlen);
	if (!st)
		return -1;
	sqlite3_bind_int64(st, 1, req);
	sqlite3_bind_int(st, 2, idx);
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (fn((const char *)sqlite3_column_text(st, 0), sqlite3_column_int64(st, 1),
		       sqlite3_column_int64(st, 2), arg))
			break;
	return qp_read_end(q, st, rc, err, errlen);
}

int queue_shard_job(struct queue *q, int64_t job, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	if (job <= 0)
		return 0;
	pthread_mutex_lock(&q->lock);
	st = qp_prep(q, "SELECT 1 FROM shards WHERE slurm_job=?1 LIMIT 1", err, errlen);
	if (!st) {
		pthread_mutex_unlock(&q->lock);
		return -1;
	}
	sqlite3_bind_int64(st, 1, job);
	rc = sqlite3_step(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		qp_err(err, errlen, "database: %s", sqlite3_errmsg(q->db));
	sqlite3_finalize(st);
	pthread_mutex_unlock(&q->lock);
	return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

int queue_shard_submitted(struct queue *q, int64_t req, int idx, int64_t slurm_job,
			  char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	qp_begin(q);
	st = qp_prep(q, "UPDATE shards SET state='submitted', slurm_job=?3, attempts=attempts+1,"
		     " updated=?4 WHERE request_id=?1 AND idx=?2", err, errlen);
	if (!st)
		return qp_end(q, -1, 1, err, errlen);
	sqlite3_bind_int64(st, 1, req);
	sqlite3_bind_int(st, 2, idx);
	sqlite3_bind_int64(st, 3, slurm_job);
	sqlite3_bind_int64(st, 4, qp_now());
	rc = qp_step_done(q, st, err, errlen);
	/* Durable: after a restart the job must be found again, not submitted twice. */
	return qp_end(q, rc, 1, err, errlen);
}

int queue_shard_set(struct queue *q, int64_t req, int idx, int64_t job,
		    enum queue_shard_state to, const char *error, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	qp_begin(q);
	st = qp_prep(q, "UPDATE shards SET state=?3, error=?4, updated=?5,"
		     " slurm_job=CASE WHEN ?3='queued' THEN 0 ELSE slurm_job END"
		     " WHERE request_id=?1 AND idx=?2 AND (?6=0 OR slurm_job=?6)"
		     " AND state IN ('queued','submitted')", err, errlen);
	if (!st)
		return qp_end(q, -1, 0, err, errlen);
	sqlite3_bind_int64(st, 1, req);
	sqlite3_bind_int(st, 2, idx);
	qp_bind_text(st, 3, queue_shard_state_name(to));
	qp_bind_text(st, 4, error);
	sqlite3_bind_int64(st, 5, qp_now());
	sqlite3_bind_int64(st, 6, job);
	rc = qp_step_done(q, st, err, errlen);
	if (rc == 0 && sqlite3_changes(q->db) == 0)
		rc = 1;
	return qp_end(q, rc < 0 ? -1 : 0, 0, err, errlen) < 0 ? -1 : rc;
}

int queue_shards_retry(struct queue *q, int64_t req, char *err, size_t errlen)
{
	char sql[160];

	/* Submitted shards keep their jobs: a restarted daemon adopts them. */
	snprintf(sql, sizeof(sql), "UPDATE shards SET state='queued', slurm_job=0, attempts=0"
		 " WHERE request_id=%lld AND state IN ('failed','queued')", (long long)req);
	pthread_mutex_lock(&q->lock);
	{
		int rc = qp_exec(q, sql, err, errlen);

		pthread_mutex_unlock(&q->lock);
		return rc;
	}
}

int queue_shards_forget_files(struct queue *q, int64_t req, char *err, size_t errlen)
{
	char sql[96];
	int rc;

	snprintf(sql, sizeof(sql), "DELETE FROM shard_files WHERE request_id=%lld", (long long)req);
	pthread_mutex_lock(&q->lock);
	rc = qp_exec(q, sql, err, errlen);
	pthread_mutex_unlock(&q->lock);
	return rc;
}
