/* pace.c - see pace.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "daemon.h"
#include "log.h"
#include "monoclock.h"
#include "pace.h"
#include "pace_probe.h"
#include "xfer.h"

#define MIB (1024.0 * 1024.0)
#define NS 1000000000.0
#define OWN_LAT_S 2.0	/* the whole device's own latency, smoothed over this long */

_Static_assert(PACE_LAT_CLASSES == XFER_LAT_CLASSES, "one latency class per kind of write");

/* libm only for this: not worth a link dependency. */
static double _max(double a, double b)
{
	return a > b ? a : b;
}

/* A smoothing step's weight: dt of a time constant tau, at most 1. */
static double _k(double dt, double tau)
{
	return dt / tau > 1 ? 1 : dt / tau;
}

void pace_default_params(struct pace_params *p)
{
	memset(p, 0, sizeof(*p));
	p->foreign_min = 2 * MIB;	/* below: journal commits, atime, a daemon's log */
	p->quiet_ns = 300 * 1000000LL;	/* a job's burst has no gap this long inside it */
	p->quiet_bytes = 256 * 1024;
	p->target = 0.5;		/* 50% slower than uncontended = someone else is there */
	p->min_rate = 8 * MIB;
	p->ramp_s = 1.0;
	/* Measured on ext4 (bench-busy, O_DIRECT into preallocated files): 5-7% more
	   written than copied; without it a copy at the device's speed held itself
	   every second or so. A job's burst still shows within a few steps. */
	p->own_overhead = 0.125;
}

void pace_init(struct pace *c, const struct pace_params *p)
{
	memset(c, 0, sizeof(*c));
	c->p = *p;
	c->rate = p->min_rate;
}

static double _pos(uint64_t now, uint64_t then)
{
	return now >= then ? (double)(now - then) : 0;	/* a reset counter: no step */
}

/* Start the minute of now_ns in every class's base history. */
static void _base_age(struct pace *c, int64_t now_ns)
{
	int64_t minute = now_ns / (int64_t)(60 * NS), shift = minute - c->base_minute;

	if (!shift)
		return;
	for (int k = 0; k < PACE_LAT_CLASSES; k++) {
		double *h = c->base[k];

		if (shift >= PACE_BASE_N || shift < 0) {
			memset(h, 0, sizeof(c->base[k]));
		} else {
			memmove(h + shift, h, sizeof(h[0]) * (size_t)(PACE_BASE_N - shift));
			memset(h, 0, sizeof(h[0]) * (size_t)shift);
		}
	}
	c->base_minute = minute;
}

/* Class k's lowest own latency over the last PACE_BASE_N minutes, sample included. */
static double _base(struct pace *c, int k, double sample)
{
	double *h = c->base[k], b = 0;

	if (sample > 0 && (h[0] == 0 || sample < h[0]))
		h[0] = sample;
	for (int i = 0; i < PACE_BASE_N; i++)
		if (h[i] > 0 && (b == 0 || h[i] < b))
			b = h[i];
	return b;
}

/* Others' load: 1 if it is there now. Updates capacity and the smoothed load. */
static int _foreign(struct pace *c, double dt, const struct pace_probe_sample *dev,
		    const struct pace_own *own)
{
	double dr = _pos(dev->rbytes, c->last.rbytes), dw = _pos(dev->wbytes, c->last.wbytes);
	/* Unexplained: beyond our bytes and the file system's own I/O for them. */
	double ur = dr - (1 + c->p.own_overhead) * (double)own->rbytes;
	double uw = dw - (1 + c->p.own_overhead) * (double)own->wbytes;
	double allow = c->p.foreign_min * dt, k = _k(dt, 0.5);
	double total = (dr + dw) / dt;

	/* Over ~200 ms: one 10 ms step catches completions in clumps. */
	c->total += (total - c->total) * _k(dt, 0.2);
	c->capacity *= 1 - _k(dt, 600);	/* a peak fades over ~10 min */
	if (c->total > c->capacity)
		c->capacity = c->total;
	c->foreign += (((ur > 0 ? ur : 0) + (uw > 0 ? uw : 0)) / dt - c->foreign) * k;
	c->others_r += (ur / dt - c->others_r) * k;
	c->others_w += (uw / dt - c->others_w) * k;
	if (c->held && c->quiet_since_ns) {	/* what others did while it was quiet */
		c->quiet_s += dt;
		c->quiet_b += _max(0, ur + uw);
	}
	if (c->held)	/* ours are stopped: what the device moved is the others' */
		return ur + uw > allow + c->p.quiet_bytes;
	/* Our bytes are reported after they completed: up to one chunk per stage
	   may show on the device first. Only an excess beyond that is others'. */
	c->exc_r = _max(0, c->exc_r + ur - allow);
	c->exc_w = _max(0, c->exc_w + uw - allow);
	c->own_w += ((double)own->wbytes / dt - c->own_w) * k;
	/* Just after our writer reported a chunk, nothing of ours is unreported
	   but what it wrote since (about a step's worth): a smaller excess is
	   already others'. The writer reports every chunk, so this bounds the
	   time to see a burst by about one chunk's time. */
	if (own->wbytes > 0 && c->exc_w > MIB + 2 * c->own_w * dt)
		return 1;
	return c->exc_r > 2.0 * (double)own->rmax + MIB || c->exc_w > (double)own->wmax + MIB;
}

/* The 10-s bucket being filled: closing the previous one counts its others' bytes. */
static struct pace_win *_win(struct pace *c, int64_t now_ns)
{
	int64_t slot = now_ns / ((int64_t)PACE_WIN_S * 1000000000LL) + 1;	/* 0 = empty */
	struct pace_win *w = &c->win[c->win_slot % PACE_WIN_N];

	if (slot == c->win_slot)
		return w;
	if (c->win_slot && w->slot == c->win_slot && w->probed && w->dev > w->own)
		c->foreign_total += w->dev - w->own;
	c->win_slot = slot;
	w = &c->win[slot % PACE_WIN_N];
	memset(w, 0, sizeof(*w));
	w->slot = slot;
	return w;
}

/*
 * What the share and the counters need from one step: own bytes always,
 * the device's (devd >= 0) only with a probe. Others' bytes are counted per
 * 10-s bucket, not per step: ours show on the device a step before they are
 * reported, so a step's difference is noise that a bucket's evens out.
 */
static void _account(struct pace *c, int64_t now_ns, double dt, double devd,
		     const struct pace_own *own)
{
	struct pace_win *w = _win(c, now_ns);
	double o = (double)own->rbytes + (double)own->wbytes;

	c->own_total += o;
	if (devd < 0)
		return;
	w->own += o;
	w->dev += devd;
	w->room += c->capacity * dt;
	w->probed++;
}

double pace_share(const struct pace *c, int64_t now_ns)
{
	int64_t slot = now_ns / ((int64_t)PACE_WIN_S * 1000000000LL) + 1;
	double own = 0, dev = 0, room = 0, foreign;
	int probed = 0;

	for (int i = 0; i < PACE_WIN_N; i++) {
		const struct pace_win *w = &c->win[i];

		if (!w->slot || w->slot > slot || w->slot <= slot - PACE_WIN_N)
			continue;
		own += w->own;
		dev += w->dev;
		room += w->room;
		probed += w->probed;
	}
	foreign = dev > own ? dev - own : 0;
	if (!probed || room <= foreign)
		return -1;
	return own / (room - foreign);
}

void pace_fs_stats_of(const struct pace *c, int64_t now_ns, struct pace_fs_stats *st)
{
	st->held = c->held;
	st->rate = c->held ? 0 : c->rate;
	st->capacity = c->capacity;
	st->foreign = c->foreign;
	st->foreign_total = c->foreign_total;
	st->own_total = c->own_total;
	st->holds = c->backoffs;
	st->share = pace_share(c, now_ns);
}

/*
 * The step's queuing delay as a fraction of the base, averaged over its
 * samples (each against its class's base); 0 when nothing is over a base.
 * quiet: the whole device is seen and nobody else is on it, so the samples
 * are our own queuing: learned, not counted.
 */
static double _delay(struct pace *c, int64_t now_ns, double dt, const struct pace_own *own,
		     int quiet)
{
	struct pace_own one = { 0 };
	double rel = 0;
	int n = 0;

	if (c->p.off & PACE_OFF_CLASSES) {	/* every sample against one base */
		for (int k = 0; k < PACE_LAT_CLASSES; k++) {
			one.lat_sum[0] += own->lat_sum[k];
			one.lat_n[0] += own->lat_n[k];
		}
		own = &one;
	}
	_base_age(c, now_ns);
	for (int k = 0; k < PACE_LAT_CLASSES; k++) {
		double d, base;

		if (own->lat_n[k] <= 0)
			continue;
		d = own->lat_sum[k] / own->lat_n[k];
		base = _base(c, k, d);
		c->delay = d;
		if (quiet) {
			c->own_lat[k] += (d - c->own_lat[k]) * (c->own_lat[k] > 0 ? _k(dt, OWN_LAT_S) : 1);
			continue;
		}
		if (c->whole && !(c->p.off & PACE_OFF_QUIET) && c->own_lat[k] > base)	/* ours alone */
			base = c->own_lat[k];
		if (base <= 0)
			continue;
		rel += (d - base) / base * own->lat_n[k];
		n += own->lat_n[k];
	}
	return n ? rel / n : 0;
}

/* LEDBAT: move the rate toward the point where our latency is base * (1 + target). */
static void _ledbat(struct pace *c, int64_t now_ns, double dt, const struct pace_own *own,
		    int probed)
{
	double ref = _max(c->capacity, 100 * MIB), off;
	double upper = c->capacity > MIB ? c->capacity * 1.5 + c->p.min_rate : 1e15;
	int quiet = probed && c->whole && pace_others(c) < c->p.foreign_min &&
		    !(c->p.off & PACE_OFF_QUIET);

	off = (c->p.target - _delay(c, now_ns, dt, own, quiet)) / c->p.target;
	if (off < -1)	/* far over target: halve within ~100 ms */
		c->rate *= 1 - 0.5 * _k(dt, 0.1);
	else
		c->rate += off * ref * dt / c->p.ramp_s;
	if (c->rate > upper)
		c->rate = upper;
	if (c->rate < c->p.min_rate)
		c->rate = c->p.min_rate;
}

double pace_step(struct pace *c, int64_t now_ns, const struct pace_probe_sample *dev,
		 const struct pace_own *own)
{
	double dt = c->last_ns ? (double)(now_ns - c->last_ns) / NS : 0;
	double devd = -1;
	int busy = 0;

	if (dt <= 0 || dt > 1.0) {	/* first step, or after a gap: start afresh */
		c->last_ns = now_ns;
		c->have_last = dev != NULL;
		if (dev)
			c->last = *dev;
		c->exc_r = c->exc_w = 0;
		return c->held ? 0 : c->rate;
	}
	c->last_ns = now_ns;
	if (dev && c->have_last) {
		devd = _pos(dev->rbytes, c->last.rbytes) + _pos(dev->wbytes, c->last.wbytes);
		busy = _foreign(c, dt, dev, own);
	}
	_account(c, now_ns, dt, devd, own);
	c->have_last = dev != NULL;
	if (dev)
		c->last = *dev;
	if (c->held) {
		if (busy)
			c->quiet_since_ns = 0;
		else if (!c->quiet_since_ns)
			c->quiet_since_ns = now_ns;
		if (!c->quiet_since_ns)
			c->quiet_s = c->quiet_b = 0;
		if (c->quiet_since_ns && now_ns - c->quiet_since_ns >= c->p.quiet_ns) {
			c->held = 0;
			c->exc_r = c->exc_w = 0;
			/* Go on at what the probe saw left idle while it was quiet. */
			if (c->quiet_s > 0 && c->capacity > 0 && !(c->p.off & PACE_OFF_RELEASE))
				c->rate = _max(c->p.min_rate, c->capacity - c->quiet_b / c->quiet_s);
		}
		return c->held ? 0 : c->rate;
	}
	if (busy) {
		c->held = 1;
		c->backoffs++;
		c->quiet_since_ns = 0;
		/* Without a probe's answer while it is quiet, come back at half the
		   rate that was running. */
		c->rate = _max(c->p.min_rate, c->rate / 2);
		return 0;
	}
	_ledbat(c, now_ns, dt, own, devd >= 0);
	return c->rate;
}

double pace_others(const struct pace *c)
{
	return _max(0, c->others_r) + _max(0, c->others_w);
}

double pace_idle(const struct pace *c)
{
	return c->capacity > c->foreign ? c->capacity - c->foreign : 0;
}

/* ---- the block-device probe: /sys/dev/block/MAJ:MIN/stat ---- */

struct _block {
	int fd;
};

static void *_block_open(dev_t dev)
{
	char path[64];
	struct _block *h;
	int fd;

	if (major(dev) == 0)
		return NULL;	/* tmpfs, overlay, NFS: no block device behind it */
	snprintf(path, sizeof(path), "/sys/dev/block/%u:%u/stat", major(dev), minor(dev));
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return NULL;
	if (!(h = malloc(sizeof(*h)))) {
		close(fd);
		return NULL;
	}
	h->fd = fd;
	return h;
}

static int _block_read(void *hv, struct pace_probe_sample *s)
{
	struct _block *h = hv;
	char buf[512];
	unsigned long long f[7];
	ssize_t n = pread(h->fd, buf, sizeof(buf) - 1, 0);

	if (n <= 0)
		return -1;
	buf[n] = '\0';
	/* reads, merged, sectors read, ms, writes, merged, sectors written, ... */
	if (sscanf(buf, "%llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3], &f[4],
		   &f[5], &f[6]) != 7)
		return -1;
	s->rbytes = f[2] * 512;
	s->wbytes = f[6] * 512;
	return 0;
}

static void _block_close(void *hv)
{
	struct _block *h = hv;

	if (h) {
		close(h->fd);
		free(h);
	}
}

const struct pace_probe_ops pace_probe_block = {
	.name = "block",
	.open = _block_open,
	.read = _block_read,
	.close = _block_close,
	.whole_device = 1,
};

/* Probes tried in order for a file system: a parallel file system's first (its
   st_dev has no block device behind it: major 0). */
static const struct pace_probe_ops *const _probes[] = { &pace_probe_lustre, &pace_probe_gpfs,
	&pace_probe_block, NULL };

/* ---- the pace thread ---- */

#define PACE_SLOTS 256
#define PACE_FS PACE_FS_MAX
#define PACE_STEP_NS (10 * 1000000LL)

struct _fs {
	dev_t dev;
	int used;
	int tried;                   /* probes tried for it */
	const struct pace_probe_ops *ops;
	void *h;
	struct pace c;
	int n;                       /* paced buckets on it this step */
	struct pace_own own;         /* what they did this tick */
	struct pace_own pend;        /* since the controller's last step (a probe's
					sample may come only every few ticks) */
	struct pace_fs_stats st;     /* for /metrics */
};

static pthread_mutex_t _mu = PTHREAD_MUTEX_INITIALIZER;
static struct xfer_bucket *_slot[PACE_SLOTS];
static int _slot_fs[PACE_SLOTS];
static int _nslots;
static struct _fs _fs[PACE_FS];
static struct pace_params _params;
static struct pace_stats _stats;
static uint64_t _backoffs_gone;	/* of controllers reused for another device */
static pthread_t _thread;
static atomic_int _running;

void pace_run_bucket(struct xfer_bucket *b, int adaptive)
{
	pthread_mutex_lock(&_mu);
	for (int i = 0; i < _nslots; i++)
		if (_slot[i] == b) {
			_slot[i] = _slot[--_nslots];
			break;
		}
	if (adaptive && _nslots < PACE_SLOTS)
		_slot[_nslots++] = b;
	pthread_mutex_unlock(&_mu);
}

static int _fs_for(dev_t dev)
{
	int free_i = -1, idle_i = -1;

	for (int i = 0; i < PACE_FS; i++) {
		if (_fs[i].used && _fs[i].dev == dev)
			return i;
		if (!_fs[i].used && free_i < 0)
			free_i = i;
		if (_fs[i].used && _fs[i].n == 0 && idle_i < 0)
			idle_i = i;
	}
	if (free_i < 0 && (free_i = idle_i) >= 0) {	/* full: reuse an idle one */
		_backoffs_gone += _fs[free_i].c.backoffs;
		if (_fs[free_i].h)
			_fs[free_i].ops->close(_fs[free_i].h);
	}
	if (free_i < 0)
		return -1;
	memset(&_fs[free_i], 0, sizeof(_fs[free_i]));
	_fs[free_i].used = 1;
	_fs[free_i].dev = dev;
	pace_init(&_fs[free_i].c, &_params);
	_fs[free_i].st.major = major(dev);
	_fs[free_i].st.minor = minor(dev);
	snprintf(_fs[free_i].st.probe, sizeof(_fs[free_i].st.probe), "none");
	if (pace_mount_point(dev, _fs[free_i].st.mount, sizeof(_fs[free_i].st.mount)) < 0)
		_fs[free_i].st.mount[0] = '\0';
	return free_i;
}

/* The probe's answer for f now: PACE_PROBE_NEW (s filled), _STALE or _NONE. */
static int _probe(struct _fs *f, struct pace_probe_sample *s)
{
	int rc;

	if (!f->tried) {
		f->tried = 1;
		for (int i = 0; _probes[i] && !f->h; i++)
			if ((f->h = _probes[i]->open(f->dev)))
				f->ops = _probes[i];
		if (f->h) {
			log_info("pace: file system %u:%u (%s): %s probe", major(f->dev),
				 minor(f->dev), f->st.mount[0] ? f->st.mount : "mount not found",
				 f->ops->name);
			snprintf(f->st.probe, sizeof(f->st.probe), "%s", f->ops->name);
			f->c.whole = f->ops->whole_device;
		}
	}
	if (!f->h)
		return PACE_PROBE_NONE;
	rc = f->ops->read(f->h, s);
	if (rc == PACE_PROBE_NEW || rc == PACE_PROBE_STALE || rc == PACE_PROBE_NONE)
		return rc;
	log_warn("pace: file system %u:%u: the %s probe stopped answering; pacing on the "
		 "transfers' own latency only", major(f->dev), minor(f->dev), f->ops->name);
	f->ops->close(f->h);
	f->h = NULL;
	f->c.whole = 0;
	snprintf(f->st.probe, sizeof(f->st.probe), "none");
	return PACE_PROBE_NONE;
}

/* Latency samples by class added to o's. */
static void _lat_add(struct pace_own *o, const double *sum, const int *n)
{
	for (int k = 0; k < PACE_LAT_CLASSES; k++) {
		o->lat_sum[k] += sum[k];
		o->lat_n[k] += n[k];
	}
}

/* Add one tick's own I/O to what the next step will see. */
static void _pend(struct pace_own *p, const struct pace_own *o)
{
	p->rbytes += o->rbytes;
	p->wbytes += o->wbytes;
	if (o->rmax > p->rmax)	/* what may be unreported at once, not a sum over ticks */
		p->rmax = o->rmax;
	if (o->wmax > p->wmax)
		p->wmax = o->wmax;
	_lat_add(p, o->lat_sum, o->lat_n);
}

static void _step(int64_t now)
{
	struct pace_stats st = { 0 };

	for (int i = 0; i < PACE_FS; i++) {
		_fs[i].n = 0;
		memset(&_fs[i].own, 0, sizeof(_fs[i].own));
	}
	for (int k = 0; k < _nslots; k++) {
		struct xfer_bucket_io io;
		struct pace_own *o;
		int i;

		xfer_bucket_drain_io(_slot[k], &io);
		_slot_fs[k] = i = _fs_for(io.dev);
		if (i < 0)
			continue;
		o = &_fs[i].own;
		_fs[i].n++;
		o->rbytes += io.rbytes;
		o->wbytes += io.wbytes;
		o->rmax += io.rmax;	/* every transfer may have one in flight */
		o->wmax += io.wmax;
		_lat_add(o, io.lat_sum, io.lat_n);
	}
	for (int i = 0; i < PACE_FS; i++) {
		struct pace_probe_sample s;
		int rc;

		_fs[i].st.active = _fs[i].used && _fs[i].n > 0;
		if (!_fs[i].used || _fs[i].n == 0)
			continue;
		_pend(&_fs[i].pend, &_fs[i].own);
		rc = _probe(&_fs[i], &s);
		if (rc != PACE_PROBE_STALE) {
			pace_step(&_fs[i].c, now, rc == PACE_PROBE_NEW ? &s : NULL, &_fs[i].pend);
			memset(&_fs[i].pend, 0, sizeof(_fs[i].pend));
		}
		pace_fs_stats_of(&_fs[i].c, now, &_fs[i].st);
		st.controllers++;
		st.held += _fs[i].c.held;
		st.rate += _fs[i].c.held ? 0 : _fs[i].c.rate;
		st.idle += pace_idle(&_fs[i].c);
		st.capacity += _fs[i].c.capacity;
	}
	for (int k = 0; k < _nslots; k++) {
		struct _fs *f = _slot_fs[k] >= 0 ? &_fs[_slot_fs[k]] : NULL;

		if (!f)
			continue;
		xfer_bucket_set_paused(_slot[k], f->c.held);
		if (!f->c.held)
			xfer_bucket_adjust_rate(_slot[k], (uint64_t)(f->c.rate / f->n));
	}
	st.backoffs = _backoffs_gone;
	for (int i = 0; i < PACE_FS; i++)
		st.backoffs += _fs[i].c.backoffs;
	_stats = st;
}

static void *_main(void *arg)
{
	(void)arg;
	while (atomic_load(&_running)) {
		struct timespec ts = { 0, PACE_STEP_NS };
		int any;

		pthread_mutex_lock(&_mu);
		any = _nslots > 0;
		if (any) {
			_step(mono_ns());
		} else {	/* nothing paced: only the count of backoffs stays */
			uint64_t b = _stats.backoffs;

			memset(&_stats, 0, sizeof(_stats));
			_stats.backoffs = b;
			for (int i = 0; i < PACE_FS; i++)
				_fs[i].st.active = 0;
		}
		pthread_mutex_unlock(&_mu);
		if (!any)
			ts.tv_nsec = 100 * 1000000L;	/* nothing paced: look less often */
		nanosleep(&ts, NULL);
	}
	return NULL;
}

int pace_off_parse(const char *s, unsigned *off)
{
	static const struct {
		const char *name;
		unsigned bit;
	} rules[] = { { "classes", PACE_OFF_CLASSES }, { "quiet", PACE_OFF_QUIET },
		      { "release", PACE_OFF_RELEASE }, { "overhead", PACE_OFF_OVERHEAD } };

	*off = 0;
	while (s && *s) {
		size_t len = strcspn(s, ","), i;

		for (i = 0; i < sizeof(rules) / sizeof(rules[0]); i++)
			if (strlen(rules[i].name) == len && !strncmp(s, rules[i].name, len))
				break;
		if (i == sizeof(rules) / sizeof(rules[0]))
			return -1;
		*off |= rules[i].bit;
		s += len + (s[len] == ',');
	}
	return 0;
}

int pace_run_start(struct daemon *d, char *err, size_t errlen)
{
	/* A measurement hook, not a setting: bench-busy compares the controller
	   with each of its rules turned off, side by side (docs/performance.md). */
	const char *off = secure_getenv("STAGEHAND_PACE_OFF");
	int e;

	(void)d;
	pace_default_params(&_params);
	if (off && pace_off_parse(off, &_params.off) < 0) {
		snprintf(err, errlen, "STAGEHAND_PACE_OFF=%s: not a list of classes, quiet, release "
			 "and overhead", off);
		return -1;
	}
	if (_params.off & PACE_OFF_OVERHEAD)
		_params.own_overhead = 0;
	if (_params.off)
		log_warn("pace: STAGEHAND_PACE_OFF=%s: these rules of the scavenger are off "
			 "(a measurement hook)", off);
	atomic_store(&_running, 1);
	if ((e = pthread_create(&_thread, NULL, _main, NULL)) != 0) {
		atomic_store(&_running, 0);
		snprintf(err, errlen, "cannot start the pace thread: pthread_create: %s",
			 strerror(e));
		return -1;
	}
	return 0;
}

void pace_run_stop(void)
{
	if (!atomic_exchange(&_running, 0))
		return;
	pthread_join(_thread, NULL);
	pthread_mutex_lock(&_mu);
	for (int i = 0; i < PACE_FS; i++)
		if (_fs[i].used && _fs[i].h)
			_fs[i].ops->close(_fs[i].h);
	memset(_fs, 0, sizeof(_fs));
	_nslots = 0;
	pthread_mutex_unlock(&_mu);
}

void pace_run_stats(struct pace_stats *s)
{
	pthread_mutex_lock(&_mu);
	*s = _stats;
	pthread_mutex_unlock(&_mu);
}

int pace_run_fs_stats(struct pace_fs_stats *out, int max)
{
	int n = 0;

	pthread_mutex_lock(&_mu);
	for (int i = 0; i < PACE_FS && n < max; i++)
		if (_fs[i].used)
			out[n++] = _fs[i].st;
	pthread_mutex_unlock(&_mu);
	return n;
}
