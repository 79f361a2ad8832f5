/*
 * queue_schema.c - the state database's schema: every table, index and
 * trigger, as numbered migrations, each applied once and recorded.
 *
 * This is the one place the schema is written. A change to it is a new
 * migration at the end of _migrations, never an edit of one already
 * released: a database records which it has (schema_migrations) and runs
 * only those it lacks, in order, each in one transaction with its record,
 * so a crash or a failure leaves either all of a migration or none of it.
 *
 * Databases made before the migrations were recorded (stagehandd 0.x up to
 * this file) carry only PRAGMA user_version: 1, 2 or 3, the migrations of
 * the same numbers. Their later tables and indexes were made at every open
 * by statements that may be repeated, so migrations 4 on are written to
 * find what is there and make only what is not.
 *
 * user_version stays 3 while every migration is one an older stagehandd
 * can live with (it ignores the tables and columns it does not know, and
 * repeats its own "IF NOT EXISTS" steps harmlessly). A migration an older
 * one could not live with raises it, so that the older one refuses the
 * database instead of corrupting it.
 */
#include "config.h"

#include <sqlite3.h>
#include <stdio.h>
#include <string.h>

#include "queue.h"
#include "queue_private.h"

/* The user_version older stagehandd check against (see above). */
#define LEGACY_USER_VERSION 3

struct migration {
	int id;
	const char *name;
	const char *sql;	/* run as one script, or NULL */
	/* Run before sql, in the same transaction, for a step SQL cannot make
	   conditional (a column that may already be there). 0 or -1 with err. */
	int (*step)(struct queue *q, char *err, size_t errlen);
};

/* 1 if table has a column named col, 0 if not, -1 on error. */
static int _has_column(struct queue *q, const char *table, const char *col, char *err,
		       size_t errlen)
{
	char sql[160];
	sqlite3_stmt *st;
	int have = 0;

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM pragma_table_info('%s') WHERE name = ?1",
		 table);
	st = qp_prep(q, sql, err, errlen);
	if (!st)
		return -1;
	sqlite3_bind_text(st, 1, col, -1, SQLITE_STATIC);
	if (sqlite3_step(st) == SQLITE_ROW)
		have = sqlite3_column_int(st, 0) > 0;
	sqlite3_finalize(st);
	return have;
}

/*
 * requests.pruned: the request's updated as it was when its rows went
 * (HistoryRetention), so that a request retried since is finished anew;
 * -1, below any time, so that every finished request is in the index at
 * first. Databases of 0.x may have it already.
 */
static int _add_pruned(struct queue *q, char *err, size_t errlen)
{
	int have = _has_column(q, "requests", "pruned", err, errlen);

	if (have < 0)
		return -1;
	if (have)
		return 0;
	return qp_exec(q, "ALTER TABLE requests ADD COLUMN pruned INTEGER NOT NULL DEFAULT -1",
		       err, errlen);
}

static const struct migration _migrations[] = {
	{ 1, "jobs, requests, items and the audit trail",
	  "CREATE TABLE IF NOT EXISTS jobs ("
	  " job_id INTEGER PRIMARY KEY, uid INTEGER, gid INTEGER, user TEXT, work_dir TEXT,"
	  " plan TEXT, hold_state TEXT NOT NULL DEFAULT 'none',"
	  " end_state TEXT, end_exit_code INTEGER NOT NULL DEFAULT 0, end_received INTEGER,"
	  " end_processed INTEGER NOT NULL DEFAULT 0,"
	  " created INTEGER NOT NULL, updated INTEGER NOT NULL);"
	  "CREATE TABLE IF NOT EXISTS requests ("
	  " id INTEGER PRIMARY KEY AUTOINCREMENT, uid INTEGER NOT NULL, gid INTEGER NOT NULL,"
	  " user TEXT NOT NULL, job_id INTEGER, action TEXT NOT NULL, source TEXT NOT NULL,"
	  " dest TEXT, options TEXT NOT NULL DEFAULT '{}',"
	  " state TEXT NOT NULL CHECK (state IN ('queued','running','verifying','done',"
	  "  'failed_retryable','failed_final','cancelled')),"
	  " attempts INTEGER NOT NULL DEFAULT 0, max_retries INTEGER NOT NULL DEFAULT 3,"
	  " next_attempt_at INTEGER, error TEXT, created INTEGER NOT NULL, updated INTEGER NOT NULL,"
	  " bytes_total INTEGER NOT NULL DEFAULT 0, bytes_done INTEGER NOT NULL DEFAULT 0,"
	  " files_total INTEGER NOT NULL DEFAULT 0, files_done INTEGER NOT NULL DEFAULT 0,"
	  " files_skipped INTEGER NOT NULL DEFAULT 0);"
	  "CREATE INDEX IF NOT EXISTS requests_state ON requests(state, next_attempt_at);"
	  "CREATE INDEX IF NOT EXISTS requests_job ON requests(job_id);"
	  "CREATE INDEX IF NOT EXISTS jobs_hold ON jobs(hold_state);"
	  "CREATE INDEX IF NOT EXISTS requests_uid ON requests(uid);"
	  "CREATE TABLE IF NOT EXISTS items ("
	  " request_id INTEGER NOT NULL REFERENCES requests(id), relpath TEXT NOT NULL,"
	  " type TEXT NOT NULL DEFAULT 'file', size INTEGER NOT NULL DEFAULT 0,"
	  " mtime INTEGER NOT NULL DEFAULT 0, mode INTEGER NOT NULL DEFAULT 0,"
	  " state TEXT NOT NULL DEFAULT 'queued', checksum_src TEXT, checksum_dst TEXT,"
	  " attempts INTEGER NOT NULL DEFAULT 0, error TEXT,"
	  " PRIMARY KEY (request_id, relpath));"
	  "CREATE TABLE IF NOT EXISTS audit ("
	  " id INTEGER PRIMARY KEY, job_id INTEGER, uid INTEGER NOT NULL,"
	  " request_id INTEGER NOT NULL, path_src TEXT NOT NULL, path_dst TEXT NOT NULL,"
	  " bytes INTEGER NOT NULL, checksum TEXT, started INTEGER NOT NULL, ended INTEGER NOT NULL,"
	  " UNIQUE (request_id, path_dst, checksum));", NULL },
	/* The plugin's refusal and the notes of skipped actions; array tasks
	   (their array and task id) and requeued runs of a job. */
	{ 2, "jobs: refusal, notes, array tasks, runs",
	  "ALTER TABLE jobs ADD COLUMN refused TEXT;"
	  "ALTER TABLE jobs ADD COLUMN notes TEXT;"
	  "ALTER TABLE jobs ADD COLUMN array_job_id INTEGER;"
	  "ALTER TABLE jobs ADD COLUMN array_task_id INTEGER;"
	  "ALTER TABLE jobs ADD COLUMN runs INTEGER NOT NULL DEFAULT 0;"
	  "ALTER TABLE jobs ADD COLUMN last_run TEXT;", NULL },
	/* The shards of requests that run as mover jobs. shard_files is keyed by
	   (request, relpath): a file is in one shard of a plan; the index by
	   shard serves the mover's fetch. */
	{ 3, "mover shards",
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
	  "CREATE INDEX IF NOT EXISTS shard_files_idx ON shard_files(request_id, idx, relpath);",
	  NULL },
	{ 4, "fair dispatch, the archive lookup, the audit's indexes, notices",
	  /* The claim's index: a user's oldest queued request of a class, found
	     without reading the others (queue_request_claim_ex). It replaced
	     requests_fair (state, uid, id), which made every claim read every
	     queued row to learn its class. */
	  "DROP INDEX IF EXISTS requests_fair;"
	  "CREATE INDEX IF NOT EXISTS requests_claim ON requests(state, uid,"
	  " (action IN ('archive','stage_out')), id);"
	  /* The order in which users were last served (a counter, not a clock,
	     so claims within one second still alternate). */
	  "CREATE TABLE IF NOT EXISTS dispatch (uid INTEGER PRIMARY KEY,"
	  " last_claim INTEGER NOT NULL);"
	  /* An archive copy found by its destination (queue_archive_of, at each
	     stage-in): done archives only, so other requests cost it nothing. */
	  "CREATE INDEX IF NOT EXISTS requests_archive_dest ON requests(dest)"
	  " WHERE action='archive' AND state='done';"
	  /* The audit export (queue_audit.c) selects by job, by user and time. */
	  "CREATE INDEX IF NOT EXISTS audit_job ON audit(job_id);"
	  "CREATE INDEX IF NOT EXISTS audit_uid ON audit(uid, ended);"
	  /* NotifyCommand (notify.c): outcomes already announced, so none is
	     twice; a failed archive retried by hand is announced again when it
	     is done. */
	  "CREATE TABLE IF NOT EXISTS notices (request_id INTEGER NOT NULL,"
	  " state TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (request_id, state));"
	  /* A user's live requests (queue_user_usage, at every POST /v1/requests):
	     read without the user's finished ones or anyone else's. */
	  "CREATE INDEX IF NOT EXISTS requests_live_uid ON requests(uid)"
	  " WHERE state IN ('queued','running','verifying','failed_retryable');", NULL },
	{ 5, "mover shards by Slurm job",
	  "CREATE INDEX IF NOT EXISTS shards_job ON shards(slurm_job);", NULL },
	/* A range is a plan and a record at once: done, with the source's size
	   and mtime its mover saw and its checksum, is set once
	   (queue_range_done), so a range reported twice is recorded once. The
	   file it belongs to becomes an item only when the final pass finishes
	   it (xfer_range.h). */
	{ 6, "byte ranges of large files",
	  "CREATE TABLE IF NOT EXISTS shard_ranges ("
	  " request_id INTEGER NOT NULL, relpath TEXT NOT NULL, off INTEGER NOT NULL,"
	  " len INTEGER NOT NULL, size INTEGER NOT NULL, idx INTEGER NOT NULL,"
	  " done INTEGER NOT NULL DEFAULT 0, src_size INTEGER, mtime INTEGER, checksum TEXT,"
	  " PRIMARY KEY (request_id, relpath, off)) WITHOUT ROWID;"
	  "CREATE INDEX IF NOT EXISTS shard_ranges_idx ON shard_ranges(request_id, idx, relpath);",
	  NULL },
	{ 7, "burst-buffer pool sizes",
	  "CREATE TABLE IF NOT EXISTS bb_pool (job_id INTEGER PRIMARY KEY, pool TEXT,"
	  " size INTEGER NOT NULL, torn_down INTEGER NOT NULL DEFAULT 0,"
	  " updated INTEGER NOT NULL);", NULL },
	/* At most one row (id 1): present while drained. */
	{ 8, "drain",
	  "CREATE TABLE IF NOT EXISTS drain (id INTEGER PRIMARY KEY CHECK (id = 1),"
	  " since INTEGER NOT NULL, by_uid INTEGER NOT NULL, reason TEXT NOT NULL DEFAULT '');",
	  NULL },
	{ 9, "after= waits",
	  "CREATE TABLE IF NOT EXISTS after_waits (job_id INTEGER PRIMARY KEY,"
	  " jobs TEXT NOT NULL, state TEXT NOT NULL, reason TEXT, updated INTEGER NOT NULL);",
	  NULL },
	/* An upload is keyed by (request, relpath): a file has at most one
	   upload in progress. Its parts go with it (queue_mpu_apply). */
	{ 10, "S3 multipart uploads",
	  "CREATE TABLE IF NOT EXISTS s3_uploads ("
	  " request_id INTEGER NOT NULL, relpath TEXT NOT NULL, upload_id TEXT NOT NULL,"
	  " size INTEGER NOT NULL, mtime INTEGER NOT NULL, part_size INTEGER NOT NULL,"
	  " started INTEGER NOT NULL, PRIMARY KEY (request_id, relpath)) WITHOUT ROWID;"
	  "CREATE TABLE IF NOT EXISTS s3_upload_parts ("
	  " request_id INTEGER NOT NULL, relpath TEXT NOT NULL, part INTEGER NOT NULL,"
	  " len INTEGER NOT NULL, md5 TEXT NOT NULL,"
	  " PRIMARY KEY (request_id, relpath, part)) WITHOUT ROWID;", NULL },
	{ 11, "job reruns",
	  "CREATE TABLE IF NOT EXISTS job_reruns (job_id INTEGER PRIMARY KEY,"
	  " before_id INTEGER NOT NULL, run INTEGER NOT NULL, at INTEGER NOT NULL);", NULL },
	/* HistoryRetention: a finished request whose rows may go and have not
	   gone since it last changed (queue_history.c). */
	{ 12, "history pruning",
	  "CREATE INDEX IF NOT EXISTS requests_prunable ON requests(updated) WHERE " PRUNABLE ";",
	  _add_pruned },
	/*
	 * The requests of each state, counted by triggers as rows come, change
	 * state and go: a count of the requests table itself read every row of
	 * its state index, 150 ms at a million requests, for every health call,
	 * every /metrics scrape and the systemd status line the main loop sends
	 * every 5 s. Filled from the table once, with its triggers; an older
	 * stagehandd that opens the database keeps it right, since the
	 * triggers are the database's. Upserts need SQLite 3.24.
	 */
	{ 13, "requests counted by state",
	  "CREATE TABLE IF NOT EXISTS request_counts (state TEXT PRIMARY KEY,"
	  " n INTEGER NOT NULL) WITHOUT ROWID;"
	  "INSERT INTO request_counts (state, n) SELECT state, count(*) FROM requests"
	  " WHERE NOT EXISTS (SELECT 1 FROM request_counts) GROUP BY state;"
	  "CREATE TRIGGER IF NOT EXISTS request_counts_ins AFTER INSERT ON requests BEGIN"
	  " INSERT INTO request_counts (state, n) VALUES (NEW.state, 1)"
	  "  ON CONFLICT (state) DO UPDATE SET n = n + 1;"
	  " END;"
	  "CREATE TRIGGER IF NOT EXISTS request_counts_upd AFTER UPDATE OF state ON requests"
	  " WHEN OLD.state IS NOT NEW.state BEGIN"
	  " UPDATE request_counts SET n = n - 1 WHERE state = OLD.state;"
	  " INSERT INTO request_counts (state, n) VALUES (NEW.state, 1)"
	  "  ON CONFLICT (state) DO UPDATE SET n = n + 1;"
	  " END;"
	  "CREATE TRIGGER IF NOT EXISTS request_counts_del AFTER DELETE ON requests BEGIN"
	  " UPDATE request_counts SET n = n - 1 WHERE state = OLD.state;"
	  " END;", NULL },
	/*
	 * The input cleanup's totals of the purges that are over, kept by
	 * triggers as purges end (and taken back if one is retried), so that a
	 * scrape reads the purges still under way only: before, every scrape
	 * summed the items of every purge ever made (88-124 ms at a million
	 * requests). A purge's items pruned later (HistoryRetention) stay
	 * counted.
	 */
	{ 14, "input cleanup totals",
	  "CREATE TABLE IF NOT EXISTS cleanup_totals (id INTEGER PRIMARY KEY CHECK (id = 1),"
	  " done INTEGER NOT NULL, files INTEGER NOT NULL, bytes INTEGER NOT NULL);"
	  "INSERT INTO cleanup_totals (id, done, files, bytes) SELECT 1,"
	  " (SELECT count(*) FROM requests WHERE action='purge' AND state='done'),"
	  " (SELECT count(*) FROM items i JOIN requests r ON r.id=i.request_id"
	  "  WHERE r.action='purge' AND r.state IN " PURGE_OVER " AND i.state='done'),"
	  " (SELECT coalesce(sum(i.size),0) FROM items i JOIN requests r ON r.id=i.request_id"
	  "  WHERE r.action='purge' AND r.state IN " PURGE_OVER " AND i.state='done')"
	  " WHERE NOT EXISTS (SELECT 1 FROM cleanup_totals);"
	  "CREATE TRIGGER IF NOT EXISTS cleanup_totals_over AFTER UPDATE OF state ON requests"
	  " WHEN NEW.action='purge' AND NEW.state IN " PURGE_OVER
	  " AND OLD.state NOT IN " PURGE_OVER " BEGIN"
	  " UPDATE cleanup_totals SET"
	  "  files = files + (SELECT count(*) FROM items WHERE request_id=NEW.id AND state='done'),"
	  "  bytes = bytes + (SELECT coalesce(sum(size),0) FROM items WHERE request_id=NEW.id"
	  "   AND state='done') WHERE id = 1;"
	  " END;"
	  "CREATE TRIGGER IF NOT EXISTS cleanup_totals_again AFTER UPDATE OF state ON requests"
	  " WHEN NEW.action='purge' AND OLD.state IN " PURGE_OVER
	  " AND NEW.state NOT IN " PURGE_OVER " BEGIN"
	  " UPDATE cleanup_totals SET"
	  "  files = files - (SELECT count(*) FROM items WHERE request_id=NEW.id AND state='done'),"
	  "  bytes = bytes - (SELECT coalesce(sum(size),0) FROM items WHERE request_id=NEW.id"
	  "   AND state='done') WHERE id = 1;"
	  " END;"
	  "CREATE TRIGGER IF NOT EXISTS cleanup_totals_done AFTER UPDATE OF state ON requests"
	  " WHEN NEW.action='purge' AND (OLD.state = 'done') != (NEW.state = 'done') BEGIN"
	  " UPDATE cleanup_totals SET done = done + (NEW.state = 'done') - (OLD.state = 'done')"
	  "  WHERE id = 1;"
	  " END;", NULL },
	/* The SLUIDs of each job's runs (Slurm 25.11+; queue_sluid.c): a new
	   one is the job's current run, an earlier one's report is refused. */
	{ 15, "SLUIDs of job runs",
	  "CREATE TABLE IF NOT EXISTS sluid_runs (seq INTEGER PRIMARY KEY,"
	  " job_id INTEGER NOT NULL, sluid TEXT NOT NULL, at INTEGER NOT NULL,"
	  " UNIQUE (job_id, sluid));", NULL },
};

#define N_MIGRATIONS ((int)(sizeof(_migrations) / sizeof(_migrations[0])))

int queue_schema_latest(void)
{
	return _migrations[N_MIGRATIONS - 1].id;
}

const char *queue_schema_name(int id)
{
	for (int i = 0; i < N_MIGRATIONS; i++)
		if (_migrations[i].id == id)
			return _migrations[i].name;
	return NULL;
}

/* One integer from sql (no parameters), or dflt when it returns no row; -1 on error. */
static int _int_of(struct queue *q, const char *sql, int dflt, int *out, char *err,
		   size_t errlen)
{
	sqlite3_stmt *st = qp_prep(q, sql, err, errlen);
	int rc;

	if (!st)
		return -1;
	rc = sqlite3_step(st);
	*out = rc == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL ?
	       sqlite3_column_int(st, 0) : dflt;
	sqlite3_finalize(st);
	if (rc != SQLITE_ROW && rc != SQLITE_DONE) {
		qp_err(err, errlen, "%s: %s", sql, sqlite3_errmsg(q->db));
		return -1;
	}
	return 0;
}

static int _record(struct queue *q, int id, const char *name, char *err, size_t errlen)
{
	return qp_execf(q, "INSERT INTO schema_migrations (id, name, applied) VALUES (?1, ?2, ?3)",
			err, errlen, "ItI", (int64_t)id, name, qp_now());
}

/*
 * The record itself, and what a database of 0.x has: user_version 1, 2 or
 * 3 is migrations 1 to that number, recorded as applied (they are).
 */
static int _record_table(struct queue *q, const char *path, char *err, size_t errlen)
{
	int have, ver;

	if (_int_of(q, "SELECT count(*) FROM sqlite_master WHERE type='table' AND"
		    " name='schema_migrations'", 0, &have, err, errlen) < 0)
		return -1;
	if (have)
		return 0;
	if (_int_of(q, "PRAGMA user_version", 0, &ver, err, errlen) < 0)
		return -1;
	if (ver > LEGACY_USER_VERSION) {
		qp_err(err, errlen, "state database %s has schema version %d but no record of its "
		       "migrations: it was not made by stagehandd, or is damaged; restore it from a "
		       "backup", path, ver);
		return -1;
	}
	if (qp_exec(q, "BEGIN IMMEDIATE", err, errlen) < 0)
		return -1;
	if (qp_exec(q, "CREATE TABLE IF NOT EXISTS schema_migrations (id INTEGER PRIMARY KEY,"
		    " name TEXT NOT NULL, applied INTEGER NOT NULL)", err, errlen) < 0)
		goto fail;
	for (int i = 0; i < N_MIGRATIONS && _migrations[i].id <= ver; i++)
		if (_record(q, _migrations[i].id, _migrations[i].name, err, errlen) < 0)
			goto fail;
	if (qp_exec(q, "COMMIT", err, errlen) < 0)
		goto fail;
	return 0;
fail:
	qp_exec(q, "ROLLBACK", NULL, 0);
	return -1;
}

/* 1 if migration id is recorded, 0 if not, -1 on error. */
static int _applied(struct queue *q, int id, char *err, size_t errlen)
{
	char sql[96];
	int n;

	snprintf(sql, sizeof(sql), "SELECT count(*) FROM schema_migrations WHERE id = %d", id);
	if (_int_of(q, sql, 0, &n, err, errlen) < 0)
		return -1;
	return n > 0;
}

static int _apply(struct queue *q, const char *path, const struct migration *m, char *err,
		  size_t errlen)
{
	char why[512] = "";
	int done;

	if (qp_exec(q, "BEGIN IMMEDIATE", why, sizeof(why)) < 0)
		goto fail;
	/* Another stagehandd (or --migrate) may have applied it since we looked. */
	done = _applied(q, m->id, why, sizeof(why));
	if (done < 0)
		goto fail;
	if (!done && ((m->step && m->step(q, why, sizeof(why)) < 0) ||
		      (m->sql && qp_exec(q, m->sql, why, sizeof(why)) < 0) ||
		      _record(q, m->id, m->name, why, sizeof(why)) < 0))
		goto fail;
	if (qp_exec(q, "COMMIT", why, sizeof(why)) < 0)
		goto fail;
	return 0;
fail:
	qp_exec(q, "ROLLBACK", NULL, 0);
	qp_err(err, errlen, "state database %s: migration %d (%s) failed, none of it was "
	       "applied: %s; fix the cause and start stagehandd again (it resumes at this "
	       "migration)", path, m->id, m->name, why);
	return -1;
}

int queue_schema_migrate(struct queue *q, const char *path, char *err, size_t errlen)
{
	int newest, ver;

	if (_record_table(q, path, err, errlen) < 0)
		return -1;
	if (_int_of(q, "SELECT max(id) FROM schema_migrations", 0, &newest, err, errlen) < 0)
		return -1;
	if (newest > queue_schema_latest()) {
		qp_err(err, errlen, "state database %s has migration %d, newer than this "
		       "stagehandd knows (up to %d): it was upgraded by a newer stagehandd; "
		       "upgrade this one", path, newest, queue_schema_latest());
		return -1;
	}
	for (int i = 0; i < N_MIGRATIONS; i++) {
		int done = _applied(q, _migrations[i].id, err, errlen);

		if (done < 0 || (!done && _apply(q, path, &_migrations[i], err, errlen) < 0))
			return -1;
	}
	if (_int_of(q, "PRAGMA user_version", 0, &ver, err, errlen) < 0)
		return -1;
	if (ver < LEGACY_USER_VERSION) {
		char sql[64];

		snprintf(sql, sizeof(sql), "PRAGMA user_version=%d", LEGACY_USER_VERSION);
		if (qp_exec(q, sql, err, errlen) < 0)
			return -1;
	}
	return 0;
}
