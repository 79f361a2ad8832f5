/*
 * slurm_watch.h - the lifecycle hook that stages inputs of jobs held at
 * submit time and releases them (see slurm_watch.c).
 *
 * The watch calls no function of core/: what it asks of core (create a
 * request, record a job's rerun, tell yield which jobs run) goes through
 * slurm_watch_ops, a table whose type is declared here and whose one
 * instance core/wiring.c fills with core's functions. Same calls, made at
 * the same moments with the same answers, but slurm/ depends on core/ only
 * for the types of lifecycle.h, not for its code.
 */
#ifndef STAGEHAND_SLURM_WATCH_H
#define STAGEHAND_SLURM_WATCH_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

struct daemon;
struct lifecycle_hook;
struct lifecycle_request;

extern const struct lifecycle_hook slurm_watch_hook;

/* What the watch asks of core, called from its tick (main thread). */
struct slurm_watch_ops {
	/* Check, store as queued, wake the main loop; the new id in *id_out.
	   0 or -1 with err (lifecycle_create_request). */
	int (*create_request)(struct daemon *d, const struct lifecycle_request *lr,
			      int64_t *id_out, char *err, size_t errlen);
	/* The job ran again after its end was processed (lifecycle_job_rerun). */
	int (*job_rerun)(struct daemon *d, int64_t job_id, int runs, const char *how,
			 const char *end_state, int exit_code, char *err, size_t errlen);
	/* The running jobs' paths, owned by the callee (yield_set_running). */
	void (*set_running)(struct daemon *d, char **paths, const uint32_t *ids, size_t nids,
			    time_t table_time);
};
/* Defined in core/wiring.c. */
extern const struct slurm_watch_ops slurm_watch_ops;

/* What slurmctld says about a job whose end event is about to be processed. */
enum slurm_watch_end {
	SW_END_UNKNOWN = 0,  /* not watching Slurm, or slurmctld does not know/answer: trust the event */
	SW_END_FINAL,        /* ended for good: *state is slurmctld's final state */
	SW_END_REQUEUED,     /* this run ended but the job was requeued: archive after the final run */
	SW_END_WAIT,         /* slurmctld still sees it running: ask again (the event may be
				from an earlier run, or slurmctld has not heard of the end yet) */
};

/*
 * Ask slurmctld about job_id at the moment its end event is processed (one
 * RPC). state (at least 32 bytes) gets slurmctld's state name (TIMEOUT,
 * PREEMPTED, NODE_FAIL, ...) and *exit_code its exit code (both for
 * SW_END_FINAL); *restarts its requeue count; *array_job_id and
 * *array_task_id (-1 when not an array task) the task's array. For a
 * requeued job the status text in admin_comment says so. received: when the
 * event arrived; while slurmctld cannot be reached the answer is
 * SW_END_WAIT, for up to 10 minutes after it, then SW_END_UNKNOWN. plan:
 * NULL, or where to put the plan job_submit.lua recorded in slurmctld's
 * record, its patterns expanded (a new string: free it), NULL when slurmctld
 * did not answer or the job has none; an end reported by Epilog= alone
 * carries no plan. Main thread (the job-end hook): the RPC may block for
 * libslurm's timeouts.
 */
enum slurm_watch_end slurm_watch_end_check(struct daemon *d, int64_t job_id,
					   const char *event_state, char *state,
					   size_t statelen, int *exit_code, int *restarts,
					   int64_t *array_job_id, int64_t *array_task_id,
					   int64_t received, char **plan);

/*
 * When the scheduler expects job_id to start, from the watch's last job
 * table (no RPC): seconds since the epoch for a pending job that is not
 * held (burst-buffer mode stages such a job in as soon as it has an
 * estimate, which may be hours ahead); 0 when there is none (held, running,
 * not in the table, slurmctld unreachable, SlurmWatch=no). Main thread.
 */
time_t slurm_watch_expected_start(int64_t job_id);

#endif /* STAGEHAND_SLURM_WATCH_H */
