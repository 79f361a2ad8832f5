/*
 * mover_verify.h - the daemon's own reading of what mover jobs recorded,
 * before a request run by movers may count as verified (docs/admin-guide.md,
 * "Verification").
 *
 * A mover job runs as the request's owner, who can reach the mover's
 * process and so make it report anything. Its records are therefore a
 * claim, not a proof: once every shard is done, and before the final pass
 * that reports the request verified (and with keep=no removes sources,
 * and releases after= dependents), every file the movers recorded is read
 * back here, in full, by a child process of the daemon that has become the
 * owner: the destination's checksum must equal the one recorded, and when
 * the source is still there unchanged (same size and mtime as recorded),
 * so must the source's. The algorithm is the one the record names. A big
 * file copied in byte ranges is read the same way, range by range, in the
 * temporary file the final pass will rename (common/durable.h) and in the
 * source.
 *
 * Owns: that child, its protocol (one line per file that does not match)
 * and the figures of the pass (files, bytes, seconds). Must never: touch
 * a user file as root, follow a symbolic link below the request's roots
 * (common/resolve.h), or write anything.
 */
#ifndef STAGEHAND_MOVER_VERIFY_H
#define STAGEHAND_MOVER_VERIFY_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "queue.h"

/* A file a mover recorded as copied and verified (strings owned). */
struct mover_verify_ent {
	char *relpath;
	int64_t size, mtime_ns;
	char *cks_src, *cks_dst;     /* "algo:hex" as recorded */
};

/* A byte range of a big file a mover recorded as copied and read back (strings owned). */
struct mover_verify_range {
	char *relpath;
	int64_t off, len;
	int64_t src_size, mtime_ns;  /* the source as the mover saw it */
	char *cks;                   /* "algo:hex" of the range's bytes, as recorded */
};

/* Everything to read back for one request. */
struct mover_verify_set {
	struct mover_verify_ent *e;
	size_t n, cap;
	struct mover_verify_range *rg;
	size_t nr, rcap;
};
void mover_verify_set_free(struct mover_verify_set *s);

/* What a pass found. */
struct mover_verify_result {
	size_t files, ranges;        /* files and ranges read back */
	size_t mismatched;           /* files not what was recorded */
	size_t rmismatched;          /* ranges not what was recorded */
	int64_t bytes;               /* bytes hashed (destination and source) */
	double seconds;              /* the pass's wall time */
	char **bad;                  /* owned: the relpaths that did not match (mismatched) */
	size_t *badr;                /* owned: indices in the set's rg of those (rmismatched) */
	char first[1024];            /* the first mismatch, in words */
};
void mover_verify_result_free(struct mover_verify_result *res);

/* The done files and ranges of request r, as recorded, into s (zeroed first). 0, or -1 with err. */
int mover_verify_collect(struct queue *q, const struct queue_request *r,
			 struct mover_verify_set *s, char *err, size_t errlen);

/*
 * Read back what s holds below r->dest (and r->source) as r's owner.
 * 0: all matched; 1: some did not (res->first, res->bad, res->badr);
 * -1: the pass could not be made (err: the failing call or the child's
 * exit). *cancel (may be NULL) set: the child is killed, -1.
 */
int mover_verify_run(const struct queue_request *r, const struct mover_verify_set *s,
		     const _Atomic int *cancel, struct mover_verify_result *res, char *err,
		     size_t errlen);

#endif /* STAGEHAND_MOVER_VERIFY_H */
