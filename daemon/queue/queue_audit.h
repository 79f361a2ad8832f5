/*
 * queue_audit.h - read-only queries on the audit trail (one row per verified
 * file) for the audit export (api_audit.c), the per-user and per-file-system
 * series of /metrics (metrics.c), and the notification log (notify.c).
 *
 * Owns: SQL on the audit, requests and notices tables. Uses the queue's
 * handle and lock (queue_private.h); the schema stays queue.c's.
 *
 * Must never: change a request, an item or an audit row; touch user files.
 */
#ifndef STAGEHAND_QUEUE_AUDIT_H
#define STAGEHAND_QUEUE_AUDIT_H

#include <stddef.h>
#include <stdint.h>

#include "queue.h"

enum queue_audit_by { QA_BY_JOB = 0, QA_BY_USER, QA_BY_FILE };

/* Which rows. */
struct queue_audit_filter {
	int64_t job_id;              /* 0 = any job */
	int64_t uid;                 /* -1 = any user */
	int64_t since;               /* epoch seconds: rows whose copy ended at or after; 0 = all */
	enum queue_audit_by by;
	int64_t limit;               /* at most this many rows */
};

/* One row; strings are borrowed for the callback. */
struct queue_audit_row {
	int64_t job_id;              /* 0 = no job (QA_BY_USER: number of jobs) */
	int64_t uid;
	const char *user;            /* the requests' user name; may be NULL */
	const char *action;          /* stage_in, archive, stage_out (QA_BY_JOB, QA_BY_FILE) */
	int64_t requests;            /* distinct requests (QA_BY_JOB, QA_BY_USER) */
	int64_t files;               /* verified files (1 for QA_BY_FILE) */
	int64_t bytes;
	int64_t first, last;         /* earliest start, latest end (epoch seconds) */
	const char *src, *dst;       /* QA_BY_FILE only */
	const char *checksum;        /* QA_BY_FILE only; may be NULL */
};

/*
 * Calls fn for each row of f (QA_BY_JOB: per job, user and action; QA_BY_USER:
 * per user; QA_BY_FILE: per file, oldest first); stops when fn returns
 * non-zero. fn runs with the queue locked: it must not call into the queue.
 * Returns the number of rows, or -1 with err.
 */
int queue_audit_rows(struct queue *q, const struct queue_audit_filter *f,
		     int (*fn)(const struct queue_audit_row *r, void *arg), void *arg,
		     char *err, size_t errlen);

/* One audit row as queue_audit_after reads it; strings borrowed for the callback. */
struct queue_audit_entry {
	int64_t id;                  /* ascending: rows are only ever added, never changed */
	int64_t uid;
	const char *user;            /* the request's user name; may be NULL */
	const char *src, *dst;
	int64_t bytes;
};

/*
 * Calls fn for each audit row whose id is above after, in id order, at
 * most limit of them (a range of the table's primary key: what was read
 * before is not read again); stops when fn returns non-zero. fn runs with
 * the readers' lock held: it must not call into the queue. Returns the
 * number of rows read, or -1 with err.
 */
int queue_audit_after(struct queue *q, int64_t after, int64_t limit,
		      int (*fn)(const struct queue_audit_entry *e, void *arg), void *arg,
		      char *err, size_t errlen);

/* A finished request whose outcome is not announced yet (notify.c). Strings borrowed. */
struct queue_notice {
	int64_t id, job_id, uid;
	const char *action;          /* archive, stage_in or stage_out */
	const char *user, *state, *source, *dest, *error;
	int64_t files, bytes;
};

/*
 * The oldest request that ended at or after since - an archive done or
 * failed_final, a stage_in or stage_out failed_final - whose outcome is
 * not in the notices table: record it and call fn
 * with it, in one transaction. fn must only copy what it needs (it runs with
 * the queue locked, before the commit); the caller acts after this returns
 * 1, so a crash loses at most one notice and never repeats one. Returns 1
 * (one taken), 0 (none) or -1 with err.
 */
int queue_notice_next(struct queue *q, int64_t since,
		      void (*fn)(const struct queue_notice *n, void *arg), void *arg,
		      char *err, size_t errlen);

#endif /* STAGEHAND_QUEUE_AUDIT_H */
