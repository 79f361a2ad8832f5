/*
 * xfer.h - the transfer engine as seen from a worker process.
 *
 * Owns: the choice of a request's two endpoints (by name: "local", "null",
 * "bundle", "url", or by a URL's scheme) from the one table of endpoints,
 * the record protocol a worker streams to the daemon over its socket, the
 * shared bandwidth token bucket (xfer_bucket.c), and the resume set (files
 * verified by an earlier attempt). What a worker runs for a request is the
 * engine's driver (xfer_pipeline.c) between those two endpoints
 * (xfer_endpoint.h: small operations on one side of a transfer), over the
 * engine's shared pieces (xfer_engine.h: the walk, the write path,
 * verification, the resume decision, failure accounting).
 *
 * Must never: run in the daemon process with root's identity on user paths
 * (endpoints run only inside a worker that has dropped to the owner), or touch
 * the database (the daemon alone writes it, from the records).
 */
#ifndef STAGEHAND_XFER_H
#define STAGEHAND_XFER_H

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

#include "checksum.h"

#define XFER_PATH_MAX 4096
#define XFER_TEXT_MAX 1024

/* XR_PHASE's code: where a transfer is, in the engine's own words (the
   daemon maps it to the request's state; the engine knows no queue). */
enum xfer_phase {
	XFER_PHASE_VERIFYING = 1,   /* every file copied; the final checks */
};

enum xfer_rec_type {
	XR_TOTALS = 1,     /* a=files b=bytes c=skipped */
	XR_ITEM_START,     /* path, text=type, a=size b=mtime_ns c=mode */
	XR_ITEM_COPIED,    /* path, cks=source checksum */
	XR_ITEM_DONE,      /* path, cks=destination checksum, a=size b=started c=ended, text=type */
	XR_ITEM_SKIPPED,   /* path, text=reason */
	XR_ITEM_FAILED,    /* path, code=errno, text=message */
	XR_PHASE,          /* code=enum xfer_phase */
	XR_LABEL,          /* an fd travels with it (SCM_RIGHTS); path=name text=value */
	XR_LOG,            /* code=log level, text */
	XR_RESULT,         /* code=enum xfer_result, text=message */
	XR_ITEM_FILE,      /* a file copied, made durable and verified, in one record:
			      path, a=size b=mtime_ns c=mode d=started e=ended,
			      cks=source checksum cks2=destination checksum */
	XR_RANGE_DONE,     /* a byte range of a file copied, made durable and read back
			      by a mover (xfer_range.h): path, a=offset b=length
			      c=the source's size d=its mtime_ns, cks=the range's checksum */
	XR_MPU,            /* an S3 multipart upload's state, kept for a resume (enum
			      xfer_mpu_rec in code): path=relpath, text=upload id;
			      begin: a=size b=mtime_ns c=part size; part: a=number
			      b=length, cks=its md5 (hex); end: nothing else */
};

enum xfer_mpu_rec { XFER_MPU_BEGIN = 1, XFER_MPU_PART, XFER_MPU_END };

enum xfer_result { XFER_OK = 0, XFER_RETRYABLE = 1, XFER_FINAL = 2, XFER_INTERRUPTED = 3 };

/* Fixed part of a record; path_len + text_len bytes follow it on the wire. */
struct xfer_rec {
	uint32_t type;
	int32_t code;
	int64_t a, b, c;
	char cks[CKSUM_HEX_MAX];
	int64_t d, e;
	char cks2[CKSUM_HEX_MAX];
	uint16_t path_len;
	uint16_t text_len;
};

/*
 * One file verified by an earlier attempt (sorted by relpath), or one whose
 * byte ranges movers copied into its temporary file (ranged_cks set): the
 * final pass finishes it (xfer_range_finish) before its walk.
 */
struct xfer_done_ent {
	char *relpath;
	int64_t size, mtime_ns;
	char *ranged_cks;            /* the checksum of its ranges, or NULL */
};

/*
 * An S3 multipart upload an earlier attempt of the request began and did not
 * finish (the daemon's record of it, passed back for a resume): which upload,
 * of which version of the source, cut how, and the parts the server took
 * and verified then. The next attempt asks the server (ListParts) which of
 * them it still holds before it trusts any.
 */
struct xfer_mpu_part {
	int number;                  /* 1..10000 */
	int64_t len;
	char md5[33];                /* hex: the md5 of the part's bytes (its ETag) */
};
struct xfer_mpu_ent {
	char *relpath;
	char *upload_id;
	int64_t size, mtime_ns, part_size;
	struct xfer_mpu_part *parts; /* by number */
	size_t nparts;
};

/*
 * *ctx->stop: 1 (SIGTERM) a stop that keeps what a resume needs (drain,
 * shutdown); XFER_STOP_CANCEL (SIGUSR1) the request was cancelled, so what
 * it began on a server (an S3 multipart upload) is given up too.
 */
#define XFER_STOP_CANCEL 2

struct xfer_bucket;
struct conf;
struct restore_known;

/*
 * A stage-in whose source lies in an archive copy the daemon made
 * (daemon/xfer_restore.c): the daemon finds it in its records before the
 * fork, the worker restores from it as the owner.
 */
struct xfer_archive {
	char *root;                  /* the archive copy (its archive request's dest) */
	int64_t request_id;          /* that archive request */
	struct restore_known *known; /* its files' checksums when archived, sorted by path */
	size_t nknown;
};

/*
 * A shard of a request (stagehand-mover): the regular files this run copies,
 * as relpaths sorted by strcmp. Everything else the walk meets is left to the
 * request's final pass: other files, symlinks, and the source's labels.
 */
struct xfer_shard {
	const char *const *files;
	size_t nfiles;
};

struct xfer_ctx {
	int64_t request_id;
	int64_t job_id;
	uid_t uid;
	const char *action;          /* stage_in, stage_out, archive, label */
	const char *source, *dest;
	int keep;                    /* archive: 0 = remove verified source files */
	int chan;                    /* socket to the daemon */
	enum cksum_algo algo;
	struct xfer_bucket *bucket;  /* shared with the daemon and other workers */
	const char *xattr_ns;        /* "user." or "trusted." */
	int label_via_daemon;        /* 1: send label fds to the daemon (trusted.) */
	const struct xfer_done_ent *done;
	size_t ndone;
	volatile sig_atomic_t *stop; /* set by SIGTERM: stop, remove the temp file */
	const struct conf *conf;     /* the daemon's configuration (borrowed; read only) */
	int sync_batch;              /* SyncMode=batch: small files made durable by one
					syncfs() per batch instead of one fsync each */
	int verify_sample;           /* VerifyMode=sample: big files read back 1 chunk in
					this many (0 = every chunk) */
	const char *const *exclude;  /* relpaths (from the source root) of directories left
					out of the copy (#DATA exempt= inside the tree);
					NULL-terminated, or NULL for none */
	const char *beneath;         /* options.beneath: the source is opened with no symlink
					followed below this directory (xfer_open_beneath);
					NULL: opened normally (an API request's own path) */
	int line;                    /* options.line: the #DATA line of the source, or 0 */
	const char *label_policy;    /* label requests: options.policy ("archive", or
					"skipped" for a skipped archive); NULL = "archive" */
	const struct xfer_shard *shard; /* NULL: the whole request; else only these files
					   (xfer_shard_skip) and no labels */
	const struct xfer_mpu_ent *mpu; /* S3 multipart uploads earlier attempts began
					   (resume), sorted by relpath; NULL: none */
	size_t nmpu;
	const struct xfer_archive *archive; /* stage_in from an archive copy the daemon
					       made, or NULL (xfer_restore_stage_in) */
	const char *backend;         /* options.backend: the endpoint named ("local", "null",
					"bundle", "url"); NULL: by the URL's scheme
					(xfer_endpoints_for) */
};


struct xfer_endpoint;

/*
 * The one place a request's endpoints are chosen (xfer.c, over the one
 * table of endpoints). First the endpoint the request names: ctx->backend,
 * else the one serving the scheme of the URL side (the source, or the
 * destination when the source is a path), else local; NULL with msg when
 * there is none (the daemon refuses such a request before a worker starts;
 * only ctx->source, dest and backend are read).
 */
const struct xfer_endpoint *xfer_endpoint_named(const struct xfer_ctx *ctx, char *msg,
					       size_t msglen);
/*
 * Then the pair: the named endpoint goes on its side of the local one: the
 * destination, but the source of a stage_in when it streams (url); one that
 * groups (bundle) stores archives only (other actions: local to local).
 * XFER_OK with *src and *dst, or XFER_FINAL with msg: no such endpoint, or
 * it cannot take the request as it is (a label of a URL, a URL to a URL).
 */
int xfer_endpoints_for(const struct xfer_ctx *ctx, const struct xfer_endpoint **src,
		       const struct xfer_endpoint **dst, char *msg, size_t msglen);
/*
 * Do the whole request: the driver (xfer_pipeline_run) between the
 * endpoints xfer_endpoints_for chose, or XFER_FINAL with its message.
 * Emits every record; returns enum xfer_result.
 */
int xfer_run(struct xfer_ctx *ctx);
/*
 * In the worker before it drops root, with the request's fields and conf
 * set in ctx: what the request's endpoint reads as root, through its
 * stream table's prepare (url: the site's S3CredentialsFile). Never fails
 * the request.
 */
void xfer_prepare(struct xfer_ctx *ctx);

/*
 * Backend "bundle" (the endpoint xfer_ep_bundle, xfer_bundle.c): archive
 * requests for trees of many small files become tar bundles plus an index in
 * DEST/XFER_BUNDLE_DIR; anything else is stored by the local endpoint. Its
 * parameters are set in the daemon process (from ArchiveBundle/Bundle* in
 * stagehand.conf) and inherited by the forked workers.
 */
#define XFER_BUNDLE_DIR ".stagehand-bundles"
struct xfer_bundle_params {
	int64_t min_files;           /* bundle only with at least this many small files */
	uint64_t file_max;           /* files smaller than this are bundled */
	uint64_t bundle_size;        /* a bundle closes before it grows past this */
};
void xfer_bundle_configure(const struct xfer_bundle_params *p);

/*
 * A stage-in of an archive copy stagehand made (xfer_restore.c): when the
 * source is ctx->archive's root or lies in it, or is itself the root of a
 * bundled archive, bring the archived files back into the destination with
 * common/restore.c (bundles unpacked, every file checked against the
 * checksum recorded when it was archived) and report the result. -1 when
 * the source is no such archive: the request's endpoints copy it as usual.
 */
int xfer_restore_stage_in(struct xfer_ctx *ctx);

/* ---- records (worker side) ---- */
/*
 * One record a worker sends: its type and code, the numbers a..e whose
 * meaning the type gives (struct xfer_rec above), checksums, a path and a
 * text (borrowed; NULL: none). Fields a type does not use stay 0 or NULL,
 * so a call names only what it sends:
 *   xfer_emit(ctx, &(struct xfer_note){ .type = XR_LOG, .code = lvl, .text = t }).
 */
struct xfer_note {
	enum xfer_rec_type type;
	int code;
	int64_t a, b, c, d, e;
	const char *cks, *cks2, *path, *text;
};
/* Send one record. Thread-safe (one lock per worker process): a record goes out whole. */
int xfer_emit(struct xfer_ctx *ctx, const struct xfer_note *n);
int xfer_emit_label_fd(struct xfer_ctx *ctx, int fd, const char *name, const char *value);
void xfer_logf(struct xfer_ctx *ctx, int level, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* ---- records (daemon side) ---- */
/*
 * Parse one record from buf (len bytes). Returns the bytes consumed (0 when
 * more bytes are needed) or -1 for a corrupt stream. path and text are
 * NUL-terminated copies into the caller's buffers.
 */
ssize_t xfer_parse(const char *buf, size_t len, struct xfer_rec *rec,
		   char path[XFER_PATH_MAX + 1], char text[XFER_TEXT_MAX + 1]);

/* ---- shared token bucket ---- */
/* Shared memory (MAP_SHARED) so every forked worker draws from one cap. */
struct xfer_bucket *xfer_bucket_create(uint64_t rate);
void xfer_bucket_destroy(struct xfer_bucket *b);
/* New cap in bytes/s (0 = unlimited); takes effect at once in every worker. */
void xfer_bucket_set_rate(struct xfer_bucket *b, uint64_t rate);
/*
 * Chain: b's takers are charged to parent too (a worker's own bucket, used
 * to yield, in front of the global BandwidthCap). Set before fork.
 */
void xfer_bucket_set_parent(struct xfer_bucket *b, struct xfer_bucket *parent);
/* Paused: every take waits (in 50 ms steps) until unpaused or stopped. */
void xfer_bucket_set_paused(struct xfer_bucket *b, int paused);
int xfer_bucket_paused(const struct xfer_bucket *b);
/*
 * Wait until n bytes may be moved (after this bucket, its parent's). Returns
 * early if *stop becomes set.
 */
void xfer_bucket_take(struct xfer_bucket *b, uint64_t n, volatile sig_atomic_t *stop);
/*
 * A copy loop wrote len bytes at off to fd (call it right after the write,
 * next to xfer_bucket_take). It feeds the adaptive scavenger (pace.h) and
 * keeps few bytes in flight:
 *  - learns the file system of the transfer from fd (fstat, once);
 *  - counts the bytes as this transfer's own I/O on it;
 *  - reports the time since this thread's previous bucket call, per MiB, as
 *    a latency sample (dropped when any taker of the bucket slept for the rate
 *    or a pause in between: then it measures the bucket, not the device);
 *  - when the bucket is paced or paused (xfer_bucket_set_flush), writes the
 *    range back and waits (sync_file_range) unless fd is O_DIRECT or len is
 *    under 256 KiB, so that no pile of dirty pages is left to flush into a
 *    job's I/O;
 *  - waits while the bucket is paused, so a pause stops the writer after the
 *    chunk in flight, not only the reader.
 * off < 0: the len bytes just before fd's file position (appending writes).
 * A NULL bucket or fd < 0 does nothing.
 */
void xfer_bucket_wrote(struct xfer_bucket *b, int fd, int64_t off, uint64_t len);
/*
 * XFER_FLUSH_RANGES: xfer_bucket_wrote writes back what was written at once
 * (a yielding transfer: a pause leaves no dirty pages). XFER_FLUSH_PACED:
 * that, and the engine moves XFER_PACE_CHUNK at a time (the adaptive
 * scavenger, whose hold must take effect within one small I/O).
 */
enum { XFER_FLUSH_OFF = 0, XFER_FLUSH_RANGES = 1, XFER_FLUSH_PACED = 2 };
void xfer_bucket_set_flush(struct xfer_bucket *b, int flush);
/* 1 when b is XFER_FLUSH_PACED (0 for NULL). */
int xfer_bucket_paced_io(const struct xfer_bucket *b);
/*
 * 1 when nothing can hold or slow what goes through b (or b is NULL): its
 * flush is XFER_FLUSH_OFF (no yield) and neither it nor its parent has a
 * rate (BandwidthCap, a yield's trickle).
 */
int xfer_bucket_unbounded(const struct xfer_bucket *b);
/*
 * The I/O size of a paced or paused transfer: what is in flight when a job's
 * burst begins, so what the job can meet before the controller's hold takes
 * effect (about 10 ms at 100 MiB/s, against 80 ms for an 8 MiB chunk).
 */
#define XFER_PACE_CHUNK (1u << 20)
/*
 * Change the rate without forgiving the debt of bytes already taken (the
 * pace thread calls it every step; xfer_bucket_set_rate starts afresh).
 */
void xfer_bucket_adjust_rate(struct xfer_bucket *b, uint64_t rate);
/* Seconds since a copy loop last called take or wrote on b (it finished an I/O). */
double xfer_bucket_idle_s(struct xfer_bucket *b);
/* What the copy loops reported since the previous call (pace thread), and reset. */
/*
 * Classes of a write's latency sample: its size (6 steps: < 512 KiB, < 1,
 * < 2, < 4, < 8 MiB, larger), O_DIRECT or buffered with write-back, and
 * whether another I/O of the same transfer began while it ran (the
 * pipeline's reader or verifier: the copy's own queuing).
 */
#define XFER_LAT_SIZES 6
#define XFER_LAT_CLASSES (XFER_LAT_SIZES * 2 * 2)
int xfer_lat_class(uint64_t len, int direct, int concurrent);

struct xfer_bucket_io {
	dev_t dev;          /* file system written, 0 = none yet */
	uint64_t rbytes;    /* bytes taken (read: the source, a read-back) */
	uint64_t wbytes;    /* bytes written (xfer_bucket_wrote) */
	uint64_t rmax, wmax; /* largest single take / write seen (in flight at once) */
	/* Latency samples (ns per MiB of a write) by class, xfer_lat_class():
	   each kind of write has a base of its own, so that the copy's own
	   mix of pieces is not taken for someone else's load. */
	double lat_sum[XFER_LAT_CLASSES];
	int lat_n[XFER_LAT_CLASSES];
};
void xfer_bucket_drain_io(struct xfer_bucket *b, struct xfer_bucket_io *io);
/* Forget the file system and sizes (a worker slot starts another request). */
void xfer_bucket_reset_io(struct xfer_bucket *b);

/* ---- excluded directories ---- */
#define XFER_EXCLUDE_MAX 256
#define XFER_EXCLUDE_REASON "exempt (#DATA exempt=): not archived"
/*
 * One options.exclude entry: relative to the source root, non-empty, no
 * leading or trailing '/', no empty, '.' or '..' component, no control
 * character, shorter than XFER_PATH_MAX. 0, or -1 with the reason in err.
 */
int xfer_exclude_check(const char *rel, char *err, size_t errlen);
/* 1 if the directory at relpath rel is in ctx->exclude (exact match). */
int xfer_excluded(const struct xfer_ctx *ctx, const char *rel);

/* ---- resume set ---- */
const struct xfer_done_ent *xfer_done_find(const struct xfer_done_ent *d, size_t n,
					   const char *relpath);
/*
 * 1 if relpath is left out of this run because ctx runs a shard that does
 * not hold it (the walk then treats it as already done), else 0.
 */
int xfer_shard_skip(const struct xfer_ctx *ctx, const char *relpath);

#endif /* STAGEHAND_XFER_H */
