/*
 * pace.h - the adaptive scavenger: how fast after-job transfers may move
 * data on one file system while jobs use it (YieldMode=adaptive).
 *
 * Owns: one controller per file system (struct pace, pure: every input and
 * the clock are arguments, so the unit test drives it with a fake clock),
 * the load-probe interface (struct pace_probe_ops) and its block-device
 * implementation, and the thread that samples the probes and sets the rate
 * and hold of each adaptive worker's token bucket (pace_run_*).
 *
 * The controller is LEDBAT-like (RFC 6817 in spirit): a transfer is a
 * scavenger that uses the bandwidth nobody else wants and gets out of the
 * way at once when someone does. Two signals:
 *  - others' load from a probe: bytes the device moved in the last step
 *    minus the bytes our own workers reported. Above PaceForeignMin the
 *    transfers are held (0 bytes/s, takes wait) at once; they go again after
 *    the device was quiet for the quiet time, from a low rate.
 *  - the latency of our own I/O (ns per MiB of a chunk, reported by the
 *    copy loops through xfer_bucket_wrote) against its base: the lowest seen
 *    over the last minutes (the uncontended latency). Queuing delay above
 *    the target fraction of the base lowers the rate, below it raises it.
 *
 * Probes: a probe turns a file system (its st_dev) into counters. The block
 * probe reads /sys/dev/block/MAJ:MIN/stat. A parallel file system plugs in
 * the same way: Lustre's client counters (llite.*.stats read_bytes and
 * write_bytes for the mount, or osc.*.stats per OST) and Spectrum Scale's
 * mmpmon fs_io_s (bytes read and written per file system) give the same
 * "bytes the file system moved" that the controller compares with ours;
 * jobstats (obdfilter.*.job_stats) can name the jobs. See
 * docs/performance.md, "The adaptive scavenger".
 *
 * Must never: touch a user's path or data (it reads sysfs and the buckets'
 * counters only), or block the daemon's main loop (its thread never takes a
 * lock the main loop holds for long).
 */
#ifndef STAGEHAND_PACE_H
#define STAGEHAND_PACE_H

#include <stdint.h>
#include <sys/types.h>

/* Counters of one file system since some origin (monotonic). */
struct pace_probe_sample {
	uint64_t rbytes;    /* bytes read by everyone */
	uint64_t wbytes;    /* bytes written by everyone */
};

/* A load probe, chosen per file system: the first whose open() serves it. */
struct pace_probe_ops {
	const char *name;
	/* A handle for the file system on device dev; NULL if not served. */
	void *(*open)(dev_t dev);
	/* Fill s; 0, or -1 (the probe is dropped and the controller goes on
	   with its own latency only). */
	int (*read)(void *h, struct pace_probe_sample *s);
	void (*close)(void *h);
};

extern const struct pace_probe_ops pace_probe_block;

struct pace_params {
	double foreign_min;   /* others' bytes/s above which the transfers hold */
	int64_t quiet_ns;     /* the device quiet this long before going again */
	double target;        /* allowed queuing delay as a fraction of the base latency */
	double min_rate;      /* bytes/s: the rate after a hold, and the floor */
	double ramp_s;        /* on target, the rate grows by the capacity in this long */
	double quiet_bytes;   /* held: a step with fewer unexplained bytes is quiet */
};

#define PACE_BASE_N 10          /* base latency history: minutes (RFC 6817's BASE_HISTORY) */

struct pace {
	struct pace_params p;
	int64_t last_ns;             /* time of the previous step, 0 = none */
	double exc_r, exc_w;         /* bytes the device moved that we did not report
					(others', or ours in flight), less the allowance */
	double own_w;                /* our written bytes/s, smoothed */
	struct pace_probe_sample last; /* probe counters at the previous step */
	int have_last;
	double total;                /* what the device moved, bytes/s, smoothed */
	double capacity;             /* estimated device bandwidth (bytes/s), 0 = unknown */
	double foreign;              /* others' bytes/s, smoothed */
	double rate;                 /* bytes/s allowed now (when not held) */
	int held;                    /* 1: others use the device; transfers wait */
	int64_t quiet_since_ns;      /* held: the device quiet since, 0 = not quiet */
	double base[PACE_BASE_N];    /* lowest own latency (ns/MiB) per minute, 0 = none */
	int64_t base_minute;         /* minute number of base[0] */
	double delay;                /* last own latency, ns per MiB (0 = none yet) */
	uint64_t backoffs;           /* holds started */
};

void pace_init(struct pace *c, const struct pace_params *p);

/* What our own transfers on the file system did since the previous step. */
struct pace_own {
	uint64_t rbytes, wbytes;  /* bytes read, written (reported after they completed) */
	uint64_t rmax, wmax;      /* largest single read / write: what may have completed
				     on the device and not been reported yet */
	double lat_sum;           /* own latency samples, ns per MiB, summed */
	int lat_n;
};

/*
 * One control step at now_ns. dev: the probe's counters now, or NULL (no
 * probe: own latency only). Returns the rate in bytes/s; 0 means hold
 * (c->held): the transfers wait until the device is quiet.
 */
double pace_step(struct pace *c, int64_t now_ns, const struct pace_probe_sample *dev,
		 const struct pace_own *own);

/* Bandwidth the others leave idle, bytes/s (capacity - their smoothed load). */
double pace_idle(const struct pace *c);

/* ---- the pace thread (daemon side) ---- */
struct daemon;
struct xfer_bucket;

/* Defaults of struct pace_params. */
void pace_default_params(struct pace_params *p);

/* Start / stop the thread that steps every adaptive bucket's controller every 10 ms. */
int pace_run_start(struct daemon *d, char *err, size_t errlen);
void pace_run_stop(void);
/*
 * A worker slot's bucket is (adaptive = 1) or is no longer (0) paced. Called
 * by the main loop; the thread picks it up at its next step.
 */
void pace_run_bucket(struct xfer_bucket *b, int adaptive);

/* Totals over every controller, for /metrics, /v1/health and status. */
struct pace_stats {
	int controllers;      /* file systems with paced transfers now */
	int held;             /* of which held now */
	double rate;          /* bytes/s allowed now, summed */
	double idle;          /* bytes/s left idle by others, summed */
	double capacity;      /* estimated bandwidth, summed */
	uint64_t backoffs;    /* holds since start */
};
void pace_run_stats(struct pace_stats *s);

#endif /* STAGEHAND_PACE_H */
