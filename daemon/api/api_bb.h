/*
 * api_bb.h - the endpoints Slurm's burst_buffer/lua hooks reach through
 * `stagehand bb` (lua/stagehand_bb.lua): POST /v1/bb/JOB/{setup,data-in,
 * data-out,teardown}. docs/api.md, "Burst-buffer mode".
 */
#ifndef STAGEHAND_API_BB_H
#define STAGEHAND_API_BB_H

#include <jansson.h>
#include <stdint.h>

#include "api_private.h"

/*
 * One burst-buffer call for job: op is "setup", "data-in", "data-out" or
 * "teardown"; body the decoded JSON body (may be NULL): setup's
 * {"size":BYTES,"pool":NAME} is the size Slurm reserved for the job, which
 * the stage-in must fit (pool.h); teardown's {"hurry":true}. Root over the UNIX
 * socket only (slurmscriptd on this host). Called with conf_lock held (read);
 * returns at once: nothing here waits for a transfer.
 */
void api_bb(struct daemon *d, const struct api_caller *who, int64_t job, const char *op,
	    json_t *body, struct api_reply *out);

/*
 * Before the writer (api_prep.h): slurmctld's record of job, for the calls
 * that read it (setup, data-out, teardown), into who->order (job, job_rc,
 * job_err). api_bb then reads it there and never asks slurmctld on the
 * writer; data-in's status text is left in the order for after the commit.
 */
void api_bb_prepare(struct daemon *d, const struct api_caller *who, int64_t job, const char *op);

#endif /* STAGEHAND_API_BB_H */
