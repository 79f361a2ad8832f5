/* conf.c - see conf.h. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#include "conf.h"
#include "conf_int.h"
#include "log.h"

#define CONF_MAX_LINE 4096

/* The defaults are the table's (lua/stagehand_conf.lua), read by the same
   handlers as the file, so the documented value and the built-in one are
   one text. */
struct conf *conf_create(void)
{
	struct conf *c = calloc(1, sizeof(*c));
	char why[512];

	if (!c)
		return NULL;
	for (size_t i = 0; i < conf__nkeys; i++)
		if (conf__keys[i].def &&
		    conf__set(c, &conf__keys[i], conf__keys[i].def, why, sizeof(why)) < 0) {
			conf_destroy(c);
			return NULL;
		}
	return c;
}

static char *_trim(char *s)
{
	char *e;

	while (isspace((unsigned char)*s))
		s++;
	e = s + strlen(s);
	while (e > s && isspace((unsigned char)e[-1]))
		*--e = '\0';
	return s;
}

int conf_parse_line(struct conf *c, const char *line, const char *file, int lineno,
		    char *err, size_t errlen)
{
	char buf[CONF_MAX_LINE + 1], why[512];
	char *key, *val, *eq, *hash;
	size_t len = strlen(line);

	if (len > CONF_MAX_LINE)
		return log_errf(err, errlen, "%s:%d: error: line is longer than %d bytes",
			     file, lineno, CONF_MAX_LINE);
	memcpy(buf, line, len + 1);
	/* '#' starts a comment anywhere: no key or value may contain it. */
	hash = strchr(buf, '#');
	if (hash)
		*hash = '\0';
	key = _trim(buf);
	if (!*key)
		return 0;
	eq = strchr(key, '=');
	if (!eq)
		return log_errf(err, errlen, "%s:%d: error: expected Key=Value, got '%s'",
			     file, lineno, key);
	*eq = '\0';
	val = _trim(eq + 1);
	key = _trim(key);
	for (size_t i = 0; i < conf__nkeys; i++) {
		if (strcasecmp(key, conf__keys[i].name) != 0)
			continue;
		if (c->key_line[i])
			return log_errf(err, errlen, "%s:%d: error: %s is already set on line %d: "
				     "set it once", file, lineno, conf__keys[i].name, c->key_line[i]);
		if (conf__set(c, &conf__keys[i], val, why, sizeof(why)) < 0)
			return log_errf(err, errlen, "%s:%d: error: %s", file, lineno, why);
		c->key_line[i] = lineno;
		return 0;
	}
	return log_errf(err, errlen, "%s:%d: error: unknown key '%s' (see stagehand.conf(5) "
		     "for the list of keys)", file, lineno, key);
}

int conf_parse_file(struct conf *c, const char *path, char *err, size_t errlen)
{
	FILE *f = fopen(path, "re");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int lineno = 0, rc = 0;

	if (!f)
		return log_errf(err, errlen, "%s: error: cannot open: %s", path, strerror(errno));
	if (conf__set_str(&c->path, path, err, errlen) < 0) {
		fclose(f);
		return -1;
	}
	while ((n = getline(&line, &cap, f)) >= 0) {
		lineno++;
		if (n > 0 && line[n - 1] == '\n')
			line[--n] = '\0';
		if (n > 0 && line[n - 1] == '\r')
			line[--n] = '\0';
		if (memchr(line, '\0', (size_t)n)) {
			rc = log_errf(err, errlen, "%s:%d: error: NUL byte in line", path, lineno);
			break;
		}
		if (conf_parse_line(c, line, path, lineno, err, errlen) < 0) {
			rc = -1;
			break;
		}
	}
	if (rc == 0 && ferror(f))
		rc = log_errf(err, errlen, "%s: error: read failed: %s", path, strerror(errno));
	free(line);
	fclose(f);
	return rc;
}

int conf_key_line(const struct conf *c, const char *name)
{
	for (size_t i = 0; i < conf__nkeys; i++)
		if (strcmp(conf__keys[i].name, name) == 0)
			return c->key_line[i];
	return 0;
}

int conf_validate(const struct conf *c, char *err, size_t errlen)
{
	const char *file = c->path ? c->path : "(defaults)";

	if (c->pid_file && strcmp(c->pid_file, c->socket_path) == 0)
		return log_errf(err, errlen, "%s:%d: error: PidFile and SocketPath are the same file",
			     file, conf_key_line(c, "PidFile"));
	if (strcmp(c->state_db, c->socket_path) == 0)
		return log_errf(err, errlen, "%s:%d: error: StateDB and SocketPath are the same file",
			     file, conf_key_line(c, "StateDB"));
	if (c->bundle_file_max > c->bundle_size)
		return log_errf(err, errlen, "%s:%d: error: BundleFileMax (%llu bytes) is larger than "
			     "BundleSize (%llu bytes): a bundled file must fit in a bundle", file,
			     conf_key_line(c, conf_key_line(c, "BundleSize") ? "BundleSize" : "BundleFileMax"),
			     (unsigned long long)c->bundle_file_max, (unsigned long long)c->bundle_size);
	if (c->metrics_host && c->listen_host && c->metrics_port == c->listen_port &&
	    strcmp(c->metrics_host, c->listen_host) == 0)
		return log_errf(err, errlen, "%s:%d: error: MetricsAddress and ListenAddress are the "
			     "same address: give /metrics a port of its own", file,
			     conf_key_line(c, "MetricsAddress"));
	if (c->mover_partition && !c->slurm_watch)
		return log_errf(err, errlen, "%s:%d: error: MoverPartition needs SlurmWatch=yes: mover "
			     "jobs are submitted and followed through libslurm", file,
			     conf_key_line(c, "MoverPartition"));
	if (c->mover_partition && !c->listen_host && !c->server)
		return log_errf(err, errlen, "%s:%d: error: MoverPartition needs ListenAddress= (or "
			     "Server=): mover jobs on other nodes reach the daemon over TCP",
			     file, conf_key_line(c, "MoverPartition"));
	if (c->yield_mode == CONF_YIELD_CAP && c->yield_bandwidth == 0)
		return log_errf(err, errlen, "%s:%d: error: YieldMode=cap needs YieldBandwidth (the "
			     "bytes/s after-job transfers may use while jobs run, e.g. 100M)",
			     file, conf_key_line(c, "YieldMode"));
	if (c->archive_root) {
		for (char **r = c->scratch_roots; *r; r++) {
			size_t n = strlen(*r);

			if (strcmp(*r, "/") == 0 || (strncmp(c->archive_root, *r, n) == 0 &&
			    (c->archive_root[n] == '/' || c->archive_root[n] == '\0')))
				return log_errf(err, errlen, "%s:%d: error: ArchiveRoot %s is inside "
					     "scratch root %s: archive copies must leave scratch",
					     file, conf_key_line(c, "ArchiveRoot"), c->archive_root, *r);
		}
	}
	return 0;
}

void conf_destroy(struct conf *c)
{
	if (!c)
		return;
	free(c->path);
	for (size_t i = 0; i < conf__nkeys; i++)
		conf__clear(c, &conf__keys[i]);
	free(c);
}

const char *conf_xattr_prefix(const struct conf *c)
{
	return c->xattr_ns == CONF_XATTR_TRUSTED ? "trusted." : "user.";
}

const char *conf_log_level_name(enum log_level l)
{
	switch (l) {
	case LOG_LVL_ERROR: return "error";
	case LOG_LVL_WARN:  return "warning";
	case LOG_LVL_INFO:  return "info";
	default:            return "debug";
	}
}
