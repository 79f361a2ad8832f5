/*
 * audit_tally.h - the /metrics totals drawn from the audit trail (per user,
 * per configured file system), kept up to date by reading only the audit
 * rows added since the last scrape.
 *
 * The audit trail is append-only (rows are added in id order and never
 * changed or deleted), so totals carried over from the last read plus the
 * rows after it equal totals of the whole trail. A scrape used to read the
 * whole trail, twice per user series and twice per file system (8.3 s at a
 * million rows, holding the readers' connection); now the first scrape
 * after a start reads it once, in chunks that let other readers in, and
 * every later one reads what is new.
 *
 * Owns: the totals and the id of the last row read. Uses queue_audit_after.
 *
 * Must never: write to the queue; hold the readers' connection across
 * chunks.
 */
#ifndef STAGEHAND_AUDIT_TALLY_H
#define STAGEHAND_AUDIT_TALLY_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "queue.h"

/* Rows read in one go: the readers' connection is free between chunks. */
#define AUDIT_TALLY_CHUNK 20000

struct audit_user {
	int64_t uid;
	char *user;                  /* the greatest name seen for the uid; may be NULL */
	int64_t files, bytes;
};

struct audit_root {
	char *path;                  /* a ScratchRoots entry or the ArchiveRoot */
	int64_t read_files, read_bytes;       /* rows whose source is under it */
	int64_t written_files, written_bytes; /* rows whose destination is under it */
};

struct audit_tally {
	pthread_mutex_t lock;        /* held by the caller around update and reading */
	int64_t last_id;             /* the last audit row counted */
	int64_t rows_read;           /* rows read since created (each read once, unless the roots change) */
	struct audit_user *users;    /* sorted by uid */
	size_t nusers, capusers;
	struct audit_root *roots;
	int nroots;
};

struct audit_tally *audit_tally_new(void);
void audit_tally_free(struct audit_tally *t);

/*
 * Counts the audit rows after t->last_id into the totals, for these roots
 * (a list different from the last call's starts the count over: the new
 * roots' totals must cover the whole trail). Call with t->lock held.
 * Returns 0, or -1 with err (the totals then hold what was read before the
 * failure, and the next call goes on from there).
 */
int audit_tally_update(struct audit_tally *t, struct queue *q, char *const *roots, int nroots,
		       char *err, size_t errlen);

/* Whether path is root or under it, on whole components ("/" holds every absolute path). */
int audit_tally_under(const char *path, const char *root);

#endif /* STAGEHAND_AUDIT_TALLY_H */
