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
 * A file larger than a shard (MoverShardBytes) is split into byte ranges of
 * about a shard each (MOVER_RANGE_ALIGN multiples), and its ranges are packed
 * like files, so one big file is copied by several movers (xfer_range.h).
 * Smaller files are packed whole.
 */
#ifndef STAGEHAND_MOVER_PLAN_H
#define STAGEHAND_MOVER_PLAN_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "queue.h"

/* Ranges start at multiples of this (whole pages, whole O_DIRECT blocks). */
#define MOVER_RANGE_ALIGN (1 << 20)

/* One piece of a plan: a whole file, or one byte range of a file. */
struct mover_plan_file {
	char *relpath;               /* owned */
	int64_t size;                /* the file's size */
	int ranged;                  /* 1: only off..off+len of it (mover_plan_pack) */
	int64_t off, len;            /* the piece (0 and size for a whole file) */
	int idx;                     /* shard, set by mover_plan_pack */
};

struct mover_plan {
	struct mover_plan_file *f;   /* owned */
	size_t n, cap;               /* pieces */
	int64_t bytes;               /* sum of the files' sizes */
	int64_t files;               /* files (a ranged file counts once) */
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
 * First split every file larger than shard_bytes into ranges (ceil(size /
 * shard_bytes) of them, MOVER_RANGE_ALIGN multiples, the last one shorter).
 * Then how many shards: enough that none holds much more than shard_bytes or
 * shard_files pieces, at most max_shards and at most one per piece; then
 * assign each piece to a shard, largest first to the lightest shard. Returns
 * that count (1: do not split; p then holds whole files again). Returns 1
 * too when memory runs out.
 */
int mover_plan_pack(struct mover_plan *p, uint64_t shard_bytes, int64_t shard_files,
		    int max_shards);

/* Add one file (for the listing and for tests). 0 or -1 (out of memory). */
int mover_plan_add(struct mover_plan *p, const char *relpath, int64_t size);

void mover_plan_free(struct mover_plan *p);

#endif /* STAGEHAND_MOVER_PLAN_H */
