/*
 * queue_private.h - shared by the queue module's files (queue.c,
 * queue_jobs.c, queue_audit.c, queue_labels.c, queue_shards.c, ...) only: the
 * handle, the transaction helpers and the statement helpers (queue_stmt.c). Nothing outside the queue module
 * includes it.
 */
#ifndef STAGEHAND_QUEUE_PRIVATE_H
#define STAGEHAND_QUEUE_PRIVATE_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

/* Every statement the writer runs by a literal is prepared once (qp_execf,
   qp_cachedf, BEGIN and COMMIT): parsing SQL was 39% of the main loop's
   time per request claimed (docs/scaling.md). The queue has about 60, and
   about 30 reads that the writer's thread may run on its own connection
   (qp_read) are kept there too: room for both, with a margin. */
#define QP_CACHE_MAX 192

struct queue_new_request;

/*
 * A finished request whose rows may go and have not gone since it last
 * changed: the partial index's condition (migration 12), which the
 * history's select repeats word for word so that SQLite can use the index.
 * pruned holds the request's updated as it was when its rows went: a
 * request retried since is finished anew.
 */
#define PRUNABLE "(state IN ('failed_final','cancelled') OR (state='done' AND action!='archive'))" \
	" AND pruned < updated"
/* A purge in one of these states is over: its removed files are in cleanup_totals. */
#define PURGE_OVER "('done','failed_final','cancelled')"

/* A statement kept prepared; sql (the key) is the address of a string literal. */
struct qp_slot {
	const char *sql;
	sqlite3_stmt *st;
};

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
	struct qp_slot rcache[QP_CACHE_MAX];  /* the readers' statements, used under rlock */
	/*
	 * The bulk readers' connection (read-only, like rdb): reads that go
	 * through much of the history (the audit export, /metrics' totals), so
	 * that a scrape or an export never makes a user's status call wait for
	 * rlock. Its own lock, taken like rlock (before lock, never after; never
	 * together with rlock).
	 */
	sqlite3 *bdb;
	pthread_mutex_t block;
	struct qp_slot bcache[QP_CACHE_MAX];
	int batch;                   /* 1 while queue_batch_begin's transaction is open */
	int batch_durable;           /* a change in the batch asked for a FULL commit */
	struct qp_slot cache[QP_CACHE_MAX];   /* prepared statements, kept for the connection's life */
};

void qp_err(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
int64_t qp_now(void);
int qp_exec(struct queue *q, const char *sql, char *err, size_t errlen);
/* Applies the migrations q's database lacks (queue_schema.c); path names it in errors. */
int queue_schema_migrate(struct queue *q, const char *path, char *err, size_t errlen);
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
/* qp_read on the bulk readers' connection (the writer's, in its own transaction). */
sqlite3_stmt *qp_read_bulk(struct queue *q, const char *sql, char *err, size_t errlen);
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
/* 1 if sql is in the cache or there is room for it (qp_cached will not fail
   for want of a slot). */
int qp_cache_room(struct queue *q, const char *sql);
/* A statement with no parameters and no row (BEGIN, COMMIT, a PRAGMA) run
   from the cache; sql must be a literal. An SQLite result code. */
int qp_exec_cached(struct queue *q, const char *sql);
/* Steps once and resets a cached statement (or one stepped in a loop). 0 or -1. */
int qp_step_reset(struct queue *q, sqlite3_stmt *st, char *err, size_t errlen);

/*
 * Statements by format (queue_stmt.c). fmt has one letter per parameter,
 * ?1 first, and exactly as many letters as the statement has parameters
 * (its highest ?N); a mismatch or an unknown letter is an error:
 *   i  int
 *   I  int64_t
 *   P  int64_t, bound as NULL unless > 0 (an id or a time; 0 = none)
 *   U  int64_t, bound as NULL when < 0 (-1 = unknown: uid, gid, task id)
 *   d  double
 *   t  const char *, copied by SQLite; NULL is bound as NULL
 *   n  NULL (takes no argument)
 * The compiler cannot check the arguments against the letters: pass exactly
 * these types (an int for I or P is undefined behaviour; cast it).
 * All return 0 / a statement, or -1 / NULL with err.
 */
int qp_vbindf(sqlite3_stmt *st, char *err, size_t errlen, const char *fmt, va_list ap);
int qp_bindf(sqlite3_stmt *st, char *err, size_t errlen, const char *fmt, ...);
/*
 * A statement from qp_prep (QP_PREP: the caller finalizes it, qp_step_done),
 * qp_cached (QP_CACHED: the cache's, qp_step_reset, never finalize) or
 * qp_read (QP_READ: end it with qp_read_end), its parameters bound by fmt.
 * NULL with err, and then nothing is left open: a prepared statement is
 * finalized, a cached one unbound, a read ended (unlocked). Called as
 * qp_prepf, qp_cachedf and qp_readf.
 */
enum qp_from { QP_PREP, QP_CACHED, QP_READ, QP_BULK };
sqlite3_stmt *qp_stmtf(struct queue *q, enum qp_from from, const char *sql, char *err,
		       size_t errlen, const char *fmt, ...);
#define qp_prepf(q, sql, err, errlen, ...) qp_stmtf(q, QP_PREP, sql, err, errlen, __VA_ARGS__)
#define qp_cachedf(q, sql, err, errlen, ...) \
	qp_stmtf(q, QP_CACHED, sql, err, errlen, __VA_ARGS__)
#define qp_readf(q, sql, err, errlen, ...) qp_stmtf(q, QP_READ, sql, err, errlen, __VA_ARGS__)
#define qp_bulkf(q, sql, err, errlen, ...) qp_stmtf(q, QP_BULK, sql, err, errlen, __VA_ARGS__)
/* Bind, step once, reset: a change with no row to read, from the cache (sql
   must be a literal; prepared and finalized each time if the cache is full). */
int qp_execf(struct queue *q, const char *sql, char *err, size_t errlen, const char *fmt, ...);

/*
 * A row read into a struct by a column map: entry i reads column i into the
 * field at offset off, whose size (sizeof the field) must fit the type.
 */
enum qp_col_type {
	QC_SKIP,     /* not read */
	QC_INT,      /* int */
	QC_I64,      /* int64_t; NULL reads 0 */
	QC_I64N,     /* int64_t; NULL reads -1 */
	QC_ID,       /* uid_t or gid_t */
	QC_DOUBLE,   /* double */
	QC_STR,      /* char *: a new string (strdup), owned by the struct; NULL stays NULL */
	QC_BORROW,   /* const char *: borrowed from the row, valid until the next step,
			reset or finalize of the statement */
	QC_CHARS,    /* char[size]: the text copied; NULL reads ""; longer is an error */
};
struct qp_col {
	int type;        /* enum qp_col_type */
	size_t off;      /* offsetof(struct, field) */
	size_t size;     /* sizeof the field */
};
/* One entry of a map: type, the struct type and its field. */
#define QP_COL(type, s, field) { (type), offsetof(s, field), sizeof(((s *)0)->field) }
/*
 * Reads the current row of st into out by map (n entries). 0, or -1 with err
 * (a map that does not fit, out of memory, a QC_CHARS text too long); the
 * strings copied so far stay in out: free out as usual (calloc it first).
 */
int qp_row(sqlite3_stmt *st, const struct qp_col *map, int n, void *out, char *err,
	   size_t errlen);
#define QP_NCOLS(map) ((int)(sizeof(map) / sizeof((map)[0])))
/*
 * Frees the strings a map owns in out (its QC_STR fields), not out itself:
 * a struct's free is the map's strings and then the struct, so a string
 * field added to the map is freed with it.
 */
void qp_row_free(const struct qp_col *map, int n, void *out);

#endif
