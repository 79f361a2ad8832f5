/*
 * queue_after.h - the queue's side of '#DATA after=' (hold mode): what a
 * held job's wait for other jobs' archives came to, and the after-job
 * transfers of a job it waits for.
 *
 * Owns the after_waits table (one row per job held by after=: the jobs it
 * names, the verdict and why; 'stagehand status' shows it). The verdict is
 * slurm_after.c's; the rows only keep it across restarts and for the API.
 *
 * Must never: decide anything, or touch user files.
 */
#ifndef STAGEHAND_QUEUE_AFTER_H
#define STAGEHAND_QUEUE_AFTER_H

#include <stddef.h>
#include <stdint.h>

#include "queue.h"

/*
 * Record job's wait: jobs as written ("4711:4712_3"), state (waiting, done,
 * failed, refused) and reason. *changed (may be NULL) is 1 when state or
 * reason differ from what was stored. 0 or -1.
 */
int queue_after_set(struct queue *q, int64_t job_id, const char *jobs, const char *state,
		    const char *reason, int *changed, char *err, size_t errlen);

/* 0 with new strings (caller frees), 1 when the job waits for nothing, -1 with err. */
int queue_after_get(struct queue *q, int64_t job_id, char **jobs, char **state, char **reason,
		    char *err, size_t errlen);

/*
 * A job's after-job transfers: its archive and stage_out requests, and the
 * label requests that stand for archives in label mode (options without a
 * policy; a skipped archive's 'skipped' label and input labels do not count),
 * of the job's final run: those of a run superseded by a rerun
 * (queue_job_rerun) do not count.
 */
struct queue_after_sum {
	int total, done, active, failed;  /* failed: failed_final or cancelled */
	int retrying;                     /* failed_retryable (counted in active too) */
	int64_t files_done, files_total;
	char *error;                      /* first error of a failed (or retrying) one; new or NULL */
};
/* Only the requests of uid (the job's owner) count: another user's request
   naming the job must never hold or release its dependents. */
int queue_after_transfers(struct queue *q, int64_t job_id, int64_t uid,
			  struct queue_after_sum *s, char *err, size_t errlen);

/*
 * Job ids the jobs table knows as tasks of array array_job_id (task_id -1:
 * every task; else that task only), up to max, in task order. n or -1.
 */
int queue_after_tasks(struct queue *q, int64_t array_job_id, int64_t task_id, int64_t *ids,
		      int max, char *err, size_t errlen);

#endif /* STAGEHAND_QUEUE_AFTER_H */
