/*
 * slurm_owner.h - whose job is it, on slurmctld's word, for many jobs at a
 * time and at a bounded cost: the ownership check of POST /v1/requests
 * (api/api_prep.h asks before the queue's writer takes the request).
 *
 * Owns: a cache of job id -> owner uid (a few seconds for "slurmctld does
 * not know it", longer for an owner: a job's uid never changes), filled
 * from slurm_load_job (SHOW_ALL: no detail is needed for an owner; every
 * task of an array comes back from one call and all are kept), or, when a
 * batch names more uncached jobs than SOWNER_SINGLE_MAX, from one
 * slurm_load_jobs for them all. So one batch costs slurmctld at most
 * SOWNER_SINGLE_MAX small calls or one table read, whatever it names.
 *
 * The state lives in the struct sowner the caller made (sowner_new) and
 * passes in: no file-scope state. Thread-safe (a mutex; lookups run
 * outside it).
 *
 * Must never: be called while holding the queue's lock (each call may
 * wait for slurmctld, up to libslurm's timeouts); take an owner from
 * anything but slurmctld's record; grow without bound (SOWNER_SLOTS).
 */
#ifndef STAGEHAND_SLURM_OWNER_H
#define STAGEHAND_SLURM_OWNER_H

#include <stddef.h>
#include <stdint.h>

#define SOWNER_SLOTS 16384       /* cached jobs (direct-mapped by job id) */
#define SOWNER_SINGLE_MAX 8      /* more uncached jobs than this: one table read */
#define SOWNER_TTL_MS 30000      /* a known owner */
#define SOWNER_NEG_TTL_MS 2000   /* "slurmctld does not know this job" */

#define SOWNER_UNKNOWN_JOB (-1)  /* slurmctld does not know the job */
#define SOWNER_ERROR (-2)        /* slurmctld did not answer: err says why */

struct sowner;

/* New cache (free with sowner_free), or NULL when out of memory. */
struct sowner *sowner_new(void);
void sowner_free(struct sowner *c);

/*
 * The owners of ids[0..n) into owners[0..n): a uid, SOWNER_UNKNOWN_JOB or
 * SOWNER_ERROR. ids may repeat. now_ms: a monotonic clock in ms. Returns
 * how many calls to slurmctld it made (0: all from the cache), or -1 with
 * err when slurmctld could not be asked (those owners SOWNER_ERROR).
 */
int sowner_lookup(struct sowner *c, const uint32_t *ids, size_t n, int64_t *owners,
		  int64_t now_ms, char *err, size_t errlen);

/* Calls to slurmctld made so far, and lookups answered from the cache (for /metrics and tests). */
void sowner_stats(struct sowner *c, unsigned long *calls, unsigned long *hits);

#endif
