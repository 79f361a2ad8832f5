/*
 * test_schema.c - the schema's migrations: a new database gets each once and
 * records it; a database of 0.x (PRAGMA user_version 1 to 3, no record) is
 * upgraded in place with its rows; a migration is never run again; one that
 * fails leaves none of itself; a database a newer stagehandd migrated is
 * refused.
 */
#include "config.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "queue.h"
#include "qtest.h"
#include "tests/tap.h"

static char _dir[] = "/tmp/test_schema_XXXXXX";
static char _db[300];

/* The tables, columns and indexes of version 1 (stagehandd 0.1), as it made them. */
static const char *const _v1 =
	"CREATE TABLE jobs (job_id INTEGER PRIMARY KEY, uid INTEGER, gid INTEGER, user TEXT,"
	" work_dir TEXT, plan TEXT, hold_state TEXT NOT NULL DEFAULT 'none', end_state TEXT,"
	" end_exit_code INTEGER NOT NULL DEFAULT 0, end_received INTEGER,"
	" end_processed INTEGER NOT NULL DEFAULT 0, created INTEGER NOT NULL,"
	" updated INTEGER NOT NULL);"
	"CREATE TABLE requests (id INTEGER PRIMARY KEY AUTOINCREMENT, uid INTEGER NOT NULL,"
	" gid INTEGER NOT NULL, user TEXT NOT NULL, job_id INTEGER, action TEXT NOT NULL,"
	" source TEXT NOT NULL, dest TEXT, options TEXT NOT NULL DEFAULT '{}',"
	" state TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,"
	" max_retries INTEGER NOT NULL DEFAULT 3, next_attempt_at INTEGER, error TEXT,"
	" created INTEGER NOT NULL, updated INTEGER NOT NULL,"
	" bytes_total INTEGER NOT NULL DEFAULT 0, bytes_done INTEGER NOT NULL DEFAULT 0,"
	" files_total INTEGER NOT NULL DEFAULT 0, files_done INTEGER NOT NULL DEFAULT 0,"
	" files_skipped INTEGER NOT NULL DEFAULT 0);"
	"CREATE TABLE items (request_id INTEGER NOT NULL REFERENCES requests(id),"
	" relpath TEXT NOT NULL, type TEXT NOT NULL DEFAULT 'file', size INTEGER NOT NULL DEFAULT 0,"
	" mtime INTEGER NOT NULL DEFAULT 0, mode INTEGER NOT NULL DEFAULT 0,"
	" state TEXT NOT NULL DEFAULT 'queued', checksum_src TEXT, checksum_dst TEXT,"
	" attempts INTEGER NOT NULL DEFAULT 0, error TEXT, PRIMARY KEY (request_id, relpath));"
	"CREATE TABLE audit (id INTEGER PRIMARY KEY, job_id INTEGER, uid INTEGER NOT NULL,"
	" request_id INTEGER NOT NULL, path_src TEXT NOT NULL, path_dst TEXT NOT NULL,"
	" bytes INTEGER NOT NULL, checksum TEXT, started INTEGER NOT NULL,"
	" ended INTEGER NOT NULL, UNIQUE (request_id, path_dst, checksum));"
	"INSERT INTO jobs (job_id, uid, gid, user, work_dir, hold_state, created, updated)"
	" VALUES (41, 1001, 1001, 'alice', '/w', 'held', 1, 1);"
	"INSERT INTO requests (uid, gid, user, job_id, action, source, dest, state, created,"
	" updated) VALUES (1001, 1001, 'alice', 41, 'stage_in', '/a', '/s', 'queued', 1, 1);"
	"INSERT INTO requests (uid, gid, user, job_id, action, source, dest, state, created,"
	" updated) VALUES (1001, 1001, 'alice', 41, 'archive', '/s', '/a', 'done', 1, 1);"
	"PRAGMA user_version=1;";

/* Runs sql on the database file with a connection of the test's own. */
static int _sql(const char *sql)
{
	sqlite3 *db = NULL;
	char *msg = NULL;
	int rc;

	if (sqlite3_open(_db, &db) != SQLITE_OK)
		return -1;
	rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
	if (rc != SQLITE_OK)
		printf("# %s: %s\n", sql, msg ? msg : "?");
	sqlite3_free(msg);
	sqlite3_close(db);
	return rc == SQLITE_OK ? 0 : -1;
}

/* One integer from sql, or -1. */
static long _int(const char *sql)
{
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	long v = -1;

	if (sqlite3_open(_db, &db) == SQLITE_OK &&
	    sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW)
		v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

static void _fresh(void)
{
	qtest_remove_db(_db, "");
	unlink(_db);
}

/* Each migration recorded once, in order, 1 to the newest. */
static int _all_recorded(void)
{
	char sql[200];

	snprintf(sql, sizeof(sql), "SELECT count(*) = %d AND min(id) = 1 AND max(id) = %d AND"
		 " count(DISTINCT id) = count(*) FROM schema_migrations", queue_schema_latest(),
		 queue_schema_latest());
	return _int(sql) == 1;
}

int main(void)
{
	char err[1024] = "";
	struct queue *q;
	struct queue_job *j = NULL;
	int64_t counts[QS_COUNT];

	if (!mkdtemp(_dir))
		return 1;
	snprintf(_db, sizeof(_db), "%s/state.db", _dir);

	/* Names: every migration has one, numbered 1.. without a gap. */
	{
		int named = 1;

		for (int id = 1; id <= queue_schema_latest(); id++)
			named &= queue_schema_name(id) && *queue_schema_name(id);
		ok(queue_schema_latest() >= 14 && named && !queue_schema_name(0) &&
		   !queue_schema_name(queue_schema_latest() + 1),
		   "%d migrations, each named, numbered without a gap", queue_schema_latest());
	}

	/* A new database: every migration, recorded once; the tables work. */
	q = queue_open(_db, err, sizeof(err));
	ok(q != NULL, "a new database opens%s%s", q ? "" : ": ", q ? "" : err);
	queue_close(q);
	ok(_all_recorded(), "each migration recorded once");
	ok(_int("PRAGMA user_version") == 3, "user_version 3, as older stagehandd expect");
	ok(_int("SELECT count(*) FROM sqlite_master WHERE name IN ('request_counts',"
		"'cleanup_totals','requests_prunable','shard_ranges','s3_uploads','job_reruns',"
		"'after_waits','drain','bb_pool','notices','shards_job','sluid_runs')") == 12,
	   "the later migrations' tables and indexes are there");

	/* Never run again: what a migration made and was taken away stays away. */
	ok(_sql("DROP INDEX requests_prunable; DROP INDEX shards_job;") == 0, "two indexes dropped");
	q = queue_open(_db, err, sizeof(err));
	ok(q != NULL, "opens again%s%s", q ? "" : ": ", q ? "" : err);
	queue_close(q);
	ok(_int("SELECT count(*) FROM sqlite_master WHERE name IN ('requests_prunable',"
		"'shards_job')") == 0 && _all_recorded(),
	   "the second open ran no migration (the dropped indexes were not made again)");

	/* A database of version 1 with its rows: upgraded in place. */
	_fresh();
	ok(_sql(_v1) == 0, "a version 1 database with a held job and two requests");
	q = queue_open(_db, err, sizeof(err));
	ok(q != NULL, "it opens%s%s", q ? "" : ": ", q ? "" : err);
	if (q) {
		ok(queue_job_get(q, 41, &j, err, sizeof(err)) == 0 && j &&
		   strcmp(j->hold_state, "held") == 0 && j->runs == 0 && !j->refused,
		   "its job is kept, with version 2's columns");
		queue_job_free(j);
		j = NULL;
		ok(queue_count_states(q, counts, err, sizeof(err)) == 0 &&
		   counts[QS_QUEUED] == 1 && counts[QS_DONE] == 1,
		   "its requests are counted by state (the counts filled once from the table)");
		queue_close(q);
	}
	ok(_all_recorded() && _int("PRAGMA user_version") == 3, "every migration recorded");
	ok(_int("SELECT count(*) FROM pragma_table_info('requests') WHERE name='pruned'") == 1,
	   "requests.pruned added");

	/* A database of version 3 from 0.x: its later tables made at every open,
	   requests.pruned among them, and no record. */
	_fresh();
	q = queue_open(_db, err, sizeof(err));
	queue_close(q);
	ok(_sql("DROP TABLE schema_migrations; DROP INDEX requests_prunable;"
		" DROP TABLE job_reruns;") == 0 &&
	   _int("SELECT count(*) FROM pragma_table_info('requests') WHERE name='pruned'") == 1,
	   "a version 3 database of 0.x, with requests.pruned, lacking two later objects");
	q = queue_open(_db, err, sizeof(err));
	ok(q != NULL, "it opens (requests.pruned is not added twice)%s%s", q ? "" : ": ",
	   q ? "" : err);
	queue_close(q);
	ok(_all_recorded() && _int("SELECT count(*) FROM sqlite_master WHERE name IN"
				    " ('requests_prunable','job_reruns')") == 2,
	   "recorded, and what it lacked is made");

	/* A failing migration: none of it applied, the ones before recorded, named in the error. */
	_fresh();
	ok(_sql(_v1) == 0 && _sql("CREATE TABLE requests_claim (x);") == 0,
	   "a version 1 database holding a table named as migration 4's index");
	q = queue_open(_db, err, sizeof(err));
	ok(q == NULL && strstr(err, "migration 4 (") && strstr(err, "none of it was applied") &&
	   strstr(err, "requests_claim") && strstr(err, _db),
	   "refused, naming the database, the migration and SQLite's cause: %s", err);
	queue_close(q);
	ok(_int("SELECT max(id) FROM schema_migrations") == 3 &&
	   _int("SELECT count(*) FROM sqlite_master WHERE name='dispatch'") == 0,
	   "migrations 1-3 recorded, nothing of 4 made");
	ok(_sql("DROP TABLE requests_claim;") == 0, "the cause removed");
	q = queue_open(_db, err, sizeof(err));
	ok(q != NULL && _all_recorded(), "the next open resumes at migration 4%s%s",
	   q ? "" : ": ", q ? "" : err);
	queue_close(q);

	/* A database a newer stagehandd migrated. */
	{
		char sql[160];

		snprintf(sql, sizeof(sql), "INSERT INTO schema_migrations VALUES (%d, 'future', 0)",
			 queue_schema_latest() + 1);
		ok(_sql(sql) == 0, "a migration this stagehandd does not know");
	}
	q = queue_open(_db, err, sizeof(err));
	ok(q == NULL && strstr(err, "newer than this stagehandd") && strstr(err, "upgrade"),
	   "refused: %s", err);
	queue_close(q);

	/* A database with a user_version but no record, beyond any 0.x. */
	_fresh();
	ok(_sql("CREATE TABLE t (x); PRAGMA user_version=7;") == 0, "user_version 7, no record");
	q = queue_open(_db, err, sizeof(err));
	ok(q == NULL && strstr(err, "schema version 7") && strstr(err, "backup"),
	   "refused: %s", err);
	queue_close(q);

	qtest_remove_db(_db, _dir);
	return tap_done();
}
