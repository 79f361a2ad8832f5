/*
 * qtest.h - what the queue's unit tests share: a queue in a temporary
 * directory, counting SQLite's work (VM steps, a count that does not depend
 * on the machine's speed) and removing a test's database with its WAL files.
 */
#ifndef STAGEHAND_QTEST_H
#define STAGEHAND_QTEST_H

#include <errno.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "queue.h"
#include "tests/tap.h"

/*
 * A new queue in a fresh temporary directory: dir is a mkdtemp template
 * (changed in place), db gets the database's path. The test's check "open";
 * NULL when it could not be made (said why).
 */
static inline struct queue *qtest_open(char *dir, char *db, size_t dblen)
{
	char err[512];
	struct queue *q;

	if (!mkdtemp(dir)) {
		printf("Bail out! mkdtemp %s: %s\n", dir, strerror(errno));
		return NULL;
	}
	snprintf(db, dblen, "%s/q.db", dir);
	q = queue_open(db, err, sizeof(err));
	ok(q != NULL, "open: %s", q ? "ok" : err);
	return q;
}

/* VM steps run on db since the last call (every statement's count read and reset). */
static inline long qtest_vm_steps(sqlite3 *db)
{
	long n = 0;

	for (sqlite3_stmt *st = sqlite3_next_stmt(db, NULL); st; st = sqlite3_next_stmt(db, st))
		n += sqlite3_stmt_status(st, SQLITE_STMTSTATUS_VM_STEP, 1);
	return n;
}

/* The database at path, its -wal and -shm files, then the directory dir. */
static inline void qtest_remove_db(const char *path, const char *dir)
{
	static const char *const sfx[] = { "", "-wal", "-shm" };
	char p[4096];

	for (int i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s%s", path, sfx[i]);
		unlink(p);
	}
	rmdir(dir);
}

#endif /* STAGEHAND_QTEST_H */
