/*
 * conf_keys.c - the stagehand.conf keys: one handler a key, the table
 * conf.c parses with (conf_int.h), and the value syntaxes they share
 * (paths, lists, sizes, durations). conf.c owns the file, defaults,
 * validation across keys and teardown.
 */
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

static void _free_list(char **l)
{
	if (!l)
		return;
	for (char **p = l; *p; p++)
		free(*p);
	free(l);
}

/* Split a comma list into a new NULL-terminated array; empty items dropped. */
static char **_split(const char *val, int lower)
{
	size_t n = 1, k = 0;
	char **l;
	const char *p = val;

	for (const char *q = val; *q; q++)
		if (*q == ',')
			n++;
	l = calloc(n + 1, sizeof(*l));
	if (!l)
		return NULL;
	while (*p) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		const char *s = p;

		while (len && isspace((unsigned char)*s)) {
			s++;
			len--;
		}
		while (len && isspace((unsigned char)s[len - 1]))
			len--;
		if (len) {
			l[k] = strndup(s, len);
			if (!l[k]) {
				_free_list(l);
				return NULL;
			}
			if (lower)
				for (char *t = l[k]; *t; t++)
					*t = (char)tolower((unsigned char)*t);
			k++;
		}
		if (!e)
			break;
		p = e + 1;
	}
	return l;
}

static int _set_str(char **dst, const char *val, char *why, size_t whylen)
{
	char *s = strdup(val);

	if (!s)
		return log_errf(why, whylen, "out of memory");
	free(*dst);
	*dst = s;
	return 0;
}

static int _check_abs(const char *val, const char *what, char *why, size_t whylen)
{
	if (val[0] != '/')
		return log_errf(why, whylen, "%s must be an absolute path, not '%s'", what, val);
	if (strlen(val) >= PATH_MAX)
		return log_errf(why, whylen, "%s is longer than %d bytes", what, PATH_MAX - 1);
	for (const char *p = val; *p; p++)
		if (p[0] == '.' && p[1] == '.' && (p == val || p[-1] == '/') &&
		    (p[2] == '/' || p[2] == '\0'))
			return log_errf(why, whylen, "%s must not contain '..': '%s'", what, val);
	return 0;
}

static int _set_path(char **dst, const char *val, const char *what, char *why, size_t whylen)
{
	if (_check_abs(val, what, why, whylen) < 0)
		return -1;
	return _set_str(dst, val, why, whylen);
}

static int _set_roots(char ***dst, const char *val, const char *what, char *why, size_t whylen)
{
	char **l = _split(val, 0);

	if (!l)
		return log_errf(why, whylen, "out of memory");
	for (char **p = l; *p; p++) {
		size_t n = strlen(*p);

		if (_check_abs(*p, what, why, whylen) < 0) {
			_free_list(l);
			return -1;
		}
		while (n > 1 && (*p)[n - 1] == '/')
			(*p)[--n] = '\0';
	}
	_free_list(*dst);
	*dst = l;
	return 0;
}

static int _parse_int(const char *val, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(val, &end, 10);
	if (errno || end == val || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int _set_int(int *dst, const char *val, const char *key, long lo, long hi,
		    char *why, size_t whylen)
{
	long v;

	if (_parse_int(val, lo, hi, &v) < 0)
		return log_errf(why, whylen, "%s must be an integer from %ld to %ld, not '%s'",
			     key, lo, hi, val);
	*dst = (int)v;
	return 0;
}

int conf_parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	switch (toupper((unsigned char)*end)) {
	case 'K': mult = 1ULL << 10; end++; break;
	case 'M': mult = 1ULL << 20; end++; break;
	case 'G': mult = 1ULL << 30; end++; break;
	case 'T': mult = 1ULL << 40; end++; break;
	default: break;
	}
	if (toupper((unsigned char)*end) == 'B')
		end++;
	if (strcasecmp(end, "/s") == 0)
		end += 2;
	if (*end)
		return -1;
	if (v && mult > UINT64_MAX / v)
		return -1;
	*out = (uint64_t)v * mult;
	return 0;
}

int conf_parse_seconds(const char *s, long *out)
{
	char *end;
	long v, mult = 1;

	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno)
		return -1;
	switch (tolower((unsigned char)*end)) {
	case 's': end++; break;
	case 'm': mult = 60; end++; break;
	case 'h': mult = 3600; end++; break;
	case 'd': mult = 86400; end++; break;
	default: break;
	}
	if (*end || v > LONG_MAX / mult)
		return -1;
	*out = v * mult;
	return 0;
}

/* ---- one setter per key ---- */

static int _k_socket(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strlen(v) >= sizeof(((struct sockaddr_un *)0)->sun_path))
		return log_errf(w, wl, "SocketPath is longer than %zu bytes (a UNIX socket limit)",
			     sizeof(((struct sockaddr_un *)0)->sun_path) - 1);
	return _set_path(&c->socket_path, v, "SocketPath", w, wl);
}

static int _k_listen(struct conf *c, const char *v, char *w, size_t wl)
{
	const char *colon = strrchr(v, ':');
	long port;
	char *host;

	if (strcasecmp(v, "off") == 0 || strcasecmp(v, "none") == 0) {
		free(c->listen_host);
		c->listen_host = NULL;
		return 0;
	}
	if (!colon || colon == v || _parse_int(colon + 1, 1, 65535, &port) < 0)
		return log_errf(w, wl, "ListenAddress must be host:port (e.g. 0.0.0.0:7780) or off, not '%s'", v);
	if (v[0] == '[' && colon[-1] == ']')
		host = strndup(v + 1, (size_t)(colon - v) - 2);
	else
		host = strndup(v, (size_t)(colon - v));
	if (!host)
		return log_errf(w, wl, "out of memory");
	free(c->listen_host);
	c->listen_host = host;
	c->listen_port = (unsigned short)port;
	return 0;
}

/* Server=HOST:PORT: read by clients only (dclient.c checks the syntax
 * again when it uses it); the daemon keeps it so one file serves both. */
static int _k_server(struct conf *c, const char *v, char *w, size_t wl)
{
	const char *colon = strrchr(v, ':');
	long port;
	char *copy;

	if (!colon || colon == v || _parse_int(colon + 1, 1, 65535, &port) < 0 ||
	    strpbrk(v, "/ \t") != NULL ||
	    (v[0] != '[' && memchr(v, ':', (size_t)(colon - v)) != NULL) ||
	    (v[0] == '[' && colon[-1] != ']'))
		return log_errf(w, wl, "Server must be HOST:PORT (e.g. mover1:7780 or "
			     "[fd00::5]:7780), not '%s'", v);
	if (!(copy = strdup(v)))
		return log_errf(w, wl, "out of memory");
	free(c->server);
	c->server = copy;
	return 0;
}

static int _k_statedb(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_path(&c->state_db, v, "StateDB", w, wl);
}

static int _k_scratch(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_roots(&c->scratch_roots, v, "ScratchRoots entry", w, wl);
}

static int _k_archroot(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_path(&c->archive_root, v, "ArchiveRoot", w, wl);
}

static int _k_archmode(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "copy") == 0)
		c->archive_mode = CONF_ARCHIVE_COPY;
	else if (strcasecmp(v, "label") == 0)
		c->archive_mode = CONF_ARCHIVE_LABEL;
	else
		return log_errf(w, wl, "ArchiveMode must be 'copy' or 'label', not '%s'", v);
	return 0;
}

static int _k_workers(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->workers, v, "Workers", 1, 256, w, wl);
}

static int _k_bwcap(struct conf *c, const char *v, char *w, size_t wl)
{
	if (conf_parse_bytes(v, &c->bandwidth_cap) < 0)
		return log_errf(w, wl, "BandwidthCap must be bytes per second with an optional K/M/G/T suffix "
			     "(e.g. 200M), or 0 for unlimited, not '%s'", v);
	return 0;
}

static int _k_retries(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->max_retries, v, "MaxRetries", 0, 100, w, wl);
}

static int _k_backoff(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->retry_backoff, v, "RetryBackoff", 1, 86400, w, wl);
}

static int _k_xattrns(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "user") == 0)
		c->xattr_ns = CONF_XATTR_USER;
	else if (strcasecmp(v, "trusted") == 0)
		c->xattr_ns = CONF_XATTR_TRUSTED;
	else
		return log_errf(w, wl, "XattrNamespace must be 'user' or 'trusted', not '%s'", v);
	return 0;
}

static int _k_schemes(struct conf *c, const char *v, char *w, size_t wl)
{
	char **l = _split(v, 1);

	if (!l)
		return log_errf(w, wl, "out of memory");
	for (char **p = l; *p; p++) {
		int ok = isalpha((unsigned char)(*p)[0]);

		for (const char *q = *p; ok && *q; q++)
			ok = isalnum((unsigned char)*q) || *q == '+' || *q == '-' || *q == '.';
		if (!ok) {
			log_errf(w, wl, "AllowedSchemes: '%s' is not a URL scheme (letters, digits, + - .)", *p);
			_free_list(l);
			return -1;
		}
	}
	_free_list(c->allowed_schemes);
	c->allowed_schemes = l;
	return 0;
}

static int _k_stageinroots(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_roots(&c->stage_in_roots, v, "StageInRoots entry", w, wl);
}

static int _set_names(char ***dst, const char *v, const char *key, char *w, size_t wl)
{
	char **l = _split(v, 0);

	if (!l)
		return log_errf(w, wl, "out of memory");
	for (char **p = l; *p; p++)
		for (const char *q = *p; *q; q++)
			if (isspace((unsigned char)*q) || *q == ':' || *q == '/') {
				log_errf(w, wl, "%s: '%s' is not a valid name", key, *p);
				_free_list(l);
				return -1;
			}
	_free_list(*dst);
	*dst = l;
	return 0;
}

static int _k_adminusers(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_names(&c->admin_users, v, "AdminUsers", w, wl);
}

static int _k_admingroups(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_names(&c->admin_groups, v, "AdminGroups", w, wl);
}

static int _k_loglevel(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "error") == 0)
		c->log_level = LOG_LVL_ERROR;
	else if (strcasecmp(v, "warning") == 0 || strcasecmp(v, "warn") == 0)
		c->log_level = LOG_LVL_WARN;
	else if (strcasecmp(v, "info") == 0)
		c->log_level = LOG_LVL_INFO;
	else if (strcasecmp(v, "debug") == 0)
		c->log_level = LOG_LVL_DEBUG;
	else
		return log_errf(w, wl, "LogLevel must be error, warning, info or debug, not '%s'", v);
	return 0;
}

static int _k_pidfile(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "none") == 0) {
		free(c->pid_file);
		c->pid_file = NULL;
		return 0;
	}
	return _set_path(&c->pid_file, v, "PidFile", w, wl);
}

static int _k_maxreq(struct conf *c, const char *v, char *w, size_t wl)
{
	uint64_t b;

	if (conf_parse_bytes(v, &b) < 0 || b < 1024 || b > (64ULL << 20))
		return log_errf(w, wl, "MaxRequestBytes must be from 1K to 64M, not '%s'", v);
	c->max_request_bytes = (size_t)b;
	return 0;
}

static int _k_maxconn(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->max_connections_per_user, v, "MaxConnectionsPerUser", 1, 10000, w, wl);
}

static int _k_ioclass(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "idle") == 0)
		c->io_class = CONF_IO_IDLE;
	else if (strcasecmp(v, "best-effort") == 0)
		c->io_class = CONF_IO_BEST_EFFORT;
	else
		return log_errf(w, wl, "IOClass must be 'idle' or 'best-effort', not '%s'", v);
	return 0;
}

static int _k_conntimeout(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->connection_timeout, v, "ConnectionTimeout", 1, 3600, w, wl);
}

static int _k_draintimeout(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->drain_timeout, v, "DrainTimeout", 0, 86400, w, wl);
}

static int _k_checksum(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "xxh128") != 0 && strcasecmp(v, "sha256") != 0)
		return log_errf(w, wl, "Checksum must be 'xxh128' or 'sha256', not '%s'", v);
	if (_set_str(&c->checksum, v, w, wl) < 0)
		return -1;
	for (char *p = c->checksum; *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return 0;
}

static int _k_slurmwatch(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "yes") == 0)
		c->slurm_watch = 1;
	else if (strcasecmp(v, "no") == 0)
		c->slurm_watch = 0;
	else
		return log_errf(w, wl, "SlurmWatch must be 'yes' or 'no', not '%s'", v);
	return 0;
}

static int _k_createuserdirs(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "yes") == 0)
		c->create_user_dirs = 1;
	else if (strcasecmp(v, "no") == 0)
		c->create_user_dirs = 0;
	else
		return log_errf(w, wl, "CreateUserDirs must be 'yes' or 'no', not '%s'", v);
	return 0;
}

static int _k_slurmwatchint(struct conf *c, const char *v, char *w, size_t wl)
{
	long sec;

	if (conf_parse_seconds(v, &sec) < 0 || sec < 1 || sec > 3600)
		return log_errf(w, wl, "SlurmWatchInterval must be 1s to 1h (e.g. 2, 10s, 1m), not '%s'",
			     v);
	c->slurm_watch_interval = (int)sec;
	return 0;
}

static int _k_slurmwatchfull(struct conf *c, const char *v, char *w, size_t wl)
{
	long sec;

	if (conf_parse_seconds(v, &sec) < 0 || sec < 1 || sec > 86400)
		return log_errf(w, wl, "SlurmWatchFullInterval must be 1s to 1d (e.g. 60, 5m), not "
			     "'%s'", v);
	c->slurm_watch_full_interval = (int)sec;
	return 0;
}

static int _k_slurmconf(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "environment") == 0) {
		free(c->slurm_conf);
		c->slurm_conf = NULL;
		return 0;
	}
	return _set_path(&c->slurm_conf, v, "SlurmConf", w, wl);
}

/* ---- Bundling (small-file bundles for archive copies) ---- */

static int _k_archbundle(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "yes") == 0)
		c->archive_bundle = 1;
	else if (strcasecmp(v, "no") == 0)
		c->archive_bundle = 0;
	else
		return log_errf(w, wl, "ArchiveBundle must be 'yes' or 'no', not '%s'", v);
	return 0;
}

static int _k_bundleminfiles(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->bundle_min_files, v, "BundleMinFiles", 1, 1000000000, w, wl);
}

static int _k_bundlefilemax(struct conf *c, const char *v, char *w, size_t wl)
{
	uint64_t b;

	if (conf_parse_bytes(v, &b) < 0 || b < 1024 || b > (64ULL << 20))
		return log_errf(w, wl, "BundleFileMax must be a size from 1K to 64M (e.g. 1M), not '%s'", v);
	c->bundle_file_max = b;
	return 0;
}

static int _k_bundlesize(struct conf *c, const char *v, char *w, size_t wl)
{
	uint64_t b;

	if (conf_parse_bytes(v, &b) < 0 || b < (1ULL << 20) || b > (1ULL << 40))
		return log_errf(w, wl, "BundleSize must be a size from 1M to 1T (e.g. 1G), not '%s'", v);
	c->bundle_size = b;
	return 0;
}

/* ---- URL backends ---- */

static int _k_s3endpoint(struct conf *c, const char *v, char *w, size_t wl)
{
	size_t n = strlen(v);

	if (strncasecmp(v, "https://", 8) != 0 && strncasecmp(v, "http://", 7) != 0)
		return log_errf(w, wl, "S3Endpoint must be an http:// or https:// URL, not '%s'", v);
	for (const char *p = v; *p; p++)
		if (isspace((unsigned char)*p) || *p == '@')
			return log_errf(w, wl, "S3Endpoint must not contain spaces or credentials ('@')");
	if (_set_str(&c->s3_endpoint, v, w, wl) < 0)
		return -1;
	while (n > 8 && c->s3_endpoint[n - 1] == '/')
		c->s3_endpoint[--n] = '\0';
	return 0;
}

static int _k_s3region(struct conf *c, const char *v, char *w, size_t wl)
{
	if (!*v || strlen(v) > 64)
		return log_errf(w, wl, "S3Region must be a region name such as us-east-1");
	for (const char *p = v; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_')
			return log_errf(w, wl, "S3Region '%s': only letters, digits, '-' and '_'", v);
	return _set_str(&c->s3_region, v, w, wl);
}

static int _k_s3creds(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "none") == 0) {
		free(c->s3_credentials_file);
		c->s3_credentials_file = NULL;
		return 0;
	}
	return _set_path(&c->s3_credentials_file, v, "S3CredentialsFile", w, wl);
}

/* S3's own bounds for a part: 5 MiB (all but the last part) to 5 GiB. */
static int _k_s3partsize(struct conf *c, const char *v, char *w, size_t wl)
{
	uint64_t b;

	if (conf_parse_bytes(v, &b) < 0 || b < (5ULL << 20) || b > (5ULL << 30))
		return log_errf(w, wl, "S3PartSize must be a size from 5M to 5G (S3's bounds for "
			     "a part), not '%s'", v);
	c->s3_part_size = b;
	return 0;
}

static int _k_urlcafile(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "system") == 0) {
		free(c->url_ca_file);
		c->url_ca_file = NULL;
		return 0;
	}
	return _set_path(&c->url_ca_file, v, "URLCAFile", w, wl);
}

static int _k_archworkers(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->archive_workers, v, "ArchiveWorkers", 1, 256, w, wl);
}

static int _k_yieldjobs(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "yes") == 0)
		c->yield_to_jobs = 1;
	else if (strcasecmp(v, "no") == 0)
		c->yield_to_jobs = 0;
	else
		return log_errf(w, wl, "YieldToJobs must be 'yes' or 'no', not '%s'", v);
	return 0;
}

static int _k_yieldmode(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "pause") == 0)
		c->yield_mode = CONF_YIELD_PAUSE;
	else if (strcasecmp(v, "cap") == 0)
		c->yield_mode = CONF_YIELD_CAP;
	else if (strcasecmp(v, "adaptive") == 0)
		c->yield_mode = CONF_YIELD_ADAPTIVE;
	else
		return log_errf(w, wl, "YieldMode must be 'pause', 'cap' or 'adaptive', not '%s'", v);
	return 0;
}

static int _k_yieldbw(struct conf *c, const char *v, char *w, size_t wl)
{
	if (conf_parse_bytes(v, &c->yield_bandwidth) < 0)
		return log_errf(w, wl, "YieldBandwidth must be bytes per second with an optional K/M/G/T "
			     "suffix (e.g. 20M), or 0 to pause, not '%s'", v);
	return 0;
}

/* A duration of at most max_days days (0 allowed: zero says what 0 means). */
static int _set_days(int *dst, const char *v, long max_days, const char *key, const char *eg,
		     const char *zero, char *w, size_t wl)
{
	long s;

	if (conf_parse_seconds(v, &s) < 0 || s > max_days * 86400)
		return log_errf(w, wl, "%s must be a duration up to %ldd (e.g. %s), or 0 %s, not '%s'",
				key, max_days, eg, zero, v);
	*dst = (int)s;
	return 0;
}

static int _k_yieldmax(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_days(&c->yield_max_delay, v, 30, "YieldMaxDelay", "90s, 15m, 2h",
			 "to yield for as long as jobs run", w, wl);
}

static int _k_yieldtrickle(struct conf *c, const char *v, char *w, size_t wl)
{
	if (conf_parse_bytes(v, &c->yield_trickle) < 0)
		return log_errf(w, wl, "YieldTrickle must be bytes per second with an optional K/M/G/T "
			     "suffix (e.g. 10M), or 0 for unlimited, not '%s'", v);
	return 0;
}

static int _k_yieldlead(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_days(&c->yield_stage_in_lead, v, 7, "YieldStageInLead", "10m, 1h",
			 "to never pace a stage-in", w, wl);
}

static int _k_yieldprobe(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "none") == 0) {
		free(c->yield_probe);
		c->yield_probe = NULL;
		return 0;
	}
	return _set_path(&c->yield_probe, v, "YieldProbe", w, wl);
}

static int _k_syncmode(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "batch") == 0)
		c->sync_batch = 1;
	else if (strcasecmp(v, "file") == 0)
		c->sync_batch = 0;
	else
		return log_errf(w, wl, "SyncMode must be 'batch' or 'file', not '%s'", v);
	return 0;
}

static int _k_verifymode(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "full") == 0)
		c->verify_sample = 0;
	else if (strcasecmp(v, "sample") == 0)
		c->verify_sample = 1;
	else
		return log_errf(w, wl, "VerifyMode must be 'full' or 'sample', not '%s'", v);
	return 0;
}

/* MetricsAddress=HOST:PORT or off: shares ListenAddress's syntax. */
static int _k_metrics(struct conf *c, const char *v, char *w, size_t wl)
{
	char *h = c->listen_host;
	unsigned short p = c->listen_port;
	int rc;

	c->listen_host = c->metrics_host;
	c->listen_port = c->metrics_port;
	rc = _k_listen(c, v, w, wl);
	c->metrics_host = c->listen_host;
	c->metrics_port = c->listen_port;
	c->listen_host = h;
	c->listen_port = p;
	if (rc < 0)
		return log_errf(w, wl, "MetricsAddress must be host:port (e.g. 127.0.0.1:9750) or "
			     "off, not '%s'", v);
	return 0;
}

static int _k_metricshash(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "yes") != 0 && strcasecmp(v, "no") != 0)
		return log_errf(w, wl, "MetricsHashUsers must be 'yes' or 'no', not '%s'", v);
	c->metrics_hash_users = strcasecmp(v, "yes") == 0;
	return 0;
}

/* NotifyCommand=/abs/program [ARG...]: split on blanks, no quoting, no shell. */
static int _k_notify(struct conf *c, const char *v, char *w, size_t wl)
{
	char *copy = strdup(v), *save = NULL, **l;
	size_t n = 0;

	if (!copy || !(l = calloc(strlen(v) / 2 + 2, sizeof(*l)))) {
		free(copy);
		return log_errf(w, wl, "out of memory");
	}
	for (char *t = strtok_r(copy, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
		if (!(l[n++] = strdup(t))) {
			_free_list(l);
			free(copy);
			return log_errf(w, wl, "out of memory");
		}
	free(copy);
	if (n == 1 && strcasecmp(l[0], "none") == 0) {
		_free_list(l);
		l = NULL;
	} else if (n == 0 || _check_abs(l[0], "NotifyCommand's program", w, wl) < 0) {
		_free_list(l);
		return n ? -1 : log_errf(w, wl, "NotifyCommand needs a program (an absolute path)");
	}
	_free_list(c->notify_argv);
	c->notify_argv = l;
	return 0;
}

static int _k_notifytimeout(struct conf *c, const char *v, char *w, size_t wl)
{
	long s;

	if (conf_parse_seconds(v, &s) < 0 || s < 1 || s > 3600)
		return log_errf(w, wl, "NotifyTimeout must be a duration from 1s to 1h, not '%s'", v);
	c->notify_timeout = (int)s;
	return 0;
}

static int _k_maxdirectives(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->max_directives, v, "MaxDirectives", 1, 4096, w, wl);
}

static int _k_maxdirline(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->max_directive_line, v, "MaxDirectiveLine", 64, 65536, w, wl);
}

static int _k_maxpath(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->max_path_length, v, "MaxPathLength", 16, 4095, w, wl);
}

static int _k_maxplanbytes(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->max_plan_bytes, v, "MaxPlanBytes", 256, 1 << 24, w, wl);
}

static int _k_submitmode(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "hold") == 0)
		c->submit_mode = CONF_SUBMIT_HOLD;
	else if (strcasecmp(v, "bb") == 0)
		c->submit_mode = CONF_SUBMIT_BB;
	else
		return log_errf(w, wl, "SubmitMode must be 'hold' or 'bb', not '%s'", v);
	return 0;
}

static int _k_poolcap(struct conf *c, const char *v, char *w, size_t wl)
{
	/* 2^53: lua/stagehand.lua holds it in a Lua number exactly */
	if (strchr(v, '/') || conf_parse_bytes(v, &c->pool_capacity) < 0 ||
	    c->pool_capacity == 0 || c->pool_capacity > (1ULL << 53))
		return log_errf(w, wl, "PoolCapacity must be a size in bytes with an optional K/M/G/T "
			     "suffix (e.g. 500G), from 1 to 8P, not '%s'", v);
	return 0;
}

static int _k_trusteduids(struct conf *c, const char *v, char *w, size_t wl)
{
	char **l = _split(v, 0);

	if (!l)
		return log_errf(w, wl, "out of memory");
	for (char **p = l; *p; p++) {
		long u;

		if (_parse_int(*p, 0, 4294967294L, &u) < 0) {
			log_errf(w, wl, "TrustedUids: '%s' is not a numeric uid", *p);
			_free_list(l);
			return -1;
		}
	}
	_free_list(c->trusted_uids);
	c->trusted_uids = l;
	return 0;
}

/* ---- Mover jobs ---- */

static int _k_moverpart(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "none") == 0) {
		free(c->mover_partition);
		c->mover_partition = NULL;
		return 0;
	}
	for (const char *p = v; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.')
			return log_errf(w, wl, "MoverPartition must be a Slurm partition name (letters, "
				     "digits, '_', '-', '.') or none, not '%s'", v);
	return _set_str(&c->mover_partition, v, w, wl);
}

static int _k_movercmd(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_path(&c->mover_command, v, "MoverCommand", w, wl);
}

static int _k_movershardbytes(struct conf *c, const char *v, char *w, size_t wl)
{
	if (conf_parse_bytes(v, &c->mover_shard_bytes) < 0 || c->mover_shard_bytes == 0)
		return log_errf(w, wl, "MoverShardBytes must be a size in bytes above 0 with an "
			     "optional K/M/G/T suffix, not '%s'", v);
	return 0;
}

static int _k_movershardfiles(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->mover_shard_files, v, "MoverShardFiles", 1, 1000000000, w, wl);
}

static int _k_movermaxjobs(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->mover_max_jobs, v, "MoverMaxJobs", 1, 1024, w, wl);
}

static int _k_moverbw(struct conf *c, const char *v, char *w, size_t wl)
{
	if (conf_parse_bytes(v, &c->mover_bandwidth) < 0)
		return log_errf(w, wl, "MoverBandwidth must be bytes per second with an optional "
			     "K/M/G/T suffix (0 = unlimited), not '%s'", v);
	return 0;
}

/* A duration up to a year, or never (-1): the daemon leaves staged inputs to the site. */
static int _k_inputretention(struct conf *c, const char *v, char *w, size_t wl)
{
	long s;

	if (strcasecmp(v, "never") == 0) {
		c->input_retention = -1;
		return 0;
	}
	if (conf_parse_seconds(v, &s) < 0 || s > 365L * 86400)
		return log_errf(w, wl, "InputRetention must be a duration up to 365d (e.g. 24h, 90m, "
				"0 to remove at once) or never, not '%s'", v);
	c->input_retention = (int)s;
	return 0;
}

static const struct _key _keys[] = {
	{ "SocketPath", _k_socket },
	{ "ListenAddress", _k_listen },
	{ "Server", _k_server },
	{ "StateDB", _k_statedb },
	{ "ScratchRoots", _k_scratch },
	{ "ArchiveRoot", _k_archroot },
	{ "ArchiveMode", _k_archmode },
	{ "Workers", _k_workers },
	{ "BandwidthCap", _k_bwcap },
	{ "MaxRetries", _k_retries },
	{ "RetryBackoff", _k_backoff },
	{ "XattrNamespace", _k_xattrns },
	{ "AllowedSchemes", _k_schemes },
	{ "StageInRoots", _k_stageinroots },
	{ "InputRetention", _k_inputretention },
	{ "AdminUsers", _k_adminusers },
	{ "AdminGroups", _k_admingroups },
	{ "LogLevel", _k_loglevel },
	{ "PidFile", _k_pidfile },
	{ "MaxRequestBytes", _k_maxreq },
	{ "MaxConnectionsPerUser", _k_maxconn },
	{ "IOClass", _k_ioclass },
	{ "ConnectionTimeout", _k_conntimeout },
	{ "DrainTimeout", _k_draintimeout },
	{ "Checksum", _k_checksum },
	{ "SlurmWatch", _k_slurmwatch },
	{ "SlurmConf", _k_slurmconf },
	{ "SlurmWatchInterval", _k_slurmwatchint },
	{ "SlurmWatchFullInterval", _k_slurmwatchfull },
	{ "CreateUserDirs", _k_createuserdirs },
	/* Bundling */
	{ "ArchiveBundle", _k_archbundle },
	{ "BundleMinFiles", _k_bundleminfiles },
	{ "BundleFileMax", _k_bundlefilemax },
	{ "BundleSize", _k_bundlesize },
	/* URL backends */
	{ "S3Endpoint", _k_s3endpoint },
	{ "S3Region", _k_s3region },
	{ "S3CredentialsFile", _k_s3creds },
	{ "S3PartSize", _k_s3partsize },
	{ "URLCAFile", _k_urlcafile },
	{ "ArchiveWorkers", _k_archworkers },
	{ "YieldToJobs", _k_yieldjobs },
	{ "YieldMode", _k_yieldmode },
	{ "YieldBandwidth", _k_yieldbw },
	{ "YieldMaxDelay", _k_yieldmax },
	{ "YieldTrickle", _k_yieldtrickle },
	{ "YieldStageInLead", _k_yieldlead },
	{ "YieldProbe", _k_yieldprobe },
	{ "SyncMode", _k_syncmode },
	{ "VerifyMode", _k_verifymode },
	/* Observability, notifications */
	{ "MetricsAddress", _k_metrics },
	{ "MetricsHashUsers", _k_metricshash },
	{ "NotifyCommand", _k_notify },
	{ "NotifyTimeout", _k_notifytimeout },
	/* #DATA grammar limits (the submit check, lua/stagehand.lua, the daemon) */
	{ "MaxDirectives", _k_maxdirectives },
	{ "MaxDirectiveLine", _k_maxdirline },
	{ "MaxPathLength", _k_maxpath },
	/* Submit-time policy (lua/stagehand.lua) */
	{ "MaxPlanBytes", _k_maxplanbytes },
	{ "SubmitMode", _k_submitmode },
	{ "PoolCapacity", _k_poolcap },
	{ "TrustedUids", _k_trusteduids },
	{ "MoverPartition", _k_moverpart },
	{ "MoverCommand", _k_movercmd },
	{ "MoverShardBytes", _k_movershardbytes },
	{ "MoverShardFiles", _k_movershardfiles },
	{ "MoverMaxJobs", _k_movermaxjobs },
	{ "MoverBandwidth", _k_moverbw },
};

#define NKEYS (sizeof(_keys) / sizeof(_keys[0]))
_Static_assert(NKEYS <= sizeof(((struct conf *)0)->key_line) / sizeof(int),
	       "conf.key_line is too small");

/* ---- what conf.c uses (conf_int.h) ---- */

const struct _key *const conf__keys = _keys;
const size_t conf__nkeys = NKEYS;

int conf__set_str(char **dst, const char *val, char *why, size_t whylen)
{
	return _set_str(dst, val, why, whylen);
}

char **conf__split(const char *val, int lower)
{
	return _split(val, lower);
}

void conf__free_list(char **l)
{
	_free_list(l);
}
