/*
 * yield.h - after-job transfers step aside while jobs compute.
 *
 * Owns: the set of "busy" file systems (those that hold a running job's
 * directories), the decision whether a transfer touches one, and telling the
 * worker pool to pause or throttle archive/stage_out workers accordingly
 * (YieldToJobs, YieldBandwidth, YieldMaxDelay, YieldTrickle). Stage-in is
 * never held back: the job it feeds is waiting for it, not running.
 *
 * Running jobs come from slurmctld (slurm_watch.c hands over each job's
 * WorkDir, StdOut and StdErr every tick) and, for tests and for sites
 * without the Slurm watch, from the YieldProbe file: one absolute path per
 * line, each treated as the directory of a running job.
 *
 * A path is mapped to a file system by prefix against the configured roots
 * (ScratchRoots, ArchiveRoot, StageInRoots); only those admin-configured
 * roots are stat()ed, for their st_dev. Must never: stat or open a path a
 * user chose (a job's WorkDir, a request's source) with root's identity.
 */
#ifndef STAGEHAND_YIELD_H
#define STAGEHAND_YIELD_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon.h"
#include "lifecycle.h"

struct queue_request;

extern const struct lifecycle_hook yield_hook;

/* Replace the running jobs' paths from slurmctld; takes ownership of paths
   (NULL-terminated, freed with sjob_free_paths-compatible free()s; may be NULL). */
void yield_set_running(struct daemon *d, char **paths);

/* 1 if request r should be held back now (after-job action on a busy file system). */
int yield_request_affected(struct daemon *d, const struct queue_request *r);

/* ---- pure helpers (unit-tested) ---- */

/* Index of the longest root that is path or a directory above it; -1 none. */
int yield_root_index(const char *path, char *const *roots, size_t nroots);

/*
 * Decide from root devices: devs[i] is the st_dev of roots[i] (0 = unknown),
 * busy[] the devices holding running jobs, unknown_busy 1 when a running
 * job's path matched no root. A transfer is affected when its source or
 * destination lies on a busy device; a local path under no root counts as
 * affected whenever anything is busy (the safe side: its file system is not
 * known).
 */
struct yield_view {
	char *const *roots;
	const dev_t *devs;
	size_t nroots;
	const dev_t *busy;
	size_t nbusy;
	int unknown_busy;
};
int yield_paths_affected(const struct yield_view *v, const char *source, const char *dest);

/* 1 for the actions that run after the job (archive, stage_out). */
int yield_after_job(const char *action);

#endif /* STAGEHAND_YIELD_H */
