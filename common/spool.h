/*
 * spool.h - job-end events: their body, the end-state rule, their delivery
 * to stagehandd, and the spool of those that could not be delivered. Used
 * by the SPANK plugin and by `stagehand job-end` (the epilog), so the event
 * format and the rule exist once.
 *
 * Owns: the spool directory format shared by the plugin and the epilog:
 * one file per job, <spool>/job-<id>.json, holding
 *   {"version":1,"job_id":<id>,"event":{<body of POST /v1/jobs/<id>/end>}}
 * written atomically (temp file, fsync, rename, fsync of the directory),
 * mode 0600 in a 0700 directory owned by root. Files the daemon rejects, or
 * that cannot be read, are renamed to bad-job-<id>.json for an admin.
 * Must never: follow a symlink in the spool, block past its deadline, or
 * delete an event that was not accepted.
 */
#ifndef STAGEHAND_SPOOL_H
#define STAGEHAND_SPOOL_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#include "dclient.h"

#define SPOOL_MAX_FILE (1024u * 1024u)

/*
 * The end-state rule. slurm_state when it is a final Slurm state
 * (COMPLETED, FAILED, CANCELLED, TIMEOUT, NODE_FAIL, PREEMPTED,
 * OUT_OF_MEMORY, BOOT_FAIL, DEADLINE); otherwise (NULL, or COMPLETING while
 * an epilog runs) from how the batch script ended: nothing known ->
 * UNKNOWN; killed by SIGTERM, SIGKILL, SIGINT or SIGHUP -> CANCELLED
 * (scancel and the time limit end the script that way); exit 0 ->
 * COMPLETED; anything else -> FAILED. Returns a static string.
 */
const char *jobend_state(const char *slurm_state, bool have_exit, int exit_code, int sig);

/* What is known about a job that ended, for jobend_event(). */
struct jobend_info {
	const char *slurm_state;   /* Slurm's state name, or NULL (see jobend_state) */
	bool have_exit;            /* exit_code and sig are known */
	int exit_code;             /* the batch script's exit code */
	int sig;                   /* the signal that ended it, 0 = none */
	long long uid, gid;        /* job owner, -1 = unknown */
	const char *user;          /* owner's name, NULL = unknown */
	const char *work_dir;      /* absolute working directory, NULL = unknown */
	const char *node;          /* this node's name, NULL = unknown */
	const char *source;        /* "spank" or "epilog" */
	const char *sluid;         /* Slurm's SLUID of the run (SLURM_JOB_SLUID, 25.11+), NULL = none */
	json_t *plan;              /* borrowed normalised plan, NULL = the daemon's copy */
};

/*
 * The body of POST /v1/jobs/<id>/end (docs/api.md) for ji. Returns a new
 * reference, or NULL when out of memory.
 */
json_t *jobend_event(const struct jobend_info *ji);

/* Outcome of sending one event. */
enum spool_send {
	SPOOL_SENT = 0,        /* accepted (2xx or 409 already known) */
	SPOOL_RETRY = 1,       /* daemon down, slow or busy: keep the event */
	SPOOL_REJECTED = 2,    /* the daemon refused it (4xx): retrying won't help */
};

struct spool_stats {
	int delivered;     /* spooled events accepted and removed */
	int rejected;      /* moved aside as bad-job-*.json */
	int left;          /* still spooled when we stopped (lower bound) */
	bool daemon_down;  /* stopped because the daemon did not answer */
};

/*
 * POST event (borrowed) to /v1/jobs/<job_id>/end at the daemon t within
 * timeout_ms. Returns a spool_send; err says why when not SPOOL_SENT.
 */
enum spool_send spool_send_event(const struct dclient_target *t, unsigned long job_id,
				 const json_t *event, int timeout_ms,
				 char *err, size_t errlen);

/*
 * Make sure dir exists, is a real directory owned by the caller's euid and
 * private (0700; a looser mode on our own directory is tightened). The
 * parent must exist. Returns 0 or -1 with err.
 */
int spool_prepare_dir(const char *dir, char *err, size_t errlen);

/*
 * Atomically store event (borrowed) for job_id, replacing an older event of
 * the same job. Returns 0 or -1 with err.
 */
int spool_write(const char *dir, unsigned long job_id, const json_t *event,
		char *err, size_t errlen);

/*
 * Read and check one spool file. Returns a new reference to the event
 * object and sets *job_id, or NULL with err.
 */
json_t *spool_read(const char *dir, const char *name, unsigned long *job_id,
		   char *err, size_t errlen);

/* How much of the spool one delivery may take. */
struct spool_budget {
	int max;                     /* events at most */
	int timeout_ms;              /* each event's exchange */
	int total_ms;                /* the whole delivery */
};

/*
 * Deliver up to b->max spooled events, oldest job first, each within
 * b->timeout_ms, stopping at the first sign that the daemon is down or slow
 * and at b->total_ms overall. Messages for the log go through warn (may be
 * NULL). Returns 0, or -1 if the spool could not be read (err).
 */
int spool_deliver(const char *dir, const struct dclient_target *t, const struct spool_budget *b,
		  struct spool_stats *st, void (*warn)(const char *msg), char *err, size_t errlen);

/*
 * Rename <dir>/job-<id>.json to bad-job-<id>.json (removing it if that
 * fails) and report why through warn (may be NULL).
 */
void spool_set_aside(const char *dir, unsigned long id,
		     void (*warn)(const char *msg), const char *why);

#endif /* STAGEHAND_SPOOL_H */
