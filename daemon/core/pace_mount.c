/* pace_mount.c - the probes' system roots and mount table; see pace_probe.h. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sysmacros.h>

#include "log.h"
#include "pace_probe.h"

const char *pace_root(void)
{
	/* secure_getenv: a set-id caller's environment is not a root. Only the
	   daemon's own environment (its unit file, a test) can set it. */
	const char *r = secure_getenv("STAGEHAND_PACE_ROOT");

	return r ? r : "";
}

/* Copy a mountinfo field, undoing its octal escapes (\040 space, \011 tab,
   \012 newline, \134 backslash). -1 if it does not fit or an escape is bad. */
static int _unescape(const char *f, char *out, size_t len)
{
	size_t o = 0;

	for (const char *p = f; *p; p++) {
		char c = *p;

		if (c == '\\') {
			if (p[1] < '0' || p[1] > '3' || p[2] < '0' || p[2] > '7' || p[3] < '0' ||
			    p[3] > '7')
				return -1;
			c = (char)((p[1] - '0') * 64 + (p[2] - '0') * 8 + (p[3] - '0'));
			p += 3;
		}
		if (c == '\0' || o + 1 >= len)
			return -1;
		out[o++] = c;
	}
	out[o] = '\0';
	return 0;
}

/* One line into m; -1 if it is not mountinfo's format. */
static int _parse(char *line, struct pace_mount *m)
{
	char *f[64], *save = NULL;
	int n = 0, dash = -1;
	unsigned maj, min;
	char tail;

	for (char *t = strtok_r(line, " ", &save); t && n < 64; t = strtok_r(NULL, " ", &save))
		f[n++] = t;
	for (int i = 6; i < n; i++)
		if (!strcmp(f[i], "-")) {
			dash = i;
			break;
		}
	if (n < 10 || dash < 0 || n < dash + 3)
		return -1;
	if (sscanf(f[2], "%u:%u%c", &maj, &min, &tail) != 2)
		return -1;
	m->major = maj;
	m->minor = min;
	if (_unescape(f[3], m->root, sizeof(m->root)) < 0 ||
	    _unescape(f[4], m->point, sizeof(m->point)) < 0 ||
	    _unescape(f[dash + 1], m->fstype, sizeof(m->fstype)) < 0 ||
	    _unescape(f[dash + 2], m->source, sizeof(m->source)) < 0)
		return -1;
	return 0;
}

/* The mounts of fstype (NULL: any) and, with has_dev, of dev only. */
static int _mounts(const char *fstype, int has_dev, dev_t dev, struct pace_mount *out, int max,
		   char *err, size_t errlen)
{
	char path[4096], *line = NULL;
	size_t cap = 0;
	ssize_t len;
	int found = 0, lineno = 0;
	FILE *fp;

	if ((size_t)snprintf(path, sizeof(path), "%s/proc/self/mountinfo", pace_root()) >=
	    sizeof(path))
		return log_errf(err, errlen, "the mount table's path is too long (STAGEHAND_PACE_ROOT)");
	if (!(fp = fopen(path, "re")))
		return log_errf(err, errlen, "cannot read %s: fopen: %s", path, strerror(errno));
	while ((len = getline(&line, &cap, fp)) > 0) {
		struct pace_mount m;

		lineno++;
		if (line[len - 1] == '\n')
			line[len - 1] = '\0';
		if (_parse(line, &m) < 0) {
			free(line);
			fclose(fp);
			return log_errf(err, errlen, "%s:%d: not a mountinfo line", path, lineno);
		}
		if ((fstype && strcmp(m.fstype, fstype)) ||
		    (has_dev && (m.major != major(dev) || m.minor != minor(dev))))
			continue;
		if (found < max)
			out[found] = m;
		found++;
	}
	free(line);
	fclose(fp);
	return found;
}

int pace_mounts(const char *fstype, struct pace_mount *out, int max, char *err, size_t errlen)
{
	return _mounts(fstype, 0, 0, out, max, err, errlen);
}

int pace_mount_point(dev_t dev, char *point, size_t len)
{
	struct pace_mount *m = calloc(64, sizeof(*m));
	char err[256];
	int n, best = -1;

	if (!m)
		return -1;
	n = _mounts(NULL, 1, dev, m, 64, err, sizeof(err));
	for (int i = 0; i < n && i < 64; i++)
		if (best < 0 || (!strcmp(m[i].root, "/") && strcmp(m[best].root, "/")))
			best = i;
	/* A FUSE file system may be a user's own mount, its mount point a user's
	   path: /metrics shows its device only. */
	if (best >= 0 && !strncmp(m[best].fstype, "fuse", 4))
		best = -1;
	if (best >= 0 && (size_t)snprintf(point, len, "%s", m[best].point) >= len)
		best = -1;
	free(m);
	return best >= 0 ? 0 : -1;
}
