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
 * The watch (slurm/) includes nothing of core/: it is handed a struct
 * slurm_watch_ctx and asks for a struct slurm_watch_request, both its own
 * (slurm_watch.h). The few lines below that fill the one from struct daemon
 * and turn the other into a struct lifecycle_request are the only code
 * here besides the tables.
 *
 * Must never: hold state or logic of its own; a function belongs to its
 * module, only the choice of who answers, and the translation between the
 * watch's types and core's, is made here.
 */
#include "config.h"

#include <stddef.h>

#include "daemon.h"
#include "history.h"
#include "lifecycle.h"
#include "pool.h"
#include "slurm_watch.h"
#include "worker.h"
#include "yield.h"

/* The watch's view of d, taken anew at each call: SIGHUP swaps d->conf. */
static struct slurm_watch_ctx _watch_ctx(struct daemon *d)
{
	return (struct slurm_watch_ctx){
		.conf = d->conf, .q = d->q, .drained = &d->drained, .core = d,
	};
}

static int _watch_init(struct daemon *d, char *err, size_t errlen)
{
	struct slurm_watch_ctx w = _watch_ctx(d);

	return slurm_watch_init(&w, err, errlen);
}

static void _watch_tick(struct daemon *d, int64_t now_ms)
{
	struct slurm_watch_ctx w = _watch_ctx(d);

	slurm_watch_tick(&w, now_ms);
}

static void _watch_fini(struct daemon *d)
{
	struct slurm_watch_ctx w = _watch_ctx(d);

	slurm_watch_fini(&w);
}

static const struct lifecycle_hook _slurm_watch_hook = {
	.name = "slurm",
	.period_ms = SLURM_WATCH_PERIOD_MS,
	.init = _watch_init,
	.tick = _watch_tick,
	.fini = _watch_fini,
};

static enum slurm_watch_end _watch_end_check(struct daemon *d,
					     const struct slurm_watch_end_event *e,
					     struct slurm_watch_end_word *out)
{
	struct slurm_watch_ctx w = _watch_ctx(d);

	return slurm_watch_end_check(&w, e, out);
}

/* A stage-in the watch wants, as core's request of the job's owner. */
static int _watch_create_request(struct daemon *d, const struct slurm_watch_request *r,
				 int64_t *id_out, char *err, size_t errlen)
{
	struct lifecycle_request lr = {
		.uid = r->uid, .gid = r->gid, .user = r->user, .job_id = r->job_id,
		.action = "stage_in", .source = r->source, .dest = r->dest,
		.options = r->options,
	};

	return lifecycle_create_request(d, &lr, id_out, err, errlen);
}

/* The order the main loop runs them in (lifecycle_tick), job-end first. */
const struct lifecycle_hook *const lifecycle_hooks[] = {
	&lifecycle_job_end_hook,
	&lifecycle_bundle_conf_hook,
	&_slurm_watch_hook,
	&yield_hook,
	&pool_hook,
	&history_hook,
	NULL,
};

const struct lifecycle_ops lifecycle_ops = {
	.end_check = _watch_end_check,
};

const struct slurm_watch_ops slurm_watch_ops = {
	.create_request = _watch_create_request,
	.job_rerun = lifecycle_job_rerun,
	.set_running = yield_set_running,
	.wake = daemon_wake,
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
