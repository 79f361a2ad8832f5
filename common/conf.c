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
#include "dsl.h"
#include "log.h"

#define CONF_MAX_LINE 4096

struct conf *conf_create(void)
{
	struct conf *c = calloc(1, sizeof(*c));
	char w[128];

	if (!c)
		return NULL;
	if (conf__set_str(&c->socket_path, "/run/stagehand/stagehandd.sock", w, sizeof(w)) < 0 ||
	    conf__set_str(&c->state_db, "/var/lib/stagehand/stagehand.db", w, sizeof(w)) < 0 ||
	    conf__set_str(&c->pid_file, "/run/stagehand/stagehandd.pid", w, sizeof(w)) < 0 ||
	    conf__set_str(&c->checksum, "xxh128", w, sizeof(w)) < 0 ||
	    conf__set_str(&c->s3_region, "us-east-1", w, sizeof(w)) < 0 ||
	    !(c->scratch_roots = conf__split("", 0)) ||
	    !(c->stage_in_roots = conf__split("", 0)) ||
	    !(c->admin_users = conf__split("", 0)) ||
	    !(c->admin_groups = conf__split("", 0)) ||
	    !(c->allowed_schemes = conf__split("https,s3,ftp,ftps,sftp,file", 1)) ||
	    !(c->trusted_uids = conf__split("0", 0))) {
		conf_destroy(c);
		return NULL;
	}
	c->archive_mode = CONF_ARCHIVE_COPY;
	c->slurm_watch = 1;
	c->slurm_watch_interval = 2;
	c->slurm_watch_full_interval = 60;
	c->create_user_dirs = 1;
	c->workers = 2;
	c->bandwidth_cap = 0;
	c->max_retries = 3;
	c->retry_backoff = 30;
	c->xattr_ns = CONF_XATTR_USER;
	c->log_level = LOG_LVL_INFO;
	c->max_request_bytes = 65536;
	c->max_connections_per_user = 16;
	c->io_class = CONF_IO_IDLE;
	c->connection_timeout = 30;
	c->drain_timeout = 60;
	c->archive_bundle = 0;
	c->bundle_min_files = 1000;
	c->bundle_file_max = 1ULL << 20;
	c->bundle_size = 1ULL << 30;
	c->s3_part_size = 64ULL << 20;
	c->archive_workers = 1;
	c->sync_batch = 1;
	c->yield_to_jobs = 1;
	c->yield_bandwidth = 0;
	c->yield_max_delay = 2 * 3600;
	c->yield_trickle = 10ULL << 20;
	c->yield_mode = CONF_YIELD_ADAPTIVE;
	c->yield_stage_in_lead = 600;
	c->notify_timeout = 30;
	c->input_retention = 24 * 3600;
	c->max_directives = DSL_DEFAULT_MAX_DIRECTIVES;
	c->max_directive_line = DSL_DEFAULT_MAX_LINE;
	c->max_path_length = DSL_DEFAULT_MAX_PATH;
	c->max_plan_bytes = 16384;
	c->submit_mode = CONF_SUBMIT_HOLD;
	c->mover_shard_bytes = 64ULL << 30;
	c->mover_shard_files = 100000;
	c->mover_max_jobs = 16;
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
		if (conf__keys[i].set(c, val, why, sizeof(why)) < 0)
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

static int _line_of(const struct conf *c, const char *name)
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
			     file, _line_of(c, "PidFile"));
	if (strcmp(c->state_db, c->socket_path) == 0)
		return log_errf(err, errlen, "%s:%d: error: StateDB and SocketPath are the same file",
			     file, _line_of(c, "StateDB"));
	if (c->bundle_file_max > c->bundle_size)
		return log_errf(err, errlen, "%s:%d: error: BundleFileMax (%llu bytes) is larger than "
			     "BundleSize (%llu bytes): a bundled file must fit in a bundle", file,
			     _line_of(c, _line_of(c, "BundleSize") ? "BundleSize" : "BundleFileMax"),
			     (unsigned long long)c->bundle_file_max, (unsigned long long)c->bundle_size);
	if (c->metrics_host && c->listen_host && c->metrics_port == c->listen_port &&
	    strcmp(c->metrics_host, c->listen_host) == 0)
		return log_errf(err, errlen, "%s:%d: error: MetricsAddress and ListenAddress are the "
			     "same address: give /metrics a port of its own", file,
			     _line_of(c, "MetricsAddress"));
	if (c->mover_partition && !c->slurm_watch)
		return log_errf(err, errlen, "%s:%d: error: MoverPartition needs SlurmWatch=yes: mover "
			     "jobs are submitted and followed through libslurm", file,
			     _line_of(c, "MoverPartition"));
	if (c->mover_partition && !c->listen_host && !c->server)
		return log_errf(err, errlen, "%s:%d: error: MoverPartition needs ListenAddress= (or "
			     "Server=): mover jobs on other nodes reach the daemon over TCP",
			     file, _line_of(c, "MoverPartition"));
	if (c->yield_mode == CONF_YIELD_CAP && c->yield_bandwidth == 0)
		return log_errf(err, errlen, "%s:%d: error: YieldMode=cap needs YieldBandwidth (the "
			     "bytes/s after-job transfers may use while jobs run, e.g. 100M)",
			     file, _line_of(c, "YieldMode"));
	if (c->archive_root) {
		for (char **r = c->scratch_roots; *r; r++) {
			size_t n = strlen(*r);

			if (strcmp(*r, "/") == 0 || (strncmp(c->archive_root, *r, n) == 0 &&
			    (c->archive_root[n] == '/' || c->archive_root[n] == '\0')))
				return log_errf(err, errlen, "%s:%d: error: ArchiveRoot %s is inside "
					     "scratch root %s: archive copies must leave scratch",
					     file, _line_of(c, "ArchiveRoot"), c->archive_root, *r);
		}
	}
	return 0;
}

void conf_destroy(struct conf *c)
{
	if (!c)
		return;
	free(c->path);
	free(c->socket_path);
	free(c->listen_host);
	free(c->server);
	free(c->state_db);
	conf__free_list(c->scratch_roots);
	free(c->archive_root);
	conf__free_list(c->allowed_schemes);
	conf__free_list(c->stage_in_roots);
	conf__free_list(c->admin_users);
	conf__free_list(c->admin_groups);
	conf__free_list(c->trusted_uids);
	free(c->pid_file);
	free(c->checksum);
	free(c->s3_endpoint);
	free(c->s3_region);
	free(c->s3_credentials_file);
	free(c->url_ca_file);
	free(c->yield_probe);
	free(c->slurm_conf);
	free(c->metrics_host);
	conf__free_list(c->notify_argv);
	free(c->mover_partition);
	free(c->mover_command);
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
