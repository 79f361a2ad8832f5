/*
 * pace_lustre.c - the Lustre client probe: the bytes read and written
 * through this node's mount of the file system (llite.<fsname>-<instance>.stats,
 * read_bytes and write_bytes sums), for the adaptive scavenger (pace.h).
 *
 * Where: Lustre 2.15 puts the llite stats in debugfs,
 * /sys/kernel/debug/lustre/llite/<fsname>-<instance>/stats (what `lctl
 * get_param llite.*.stats` reads); older clients in
 * /proc/fs/lustre/llite/<fsname>-<instance>/stats. The instance is the
 * superblock's address, printed as 16 hex digits.
 *
 * Which instance is the mount's: mountinfo gives the mount's fsname (its
 * source, "mgs@net:/fsname[/subdir]"), not the instance. One client mount of
 * that fsname and one llite instance of it: that one. Anything else (the
 * file system mounted twice, two file systems of the same name, a leftover
 * instance) and the probe refuses rather than guess, and logs why: the
 * controller then paces on its own latency. (`lfs getname` tells them apart
 * by an ioctl on the mount; not used here: it could not be tested without a
 * Lustre client.)
 *
 * What it sees: read() and write() calls on this node, as the client's VFS
 * counts them (reads served from the page cache too), so our own transfers'
 * reported bytes compare with it one to one. Jobs on other nodes do not show
 * here; they reach the controller through its latency only.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "log.h"
#include "pace_probe.h"

#define LUSTRE_STATS_MAX (64 * 1024)    /* llite stats: ~50 lines of < 100 bytes */
#define LUSTRE_MOUNTS_MAX 64

int pace_lustre_fsname(const char *source, char *fsname, size_t len, char *err, size_t errlen)
{
	const char *p = strstr(source, ":/");
	size_t n = 0;

	if (!p)
		return log_errf(err, errlen, "mount source '%.64s' has no ':/fsname'", source);
	for (p += 2; p[n] && p[n] != '/'; n++)
		if (!((p[n] >= 'a' && p[n] <= 'z') || (p[n] >= 'A' && p[n] <= 'Z') ||
		      (p[n] >= '0' && p[n] <= '9') || p[n] == '_' || p[n] == '-'))
			return log_errf(err, errlen, "mount source '%.64s': the file system name "
					"has a character Lustre does not allow", source);
	if (n == 0 || n > 8 || n >= len)
		return log_errf(err, errlen, "mount source '%.64s': a Lustre file system name "
				"has 1 to 8 characters", source);
	memcpy(fsname, p, n);
	fsname[n] = '\0';
	return 0;
}

int pace_lustre_is_instance(const char *name, const char *fsname)
{
	size_t n = strlen(fsname);

	if (strncmp(name, fsname, n) || name[n] != '-' || strlen(name + n + 1) != 16)
		return 0;
	for (const char *p = name + n + 1; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return 0;
	return 1;
}

#define I64_MAX UINT64_C(0x7fffffffffffffff)

/* A decimal of at most max, the whole token; -1 otherwise. */
static int _num(const char *t, int allow_neg, uint64_t max, uint64_t *v)
{
	uint64_t x = 0;

	if (allow_neg && *t == '-')
		t++;
	if (!*t)
		return -1;
	for (; *t; t++) {
		if (*t < '0' || *t > '9' || x > (max - (uint64_t)(*t - '0')) / 10)
			return -1;
		x = x * 10 + (uint64_t)(*t - '0');
	}
	*v = x;
	return 0;
}

/* "SECONDS.FRACTION": the header lines' time. */
static int _time(const char *t)
{
	const char *dot = strchr(t, '.');
	uint64_t v;
	char sec[24];

	if (!dot || (size_t)(dot - t) >= sizeof(sec) || strchr(dot + 1, '.'))
		return -1;
	memcpy(sec, t, (size_t)(dot - t));
	sec[dot - t] = '\0';
	return _num(sec, 0, I64_MAX, &v) < 0 || _num(dot + 1, 0, I64_MAX, &v) < 0 ||
	       strlen(dot + 1) > 9 ? -1 : 0;
}

int pace_lustre_parse_stats(const char *buf, size_t n, struct pace_probe_sample *s,
			    char *err, size_t errlen)
{
	char line[512];
	size_t at = 0;
	int lineno = 0, have_r = 0, have_w = 0;

	s->rbytes = s->wbytes = 0;
	if (n == 0)
		return log_errf(err, errlen, "empty");
	if (buf[n - 1] != '\n')
		return log_errf(err, errlen, "truncated: the last line has no end");
	while (at < n) {
		const char *nl = memchr(buf + at, '\n', n - at);
		size_t len = (size_t)(nl - (buf + at));
		char *tok[10], *save = NULL;
		int nt = 0;
		uint64_t v[5];

		lineno++;
		if (len >= sizeof(line))
			return log_errf(err, errlen, "line %d: longer than %zu bytes", lineno,
					sizeof(line) - 1);
		memcpy(line, buf + at, len);
		line[len] = '\0';
		at += len + 1;
		for (size_t i = 0; i < len; i++)
			if ((unsigned char)line[i] < 0x20 || (unsigned char)line[i] > 0x7e)
				return log_errf(err, errlen, "line %d: byte 0x%02x at column %zu is not "
						"printable text", lineno, (unsigned char)line[i], i + 1);
		for (char *t = strtok_r(line, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
			if (nt == 10)
				return log_errf(err, errlen, "line %d: more than 9 fields", lineno);
			tok[nt++] = t;
		}
		if (lineno == 1) {
			if (nt != 3 || strcmp(tok[0], "snapshot_time") || _time(tok[1]) < 0 ||
			    (strcmp(tok[2], "secs.nsecs") && strcmp(tok[2], "secs.usecs")))
				return log_errf(err, errlen, "line 1: not 'snapshot_time SECONDS.FRACTION "
						"secs.nsecs': not a Lustre stats file");
			continue;
		}
		if (nt == 3 && (!strcmp(tok[0], "start_time") || !strcmp(tok[0], "elapsed_time"))) {
			if (_time(tok[1]) < 0 || (strcmp(tok[2], "secs.nsecs") && strcmp(tok[2], "secs.usecs")))
				return log_errf(err, errlen, "line %d: %s: not 'SECONDS.FRACTION secs.nsecs'",
						lineno, tok[0]);
			continue;
		}
		/* name count samples [unit] [min max sum [sumsq]] */
		if ((nt != 4 && nt != 7 && nt != 8) || strcmp(tok[2], "samples") ||
		    tok[3][0] != '[' || tok[3][strlen(tok[3]) - 1] != ']')
			return log_errf(err, errlen, "line %d: not 'NAME COUNT samples [UNIT] MIN MAX "
					"SUM [SUMSQ]'", lineno);
		for (const char *p = tok[0]; *p; p++)
			if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
			      (*p >= '0' && *p <= '9') || *p == '_' || *p == '.'))
				return log_errf(err, errlen, "line %d: counter name '%.40s' is not a "
						"Lustre name", lineno, tok[0]);
		if (_num(tok[1], 0, I64_MAX, &v[0]) < 0)
			return log_errf(err, errlen, "line %d: %s: the count '%.40s' is not a decimal "
					"of at most 2^63-1", lineno, tok[0], tok[1]);
		/* min, max, sum are signed 64-bit; the sum of squares unsigned (it
		   wraps on a busy client: never compared, only checked). */
		for (int i = 4; i < nt; i++)
			if (_num(tok[i], i < 7, i < 7 ? I64_MAX : UINT64_MAX, &v[i - 3]) < 0)
				return log_errf(err, errlen, "line %d: %s: field %d '%.40s' is not a "
						"decimal in range", lineno, tok[0], i + 1, tok[i]);
		if (strcmp(tok[0], "read_bytes") && strcmp(tok[0], "write_bytes"))
			continue;
		if (strcmp(tok[3], "[bytes]") || nt < 7 || tok[6][0] == '-')
			return log_errf(err, errlen, "line %d: %s: not 'COUNT samples [bytes] MIN MAX "
					"SUM' with a sum of bytes", lineno, tok[0]);
		if (tok[0][0] == 'r') {
			if (have_r++)
				return log_errf(err, errlen, "line %d: read_bytes listed twice", lineno);
			s->rbytes = v[3];
		} else {
			if (have_w++)
				return log_errf(err, errlen, "line %d: write_bytes listed twice", lineno);
			s->wbytes = v[3];
		}
	}
	return 0;	/* a counter not listed was never used: 0 */
}

struct _lustre {
	int fd;
	char path[4096];
	char *buf;
};

/* The whole stats file into h->buf; its length, or -1 with err. */
static ssize_t _slurp(struct _lustre *h, char *err, size_t errlen)
{
	size_t n = 0;

	for (;;) {
		ssize_t r = pread(h->fd, h->buf + n, LUSTRE_STATS_MAX - n, (off_t)n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return log_errf(err, errlen, "read: %s", strerror(errno));
		if (r == 0)
			return (ssize_t)n;
		n += (size_t)r;
		if (n == LUSTRE_STATS_MAX)
			return log_errf(err, errlen, "larger than %d bytes", LUSTRE_STATS_MAX);
	}
}

/* The llite instances of fsname under dir: how many, the first in name. */
static int _instances(const char *dir, const char *fsname, char *name, size_t len)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (pace_lustre_is_instance(e->d_name, fsname) && n++ == 0)
			snprintf(name, len, "%.40s", e->d_name);	/* <= 8 + 1 + 16 */
	closedir(d);
	return n;
}

static void *_lustre_open(dev_t dev)
{
	static const char *const dirs[] = { "/sys/kernel/debug/lustre/llite", "/proc/fs/lustre/llite" };
	struct pace_mount *m = calloc(LUSTRE_MOUNTS_MAX, sizeof(*m));
	char fsname[16], inst[64] = "", err[600], dir[4096] = "";
	const char *point = NULL;
	struct _lustre *h = NULL;
	int n, self = -1, found = -1;

	if (!m)
		return NULL;
	n = pace_mounts("lustre", m, LUSTRE_MOUNTS_MAX, err, sizeof(err));
	for (int i = 0; i < n && i < LUSTRE_MOUNTS_MAX; i++)
		if (m[i].major == major(dev) && m[i].minor == minor(dev) &&
		    (self < 0 || (!strcmp(m[i].root, "/") && strcmp(m[self].root, "/"))))
			self = i;	/* the mount of its root, rather than a bind mount */
	if (self < 0)
		goto out;	/* not a Lustre client mount: another probe's */
	point = m[self].point;
	if (n > LUSTRE_MOUNTS_MAX) {
		snprintf(err, sizeof(err), "more than %d Lustre mounts", LUSTRE_MOUNTS_MAX);
		goto refuse;
	}
	if (pace_lustre_fsname(m[self].source, fsname, sizeof(fsname), err, sizeof(err)) < 0)
		goto refuse;
	for (int i = 0; i < n; i++) {
		char other[16], e2[128];

		if ((m[i].major != major(dev) || m[i].minor != minor(dev)) &&
		    pace_lustre_fsname(m[i].source, other, sizeof(other), e2, sizeof(e2)) == 0 &&
		    !strcmp(other, fsname)) {
			snprintf(err, sizeof(err), "file system '%s' is also mounted at %.200s "
				 "(another superblock): its llite instances cannot be told apart",
				 fsname, m[i].point);
			goto refuse;
		}
	}
	for (size_t k = 0; k < sizeof(dirs) / sizeof(dirs[0]) && found <= 0; k++) {
		snprintf(dir, sizeof(dir), "%s%s", pace_root(), dirs[k]);
		found = _instances(dir, fsname, inst, sizeof(inst));
	}
	if (found <= 0) {
		snprintf(err, sizeof(err), "no llite instance of '%s' under %s%s or %s%s (is "
			 "debugfs mounted, and readable by the daemon?)", fsname, pace_root(),
			 dirs[0], pace_root(), dirs[1]);
		goto refuse;
	}
	if (found > 1) {
		snprintf(err, sizeof(err), "%d llite instances of '%s' in %s for one mount: "
			 "cannot tell which is %.200s", found, fsname, dir, point);
		goto refuse;
	}
	if ((h = calloc(1, sizeof(*h))))
		h->fd = -1;
	if (!h || !(h->buf = malloc(LUSTRE_STATS_MAX))) {
		snprintf(err, sizeof(err), "out of memory");
		goto refuse;
	}
	if ((size_t)snprintf(h->path, sizeof(h->path), "%s/%s/stats", dir, inst) >= sizeof(h->path)) {
		snprintf(err, sizeof(err), "the stats path is too long");
		goto refuse;
	}
	if ((h->fd = open(h->path, O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(err, sizeof(err), "cannot open %.300s: open: %s", h->path, strerror(errno));
		goto refuse;
	}
	{
		struct pace_probe_sample s;
		char e2[400];
		ssize_t len = _slurp(h, e2, sizeof(e2));

		if (len < 0 || pace_lustre_parse_stats(h->buf, (size_t)len, &s, e2, sizeof(e2)) < 0) {
			snprintf(err, sizeof(err), "%.200s: %.280s", h->path, e2);
			goto refuse;
		}
	}
	free(m);
	return h;
refuse:
	log_warn("pace: file system %u:%u (Lustre at %.200s): no client counters: %s; its "
		 "transfers are paced on their own latency only", major(dev), minor(dev),
		 point ? point : "?", err);
	if (h) {
		if (h->fd >= 0)
			close(h->fd);
		free(h->buf);
		free(h);
	}
	h = NULL;
out:
	free(m);
	return h;
}

static int _lustre_read(void *hv, struct pace_probe_sample *s)
{
	struct _lustre *h = hv;
	char err[400];
	ssize_t len = _slurp(h, err, sizeof(err));

	if (len >= 0 && pace_lustre_parse_stats(h->buf, (size_t)len, s, err, sizeof(err)) == 0)
		return PACE_PROBE_NEW;
	log_warn("pace: Lustre client counters %s: %s", h->path, err);
	return -1;
}

static void _lustre_close(void *hv)
{
	struct _lustre *h = hv;

	if (h) {
		close(h->fd);
		free(h->buf);
		free(h);
	}
}

const struct pace_probe_ops pace_probe_lustre = {
	.name = "lustre",
	.open = _lustre_open,
	.read = _lustre_read,
	.close = _lustre_close,
};
