/*
 * mover_plan.h - splitting a request into shards for mover jobs.
 *
 * Owns: the listing of a request's source tree (in a child process that has
 * become the owner, the only place a user path is opened) and the packing of
 * its regular files into shards balanced by bytes.
 *
 * Must never: open a user path in the daemon process, or follow a symlink
 * below the source (the walk uses O_NOFOLLOW and AT_SYMLINK_NOFOLLOW).
 *
 * Files are packed whole: a file larger than a shard is a shard of its own.
 * Splitting one file by byte range across movers is not done (the transfer
 * engine has no ranged copy to hand a range to).
 */
#ifndef STAGEHAND_MOVER_PLAN_H
#define STAGEHAND_MOVER_PLAN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "queue.h"

struct mover_plan_file {
	char *relpath;               /* owned */
	int64_t size;
	int idx;                     /* shard, set by mover_plan_pack */
};

struct mover_plan {
	struct mover_plan_file *f;   /* owned */
	size_t n, cap;
	int64_t bytes;               /* sum of sizes */
};

/*
 * List the regular files below r->source as r's owner (groups from
 * worker_groups), leaving out options.exclude directories. Returns 0, 1
 * when the source is not a directory (nothing to split), or -1 with err.
 * Runs a child and waits for it, so it is called from the planner thread
 * (mover_exec.c), never from the main loop. When *cancel (may be NULL)
 * becomes non-zero the child is killed within 0.2 s and -1 returned.
 */
int mover_plan_list(const struct queue_request *r, struct mover_plan *p,
		    const _Atomic int *cancel, char *err, size_t errlen);

/*
 * How many shards: enough that none holds much more than shard_bytes or
 * shard_files, at most max_shards and at most one per file; then assign
 * each file to a shard, largest first to the lightest shard. Returns that
 * count (1: do not split).
 */
int mover_plan_pack(struct mover_plan *p, uint64_t shard_bytes, int64_t shard_files,
		    int max_shards);

/* Add one file (for the listing and for tests). 0 or -1 (out of memory). */
int mover_plan_add(struct mover_plan *p, const char *relpath, int64_t size);

void mover_plan_free(struct mover_plan *p);

#endif /* STAGEHAND_MOVER_PLAN_H */
