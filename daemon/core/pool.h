/*
 * pool.h - burst-buffer pools, the daemon's side (SubmitMode=bb with
 * PoolCapacity): what each pool can really give, and each job's size kept.
 *
 * Owns:
 *   * the pool state file, pools.json beside SocketPath: for each scratch
 *     root, quantity = PoolCapacity and free = min(PoolCapacity, what
 *     statvfs says is free + what staged inputs of jobs not torn down hold),
 *     rewritten every few seconds; slurm_bb_pools (lua/stagehand_bb.lua)
 *     reads it, because it runs inside slurmctld and may not ask anyone;
 *   * the check that a job's stage-in fits the size Slurm reserved for it.
 * Must never: open a user path (statvfs is on the scratch roots, the admin's
 * directories), or block the main loop for longer than a statvfs.
 */
#ifndef STAGEHAND_POOL_H
#define STAGEHAND_POOL_H

#include <stddef.h>

#include "daemon.h"
#include "lifecycle.h"
#include "queue.h"

extern const struct lifecycle_hook pool_hook;

/*
 * After the worker counted request r's source (its totals are in the
 * queue): 1 when r is a stage_in of a job whose inputs, summed over its
 * stage_in requests, now exceed the size Slurm reserved for it, with why
 * saying so (job, line, declared and needed bytes, what to do); else 0.
 */
#define POOL_OVER_TEXT "does not fit the job's burst buffer"
int pool_over_capacity(struct daemon *d, const struct queue_request *r, char *why,
		       size_t whylen);

/*
 * Before request r's worker starts: the bytes its source may hold, what is
 * left of its job's reserved size after the job's other stage_in sources as
 * counted so far; -1 when there is no limit (not a stage_in, no capacity=).
 */
int64_t pool_stage_in_budget(struct daemon *d, const struct queue_request *r);

/* The pool state file's path for conf c (dirname of SocketPath + "/pools.json"). 0 or -1. */
int pool_state_path(const struct conf *c, char *out, size_t outlen);

#endif /* STAGEHAND_POOL_H */
