/*
 * yield.h - after-job transfers step aside while jobs compute.
 *
 * Owns: the set of "busy" file systems (those that hold a running job's
 * directories), the decision whether a transfer touches one, and telling the
 * worker pool to pause or throttle archive/stage_out workers accordingly
 * (YieldToJobs, YieldBandwidth, YieldMaxDelay, YieldTrickle). Stage-in is
 * never held back here: the job it feeds is waiting for it, not running
 * (under YieldMode=adaptive, worker.c paces a stage-in whose job is far
 * from its expected start, YieldStageInLead).
 *
 * Running jobs come from three places: slurmctld (slurm_watch.c hands over
 * each job's WorkDir, StdOut and StdErr every tick); job-start events (POST
 * /v1/jobs/{id}/start, sent by the SPANK plugin before the job's tasks run,
 * so a transfer steps aside from the job's first second, not the watch's
 * next tick); and, for tests and for sites without the Slurm watch, the
 * YieldProbe file: one absolute path per line, each treated as the
 * directory of a running job.
 *
 * The daemon's own mover jobs (MoverPartition) are never yielded to: they
 * are stagehand's transfers, not a user's computation. They are known by the
 * job ids the shards table recorded when the daemon submitted them (never by
 * their name, which a user may copy): the Slurm watch leaves their
 * directories out, and a job-start event of one is kept but marks nothing.
 *
 * A job-start event's paths stay busy until the first of: the job's end
 * event (or DELETE /v1/jobs/{id}/start), the Slurm watch no longer listing
 * the job's work directory among running jobs after it has listed it once,
 * a job table from a later second than the event that does not list the
 * job as running (it ended before the watch looked, and its end event was
 * lost: a job killed as it started), or YIELD_START_EXPIRY_S after the
 * event (a safety bound for a lost end where there is no Slurm watch).
 *
 * A path is mapped to a file system by prefix against the configured roots
 * (ScratchRoots, ArchiveRoot, StageInRoots); only those admin-configured
 * roots are stat()ed, for their st_dev. Must never: stat or open a path a
 * user chose (a job's WorkDir, a request's source) with root's identity.
 */
#ifndef STAGEHAND_YIELD_H
#define STAGEHAND_YIELD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "daemon.h"
#include "lifecycle.h"

struct queue_request;
struct worker_pool;
struct xfer_bucket;

extern const struct lifecycle_hook yield_hook;

/*
 * What yield's tick asks of the worker pool, through a table whose instance
 * core/wiring.c fills: yield.c calls no function of worker.c (the pool asks
 * yield_request_affected the same way, through worker_ops). Main thread.
 */
struct yield_ops {
	/* Pause, throttle or release each after-job worker; how many are held
	   back (worker_pool_yield). */
	int (*pool_yield)(struct worker_pool *p, int64_t now_ms);
	/* The buckets of the workers paused now, borrowed (worker_pool_paused). */
	int (*pool_paused)(const struct worker_pool *p, struct xfer_bucket **out, int max);
};
extern const struct yield_ops yield_ops;

/*
 * Replace the running jobs' paths from slurmctld; takes ownership of paths
 * (NULL-terminated, freed with sjob_free_paths-compatible free()s; may be
 * NULL). ids (borrowed, sorted, n of them) are every RUNNING job of the
 * same table, whose time (slurmctld's last change) is table_time; NULL when
 * not known. Main thread.
 */
void yield_set_running(struct daemon *d, char **paths, const uint32_t *ids, size_t nids,
		       time_t table_time);

/* A job-start event is answered once the paused transfers' I/O in flight
   has ended (none reported for YIELD_QUIET_MS), or after YIELD_SETTLE_MS. */
#define YIELD_QUIET_MS 60
#define YIELD_SETTLE_MS 300

/* Seconds a job-start event holds its paths when nothing ends it. */
#define YIELD_START_EXPIRY_S (24 * 3600)
#define YIELD_START_PATHS_MAX 32	/* paths kept per job-start event */
#define YIELD_STARTS_MAX 4096		/* job-start events kept at once */

/*
 * A job started on a node (API thread): mark its paths busy, have the main
 * loop apply it to the workers at once (daemon_wake), and return once the
 * paused transfers' I/O in flight has ended (bounded). *settled: 1 when the
 * main loop applied it and that I/O ended within YIELD_SETTLE_MS, 0 when
 * the bound ran out first. paths are copied; a repeat for the same job
 * replaces its paths. 0, 1 when the main loop found the job to be one of
 * the daemon's mover jobs (nothing yields to it), or -1 when the table is
 * full or out of memory (err says).
 */
int yield_job_start(struct daemon *d, int64_t job, const char *const *paths, size_t npaths,
		    int *settled, char *err, size_t errlen);

/*
 * yield_job_start in two halves, so that several starts arriving together
 * wait for one settling, not one each (api/api_prep.h): mark the job's
 * paths and wake the main loop (0 with *seq, or -1 as above), then wait as
 * yield_job_start does for that seq (the newest seq first: the others are
 * then applied already). settle returns 1 for a mover job, else 0.
 */
int yield_job_start_mark(struct daemon *d, int64_t job, const char *const *paths, size_t npaths,
			 unsigned *seq, char *err, size_t errlen);
int yield_job_start_settle(int64_t job, unsigned seq, int *settled);

/* The job ended (end event, or the start mark withdrawn): 1 if it was marked. */
int yield_job_end(struct daemon *d, int64_t job);

/* Number of jobs currently marked by start events, mover jobs left out (health). */
int yield_jobs_started(void);

/* 1 if request r should be held back now (after-job action on a busy file system). */
int yield_request_affected(struct daemon *d, const struct queue_request *r);

/* ---- pure helpers (unit-tested) ---- */

/* Index of the longest root that is path or a directory above it; -1 none. */
int yield_root_index(const char *path, char *const *roots, size_t nroots);

/*
 * Decide from root devices: devs[i] is the st_dev of roots[i] (0 = unknown),
 * busy[] the devices holding running jobs, unknown_busy 1 when a running
 * job's path matched no root. A transfer is affected when its source or
 * destination lies on a busy device; a local path under no root counts as
 * affected whenever anything is busy (the safe side: its file system is not
 * known).
 */
struct yield_view {
	char *const *roots;
	const dev_t *devs;
	size_t nroots;
	const dev_t *busy;
	size_t nbusy;
	int unknown_busy;
};
int yield_paths_affected(const struct yield_view *v, const char *source, const char *dest);

/*
 * The table of job-start events, pure (times are given; no locks, no I/O):
 * yield.c keeps one behind a mutex, the unit test its own.
 */
/* How long after a job-start event "not a mover job" is asked again. */
#define YIELD_MOVER_RECHECK_MS 60000

struct yield_start {
	int64_t job;
	int64_t expire_ms;	/* monotonic ms */
	int seen;		/* the Slurm watch listed its work directory */
	int mover;		/* -1 not asked yet; 1 the daemon's own mover job (never
				   yielded to), 0 a job of a user */
	int64_t recheck_ms;	/* monotonic ms: until then a 0 is asked again (a mover
				   job can start before its shard records its id) */
	time_t event_time;	/* wall clock of the (latest) event, in seconds */
	size_t npaths;
	char *paths[YIELD_START_PATHS_MAX];	/* paths[0] = work directory (or a dir) */
};
struct yield_starts {
	struct yield_start *v;
	size_t n, cap;
};
int yield_starts_add(struct yield_starts *t, int64_t job, const char *const *paths,
		     size_t npaths, int64_t expire_ms);
/* Entries that are not mover jobs (mover != 1). */
size_t yield_starts_users(const struct yield_starts *t);
int yield_starts_remove(struct yield_starts *t, int64_t job);
/* Drop the entries whose expire_ms <= now_ms; how many. */
size_t yield_starts_expire(struct yield_starts *t, int64_t now_ms);
/*
 * The Slurm watch's running paths (NULL-terminated; NULL = none run): an
 * entry whose paths[0] is listed is "seen"; a seen entry no longer listed is
 * dropped (the job ended). ids (sorted, nids; NULL = not known) are the
 * RUNNING jobs of a table whose last change is table_time: an entry never
 * seen whose job is not among them is dropped too once table_time is a
 * later second than its event (slurmctld marks a job RUNNING before its
 * tasks start, so such a table would list it if it still ran; seconds,
 * because that is the resolution of slurmctld's times). How many were
 * dropped.
 */
size_t yield_starts_watch(struct yield_starts *t, char *const *running, const uint32_t *ids,
			  size_t nids, time_t table_time);
void yield_starts_free(struct yield_starts *t);

/* 1 for the actions that run after the job (archive, stage_out). */
int yield_after_job(const char *action);

#endif /* STAGEHAND_YIELD_H */
