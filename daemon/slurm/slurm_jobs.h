/*
 * slurm_jobs.h - what stagehandd needs from slurmctld, through libslurm.
 *
 * Owns: listing jobs that carry a stagehand plan (recorded at submit time by
 * lua/stagehand.lua in the job's admin_comment), and the two changes the
 * daemon makes to a job: its status text (progress/failure, kept in
 * admin_comment as "stagehand:status=TEXT", shown by scontrol show job and
 * squeue -O admin_comment; the user's own comment is never touched) and its
 * release (priority INFINITE). The hold itself is set at submit time.
 *
 * Identity comes from here: uid, gid and work_dir are slurmctld's record of
 * the job, never a client's word. Must never: block for long (every call is
 * one RPC to slurmctld with libslurm's own timeouts), touch user data.
 */
#ifndef STAGEHAND_SLURM_JOBS_H
#define STAGEHAND_SLURM_JOBS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>

#include "record.h"

/* The record in admin_comment is read through common/record.h alone. */
#define SJOB_PLAN_PREFIX RECORD_PLAN_PREFIX
#define SJOB_STATUS_MARK RECORD_STATUS_MARK

/* One job as slurmctld sees it. Strings are owned by the array. */
struct sjob {
	uint32_t job_id;
	uint32_t array_job_id;   /* 0 if not an array task */
	uint32_t array_task_id;  /* NO_VAL if not an array task */
	uid_t uid;
	gid_t gid;
	uint32_t state;          /* JOB_* base state (state & JOB_STATE_BASE) */
	uint32_t priority;       /* 0 = held */
	uint32_t reason;         /* state_reason (enum job_state_reason): a held job's
				    WAIT_HELD_USER is job_submit.lua's hold (or the
				    user's), WAIT_HELD an administrator's */
	bool completing;         /* ended, but epilogs still run on its nodes */
	int exit_code;           /* batch script exit code (WEXITSTATUS), or 128+signal */
	time_t end_time;         /* 0 while it has not ended */
	time_t start_time;       /* PENDING and not held: when the scheduler expects it
				    to start (0: no estimate); else 0 */
	char *name;              /* job name */
	char *work_dir;
	char *status;            /* the daemon's status text in admin_comment, or NULL */
	char *admin_comment;     /* the whole admin_comment (site text, status, record) */
	char *plan_json;         /* text after SJOB_PLAN_PREFIX, or NULL */
	bool hold_pending;       /* the record says stagehand:hold=pending before its
				    plan (record_hold_pending; a path in the plan that
				    spells it does not count): held by job_submit.lua
				    until its inputs are staged */
	char *array_tasks;       /* a pending array's meta record (array_task_id NO_VAL):
				    the task ids still in it ("1-8%4", "3,5-8"); else NULL */
	unsigned restarts;       /* how often slurmctld requeued the job */
	bool requeue;            /* being requeued (JOB_REQUEUE* flag while completing) */
	char *batch_host;        /* node of the batch script (RUNNING jobs), or NULL */
	bool ran;                /* the job was given nodes (a job cancelled while
				    pending never was: its archive never comes) */
};

/* Is j the meta record of a pending array (its tasks have no job ids yet)? */
#define SJOB_NO_TASK 0xfffffffeu  /* Slurm's NO_VAL */
#define SJOB_IS_ARRAY_META(j) ((j)->array_job_id != 0 && (j)->array_task_id == SJOB_NO_TASK)

/*
 * Task ids of an array_task_str ("1-8%4", "0,3,5-9:2"): up to max of them
 * into out, in order. Returns the count (0 for an empty or bad string).
 */
size_t sjob_array_tasks(const char *spec, uint32_t *out, size_t max);

/* Initialise libslurm (reads SLURM_CONF). Call once at startup. */
void sjob_init(void);
void sjob_fini(void);

/*
 * All jobs that carry a stagehand plan, in any state slurmctld still
 * remembers. *out is a new array of *n jobs; free with sjob_free.
 * Returns 0, or -1 with err filled (slurmctld unreachable, ...).
 */
int sjob_list(struct sjob **out, size_t *n, char *err, size_t errlen);

/*
 * The same, and when running is not NULL also the directories of every
 * RUNNING job (with or without a plan): its WorkDir, StdOut and StdErr, as a
 * new NULL-terminated list (free with sjob_free_paths; NULL when none). The
 * paths are slurmctld's record, never stat()ed by the daemon: the yield
 * module maps them to file systems by prefix against the configured roots.
 */
int sjob_list_ex(struct sjob **out, size_t *n, char ***running, char *err, size_t errlen);
/* qsort/bsearch order of job ids (uint32_t), as run_ids is sorted. */
int sjob_id_cmp(const void *a, const void *b);

/* Job ids (sjob_list_since's running ones): ids[0..n), sorted; free(ids). */
struct sjob_ids {
	uint32_t *ids;
	size_t n;
};

/* A filter of running jobs: fn(job_id, arg) non-zero leaves that job out. */
struct sjob_skip {
	int (*fn)(uint32_t job_id, void *arg);
	void *arg;
};

/*
 * sjob_list_ex, asking slurmctld only for a table changed since *since
 * (0: always the table). Returns 0 with the lists and *since set to the
 * table's time, 1 when nothing changed since *since (nothing returned:
 * keep the last lists), -1 with err. skip (may be NULL) leaves a running
 * job's directories out of *running (the daemon's own mover jobs).
 * run (may be NULL) gets the ids of every RUNNING job, mover jobs
 * included.
 */
int sjob_list_since(time_t *since, struct sjob **out, size_t *n, char ***running,
		    struct sjob_ids *run, const struct sjob_skip *skip, char *err, size_t errlen);
void sjob_free_paths(char **paths);

void sjob_free(struct sjob *jobs, size_t n);
void sjob_clear(struct sjob *job);

/* Is state a terminal one (COMPLETED, CANCELLED, FAILED, TIMEOUT, ...)? */
bool sjob_state_is_final(uint32_t state);
/* "PENDING", "RUNNING", ... - static string. */
const char *sjob_state_name(uint32_t state);

/*
 * The admin_comment cur with its status text replaced by text (printable,
 * one line, "stagehand:" written "stagehand ", a leading "stagehand: "
 * left out): site text, hold marker and plan are kept as they are. Into
 * out (outlen bytes). 0, or -1 when it does not fit (out then holds
 * nothing usable).
 */
int sjob_status_record(const char *cur, const char *text, char *out, size_t outlen);

/*
 * Set the job's status text: reads its admin_comment now (one RPC, so a
 * release that just rewrote the hold marker is kept) and writes it back with
 * the new text (a second RPC). 0 or -1 with err.
 */
int sjob_set_status(uint32_t job_id, const char *text, char *err, size_t errlen);
/*
 * Release (priority INFINITE) a job stagehand holds: the scheduler may start
 * it. Reads the job again first (one RPC) and releases it only while it is
 * PENDING, its record says stagehand:hold=pending before the plan, and it is
 * held the way job_submit.lua holds it (priority 0, reason JobHeldUser); an
 * administrator's hold (JobHeldAdmin) or a job that is not held is never
 * touched. Returns 0 released, 1 declined (why says so, for the log), -1
 * error (err filled).
 */
int sjob_release(uint32_t job_id, char *why, size_t whylen, char *err, size_t errlen);
/*
 * Is j held by stagehand (see sjob_release)? true, or false with why filled
 * ("held by an administrator (JobHeldAdmin)", ...).
 */
bool sjob_held_by_us(const struct sjob *j, char *why, size_t whylen);

/*
 * Split task task_id off the pending meta record of array array_job_id by
 * setting its status text (slurmctld gives a task its own job id when it is
 * updated alone; it keeps priority and hold). meta_admin_comment: the meta
 * record's admin_comment, which the task keeps with the new status. 0 or -1.
 */
int sjob_split_task(uint32_t array_job_id, uint32_t task_id, const char *meta_admin_comment,
		    const char *text, char *err, size_t errlen);

/* Is node down or not responding? 1 yes, 0 no, -1 unknown (err filled). */
int sjob_node_down(const char *node, char *err, size_t errlen);

/*
 * One job as slurmctld sees it now, plan or not. 0 (*out filled; free with
 * sjob_clear), 1 slurmctld does not know the job, -1 error (err filled).
 */
int sjob_get(uint32_t job_id, struct sjob *out, char *err, size_t errlen);

#endif /* STAGEHAND_SLURM_JOBS_H */
