/*
 * slurm_after.h - judging '#DATA after=' in hold mode: may a held job go on,
 * now that it waits for other jobs' archives?
 *
 * Owns the rules of docs/directives.md, "Waiting for another job's
 * archive": which job a name means (a job, a whole array, one task), what
 * its state in slurmctld and its after-job transfers in the queue say, and
 * the text that tells the user. The watch (slurm_watch.c) acts on the
 * verdict: it keeps the job held, shows the text, stages and releases it.
 *
 * Everything is derived from slurmctld's job table and the queue on each
 * call, so a restart of the daemon loses nothing. Must never: change the
 * queue or a job, touch user files; ask slurmctld more than once per named
 * job that is missing from the table (lookup), and only then.
 */
#ifndef STAGEHAND_SLURM_AFTER_H
#define STAGEHAND_SLURM_AFTER_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "dsl.h"
#include "queue.h"
#include "slurm_jobs.h"

enum after_state {
	AFTER_DONE = 0,   /* every named job's after-job transfers are verified */
	AFTER_WAIT,       /* some job has not ended, or its archive is on its way */
	AFTER_FAILED,     /* an archive failed or will never come: stays held */
	AFTER_REFUSED,    /* a name the job may not wait for: stays held for good */
};

/* "done", "waiting", "failed", "refused" (static). */
const char *after_state_name(enum after_state s);

/*
 * One job as slurmctld sees it now (sjob_get's contract): 0 with *out
 * filled (free with sjob_clear), 1 unknown, -1 error (err filled).
 */
typedef int (*after_lookup_fn)(uint32_t job_id, struct sjob *out, char *err, size_t errlen);

/* slurmctld's view: the watch's last job table (jobs with a plan) and a lookup for others. */
struct after_view {
	const struct sjob *jobs;
	size_t n;
	after_lookup_fn lookup;
	time_t now;
};

/*
 * May dep (a pending job held by job_submit.lua) go on, given the n jobs
 * its plan's after= names? The verdict, with what to tell the user in text
 * (one line without the "stagehand: " prefix; empty for AFTER_DONE).
 */
enum after_state after_judge(struct queue *q, const struct after_view *v, const struct sjob *dep,
			     const struct dsl_after *list, size_t n, char *text, size_t textlen);

/* "4711:4712_3": the list as written, into out. Returns out. */
char *after_list_text(const struct dsl_after *list, size_t n, char *out, size_t outlen);

#endif /* STAGEHAND_SLURM_AFTER_H */
