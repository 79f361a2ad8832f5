/* queue_shards.c - see queue_shards.h. */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "queue_private.h"
#include "queue_shards.h"

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
	char sql[320];

	qp_begin(q);
	snprintf(sql, sizeof(sql), "DELETE FROM shard_files WHERE request_id=%lld;"
		 "DELETE FROM shard_ranges WHERE request_id=%lld;"
		 "DELETE FROM shards WHERE request_id=%lld;", (long long)req, (long long)req,
		 (long long)req);
	if (qp_exec(q, sql, err, errlen) < 0)
		goto out;
	st = qp_prep(q, "INSERT INTO shards (request_id, idx, updated) VALUES (?1, ?2, ?3)",
		     err, errlen);
	if (!st)
		goto out;
	for (int i = 0; i < nshards; i++) {
		if (qp_bindf(st, err, errlen, "IiI", req, i, now) < 0)
			goto out;
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
		if (files[i].ranged)
			continue;
		if (qp_bindf(st, err, errlen, "ItiI", req, files[i].relpath, files[i].idx,
			     files[i].size) < 0)
			goto out;
		if (sqlite3_step(st) != SQLITE_DONE) {
			qp_err(err, errlen, "database: shard file %s: %s", files[i].relpath,
			       sqlite3_errmsg(q->db));
			goto out;
		}
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	st = qp_prep(q, "INSERT INTO shard_ranges (request_id, relpath, off, len, size, idx)"
		     " VALUES (?1, ?2, ?3, ?4, ?5, ?6)", err, errlen);
	if (!st)
		goto out;
	for (size_t i = 0; i < nfiles; i++) {
		if (!files[i].ranged)
			continue;
		if (qp_bindf(st, err, errlen, "ItIIIi", req, files[i].relpath, files[i].off,
			     files[i].len, files[i].size, files[i].idx) < 0)
			goto out;
		if (sqlite3_step(st) != SQLITE_DONE) {
			qp_err(err, errlen, "database: shard range %s@%lld: %s", files[i].relpath,
			       (long long)files[i].off, sqlite3_errmsg(q->db));
			goto out;
		}
		sqlite3_reset(st);
	}
	sqlite3_finalize(st);
	st = NULL;
	/* files: whole files; bytes: theirs and the ranges'. */
	snprintf(sql, sizeof(sql), "UPDATE shards SET files=(SELECT count(*) FROM shard_files f"
		 " WHERE f.request_id=shards.request_id AND f.idx=shards.idx) WHERE request_id=%lld;",
		 (long long)req);
	if (qp_exec(q, sql, err, errlen) < 0)
		goto out;
	snprintf(sql, sizeof(sql), "UPDATE shards SET bytes=(SELECT COALESCE(sum(size),0) FROM"
		 " shard_files f WHERE f.request_id=shards.request_id AND f.idx=shards.idx)"
		 " + (SELECT COALESCE(sum(len),0) FROM shard_ranges g WHERE"
		 " g.request_id=shards.request_id AND g.idx=shards.idx) WHERE request_id=%lld;",
		 (long long)req);
	rc = qp_exec(q, sql, err, errlen) < 0 ? -1 : 0;
out:
	sqlite3_finalize(st);
	return qp_end(q, rc, 1, err, errlen);
}

/* The columns of queue_shards_list's select; the state is read by name. error owned. */
#define SHARD_COL(type, field) QP_COL(type, struct queue_shard, field)
static const struct qp_col _shard_cols[] = {
	SHARD_COL(QC_INT, idx), SHARD_COL(QC_SKIP, state), SHARD_COL(QC_I64, slurm_job),
	SHARD_COL(QC_I64, files), SHARD_COL(QC_I64, bytes), SHARD_COL(QC_INT, attempts),
	SHARD_COL(QC_STR, error),
};

int queue_shards_list(struct queue *q, int64_t req, struct queue_shard **out, int *n,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st;
	struct queue_shard *s = NULL;
	size_t cap = 0;
	int rc;

	*out = NULL;
	*n = 0;
	st = qp_readf(q, "SELECT idx, state, slurm_job, files, bytes, attempts, error FROM shards"
		      " WHERE request_id=?1 ORDER BY idx", err, errlen, "I", req);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct queue_shard *e;
		int state = _state_from((const char *)sqlite3_column_text(st, 1));

		if (grow_array((void **)&s, &cap, (size_t)*n + 1, sizeof(*s), 8) < 0) {
			qp_err(err, errlen, "out of memory");
			rc = -1;
			break;
		}
		e = &s[(*n)++];
		memset(e, 0, sizeof(*e));
		e->request_id = req;
		e->state = state < 0 ? QSH_QUEUED : (enum queue_shard_state)state;
		if (qp_row(st, _shard_cols, QP_NCOLS(_shard_cols), e, err, errlen) < 0) {
			rc = -1;
			break;
		}
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

	st = qp_readf(q, "SELECT relpath, size FROM shard_files WHERE request_id=?1 AND idx=?2"
		      " ORDER BY relpath", err, errlen, "Ii", req, idx);
	if (!st)
		return -1;
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

	st = qp_readf(q, "SELECT i.relpath, i.size, i.mtime FROM shard_files f JOIN items i"
		      " ON i.request_id=f.request_id AND i.relpath=f.relpath"
		      " WHERE f.request_id=?1 AND f.idx=?2 AND i.state='done' AND i.type='file'"
		      " ORDER BY f.relpath", err, errlen, "Ii", req, idx);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (fn((const char *)sqlite3_column_text(st, 0), sqlite3_column_int64(st, 1),
		       sqlite3_column_int64(st, 2), arg))
			break;
	return qp_read_end(q, st, rc, err, errlen);
}

int queue_shard_ranges(struct queue *q, int64_t req, int idx,
		       int (*fn)(const char *relpath, int64_t off, int64_t len, int64_t size,
				 void *arg), void *arg, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	st = qp_readf(q, "SELECT relpath, off, len, size FROM shard_ranges WHERE request_id=?1"
		      " AND idx=?2 AND done=0 ORDER BY relpath, off", err, errlen, "Ii", req, idx);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (fn((const char *)sqlite3_column_text(st, 0), sqlite3_column_int64(st, 1),
		       sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3), arg))
			break;
	return qp_read_end(q, st, rc, err, errlen);
}

int queue_range_done(struct queue *q, int64_t req, int idx, const struct queue_range_rec *rg,
		     char *err, size_t errlen)
{
	const char *relpath = rg->relpath, *cks = rg->cks;
	int64_t off = rg->off, len = rg->len, size = rg->size, mtime_ns = rg->mtime_ns;
	int rc;

	if (!cks || !*cks) {
		qp_err(err, errlen, "request %lld: range %s@%lld: no checksum", (long long)req,
		       relpath, (long long)off);
		return -1;
	}
	qp_begin(q);
	rc = qp_execf(q, "UPDATE shard_ranges SET done=1, src_size=?6, mtime=?7, checksum=?8"
		      " WHERE request_id=?1 AND relpath=?2 AND off=?3 AND len=?4 AND idx=?5"
		      " AND done=0", err, errlen, "ItIIiIIt", req, relpath, off, len, idx, size,
		      mtime_ns, cks);
	if (rc == 0 && sqlite3_changes(q->db) == 0)
		rc = 1;
	return qp_end(q, rc < 0 ? -1 : 0, 0, err, errlen) < 0 ? -1 : rc;
}

/* One file's ranges as queue_ranges_assembled reads them, in offset order. */
struct _assembly {
	char *relpath;               /* owned; NULL: none yet */
	int64_t size, mtime, next;   /* next: where the next range must start */
	int ok;                      /* every range done, from one version of the source */
	struct cksum c;
};

/* The file a ends: fn gets it when it is whole. fn's answer (stop when non-zero). */
static int _assembly_end(struct _assembly *a,
			 int (*fn)(const char *, int64_t, int64_t, const char *, void *),
			 void *arg)
{
	char cks[CKSUM_HEX_MAX], out[CKSUM_HEX_MAX];
	int n, rc = 0;

	if (!a->relpath)
		return 0;
	cksum_final(&a->c, cks);
	/* "ranges-sha256:" and 64 hex digits fit CKSUM_HEX_MAX. */
	n = snprintf(out, sizeof(out), "ranges-%s", cks);
	if (a->ok && a->next == a->size && n > 0 && n < (int)sizeof(out))
		rc = fn(a->relpath, a->size, a->mtime, out, arg);
	free(a->relpath);
	a->relpath = NULL;
	return rc;
}

int queue_ranges_assembled(struct queue *q, int64_t req, enum cksum_algo algo,
			   int (*fn)(const char *relpath, int64_t size, int64_t mtime_ns,
				     const char *cks, void *arg), void *arg, char *err,
			   size_t errlen)
{
	struct _assembly a = { 0 };
	sqlite3_stmt *st;
	int rc, stop = 0;

	st = qp_readf(q, "SELECT relpath, off, len, size, done, src_size, mtime, checksum"
		      " FROM shard_ranges r WHERE request_id=?1 AND NOT EXISTS (SELECT 1 FROM items"
		      " i WHERE i.request_id=r.request_id AND i.relpath=r.relpath AND"
		      " i.state='done') ORDER BY relpath, off", err, errlen, "I", req);
	if (!st)
		return -1;
	while (!stop && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *rel = (const char *)sqlite3_column_text(st, 0);
		const char *cks = (const char *)sqlite3_column_text(st, 7);
		int64_t off = sqlite3_column_int64(st, 1), len = sqlite3_column_int64(st, 2);
		int64_t size = sqlite3_column_int64(st, 3), mtime = sqlite3_column_int64(st, 6);

		if (!a.relpath || strcmp(a.relpath, rel) != 0) {
			stop = _assembly_end(&a, fn, arg);
			if (stop)
				break;
			if (!(a.relpath = strdup(rel)) || cksum_init(&a.c, algo) < 0) {
				free(a.relpath);
				a.relpath = NULL;
				qp_err(err, errlen, "out of memory");
				rc = -1;
				break;
			}
			a.size = size;
			a.mtime = mtime;
			a.next = 0;
			a.ok = 1;
		}
		/* Contiguous, done, and every range saw the size and mtime of the first. */
		a.ok = a.ok && off == a.next && sqlite3_column_int(st, 4) == 1 &&
		       sqlite3_column_int64(st, 5) == size && mtime == a.mtime && cks && *cks;
		a.next = off + len;
		if (a.ok) {
			cksum_update(&a.c, cks, strlen(cks));
			cksum_update(&a.c, "\n", 1);
		}
	}
	if (rc == SQLITE_ROW || rc == SQLITE_DONE) {
		if (!stop)
			_assembly_end(&a, fn, arg);
		rc = SQLITE_DONE;
	} else if (a.relpath) {
		cksum_abort(&a.c);
		free(a.relpath);
	}
	return qp_read_end(q, st, rc, err, errlen);
}

int queue_ranges_done(struct queue *q, int64_t req,
		      int (*fn)(const char *relpath, int64_t off, int64_t len, int64_t src_size,
				int64_t mtime_ns, const char *cks, void *arg), void *arg,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	st = qp_readf(q, "SELECT relpath, off, len, src_size, mtime, checksum FROM shard_ranges r"
		      " WHERE request_id=?1 AND done=1 AND NOT EXISTS (SELECT 1 FROM items i"
		      " WHERE i.request_id=r.request_id AND i.relpath=r.relpath AND"
		      " i.state='done') ORDER BY relpath, off", err, errlen, "I", req);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		const char *cks = (const char *)sqlite3_column_text(st, 5);

		if (fn((const char *)sqlite3_column_text(st, 0), sqlite3_column_int64(st, 1),
		       sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3),
		       sqlite3_column_int64(st, 4), cks ? cks : "", arg)) {
			rc = SQLITE_DONE;
			break;
		}
	}
	return qp_read_end(q, st, rc, err, errlen);
}

int queue_range_undo(struct queue *q, int64_t req, const char *relpath, int64_t off, char *err,
		     size_t errlen)
{
	int rc;

	qp_begin(q);
	rc = qp_execf(q, "UPDATE shard_ranges SET done=0, checksum=NULL WHERE request_id=?1"
		      " AND relpath=?2 AND off=?3", err, errlen, "ItI", req, relpath, off);
	return qp_end(q, rc, 0, err, errlen);
}

int queue_item_unverified(struct queue *q, int64_t req, const char *relpath, const char *error,
			  char *err, size_t errlen)
{
	int rc;

	qp_begin(q);
	/* The request's count first, while the item still says it was counted. */
	rc = qp_execf(q, "UPDATE requests SET files_done=files_done-1, bytes_done=bytes_done-"
		      "(SELECT size FROM items WHERE request_id=?1 AND relpath=?2), updated=?3"
		      " WHERE id=?1 AND EXISTS (SELECT 1 FROM items WHERE request_id=?1 AND"
		      " relpath=?2 AND type='file' AND state='done')", err, errlen, "ItI", req,
		      relpath, qp_now());
	if (rc == 0)
		rc = qp_execf(q, "UPDATE items SET state='failed', error=?3 WHERE request_id=?1"
			      " AND relpath=?2 AND type='file' AND state='done'", err, errlen, "Itt",
			      req, relpath, error);
	return qp_end(q, rc, 0, err, errlen);
}

int queue_shard_job(struct queue *q, int64_t job, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	if (job <= 0)
		return 0;
	qp_lock(q);
	st = qp_prepf(q, "SELECT 1 FROM shards WHERE slurm_job=?1 LIMIT 1", err, errlen, "I", job);
	if (!st) {
		qp_unlock(q);
		return -1;
	}
	rc = sqlite3_step(st);
	if (rc != SQLITE_DONE && rc != SQLITE_ROW)
		qp_err(err, errlen, "database: %s", sqlite3_errmsg(q->db));
	sqlite3_finalize(st);
	qp_unlock(q);
	return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : -1;
}

int queue_shard_submitted(struct queue *q, int64_t req, int idx, int64_t slurm_job,
			  char *err, size_t errlen)
{
	int rc;

	qp_begin(q);
	rc = qp_execf(q, "UPDATE shards SET state='submitted', slurm_job=?3, attempts=attempts+1,"
		      " updated=?4 WHERE request_id=?1 AND idx=?2", err, errlen, "IiII", req, idx,
		      slurm_job, qp_now());
	/* Durable: after a restart the job must be found again, not submitted twice. */
	return qp_end(q, rc, 1, err, errlen);
}

int queue_shard_set(struct queue *q, int64_t req, int idx, int64_t job,
		    enum queue_shard_state to, const char *error, char *err, size_t errlen)
{
	int rc;

	qp_begin(q);
	rc = qp_execf(q, "UPDATE shards SET state=?3, error=?4, updated=?5,"
		      " slurm_job=CASE WHEN ?3='queued' THEN 0 ELSE slurm_job END"
		      " WHERE request_id=?1 AND idx=?2 AND (?6=0 OR slurm_job=?6)"
		      " AND state IN ('queued','submitted')", err, errlen, "IittII", req, idx,
		      queue_shard_state_name(to), error, qp_now(), job);
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
	qp_lock(q);
	{
		int rc = qp_exec(q, sql, err, errlen);

		qp_unlock(q);
		return rc;
	}
}

int queue_shards_forget_files(struct queue *q, int64_t req, char *err, size_t errlen)
{
	char sql[96];
	int rc;

	snprintf(sql, sizeof(sql), "DELETE FROM shard_files WHERE request_id=%lld", (long long)req);
	qp_lock(q);
	rc = qp_exec(q, sql, err, errlen);
	qp_unlock(q);
	return rc;
}
