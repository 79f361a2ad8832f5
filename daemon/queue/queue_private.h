/*
 * queue_private.h - shared by the queue module's files (queue.c,
 * queue_jobs.c, queue_audit.c, queue_labels.c, queue_shards.c) only: the
 * handle and the transaction helpers. Nothing outside the queue module
 * includes it.
 */
#ifndef STAGEHAND_QUEUE_PRIVATE_H
#define STAGEHAND_QUEUE_PRIVATE_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>

#define QP_CACHE_MAX 16

struct queue_new_request;

struct queue {
	sqlite3 *db;                 /* the writer's connection: every change, and reads inside one */
	pthread_mutex_t lock;        /* recursive: a batch holds it across nested calls */
	pthread_t owner;             /* the thread holding lock, while depth > 0 */
	int depth;                   /* lock's recursion depth (atomic: read by other threads) */
	/*
	 * The readers' connection (read-only; WAL lets it read the last commit
	 * while the writer's transaction or batch is open): qp_read of a thread
	 * that does not hold lock. So 'stagehand status' and the API's lists
	 * never wait for the main loop's batch writes. Its own lock (recursive: a
	 * list's callback may read again); taken before lock, never after.
	 */
	sqlite3 *rdb;
	pthread_mutex_t rlock;
	int batch;                   /* 1 while queue_batch_begin's transaction is open */
	int batch_durable;           /* a change in the batch asked for a FULL commit */
	struct {
		const char *sql;     /* key: the address of a string literal */
		sqlite3_stmt *st;
	} cache[QP_CACHE_MAX];       /* prepared statements of the per-file hot path */
};

void qp_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int64_t qp_now(void);
int qp_exec(struct queue *q, const char *sql, char *err, size_t errlen);
sqlite3_stmt *qp_prep(struct queue *q, const char *sql, char *err, size_t errlen);
/* Take / release the writer's lock (recursive), recording its owner. */
void qp_lock(struct queue *q);
void qp_unlock(struct queue *q);
/*
 * A read outside a transaction: prepares sql on the readers' connection
 * under its lock, or, in a thread that holds the writer's lock (inside its
 * own transaction or batch, so that it reads what it wrote), on the writer's
 * connection under that lock. NULL with err and the lock released. Finish
 * it with qp_read_end.
 */
sqlite3_stmt *qp_read(struct queue *q, const char *sql, char *err, size_t errlen);
/*
 * Ends a qp_read: rc is the last sqlite3_step's answer (SQLITE_ROW when the
 * caller stopped early), or -1 when the caller has put its own failure in
 * err. Reports any other step failure, finalizes st, unlocks. 0 or -1.
 */
int qp_read_end(struct queue *q, sqlite3_stmt *st, int rc, char *err, size_t errlen);
/* Steps once and finalizes st. */
int qp_step_done(struct queue *q, sqlite3_stmt *st, char *err, size_t errlen);
void qp_bind_text(sqlite3_stmt *st, int i, const char *s);
/* New string or NULL. */
char *qp_col_dup(sqlite3_stmt *st, int i);
/* Lock and BEGIN IMMEDIATE. */
void qp_begin(struct queue *q);
/* COMMIT (rc == 0, durable: with synchronous=FULL) or ROLLBACK; unlock. Returns rc. */
int qp_end(struct queue *q, int rc, int durable, char *err, size_t errlen);
int qp_item_state_from_name(const char *n);
/*
 * Insert nr as a queued request inside the caller's transaction (qp_begin),
 * not claimed before not_before (seconds; 0 or a past time = at once).
 * 0 with the new id in *id_out, or -1 with err.
 */
int qp_request_insert(struct queue *q, const struct queue_new_request *nr, int64_t not_before,
		      int64_t *id_out, char *err, size_t errlen);
/*
 * A prepared statement kept for the connection's life (sql must be a string
 * literal: its address is the key), reset and unbound. Never finalize it:
 * use qp_step_reset. NULL with err.
 */
sqlite3_stmt *qp_cached(struct queue *q, const char *sql, char *err, size_t errlen);
/* Steps once and resets a cached statement. 0 or -1. */
int qp_step_reset(struct queue *q, sqlite3_stmt *st, char *err, size_t errlen);

#endif
