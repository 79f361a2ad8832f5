/*
 * executor.h - where a claimed request runs: a table of executors chosen in
 * order, the first that takes the request runs it.
 *
 *   mover  (mover_exec.c) big requests, split into shards run as Slurm jobs
 *          of the owner on MoverPartition (stagehand-mover on each node)
 *   local  (worker.c)     a worker process on this host, as the owner
 *
 * Owns: the choice only. Each executor keeps its own state; the queue stays
 * the one record of what is done.
 */
#ifndef STAGEHAND_EXECUTOR_H
#define STAGEHAND_EXECUTOR_H

#include "daemon.h"
#include "queue.h"

struct executor {
	const char *name;
	/*
	 * Take a claimed (running) request. 1: taken (the executor owns r);
	 * 0: not for this executor (r untouched, the next one is asked);
	 * -1: taken and failed to start, stop claiming for this turn.
	 */
	int (*start)(struct daemon *d, struct queue_request *r);
};

extern const struct executor executor_mover;
extern const struct executor executor_local;

/* Run r with the first executor that takes it; owns r. 0, or -1 (stop claiming). */
int executor_start(struct daemon *d, struct queue_request *r);

#endif /* STAGEHAND_EXECUTOR_H */
