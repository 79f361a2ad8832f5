/*
 * mover_verify.h - the daemon's own reading of what mover jobs recorded,
 * before a request run by movers may count as verified (docs/movers.md,
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
 * so must the source's. The algorithm is the one the record names.
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

/* What a pass found. */
struct mover_verify_result {
	size_t files;                /* files read back */
	size_t mismatched;           /* of them, not what was recorded */
	int64_t bytes;               /* bytes hashed (destination and source) */
	double seconds;              /* the pass's wall time */
	char **bad;                  /* owned: the relpaths that did not match (mismatched) */
	char first[1024];            /* the first mismatch, in words */
};
void mover_verify_result_free(struct mover_verify_result *res);

/*
 * The done files of request r, as recorded, into *e (*n of them; free with
 * mover_verify_ents_free). 0, or -1 with err.
 */
int mover_verify_collect(struct queue *q, const struct queue_request *r,
			 struct mover_verify_ent **e, size_t *n, char *err, size_t errlen);
void mover_verify_ents_free(struct mover_verify_ent *e, size_t n);

/*
 * Read back the n files of e below r->dest (and r->source) as r's owner.
 * 0: every one matched; 1: res->mismatched did not (res->first, res->bad);
 * -1: the pass could not be made (err: the failing call or the child's
 * exit). *cancel (may be NULL) set: the child is killed, -1.
 */
int mover_verify_run(const struct queue_request *r, const struct mover_verify_ent *e, size_t n,
		     const _Atomic int *cancel, struct mover_verify_result *res, char *err,
		     size_t errlen);

#endif /* STAGEHAND_MOVER_VERIFY_H */
