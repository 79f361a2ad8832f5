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

#endif /* STAGEHAND_SLURM_COMPAT_H */
