/*
 * queue.h - the durable queue: jobs, transfer requests, per-file items and
 * the audit trail, in one SQLite database (WAL).
 *
 * Owns: the schema (numbered migrations, queue_schema.c), every state change
 * (each one a transaction, checked against the state machine), crash
 * recovery, and counts for metrics. Thread-safe: one connection guarded by a
 * mutex, so the API thread and the main loop may both call it.
 *
 * Must never: touch user files (workers do, as the owner), or mark anything
 * done that a worker has not verified.
 *
 * Durability: synchronous=NORMAL for the high-rate progress writes (a crash of
 * the daemon loses nothing in WAL mode; a power loss may lose the last
 * progress commits, which only means a verified file is verified again), and
 * synchronous=FULL for every change a client was told about (new request,
 * job-end event, cancel, retry) so an acknowledged change survives power loss.
 */
#ifndef STAGEHAND_QUEUE_H
#define STAGEHAND_QUEUE_H

#include <stdint.h>
#include <sys/types.h>

enum queue_state {
	QS_QUEUED = 0,
	QS_RUNNING,
	QS_VERIFYING,
	QS_DONE,
	QS_FAILED_RETRYABLE,
	QS_FAILED_FINAL,
	QS_CANCELLED,
	QS_COUNT
};

/* Static name ("queued", ...), or "?" */
const char *queue_state_name(enum queue_state s);
/* Returns 0 and sets *out, or -1 for an unknown name. */
int queue_state_from_name(const char *name, enum queue_state *out);
/* 1 if the state machine allows from -> to. */
int queue_transition_ok(enum queue_state from, enum queue_state to);

struct queue;

/* A request as stored. Strings owned by the struct: free with queue_request_free. */
struct queue_request {
	int64_t id;
	uid_t uid;
	gid_t gid;
	char *user;
	int64_t job_id;             /* 0 = none */
	char *action;               /* stage_in, stage_out, archive, label */
	char *source;
	char *dest;                 /* NULL for label */
	char *options;              /* JSON object text, never NULL */
	enum queue_state state;
	int attempts;
	int max_retries;
	int64_t next_attempt_at;    /* 0 = none */
	char *error;                /* NULL = none */
	int64_t created, updated;
	int64_t bytes_total, bytes_done, files_total, files_done, files_skipped;
};

void queue_request_free(struct queue_request *r);

/* What a caller supplies to create a request (borrowed strings). */
struct queue_new_request {
	uid_t uid;
	gid_t gid;
	const char *user;
	int64_t job_id;             /* 0 = none */
	const char *action;
	const char *source;
	const char *dest;           /* may be NULL */
	const char *options;        /* JSON text or NULL for {} */
	int max_retries;
};

/* A job as stored. Strings owned: free with queue_job_free. */
struct queue_job {
	int64_t job_id;
	int64_t uid;                /* -1 = unknown */
	int64_t gid;                /* -1 = unknown */
	char *user, *work_dir, *plan;   /* NULL = unknown */
	char *hold_state;           /* free text for the Slurm module: none, held, released */
	char *end_state;            /* NULL until the job-end event */
	int end_exit_code;
	int64_t end_received;
	int end_processed;          /* 1 once after-job requests were created */
	int64_t created, updated;
	char *refused;              /* why the SPANK plugin refused the job at start
				       (its end event said so), or NULL */
	char *notes;                /* JSON array of after-job actions not done, each
				       {"line","action","path","reason"}, or NULL */
	int64_t array_job_id;       /* array tasks: the array's job id (%A); 0 = none, -1 = unknown */
	int64_t array_task_id;      /* array tasks: the task index (%a); -1 = none */
	int runs;                   /* earlier runs that ended in a requeue */
	char *last_run;             /* how the last requeued run ended ("NODE_FAIL, requeued"), or NULL */
};

void queue_job_free(struct queue_job *j);

/* Open (create, migrate) the database. NULL with a message in err. */
struct queue *queue_open(const char *path, char *err, size_t errlen);
void queue_close(struct queue *q);

/*
 * Crash recovery, run once at startup before any worker: requests and items
 * in running/verifying go back to queued. Counts are returned.
 */
int queue_recover(struct queue *q, int *nrequests, int *nitems, char *err, size_t errlen);

/*
 * Batch: the state changes this thread makes until queue_batch_end share one
 * transaction (each still all-or-nothing, as a savepoint), so a stream of
 * per-file records costs one commit instead of one each. The queue stays
 * locked for the batch: keep batches short (the worker pool bounds them).
 * The commit is FULL if any change inside asked for it. begin: 0, or -1
 * (then changes commit one by one as usual). end: 0 or -1 with err.
 */
int queue_batch_begin(struct queue *q);
int queue_batch_end(struct queue *q, char *err, size_t errlen);

/*
 * All or nothing: the changes this thread makes until queue_atomic_end are
 * kept together or none is (a savepoint), inside this thread's batch if one
 * is open, else in a transaction of their own, committed at the end (FULL if
 * a change asked for it). The queue stays locked meanwhile. begin: a token
 * for end (0 or 1), or -1 if no transaction could start. end: ok = 0 rolls
 * every change back; 0, or -1 with err (the commit failed: nothing kept).
 */
int queue_atomic_begin(struct queue *q);
int queue_atomic_end(struct queue *q, int token, int ok, char *err, size_t errlen);

/* ---- requests ---- */
int queue_request_create(struct queue *q, const struct queue_new_request *nr,
			 int64_t *id_out, char *err, size_t errlen);
/* 0 found (*out new), 1 not found, -1 error. */
int queue_request_get(struct queue *q, int64_t id, struct queue_request **out,
		      char *err, size_t errlen);

struct queue_filter {
	int64_t uid;                /* -1 = any */
	int64_t job_id;             /* 0 = any */
	int state;                  /* -1 = any, else enum queue_state */
	const char *action;         /* NULL = any */
	int limit;                  /* 0 = no limit */
	int64_t attention_since;    /* > 0: only what needs attention: unfinished requests
				       (queued, running, verifying) and those that failed
				       (failed_*) at or after this (epoch s); 0 = any */
	int64_t id_min, id_max;     /* > 0: only ids from id_min to id_max; 0 = any */
};
/*
 * Calls fn for each match, newest first; stops when fn returns non-zero.
 * fn runs with the queue locked: it must not call back into the queue.
 */
int queue_request_list(struct queue *q, const struct queue_filter *f,
		       int (*fn)(const struct queue_request *r, void *arg), void *arg,
		       char *err, size_t errlen);

/*
 * Claim the next runnable queued request, fairly: stage-in before after-job
 * copies (archive, stage_out); within that, the user with the fewest
 * requests running or verifying, then the user served longest ago (round
 * robin), then the oldest request. It becomes
 * running, attempts+1, its done counters are recomputed from verified
 * items. 0 claimed (*out new), 1 none runnable, -1 error.
 */
int queue_request_claim(struct queue *q, int64_t now, struct queue_request **out,
			char *err, size_t errlen);
/* The same; after_job_ok 0 skips archive and stage_out requests (ArchiveWorkers is full). */
int queue_request_claim_ex(struct queue *q, int64_t now, int after_job_ok,
			   struct queue_request **out, char *err, size_t errlen);

/*
 * Move a request to state to, if it is in from (from = -1: any state from
 * which the machine allows to). error may be NULL (clears it). Returns 0,
 * 1 if the state did not allow it (nothing changed), -1 on error.
 */
int queue_request_set_state(struct queue *q, int64_t id, int from, enum queue_state to,
			    const char *error, char *err, size_t errlen);

/* What failed, and whether it may be tried again (queue_request_fail). */
struct queue_failure {
	const char *error;	/* borrowed: the request's error text */
	int retryable;
	int backoff;		/* seconds before the first retry, doubled at each */
	int64_t now;
};
/*
 * A failed attempt. f->retryable and attempts <= max_retries:
 * failed_retryable with next_attempt_at = now + backoff * 2^(attempts-1);
 * else failed_final. *final_out tells which. Returns 0 or -1.
 */
int queue_request_fail(struct queue *q, int64_t id, const struct queue_failure *f,
		       int *final_out, char *err, size_t errlen);

/* failed_retryable requests whose time has come go back to queued. Returns how many, or -1. */
int queue_requeue_due(struct queue *q, int64_t now, char *err, size_t errlen);

/*
 * Drain checkpoint: a running/verifying request and its unfinished items go
 * back to queued, so the next start redoes them. 0, or -1.
 */
int queue_request_checkpoint(struct queue *q, int64_t id, char *err, size_t errlen);

/* Owner/admin retry: failed_* or cancelled -> queued, attempts reset. 0, 1 (state), -1. */
int queue_request_retry(struct queue *q, int64_t id, char *err, size_t errlen);

/* Totals after the walk. */
int queue_request_totals(struct queue *q, int64_t id, int64_t files_total,
			 int64_t bytes_total, int64_t files_skipped, char *err, size_t errlen);

/*
 * What one user has live (queued, running, verifying, failed_retryable):
 * requests, files not yet copied and bytes not yet copied, as their walks
 * counted them (0 for a request not walked yet). The per-user limits
 * (MaxUserRequests, MaxUserItems, MaxUserQueuedBytes) are checked against
 * it. Read through an index of live requests by uid: its cost grows with
 * that user's live requests only, which the limits bound. 0 or -1.
 */
struct queue_usage {
	int64_t requests, items, bytes;
};
int queue_user_usage(struct queue *q, uid_t uid, struct queue_usage *u, char *err, size_t errlen);

/* Count requests per state into counts[QS_COUNT]. */
int queue_count_states(struct queue *q, int64_t counts[QS_COUNT], char *err, size_t errlen);

/* ---- items (one per file, symlink or skipped entry of a request) ---- */
enum queue_item_state { QI_QUEUED = 0, QI_RUNNING, QI_VERIFYING, QI_DONE, QI_FAILED, QI_SKIPPED };
const char *queue_item_state_name(enum queue_item_state s);

/* An item's source metadata, as a transfer starts it. */
struct queue_item_meta {
	const char *relpath, *type;	/* borrowed */
	int64_t size, mtime_ns;
	int mode;
};
/* Insert or reset the item to running with its source metadata. */
int queue_item_start(struct queue *q, int64_t req, const struct queue_item_meta *m, char *err,
		     size_t errlen);
/* Copied (not verified yet): state verifying, checksum_src set. */
int queue_item_copied(struct queue *q, int64_t req, const char *relpath, const char *cks_src,
		      char *err, size_t errlen);
/*
 * Verified: item done, request bytes/files done advanced, audit row added
 * (at most once per request, destination and checksum), all in one
 * transaction.
 */
struct queue_audit {
	int64_t job_id;
	uid_t uid;
	const char *path_src, *path_dst, *checksum;
	int64_t bytes, started, ended;
};
int queue_item_done(struct queue *q, int64_t req, const char *relpath, const char *cks_dst,
		    const struct queue_audit *audit, char *err, size_t errlen);
/*
 * A file copied, durable and verified, reported in one step (the worker's
 * XR_ITEM_FILE): the item is created or updated straight to done with both
 * checksums (which must be equal), the request's counters advance (unless
 * it was done already) and the audit row is added, in one transaction.
 * f is a struct queue_file_done (below).
 */
struct queue_file_done;
int queue_item_file_done(struct queue *q, int64_t req, const struct queue_file_done *f,
			 char *err, size_t errlen);
/*
 * Several such files of one request at once (a mover's records): the same
 * rows as queue_item_file_done, each file in turn, in one transaction (a
 * savepoint inside a batch), and the request's counters advanced once for
 * them all. 0 when all are stored. A file whose checksums differ stops the
 * call: 1, the files before it stored (*stored says how many), it and those
 * after not, and err says which. -1 with err, and *stored = 0, when the
 * database fails.
 */
struct queue_file_done {
	const char *relpath, *cks_src, *cks_dst;
	int64_t size, mtime_ns;
	int mode;
	struct queue_audit audit;    /* its checksum is cks_dst's; no audit row if path_src is NULL */
};
int queue_items_files_done(struct queue *q, int64_t req, const struct queue_file_done *f, int n,
			   int *stored, char *err, size_t errlen);
/* failed or skipped with a message. */
int queue_item_finish(struct queue *q, int64_t req, const char *relpath, const char *type,
		      enum queue_item_state st, const char *error, char *err, size_t errlen);

struct queue_item {
	const char *relpath, *type, *checksum_src, *checksum_dst, *error;  /* borrowed */
	int64_t size, mtime_ns;
	int mode;
	enum queue_item_state state;
	int attempts;
};
/* Calls fn per item of req (state -1 = any), relpath order, up to limit (0 = all). */
int queue_item_list(struct queue *q, int64_t req, int state, int limit,
		    int (*fn)(const struct queue_item *it, void *arg), void *arg,
		    char *err, size_t errlen);
/*
 * The archive copy path lies in: of the done archive requests whose
 * destination is path or a directory above it, the newest of those with
 * the deepest destination. 1 with its id in *req and
 * its destination in *dest (new string, caller frees), 0 when path is in no
 * archive copy the daemon made, -1 with err.
 */
int queue_archive_of(struct queue *q, const char *path, int64_t *req, char **dest,
		     char *err, size_t errlen);

/* ---- jobs ---- */
/* What is known about a job: uid/gid -1 and NULL strings are "not known here". */
struct queue_job_rec {
	int64_t job_id;
	int64_t uid, gid;
	const char *user, *work_dir, *plan;	/* borrowed */
};
/* Create or update what is known about a job; what j does not know stays as stored. */
int queue_job_upsert(struct queue *q, const struct queue_job_rec *j, char *err, size_t errlen);
int queue_job_set_hold_state(struct queue *q, int64_t job_id, const char *hold_state,
			     char *err, size_t errlen);
/* 0 found (*out new), 1 not found, -1 error. */
int queue_job_get(struct queue *q, int64_t job_id, struct queue_job **out,
		  char *err, size_t errlen);

/* A job-end event: the job as in queue_job_upsert, how it ended, when it came. */
struct queue_job_end_rec {
	struct queue_job_rec job;
	const char *state;                   /* Slurm's: COMPLETED, FAILED, ... (borrowed) */
	int exit_code;
	const char *refused;                 /* the SPANK plugin refused the job at start: why
						(no after-job transfers are made); NULL: not */
	int64_t now;                         /* when the event came */
};
/* Store a job-end event once. *duplicate = 1 if one was stored before (nothing changes). */
int queue_job_end(struct queue *q, const struct queue_job_end_rec *e, int *duplicate, char *err,
		  size_t errlen);
/* Append one note (a JSON object, compact text) to the job's notes. */
int queue_job_add_note(struct queue *q, int64_t job_id, const char *note_json, char *err,
		       size_t errlen);
/*
 * Job ids whose hold_state is a or b and that have not ended (up to max, in
 * order): the jobs the Slurm watch asks slurmctld about one by one.
 */
int queue_jobs_in_hold(struct queue *q, const char *a, const char *b, int64_t *ids, int max,
		       char *err, size_t errlen);
/* Job ids with an end event whose requests are not created yet (up to max). */
int queue_job_ends_pending(struct queue *q, int64_t *ids, int max, char *err, size_t errlen);
int queue_job_end_processed(struct queue *q, int64_t job_id, char *err, size_t errlen);

/*
 * Summary of a job's stage_in requests: "none", "pending", "staging",
 * "ready" or "failed" (static string into *state), and the first error
 * (new string or NULL) for failed.
 */
int queue_job_stage_in(struct queue *q, int64_t job_id, const char **state, char **error,
		       char *err, size_t errlen);

/*
 * Record that job_id is task array_task_id of array array_job_id (Slurm's
 * %A and %a). Its stage_in state then also counts the array's shared
 * stage_in requests (those of job array_job_id with options.shared). 0 or -1.
 */
int queue_job_set_array(struct queue *q, int64_t job_id, int64_t array_job_id,
			int64_t array_task_id, char *err, size_t errlen);

/*
 * Run number runs of a job ended and slurmctld requeued the job: a stored
 * end event is cleared (the next run's end is stored as new); when runs is
 * more than the count stored, it is stored with how that run ended
 * (last_run). Nothing is archived for the run. 0 or -1.
 */
int queue_job_requeued(struct queue *q, int64_t job_id, int runs, const char *how, char *err,
		       size_t errlen);

/*
 * The job ran again after its end had been processed: 'scontrol requeue' of
 * an ended job, seen by the Slurm watcher while the job is pending or
 * running again, or after the rerun ended (its end event then came as a
 * duplicate and was dropped; end_state gives slurmctld's final state, else
 * NULL). In one transaction: the after-job requests made so far (archive,
 * stage_out, label, purge; not stage_in) are superseded: those unfinished
 * become cancelled with a reason naming the rerun, and none of them counts
 * for after= any more (queue_rerun_boundary); the job's notes are cleared;
 * the end is cleared, or replaced by end_state, so that the final run's end
 * is processed as new; runs and last_run are stored as queue_job_requeued
 * does. *cancelled gets how many were cancelled; *purge_labelled 1 when a
 * 'purge' label of the job's inputs was applied or under way (the inputs
 * are in use again: the caller relabels them). 0 or -1.
 */
struct queue_rerun {
	int runs;                            /* the job's runs that ended in a requeue */
	const char *how;                     /* why it ran again, for the cancelled ones' error */
	const char *end_state;               /* the end that replaces the stored one; NULL: none */
	int exit_code;
};
int queue_job_rerun(struct queue *q, int64_t job_id, const struct queue_rerun *rr, int *cancelled,
		    int *purge_labelled, char *err, size_t errlen);

/*
 * Burst-buffer teardown with hurry (an admin's 'scancel --hurry' skips
 * stage-out): the job's archives and stage-outs not finished yet (queued,
 * running, verifying, waiting to retry) become cancelled with why; those
 * failed for good stay failed. A worker under way sees the cancel as it
 * would a user's. *cancelled gets how many. 0 or -1.
 */
int queue_job_cancel_stage_out(struct queue *q, int64_t job_id, const char *why, int *cancelled,
			       char *err, size_t errlen);

/*
 * The highest request id of the job's runs superseded by a rerun
 * (queue_job_rerun), 0 when none: only its requests above it are the final
 * run's. >= 0, or -1 with err.
 */
int64_t queue_rerun_boundary(struct queue *q, int64_t job_id, char *err, size_t errlen);

/*
 * The schema's migrations (queue_schema.c): the newest one's number, and a
 * migration's name (NULL for a number not known). queue_open applies every
 * migration a database lacks.
 */
int queue_schema_latest(void);
const char *queue_schema_name(int id);

/* Correct the stored end state and exit code (slurmctld knows TIMEOUT, PREEMPTED, NODE_FAIL). 0 or -1. */
int queue_job_set_end_state(struct queue *q, int64_t job_id, const char *state, int exit_code,
			    char *err, size_t errlen);

/*
 * Has a user other than uid a request on job_id? 1 yes, 0 no, -1 with err.
 * Through the requests' job index: the job's own rows, read until one is
 * another user's.
 */
int queue_job_other_uid(struct queue *q, int64_t job_id, uid_t uid, char *err, size_t errlen);

/* Ids of a job's failed_* requests (up to max); returns the count or -1. */
int queue_job_failed_requests(struct queue *q, int64_t job_id, int64_t *ids, int max,
			      char *err, size_t errlen);

#endif /* STAGEHAND_QUEUE_H */
