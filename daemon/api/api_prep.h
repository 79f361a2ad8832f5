/*
 * api_prep.h - the stage before the API's writer thread: whatever a change
 * needs from slurmctld is asked here, and whatever can be refused without
 * the queue's lock is refused here, so that the writer (which holds that
 * lock, and which every worker's progress, job start and job end waits
 * for) never waits for slurmctld (issue: the hostile user, item 3).
 *
 * Two lanes, each a thread of its own, so that one cannot wait behind the
 * other:
 *   - events: job-start and job-end events from root (whether a TCP peer is
 *     one of the job's nodes, slurm_nodes.h), and after the writer's
 *     commit a job-end's status text in the job's admin_comment. A
 *     job-start needs no queue work and is answered here alone, never by
 *     the writer: its wait for the main loop to pause transfers
 *     (yield_job_start_settle, up to YIELD_SETTLE_MS) is shared by the
 *     starts that arrive together, where the writer made each wait in turn
 *     and a burst of starts ran past the plugin's 300 ms;
 *   - requests: POST /v1/requests. The owners of the jobs a batch names
 *     are asked once per job per batch, through a cache (slurm_owner.h: a
 *     batch costs slurmctld at most a few small calls or one table read);
 *     the per-user limits and every entry's checks run on the queue's
 *     readers' connection. A batch refused here, at its first entry or its
 *     last, never reaches the writer. The lane takes users in turn (the
 *     oldest request of a user other than the last one served first), so a
 *     user's many connections of large batches delay another user's
 *     request by at most one batch.
 *
 * Owns: both lanes' queues and threads, and the owner cache. Its state is
 * the struct api_prep made by api_prep_start and passed to every call.
 * Must never: hold the queue's lock, answer a change the writer would have
 * made (it only refuses, or hands over), or leave a connection suspended
 * (api_prep_stop answers what waits).
 */
#ifndef STAGEHAND_API_PREP_H
#define STAGEHAND_API_PREP_H

#include <stddef.h>

#include "api_writer.h"

struct api_prep;

/* Start both lanes, handing on to w. NULL with err. */
struct api_prep *api_prep_start(struct daemon *d, struct api_writer *w, char *err,
				size_t errlen);

/* The lane of a change (0 events, 1 requests), or -1 when it goes straight to the writer. */
int api_prep_lane(const char *method, const char *url);

/*
 * Hand j (j->lane set) to its lane: suspends j->c (call it from
 * libmicrohttpd's access handler); the lane hands it to the writer or
 * answers it and resumes it. 0, or -1 if the stage is stopping (nothing
 * suspended: the caller goes on as without it).
 */
int api_prep_submit(struct api_prep *p, struct api_wjob *j);

/*
 * For api_writer_set_after: j, answered by the writer, has a status text to
 * set (j->order.status_job): the events lane sets it, then resumes j->c.
 * 0 taken, -1 stopping.
 */
int api_prep_after(void *p, struct api_wjob *j);

/* Requests waiting in each lane, and slurmctld calls / cache answers of the owner cache. */
void api_prep_stats(struct api_prep *p, unsigned long waiting[2], unsigned long *calls,
		    unsigned long *hits);

/* Answer what waits (503: shutting down; status texts are still set), stop, free. NULL is fine. */
void api_prep_stop(struct api_prep *p);

#endif
