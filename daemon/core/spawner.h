/*
 * spawner.h - the worker spawner: a process forked from the daemon that
 * forks each worker, so that the daemon's main loop does not.
 *
 * Why: a fork of the daemon copies its 280 mappings and leaves every page
 * of its heap to be copied again at its next write; measured, that was half
 * of what bounded one request created per API call (docs/scaling.md, "A
 * spawner"). The spawner pays it in a process of its own, which holds the
 * daemon's memory as it was when the spawner was made: the configuration,
 * the global bucket and the buckets of the slots that existed then.
 *
 * Workers it makes are its children, not the daemon's: the daemon asks it
 * for their exit status (spawner_wait) instead of calling waitpid. A worker's
 * parent-death signal follows the spawner, whose own follows the daemon.
 *
 * Thread-safety: one caller at a time (the daemon's main loop).
 */
#ifndef STAGEHAND_SPAWNER_H
#define STAGEHAND_SPAWNER_H

#include <stdint.h>
#include <sys/types.h>

#include "daemon.h"
#include "queue.h"
#include "xfer.h"

struct spawner;

/*
 * A worker's work order: everything a worker is started with, built once by
 * the pool (worker_pool_start) and handed down whole to worker__child,
 * forked there or through the spawner. Borrowed pointers, all of them; the
 * child exits after the run.
 */
struct worker_order {
	const struct queue_request *r;
	const gid_t *groups;         /* the owner's supplementary groups */
	int ngroups;
	const struct xfer_endpoint *be;
	enum cksum_algo algo;
	int keep, idle;              /* keep=no archives; IOClass=idle */
	struct xfer_bucket *yb;      /* the slot's own bucket (NULL: the daemon's) */
	char *const *exclude;        /* NULL-terminated, or NULL */
	int64_t budget;              /* a stage-in's room in its job's burst buffer (-1: no limit) */
	/* A resume's state, in the pool's process only: a worker that has any
	   is forked there, never through the spawner (which sends none of it). */
	struct xfer_done_ent *done;	/* files an earlier attempt finished (the range pass marks them) */
	size_t ndone;
	const struct xfer_mpu_ent *mpu;	/* S3 multipart uploads earlier attempts began */
	size_t nmpu;
	const struct xfer_archive *arch;	/* a stage-in from an archive copy, or NULL */
};

/*
 * Fork the spawner now, from d as it is, holding the buckets of p's first
 * nslots slots (made before this call: a slot's bucket is made once and
 * kept, so the spawner's copy of that mapping stays the slot's). NULL with
 * errno on failure.
 */
struct spawner *spawner_start(struct daemon *d, int nslots);

/* 1 if s can start a worker for configuration generation gen (daemon.h) in this slot. */
int spawner_fits(const struct spawner *s, unsigned gen, int slot);

/*
 * Start a worker for a; chan is the worker's end of its record socket (the
 * caller keeps and closes its own copy). Its pid, or -1 with errno: E2BIG
 * (the request does not fit in one call), EMSGSIZE, ENOBUFS or ENOMEM (no
 * room to send it), the fork's own errno, or, when
 * the exchange itself failed, any other with the spawner broken
 * (spawner_broken) and taking no more workers. The caller then forks.
 */
pid_t spawner_spawn(struct spawner *s, const struct worker_order *a, int chan);

/*
 * Wait for worker pid of s to exit: 0 and *status as waitpid gives it, or
 * -1 with errno: the spawner is gone (spawner_broken: the worker died with
 * it), or, s whole, the call could not be sent (ENOBUFS, ENOMEM: wait again
 * later).
 */
int spawner_wait(struct spawner *s, pid_t pid, int *status);

/* 1 if s is whole and holds configuration generation gen (a reload makes it stale). */
int spawner_current(const struct spawner *s, unsigned gen);

/* Workers of s not waited for yet; 1 if s is broken. */
int spawner_live(const struct spawner *s);
int spawner_broken(const struct spawner *s);
pid_t spawner_pid(const struct spawner *s);

/* Close s and reap its process: killed when none of its workers is left (the
   callers' case), else left to end at its socket's close. */
void spawner_stop(struct spawner *s);

#endif /* STAGEHAND_SPAWNER_H */
