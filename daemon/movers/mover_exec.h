/*
 * mover_exec.h - the "mover" executor: a big request split into shards, each
 * shard a Slurm batch job of the request's owner on MoverPartition running
 * stagehand-mover, which fetches its shard and reports every file's result
 * over the API (api_mover.c).
 *
 * Owns: choosing which requests go to movers, their plan (mover_plan.c,
 * listed by planner threads so that no listing runs in the main loop),
 * submitting and following the mover jobs through libslurm (as root, the
 * job's uid/gid the owner's, a token of the shard's in its environment:
 * mover_auth.h), cancelling them, reading back what they recorded once
 * every shard is done (mover_verify.h, in the planner threads), and then
 * handing the request to a local worker for its final pass. That pass walks
 * the whole tree with every verified file in its resume set: it copies what
 * no shard held (symlinks, files that appeared after the plan), sets the
 * labels, and reports the request done.
 *
 * State lives in the queue (shards table), not here: a restarted daemon
 * adopts the shards and mover jobs of a request when it claims it again.
 *
 * Must never: record a file as done (only verified records do, through the
 * queue), or touch user files (the plan's listing runs as the owner).
 */
#ifndef STAGEHAND_MOVER_EXEC_H
#define STAGEHAND_MOVER_EXEC_H

#include <stdint.h>

#include "daemon.h"

struct mover_exec;

struct mover_exec *mover_exec_create(struct daemon *d);
/* Forgets the requests; their mover jobs go on and are adopted after a restart. */
void mover_exec_destroy(struct mover_exec *m);

/* Follow the mover jobs (about once a second): submit, requeue, cancel, finish. */
void mover_exec_tick(struct mover_exec *m, int64_t now_ms);

/* Requests now run by mover jobs. */
int mover_exec_active(const struct mover_exec *m);

struct mover_auth;
/* The mover jobs' tokens (mover_auth.h; borrowed, lives as long as m). NULL when m is. */
const struct mover_auth *mover_exec_auth(const struct mover_exec *m);

#endif /* STAGEHAND_MOVER_EXEC_H */
