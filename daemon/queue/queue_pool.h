/*
 * queue_pool.h - burst-buffer sizes in the queue (SubmitMode=bb): the size
 * Slurm reserved for a job in its pool (setup's bb_size, from the job's
 * '#DATA capacity=' line), what its stage_in sources hold as the workers
 * counted them, and what staged inputs still occupy each pool.
 *
 * Owns the bb_pool table. Must never: decide anything (pool.c and api_bb.c
 * do), or be read by anything but the daemon.
 */
#ifndef STAGEHAND_QUEUE_POOL_H
#define STAGEHAND_QUEUE_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "queue.h"

/* Record job's reserved size (bytes > 0) in pool at setup; a second setup overwrites. 0 or -1. */
int queue_pool_set(struct queue *q, int64_t job, const char *pool, int64_t size, char *err,
		   size_t errlen);

/*
 * The job's reserved size: 1 with *size and *pool (new string, caller frees;
 * may be NULL), 0 when the job has none (no capacity= line), -1 with err.
 */
int queue_pool_get(struct queue *q, int64_t job, int64_t *size, char **pool, char *err,
		   size_t errlen);

/*
 * What the job's stage_in sources hold as counted so far (bytes_total of its
 * stage_in requests that are not cancelled), and how many of them are
 * counted (*counted) out of *requests. 0 or -1.
 */
int queue_pool_need(struct queue *q, int64_t job, int64_t *bytes, int *counted, int *requests,
		    char *err, size_t errlen);

/* teardown came: the job's inputs no longer count as held by the pool. 0 or -1. */
int queue_pool_torn_down(struct queue *q, int64_t job, char *err, size_t errlen);

/* Bytes staged into pool for jobs set up and not torn down yet. 0 or -1. */
int queue_pool_held(struct queue *q, const char *pool, int64_t *bytes, char *err,
		    size_t errlen);

#endif /* STAGEHAND_QUEUE_POOL_H */
