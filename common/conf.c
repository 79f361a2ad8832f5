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

#define CONF_MAX_LINE 4096

struct _key {
	const char *name;
	int (*set)(struct conf *c, const char *val, char *why, size_t whylen);
};

static int _fail(char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static int _fail(char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (vsnprintf(why, whylen, fmt, ap) >= (int)whylen && whylen > 4)
		memcpy(why + whylen - 4, "...", 4);
	va_end(ap);
	return -1;
}

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
		return _fail(why, whylen, "out of memory");
	free(*dst);
	*dst = s;
	return 0;
}

static int _check_abs(const char *val, const char *what, char *why, size_t whylen)
{
	if (val[0] != '/')
		return _fail(why, whylen, "%s must be an absolute path, not '%s'", what, val);
	if (strlen(val) >= PATH_MAX)
		return _fail(why, whylen, "%s is longer than %d bytes", what, PATH_MAX - 1);
	for (const char *p = val; *p; p++)
		if (p[0] == '.' && p[1] == '.' && (p == val || p[-1] == '/') &&
		    (p[2] == '/' || p[2] == '\0'))
			return _fail(why, whylen, "%s must not contain '..': '%s'", what, val);
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
		return _fail(why, whylen, "out of memory");
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
		return _fail(why, whylen, "%s must be an integer from %ld to %ld, not '%s'",
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
		return _fail(w, wl, "SocketPath is longer than %zu bytes (a UNIX socket limit)",
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
		return _fail(w, wl, "ListenAddress must be host:port (e.g. 0.0.0.0:7780) or off, not '%s'", v);
	if (v[0] == '[' && colon[-1] == ']')
		host = strndup(v + 1, (size_t)(colon - v) - 2);
	else
		host = strndup(v, (size_t)(colon - v));
	if (!host)
		return _fail(w, wl, "out of memory");
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
		return _fail(w, wl, "Server must be HOST:PORT (e.g. mover1:7780 or "
			     "[fd00::5]:7780), not '%s'", v);
	if (!(copy = strdup(v)))
		return _fail(w, wl, "out of memory");
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
		return _fail(w, wl, "ArchiveMode must be 'copy' or 'label', not '%s'", v);
	return 0;
}

static int _k_workers(struct conf *c, const char *v, char *w, size_t wl)
{
	return _set_int(&c->workers, v, "Workers", 1, 256, w, wl);
}

static int _k_bwcap(struct conf *c, const char *v, char *w, size_t wl)
{
	if (conf_parse_bytes(v, &c->bandwidth_cap) < 0)
		return _fail(w, wl, "BandwidthCap must be bytes per second with an optional K/M/G/T suffix "
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
		return _fail(w, wl, "XattrNamespace must be 'user' or 'trusted', not '%s'", v);
	return 0;
}

static int _k_schemes(struct conf *c, const char *v, char *w, size_t wl)
{
	char **l = _split(v, 1);

	if (!l)
		return _fail(w, wl, "out of memory");
	for (char **p = l; *p; p++) {
		int ok = isalpha((unsigned char)(*p)[0]);

		for (const char *q = *p; ok && *q; q++)
			ok = isalnum((unsigned char)*q) || *q == '+' || *q == '-' || *q == '.';
		if (!ok) {
			_fail(w, wl, "AllowedSchemes: '%s' is not a URL scheme (letters, digits, + - .)", *p);
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
		return _fail(w, wl, "out of memory");
	for (char **p = l; *p; p++)
		for (const char *q = *p; *q; q++)
			if (isspace((unsigned char)*q) || *q == ':' || *q == '/') {
				_fail(w, wl, "%s: '%s' is not a valid name", key, *p);
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
		return _fail(w, wl, "LogLevel must be error, warning, info or debug, not '%s'", v);
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
		return _fail(w, wl, "MaxRequestBytes must be from 1K to 64M, not '%s'", v);
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
		return _fail(w, wl, "IOClass must be 'idle' or 'best-effort', not '%s'", v);
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
		return _fail(w, wl, "Checksum must be 'xxh128' or 'sha256', not '%s'", v);
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
		return _fail(w, wl, "SlurmWatch must be 'yes' or 'no', not '%s'", v);
	return 0;
}

static int _k_createuserdirs(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "yes") == 0)
		c->create_user_dirs = 1;
	else if (strcasecmp(v, "no") == 0)
		c->create_user_dirs = 0;
	else
		return _fail(w, wl, "CreateUserDirs must be 'yes' or 'no', not '%s'", v);
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
		return _fail(w, wl, "ArchiveBundle must be 'yes' or 'no', not '%s'", v);
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
		return _fail(w, wl, "BundleFileMax must be a size from 1K to 64M (e.g. 1M), not '%s'", v);
	c->bundle_file_max = b;
	return 0;
}

static int _k_bundlesize(struct conf *c, const char *v, char *w, size_t wl)
{
	uint64_t b;

	if (conf_parse_bytes(v, &b) < 0 || b < (1ULL << 20) || b > (1ULL << 40))
		return _fail(w, wl, "BundleSize must be a size from 1M to 1T (e.g. 1G), not '%s'", v);
	c->bundle_size = b;
	return 0;
}

/* ---- URL backends ---- */

static int _k_s3endpoint(struct conf *c, const char *v, char *w, size_t wl)
{
	size_t n = strlen(v);

	if (strncasecmp(v, "https://", 8) != 0 && strncasecmp(v, "http://", 7) != 0)
		return _fail(w, wl, "S3Endpoint must be an http:// or https:// URL, not '%s'", v);
	for (const char *p = v; *p; p++)
		if (isspace((unsigned char)*p) || *p == '@')
			return _fail(w, wl, "S3Endpoint must not contain spaces or credentials ('@')");
	if (_set_str(&c->s3_endpoint, v, w, wl) < 0)
		return -1;
	while (n > 8 && c->s3_endpoint[n - 1] == '/')
		c->s3_endpoint[--n] = '\0';
	return 0;
}

static int _k_s3region(struct conf *c, const char *v, char *w, size_t wl)
{
	if (!*v || strlen(v) > 64)
		return _fail(w, wl, "S3Region must be a region name such as us-east-1");
	for (const char *p = v; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_')
			return _fail(w, wl, "S3Region '%s': only letters, digits, '-' and '_'", v);
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
		return _fail(w, wl, "YieldToJobs must be 'yes' or 'no', not '%s'", v);
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
		return _fail(w, wl, "YieldMode must be 'pause', 'cap' or 'adaptive', not '%s'", v);
	return 0;
}

static int _k_yieldbw(struct conf *c, const char *v, char *w, size_t wl)
{
	if (conf_parse_bytes(v, &c->yield_bandwidth) < 0)
		return _fail(w, wl, "YieldBandwidth must be bytes per second with an optional K/M/G/T "
			     "suffix (e.g. 20M), or 0 to pause, not '%s'", v);
	return 0;
}

static int _k_yieldmax(struct conf *c, const char *v, char *w, size_t wl)
{
	long s;

	if (conf_parse_seconds(v, &s) < 0 || s > 30L * 86400)
		return _fail(w, wl, "YieldMaxDelay must be a duration up to 30d (e.g. 90s, 15m, 2h), "
			     "or 0 to yield for as long as jobs run, not '%s'", v);
	c->yield_max_delay = (int)s;
	return 0;
}

static int _k_yieldtrickle(struct conf *c, const char *v, char *w, size_t wl)
{
	if (conf_parse_bytes(v, &c->yield_trickle) < 0)
		return _fail(w, wl, "YieldTrickle must be bytes per second with an optional K/M/G/T "
			     "suffix (e.g. 10M), or 0 for unlimited, not '%s'", v);
	return 0;
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
		return _fail(w, wl, "SyncMode must be 'batch' or 'file', not '%s'", v);
	return 0;
}

static int _k_verifymode(struct conf *c, const char *v, char *w, size_t wl)
{
	if (strcasecmp(v, "full") == 0)
		c->verify_sample = 0;
	else if (strcasecmp(v, "sample") == 0)
		c->verify_sample = 1;
	else
		return _fail(w, wl, "VerifyMode must be 'full' or 'sample', not '%s'", v);
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
	{ "URLCAFile", _k_urlcafile },
	{ "ArchiveWorkers", _k_archworkers },
	{ "YieldToJobs", _k_yieldjobs },
	{ "YieldMode", _k_yieldmode },
	{ "YieldBandwidth", _k_yieldbw },
	{ "YieldMaxDelay", _k_yieldmax },
	{ "YieldTrickle", _k_yieldtrickle },
	{ "YieldProbe", _k_yieldprobe },
	{ "SyncMode", _k_syncmode },
	{ "VerifyMode", _k_verifymode },
};

#define NKEYS (sizeof(_keys) / sizeof(_keys[0]))
_Static_assert(NKEYS <= sizeof(((struct conf *)0)->key_line) / sizeof(int),
	       "conf.key_line is too small");

struct conf *conf_create(void)
{
	struct conf *c = calloc(1, sizeof(*c));
	char w[128];

	if (!c)
		return NULL;
	if (_set_str(&c->socket_path, "/run/stagehand/stagehandd.sock", w, sizeof(w)) < 0 ||
	    _set_str(&c->state_db, "/var/lib/stagehand/stagehand.db", w, sizeof(w)) < 0 ||
	    _set_str(&c->pid_file, "/run/stagehand/stagehandd.pid", w, sizeof(w)) < 0 ||
	    _set_str(&c->checksum, "xxh128", w, sizeof(w)) < 0 ||
	    _set_str(&c->s3_region, "us-east-1", w, sizeof(w)) < 0 ||
	    !(c->scratch_roots = _split("", 0)) ||
	    !(c->stage_in_roots = _split("", 0)) ||
	    !(c->admin_users = _split("", 0)) ||
	    !(c->admin_groups = _split("", 0)) ||
	    !(c->allowed_schemes = _split("https,s3,ftp,ftps,sftp,file", 1))) {
		conf_destroy(c);
		return NULL;
	}
	c->archive_mode = CONF_ARCHIVE_COPY;
	c->slurm_watch = 1;
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
	c->archive_workers = 1;
	c->sync_batch = 1;
	c->yield_to_jobs = 1;
	c->yield_bandwidth = 0;
	c->yield_max_delay = 2 * 3600;
	c->yield_trickle = 10ULL << 20;
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
		return _fail(err, errlen, "%s:%d: error: line is longer than %d bytes",
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
		return _fail(err, errlen, "%s:%d: error: expected Key=Value, got '%s'",
			     file, lineno, key);
	*eq = '\0';
	val = _trim(eq + 1);
	key = _trim(key);
	for (size_t i = 0; i < NKEYS; i++) {
		if (strcasecmp(key, _keys[i].name) != 0)
			continue;
		if (c->key_line[i])
			return _fail(err, errlen, "%s:%d: error: %s is already set on line %d: "
				     "set it once", file, lineno, _keys[i].name, c->key_line[i]);
		if (_keys[i].set(c, val, why, sizeof(why)) < 0)
			return _fail(err, errlen, "%s:%d: error: %s", file, lineno, why);
		c->key_line[i] = lineno;
		return 0;
	}
	return _fail(err, errlen, "%s:%d: error: unknown key '%s' (see stagehand.conf(5) "
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
		return _fail(err, errlen, "%s: error: cannot open: %s", path, strerror(errno));
	if (_set_str(&c->path, path, err, errlen) < 0) {
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
			rc = _fail(err, errlen, "%s:%d: error: NUL byte in line", path, lineno);
			break;
		}
		if (conf_parse_line(c, line, path, lineno, err, errlen) < 0) {
			rc = -1;
			break;
		}
	}
	if (rc == 0 && ferror(f))
		rc = _fail(err, errlen, "%s: error: read failed: %s", path, strerror(errno));
	free(line);
	fclose(f);
	return rc;
}

static int _line_of(const struct conf *c, const char *name)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (strcmp(_keys[i].name, name) == 0)
			return c->key_line[i];
	return 0;
}

int conf_validate(const struct conf *c, char *err, size_t errlen)
{
	const char *file = c->path ? c->path : "(defaults)";

	if (c->pid_file && strcmp(c->pid_file, c->socket_path) == 0)
		return _fail(err, errlen, "%s:%d: error: PidFile and SocketPath are the same file",
			     file, _line_of(c, "PidFile"));
	if (strcmp(c->state_db, c->socket_path) == 0)
		return _fail(err, errlen, "%s:%d: error: StateDB and SocketPath are the same file",
			     file, _line_of(c, "StateDB"));
	if (c->bundle_file_max > c->bundle_size)
		return _fail(err, errlen, "%s:%d: error: BundleFileMax (%llu bytes) is larger than "
			     "BundleSize (%llu bytes): a bundled file must fit in a bundle", file,
			     _line_of(c, _line_of(c, "BundleSize") ? "BundleSize" : "BundleFileMax"),
			     (unsigned long long)c->bundle_file_max, (unsigned long long)c->bundle_size);
	if (c->yield_mode == CONF_YIELD_CAP && c->yield_bandwidth == 0)
		return _fail(err, errlen, "%s:%d: error: YieldMode=cap needs YieldBandwidth (the "
			     "bytes/s after-job transfers may use while jobs run, e.g. 100M)",
			     file, _line_of(c, "YieldMode"));
	if (c->archive_root) {
		for (char **r = c->scratch_roots; *r; r++) {
			size_t n = strlen(*r);

			if (strcmp(*r, "/") == 0 || (strncmp(c->archive_root, *r, n) == 0 &&
			    (c->archive_root[n] == '/' || c->archive_root[n] == '\0')))
				return _fail(err, errlen, "%s:%d: error: ArchiveRoot %s is inside "
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
	_free_list(c->scratch_roots);
	free(c->archive_root);
	_free_list(c->allowed_schemes);
	_free_list(c->stage_in_roots);
	_free_list(c->admin_users);
	_free_list(c->admin_groups);
	free(c->pid_file);
	free(c->checksum);
	free(c->s3_endpoint);
	free(c->s3_region);
	free(c->s3_credentials_file);
	free(c->url_ca_file);
	free(c->yield_probe);
	free(c->slurm_conf);
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
