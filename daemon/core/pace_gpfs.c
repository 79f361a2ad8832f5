/*
 * pace_gpfs.c - the Spectrum Scale (GPFS) probe: bytes read and written
 * on this node per file system, from mmpmon's fs_io_s request, for the
 * adaptive scavenger (pace.h).
 *
 * Why one long-running mmpmon: mmpmon is a command, not a file, and the
 * controller steps every 10 ms; a fork and exec of mmpmon per sample would
 * cost more than the sample is worth and could not keep that pace. mmpmon
 * reads requests from its standard input for as long as it stays open (the
 * documented way to drive it from a program, with the default -r 1 so it
 * caches nothing), so the probe keeps one `mmpmon -p -s` for all the GPFS
 * file systems it paces, writes "fs_io_s" to its input every 100 ms and
 * reads the answers from a non-blocking pipe at each step: the pace thread
 * never waits for it. Between answers read() says PACE_PROBE_STALE (the
 * controller waits for the next sample, adding up our own bytes meanwhile,
 * so both sides cover the same interval). If mmpmon dies, stops answering
 * for 2 s (10 s for its first answer) or cannot be started, it is killed and
 * started again after 1 s, doubling to 60 s; meanwhile read() says
 * PACE_PROBE_NONE and the controller paces on its own latency. mmpmon allows 5 instances per node;
 * this is one. A site-provided counters file was the other design: it would
 * need a collector the site runs, and its samples would come at that
 * collector's pace.
 *
 * What it sees: fs_io_s counts the I/O of applications on this node (the
 * GPFS daemon's per-node statistics), so jobs on other nodes do not show
 * here; they reach the controller through its latency only.
 *
 * Hostile output: an fs_io_s line that is not exactly the format (a field
 * missing, a number out of range, a byte that is not text, a line longer
 * than 4 KiB) drops the probe for every file system, with a log line, and
 * mmpmon is stopped.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "monoclock.h"
#include "pace_probe.h"
#include "spawn_attr.h"

#define GPFS_ASK_NS (100 * 1000000LL)       /* a request every 100 ms */
#define GPFS_ANSWER_NS (2000 * 1000000LL)   /* no answer this long: restart mmpmon */
#define GPFS_FIRST_NS (10000 * 1000000LL)   /* ... its first answer (it may start slowly) */
#define GPFS_STALE_NS (500 * 1000000LL)     /* no sample this long: pace on latency */
#define GPFS_BACKOFF_MIN_NS (1000 * 1000000LL)
#define GPFS_BACKOFF_MAX_NS (60000 * 1000000LL)
#define GPFS_LINE_MAX 4096
#define GPFS_ROWS 32
#define GPFS_MOUNTS_MAX 64

/* ---- the parser ---- */

/* A decimal of at most 2^63-1, the whole token. */
static int _u64(const char *t, uint64_t *v)
{
	uint64_t x = 0;

	if (!*t)
		return -1;
	for (; *t; t++) {
		if (*t < '0' || *t > '9' || x > (UINT64_C(0x7fffffffffffffff) - (uint64_t)(*t - '0')) / 10)
			return -1;
		x = x * 10 + (uint64_t)(*t - '0');
	}
	*v = x;
	return 0;
}

int pace_gpfs_parse_line(const char *line, struct pace_gpfs_row *row, char *err, size_t errlen)
{
	static const char *const need[] = { "_n_", "_nn_", "_rc_", "_t_", "_tu_", "_cl_", "_fs_",
		"_d_", "_br_", "_bw_", "_oc_", "_cc_", "_rdc_", "_wc_", "_dir_", "_iu_" };
	enum { N = sizeof(need) / sizeof(need[0]) };
	char buf[GPFS_LINE_MAX], *tok[2 * N + 2], *save = NULL;
	const char *val[N] = { 0 };
	size_t len = strlen(line);
	int nt = 0;
	uint64_t rc;

	if (strncmp(line, "_fs_io_s_", 9) || (line[9] != ' ' && line[9] != '\0'))
		return 0;	/* another request's answer (_ver_, _reset_, _end_, ...) */
	if (len >= sizeof(buf))
		return log_errf(err, errlen, "fs_io_s line longer than %zu bytes", sizeof(buf) - 1);
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)line[i] < 0x20 || (unsigned char)line[i] > 0x7e)
			return log_errf(err, errlen, "fs_io_s line: byte 0x%02x at column %zu is not "
					"printable text", (unsigned char)line[i], i + 1);
	memcpy(buf, line, len + 1);
	for (char *t = strtok_r(buf, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
		if (nt == 2 * N + 1)
			return log_errf(err, errlen, "fs_io_s line: more than %d fields", 2 * N + 1);
		tok[nt++] = t;
	}
	/* _fs_io_s_ then KEY VALUE pairs; _rc_ first after the node, as documented.
	   A nonzero _rc_ (no file system mounted) has fewer fields: skipped. */
	for (int i = 1; i + 1 < nt; i += 2)
		for (int k = 0; k < N; k++)
			if (!strcmp(tok[i], need[k])) {
				if (val[k])
					return log_errf(err, errlen, "fs_io_s line: %s twice", need[k]);
				val[k] = tok[i + 1];
			}
	if (!val[2] || _u64(val[2], &rc) < 0)
		return log_errf(err, errlen, "fs_io_s line: no _rc_ NUMBER");
	if (rc != 0)
		return 0;
	if (nt != 2 * N + 1)
		return log_errf(err, errlen, "fs_io_s line: %d fields, not %d (KEY VALUE pairs "
				"_n_ ... _iu_)", nt, 2 * N + 1);
	for (int k = 0; k < N; k++)
		if (!val[k])
			return log_errf(err, errlen, "fs_io_s line: no %s", need[k]);
	for (int k = 2; k < N; k++) {
		uint64_t v;

		if (k == 5 || k == 6)
			continue;	/* _cl_, _fs_: names */
		if (_u64(val[k], &v) < 0)
			return log_errf(err, errlen, "fs_io_s line: %s '%.40s' is not a decimal of at "
					"most 2^63-1", need[k], val[k]);
		if (k == 3)
			row->t = v;
		else if (k == 4)
			row->tu = v;
		else if (k == 8)
			row->br = v;
		else if (k == 9)
			row->bw = v;
	}
	if (strlen(val[5]) >= sizeof(row->cluster) || strlen(val[6]) >= sizeof(row->fs))
		return log_errf(err, errlen, "fs_io_s line: a name longer than %zu bytes",
				sizeof(row->fs) - 1);
	snprintf(row->cluster, sizeof(row->cluster), "%s", val[5]);
	snprintf(row->fs, sizeof(row->fs), "%s", val[6]);
	return 1;
}

int pace_gpfs_fsname(const char *source, char *fsname, size_t len, char *err, size_t errlen)
{
	const char *p = strncmp(source, "/dev/", 5) ? source : source + 5;
	size_t n = strlen(p);

	if (n == 0 || n >= len)
		return log_errf(err, errlen, "mount source '%.64s' is not a GPFS device name", source);
	for (size_t i = 0; i < n; i++)
		if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= 'A' && p[i] <= 'Z') ||
		      (p[i] >= '0' && p[i] <= '9') || p[i] == '_' || p[i] == '-' || p[i] == '.'))
			return log_errf(err, errlen, "mount source '%.64s' is not a GPFS device name",
					source);
	memcpy(fsname, p, n + 1);
	return 0;
}

/* ---- the one mmpmon (the pace thread's only: no lock) ---- */

struct _row {
	char fs[256], cluster[256];
	struct pace_probe_sample s;
	uint64_t seq;                /* answers seen for it */
	int ambiguous;               /* two clusters answer for this name */
};

static struct {
	int refs;                    /* open handles */
	pid_t pid;                   /* 0: not running */
	int in, out;                 /* its stdin (we write), stdout (we read), -1 */
	char line[GPFS_LINE_MAX];
	size_t len;
	int overlong;
	int64_t asked_ns, answered_ns, started_ns, retry_ns, backoff_ns;
	int failed;                  /* hostile output: every handle drops the probe */
	char why[512];
	struct _row rows[GPFS_ROWS];
	int nrows;
} _mm = { .in = -1, .out = -1 };

static void _stop(const char *why)
{
	_mm.retry_ns = mono_ns() + _mm.backoff_ns;
	if (_mm.pid > 0) {
		kill(_mm.pid, SIGKILL);	/* it holds nothing worth a clean exit */
		while (waitpid(_mm.pid, NULL, 0) < 0 && errno == EINTR)
			;
		if (why)
			log_warn("pace: mmpmon (pid %d) %s; started again in %lld s", (int)_mm.pid,
				 why, (long long)(_mm.backoff_ns / 1000000000LL));
	}
	if (_mm.in >= 0)
		close(_mm.in);
	if (_mm.out >= 0)
		close(_mm.out);
	_mm.pid = 0;
	_mm.in = _mm.out = -1;
	_mm.len = 0;
	_mm.overlong = 0;
}

/* The command: STAGEHAND_PACE_MMPMON (a test hook), else the install path under the root. */
static void _cmd(char *path, size_t len)
{
	const char *c = secure_getenv("STAGEHAND_PACE_MMPMON");

	if (c && *c)
		snprintf(path, len, "%s", c);
	else
		snprintf(path, len, "%s/usr/lpp/mmfs/bin/mmpmon", pace_root());
}

static void _start(int64_t now)
{
	char path[4096], root[4200];
	char *argv[] = { path, "-p", "-s", NULL };
	char *envp[] = { "PATH=/usr/lpp/mmfs/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL=C",
		*pace_root() ? root : NULL, NULL };	/* the test hook, for a stand-in */
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;
	int in[2], out[2], rc;

	_cmd(path, sizeof(path));
	snprintf(root, sizeof(root), "STAGEHAND_PACE_ROOT=%s", pace_root());
	/* The wait before the next start, should this one fail or die. */
	_mm.backoff_ns = _mm.backoff_ns ? _mm.backoff_ns * 2 : GPFS_BACKOFF_MIN_NS;
	if (_mm.backoff_ns > GPFS_BACKOFF_MAX_NS)
		_mm.backoff_ns = GPFS_BACKOFF_MAX_NS;
	_mm.retry_ns = now + _mm.backoff_ns;	/* if it cannot start; _stop sets it on death */
	if (pipe2(in, O_CLOEXEC) < 0) {
		log_warn("pace: cannot start %s: pipe2: %s", path, strerror(errno));
		return;
	}
	if (pipe2(out, O_CLOEXEC) < 0) {
		close(in[0]);
		close(in[1]);
		log_warn("pace: cannot start %s: pipe2: %s", path, strerror(errno));
		return;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, in[0], 0);
	posix_spawn_file_actions_adddup2(&fa, out[1], 1);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
	posix_spawn_file_actions_addclosefrom_np(&fa, 3);
#endif
	rc = spawn_attr_init(&at, 0);
	if (rc != 0) {
		posix_spawn_file_actions_destroy(&fa);
		close(in[0]);
		close(in[1]);
		close(out[0]);
		close(out[1]);
		log_warn("pace: cannot start %s: posix_spawnattr: %s", path, strerror(rc));
		return;
	}
	rc = posix_spawn(&_mm.pid, path, &fa, &at, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(in[0]);
	close(out[1]);
	if (rc != 0) {
		_mm.pid = 0;
		close(in[1]);
		close(out[0]);
		log_warn("pace: cannot start %s: posix_spawn: %s; GPFS file systems are paced on "
			 "their transfers' own latency; started again in %lld s", path, strerror(rc),
			 (long long)(_mm.backoff_ns / 1000000000LL));
		return;
	}
	_mm.in = in[1];
	_mm.out = out[0];
	fcntl(_mm.in, F_SETFL, O_NONBLOCK);
	fcntl(_mm.out, F_SETFL, O_NONBLOCK);
	_mm.started_ns = _mm.answered_ns = now;
	_mm.asked_ns = 0;
	log_info("pace: started %s -p -s (pid %d) for GPFS counters", path, (int)_mm.pid);
}

static void _row(const struct pace_gpfs_row *r)
{
	struct _row *w = NULL;

	for (int i = 0; i < _mm.nrows; i++)
		if (!strcmp(_mm.rows[i].fs, r->fs))
			w = &_mm.rows[i];
	if (!w) {
		if (_mm.nrows == GPFS_ROWS)
			return;	/* more file systems than we could pace */
		w = &_mm.rows[_mm.nrows++];
		memset(w, 0, sizeof(*w));
		snprintf(w->fs, sizeof(w->fs), "%s", r->fs);
		snprintf(w->cluster, sizeof(w->cluster), "%s", r->cluster);
	}
	if (strcmp(w->cluster, r->cluster))
		w->ambiguous = 1;	/* one name, two clusters: which one is mounted here? */
	w->s.rbytes = r->br;
	w->s.wbytes = r->bw;
	w->seq++;
}

/* One line of mmpmon's output. */
static void _line(const char *line)
{
	struct pace_gpfs_row r;
	char err[400];
	int rc = pace_gpfs_parse_line(line, &r, err, sizeof(err));

	if (rc < 0 && !_mm.failed) {
		_mm.failed = 1;
		snprintf(_mm.why, sizeof(_mm.why), "%s", err);
	}
	if (rc > 0)
		_row(&r);
}

/* Read what mmpmon wrote, ask again when due; never waits. */
static void _pump(int64_t now)
{
	char buf[8192];

	if (_mm.failed)
		return;
	if (_mm.pid == 0 && now >= _mm.retry_ns)
		_start(now);
	if (_mm.pid == 0)
		return;
	for (;;) {
		ssize_t r = read(_mm.out, buf, sizeof(buf));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 && errno == EAGAIN)
			break;
		if (r <= 0) {
			_stop(r == 0 ? "closed its output (exited)" : "could not be read");
			return;
		}
		for (ssize_t i = 0; i < r; i++) {
			if (buf[i] == '\n') {
				_mm.line[_mm.len] = '\0';
				if (_mm.overlong && !_mm.failed) {
					_mm.failed = 1;
					snprintf(_mm.why, sizeof(_mm.why), "a line longer than %d bytes",
						 GPFS_LINE_MAX - 1);
				} else if (!_mm.overlong) {
					_line(_mm.line);
				}
				_mm.len = 0;
				_mm.overlong = 0;
				_mm.answered_ns = now;
			} else if (_mm.len + 1 < sizeof(_mm.line)) {
				_mm.line[_mm.len++] = buf[i];
			} else {
				_mm.overlong = 1;
			}
		}
		if (_mm.failed) {
			_stop(NULL);
			return;
		}
	}
	if (_mm.answered_ns >= _mm.asked_ns && now - _mm.started_ns > 60 * 1000000000LL)
		_mm.backoff_ns = 0;	/* answering for a minute: a later death starts afresh */
	if (_mm.asked_ns > _mm.answered_ns &&
	    now - _mm.asked_ns > (_mm.answered_ns > _mm.started_ns ? GPFS_ANSWER_NS : GPFS_FIRST_NS)) {
		_stop("did not answer fs_io_s in time (2 s; 10 s after its start)");
		return;
	}
	if (now - _mm.asked_ns >= GPFS_ASK_NS && _mm.answered_ns >= _mm.asked_ns) {
		ssize_t w = write(_mm.in, "fs_io_s\n", 8);

		if (w == 8)
			_mm.asked_ns = now;
		else if (w < 0 && errno != EAGAIN)
			_stop("could not be written to (exited)");
	}
}

/* ---- the probe ---- */

struct _gpfs {
	char fs[256];
	uint64_t seq;                /* the row's answers seen by this handle */
	int64_t last_ns;             /* when the last new sample came */
};

static void *_gpfs_open(dev_t dev)
{
	struct pace_mount *m = calloc(GPFS_MOUNTS_MAX, sizeof(*m));
	struct _gpfs *h = NULL;
	char err[400];
	int n, self = -1;

	if (!m)
		return NULL;
	n = pace_mounts("gpfs", m, GPFS_MOUNTS_MAX, err, sizeof(err));
	for (int i = 0; i < n && i < GPFS_MOUNTS_MAX; i++)
		if (m[i].major == major(dev) && m[i].minor == minor(dev) &&
		    (self < 0 || (!strcmp(m[i].root, "/") && strcmp(m[self].root, "/"))))
			self = i;	/* the mount of its root, rather than a bind mount */
	if (self >= 0 && (h = calloc(1, sizeof(*h))) &&
	    pace_gpfs_fsname(m[self].source, h->fs, sizeof(h->fs), err, sizeof(err)) < 0) {
		log_warn("pace: file system %u:%u (GPFS at %.200s): %s; its transfers are paced on "
			 "their own latency only", major(dev), minor(dev), m[self].point, err);
		free(h);
		h = NULL;
	}
	free(m);
	if (h) {
		if (_mm.refs++ == 0) {
			_mm.failed = 0;
			_mm.nrows = 0;
			_mm.backoff_ns = 0;
			_mm.retry_ns = 0;
		}
		h->last_ns = mono_ns();
	}
	return h;
}

static int _gpfs_read(void *hv, struct pace_probe_sample *s)
{
	struct _gpfs *h = hv;
	int64_t now = mono_ns();

	_pump(now);
	if (_mm.failed) {
		log_warn("pace: GPFS counters for %s: mmpmon's output is not what it documents "
			 "(%s): mmpmon stopped", h->fs, _mm.why);
		return -1;
	}
	for (int i = 0; i < _mm.nrows; i++) {
		struct _row *w = &_mm.rows[i];

		if (strcmp(w->fs, h->fs))
			continue;
		if (w->ambiguous) {
			log_warn("pace: GPFS counters for %s: mmpmon answers for two clusters' file "
				 "systems of that name; cannot tell which is mounted here", h->fs);
			return -1;
		}
		if (w->seq != h->seq) {
			h->seq = w->seq;
			h->last_ns = now;
			*s = w->s;
			return PACE_PROBE_NEW;
		}
	}
	return now - h->last_ns < GPFS_STALE_NS ? PACE_PROBE_STALE : PACE_PROBE_NONE;
}

static void _gpfs_close(void *hv)
{
	free(hv);
	if (hv && --_mm.refs == 0)
		_stop(NULL);
}

const struct pace_probe_ops pace_probe_gpfs = {
	.name = "gpfs",
	.open = _gpfs_open,
	.read = _gpfs_read,
	.close = _gpfs_close,
};
