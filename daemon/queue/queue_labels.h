/*
 * queue_labels.h - the queries behind label verification (api_labels.c):
 * which requests ever worked on a directory, and what the audit trail holds
 * for a request.
 *
 * Owns: read-only SQL on the queue's requests and audit tables. Uses the
 * queue's handle and lock (queue_private.h); the schema stays queue.c's.
 *
 * Must never: change the database, or touch user files.
 */
#ifndef STAGEHAND_QUEUE_LABELS_H
#define STAGEHAND_QUEUE_LABELS_H

#include <stdint.h>
#include <sys/types.h>

#include "queue.h"

/* One request that names a directory as its source. Strings borrowed for the callback. */
struct queue_label_req {
	int64_t id;
	int64_t job_id;             /* 0 = none */
	int64_t uid;
	const char *action;         /* stage_in, stage_out, archive, label */
	const char *dest;           /* NULL for label */
	const char *error;          /* NULL = none */
	enum queue_state state;
	int64_t updated;
	int64_t files_total;
};

/*
 * Calls fn for every request whose source is exactly source (newest first),
 * up to 256 of them; stops when fn returns non-zero. fn runs with the queue
 * locked: it must not call back into the queue. Returns 0 or -1 with err.
 */
int queue_label_requests(struct queue *q, const char *source,
			 int (*fn)(const struct queue_label_req *r, void *arg), void *arg,
			 char *err, size_t errlen);

/*
 * The verified files of request id and their bytes, into *rows and *bytes:
 * its audit rows, or, once AuditRetention has removed them all, its file
 * rows in state done (a done archive keeps those: queue_history.h).
 * Returns 0 or -1 with err.
 */
int queue_label_audit(struct queue *q, int64_t id, int64_t *rows, int64_t *bytes,
		      char *err, size_t errlen);

#endif /* STAGEHAND_QUEUE_LABELS_H */
