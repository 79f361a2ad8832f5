/*
 * queue_history.h - what HistoryRetention and AuditRetention let go, removed
 * in transactions of bounded size (core/history.c calls these from the main
 * loop).
 *
 * HistoryRetention: a finished request's per-file rows (items, shards and
 * their file lists and ranges, multipart-upload records), once it finished
 * longer ago than that. The request's own row stays (its state, error and
 * totals, which status and the audit export show), and so does every row of
 * a done archive: its file rows are the record an archive staged back is
 * checked against (worker_archive.c). AuditRetention: audit rows whose copy
 * ended longer ago.
 *
 * Owns: those deletes; the requests' pruned column and the index that
 * finds finished, unpruned requests by age. Uses the queue's writer
 * connection and lock (queue_private.h). The input cleanup's counters do
 * not read a pruned purge's items (queue_cleanup.c keeps totals).
 *
 * Must never: touch a request that is not finished (queued, running,
 * verifying, failed_retryable), a done archive's rows, or the request rows
 * themselves; delete more rows in one transaction than it was given.
 */
#ifndef STAGEHAND_QUEUE_HISTORY_H
#define STAGEHAND_QUEUE_HISTORY_H

#include <stddef.h>
#include <stdint.h>

#include "queue.h"

/* What the prune calls removed, added to by each call. */
struct queue_pruned {
	int64_t requests;            /* finished requests whose file rows are all gone */
	int64_t rows;                /* their rows removed (items, shards, ...) */
	int64_t audit;               /* audit rows removed */
};

/*
 * Removes the per-file rows of requests that finished before `before`
 * (epoch seconds), oldest first, in one transaction of at most budget rows
 * (a request without rows counts as one). A request of a job whose end is
 * not processed yet waits: its stage_in's items are what the input cleanup
 * removes. Returns 1 when more may be left (call again), 0 when none is, -1
 * with err (nothing of this call kept).
 */
int queue_history_prune(struct queue *q, int64_t before, int budget, struct queue_pruned *done,
			char *err, size_t errlen);

/*
 * Removes audit rows whose copy ended before `before`, looking at the
 * budget oldest rows (by id) in one transaction. Returns 1 when some were
 * removed (call again), 0 when none of them was old enough, -1 with err.
 */
int queue_audit_prune(struct queue *q, int64_t before, int budget, struct queue_pruned *done,
		      char *err, size_t errlen);

#endif /* STAGEHAND_QUEUE_HISTORY_H */
