/*
 * slurm_watch.h - the hook that stages inputs of jobs held at submit time
 * and releases them (see slurm_watch.c).
 *
 * The watch includes nothing of core/. What it reads of the daemon comes in
 * a struct slurm_watch_ctx that core fills at every call (core/wiring.c
 * turns the main loop's hook calls into slurm_watch_init/tick/fini); what it
 * asks of core (create a request, record a job's rerun, tell yield which
 * jobs run, wake the main loop) goes through slurm_watch_ops, a table whose
 * type is declared here and whose one instance core/wiring.c fills with
 * core's functions. A stage-in it wants is a struct slurm_watch_request,
 * which core turns into one of its own requests. Same calls, made at the
 * same moments with the same answers.
 */
#ifndef STAGEHAND_SLURM_WATCH_H
#define STAGEHAND_SLURM_WATCH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

struct conf;
struct daemon;
struct queue;

/*
 * What the watch sees of the daemon, filled by core anew at every call
 * (SIGHUP swaps the configuration between two calls). Borrowed; valid for
 * the call only.
 */
struct slurm_watch_ctx {
	const struct conf *conf;     /* the current configuration: the watch runs in the main
					thread, its only writer, and reads it without its lock */
	struct queue *q;             /* the durable queue */
	_Atomic int64_t *drained;    /* 0, or since when an admin drained the daemon; read
					at each use (the API thread sets it) */
	struct daemon *core;         /* core's context, opaque here: handed back to every
					function of slurm_watch_ops, never read */
};

/* A stage-in the watch wants created for a job. Borrowed strings. */
struct slurm_watch_request {
	uid_t uid;                   /* the job's owner */
	gid_t gid;
	const char *user;            /* the owner's name */
	int64_t job_id;              /* the job's id, or its array's for a shared stage-in */
	const char *source;
	const char *dest;
	const char *options;         /* JSON object text or NULL */
};

/*
 * The hook's three steps, called by the main loop through core (a hook of
 * core/wiring.c's lifecycle_hooks): init at startup (-1 with err stops it),
 * tick every SLURM_WATCH_PERIOD_MS (SlurmWatchInterval gates the job list
 * itself), fini at shutdown. Main thread.
 */
#define SLURM_WATCH_PERIOD_MS 250
int slurm_watch_init(const struct slurm_watch_ctx *w, char *err, size_t errlen);
void slurm_watch_tick(const struct slurm_watch_ctx *w, int64_t now_ms);
void slurm_watch_fini(const struct slurm_watch_ctx *w);

/* What the watch asks of core, called from its tick (main thread); core is
   slurm_watch_ctx.core. */
struct slurm_watch_ops {
	/* Check r as a stage_in request, store it as queued, wake the main loop;
	   the new id in *id_out. 0 or -1 with err (lifecycle_create_request). */
	int (*create_request)(struct daemon *core, const struct slurm_watch_request *r,
			      int64_t *id_out, char *err, size_t errlen);
	/* The job ran again after its end was processed (lifecycle_job_rerun). */
	int (*job_rerun)(struct daemon *core, int64_t job_id, int runs, const char *how,
			 const char *end_state, int exit_code, char *err, size_t errlen);
	/* The running jobs' paths, owned by the callee (yield_set_running). */
	void (*set_running)(struct daemon *core, char **paths, const uint32_t *ids, size_t nids,
			    time_t table_time);
	/* Wake the main loop (daemon_wake). */
	void (*wake)(struct daemon *core);
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

/* A job-end event as the job-end hook asks slurmctld about it. */
struct slurm_watch_end_event {
	int64_t job_id;
	const char *event_state;     /* what the event said (borrowed) */
	int64_t received;            /* when it arrived */
	int want_plan;               /* the job has no plan: take slurmctld's record's */
};

/* slurmctld's word on it. */
struct slurm_watch_end_word {
	char state[32];              /* SW_END_FINAL: its state name (TIMEOUT, PREEMPTED, ...) */
	int exit_code;               /* SW_END_FINAL: its exit code */
	int restarts;                /* its requeue count */
	int64_t array_job_id, array_task_id;  /* -1: not an array task */
	char *plan;                  /* want_plan: the plan job_submit.lua recorded in
					slurmctld's record, its patterns expanded (new: free
					it); NULL when slurmctld did not answer or the job has
					none (an end reported by Epilog= alone carries none) */
};

/*
 * Ask slurmctld about e->job_id at the moment its end event is processed
 * (one RPC), its answer into *out. For a requeued job the status text in
 * admin_comment says so. While slurmctld cannot be reached the answer is
 * SW_END_WAIT, for up to 10 minutes after e->received, then
 * SW_END_UNKNOWN. Main thread (the job-end hook): the RPC may block for
 * libslurm's timeouts.
 */
enum slurm_watch_end slurm_watch_end_check(const struct slurm_watch_ctx *w,
					   const struct slurm_watch_end_event *e,
					   struct slurm_watch_end_word *out);

/*
 * When the scheduler expects job_id to start, from the watch's last job
 * table (no RPC): seconds since the epoch for a pending job that is not
 * held (burst-buffer mode stages such a job in as soon as it has an
 * estimate, which may be hours ahead); 0 when there is none (held, running,
 * not in the table, slurmctld unreachable, SlurmWatch=no). Main thread.
 */
time_t slurm_watch_expected_start(int64_t job_id);

/*
 * A job-start event named the node job_id's run started on (any thread).
 * Kept for the newest 4,096 starts: a job slurmctld requeues before the
 * watch saw it RUNNING (its node lost at once) is reported lost with that
 * node, once slurmctld confirms the node is down. A name that is not a
 * plain node name ([A-Za-z0-9._-], under 64) is ignored.
 */
void slurm_watch_job_started(int64_t job_id, const char *node);

/*
 * Burst-buffer mode: slurmctld asked to stage job_id out and no end event
 * of it has come (any thread). The watch reads the job with the jobs it
 * stages for the next 30 s, so a run lost with its node (no end event:
 * NODE_FAIL, requeued) is seen at the next tick, not the next whole table.
 */
void slurm_watch_follow(int64_t job_id);

#endif /* STAGEHAND_SLURM_WATCH_H */
