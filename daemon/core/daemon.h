/*
 * daemon.h - the context every stagehandd module shares.
 *
 * Owns nothing itself: it ties the configuration, the queue, the worker pool,
 * the API server and the metrics together so that modules (including the
 * Slurm lifecycle module, see lifecycle.h) get one pointer.
 */
#ifndef STAGEHAND_DAEMON_H
#define STAGEHAND_DAEMON_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>

#include "conf.h"

struct queue;
struct worker_pool;
struct mover_exec;
struct metrics;
struct api;
struct xfer_bucket;
struct metrics_http;
struct notify;

struct daemon {
	struct conf *conf;           /* current configuration; swapped on SIGHUP under conf_lock */
	pthread_rwlock_t conf_lock;  /* API thread reads conf under it; main loop writes */
	unsigned conf_gen;           /* reloads so far (a freed conf's address may come back) */
	const char *conf_path;       /* file given with -c (borrowed from argv) */
	struct queue *q;             /* the durable queue */
	struct worker_pool *pool;    /* transfer worker processes */
	struct mover_exec *movers;   /* requests run as Slurm mover jobs (mover_exec.h) */
	struct metrics *metrics;     /* counters for /metrics */
	struct api *api;             /* HTTP server */
	struct xfer_bucket *bucket;  /* shared bandwidth cap */
	struct metrics_http *mhttp;  /* MetricsAddress server; NULL = off */
	struct notify *notify;       /* NotifyCommand children (main loop only) */
	atomic_int draining;         /* 1 after SIGTERM: no new transfers */
	_Atomic int64_t drained;     /* 0, or since when (epoch s) an admin drained the daemon
					(stagehand drain; queue_drain.h holds why): no new
					transfers until resume, the rest goes on */
	int wake_fd;                 /* eventfd: write 1 to wake the main loop */
	time_t started;              /* for logs */
};

/* Wake the main loop (new request, cancel): safe from any thread. */
void daemon_wake(struct daemon *d);

#endif /* STAGEHAND_DAEMON_H */
