/* queue.c - see queue.h. */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "queue.h"
#include "queue_cleanup.h"
#include "queue_drain.h"
#include "queue_after.h"
#include "queue_pool.h"
#include "queue_private.h"
#include "queue_shards.h"
#include "queue_sluid.h"
#include "queue_mpu.h"
#include "queue_history.h"

#define SCHEMA_VERSION 3
/*
 * The write-ahead log is copied into the database once it holds this many
 * pages (4 KiB each: 40 MiB), not at SQLite's 1,000: a mover's records touch
 * the same index pages commit after commit, and a longer log copies each
 * such page once for many commits (daemon-scale: the checkpoint was 6% of
 * the writer's time at 1,000). The log file grows to about that size.
 */
#define WAL_CHECKPOINT_PAGES "10000"


static const char *_state_names[QS_COUNT] = {
	"queued", "running", "verifying", "done", "failed_retryable", "failed_final", "cancelled",
};

static const char *_item_names[] = { "queued", "running", "verifying", "done", "failed", "skipped" };

const char *queue_state_name(enum queue_state s)
{
	return (unsigned)s < QS_COUNT ? _state_names[s] : "?";
}

int queue_state_from_name(const char *name, enum queue_state *out)
{
	for (int i = 0; i < QS_COUNT; i++)
		if (strcmp(name, _state_names[i]) == 0) {
			*out = (enum queue_state)i;
			return 0;
		}
	return -1;
}

const char *queue_item_state_name(enum queue_item_state s)
{
	return (unsigned)s <= QI_SKIPPED ? _item_names[s] : "?";
}

int qp_item_state_from_name(const char *n)
{
	for (int i = 0; i <= QI_SKIPPED; i++)
		if (n && strcmp(n, _item_names[i]) == 0)
			return i;
	return QI_QUEUED;
}

int queue_transition_ok(enum queue_state from, enum queue_state to)
{
	if (to == QS_CANCELLED)
		return from != QS_DONE && from != QS_CANCELLED;
	switch (from) {
	case QS_QUEUED:
		return to == QS_RUNNING;
	case QS_RUNNING:
		/* queued: a drain checkpoint or crash recovery. */
		return to == QS_VERIFYING || to == QS_QUEUED || to == QS_FAILED_RETRYABLE ||
		       to == QS_FAILED_FINAL;
	case QS_VERIFYING:
		return to == QS_DONE || to == QS_QUEUED || to == QS_FAILED_RETRYABLE ||
		       to == QS_FAILED_FINAL;
	case QS_FAILED_RETRYABLE:
		return to == QS_QUEUED || to == QS_FAILED_FINAL;
	case QS_FAILED_FINAL:
	case QS_CANCELLED:
		return to == QS_QUEUED;	/* explicit retry */
	default:
		return 0;
	}
}


void qp_err(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_verrf(err, errlen, fmt, ap);
	va_end(ap);
}

int64_t qp_now(void)
{
	return (int64_t)time(NULL);
}

int qp_exec(struct queue *q, const char *sql, char *err, size_t errlen)
{
	char *msg = NULL;

	if (sqlite3_exec(q->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		qp_err(err, errlen, "database: %s (in: %.60s)", msg ? msg : "?", sql);
		sqlite3_free(msg);
		return -1;
	}
	return 0;
}

sqlite3_stmt *qp_prep(struct queue *q, const char *sql, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;

	if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK) {
		qp_err(err, errlen, "database: %s", sqlite3_errmsg(q->db));
		return NULL;
	}
	return st;
}

void qp_lock(struct queue *q)
{
	pthread_mutex_lock(&q->lock);
	if (__atomic_load_n(&q->depth, __ATOMIC_RELAXED) == 0)
		__atomic_store_n(&q->owner, pthread_self(), __ATOMIC_RELAXED);
	__atomic_add_fetch(&q->depth, 1, __ATOMIC_RELEASE);
}

void qp_unlock(struct queue *q)
{
	__atomic_sub_fetch(&q->depth, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&q->lock);
}

/* True in the thread holding the writer's lock (only it can have set owner to itself). */
static int _mine(struct queue *q)
{
	return __atomic_load_n(&q->depth, __ATOMIC_ACQUIRE) > 0 &&
	       pthread_equal(__atomic_load_n(&q->owner, __ATOMIC_RELAXED), pthread_self());
}

/* The slot of sql in cache c: its own, else the first free one; NULL when full. */
static struct qp_slot *_slot(struct qp_slot *c, const char *sql)
{
	for (int i = 0; i < QP_CACHE_MAX; i++)
		if (!c[i].sql || c[i].sql == sql)
			return &c[i];
	return NULL;
}

/* sql prepared on db into the free slot c, kept for the connection's life. */
static sqlite3_stmt *_slot_prepare(sqlite3 *db, struct qp_slot *c, const char *sql, char *err,
				   size_t errlen)
{
	if (sqlite3_prepare_v3(db, sql, -1, SQLITE_PREPARE_PERSISTENT, &c->st, NULL) != SQLITE_OK) {
		qp_err(err, errlen, "database: %s", sqlite3_errmsg(db));
		c->st = NULL;
		return NULL;
	}
	c->sql = sql;
	return c->st;
}

/*
 * sql for a read on db: the statement kept in cache (prepared once: a status
 * call, a worker's start or the writer's answer to a POST parsed each of its
 * reads again), or one of its own when the kept one is still stepping (a list
 * whose callback reads the same way again) or the cache is full.
 */
static sqlite3_stmt *_read_stmt(sqlite3 *db, struct qp_slot *cache, const char *sql, char *err,
				size_t errlen)
{
	struct qp_slot *c = _slot(cache, sql);
	sqlite3_stmt *st = NULL;

	if (c && c->sql && !sqlite3_stmt_busy(c->st)) {
		sqlite3_clear_bindings(c->st);
		return c->st;
	}
	if (c && !c->sql)
		return _slot_prepare(db, c, sql, err, errlen);
	if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
		qp_err(err, errlen, "database: %s", sqlite3_errmsg(db));
		return NULL;
	}
	return st;
}

/* Ends a statement from _read_stmt: reset if the cache keeps it, else finalized. */
static void _read_release(struct qp_slot *cache, sqlite3_stmt *st)
{
	for (struct qp_slot *c = cache; c < cache + QP_CACHE_MAX && c->sql; c++)
		if (c->st == st) {
			sqlite3_reset(st);
			return;
		}
	sqlite3_finalize(st);
}

sqlite3_stmt *qp_read(struct queue *q, const char *sql, char *err, size_t errlen)
{
	sqlite3_stmt *st;

	if (q->rdb && !_mine(q)) {
		pthread_mutex_lock(&q->rlock);
		st = _read_stmt(q->rdb, q->rcache, sql, err, errlen);
		if (!st)
			pthread_mutex_unlock(&q->rlock);
		return st;
	}
	qp_lock(q);
	st = _read_stmt(q->db, q->cache, sql, err, errlen);
	if (!st)
		qp_unlock(q);
	return st;
}

sqlite3_stmt *qp_read_bulk(struct queue *q, const char *sql, char *err, size_t errlen)
{
	sqlite3_stmt *st;

	if (!q->bdb || _mine(q))
		return qp_read(q, sql, err, errlen);
	pthread_mutex_lock(&q->block);
	st = _read_stmt(q->bdb, q->bcache, sql, err, errlen);
	if (!st)
		pthread_mutex_unlock(&q->block);
	return st;
}

/* 0 if rc, a step's answer, is a success; else -1 with the database's message. */
static int _step_ok(sqlite3 *db, int rc, char *err, size_t errlen)
{
	if (rc == SQLITE_ROW || rc == SQLITE_DONE)
		return 0;
	qp_err(err, errlen, "database: %s", sqlite3_errmsg(db));
	return -1;
}

int qp_read_end(struct queue *q, sqlite3_stmt *st, int rc, char *err, size_t errlen)
{
	sqlite3 *db = sqlite3_db_handle(st);

	rc = rc == -1 ? -1 : _step_ok(db, rc, err, errlen);
	if (q->rdb && db == q->rdb) {
		_read_release(q->rcache, st);
		pthread_mutex_unlock(&q->rlock);
		return rc;
	}
	if (q->bdb && db == q->bdb) {
		_read_release(q->bcache, st);
		pthread_mutex_unlock(&q->block);
		return rc;
	}
	_read_release(q->cache, st);
	qp_unlock(q);
	return rc;
}

int qp_step_done(struct queue *q, sqlite3_stmt *st, char *err, size_t errlen)
{
	int rc = _step_ok(q->db, sqlite3_step(st), err, errlen);

	sqlite3_finalize(st);
	return rc;
}

void qp_bind_text(sqlite3_stmt *st, int i, const char *s)
{
	if (s)
		sqlite3_bind_text(st, i, s, -1, SQLITE_TRANSIENT);
	else
		sqlite3_bind_null(st, i);
}

char *qp_col_dup(sqlite3_stmt *st, int i)
{
	const unsigned char *t = sqlite3_column_text(st, i);

	return t ? strdup((const char *)t) : NULL;
}

int qp_cache_room(struct queue *q, const char *sql)
{
	return _slot(q->cache, sql) != NULL;
}

int qp_exec_cached(struct queue *q, const char *sql)
{
	sqlite3_stmt *st = qp_cached(q, sql, NULL, 0);
	int rc;

	if (!st)
		return sqlite3_exec(q->db, sql, NULL, NULL, NULL);
	rc = sqlite3_step(st);
	/* The error and its message stay the connection's after the reset. */
	sqlite3_reset(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? SQLITE_OK : rc;
}

sqlite3_stmt *qp_cached(struct queue *q, const char *sql, char *err, size_t errlen)
{
	struct qp_slot *c = _slot(q->cache, sql);

	if (!c) {
		qp_err(err, errlen, "internal: statement cache full");
		return NULL;
	}
	if (!c->sql)
		return _slot_prepare(q->db, c, sql, err, errlen);
	sqlite3_reset(c->st);
	sqlite3_clear_bindings(c->st);
	return c->st;
}

int qp_step_reset(struct queue *q, sqlite3_stmt *st, char *err, size_t errlen)
{
	int rc = _step_ok(q->db, sqlite3_step(st), err, errlen);

	sqlite3_reset(st);
	return rc;
}

/*
 * Inside a batch every change is a savepoint of its own (a mover's POST of
 * 250 records makes 500 of them): the three statements are prepared once,
 * not parsed again each time as sqlite3_exec would.
 */
static void _savepoint(struct queue *q, const char *sql)
{
	sqlite3_stmt *st = qp_cached(q, sql, NULL, 0);

	if (st)
		qp_step_reset(q, st, NULL, 0);
	else
		sqlite3_exec(q->db, sql, NULL, NULL, NULL);
}

/* Keys of the statement cache (an address each): the transaction's own. */
static const char _begin[] = "BEGIN IMMEDIATE", _commit_sql[] = "COMMIT",
		  _rollback[] = "ROLLBACK", _sync_full[] = "PRAGMA synchronous=FULL",
		  _sync_normal[] = "PRAGMA synchronous=NORMAL";

static const char _sp_begin[] = "SAVEPOINT qp", _sp_undo[] = "ROLLBACK TO qp",
		  _sp_end[] = "RELEASE qp";

void qp_begin(struct queue *q)
{
	qp_lock(q);
	/* Inside a batch (same thread: the lock is recursive) a savepoint nests. */
	if (q->batch)
		_savepoint(q, _sp_begin);
	else
		qp_exec_cached(q, _begin);
}

/*
 * COMMIT the open transaction (durable: with synchronous=FULL for this
 * commit only); a failed commit is rolled back. 0, or -1 with err. The
 * caller holds the lock and keeps it.
 */
static int _commit(struct queue *q, int durable, char *err, size_t errlen)
{
	int rc = 0;

	if (durable)
		qp_exec_cached(q, _sync_full);
	if (qp_exec_cached(q, _commit_sql) != SQLITE_OK) {
		qp_err(err, errlen, "database commit: %s", sqlite3_errmsg(q->db));
		qp_exec_cached(q, _rollback);
		rc = -1;
	}
	if (durable)
		qp_exec_cached(q, _sync_normal);
	return rc;
}

/* Commit (rc == 0) or roll back, then unlock. durable: this commit is FULL. */
int qp_end(struct queue *q, int rc, int durable, char *err, size_t errlen)
{
	if (q->batch) {
		if (rc != 0)
			_savepoint(q, _sp_undo);
		_savepoint(q, _sp_end);
		q->batch_durable |= durable && rc == 0;
		qp_unlock(q);
		return rc;
	}
	if (rc == 0)
		rc = _commit(q, durable, err, errlen);
	else
		qp_exec_cached(q, _rollback);
	qp_unlock(q);
	return rc;
}

static const char *_schema =
	"CREATE TABLE IF NOT EXISTS jobs ("
	" job_id INTEGER PRIMARY KEY, uid INTEGER, gid INTEGER, user TEXT, work_dir TEXT,"
	" plan TEXT, hold_state TEXT NOT NULL DEFAULT 'none',"
	" end_state TEXT, end_exit_code INTEGER NOT NULL DEFAULT 0, end_received INTEGER,"
	" end_processed INTEGER NOT NULL DEFAULT 0,"
	" created INTEGER NOT NULL, updated INTEGER NOT NULL, refused TEXT, notes TEXT,"
	" array_job_id INTEGER, array_task_id INTEGER, runs INTEGER NOT NULL DEFAULT 0,"
	" last_run TEXT);"
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
	" UNIQUE (request_id, path_dst, checksum));";

/*
 * Fair dispatch: the order in which users were last served (a counter, not a
 * clock, so claims within one second still alternate). Also the audit
 * export's indexes and the notification log, added without a schema bump.
 */
static const char *_schema_fair =
	/* The claim's index: a user's oldest queued request of a class, found
	   without reading the others (queue_request_claim_ex). It replaced
	   requests_fair (state, uid, id), which made every claim read every
	   queued row to learn its class. */
	"DROP INDEX IF EXISTS requests_fair;"
	"CREATE INDEX IF NOT EXISTS requests_claim ON requests(state, uid,"
	" (action IN ('archive','stage_out')), id);"
	"CREATE TABLE IF NOT EXISTS dispatch (uid INTEGER PRIMARY KEY,"
	" last_claim INTEGER NOT NULL);"
	/* An archive copy found by its destination (queue_archive_of, at each
	   stage-in): done archives only, so other requests cost it nothing. */
	"CREATE INDEX IF NOT EXISTS requests_archive_dest ON requests(dest)"
	" WHERE action='archive' AND state='done';"
	/* The audit export (queue_audit.c) selects by job, by user and time. */
	"CREATE INDEX IF NOT EXISTS audit_job ON audit(job_id);"
	"CREATE INDEX IF NOT EXISTS audit_uid ON audit(uid, ended);"
	/* NotifyCommand (notify.c): outcomes already announced, so none is twice;
	   a failed archive retried by hand is announced again when it is done. */
	"CREATE TABLE IF NOT EXISTS notices (request_id INTEGER NOT NULL,"
	" state TEXT NOT NULL, at INTEGER NOT NULL, PRIMARY KEY (request_id, state));"
	/* A user's live requests (queue_user_usage, at every POST /v1/requests):
	   read without the user's finished ones or anyone else's. */
	"CREATE INDEX IF NOT EXISTS requests_live_uid ON requests(uid)"
	" WHERE state IN ('queued','running','verifying','failed_retryable');";

/*
 * Version 2: the plugin's refusal and the notes of skipped actions; array
 * tasks (their array and task id) and requeued runs of a job.
 */
static const char *_migrate_1_2 =
	"ALTER TABLE jobs ADD COLUMN refused TEXT;"
	"ALTER TABLE jobs ADD COLUMN notes TEXT;"
	"ALTER TABLE jobs ADD COLUMN array_job_id INTEGER;"
	"ALTER TABLE jobs ADD COLUMN array_task_id INTEGER;"
	"ALTER TABLE jobs ADD COLUMN runs INTEGER NOT NULL DEFAULT 0;"
	"ALTER TABLE jobs ADD COLUMN last_run TEXT;";
/* Version 3 adds the shards of mover jobs: new tables only (queue_shards.c). */

/*
 * The requests of each state, counted by triggers as rows come, change
 * state and go: a count of the requests table itself read every row of its
 * state index, 150 ms at a million requests, for every health call, every
 * /metrics scrape and the systemd status line the main loop sends every 5 s
 * (while holding the readers' connection, which status calls wait for).
 * Made, and filled from the table, once, in one transaction with its
 * triggers; an older stagehandd that opens the database keeps it right,
 * since the triggers are the database's. Upserts need SQLite 3.24.
 */
static const char *_schema_counts =
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
	" END;";

static int _counts_schema(struct queue *q, char *err, size_t errlen)
{
	if (qp_exec(q, "BEGIN IMMEDIATE", err, errlen) < 0)
		return -1;
	if (qp_exec(q, _schema_counts, err, errlen) < 0 ||
	    qp_exec(q, "COMMIT", err, errlen) < 0) {
		qp_exec_cached(q, _rollback);
		return -1;
	}
	return 0;
}

/* A read-only connection to path (qp_read's, qp_read_bulk's). 0 or -1 with err. */
static int _open_reader(const char *path, sqlite3 **db, char *err, size_t errlen)
{
	if (sqlite3_open_v2(path, db, SQLITE_OPEN_READONLY | SQLITE_OPEN_FULLMUTEX, NULL) !=
	    SQLITE_OK) {
		qp_err(err, errlen, "cannot open state database %s for reading: %s", path,
		       *db ? sqlite3_errmsg(*db) : "?");
		return -1;
	}
	sqlite3_busy_timeout(*db, 5000);
	return 0;
}

struct queue *queue_open(const char *path, char *err, size_t errlen)
{
	struct queue *q = calloc(1, sizeof(*q));
	sqlite3_stmt *st;
	int ver = -1;

	pthread_mutexattr_t ma;

	if (!q) {
		qp_err(err, errlen, "out of memory");
		return NULL;
	}
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE);
	pthread_mutex_init(&q->lock, &ma);
	pthread_mutex_init(&q->rlock, &ma);
	pthread_mutex_init(&q->block, &ma);
	pthread_mutexattr_destroy(&ma);
	if (sqlite3_open_v2(path, &q->db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE |
			    SQLITE_OPEN_FULLMUTEX, NULL) != SQLITE_OK) {
		qp_err(err, errlen, "cannot open state database %s: %s (check StateDB and that "
		     "its directory exists)", path, q->db ? sqlite3_errmsg(q->db) : "?");
		queue_close(q);
		return NULL;
	}
	sqlite3_busy_timeout(q->db, 5000);
	if (qp_exec(q, "PRAGMA journal_mode=WAL", err, errlen) < 0 ||
	    qp_exec(q, "PRAGMA synchronous=NORMAL", err, errlen) < 0 ||
	    qp_exec(q, "PRAGMA wal_autocheckpoint=" WAL_CHECKPOINT_PAGES, err, errlen) < 0 ||
	    qp_exec(q, "PRAGMA foreign_keys=ON", err, errlen) < 0 ||
	    /* The sub-journal of the batches' savepoints (one per change, qp_begin) in
	       memory: once it spilled to a temporary file (past 64 KiB, once) every
	       savepoint wrote its pages there again, two writes a page, 94,204 for a
	       10,000-file stage-in (docs/scaling.md); in memory it is emptied at each
	       RELEASE. */
	    qp_exec(q, "PRAGMA temp_store=MEMORY", err, errlen) < 0)
		goto fail;
	st = qp_prep(q, "PRAGMA user_version", err, errlen);
	if (!st)
		goto fail;
	if (sqlite3_step(st) == SQLITE_ROW)
		ver = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	if (ver > SCHEMA_VERSION) {
		qp_err(err, errlen, "state database %s has schema version %d, newer than this "
		     "stagehandd (%d): upgrade stagehandd", path, ver, SCHEMA_VERSION);
		goto fail;
	}
	if (ver < SCHEMA_VERSION) {
		char sql[64];

		/* Version 0 is an empty database; later versions migrate here, in order. */
		if (qp_exec(q, "BEGIN IMMEDIATE", err, errlen) < 0)
			goto fail;
		snprintf(sql, sizeof(sql), "PRAGMA user_version=%d", SCHEMA_VERSION);
		if ((ver == 1 && qp_exec(q, _migrate_1_2, err, errlen) < 0) ||
		    qp_exec(q, _schema, err, errlen) < 0 ||
		    qp_exec(q, queue_shards_schema, err, errlen) < 0 ||
		    qp_exec(q, sql, err, errlen) < 0 ||
		    qp_exec(q, "COMMIT", err, errlen) < 0) {
			qp_exec_cached(q, _rollback);
			goto fail;
		}
	}
	/* Databases made before fair dispatch, the audit export, notifications, drain,
	   after= waits, S3 multipart uploads or reruns lack their tables and indexes; harmless
	   to repeat. */
	if (qp_exec(q, _schema_fair, err, errlen) < 0 ||
	    qp_exec(q, queue_shards_index, err, errlen) < 0 ||
	    qp_exec(q, queue_shards_ranges, err, errlen) < 0 ||
	    qp_exec(q, queue_pool_schema, err, errlen) < 0 ||
	    qp_exec(q, queue_drain_schema, err, errlen) < 0 ||
	    qp_exec(q, queue_after_schema, err, errlen) < 0 ||
	    qp_exec(q, queue_mpu_schema, err, errlen) < 0 ||
	    qp_exec(q, queue_reruns_schema, err, errlen) < 0 ||
	    qp_exec(q, queue_sluid_schema, err, errlen) < 0 ||
	    queue_history_schema(q, err, errlen) < 0 || _counts_schema(q, err, errlen) < 0 ||
	    queue_cleanup_schema(q, err, errlen) < 0)
		goto fail;
	/* The readers' connections, once the schema is there (see queue_private.h). */
	if (_open_reader(path, &q->rdb, err, errlen) < 0 ||
	    _open_reader(path, &q->bdb, err, errlen) < 0)
		goto fail;
	return q;
fail:
	queue_close(q);
	return NULL;
}

int queue_batch_begin(struct queue *q)
{
	qp_lock(q);
	if (q->batch || qp_exec_cached(q, _begin) != SQLITE_OK) {
		qp_unlock(q);
		return -1;
	}
	q->batch = 1;
	q->batch_durable = 0;
	return 0;
}

int queue_batch_end(struct queue *q, char *err, size_t errlen)
{
	int rc, durable = q->batch_durable;

	q->batch = 0;
	q->batch_durable = 0;
	rc = _commit(q, durable, err, errlen);
	qp_unlock(q);
	return rc;
}

static const char _sp_atomic[] = "SAVEPOINT qa", _sp_atomic_undo[] = "ROLLBACK TO qa",
		  _sp_atomic_end[] = "RELEASE qa";

int queue_atomic_begin(struct queue *q)
{
	int own;

	qp_lock(q);
	own = !q->batch;
	if (own) {
		if (qp_exec_cached(q, _begin) != SQLITE_OK) {
			qp_unlock(q);
			return -1;
		}
		q->batch = 1;
		q->batch_durable = 0;
	}
	_savepoint(q, _sp_atomic);
	return own;
}

int queue_atomic_end(struct queue *q, int token, int ok, char *err, size_t errlen)
{
	int rc = 0;

	if (!ok)
		_savepoint(q, _sp_atomic_undo);
	_savepoint(q, _sp_atomic_end);
	if (token == 1) {
		int durable = q->batch_durable;

		q->batch = 0;
		q->batch_durable = 0;
		rc = _commit(q, durable, err, errlen);
	}
	qp_unlock(q);
	return rc;
}

void queue_close(struct queue *q)
{
	if (!q)
		return;
	for (int i = 0; i < QP_CACHE_MAX; i++) {
		sqlite3_finalize(q->cache[i].st);	/* NULL: a no-op */
		sqlite3_finalize(q->rcache[i].st);
	}
	for (int i = 0; i < QP_CACHE_MAX; i++)
		sqlite3_finalize(q->bcache[i].st);
	if (q->rdb)
		sqlite3_close(q->rdb);
	if (q->bdb)
		sqlite3_close(q->bdb);
	if (q->db)
		sqlite3_close(q->db);
	pthread_mutex_destroy(&q->lock);
	pthread_mutex_destroy(&q->rlock);
	pthread_mutex_destroy(&q->block);
	free(q);
}

int queue_recover(struct queue *q, int *nrequests, int *nitems, char *err, size_t errlen)
{
	int rc = -1;

	qp_begin(q);
	if (qp_execf(q, "UPDATE items SET state='queued' WHERE state IN ('running','verifying')",
		     err, errlen, "") < 0)
		goto out;
	*nitems = sqlite3_changes(q->db);
	if (qp_execf(q, "UPDATE requests SET state='queued', updated=?1, error="
		     "'interrupted (daemon restart); redone' WHERE state IN ('running','verifying')",
		     err, errlen, "I", qp_now()) < 0)
		goto out;
	*nrequests = sqlite3_changes(q->db);
	rc = 0;
out:
	return qp_end(q, rc, 1, err, errlen);
}

int qp_request_insert(struct queue *q, const struct queue_new_request *nr, int64_t not_before,
		      int64_t *id_out, char *err, size_t errlen)
{
	int64_t now = qp_now();

	/* The claim skips a queued request until next_attempt_at (queue_request_claim_ex). */
	sqlite3_stmt *st = qp_cachedf(q, "INSERT INTO requests (uid, gid, user, job_id, action,"
				      " source, dest, options, state, max_retries, next_attempt_at,"
				      " created, updated) VALUES"
				      " (?1,?2,?3,?4,?5,?6,?7,?8,'queued',?9,?10,?11,?11)", err, errlen,
				      "IItPttttiPI", (int64_t)nr->uid, (int64_t)nr->gid, nr->user,
				      nr->job_id, nr->action, nr->source, nr->dest,
				      nr->options ? nr->options : "{}", nr->max_retries,
				      not_before > now ? not_before : 0, now);

	if (!st || qp_step_reset(q, st, err, errlen) < 0)
		return -1;
	*id_out = sqlite3_last_insert_rowid(q->db);
	return 0;
}

int queue_request_create(struct queue *q, const struct queue_new_request *nr,
			 int64_t *id_out, char *err, size_t errlen)
{
	int rc;

	qp_begin(q);
	rc = qp_request_insert(q, nr, 0, id_out, err, errlen);
	return qp_end(q, rc, 1, err, errlen);
}

#define REQ_COLS "id, uid, gid, user, job_id, action, source, dest, options, state, attempts," \
	" max_retries, next_attempt_at, error, created, updated, bytes_total, bytes_done," \
	" files_total, files_done, files_skipped"

/* REQ_COLS into a struct queue_request, in order; the state is read by name. */
#define REQ_COL(type, field) QP_COL(type, struct queue_request, field)
static const struct qp_col _request_cols[] = {
	REQ_COL(QC_I64, id), REQ_COL(QC_ID, uid), REQ_COL(QC_ID, gid), REQ_COL(QC_STR, user),
	REQ_COL(QC_I64, job_id), REQ_COL(QC_STR, action), REQ_COL(QC_STR, source),
	REQ_COL(QC_STR, dest), REQ_COL(QC_STR, options), REQ_COL(QC_SKIP, state),
	REQ_COL(QC_INT, attempts), REQ_COL(QC_INT, max_retries),
	REQ_COL(QC_I64, next_attempt_at), REQ_COL(QC_STR, error), REQ_COL(QC_I64, created),
	REQ_COL(QC_I64, updated), REQ_COL(QC_I64, bytes_total), REQ_COL(QC_I64, bytes_done),
	REQ_COL(QC_I64, files_total), REQ_COL(QC_I64, files_done),
	REQ_COL(QC_I64, files_skipped),
};

void queue_request_free(struct queue_request *r)
{
	if (!r)
		return;
	qp_row_free(_request_cols, QP_NCOLS(_request_cols), r);
	free(r);
}

/* The current row of a REQ_COLS select: a new request (queue_request_free), NULL on no memory. */
static struct queue_request *_row_request(sqlite3_stmt *st)
{
	struct queue_request *r = calloc(1, sizeof(*r));
	const char *s;
	enum queue_state qs = QS_QUEUED;

	if (!r)
		return NULL;
	if (qp_row(st, _request_cols, QP_NCOLS(_request_cols), r, NULL, 0) < 0) {
		queue_request_free(r);
		return NULL;
	}
	s = (const char *)sqlite3_column_text(st, 9);
	if (s)
		queue_state_from_name(s, &qs);
	r->state = qs;
	if (!r->user || !r->action || !r->source || !r->options) {
		queue_request_free(r);
		return NULL;
	}
	return r;
}

/* Caller holds the lock. */
static int _get_locked(struct queue *q, int64_t id, struct queue_request **out,
		       char *err, size_t errlen)
{
	sqlite3_stmt *st = qp_cachedf(q, "SELECT " REQ_COLS " FROM requests WHERE id=?1", err, errlen,
				    "I", id);
	int rc;

	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_DONE) {
		sqlite3_reset(st);
		return 1;
	}
	if (rc != SQLITE_ROW) {
		qp_err(err, errlen, "database: %s", sqlite3_errmsg(q->db));
		sqlite3_reset(st);
		return -1;
	}
	*out = _row_request(st);
	sqlite3_reset(st);
	if (!*out) {
		qp_err(err, errlen, "out of memory");
		return -1;
	}
	return 0;
}

int queue_request_get(struct queue *q, int64_t id, struct queue_request **out,
		      char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc, found = 0;

	*out = NULL;
	st = qp_readf(q, "SELECT " REQ_COLS " FROM requests WHERE id=?1", err, errlen, "I", id);
	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		found = 1;
		if (!(*out = _row_request(st))) {
			qp_err(err, errlen, "out of memory");
			rc = -1;
		}
	}
	if (qp_read_end(q, st, rc, err, errlen) < 0)
		return -1;
	return found ? 0 : 1;
}

/*
 * queue_request_list's select, one for each set of the filters an index can
 * serve, so that it reads what the index finds, not the table. A single
 * select with "(?2 = 0 OR job_id=?2)" could use no index at all: every
 * list by job (the watch follows each pending job's stage-ins at every
 * tick) and every "what needs attention" read the whole table, 64-74 ms
 * each at a million requests through the API (make bench-history). Which
 * index, in this order:
 *   - a job's requests (requests_job): a job has a few; the uid is then
 *     only checked (the unary + keeps SQLite from picking requests_uid,
 *     which holds every request the user ever made);
 *   - what needs attention: the unfinished and failed states, by
 *     requests_state, or with a uid by requests_claim (state, uid, ...),
 *     named (SQLite picks requests_uid otherwise: the user's whole
 *     history);
 *   - a user's requests (requests_uid), newest first in index order.
 * An explicit state is only checked, never looked up: "done" is most of
 * the table, and newest first with a LIMIT stops early on a scan by id.
 * The forms that filter nothing keep their parameter, so that every
 * variant binds the same eight.
 */
#define RL_SQL(uid, job, attention) RL_SQL_FROM("requests", uid, job, attention)
#define RL_SQL_FROM(from, uid, job, attention) \
	"SELECT " REQ_COLS " FROM " from " WHERE " uid " AND " job " AND " attention \
	" AND (?3 IS NULL OR state=?3) AND (?4 IS NULL OR action=?4)" \
	/* A plain range on the rowid, so the scan starts and stops at it \
	   (an "?7 <= 0 OR" here read the whole table in id order). */ \
	" AND id >= ?7 AND id <= ?8" \
	" ORDER BY id DESC LIMIT ?5"
#define RL_ANY_UID "?1 < 0"
#define RL_UID "uid=?1"
#define RL_UID_CHECKED "+uid=?1"
#define RL_ANY_JOB "?2 = 0"
#define RL_JOB "job_id=?2"
#define RL_ANY_ATT "?6 <= 0"
#define RL_ATT_CHECKED "(?6 <= 0 OR state IN ('queued','running','verifying')" \
	" OR (state IN ('failed_retryable','failed_final') AND updated >= ?6))"
#define RL_ATT "state IN ('queued','running','verifying','failed_retryable','failed_final')" \
	" AND (state IN ('queued','running','verifying') OR updated >= ?6)"

/* Indexed by (uid set) | (job set) << 1 | (attention set) << 2. */
static const char *const _list_sql[8] = {
	RL_SQL(RL_ANY_UID, RL_ANY_JOB, RL_ANY_ATT),
	RL_SQL(RL_UID, RL_ANY_JOB, RL_ANY_ATT),
	RL_SQL(RL_ANY_UID, RL_JOB, RL_ANY_ATT),
	RL_SQL(RL_UID_CHECKED, RL_JOB, RL_ANY_ATT),
	RL_SQL(RL_ANY_UID, RL_ANY_JOB, RL_ATT),
	RL_SQL_FROM("requests INDEXED BY requests_claim", RL_UID, RL_ANY_JOB, RL_ATT),
	RL_SQL(RL_ANY_UID, RL_JOB, RL_ATT_CHECKED),
	RL_SQL(RL_UID_CHECKED, RL_JOB, RL_ATT_CHECKED),
};

int queue_request_list(struct queue *q, const struct queue_filter *f,
		       int (*fn)(const struct queue_request *r, void *arg), void *arg,
		       char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	st = qp_readf(q, _list_sql[(f->uid >= 0) | (f->job_id ? 2 : 0) |
				  (f->attention_since > 0 ? 4 : 0)],
		      err, errlen, "IIttiIII", f->uid, f->job_id,
		      f->state >= 0 ? queue_state_name((enum queue_state)f->state) : NULL,
		      f->action, f->limit > 0 ? f->limit : -1, f->attention_since,
		      f->id_min > 0 ? f->id_min : (int64_t)0,
		      f->id_max > 0 ? f->id_max : INT64_MAX);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct queue_request *r = _row_request(st);
		int stop;

		if (!r) {
			rc = SQLITE_NOMEM;
			break;
		}
		stop = fn(r, arg);
		queue_request_free(r);
		if (stop) {
			rc = SQLITE_DONE;
			break;
		}
	}
	return qp_read_end(q, st, rc, err, errlen);
}

int queue_request_claim(struct queue *q, int64_t now, struct queue_request **out,
			char *err, size_t errlen)
{
	return queue_request_claim_ex(q, now, 1, out, err, errlen);
}

int queue_request_claim_ex(struct queue *q, int64_t now, int after_job_ok,
			   struct queue_request **out, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int64_t id;
	int rc = -1, step;

	qp_begin(q);
	/*
	 * Fair dispatch. Inputs a waiting job needs (stage_in) come before
	 * after-job copies; within a class, the user with the fewest requests
	 * in flight goes first, then the user served longest ago (round robin,
	 * table dispatch), then the oldest request. So one user's 10,000
	 * queued archives never keep another user's request waiting for more
	 * than one free worker, and users share the workers equally while
	 * several have work.
	 *
	 * The cost is per user, not per queued request: u walks the users with
	 * queued work one index seek at a time, and each user's oldest request
	 * of each class is the first row of its range of index requests_claim
	 * (rows waiting for a retry's next_attempt_at are stepped over; they
	 * are few). Reading every queued row here made a claim cost O(queue),
	 * and a 20,000-request queue slowed request creation fourfold.
	 * In-flight counts and dispatch have a row per user.
	 */
	st = qp_cachedf(q, "WITH RECURSIVE u(uid) AS ("
		   "  SELECT (SELECT uid FROM requests WHERE state='queued' ORDER BY uid LIMIT 1)"
		   "  UNION ALL SELECT (SELECT r.uid FROM requests r WHERE r.state='queued'"
		   "   AND r.uid > u.uid ORDER BY r.uid LIMIT 1) FROM u WHERE u.uid IS NOT NULL),"
		   " k(cls) AS (SELECT 0 UNION ALL SELECT 1 WHERE ?2),"
		   " c AS (SELECT u.uid AS uid, k.cls AS cls,"
		   "  (SELECT r.id FROM requests r WHERE r.state='queued' AND r.uid=u.uid"
		   "   AND (r.action IN ('archive','stage_out'))=k.cls"
		   "   AND (r.next_attempt_at IS NULL OR r.next_attempt_at <= ?1)"
		   "   ORDER BY r.id LIMIT 1) AS id FROM u, k WHERE u.uid IS NOT NULL)"
		   " SELECT c.id FROM c"
		   " LEFT JOIN (SELECT uid, count(*) AS n FROM requests"
		   "  WHERE state IN ('running','verifying') GROUP BY uid) f ON f.uid = c.uid"
		   " LEFT JOIN dispatch d ON d.uid = c.uid WHERE c.id IS NOT NULL"
		   " ORDER BY c.cls, coalesce(f.n, 0), coalesce(d.last_claim, 0), c.id LIMIT 1",
		   err, errlen, "Ii", now, after_job_ok ? 1 : 0);
	if (!st)
		goto out;
	step = sqlite3_step(st);
	if (step != SQLITE_ROW) {
		sqlite3_reset(st);
		if (step == SQLITE_DONE) {
			qp_end(q, 0, 0, err, errlen);
			return 1;
		}
		qp_err(err, errlen, "database: %s", sqlite3_errmsg(q->db));
		goto out;
	}
	id = sqlite3_column_int64(st, 0);
	sqlite3_reset(st);
	if (qp_execf(q, "UPDATE requests SET state='running', attempts=attempts+1,"
		     " next_attempt_at=NULL, updated=?2,"
		     " files_done=(SELECT count(*) FROM items WHERE request_id=?1 AND state='done'"
		     "  AND type='file'),"
		     " bytes_done=(SELECT coalesce(sum(size),0) FROM items WHERE request_id=?1"
		     "  AND state='done' AND type='file') WHERE id=?1", err, errlen, "II", id,
		     now) < 0 ||
	    qp_execf(q, "INSERT OR REPLACE INTO dispatch (uid, last_claim) SELECT uid,"
		     " (SELECT coalesce(max(last_claim), 0) + 1 FROM dispatch) FROM requests"
		     " WHERE id=?1", err, errlen, "I", id) < 0)
		goto out;
	rc = _get_locked(q, id, out, err, errlen);
out:
	return qp_end(q, rc, 0, err, errlen);
}

/* Caller holds the lock; returns 0, 1 (state does not allow) or -1. */
static int _set_state_locked(struct queue *q, int64_t id, int from, enum queue_state to,
			     const char *error, int64_t next_at, char *err, size_t errlen)
{
	sqlite3_stmt *st = qp_cachedf(q, "SELECT state FROM requests WHERE id=?1", err, errlen,
				    "I", id);
	enum queue_state cur;
	const char *s;

	if (!st)
		return -1;
	if (sqlite3_step(st) != SQLITE_ROW) {
		sqlite3_reset(st);
		qp_err(err, errlen, "request %lld does not exist", (long long)id);
		return -1;
	}
	s = (const char *)sqlite3_column_text(st, 0);
	if (!s || queue_state_from_name(s, &cur) < 0) {
		sqlite3_reset(st);
		qp_err(err, errlen, "request %lld has a corrupt state", (long long)id);
		return -1;
	}
	sqlite3_reset(st);
	if ((from >= 0 && (int)cur != from) || !queue_transition_ok(cur, to)) {
		qp_err(err, errlen, "request %lld is %s: cannot move it to %s", (long long)id,
		     queue_state_name(cur), queue_state_name(to));
		return 1;
	}
	/* next_at is a time (now + a delay) or 0 for none: P binds NULL for 0. */
	return qp_execf(q, "UPDATE requests SET state=?2, error=?3, updated=?4,"
			" next_attempt_at=?5 WHERE id=?1", err, errlen, "IttIP", id,
			queue_state_name(to), error, qp_now(), next_at);
}

int queue_request_set_state(struct queue *q, int64_t id, int from, enum queue_state to,
			    const char *error, char *err, size_t errlen)
{
	int rc;
	int durable = to == QS_CANCELLED || to == QS_DONE;

	qp_begin(q);
	rc = _set_state_locked(q, id, from, to, error, 0, err, errlen);
	if (rc == 1) {
		qp_end(q, 0, 0, NULL, 0);
		return 1;
	}
	return qp_end(q, rc, durable, err, errlen);
}

int queue_request_fail(struct queue *q, int64_t id, const char *error, int retryable,
		       int backoff, int64_t now, int *final_out, char *err, size_t errlen)
{
	struct queue_request *r = NULL;
	int rc;

	qp_begin(q);
	rc = _get_locked(q, id, &r, err, errlen);
	if (rc != 0) {
		if (rc == 1)
			qp_err(err, errlen, "request %lld does not exist", (long long)id);
		return qp_end(q, -1, 0, err, errlen);
	}
	if (retryable && r->attempts <= r->max_retries) {
		int shift = r->attempts > 1 ? r->attempts - 1 : 0;
		int64_t delay = (int64_t)backoff << (shift > 20 ? 20 : shift);

		rc = _set_state_locked(q, id, -1, QS_FAILED_RETRYABLE, error, now + delay,
				       err, errlen);
		*final_out = 0;
	} else {
		rc = _set_state_locked(q, id, -1, QS_FAILED_FINAL, error, 0, err, errlen);
		*final_out = 1;
	}
	queue_request_free(r);
	return qp_end(q, rc ? -1 : 0, 0, err, errlen);
}

int queue_requeue_due(struct queue *q, int64_t now, char *err, size_t errlen)
{
	int rc, n;

	qp_begin(q);
	rc = qp_execf(q, "UPDATE requests SET state='queued', updated=?1 WHERE"
		      " state='failed_retryable' AND next_attempt_at <= ?1", err, errlen, "I", now);
	n = rc == 0 ? sqlite3_changes(q->db) : 0;
	rc = qp_end(q, rc, 0, err, errlen);
	return rc < 0 ? -1 : n;
}

int queue_request_retry(struct queue *q, int64_t id, char *err, size_t errlen)
{
	int rc;

	qp_begin(q);
	rc = _set_state_locked(q, id, -1, QS_QUEUED, NULL, 0, err, errlen);
	if (rc == 1) {
		qp_end(q, 0, 0, NULL, 0);
		return 1;
	}
	if (rc == 0)
		rc = qp_execf(q, "UPDATE requests SET attempts=0 WHERE id=?1", err, errlen, "I", id);
	return qp_end(q, rc, 1, err, errlen);
}

int queue_request_totals(struct queue *q, int64_t id, int64_t files_total,
			 int64_t bytes_total, int64_t files_skipped, char *err, size_t errlen)
{
	int rc;

	qp_begin(q);
	rc = qp_execf(q, "UPDATE requests SET files_total=?2, bytes_total=?3, files_skipped=?4,"
		      " updated=?5 WHERE id=?1", err, errlen, "IIIII", id, files_total, bytes_total,
		      files_skipped, qp_now());
	return qp_end(q, rc, 0, err, errlen);
}

int queue_count_states(struct queue *q, int64_t counts[QS_COUNT], char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	memset(counts, 0, sizeof(int64_t) * QS_COUNT);
	st = qp_read(q, "SELECT state, n FROM request_counts", err, errlen);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
		enum queue_state s;
		const char *n = (const char *)sqlite3_column_text(st, 0);

		if (n && queue_state_from_name(n, &s) == 0)
			counts[s] = sqlite3_column_int64(st, 1);
	}
	return qp_read_end(q, st, rc, err, errlen);
}

int queue_user_usage(struct queue *q, uid_t uid, struct queue_usage *u, char *err, size_t errlen)
{
	sqlite3_stmt *st;
	int rc;

	memset(u, 0, sizeof(*u));
	st = qp_readf(q, "SELECT count(*), coalesce(sum(max(files_total - files_done - files_skipped,"
		      " 0)), 0), coalesce(sum(max(bytes_total - bytes_done, 0)), 0) FROM requests"
		      " INDEXED BY requests_live_uid WHERE uid=?1 AND"
		      " state IN ('queued','running','verifying','failed_retryable')",
		      err, errlen, "I", (int64_t)uid);
	if (!st)
		return -1;
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		u->requests = sqlite3_column_int64(st, 0);
		u->items = sqlite3_column_int64(st, 1);
		u->bytes = sqlite3_column_int64(st, 2);
	}
	return qp_read_end(q, st, rc, err, errlen);
}
