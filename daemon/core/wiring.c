/*
 * wiring.c - who answers whom among lifecycle, the Slurm watch, the worker
 * pool and yield, and the order the main loop runs the hooks in.
 *
 * Those four modules ask things of each other: the job-end hook asks the
 * watch what slurmctld says of an ended job; the watch creates requests,
 * records reruns and tells yield which jobs run; a worker asks the watch
 * when its job should start and yield whether it must step aside; yield
 * pauses and throttles the pool's workers. None of them calls another: each
 * declares in its header the table of functions it needs (lifecycle_ops,
 * slurm_watch_ops, worker_ops, yield_ops) and this file, which knows them
 * all, fills the tables and lists the hooks. The calls go one way, from
 * here down, and each module reads against its own table.
 *
 * Why tables and not a queue of events that the main loop drains: the
 * answers are needed at once, within the same tick (the watch logs the id
 * of the request it just created; the job-end hook acts on
 * slurmctld's answer; yield reports how many workers it held back), and
 * every effect must happen at the moment and in the order it did when the
 * modules called each other directly. A call through a table is that same
 * call; a queued event would run later, in another order.
 *
 * Must never: hold state or logic of its own; a function belongs to its
 * module, only the choice of who answers is made here.
 */
#include "config.h"

#include <stddef.h>

#include "lifecycle.h"
#include "pool.h"
#include "slurm_watch.h"
#include "worker.h"
#include "yield.h"

/* The order the main loop runs them in (lifecycle_tick), job-end first. */
const struct lifecycle_hook *const lifecycle_hooks[] = {
	&lifecycle_job_end_hook,
	&lifecycle_bundle_conf_hook,
	&slurm_watch_hook,
	&yield_hook,
	&pool_hook,
	NULL,
};

const struct lifecycle_ops lifecycle_ops = {
	.end_check = slurm_watch_end_check,
};

const struct slurm_watch_ops slurm_watch_ops = {
	.create_request = lifecycle_create_request,
	.job_rerun = lifecycle_job_rerun,
	.set_running = yield_set_running,
};

const struct worker_ops worker_ops = {
	.expected_start = slurm_watch_expected_start,
	.after_job = yield_after_job,
	.request_affected = yield_request_affected,
};

const struct yield_ops yield_ops = {
	.pool_yield = worker_pool_yield,
	.pool_paused = worker_pool_paused,
};
