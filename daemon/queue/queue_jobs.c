/* queue_jobs.c - items, audit and jobs of the durable queue (see queue.h). */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "queue.h"
#include "queue_private.h"

int queue_item_start(struct queue *q, int64_t req, const struct queue_item_meta *m, char *err,
		     size_t errlen)
{
	const char *relpath = m->relpath, *type = m->type;
	int64_t size = m->size, mtime_ns = m->mtime_ns;
	int mode = m->mode;
	sqlite3_stmt *st;
	int rc = -1;

	qp_begin(q);
	st = qp_cachedf(q, "INSERT INTO items (request_id, relpath, type, size, mtime, mode, state,"
			" attempts) VALUES (?1,?2,?3,?4,?5,?6,'running',1)"
			" ON CONFLICT (request_id, relpath) DO UPDATE SET type=?3, size=?4, mtime=?5,"
			" mode=?6, state='running', attempts=attempts+1, checksum_src=NULL,"
			" checksum_dst=NULL, error=NULL", err, errlen, "IttIIi", req, relpath, type,
			size, mtime_ns, mode);
	if (st)
		rc = qp_step_reset(q, st, err, errlen);
	return qp_end(q, rc, 0, err, errlen);
}

int queue_item_copied(struct queue *q, int64_t req, const char *relpath, const char *cks_src,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc = -1;

	qp_begin(q);
	st = qp_cachedf(q, "UPDATE items SET state='verifying', checksum_src=?3 WHERE request_id=?1"
			" AND relpath=?2 AND state='running'", err, errlen, "Itt", req, relpath,
			cks_src);
	if (st) {
		rc = qp_step_reset(q, st, err, errlen);
		if (rc == 0 && sqlite3_changes(q->db) != 1) {
			qp_err(err, errlen, "request %lld: item '%s' was not running",
			       (long long)req, relpath);
			rc = -1;
		}
	}
	return qp_end(q, rc, 0, err, errlen);
}

/* One more file done for request req, of size bytes (inside the caller's transaction). */
static int _count_file_done(struct queue *q, int64_t req, int64_t size, char *err, size_t errlen)
{
	sqlite3_stmt *st = qp_cachedf(q, "UPDATE requests SET files_done=files_done+1,"
				      " bytes_done=bytes_done+?2, updated=?3 WHERE id=?1", err,
				      errlen, "III", req, size, qp_now());

	if (!st)
		return -1;
	return qp_step_reset(q, st, err, errlen);
}

/*
 * The audit row of a verified file (inside the caller's transaction). The
 * unique key makes a redo after a crash add no second row.
 */
static int _audit_add(struct queue *q, int64_t req, const struct queue_audit *a, char *err,
		      size_t errlen)
{
	sqlite3_stmt *st = qp_cachedf(q, "INSERT OR IGNORE INTO audit (job_id, uid, request_id,"
				      " path_src, path_dst, bytes, checksum, started, ended)"
				      " VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9)", err, errlen,
				      "PIIttItII", a->job_id, (int64_t)a->uid, req, a->path_src,
				      a->path_dst, a->bytes, a->checksum, a->started, a->ended);

	if (!st)
		return -1;
	return qp_step_reset(q, st, err, errlen);
}

/* The checksum refusal of queue_item_done and queue_item_file_done, in err. */
static void _cks_mismatch(char *err, size_t errlen, int64_t req, const char *relpath)
{
	qp_err(err, errlen, "request %lld: item '%s': destination checksum does not match "
	       "the source", (long long)req, relpath);
}

/*
 * After an item's done statement st (cached; NULL when it failed): step it,
 * count one more file done when counted, add the audit row a if any. 0 or -1.
 */
static int _item_done_tail(struct queue *q, sqlite3_stmt *st, int64_t req, int counted,
			   int64_t size, const struct queue_audit *a, char *err, size_t errlen)
{
	if (!st)
		return -1;
	if (qp_step_reset(q, st, err, errlen) < 0)
		return -1;
	if (counted) {
		if (_count_file_done(q, req, size, err, errlen) < 0)
			return -1;
	}
	if (a && _audit_add(q, req, a, err, errlen) < 0)
		return -1;
	return 0;
}

int queue_item_done(struct queue *q, int64_t req, const char *relpath, const char *cks_dst,
		    const struct queue_audit *a, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc = -1;
	int64_t size = 0;
	int is_file = 0;

	qp_begin(q);
	/*
	 * Only an item that was copied (verifying) and whose destination checksum
	 * equals the source's may become done: the comparison is done here as well
	 * as in the worker, so nothing is marked done unverified.
	 */
	st = qp_cachedf(q, "SELECT size, type, checksum_src FROM items WHERE request_id=?1 AND"
			" relpath=?2 AND state IN ('verifying','running')", err, errlen, "It", req,
			relpath);
	if (!st)
		goto out;
	if (sqlite3_step(st) != SQLITE_ROW) {
		sqlite3_reset(st);
		qp_err(err, errlen, "request %lld: item '%s' is not being copied", (long long)req,
		       relpath);
		goto out;
	}
	size = sqlite3_column_int64(st, 0);
	is_file = sqlite3_column_text(st, 1) &&
		  strcmp((const char *)sqlite3_column_text(st, 1), "file") == 0;
	if (is_file && (!cks_dst || !sqlite3_column_text(st, 2) ||
			strcmp((const char *)sqlite3_column_text(st, 2), cks_dst) != 0)) {
		sqlite3_reset(st);
		_cks_mismatch(err, errlen, req, relpath);
		goto out;
	}
	sqlite3_reset(st);
	st = qp_cachedf(q, "UPDATE items SET state='done', checksum_dst=?3, error=NULL"
			" WHERE request_id=?1 AND relpath=?2", err, errlen, "Itt", req, relpath,
			cks_dst);
	rc = _item_done_tail(q, st, req, is_file, size, a, err, errlen);
out:
	return qp_end(q, rc, 0, err, errlen);
}

int queue_item_file_done(struct queue *q, int64_t req, const struct queue_file_done *f,
			 char *err, size_t errlen)
{
	int stored;

	return queue_items_files_done(q, req, f, 1, &stored, err, errlen) == 0 ? 0 : -1;
}

/* The update of a verified file's existing item (cond: "" or a condition on its state). */
static int _file_redone(struct queue *q, int64_t req, const struct queue_file_done *f,
			const char *cond, char *err, size_t errlen)
{
	static const char any[] = "UPDATE items SET type='file', size=?3, mtime=?4, mode=?5,"
		" checksum_src=?6, checksum_dst=?6, error=NULL, attempts=attempts+1, state='done'"
		" WHERE request_id=?1 AND relpath=?2";
	static const char not_done[] = "UPDATE items SET type='file', size=?3, mtime=?4, mode=?5,"
		" checksum_src=?6, checksum_dst=?6, error=NULL, attempts=attempts+1, state='done'"
		" WHERE request_id=?1 AND relpath=?2 AND state != 'done'";
	sqlite3_stmt *st = qp_cachedf(q, *cond ? not_done : any, err, errlen, "ItIIit", req,
				      f->relpath, f->size, f->mtime_ns, f->mode, f->cks_dst);

	return st ? qp_step_reset(q, st, err, errlen) : -1;
}

/*
 * One verified file in the caller's transaction: its item made or made done
 * (*counted = 1 unless it was done already) and its audit row. The common
 * case, a file the queue has not seen, is one insert; an item that exists
 * (started by a worker, or reported again after a mover's restart) is
 * updated, and counted only if it was not done. 0 or -1.
 */
static int _file_done_one(struct queue *q, int64_t req, const struct queue_file_done *f,
			  int *counted, char *err, size_t errlen)
{
	sqlite3_stmt *st;

	st = qp_cachedf(q, "INSERT INTO items (request_id, relpath, type, size, mtime, mode, state,"
			" checksum_src, checksum_dst, attempts) VALUES"
			" (?1,?2,'file',?3,?4,?5,'done',?6,?6,1) ON CONFLICT DO NOTHING", err, errlen,
			"ItIIit", req, f->relpath, f->size, f->mtime_ns, f->mode, f->cks_dst);
	if (!st || qp_step_reset(q, st, err, errlen) < 0)
		return -1;
	*counted = sqlite3_changes(q->db) == 1;
	if (!*counted) {
		if (_file_redone(q, req, f, " AND state != 'done'", err, errlen) < 0)
			return -1;
		*counted = sqlite3_changes(q->db) == 1;
		/* Done already: refreshed, not counted again. */
		if (!*counted && _file_redone(q, req, f, "", err, errlen) < 0)
			return -1;
	}
	return f->audit.path_src ? _audit_add(q, req, &f->audit, err, errlen) : 0;
}

int queue_items_files_done(struct queue *q, int64_t req, const struct queue_file_done *f, int n,
			   int *stored, char *err, size_t errlen)
{
	int i, rc = 0, counted, bad = -1;
	int64_t files = 0, bytes = 0;
	sqlite3_stmt *st;

	*stored = 0;
	/* Checked here as well as in the worker: nothing is marked done unverified. */
	for (i = 0; i < n && bad < 0; i++)
		if (!f[i].cks_src || !f[i].cks_dst || !*f[i].cks_src ||
		    strcmp(f[i].cks_src, f[i].cks_dst) != 0)
			bad = i;
	if (bad >= 0)
		n = bad;
	qp_begin(q);
	for (i = 0; i < n && rc == 0; i++) {
		counted = 0;
		rc = _file_done_one(q, req, &f[i], &counted, err, errlen);
		files += counted;
		bytes += counted ? f[i].size : 0;
	}
	if (rc == 0 && files > 0) {
		st = qp_cachedf(q, "UPDATE requests SET files_done=files_done+?2,"
				" bytes_done=bytes_done+?3, updated=?4 WHERE id=?1", err, errlen,
				"IIII", req, files, bytes, qp_now());
		rc = st ? qp_step_reset(q, st, err, errlen) : -1;
	}
	if (qp_end(q, rc, 0, err, errlen) < 0)
		return -1;
	*stored = n;
	if (bad >= 0) {
		_cks_mismatch(err, errlen, req, f[bad].relpath);
		return 1;
	}
	return 0;
}

int queue_item_finish(struct queue *q, int64_t req, const char *relpath, const char *type,
		      enum queue_item_state state, const char *error, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc = -1;

	qp_begin(q);
	st = qp_cachedf(q, "INSERT INTO items (request_id, relpath, type, state, error, attempts)"
			" VALUES (?1,?2,?3,?4,?5,1) ON CONFLICT (request_id, relpath) DO UPDATE"
			" SET state=?4, error=?5", err, errlen, "Itttt", req, relpath,
			type ? type : "file", queue_item_state_name(state), error);
	if (st)
		rc = qp_step_reset(q, st, err, errlen);
	return qp_end(q, rc, 0, err, errlen);
}

/* The columns of queue_item_list's select; the state is read by name. Strings borrowed. */
#define ITEM_COL(type, field) QP_COL(type, struct queue_item, field)
static const struct qp_col _item_cols[] = {
	ITEM_COL(QC_BORROW, relpath), ITEM_COL(QC_BORROW, type), ITEM_COL(QC_I64, size),
	ITEM_COL(QC_I64, mtime_ns), ITEM_COL(QC_INT, mode), ITEM_COL(QC_SKIP, state),
	ITEM_COL(QC_BORROW, checksum_src), ITEM_COL(QC_BORROW, checksum_dst),
	ITEM_COL(QC_INT, attempts), ITEM_COL(QC_BORROW, error),
};

int queue_item_list(struct queue *q, int64_t req, int state, int limit,
		    int (*fn)(const struct queue_item *it, void *arg), void *arg,
		    char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	st = qp_readf(q, "SELECT relpath, type, size, mtime, mode, state, checksum_src,"
		      " checksum_dst, attempts, error FROM items WHERE request_id=?1 AND"
		      " (?2 IS NULL OR state=?2) ORDER BY relpath LIMIT ?3", err, errlen, "Iti", req,
		      state >= 0 ? queue_item_state_name((enum queue_item_state)state) : NULL,
		      limit > 0 ? limit : -1);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct queue_item it = { 0 };

		if (qp_row(st, _item_cols, QP_NCOLS(_item_cols), &it, err, errlen) < 0) {
			rc = -1;
			break;
		}
		it.state = (enum queue_item_state)qp_item_state_from_name(
			(const char *)sqlite3_column_text(st, 5));
		if (!it.relpath || !it.type)
			continue;
		if (fn(&it, arg)) {
			rc = SQLITE_DONE;
			break;
		}
	}
	return qp_read_end(q, st, rc, err, errlen);
}

/*
 * One destination looked up in requests_archive_dest (queue.c), the newest
 * done archive to exactly that path: 1 (set *req and *dest), 0, or -1.
 */
static int _archive_at(struct queue *q, const char *dest_path, int64_t *req, char **dest,
		       char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc, found = 0;

	st = qp_readf(q, "SELECT id, dest FROM requests WHERE action='archive' AND state='done'"
		      " AND dest=?1 ORDER BY id DESC LIMIT 1", err, errlen, "t", dest_path);
	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		*req = sqlite3_column_int64(st, 0);
		*dest = qp_col_dup(st, 1);
		found = *dest ? 1 : 0;
		rc = SQLITE_DONE;
	}
	if (qp_read_end(q, st, rc, err, errlen) < 0) {
		free(*dest);
		*dest = NULL;
		return -1;
	}
	return found;
}

/*
 * The deepest of path and the directories above it (each prefix that ends
 * before a '/') that a done archive went to, looked up one at a time,
 * deepest first, in an index: a select that compared every done archive's
 * destination with path read the whole table at each stage-in, in the main
 * loop (300 ms at a million requests).
 */
int queue_archive_of(struct queue *q, const char *path, int64_t *req, char **dest,
		     char *err, size_t errlen)
{
	char *prefix = strdup(path), *slash;
	int rc;

	*dest = NULL;
	if (!prefix) {
		qp_err(err, errlen, "out of memory");
		return -1;
	}
	rc = _archive_at(q, prefix, req, dest, err, errlen);
	while (rc == 0 && (slash = strrchr(prefix, '/')) && slash != prefix) {
		*slash = '\0';
		rc = _archive_at(q, prefix, req, dest, err, errlen);
	}
	free(prefix);
	return rc;
}

/* A job known here by its id only: the upsert leaves the rest as stored. */
#define QJ_ID_ONLY(id) (&(struct queue_job_rec){ (id), -1, -1, NULL, NULL, NULL })

/* Caller holds the lock. */
static int _job_upsert_locked(struct queue *q, const struct queue_job_rec *j, char *err,
			      size_t errlen)
{
	return qp_execf(q,
		"INSERT INTO jobs (job_id, uid, gid, user, work_dir, plan, created, updated)"
		" VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7) ON CONFLICT (job_id) DO UPDATE SET"
		" uid=coalesce(?2, uid), gid=coalesce(?3, gid), user=coalesce(?4, user),"
		" work_dir=coalesce(?5, work_dir), plan=coalesce(?6, plan), updated=?7",
		err, errlen, "IUUtttI", j->job_id, j->uid, j->gid, j->user, j->work_dir, j->plan,
		qp_now());
}

int queue_job_upsert(struct queue *q, const struct queue_job_rec *j, char *err, size_t errlen)
{
	int rc;

	qp_begin(q);
	rc = _job_upsert_locked(q, j, err, errlen);
	return qp_end(q, rc, 1, err, errlen);
}

int queue_job_set_hold_state(struct queue *q, int64_t job_id, const char *hold_state,
			     char *err, size_t errlen)
{
	int rc = -1;

	qp_begin(q);
	if (_job_upsert_locked(q, QJ_ID_ONLY(job_id), err, errlen) == 0)
		rc = qp_execf(q, "UPDATE jobs SET hold_state=?2 WHERE job_id=?1", err, errlen, "It",
			      job_id, hold_state);
	return qp_end(q, rc, 1, err, errlen);
}

/* The columns of queue_job_get's select, in order. Strings owned by the job. */
#define JOB_COL(type, field) QP_COL(type, struct queue_job, field)
static const struct qp_col _job_cols[] = {
	JOB_COL(QC_I64, job_id), JOB_COL(QC_I64N, uid), JOB_COL(QC_I64N, gid),
	JOB_COL(QC_STR, user), JOB_COL(QC_STR, work_dir), JOB_COL(QC_STR, plan),
	JOB_COL(QC_STR, hold_state), JOB_COL(QC_STR, end_state), JOB_COL(QC_INT, end_exit_code),
	JOB_COL(QC_I64, end_received), JOB_COL(QC_INT, end_processed), JOB_COL(QC_I64, created),
	JOB_COL(QC_I64, updated), JOB_COL(QC_STR, refused), JOB_COL(QC_STR, notes),
	JOB_COL(QC_I64N, array_job_id), JOB_COL(QC_I64N, array_task_id), JOB_COL(QC_INT, runs),
	JOB_COL(QC_STR, last_run),
};

void queue_job_free(struct queue_job *j)
{
	if (!j)
		return;
	qp_row_free(_job_cols, QP_NCOLS(_job_cols), j);
	free(j);
}

int queue_job_get(struct queue *q, int64_t job_id, struct queue_job **out,
		  char *err, size_t errlen)
{
	sqlite3_stmt *st;
	struct queue_job *j;
	int rc;

	st = qp_readf(q, "SELECT job_id, uid, gid, user, work_dir, plan, hold_state, end_state,"
		      " end_exit_code, end_received, end_processed, created, updated, refused, notes,"
		      " array_job_id, array_task_id, runs, last_run FROM jobs"
		      " WHERE job_id=?1", err, errlen, "I", job_id);
	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (rc != SQLITE_ROW)
		return qp_read_end(q, st, rc, err, errlen) < 0 ? -1 : 1;
	j = calloc(1, sizeof(*j));
	if (j && qp_row(st, _job_cols, QP_NCOLS(_job_cols), j, NULL, 0) < 0) {
		queue_job_free(j);
		j = NULL;
	}
	qp_read_end(q, st, rc, err, errlen);
	if (!j) {
		qp_err(err, errlen, "out of memory");
		return -1;
	}
	*out = j;
	return 0;
}

int queue_job_add_note(struct queue *q, int64_t job_id, const char *note_json, char *err,
		       size_t errlen)
{
	int rc;

	qp_begin(q);
	/* Idempotent: a job end processed again (after a crash) adds no twin. */
	rc = qp_execf(q, "UPDATE jobs SET notes=json_insert(COALESCE(notes, '[]'), '$[#]',"
		      " json(?2)) WHERE job_id=?1 AND NOT EXISTS (SELECT 1 FROM"
		      " json_each(COALESCE(notes, '[]')) WHERE value = json(?2))", err, errlen,
		      "It", job_id, note_json);
	return qp_end(q, rc, 1, err, errlen);
}

int queue_job_end(struct queue *q, const struct queue_job_end_rec *e, int *duplicate, char *err,
		  size_t errlen)
{
	int64_t job_id = e->job.job_id;
	sqlite3_stmt *st;
	int rc = -1;

	*duplicate = 0;
	qp_begin(q);
	st = qp_prepf(q, "SELECT end_state FROM jobs WHERE job_id=?1", err, errlen, "I", job_id);
	if (!st)
		goto out;
	if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
		*duplicate = 1;
	sqlite3_finalize(st);
	if (*duplicate) {
		rc = 0;
		goto out;
	}
	if (_job_upsert_locked(q, &e->job, err, errlen) < 0)
		goto out;
	rc = qp_execf(q, "UPDATE jobs SET end_state=?2, end_exit_code=?3, end_received=?4,"
		      " end_processed=0, refused=?5 WHERE job_id=?1", err, errlen, "ItiIt", job_id,
		      e->state, e->exit_code, e->now, e->refused);
out:
	return qp_end(q, rc, 1, err, errlen);
}

/* Ends a qp_read whose first column is an id: up to max of them into ids. n or -1. */
static int _read_ids(struct queue *q, sqlite3_stmt *st, int64_t *ids, int max, char *err,
		     size_t errlen)
{
	int n = 0, rc;

	while ((rc = sqlite3_step(st)) == SQLITE_ROW && n < max)
		ids[n++] = sqlite3_column_int64(st, 0);
	return qp_read_end(q, st, rc, err, errlen) < 0 ? -1 : n;
}

int queue_job_ends_pending(struct queue *q, int64_t *ids, int max, char *err, size_t errlen)
{
	sqlite3_stmt *st;

	st = qp_readf(q, "SELECT job_id FROM jobs WHERE end_state IS NOT NULL AND"
		      " end_processed=0 ORDER BY end_received LIMIT ?1", err, errlen, "i", max);
	if (!st)
		return -1;
	return _read_ids(q, st, ids, max, err, errlen);
}

int queue_jobs_in_hold(struct queue *q, const char *a, const char *b, int64_t *ids, int max,
		       char *err, size_t errlen)
{
	sqlite3_stmt *st;

	st = qp_readf(q, "SELECT job_id FROM jobs WHERE hold_state IN (?1, ?2) AND"
		      " end_state IS NULL ORDER BY job_id LIMIT ?3", err, errlen, "tti", a, b, max);
	if (!st)
		return -1;
	return _read_ids(q, st, ids, max, err, errlen);
}

int queue_job_end_processed(struct queue *q, int64_t job_id, char *err, size_t errlen)
{
	int rc;

	qp_begin(q);
	rc = qp_execf(q, "UPDATE jobs SET end_processed=1, updated=?2 WHERE job_id=?1", err, errlen,
		      "II", job_id, qp_now());
	return qp_end(q, rc, 1, err, errlen);
}

/*
 * The requests that belong to job ?1: its own, and for an array task the
 * array's shared stage_in requests (made once, with job_id = the array's
 * job id and options.shared, see slurm_watch.c).
 */
#define QJ_MINE "(job_id=?1 OR (action='stage_in' AND json_extract(options,'$.shared')=1 AND" \
	" job_id=(SELECT array_job_id FROM jobs WHERE job_id=?1 AND array_job_id>0)))"

int queue_job_set_array(struct queue *q, int64_t job_id, int64_t array_job_id,
			int64_t array_task_id, char *err, size_t errlen)
{
	int rc = -1;

	qp_begin(q);
	if (_job_upsert_locked(q, QJ_ID_ONLY(job_id), err, errlen) == 0)
		rc = qp_execf(q, "UPDATE jobs SET array_job_id=?2, array_task_id=?3 WHERE job_id=?1",
			      err, errlen, "IIU", job_id, array_job_id, array_task_id);
	return qp_end(q, rc, 1, err, errlen);
}

/*
 * Inside the caller's transaction: a run of the job ended and it runs again.
 * The stored end is cleared, or replaced by end_state (a rerun that ended
 * already), the notes too when clear_notes; runs and last_run are stored
 * when runs is more than the count stored (a late event of a run already
 * counted changes nothing but its own record). 0 or -1.
 */
static int _run_again_locked(struct queue *q, int64_t job_id, const struct queue_rerun *rr,
			     int clear_notes, char *err, size_t errlen)
{
	const char *how = rr->how, *end_state = rr->end_state;
	int runs = rr->runs, exit_code = rr->exit_code;

	return qp_execf(q, "UPDATE jobs SET end_state=?5, end_exit_code=?6,"
			" end_received=CASE WHEN ?5 IS NULL THEN NULL ELSE ?3 END,"
			" end_processed=0, notes=CASE WHEN ?7 THEN NULL ELSE notes END,"
			" last_run=CASE WHEN ?4 > runs THEN ?2 ELSE last_run END,"
			" runs=max(runs, ?4), updated=?3 WHERE job_id=?1", err, errlen, "ItIitii",
			job_id, how, qp_now(), runs, end_state, end_state ? exit_code : 0,
			clear_notes);
}

int queue_job_requeued(struct queue *q, int64_t job_id, int runs, const char *how, char *err,
		       size_t errlen)
{
	int rc;

	qp_begin(q);
	rc = _job_upsert_locked(q, QJ_ID_ONLY(job_id), err, errlen) < 0 ? -1 :
	     _run_again_locked(q, job_id, &(struct queue_rerun){ runs, how, NULL, 0 }, 0, err,
			       errlen);
	return qp_end(q, rc, 1, err, errlen);
}

int queue_job_set_end_state(struct queue *q, int64_t job_id, const char *state, int exit_code,
			    char *err, size_t errlen)
{
	int rc;

	qp_begin(q);
	rc = qp_execf(q, "UPDATE jobs SET end_state=?2, updated=?3, end_exit_code=?4 WHERE"
		      " job_id=?1 AND end_state IS NOT NULL", err, errlen, "ItIi", job_id, state,
		      qp_now(), exit_code);
	return qp_end(q, rc, 1, err, errlen);
}

int queue_job_stage_in(struct queue *q, int64_t job_id, const char **state, char **error,
		       char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int64_t n[QS_COUNT] = { 0 }, total = 0;
	int rc;

	*error = NULL;
	st = qp_readf(q, "SELECT state, count(*), max(error) FROM requests WHERE " QJ_MINE
		      " AND action='stage_in' GROUP BY state", err, errlen, "I", job_id);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		enum queue_state s;
		const char *name = (const char *)sqlite3_column_text(st, 0);

		if (!name || queue_state_from_name(name, &s) < 0)
			continue;
		n[s] = sqlite3_column_int64(st, 1);
		total += n[s];
		if ((s == QS_FAILED_FINAL || s == QS_CANCELLED) && !*error) {
			const char *e = (const char *)sqlite3_column_text(st, 2);

			*error = strdup(e ? e : s == QS_CANCELLED ? "cancelled" : "failed");
		}
	}
	if (rc != SQLITE_DONE) {
		qp_err(err, errlen, "database error reading job %lld: %s", (long long)job_id,
		       sqlite3_errmsg(sqlite3_db_handle(st)));
		rc = -1;
	}
	if (qp_read_end(q, st, rc, err, errlen) < 0) {
		free(*error);
		*error = NULL;
		return -1;
	}
	if (total == 0)
		*state = "none";
	else if (n[QS_FAILED_FINAL] || n[QS_CANCELLED])
		*state = "failed";
	else if (n[QS_DONE] == total)
		*state = "ready";
	else if (n[QS_QUEUED] == total)
		*state = "pending";
	else
		*state = "staging";
	if (strcmp(*state, "failed") != 0) {
		free(*error);
		*error = NULL;
	}
	return 0;
}

int queue_job_failed_requests(struct queue *q, int64_t job_id, int64_t *ids, int max,
			      char *err, size_t errlen)
{
	sqlite3_stmt *st;

	st = qp_readf(q, "SELECT id FROM requests WHERE " QJ_MINE " AND state IN"
		      " ('failed_retryable','failed_final') ORDER BY id LIMIT ?2", err, errlen,
		      "Ii", job_id, max);
	if (!st)
		return -1;
	return _read_ids(q, st, ids, max, err, errlen);
}

int queue_request_checkpoint(struct queue *q, int64_t id, char *err, size_t errlen)
{
	int rc = -1;

	qp_begin(q);
	if (qp_execf(q, "UPDATE items SET state='queued' WHERE request_id=?1 AND"
		     " state IN ('running','verifying')", err, errlen, "I", id) == 0)
		rc = qp_execf(q, "UPDATE requests SET state='queued', updated=?2, error="
			      "'interrupted by shutdown; will be redone' WHERE id=?1 AND"
			      " state IN ('running','verifying')", err, errlen, "II", id, qp_now());
	return qp_end(q, rc, 1, err, errlen);
}

/* The after-job actions a rerun supersedes: what a job's end makes (lifecycle.c, cleanup.c). */
#define QJ_AFTER_JOB "action IN ('archive', 'stage_out', 'label', 'purge')"

int queue_job_rerun(struct queue *q, int64_t job_id, const struct queue_rerun *rr, int *cancelled,
		    int *purge_labelled, char *err, size_t errlen)
{
	const char *how = rr->how;
	int runs = rr->runs;
	char why[320];
	sqlite3_stmt *st;
	int64_t now = qp_now();
	int rc = -1;

	*cancelled = *purge_labelled = 0;
	snprintf(why, sizeof(why), "superseded: job %lld ran again after its end (%.200s); its "
		 "final run's end makes the after-job transfers again", (long long)job_id,
		 how ? how : "requeued");
	qp_begin(q);
	/* Asked before the cancel below: a purge label applied or running. */
	st = qp_prepf(q, "SELECT count(*) FROM requests WHERE job_id=?1 AND action='label' AND"
		      " json_extract(options, '$.policy')='purge' AND state IN ('done', 'running',"
		      " 'verifying')", err, errlen, "I", job_id);
	if (!st)
		goto out;
	if (sqlite3_step(st) == SQLITE_ROW)
		*purge_labelled = sqlite3_column_int(st, 0) > 0;
	sqlite3_finalize(st);
	if (qp_execf(q, "INSERT INTO job_reruns (job_id, before_id, run, at) VALUES (?1,"
		     " COALESCE((SELECT max(id) FROM requests WHERE job_id=?1), 0), ?2, ?3)"
		     " ON CONFLICT(job_id) DO UPDATE SET before_id=excluded.before_id,"
		     " run=excluded.run, at=excluded.at", err, errlen, "IiI", job_id, runs,
		     now) < 0 ||
	    qp_execf(q, "UPDATE requests SET state='cancelled', error=?2, updated=?3 WHERE"
		     " job_id=?1 AND " QJ_AFTER_JOB " AND state IN ('queued', 'running',"
		     " 'verifying', 'failed_retryable')", err, errlen, "ItI", job_id, why, now) < 0)
		goto out;
	*cancelled = sqlite3_changes(q->db);
	rc = _run_again_locked(q, job_id, rr, 1, err, errlen);
out:
	return qp_end(q, rc, 1, err, errlen);
}

int queue_job_cancel_stage_out(struct queue *q, int64_t job_id, const char *why, int *cancelled,
			       char *err, size_t errlen)
{
	int rc;

	*cancelled = 0;
	qp_begin(q);
	rc = qp_execf(q, "UPDATE requests SET state='cancelled', error=?2, updated=?3 WHERE"
		      " job_id=?1 AND action IN ('archive', 'stage_out') AND state IN ('queued',"
		      " 'running', 'verifying', 'failed_retryable')", err, errlen, "ItI", job_id,
		      why, qp_now());
	if (rc == 0)
		*cancelled = sqlite3_changes(q->db);
	return qp_end(q, rc, 1, err, errlen);
}

int64_t queue_rerun_boundary(struct queue *q, int64_t job_id, char *err, size_t errlen)
{
	sqlite3_stmt *st = qp_readf(q, "SELECT before_id FROM job_reruns WHERE job_id=?1", err,
				    errlen, "I", job_id);
	int64_t b = 0;
	int rc;

	if (!st)
		return -1;
	if ((rc = sqlite3_step(st)) == SQLITE_ROW)
		b = sqlite3_column_int64(st, 0);
	return qp_read_end(q, st, rc, err, errlen) < 0 ? -1 : b;
}

int queue_job_other_uid(struct queue *q, int64_t job_id, uid_t uid, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	st = qp_readf(q, "SELECT 1 FROM requests WHERE job_id=?1 AND uid<>?2 LIMIT 1", err, errlen,
		      "II", job_id, (int64_t)uid);
	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (qp_read_end(q, st, rc, err, errlen) < 0)
		return -1;
	return rc == SQLITE_ROW;
}
