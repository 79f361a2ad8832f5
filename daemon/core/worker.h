/*
 * worker.h - transfer worker processes, daemon side.
 *
 * Owns: forking one worker per running request, the worker's change of
 * identity to the request's owner (supplementary groups, gid, uid - in that
 * order, checked), reading its record stream, and applying each record to
 * the queue. The daemon alone writes the database; a worker alone touches
 * user files.
 *
 * Must never: open a user path in the daemon process; leave a request
 * "running" after its worker is gone.
 */
#ifndef STAGEHAND_WORKER_H
#define STAGEHAND_WORKER_H

#include <poll.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "daemon.h"
#include "queue.h"

struct worker_pool;

/*
 * What the pool asks of the Slurm watch and of yield, through a table whose
 * instance core/wiring.c fills: worker.c calls neither module (yield calls
 * the pool, the same way, through yield_ops). Main thread.
 */
struct worker_ops {
	/* When the scheduler expects job_id to start; 0 none (slurm_watch_expected_start). */
	time_t (*expected_start)(int64_t job_id);
	/* 1 for the actions that run after the job (yield_after_job). */
	int (*after_job)(const char *action);
	/* 1 if r is held back now (yield_request_affected). */
	int (*request_affected)(struct daemon *d, const struct queue_request *r);
};
extern const struct worker_ops worker_ops;

struct worker_pool *worker_pool_create(struct daemon *d);
/* Kills (SIGKILL) and reaps any worker left; use after draining. */
void worker_pool_destroy(struct worker_pool *p);

int worker_pool_busy(const struct worker_pool *p);
/* Workers running after-job transfers (archive, stage_out): capped by ArchiveWorkers. */
int worker_pool_busy_after_job(const struct worker_pool *p);

/*
 * Pause, throttle or release each after-job worker as yield.h decides
 * (YieldBandwidth, YieldMaxDelay, YieldTrickle). Returns how many are held back.
 */
int worker_pool_yield(struct worker_pool *p, int64_t now_ms);
/* The buckets of the workers paused now (borrowed: they live as long as the pool). */
int worker_pool_paused(const struct worker_pool *p, struct xfer_bucket **out, int max);

/* Start a worker for a claimed (running) request; takes ownership of r. 0 or -1. */
int worker_pool_start(struct worker_pool *p, struct queue_request *r);

/* Fill pollfds with the workers' channels; returns how many. */
int worker_pool_pollfds(const struct worker_pool *p, struct pollfd *fds, int max);
/* Read what the workers sent, reap the finished ones, settle their requests. */
void worker_pool_service(struct worker_pool *p, const struct pollfd *fds, int n);

/* SIGTERM the worker of request id (cancel). Returns 1 if one was running. */
int worker_pool_cancel(struct worker_pool *p, int64_t id);

/* Stop the workers whose requests were cancelled through the API. */
void worker_pool_check_cancelled(struct worker_pool *p);

/*
 * Drain deadline passed: stop every worker; their requests go back to
 * queued (checkpoint) once they are reaped.
 */
void worker_pool_stop_all(struct worker_pool *p);

/*
 * In a child about to touch user files: become uid/gid with groups
 * (supplementary groups, gid, uid - in that order), each id checked after,
 * and no way back to root. 0, or -1 with errno.
 */
int worker_become(uid_t uid, gid_t gid, const gid_t *groups, int ngroups);
/* uid's groups (gid first) into groups[*ngroups]; just gid when unknown. Before fork. */
void worker_groups(uid_t uid, gid_t gid, gid_t *groups, int *ngroups);

#endif /* STAGEHAND_WORKER_H */
