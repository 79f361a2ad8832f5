/*
 * lifecycle.h - where job life meets the queue: the hook table called from
 * the main loop, and the internal API a module uses to create and inspect a
 * job's transfers.
 *
 * Owns: checking a transfer request against the site's roots (the same
 * checks for API submissions and module-made requests), turning a stored
 * job-end event into after-job requests (archive, stage_out) per
 * docs/directives.md, and running the registered hooks.
 *
 * Adding a module: write a `struct lifecycle_hook` with init/tick/fini, add
 * its address to `lifecycle_hooks[]` in core/wiring.c. A module outside
 * core/ (the Slurm watch, which finds held jobs, stages them and releases
 * them) takes no type of core/: wiring.c's hook hands it a context of its
 * own (struct slurm_watch_ctx). tick runs in the
 * main thread every period_ms (never faster than the loop's 200 ms turn);
 * it may call everything in queue.h and the functions below, and must not
 * block for long (the main loop also reads worker progress).
 *
 * Must never: touch user files (requests are carried out by workers as the
 * owner), or trust a uid from anywhere but Slurm, the kernel or MUNGE.
 */
#ifndef STAGEHAND_LIFECYCLE_H
#define STAGEHAND_LIFECYCLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon.h"
#include "slurm_watch.h"

struct lifecycle_hook {
	const char *name;
	int period_ms;                                     /* tick interval */
	int (*init)(struct daemon *d, char *err, size_t errlen);  /* NULL = none; -1 stops startup */
	void (*tick)(struct daemon *d, int64_t now_ms);
	void (*fini)(struct daemon *d);                    /* NULL = none */
};

/* NULL-terminated, in the order they run; core/wiring.c lists them, the
   built-in job-end hook first. */
extern const struct lifecycle_hook *const lifecycle_hooks[];
/* The built-in hooks: a stored job end into after-job requests, the Bundle*
   settings for the workers to inherit. */
extern const struct lifecycle_hook lifecycle_job_end_hook;
extern const struct lifecycle_hook lifecycle_bundle_conf_hook;

/* What the job-end hook asks of the Slurm watch; the instance is in core/wiring.c. */
struct lifecycle_ops {
	/* slurmctld's word on a job whose end is processed (slurm_watch_end_check). */
	enum slurm_watch_end (*end_check)(struct daemon *d, const struct slurm_watch_end_event *e,
					  struct slurm_watch_end_word *out);
};
extern const struct lifecycle_ops lifecycle_ops;

int lifecycle_init(struct daemon *d, char *err, size_t errlen);
/* Run the hooks that are due. */
void lifecycle_tick(struct daemon *d, int64_t now_ms);
void lifecycle_fini(struct daemon *d);

/* A transfer to create for a job or a user. Borrowed strings. */
struct lifecycle_request {
	uid_t uid;
	gid_t gid;
	const char *user;            /* NULL: looked up from uid */
	int64_t job_id;              /* 0 = none */
	const char *action;          /* stage_in, stage_out, archive, label */
	const char *source;
	const char *dest;            /* NULL for label */
	const char *options;         /* JSON object text or NULL */
};

struct queue_job;

/*
 * Fill lr for a request on job j's behalf: its owner (the job's gid, or its
 * uid when the gid is unknown), user and id, with action, source and
 * options (borrowed, may be NULL to set later); dest and the rest zeroed.
 */
void lifecycle_request_init(struct lifecycle_request *lr, const struct queue_job *j,
			    const char *action, const char *source, const char *options);

/*
 * Check a request against the rules of docs/api.md (absolute paths, no '..',
 * site roots, known action and options). Returns 0 or -1 with a message
 * that names the field in err. The caller holds d->conf_lock (read).
 */
int lifecycle_check_request(struct daemon *d, const struct lifecycle_request *lr,
			    char *err, size_t errlen);

/* Check, then store as queued and wake the main loop. 0 or -1. */
int lifecycle_create_request(struct daemon *d, const struct lifecycle_request *lr,
			     int64_t *id_out, char *err, size_t errlen);

/*
 * Create the after-job requests of a job whose end event is stored, then
 * mark it processed. Ids created go to ids (up to max), count to *n.
 * Returns 0 or -1 (the event stays pending and is tried again).
 */
int lifecycle_process_job_end(struct daemon *d, int64_t job_id, int64_t *ids, int max, int *n,
			      char *err, size_t errlen);

/*
 * The job ran again after its end had been processed (the Slurm watcher saw
 * slurmctld count a restart the record does not have): its earlier run's
 * after-job transfers are superseded and the unfinished ones cancelled, a
 * scheduled removal of its inputs with them, its inputs labelled 'exempt'
 * again if they were labelled 'purge', and its end cleared so that the final
 * run's end is processed as new (queue_job_rerun). end_state: slurmctld's
 * final state when the rerun has ended already (its end event was dropped
 * as a duplicate), else NULL. Logs what it did. Main thread (it reads
 * d->conf without its lock). 0 or -1 with err.
 */
int lifecycle_job_rerun(struct daemon *d, int64_t job_id, int runs, const char *how,
			const char *end_state, int exit_code, char *err, size_t errlen);

#endif /* STAGEHAND_LIFECYCLE_H */
