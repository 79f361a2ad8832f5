/*
 * test_probes.c - the adaptive scavenger's Lustre and Spectrum Scale
 * probes against counter files in the documented formats
 * (tests/unit/data/lustre, tests/unit/data/gpfs; their README says where the
 * formats come from: written, not recorded), the controller fed with their
 * samples, and the per-file-system /metrics series.
 *
 * The probes read their system files under STAGEHAND_PACE_ROOT, a scratch
 * tree this test builds from the data; mmpmon is data/gpfs/fake-mmpmon
 * (STAGEHAND_PACE_MMPMON).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "pace.h"
#include "pace_probe.h"
#include "tests/tap.h"

#define MIB (1024.0 * 1024.0)
#define NS 1000000000LL

static char _data[4096], _tmp[4096];

/* data/<rel> into a new string (free()), its length in *n. */
static char *_read(const char *dir, const char *rel, size_t *n)
{
	char path[8192];
	FILE *f;
	char *s;
	long len;

	snprintf(path, sizeof(path), "%s/%s", dir, rel);
	if (!(f = fopen(path, "rb")))
		return NULL;
	fseek(f, 0, SEEK_END);
	len = ftell(f);
	rewind(f);
	s = malloc((size_t)len + 1);
	if (s && fread(s, 1, (size_t)len, f) != (size_t)len) {
		free(s);
		s = NULL;
	}
	fclose(f);
	if (s) {
		s[len] = '\0';
		*n = (size_t)len;
	}
	return s;
}

/* mkdir -p of path's parent, then write s there. */
static int _put(const char *root, const char *rel, const char *s, size_t n)
{
	char path[8192];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	for (char *p = path + strlen(root) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		mkdir(path, 0755);
		*p = '/';
	}
	if (!(f = fopen(path, "wb")))
		return -1;
	fwrite(s, 1, n, f);
	return fclose(f);
}

/* data file into the scratch root. */
static int _copy(const char *root, const char *rel, const char *data_rel)
{
	size_t n;
	char *s = _read(_data, data_rel, &n);
	int rc = s ? _put(root, rel, s, n) : -1;

	free(s);
	return rc;
}

/* A fresh scratch root: <tmp>/<name>. */
static const char *_root(const char *name)
{
	static char r[8192];

	snprintf(r, sizeof(r), "%s/%s", _tmp, name);
	mkdir(r, 0755);
	setenv("STAGEHAND_PACE_ROOT", r, 1);
	return r;
}

/* stderr into a file while f runs: what the probe logged. */
static int _err_fd = -1;
static char _err_path[8192];
static void _capture(void)
{
	int fd;

	snprintf(_err_path, sizeof(_err_path), "%s/stderr", _tmp);
	fflush(stderr);
	_err_fd = dup(2);
	fd = open(_err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	dup2(fd, 2);
	close(fd);
}
static char *_captured(void)
{
	size_t n;
	char *s;

	fflush(stderr);
	dup2(_err_fd, 2);
	close(_err_fd);
	if ((s = _read(_tmp, "stderr", &n)))	/* one TAP line: newlines as spaces */
		for (char *p = s; *p; p++)
			if (*p == '\n')
				*p = ' ';
	return s;
}

static double _snapshot(const char *s)
{
	double t = 0;

	sscanf(s, "snapshot_time %lf", &t);
	return t;
}

/* ---- Lustre ---- */

static void _lustre_parser(void)
{
	static const char *const bad[] = { "bad-truncated", "bad-no-header", "bad-huge",
		"bad-negative", "bad-missing-sum", "bad-twice", "bad-unit", "bad-binary" };
	struct pace_probe_sample a, b;
	char err[512], fs[16];
	size_t n1, n2, n;
	char *s1 = _read(_data, "lustre/stats-2.15-1", &n1), *s2 = _read(_data, "lustre/stats-2.15-2", &n2);
	char *s;

	ok(s1 && s2, "lustre: the data files are there (%s)", _data);
	if (!s1 || !s2)
		return;
	ok(pace_lustre_parse_stats(s1, n1, &a, err, sizeof(err)) == 0 &&
	   a.rbytes == 871878430720ULL && a.wbytes == 2374043185152ULL,
	   "2.15 llite stats: read_bytes and write_bytes sums (%s)", err);
	ok(pace_lustre_parse_stats(s2, n2, &b, err, sizeof(err)) == 0, "the next sample: %s", err);
	{
		double dt = _snapshot(s2) - _snapshot(s1);
		double r = (double)(b.rbytes - a.rbytes) / dt / MIB, w = (double)(b.wbytes - a.wbytes) / dt / MIB;

		ok(dt > 0.9 && dt < 1.1 && r > 179.9 && r < 180.0 && w > 409.9 && w < 410.0,
		   "two samples 1 s apart: 180 MiB/s read, 410 MiB/s written (%.2f, %.2f over %.6f s)",
		   r, w, dt);
	}
	s = _read(_data, "lustre/stats-2.12", &n);
	ok(s && pace_lustre_parse_stats(s, n, &a, err, sizeof(err)) == 0 &&
	   a.rbytes == 3ULL << 30 && a.wbytes == 7ULL << 30,
	   "2.12 (/proc, secs.usecs, no start_time) stats: %s", err);
	free(s);
	s = _read(_data, "lustre/stats-2.15-reset", &n);
	ok(s && pace_lustre_parse_stats(s, n, &a, err, sizeof(err)) == 0 &&
	   a.rbytes == 12ULL << 20 && a.wbytes == 0,
	   "cleared stats: write_bytes not listed (never used since) is 0: %s", err);
	free(s);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char rel[64];
		int rc;

		snprintf(rel, sizeof(rel), "lustre/%s", bad[i]);
		s = _read(_data, rel, &n);
		err[0] = '\0';
		rc = s ? pace_lustre_parse_stats(s, n, &a, err, sizeof(err)) : 0;
		ok(rc == -1 && err[0], "%s refused: %s", bad[i], err);
		free(s);
	}
	ok(pace_lustre_fsname("10.10.0.1@o2ib:10.10.0.2@o2ib:/scratch", fs, sizeof(fs), err,
			      sizeof(err)) == 0 && !strcmp(fs, "scratch"), "fsname after failover MGS nids");
	ok(pace_lustre_fsname("mgs@tcp:/fs-1/sub/dir", fs, sizeof(fs), err, sizeof(err)) == 0 &&
	   !strcmp(fs, "fs-1"), "fsname of a subdirectory mount");
	ok(pace_lustre_fsname("/dev/sda1", fs, sizeof(fs), err, sizeof(err)) < 0 &&
	   pace_lustre_fsname("m@tcp:/ninechars", fs, sizeof(fs), err, sizeof(err)) < 0 &&
	   pace_lustre_fsname("m@tcp:/a b", fs, sizeof(fs), err, sizeof(err)) < 0 &&
	   pace_lustre_fsname("m@tcp:/", fs, sizeof(fs), err, sizeof(err)) < 0,
	   "no fsname, 9 characters, a space, empty: refused");
	ok(pace_lustre_is_instance("scratch-ffff9a4b3c2d1000", "scratch") &&
	   pace_lustre_is_instance("fs-1-ffff9a4b3c2d1000", "fs-1") &&
	   !pace_lustre_is_instance("scratch2-ffff9a4b3c2d1000", "scratch") &&
	   !pace_lustre_is_instance("scratch-ffff9a4b3c2d100", "scratch") &&
	   !pace_lustre_is_instance("scratch-FFFF9A4B3C2D1000", "scratch") &&
	   !pace_lustre_is_instance("fs-1-ffff9a4b3c2d1000", "fs"),
	   "llite instance names: <fsname>-<16 lowercase hex digits> exactly");
	free(s1);
	free(s2);
}

static void _mounts(void)
{
	struct pace_mount m[16];
	char err[256], point[256];
	int n;

	_root("mounts");
	_copy(getenv("STAGEHAND_PACE_ROOT"), "proc/self/mountinfo", "lustre/mountinfo");
	n = pace_mounts(NULL, m, 16, err, sizeof(err));
	ok(n == 9, "mountinfo: 9 mounts (%d: %s)", n, n < 0 ? err : "");
	ok(n == 9 && !strcmp(m[4].point, "/mnt/local scratch"), "\\040 in a mount point is a space");
	ok(pace_mounts("lustre", m, 16, err, sizeof(err)) == 3 && m[0].major == 0 && m[0].minor == 52,
	   "3 Lustre mounts, the first 0:52");
	ok(pace_mount_point(makedev(0, 52), point, sizeof(point)) == 0 &&
	   !strcmp(point, "/lustre/scratch"), "the mount point of 0:52 is its root's mount, not "
	   "the bind mount of /projects (%s)", point);
	ok(pace_mount_point(makedev(7, 7), point, sizeof(point)) < 0, "no mount of 7:7");
	ok(pace_mount_point(makedev(0, 77), point, sizeof(point)) < 0, "a FUSE mount (a user's "
	   "may be): its mount point not shown");
	_put(getenv("STAGEHAND_PACE_ROOT"), "proc/self/mountinfo", "22 1 8:1 / /\n", 12);
	ok(pace_mounts(NULL, m, 16, err, sizeof(err)) == -1 && strstr(err, ":1:"),
	   "a line that is not mountinfo's: refused with its line (%s)", err);
}

#define SCRATCH_LLITE "sys/kernel/debug/lustre/llite/scratch-ffff9a4b3c2d1000/stats"

static void _lustre_probe(void)
{
	const struct pace_probe_ops *p = &pace_probe_lustre;
	struct pace_probe_sample s;
	const char *r = _root("lustre");
	char *log;
	void *h;

	_copy(r, "proc/self/mountinfo", "lustre/mountinfo");
	_copy(r, SCRATCH_LLITE, "lustre/stats-2.15-1");
	_copy(r, "sys/kernel/debug/lustre/llite/home-ffff9a4b3c2e8000/stats", "lustre/stats-2.12");
	ok(p->open(makedev(8, 1)) == NULL, "ext4 on 8:1: not the Lustre probe's");
	h = p->open(makedev(0, 52));
	ok(h != NULL, "Lustre at /lustre/scratch (0:52): its llite instance found in debugfs");
	if (!h)
		return;
	ok(p->read(h, &s) == PACE_PROBE_NEW && s.rbytes == 871878430720ULL,
	   "read: the mount's counters");
	_copy(r, SCRATCH_LLITE, "lustre/stats-2.15-2");
	ok(p->read(h, &s) == PACE_PROBE_NEW && s.rbytes == 871878430720ULL + 180 * (1 << 20),
	   "read again: the new sample");
	_copy(r, SCRATCH_LLITE, "lustre/bad-huge");
	_capture();
	ok(p->read(h, &s) == -1, "a hostile stats file: the probe says drop it");
	log = _captured();
	ok(log && strstr(log, "pace: Lustre client counters") && strstr(log, "line 4"),
	   "... with a log line naming the file and line: %s", log ? log : "(none)");
	free(log);
	p->close(h);

	/* Two instances of the fsname for one mount: refused, not guessed. */
	_copy(r, SCRATCH_LLITE, "lustre/stats-2.15-1");
	_copy(r, "sys/kernel/debug/lustre/llite/scratch-ffff9a4b1f770800/stats", "lustre/stats-2.15-1");
	_capture();
	h = p->open(makedev(0, 52));
	log = _captured();
	ok(h == NULL, "two llite instances of 'scratch': no probe");
	ok(log && strstr(log, "2 llite instances of 'scratch'") && strstr(log, "/lustre/scratch"),
	   "... and the log says why: %s", log ? log : "(none)");
	free(log);
	if (h)
		p->close(h);

	/* The file system mounted twice (two superblocks): refused. */
	r = _root("lustre-twice");
	_copy(r, "proc/self/mountinfo", "lustre/mountinfo-twice");
	_copy(r, SCRATCH_LLITE, "lustre/stats-2.15-1");
	_capture();
	h = p->open(makedev(0, 52));
	log = _captured();
	ok(h == NULL && log && strstr(log, "also mounted at /lustre/scratch-ro"),
	   "scratch mounted twice: no probe, and why: %s", log ? log : "(none)");
	free(log);
	if (h)
		p->close(h);

	/* An older client: /proc/fs/lustre. */
	r = _root("lustre-212");
	_copy(r, "proc/self/mountinfo", "lustre/mountinfo");
	_copy(r, "proc/fs/lustre/llite/home-ffff9a4b3c2e8000/stats", "lustre/stats-2.12");
	h = p->open(makedev(0, 53));
	ok(h && p->read(h, &s) == PACE_PROBE_NEW && s.wbytes == 7ULL << 30,
	   "a 2.12 client's /proc/fs/lustre/llite stats for /lustre/home");
	if (h)
		p->close(h);
	/* No instance at all (debugfs not mounted): refused. */
	r = _root("lustre-none");
	_copy(r, "proc/self/mountinfo", "lustre/mountinfo");
	_capture();
	h = p->open(makedev(0, 52));
	log = _captured();
	ok(h == NULL && log && strstr(log, "is debugfs mounted"), "no llite directory: no probe, "
	   "and why: %s", log ? log : "(none)");
	free(log);
}

/* ---- Spectrum Scale ---- */

static void _gpfs_parser(void)
{
	struct pace_gpfs_row a, b;
	char err[512], line[8192], fs[64];
	size_t n;
	char *s = _read(_data, "gpfs/fs_io_s-1", &n), *s2 = _read(_data, "gpfs/fs_io_s-2", &n);
	FILE *f;
	int i = 0, refused = 0;

	ok(s && s2, "gpfs: the data files are there");
	if (!s || !s2)
		return;
	*strchr(s, '\n') = '\0';
	*strchr(s2, '\n') = '\0';
	ok(pace_gpfs_parse_line(s, &a, err, sizeof(err)) == 1 && !strcmp(a.fs, "gpfs0") &&
	   a.br == 205607400434ULL && a.bw == 74839282351ULL &&
	   !strcmp(a.cluster, "hpc.example.gpfs.net"), "fs_io_s: _fs_, _br_, _bw_, _cl_ (%s)", err);
	ok(pace_gpfs_parse_line(s2, &b, err, sizeof(err)) == 1, "the next answer: %s", err);
	{
		double dt = (double)(b.t - a.t) + ((double)b.tu - (double)a.tu) / 1e6;

		ok(dt > 0.1 && dt < 0.101 && (b.br - a.br) / dt / MIB > 307 &&
		   (b.br - a.br) / dt / MIB < 309, "two answers 100 ms apart: %.1f MiB/s read",
		   (b.br - a.br) / dt / MIB);
	}
	ok(pace_gpfs_parse_line("_fs_io_s_ _n_ 10.20.0.17 _nn_ c0417 _rc_ 1 _t_ 1764187200 _tu_ 5",
				&a, err, sizeof(err)) == 0, "_rc_ 1 (no file system mounted): skipped");
	ok(pace_gpfs_parse_line("_ver_ _n_ 10.20.0.17 _nn_ c0417 _v_ 3 _lv_ 3 _vt_ 0", &a, err,
				sizeof(err)) == 0, "another request's answer: skipped");
	snprintf(line, sizeof(line), "%s/gpfs/bad-lines", _data);
	if ((f = fopen(line, "r"))) {
		while (fgets(line, sizeof(line), f)) {
			line[strcspn(line, "\n")] = '\0';
			i++;
			err[0] = '\0';
			if (pace_gpfs_parse_line(line, &a, err, sizeof(err)) == -1 && err[0])
				refused++;
			else
				tap_diag("bad-lines:%d taken: %s", i, line);
		}
		fclose(f);
	}
	ok(i == 9 && refused == 9, "bad-lines: each of %d refused (%d)", i, refused);
	ok(pace_gpfs_fsname("/dev/gpfs1", fs, sizeof(fs), err, sizeof(err)) == 0 &&
	   !strcmp(fs, "gpfs1") && pace_gpfs_fsname("gpfs0", fs, sizeof(fs), err, sizeof(err)) == 0 &&
	   pace_gpfs_fsname("gp fs", fs, sizeof(fs), err, sizeof(err)) < 0,
	   "GPFS device names from the mount source");
	free(s);
	free(s2);
}

/* read() until it says something other than STALE/NONE, or until 20 s. */
static int _poll(const struct pace_probe_ops *p, void *h, struct pace_probe_sample *s, int want_none)
{
	struct timespec ts = { 0, 5 * 1000000L };

	for (int i = 0; i < 4000; i++) {
		int rc = p->read(h, s);

		if (rc == PACE_PROBE_NEW || rc == -1 || (want_none && rc == PACE_PROBE_NONE))
			return rc;
		nanosleep(&ts, NULL);
	}
	return -2;
}

static void _gpfs_probe(void)
{
	const struct pace_probe_ops *p = &pace_probe_gpfs;
	struct pace_probe_sample s;
	char cmd[8192];
	const char *r = _root("gpfs");
	char *log;
	void *h, *h1;
	int rc;

	snprintf(cmd, sizeof(cmd), "%s/gpfs/fake-mmpmon", _data);
	setenv("STAGEHAND_PACE_MMPMON", cmd, 1);
	_copy(r, "proc/self/mountinfo", "gpfs/mountinfo");
	_copy(r, "mmpmon.out", "gpfs/mmpmon.out");
	ok(p->open(makedev(8, 1)) == NULL, "ext4: not the GPFS probe's");
	h = p->open(makedev(0, 45));
	h1 = p->open(makedev(0, 46));
	ok(h && h1, "gpfs0 at /gpfs/fs0, gpfs1 (/dev/gpfs1) at /gpfs/fs1: served");
	if (!h || !h1)
		return;
	ok(_poll(p, h, &s, 0) == PACE_PROBE_NEW && s.rbytes == 205607400434ULL &&
	   s.wbytes == 74839282351ULL, "mmpmon's first answer for gpfs0");
	ok(_poll(p, h1, &s, 0) == PACE_PROBE_NEW && s.rbytes == 9811220,
	   "... and for gpfs1 (one mmpmon for both)");
	rc = p->read(h, &s);
	ok(rc == PACE_PROBE_STALE || rc == PACE_PROBE_NEW, "between answers: stale (%d)", rc);
	ok(_poll(p, h, &s, 0) == PACE_PROBE_NEW && s.wbytes == 74839282351ULL + 52 * (1 << 20),
	   "the second answer: 52 MiB more written");
	ok(_poll(p, h, &s, 0) == PACE_PROBE_NEW && s.wbytes == 74839282351ULL + 99 * (1 << 20),
	   "the third");
	_capture();
	rc = _poll(p, h, &s, 1);
	ok(rc == PACE_PROBE_NONE, "mmpmon exits: no sample (pace on latency), the probe stays (%d)", rc);
	rc = _poll(p, h, &s, 0);
	log = _captured();
	ok(rc == PACE_PROBE_NEW && s.wbytes == 74839282351ULL,
	   "mmpmon started again (after 1 s): its first answer (%d)", rc);
	ok(log && strstr(log, "closed its output") && strstr(log, "started again in 1 s"),
	   "its death logged: %s", log ? log : "(none)");
	free(log);
	p->close(h);
	p->close(h1);

	r = _root("gpfs-hostile");
	_copy(r, "proc/self/mountinfo", "gpfs/mountinfo");
	_copy(r, "mmpmon.out", "gpfs/bad-binary");
	h = p->open(makedev(0, 45));
	_capture();
	rc = h ? _poll(p, h, &s, 0) : 0;
	log = _captured();
	ok(rc == -1, "binary junk from mmpmon: the probe says drop it (%d)", rc);
	ok(log && strstr(log, "not what it documents") && strstr(log, "not printable"),
	   "... with a log line: %s", log ? log : "(none)");
	free(log);
	if (h)
		p->close(h);
}

/* ---- the controller fed with the files' samples ---- */

struct feed {
	int steps, held_at, released_at, held_quiet_steps;
	uint64_t backoffs;
	struct pace c;
};

/* Each snapshot's time and counters from a sequence file; ours wrote 2 MiB a
   step until the first hold and nothing after (the file's write_bytes hold
   ours plus the job's: its quiet phase has none of ours). */
static void _feed(struct feed *f, int nsamples, const int64_t *t, const struct pace_probe_sample *d)
{
	struct pace_params pp;

	pace_default_params(&pp);
	pace_init(&f->c, &pp);
	f->held_at = f->released_at = -1;
	for (int i = 0; i < nsamples; i++) {
		struct pace_own own = { 0 };
		int was = f->c.held;

		own.wmax = 1 << 20;
		own.rmax = 1 << 20;
		if (!was && i > 0 && f->held_at < 0)
			own.wbytes = 2 << 20;
		pace_step(&f->c, t[i], &d[i], &own);
		if (!was && f->c.held && f->held_at < 0)
			f->held_at = i;
		if (was && !f->c.held && f->released_at < 0)
			f->released_at = i;
	}
	f->steps = nsamples;
	f->backoffs = f->c.backoffs;
}

static int _lustre_seq(int64_t *t, struct pace_probe_sample *d, int max)
{
	size_t n;
	char *s = _read(_data, "lustre/burst.seq", &n), *p = s, *next;
	char err[256];
	int k = 0;

	while (p && *p && k < max) {
		next = strstr(p + 1, "snapshot_time");
		if (pace_lustre_parse_stats(p, next ? (size_t)(next - p) : strlen(p), &d[k], err,
					    sizeof(err)) < 0)
			break;
		t[k++] = (int64_t)(_snapshot(p) * 1000.0 + 0.5) * 1000000LL;
		p = next;
	}
	free(s);
	return k;
}

static int _gpfs_seq(int64_t *t, struct pace_probe_sample *d, int max)
{
	char path[8192], line[4096], err[256];
	struct pace_gpfs_row r;
	int k = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/gpfs/burst.seq", _data);
	if (!(f = fopen(path, "r")))
		return 0;
	while (k < max && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = '\0';
		if (pace_gpfs_parse_line(line, &r, err, sizeof(err)) != 1)
			break;
		t[k] = (int64_t)r.t * NS + (int64_t)r.tu * 1000;
		d[k].rbytes = r.br;
		d[k].wbytes = r.bw;
		k++;
	}
	fclose(f);
	return k;
}

static void _controller(const char *what, int n, const int64_t *t, const struct pace_probe_sample *d)
{
	struct feed f;

	memset(&f, 0, sizeof(f));
	_feed(&f, n, t, d);
	/* 5 samples of ours alone, the job's burst from sample 5 (0-based) for 5
	   samples, then 8 quiet ones, 100 ms apart. */
	ok(n == 18, "%s: 18 samples (%d)", what, n);
	ok(f.held_at == 5, "%s: ours alone not held; held at the burst's first sample (%d)", what,
	   f.held_at);
	ok(f.released_at >= 13 && f.released_at <= 14, "%s: held through the burst, released "
	   "after 0.3 s of quiet (sample %d; the quiet began at 10)", what, f.released_at);
	ok(f.backoffs == 1, "%s: one hold counted (%llu)", what, (unsigned long long)f.backoffs);
	ok(!f.c.held && f.c.rate >= 8 * MIB, "%s: going again at %.0f MiB/s", what, f.c.rate / MIB);
}

/* ---- /metrics per file system ---- */

static void _metrics(void)
{
	int64_t t[32];
	struct pace_probe_sample d[32];
	int n = _lustre_seq(t, d, 32);
	struct feed f;
	struct pace_fs_stats st[2];
	char *before, *after;

	memset(&f, 0, sizeof(f));
	memset(st, 0, sizeof(st));
	st[0].major = 0;
	st[0].minor = 52;
	snprintf(st[0].mount, sizeof(st[0].mount), "/lustre/scratch");
	snprintf(st[0].probe, sizeof(st[0].probe), "lustre");
	st[0].active = 1;
	st[0].share = -1;
	st[1].major = 8;
	st[1].minor = 17;
	snprintf(st[1].mount, sizeof(st[1].mount), "/mnt/odd \"name\"\\\n");
	snprintf(st[1].probe, sizeof(st[1].probe), "none");
	st[1].share = -1;
	before = pace_metrics_render(st, 2);
	_feed(&f, n, t, d);
	/* Quiet for 10 s more: the 10-s bucket of the burst closes, its others'
	   bytes are counted. */
	{
		struct pace_probe_sample q = d[n - 1];
		struct pace_own own = { 0 };

		for (int i = 1; i <= 21; i++)
			pace_step(&f.c, t[n - 1] + i * (NS / 2), &q, &own);
		pace_fs_stats_of(&f.c, t[n - 1] + 21 * (NS / 2), &st[0]);
	}
	after = pace_metrics_render(st, 2);
	ok(before && after, "rendered");
	if (!before || !after)
		return;
	contains(before, "stagehand_pace_fs_holds_total{device=\"0:52\",mount=\"/lustre/scratch\"} 0\n",
		 "holds 0 before");
	contains(after, "stagehand_pace_fs_holds_total{device=\"0:52\",mount=\"/lustre/scratch\"} 1\n",
		 "holds 1 after the burst");
	contains(after, "# TYPE stagehand_pace_fs_holds_total counter\n", "holds: a counter");
	contains(after, "stagehand_pace_fs_foreign_bytes_total{device=\"0:52\",mount=\"/lustre/scratch\"} 52428800\n",
		 "others' bytes: the job's 50 MiB (the file's bytes less ours)");
	contains(after, "stagehand_pace_fs_own_bytes_total{device=\"0:52\",mount=\"/lustre/scratch\"} 10485760\n",
		 "own bytes: 5 steps of 2 MiB");
	contains(after, "stagehand_pace_fs_probe{device=\"0:52\",mount=\"/lustre/scratch\",probe=\"lustre\"} 1\n",
		 "the probe in use");
	contains(after, "stagehand_pace_fs_rate_bytes_per_second{device=\"0:52\",mount=\"/lustre/scratch\"} ",
		 "target rate");
	contains(after, "stagehand_pace_fs_foreign_bytes_per_second{device=\"0:52\",mount=\"/lustre/scratch\"} ",
		 "others' load now");
	ok(!strstr(before, "stagehand_pace_fs_archive_share{"), "no share before any sample");
	ok(st[0].share > 0 && st[0].share < 1, "a share between 0 and 1 after (%.3f)", st[0].share);
	contains(after, "stagehand_pace_fs_archive_share{device=\"0:52\",mount=\"/lustre/scratch\"} 0.",
		 "the share rendered");
	contains(after, "stagehand_pace_fs_held{device=\"8:17\",mount=\"/mnt/odd \\\"name\\\"\\\\\\n\"} 0\n",
		 "a mount point's quote, backslash and newline escaped");
	contains(after, "# TYPE stagehand_pace_fs_archive_share gauge\n", "share: a gauge");
	free(before);
	free(after);
	before = pace_metrics_render(NULL, 0);
	ok(before && strstr(before, "# TYPE stagehand_pace_fs_holds_total counter\n") &&
	   !strstr(before, "{"), "no file system: the families' HELP and TYPE, no sample");
	free(before);
}

int main(void)
{
	const char *data = getenv("STAGEHAND_PACE_DATA");
	const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";

	signal(SIGPIPE, SIG_IGN);	/* as the daemon: a dead mmpmon's pipe is an error, not a signal */
	snprintf(_data, sizeof(_data), "%s", data ? data : "../tests/unit/data");
	snprintf(_tmp, sizeof(_tmp), "%s/test_probes.XXXXXX", tmp);
	if (!mkdtemp(_tmp)) {
		printf("1..0 # SKIP mkdtemp: %s\n", strerror(errno));
		return 77;
	}
	_lustre_parser();
	_mounts();
	_lustre_probe();
	_gpfs_parser();
	_gpfs_probe();
	{
		int64_t t[32];
		struct pace_probe_sample d[32];

		_controller("Lustre llite samples", _lustre_seq(t, d, 32), t, d);
		_controller("mmpmon fs_io_s samples", _gpfs_seq(t, d, 32), t, d);
		/* A counter reset (stats cleared) between two samples: no step, not held. */
		{
			struct pace c;
			struct pace_params pp;
			struct pace_probe_sample a, b;
			struct pace_own own = { 0 };
			char err[256];
			size_t n1, n2;
			char *s1 = _read(_data, "lustre/stats-2.15-2", &n1);
			char *s2 = _read(_data, "lustre/stats-2.15-reset", &n2);

			pace_default_params(&pp);
			pace_init(&c, &pp);
			int held = 1;
			double f0 = -1;

			if (s1 && s2 && pace_lustre_parse_stats(s1, n1, &a, err, sizeof(err)) == 0 &&
			    pace_lustre_parse_stats(s2, n2, &b, err, sizeof(err)) == 0) {
				pace_step(&c, 1000 * 1000000LL, &a, &own);
				pace_step(&c, 1010 * 1000000LL, &a, &own);
				pace_step(&c, 1020 * 1000000LL, &b, &own);
				held = c.held;
				f0 = c.foreign;
				b.wbytes += 1 << 20;	/* 1 MiB in 10 ms after the reset */
				pace_step(&c, 1030 * 1000000LL, &b, &own);
			}
			ok(!held && f0 == 0, "stats cleared between two samples: no step (not held, "
			   "no others' load: %.0f)", f0);
			ok(!c.held && c.foreign > 1.9 * MIB && c.foreign < 2.1 * MIB,
			   "the next step counts from the cleared counters: 1 MiB in 10 ms, 2%% of it "
			   "in the 0.5-s smoothing (%.0f KiB/s)", c.foreign / 1024);
			free(s1);
			free(s2);
		}
	}
	_metrics();
	tap_rmtree(_tmp);
	return tap_done();
}
