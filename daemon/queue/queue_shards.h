/*
 * queue_shards.h - the shards of requests that run as mover jobs (migrations
 * 3, 5 and 6): which files and byte ranges each shard holds, and where each
 * shard stands.
 *
 * Owns: the shards, shard_files and shard_ranges tables. A shard is a plan,
 * never a record of what is done: done stays in items, written only from
 * verified records, so a file reported twice (a mover killed after its
 * report, a shard run again) is counted once. A range of a big file is the
 * exception that proves it: its done mark (set once) lives in shard_ranges,
 * and the file becomes a done item only when the final pass finishes it.
 *
 * Must never: touch user files, or mark an item done.
 */
#ifndef STAGEHAND_QUEUE_SHARDS_H
#define STAGEHAND_QUEUE_SHARDS_H

#include <stdint.h>

#include "checksum.h"
#include "queue.h"


enum queue_shard_state {
	QSH_QUEUED = 0,   /* to be submitted */
	QSH_SUBMITTED,    /* a mover job (slurm_job) holds it */
	QSH_DONE,         /* its mover reported success */
	QSH_FAILED,       /* its mover reported a final failure (error) */
};

/* A shard as stored. error is owned: free the array with queue_shards_free. */
struct queue_shard {
	int64_t request_id;
	int idx;
	enum queue_shard_state state;
	int64_t slurm_job;          /* 0 = none */
	int64_t files, bytes;
	int attempts;               /* mover jobs submitted for it */
	char *error;                /* last failure, or NULL */
};
void queue_shards_free(struct queue_shard *s, int n);

/* One piece of a plan (borrowed relpath): a whole file, or a byte range of one. */
struct queue_shard_file {
	const char *relpath;
	int64_t size;               /* the file's size */
	int idx;                    /* the shard it goes to */
	int ranged;                 /* 1: only off..off+len (shard_ranges) */
	int64_t off, len;
};

/*
 * Store a plan of nshards shards for req, replacing any earlier plan, in
 * one transaction. 0 or -1 with err.
 */
int queue_shards_create(struct queue *q, int64_t req, int nshards,
			const struct queue_shard_file *files, size_t nfiles, char *err,
			size_t errlen);

/* The shards of req by idx: *out new (queue_shards_free), *n (0: no plan). 0 or -1. */
int queue_shards_list(struct queue *q, int64_t req, struct queue_shard **out, int *n,
		      char *err, size_t errlen);

/* Calls fn for each file of shard idx in relpath order; stops when fn returns non-zero. */
int queue_shard_files(struct queue *q, int64_t req, int idx,
		      int (*fn)(const char *relpath, int64_t size, void *arg), void *arg,
		      char *err, size_t errlen);

/* Items of shard idx already verified (the resume set), in relpath order. */
int queue_shard_done(struct queue *q, int64_t req, int idx,
		     int (*fn)(const char *relpath, int64_t size, int64_t mtime_ns, void *arg),
		     void *arg, char *err, size_t errlen);

/*
 * Calls fn for each byte range of shard idx not done yet, in (relpath, off)
 * order; stops when fn returns non-zero. size is the whole file's, as planned.
 */
int queue_shard_ranges(struct queue *q, int64_t req, int idx,
		       int (*fn)(const char *relpath, int64_t off, int64_t len, int64_t size,
				 void *arg), void *arg, char *err, size_t errlen);

/*
 * Range rg->off..off+len of rg->relpath, held by shard idx, was copied, made
 * durable and read back by a mover: the source had size bytes and mtime_ns
 * then, the range hashes to cks. Idempotent: 0 when recorded now, 1 when it was
 * done already or is no range of shard idx (nothing changed), -1 with err.
 */
struct queue_range_rec {
	const char *relpath;	/* borrowed */
	int64_t off, len;	/* the range */
	int64_t size, mtime_ns;	/* the source's, as the mover saw it */
	const char *cks;	/* borrowed: the range's checksum */
};
int queue_range_done(struct queue *q, int64_t req, int idx, const struct queue_range_rec *rg,
		     char *err, size_t errlen);

/*
 * The ranged files of req whose every range is done, all from one version
 * of the source (the same size and mtime), and that are not done as items
 * yet: fn gets each in relpath order with the checksum of its ranges:
 * algo over the ranges' checksums in offset order, written "ranges-algo:hex"
 * so that it is never taken for a hash of the file's bytes. 0 or -1.
 */
int queue_ranges_assembled(struct queue *q, int64_t req, enum cksum_algo algo,
			   int (*fn)(const char *relpath, int64_t size, int64_t mtime_ns,
				     const char *cks, void *arg), void *arg, char *err,
			   size_t errlen);

/*
 * The done byte ranges of req whose file is not a done item yet, as their
 * movers recorded them (the source's size and mtime then, the range's
 * checksum), in (relpath, off) order; stops when fn returns non-zero. For
 * the daemon's read-back of what movers recorded (movers/mover_verify.h).
 * 0 or -1.
 */
int queue_ranges_done(struct queue *q, int64_t req,
		      int (*fn)(const char *relpath, int64_t off, int64_t len, int64_t src_size,
				int64_t mtime_ns, const char *cks, void *arg), void *arg,
		      char *err, size_t errlen);

/*
 * Range off of relpath is not done after all (its bytes are not what its
 * mover recorded): the file is not assembled from its ranges, and the
 * final pass copies it whole. 0 or -1.
 */
int queue_range_undo(struct queue *q, int64_t req, const char *relpath, int64_t off, char *err,
		     size_t errlen);

/*
 * The done file relpath of req is not what its mover recorded (the
 * daemon's read-back found otherwise): failed with error, and no longer
 * counted in the request's files and bytes done, so that a retry copies
 * and counts it once. Nothing changes for an item that is not a done file.
 * 0 or -1.
 */
int queue_item_unverified(struct queue *q, int64_t req, const char *relpath, const char *error,
			  char *err, size_t errlen);

/* Shard idx is now held by mover job slurm_job (attempts + 1). 0 or -1. */
int queue_shard_submitted(struct queue *q, int64_t req, int idx, int64_t slurm_job,
			  char *err, size_t errlen);

/*
 * Is Slurm job job a mover job this daemon submitted (a shard holds it, or
 * held it to the end)? The daemon's own record, never the job's name, which
 * any user can choose. 1 yes, 0 no, -1 with err. A shard sent back to the
 * queue forgets its job: callers that must recognise a job for its whole
 * life remember the answer.
 */
int queue_shard_job(struct queue *q, int64_t job, char *err, size_t errlen);

/*
 * Move shard idx to state st with error (may be NULL), only while mover job
 * job holds it (job 0: whatever holds it). QSH_QUEUED clears the job.
 * Returns 0, 1 when the shard is not held by job (nothing changed), -1.
 */
int queue_shard_set(struct queue *q, int64_t req, int idx, int64_t job,
		    enum queue_shard_state st, const char *error, char *err, size_t errlen);

/*
 * Every shard of req is done: its file lists are no longer needed (the
 * shards stay, so a retried request is not planned again). 0 or -1.
 */
int queue_shards_forget_files(struct queue *q, int64_t req, char *err, size_t errlen);

/* A retried request: its failed shards go back to queued. 0 or -1. */
int queue_shards_retry(struct queue *q, int64_t req, char *err, size_t errlen);

/* Static name of a shard state. */
const char *queue_shard_state_name(enum queue_shard_state s);

#endif /* STAGEHAND_QUEUE_SHARDS_H */
