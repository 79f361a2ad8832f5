/*
 * qtest.h - what the queue's unit tests share: counting SQLite's work (VM
 * steps, a count that does not depend on the machine's speed) and removing
 * a test's database with its WAL files.
 */
#ifndef STAGEHAND_QTEST_H
#define STAGEHAND_QTEST_H

#include <sqlite3.h>
#include <stdio.h>
#include <unistd.h>

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
