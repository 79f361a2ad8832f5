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
 *  - the latency of our own writes (ns per MiB of a piece, reported by the
 *    copy loops through xfer_bucket_wrote) against its base, kept per class
 *    of write (size, O_DIRECT or not, another of the copy's own I/Os in
 *    flight: xfer_lat_class), so that the copy's own mix is not taken for
 *    someone else: the lowest seen over the last minutes (the uncontended
 *    latency). Queuing delay above the target fraction of the base lowers
 *    the rate, below it raises it. Where the probe sees everything the
 *    device does (a block device), the latency in steps when the probe sees
 *    nobody else is our own queuing: it is learned (smoothed, per class) and
 *    never lowers the rate; it becomes the base when others are there.
 *
 * Probes: a probe turns a file system (its st_dev) into counters. Three
 * are tried in order: Lustre's client counters (pace_lustre.c: the mount's
 * llite.<fsname>-<instance>.stats read_bytes and write_bytes), Spectrum
 * Scale's (pace_gpfs.c: mmpmon fs_io_s bytes read and written, from one
 * long-running mmpmon), and the block device's (/sys/dev/block/MAJ:MIN/stat).
 * A client's counters see only this node's traffic: others' jobs on other
 * nodes reach the controller through the latency signal only. See
 * docs/performance.md, "The adaptive scavenger".
 *
 * Each controller also keeps what /metrics shows per file system
 * (pace_fs_stats_of): others' and own bytes as counters, holds, and the
 * archive share of the last 5 minutes.
 *
 * Must never: touch a user's path or data (it reads /proc, sysfs, debugfs,
 * mmpmon's output and the buckets' counters only), or block the daemon's
 * main loop (its thread never takes a lock the main loop holds for long).
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

/* What a probe's read() returns besides -1. */
enum {
	PACE_PROBE_NEW = 0,     /* s holds counters as of now */
	PACE_PROBE_STALE = 1,   /* no new sample since the last: the step waits for one
				   (own bytes accumulate meanwhile), the rates stay */
	PACE_PROBE_NONE = 2,    /* no sample for now (the source restarts): step on
				   own latency only, the probe stays */
};

/* A load probe, chosen per file system: the first whose open() serves it. */
struct pace_probe_ops {
	const char *name;
	/* A handle for the file system on device dev; NULL if not served (a
	   probe that recognises the file system but cannot serve it says why in
	   the log). */
	void *(*open)(dev_t dev);
	/* Fill s; PACE_PROBE_NEW, _STALE or _NONE, or -1 (the probe is dropped
	   with a log line and the controller goes on with its own latency only). */
	int (*read)(void *h, struct pace_probe_sample *s);
	void (*close)(void *h);
	/* 1: it sees everything the device does, from every process (a block
	   device); 0: only part of it (a parallel file system's client). */
	int whole_device;
};

extern const struct pace_probe_ops pace_probe_block;
extern const struct pace_probe_ops pace_probe_lustre;	/* pace_lustre.c */
extern const struct pace_probe_ops pace_probe_gpfs;	/* pace_gpfs.c */

struct pace_params {
	double foreign_min;   /* others' bytes/s above which the transfers hold */
	int64_t quiet_ns;     /* the device quiet this long before going again */
	double target;        /* allowed queuing delay as a fraction of the base latency */
	double min_rate;      /* bytes/s: the rate after a hold, and the floor */
	double ramp_s;        /* on target, the rate grows by the capacity in this long */
	double quiet_bytes;   /* held: a step with fewer unexplained bytes is quiet */
	double own_overhead;  /* of our own bytes, this fraction more on the device is the
				 file system's own doing for them (journal, extents), not others' */
	unsigned off;         /* PACE_OFF_*: rules turned off, to measure what each does */
};

/* Rules that can be turned off (STAGEHAND_PACE_OFF, a measurement hook: pace_run_start). */
#define PACE_OFF_CLASSES 1u     /* one base latency for every kind of write */
#define PACE_OFF_QUIET 2u       /* our own queuing on a whole device counted as others' */
#define PACE_OFF_RELEASE 4u     /* after a hold, half the rate before it */
#define PACE_OFF_OVERHEAD 8u    /* the file system's own writes for ours taken as others' */

/* The PACE_OFF_* bits named in s ("classes,quiet,release,overhead"); -1 on an unknown name. */
int pace_off_parse(const char *s, unsigned *off);

#define PACE_BASE_N 10          /* base latency history: minutes (RFC 6817's BASE_HISTORY) */
#define PACE_LAT_CLASSES 24     /* kinds of write with a base of their own: XFER_LAT_CLASSES */
#define PACE_WIN_S 10           /* the archive share's window: buckets of 10 s ... */
#define PACE_WIN_N 30           /* ... 30 of them, 5 minutes */

/* One 10-s bucket of the share's window. */
struct pace_win {
	int64_t slot;                /* now / 10 s when it was filled; 0 = empty */
	double own;                  /* bytes our transfers reported */
	double dev;                  /* bytes the probe saw the file system move */
	double room;                 /* the capacity estimate integrated over the steps */
	int probed;                  /* steps with the probe's counters */
};

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
	double others_r, others_w;   /* others' bytes/s read, written, smoothed over 0.5 s and
					not clipped at 0 per step (ours reported late even
					out): quiet while their positive parts sum below
					foreign_min (pace_others) */
	int whole;                   /* the probe sees the whole device (whole_device) */
	double quiet_s, quiet_b;     /* held: time and others' bytes since quiet_since_ns */
	double base[PACE_LAT_CLASSES][PACE_BASE_N]; /* lowest own latency (ns/MiB) per
					class and minute, 0 = none */
	double own_lat[PACE_LAT_CLASSES]; /* whole device: own latency (ns/MiB) per class
					in steps with nobody else, smoothed; 0 = none */
	int64_t base_minute;         /* minute number of base[0] */
	double delay;                /* last own latency, ns per MiB (0 = none yet) */
	uint64_t backoffs;           /* holds started */
	double own_total;            /* bytes our transfers reported, since init */
	double foreign_total;        /* others' bytes since init, counted per closed
					10-s bucket: max(0, dev - own) */
	int64_t win_slot;            /* the bucket being filled (now / 10 s) */
	struct pace_win win[PACE_WIN_N];
};

void pace_init(struct pace *c, const struct pace_params *p);

/* What our own transfers on the file system did since the previous step. */
struct pace_own {
	uint64_t rbytes, wbytes;  /* bytes read, written (reported after they completed) */
	uint64_t rmax, wmax;      /* largest single read / write: what may have completed
				     on the device and not been reported yet */
	double lat_sum[PACE_LAT_CLASSES]; /* own latency samples, ns per MiB, summed per
					     class (xfer_lat_class) */
	int lat_n[PACE_LAT_CLASSES];
};

/*
 * One control step at now_ns. dev: the probe's counters now, or NULL (no
 * probe: own latency only). Returns the rate in bytes/s; 0 means hold
 * (c->held): the transfers wait until the device is quiet.
 */
double pace_step(struct pace *c, int64_t now_ns, const struct pace_probe_sample *dev,
		 const struct pace_own *own);

/* Others' load without the clipping of each step, bytes/s: what decides quiet. */
double pace_others(const struct pace *c);

/* Bandwidth the others leave idle, bytes/s (capacity - their smoothed load). */
double pace_idle(const struct pace *c);

/*
 * The archive share over the 5 minutes before now_ns (the buckets of steps
 * with a probe): own bytes / (capacity x time - others' bytes). -1 when it
 * cannot be told: no probe in that time, no capacity estimate, or others
 * used all of it.
 */
double pace_share(const struct pace *c, int64_t now_ns);

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

#define PACE_FS_MAX 16          /* file systems with a controller at once */

/* One file system's controller, for /metrics (pace_metrics.c). */
struct pace_fs_stats {
	unsigned major, minor;       /* the file system's st_dev */
	char mount[256];             /* its mount point (mountinfo), "" if not found */
	char probe[16];              /* the probe in use: "block", "lustre", "gpfs", "none" */
	int active;                  /* 1: paced transfers on it now */
	int held;
	double rate;                 /* bytes/s allowed now (0 when held) */
	double capacity;             /* estimated bandwidth, bytes/s */
	double foreign;              /* others' bytes/s, smoothed over 0.5 s */
	double foreign_total;        /* others' bytes, counter */
	double own_total;            /* own bytes, counter */
	uint64_t holds;              /* holds started, counter */
	double share;                /* archive share, last 5 minutes; -1 unknown */
};

/* The controller's part of st (not major, minor, mount, probe, active). */
void pace_fs_stats_of(const struct pace *c, int64_t now_ns, struct pace_fs_stats *st);
/* Copy up to max file systems' stats (those seen since start); returns how many. */
int pace_run_fs_stats(struct pace_fs_stats *out, int max);
/*
 * The per-file-system series in Prometheus text (HELP and TYPE always, a
 * sample per file system). Returns a new string (free()), NULL on ENOMEM.
 */
char *pace_metrics_render(const struct pace_fs_stats *fs, int n);

#endif /* STAGEHAND_PACE_H */
