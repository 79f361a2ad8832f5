/*
 * queue_private.h - shared by queue.c and queue_jobs.c only: the handle and
 * the transaction helpers. Nothing outside the queue module includes it.
 */
#ifndef STAGEHAND_QUEUE_PRIVATE_H
#define STAGEHAND_QUEUE_PRIVATE_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>

struct queue {
	sqlite3 *db;
	pthread_mutex_t lock;
};

void qp_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int64_t qp_now(void);
int qp_exec(struct queue *q, const char *sql, char *err, size_t errlen);
sqlite3_stmt *qp_prep(struct queue *q, const char *sql, char *err, size_t errlen);
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

#endif
