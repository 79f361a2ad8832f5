/*
 * queue_sluid.h - the SLUID of each job's run (Slurm 25.11 and later).
 *
 * Owns: the sluid_runs table: for each job id, every SLUID (Slurm's unique
 * id of a run, "s" and base-32 digits, SLURM_JOB_SLUID) an end event has
 * named, in the order they came; the last is the job's current run. A job
 * id names several runs after requeues (each gets a new SLUID) and, when
 * slurmctld's ids wrap or its state is lost, several jobs; the SLUID tells
 * an end event of the current run from a late one of an earlier run.
 *
 * Must never: decide what an end event means (lifecycle does); the table is
 * empty on Slurm releases without SLUIDs, and nothing else depends on it.
 */
#ifndef STAGEHAND_QUEUE_SLUID_H
#define STAGEHAND_QUEUE_SLUID_H

#include <ctype.h>
#include <stddef.h>
#include <stdint.h>

struct queue;

/* Longest SLUID accepted ("s" and 13 base-32 digits today), without the NUL. */
#define QUEUE_SLUID_MAX 32

/*
 * 1 if s looks like a SLUID: 1 to QUEUE_SLUID_MAX letters and digits.
 * Inline: the API's decoder checks it without the queue (and its fuzzer
 * links no queue).
 */
static inline int queue_sluid_valid(const char *s)
{
	size_t n = 0;

	if (!s)
		return 0;
	for (; s[n]; n++)
		if (n >= QUEUE_SLUID_MAX || !isalnum((unsigned char)s[n]))
			return 0;
	return n > 0;
}

/* What queue_job_sluid_record found. */
enum queue_sluid_seen {
	QS_SLUID_CURRENT = 0,  /* the current run's (first event, or a repeat) */
	QS_SLUID_NEW = 1,      /* a SLUID not seen before: now the current run (a
				  requeued run, or another job that had the id) */
	QS_SLUID_EARLIER = 2,  /* an earlier run's: its end was already taken */
};

/*
 * Record sluid as job_id's current run unless an earlier run had it. The
 * result, or -1 with err; for QS_SLUID_NEW and QS_SLUID_EARLIER, known
 * holds the run that was current ("" if none).
 */
int queue_job_sluid_record(struct queue *q, int64_t job_id, const char *sluid, char *known,
			   size_t knownlen, char *err, size_t errlen);

/* job_id's current run's SLUID into out, "" when none. 0 or -1 with err. */
int queue_job_sluid_get(struct queue *q, int64_t job_id, char *out, size_t outlen, char *err,
			size_t errlen);

#endif /* STAGEHAND_QUEUE_SLUID_H */
