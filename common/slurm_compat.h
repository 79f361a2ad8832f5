/* slurm_compat.h - the one place that knows which Slurm release we build
 * against.
 *
 * Every file that talks to Slurm includes this instead of <slurm/slurm.h>
 * (define SLURM_COMPAT_SPANK first for <slurm/spank.h>). What differs
 * between releases is settled here, so the rest of the tree is written once.
 *
 * Built and checked against (docs/admin-guide.md, "Slurm versions"):
 *   22.05  built and tested on the test bed (Debian 12's slurm-wlm)
 *   23.11, 24.05  built against their public headers only
 *   21.08  builds (C only; its Lua API was not checked)
 *
 * What we rely on, and where it was checked to be the same in 22.05, 23.11
 * and 24.05:
 *   libslurm  slurm_init/slurm_fini (new in 21.08: the floor below),
 *             slurm_load_job(s), slurm_update_job, slurm_init_job_desc_msg,
 *             slurm_load_node(_single), slurm_get_errno/slurm_strerror;
 *             job records (slurm_job_info_t): job_id, array_job_id,
 *             array_task_id, array_task_str, user_id, group_id, job_state
 *             with JOB_STATE_BASE and the JOB_COMPLETING / JOB_REQUEUE*
 *             / JOB_SPECIAL_EXIT flags, priority, exit_code, end_time, name,
 *             work_dir, comment, admin_comment, restart_cnt, batch_host,
 *             nodes; ESLURM_INVALID_JOB_ID.
 *   SPANK     S_JOB_ID, S_JOB_UID, S_JOB_GID, S_JOB_STEPID with
 *             SLURM_BATCH_SCRIPT, S_JOB_ENV, S_JOB_ARGV, S_JOB_ARRAY_ID,
 *             S_JOB_ARRAY_TASK_ID, S_JOB_SUPPLEMENTARY_GIDS,
 *             S_TASK_EXIT_STATUS; spank_getenv/spank_setenv; the contexts
 *             S_CTX_REMOTE and S_CTX_SLURMD.
 *   Lua       (lua/job_submit.lua; no C here) job_desc.script,
 *             job_desc.admin_comment, job_desc.priority, job_rec.job_id,
 *             job_rec.admin_comment, slurm.log_info/log_user; slurm.NO_VAL
 *             is missing from 22.05's table, so the script falls back to
 *             the number; ESLURM_JOB_HELD is returned by number for the
 *             same reason.
 *
 * Differences handled here:
 *   23.11  hostlist_t became the struct itself: slurm_hostlist_create()
 *          returns hostlist_t *, where earlier releases' hostlist_t was
 *          already the pointer. Use slurm_hostlist_ptr_t.
 *   24.11  slurm_get_errno() is gone: libslurm leaves its error code in
 *          errno, as it already did alongside the function. Use
 *          slurm_errno_now().
 *   26.05  (the release with sluids: slurm.h defines
 *          SLURM_STEP_ID_INITIALIZER) slurm_load_job() and slurm_kill_job()
 *          take a slurm_step_id_t, and a submit response carries the job id
 *          in step_id.job_id, as does a job descriptor for an update.
 *          Use slurm_compat_load_job(), slurm_compat_kill_job(),
 *          slurm_compat_submitted_id() and slurm_compat_desc_job_id(),
 *          which take and give plain job ids on every release.
 *
 * Must never: hold code that is not about a release difference, or pull in
 * Slurm's private headers (src/...): only what libslurm-dev installs.
 */
#ifndef STAGEHAND_SLURM_COMPAT_H
#define STAGEHAND_SLURM_COMPAT_H

#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
#ifdef SLURM_COMPAT_SPANK
#include <slurm/spank.h>
#endif

#if !defined(SLURM_VERSION_NUMBER) || !defined(SLURM_VERSION_NUM)
#error "slurm/slurm.h did not define SLURM_VERSION_NUMBER: is this Slurm's header?"
#endif

#if SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(21, 8, 0)
#error "stagehand needs Slurm 21.08 or later (slurm_init()); it is tested on 22.05"
#endif

/* A hostlist handle as slurm_hostlist_create() returns it. */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(23, 11, 0)
typedef hostlist_t *slurm_hostlist_ptr_t;
#else
typedef hostlist_t slurm_hostlist_ptr_t;
#endif

/* The error of the last failed libslurm call. */
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(24, 11, 0)
#include <errno.h>
#define slurm_errno_now() (errno)
#else
#define slurm_errno_now() slurm_get_errno()
#endif

/* One job by its plain id, and the id a batch submission got. */
#ifdef SLURM_STEP_ID_INITIALIZER
static inline slurm_step_id_t slurm_compat_job_step_id(uint32_t job_id)
{
	slurm_step_id_t id = SLURM_STEP_ID_INITIALIZER;

	id.job_id = job_id;
	return id;
}
#define slurm_compat_load_job(resp, job_id, flags) \
	slurm_load_job((resp), slurm_compat_job_step_id(job_id), (flags))
#define slurm_compat_kill_job(job_id, sig, flags) \
	slurm_kill_job(slurm_compat_job_step_id(job_id), (sig), (flags))
#define slurm_compat_submitted_id(resp) ((resp)->step_id.job_id)
/* The job a job_desc_msg_t (slurm_update_job) names, as an lvalue. */
#define slurm_compat_desc_job_id(desc) ((desc)->step_id.job_id)
#else
#define slurm_compat_load_job(resp, job_id, flags) slurm_load_job((resp), (job_id), (flags))
#define slurm_compat_kill_job(job_id, sig, flags) slurm_kill_job((job_id), (sig), (flags))
#define slurm_compat_submitted_id(resp) ((resp)->job_id)
#define slurm_compat_desc_job_id(desc) ((desc)->job_id)
#endif

#endif /* STAGEHAND_SLURM_COMPAT_H */
