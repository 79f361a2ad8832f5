/* test_pace.c - the adaptive scavenger's controller, driven with a fake clock. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "pace.h"
#include "tests/tap.h"

#define MIB (1024.0 * 1024.0)
#define MS 1000000LL

/*
 * A simulated device of 200 MiB/s shared by a job and the scavenger: each
 * 10 ms step the job asks for job_bps, the scavenger for its rate; the job
 * is served first up to what the device leaves (in the worst case for the
 * job the two share it equally: see share). Counters as a probe sees them.
 */
struct sim {
	struct pace c;
	struct pace_probe_sample dev;
	int64_t now;
	double job_bps, cap, share;
	double moved, job_moved, job_wanted;
	double lat;          /* own latency reported, ns/MiB */
};

static void _run(struct sim *s, int steps)
{
	for (int i = 0; i < steps; i++) {
		double dt = 0.01, rate = s->c.held ? 0 : s->c.rate, want = rate * dt;
		double job = s->job_bps * dt, room = s->cap * dt, ours, jobgot;
		struct pace_own own = { 0 };

		if (job + want <= room) {
			jobgot = job;
			ours = want;
		} else {	/* contended: the scavenger takes share of the device */
			ours = want < room * s->share ? want : room * s->share;
			jobgot = job < room - ours ? job : room - ours;
		}
		s->job_wanted += job;
		s->job_moved += jobgot;
		s->moved += ours;
		s->dev.wbytes += (uint64_t)(jobgot + ours);
		own.wbytes = (uint64_t)ours;
		own.wmax = 8 << 20;
		own.rmax = 8 << 20;
		if (ours > 0) {
			own.lat_sum[0] = s->lat * (jobgot > 0 ? 2 : 1);
			own.lat_n[0] = 1;
		}
		s->now += 10 * MS;
		pace_step(&s->c, s->now, &s->dev, &own);
	}
}

/*
 * Two kinds of write in one copy (a piece written alone, 5 ms/MiB, and one
 * while the copy's reader is in flight, 12 ms/MiB), no probe: each is at
 * its own base, so the rate grows; measured against one base for both, the
 * second kind was 2.4x it and halved the rate every time.
 */
static void _classes(const struct pace_params *p)
{
	struct pace c;
	int64_t t = 5000 * MS;

	pace_init(&c, p);
	for (int i = 0; i < 300; i++) {
		struct pace_own own = { 0 };

		own.lat_sum[4] = 5e6;
		own.lat_n[4] = 1;
		own.lat_sum[5] = 12e6;
		own.lat_n[5] = 1;
		t += 10 * MS;
		pace_step(&c, t, NULL, &own);
	}
	ok(c.rate > 100 * MIB, "two kinds of write, each at its own base: the rate grows "
	   "(%.0f MiB/s)", c.rate / MIB);
}

/*
 * A device that gives 100 MiB/s and then queues (a throttle: 5 ms/MiB below
 * it, 50 ms/MiB at it), with only our I/O on it, as a block probe sees it.
 * Returns the lowest throughput of a step over the last 2 s of 4 s.
 */
static double _throttled(const struct pace_params *p, int whole, struct pace *c)
{
	struct pace_probe_sample d = { 0, 0 };
	int64_t t = 5000 * MS;
	double low = 1e15;

	pace_init(c, p);
	c->whole = whole;
	for (int i = 0; i < 400; i++) {
		double r = c->held ? 0 : c->rate, moved = (r < 100 * MIB ? r : 100 * MIB) * 0.01;
		struct pace_own own = { .wbytes = (uint64_t)moved, .wmax = 1 << 20, .rmax = 1 << 20 };

		d.wbytes += (uint64_t)moved;
		if (moved > 0) {
			own.lat_sum[9] = r < 100 * MIB ? 5e6 : 50e6;
			own.lat_n[9] = 1;
		}
		t += 10 * MS;
		pace_step(c, t, &d, &own);
		if (i >= 200 && moved / 0.01 < low)
			low = moved / 0.01;
	}
	return low;
}

/*
 * The whole device seen (block probe): our own queuing at full speed is
 * learned, never taken for others; once others are there (below a hold),
 * latency is measured against what ours alone gave.
 */
static void _whole_device(const struct pace_params *p)
{
	struct pace c;
	double whole = _throttled(p, 1, &c), part;
	struct pace_probe_sample d = { 0, 0 };
	int64_t t = 9000 * MS;
	double r0;

	ok(!c.held && whole >= 99 * MIB, "whole device, nobody else: our queuing at the "
	   "device's limit does not slow us (lowest step %.1f MiB/s)", whole / MIB);
	ok(c.own_lat[9] > 30e6, "our own latency at full speed learned (%.0f ms/MiB)",
	   c.own_lat[9] / 1e6);
	part = _throttled(p, 0, &c);
	ok(part < 99 * MIB, "a client probe (part of the device): the same latency still cuts "
	   "the rate at the limit (lowest step %.1f MiB/s)", part / MIB);

	/* Others at 4 MiB/s of reads (not yet a hold: that takes 1.5 s of it):
	   latency at what ours alone gave (50 ms/MiB, 10x the lowest) lets the
	   rate grow; 3x that slows it. */
	_throttled(p, 1, &c);
	d.wbytes = c.last.wbytes;
	t = c.last_ns;
	for (int phase = 0; phase < 2; phase++) {
		r0 = c.rate;
		for (int i = 0; i < 50; i++) {
			struct pace_own own = { .wbytes = 1 << 20, .wmax = 1 << 20, .rmax = 1 << 20 };

			d.wbytes += 1 << 20;
			d.rbytes += 4 * (1 << 20) / 100;
			own.lat_sum[9] = phase ? 150e6 : 50e6;
			own.lat_n[9] = 1;
			t += 10 * MS;
			pace_step(&c, t, &d, &own);
		}
		ok(!c.held && pace_others(&c) > p->foreign_min, "others at 4 MiB/s seen (%.1f MiB/s), "
		   "not held (phase %d)", pace_others(&c) / MIB, phase);
		if (!phase)
			ok(c.rate >= r0, "others there, latency at ours alone: the rate does not fall "
			   "(%.0f -> %.0f MiB/s)", r0 / MIB, c.rate / MIB);
		else
			ok(c.rate < r0 / 2, "others there, latency 3x ours alone: the rate falls "
			   "(%.0f -> %.0f MiB/s)", r0 / MIB, c.rate / MIB);
	}
}

int main(void)
{
	struct pace_params p;
	struct sim s;
	uint64_t b0;

	pace_default_params(&p);
	memset(&s, 0, sizeof(s));
	pace_init(&s.c, &p);
	s.now = 1000 * MS;
	s.cap = 200 * MIB;
	s.share = 0.5;
	s.lat = 40e6 / 8;	/* 8 MiB in 40 ms uncontended */

	ok(pace_step(&s.c, s.now, &s.dev, &(struct pace_own){ 0 }) == p.min_rate,
	   "first step: the minimum rate");
	/* Idle device: the rate climbs to what the device gives. */
	_run(&s, 300);
	ok(!s.c.held, "idle device: not held");
	ok(s.c.rate > 150 * MIB, "idle device: ramps to most of the device in 3 s (%.0f MiB/s)",
	   s.c.rate / MIB);
	ok(s.c.capacity > 150 * MIB && s.c.capacity <= 201 * MIB,
	   "capacity estimated from what the device moved (%.0f MiB/s)", s.c.capacity / MIB);
	ok(pace_idle(&s.c) > 150 * MIB, "idle bandwidth close to the capacity");

	/* A job's write burst: held within a few steps, and stays held. */
	b0 = s.c.backoffs;
	s.job_bps = 200 * MIB;
	_run(&s, 1);
	{
		int steps = 1;

		while (!s.c.held && steps < 50) {
			_run(&s, 1);
			steps++;
		}
		ok(s.c.held, "burst: held");
		/* The job gets half the device (1 MiB a step) until others' bytes exceed
		   one unreported 8 MiB chunk of ours plus 1 MiB: about 10 steps. */
		ok(steps <= 12, "burst: held within %d steps of 10 ms (limit 12: one chunk of "
		   "8 MiB may be in flight unreported)", steps);
	}
	ok(s.c.backoffs == b0 + 1, "one backoff counted");
	s.job_moved = s.job_wanted = 0;
	_run(&s, 200);
	ok(s.c.held, "held for the whole burst");
	ok(s.job_moved >= s.job_wanted * 0.999, "the job got the device while held (%.4f)",
	   s.job_moved / s.job_wanted);
	ok(pace_idle(&s.c) < 20 * MIB, "idle bandwidth near 0 during the burst (%.0f MiB/s)",
	   pace_idle(&s.c) / MIB);

	/* The burst ends: released after the quiet time, not before. */
	s.job_bps = 0;
	_run(&s, (int)(p.quiet_ns / (10 * MS)) - 2);
	ok(s.c.held, "still held before the quiet time has passed");
	_run(&s, 4);
	ok(!s.c.held, "released after the quiet time");
	ok(s.c.rate >= 0.9 * s.c.capacity, "resumes at what the probe saw left idle while it was "
	   "quiet (%.0f of %.0f MiB/s), not at half the rate before", s.c.rate / MIB,
	   s.c.capacity / MIB);

	/* A trickle of others' I/O below PaceForeignMin does not hold it. */
	s.job_bps = 1 * MIB;
	_run(&s, 200);
	ok(!s.c.held, "1 MiB/s of others' I/O: not held");

	/* Own latency over target (a contended device without a probe): slows down. */
	{
		struct pace c;
		struct pace_own own = { 0 };
		int64_t t = 5000 * MS;
		double r0;

		pace_init(&c, &p);
		own.lat_n[0] = 1;
		own.lat_sum[0] = 5e6;
		for (int i = 0; i < 200; i++) {
			t += 10 * MS;
			pace_step(&c, t, NULL, &own);
		}
		r0 = c.rate;
		ok(r0 > 50 * MIB, "no probe, latency at its base: the rate grows (%.0f MiB/s)",
		   r0 / MIB);
		own.lat_sum[0] = 15e6;	/* 3x the base: far over target */
		for (int i = 0; i < 20; i++) {
			t += 10 * MS;
			pace_step(&c, t, NULL, &own);
		}
		ok(c.rate < r0 / 2, "latency 3x the base: the rate falls by half or more (%.0f -> "
		   "%.0f MiB/s)", r0 / MIB, c.rate / MIB);
		ok(c.rate >= p.min_rate, "never below the minimum rate");
		own.lat_sum[0] = 6e6;	/* 1.2x: under the 1.5x target */
		r0 = c.rate;
		for (int i = 0; i < 50; i++) {
			t += 10 * MS;
			pace_step(&c, t, NULL, &own);
		}
		ok(c.rate > r0, "latency under target: grows again");
		/* A gap (no paced transfer for seconds): starts afresh, keeps its rate. */
		r0 = c.rate;
		t += 5000 * MS;
		ok(pace_step(&c, t, NULL, &own) == r0, "after a gap: no jump");
	}

	/* Our own chunks: the device shows 1 MiB a step, we report 8 MiB every 8th
	   step (after the chunk completed): never others' load. */
	{
		struct pace c;
		struct pace_probe_sample d = { 0, 0 };
		int held = 0;

		pace_init(&c, &p);
		for (int i = 1; i <= 800; i++) {
			struct pace_own own = { .rmax = 8 << 20, .wmax = 8 << 20 };

			d.wbytes += 1 << 20;
			d.rbytes += 2 << 20;
			if (i % 8 == 0) {
				own.wbytes = 8 << 20;
				own.rbytes = 16 << 20;
			}
			pace_step(&c, 1000 * MS + i * 10 * MS, &d, &own);
			held |= c.held;
		}
		ok(!held && c.backoffs == 0, "own chunks reported after they completed: never held "
		   "(%llu backoffs)", (unsigned long long)c.backoffs);
		/* ... and a job's 1 MiB writes beside them are seen within two chunks. */
		for (int i = 1; i <= 16 && !c.held; i++) {
			struct pace_own own = { .rmax = 8 << 20, .wmax = 8 << 20 };

			d.wbytes += (1 << 20) + (1 << 20);
			if (i % 8 == 0)
				own.wbytes = 8 << 20;
			pace_step(&c, 1000 * MS + (800 + i) * 10 * MS, &d, &own);
			if (c.held)
				ok(i <= 16, "a job's writes beside ours: held after %d steps", i);
		}
		ok(c.held, "held");
	}

	_classes(&p);
	_whole_device(&p);

	/* The file system's own writes for ours (journal, extents: 6% here, as
	   measured on ext4) at 100 MiB/s are not others': never held in 10 s.
	   A job's 40 MiB/s beside them is seen within 10 steps. */
	{
		struct pace c;
		struct pace_probe_sample d = { 0, 0 };
		int held = 0, i;

		pace_init(&c, &p);
		for (i = 1; i <= 1000; i++) {
			struct pace_own own = { .rbytes = 2 << 20, .wbytes = 1 << 20, .rmax = 1 << 20,
						.wmax = 1 << 20 };

			d.wbytes += (uint64_t)((1 << 20) * 1.06);
			d.rbytes += 2 << 20;
			pace_step(&c, 1000 * MS + i * 10 * MS, &d, &own);
			held |= c.held;
		}
		ok(!held, "our writes plus 6%% of the file system's own: never held (%llu backoffs)",
		   (unsigned long long)c.backoffs);
		for (i = 1; i <= 50 && !c.held; i++) {
			struct pace_own own = { .rbytes = 2 << 20, .wbytes = 1 << 20, .rmax = 1 << 20,
						.wmax = 1 << 20 };

			d.wbytes += (uint64_t)((1 << 20) * 1.06) + (uint64_t)(0.4 * (1 << 20));
			d.rbytes += 2 << 20;
			pace_step(&c, 1000 * MS + (1000 + i) * 10 * MS, &d, &own);
		}
		ok(c.held && i <= 10, "a job's 40 MiB/s beside them: held after %d steps", i);
	}

	/* The measurement hook: STAGEHAND_PACE_OFF's names, and a rule turned off
	   behaves as the controller did without it. */
	{
		unsigned off = 99;
		struct pace_params q = p;
		struct pace c;

		ok(pace_off_parse("classes,quiet,release,overhead", &off) == 0 && off ==
		   (PACE_OFF_CLASSES | PACE_OFF_QUIET | PACE_OFF_RELEASE | PACE_OFF_OVERHEAD),
		   "STAGEHAND_PACE_OFF: the four rules by name");
		ok(pace_off_parse("", &off) == 0 && off == 0, "STAGEHAND_PACE_OFF empty: none off");
		ok(pace_off_parse("quiet,bogus", &off) < 0 && pace_off_parse("quie", &off) < 0,
		   "STAGEHAND_PACE_OFF: an unknown or partial name refused");
		q.off = PACE_OFF_QUIET;
		ok(_throttled(&q, 1, &c) < 99 * MIB, "quiet off: our queuing counted again (lowest "
		   "step %.1f MiB/s)", _throttled(&q, 1, &c) / MIB);
	}

	/* Counters that go backwards (device reset) are not a burst. */
	{
		struct pace c;
		struct pace_probe_sample d = { 1ULL << 40, 1ULL << 40 };
		struct pace_own own = { 0 };

		pace_init(&c, &p);
		pace_step(&c, 1000 * MS, &d, &own);
		d.rbytes = d.wbytes = 0;
		pace_step(&c, 1010 * MS, &d, &own);
		ok(!c.held, "counters reset: not held");
	}
	return tap_done();
}
