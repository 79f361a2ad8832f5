/* yield.c - see yield.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "metrics.h"
#include "queue.h"
#include "worker.h"
#include "yield.h"

#define MAX_ROOTS 64
#define MAX_BUSY 64
#define PROBE_MAX (64 * 1024)

static char **_slurm_paths;          /* from slurm_watch, owned */
static char *_roots[MAX_ROOTS];      /* copies of the configured roots */
static dev_t _devs[MAX_ROOTS];
static size_t _nroots;
static dev_t _busy[MAX_BUSY];
static size_t _nbusy;
static int _unknown_busy;
static int64_t _last_ms;
static int _probe_warned;

int yield_after_job(const char *action)
{
	return action && (strcmp(action, "archive") == 0 || strcmp(action, "stage_out") == 0);
}

int yield_root_index(const char *path, char *const *roots, size_t nroots)
{
	size_t best_len = 0;
	int best = -1;

	if (!path || path[0] != '/')
		return -1;
	for (size_t i = 0; i < nroots; i++) {
		size_t n = strlen(roots[i]);

		if (strcmp(roots[i], "/") == 0)
			n = 0;	/* "/" holds everything: match any absolute path */
		else if (strncmp(path, roots[i], n) != 0 || (path[n] != '/' && path[n] != '\0'))
			continue;
		if (best < 0 || n > best_len) {
			best = (int)i;
			best_len = n;
		}
	}
	return best;
}

static int _dev_busy(const struct yield_view *v, dev_t dev)
{
	for (size_t i = 0; i < v->nbusy; i++)
		if (v->busy[i] == dev)
			return 1;
	return 0;
}

static int _path_affected(const struct yield_view *v, const char *p)
{
	int i;

	if (!p || p[0] != '/')
		return 0;	/* a URL (remote) or nothing: not a local file system */
	i = yield_root_index(p, v->roots, v->nroots);
	if (i < 0 || v->devs[i] == 0)
		return v->nbusy > 0 || v->unknown_busy;
	return _dev_busy(v, v->devs[i]);
}

int yield_paths_affected(const struct yield_view *v, const char *source, const char *dest)
{
	return _path_affected(v, source) || _path_affected(v, dest);
}

void yield_set_running(struct daemon *d, char **paths)
{
	(void)d;
	for (char **p = _slurm_paths; p && *p; p++)
		free(*p);
	free(_slurm_paths);
	_slurm_paths = paths;
}

static void _view(struct yield_view *v)
{
	v->roots = _roots;
	v->devs = _devs;
	v->nroots = _nroots;
	v->busy = _busy;
	v->nbusy = _nbusy;
	v->unknown_busy = _unknown_busy;
}

int yield_request_affected(struct daemon *d, const struct queue_request *r)
{
	struct yield_view v;

	if (!d->conf->yield_to_jobs || !yield_after_job(r->action))
		return 0;
	_view(&v);
	return yield_paths_affected(&v, r->source, r->dest);
}

static void _add_root(const char *path)
{
	struct stat st;

	if (_nroots >= MAX_ROOTS)
		return;
	_roots[_nroots] = strdup(path);
	if (!_roots[_nroots])
		return;
	/* Admin-configured roots only; a missing root is "unknown". */
	_devs[_nroots] = stat(path, &st) == 0 ? st.st_dev : 0;
	_nroots++;
}

static void _mark(const char *path)
{
	int i = yield_root_index(path, _roots, _nroots);

	if (path[0] != '/')
		return;
	if (i < 0 || _devs[i] == 0) {
		_unknown_busy = 1;
		return;
	}
	for (size_t k = 0; k < _nbusy; k++)
		if (_busy[k] == _devs[i])
			return;
	if (_nbusy < MAX_BUSY)
		_busy[_nbusy++] = _devs[i];
}

/* The probe file: one absolute path per line, '#' comments; read as root (admin's file). */
static void _read_probe(const char *path)
{
	char buf[PROBE_MAX + 1];
	ssize_t n, len = 0;
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	if (fd < 0) {
		if (errno != ENOENT && !_probe_warned) {
			log_warn("YieldProbe %s: cannot open: %s (treated as no busy directories)",
				 path, strerror(errno));
			_probe_warned = 1;
		}
		return;
	}
	_probe_warned = 0;
	while (len < PROBE_MAX && (n = read(fd, buf + len, (size_t)(PROBE_MAX - len))) > 0)
		len += n;
	close(fd);
	buf[len] = '\0';
	for (char *line = buf, *next; line && *line; line = next) {
		char *e;

		next = strchr(line, '\n');
		if (next)
			*next++ = '\0';
		if ((e = strchr(line, '#')))
			*e = '\0';
		while (*line == ' ' || *line == '\t')
			line++;
		e = line + strlen(line);
		while (e > line && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r'))
			*--e = '\0';
		if (*line == '/')
			_mark(line);
	}
}

static void _refresh(struct daemon *d)
{
	const struct conf *c = d->conf;

	for (size_t i = 0; i < _nroots; i++)
		free(_roots[i]);
	_nroots = 0;
	_nbusy = 0;
	_unknown_busy = 0;
	for (char **p = c->scratch_roots; p && *p; p++)
		_add_root(*p);
	if (c->archive_root)
		_add_root(c->archive_root);
	for (char **p = c->stage_in_roots; p && *p; p++)
		_add_root(*p);
	if (!c->yield_to_jobs)
		return;
	for (char **p = _slurm_paths; p && *p; p++)
		_mark(*p);
	if (c->yield_probe)
		_read_probe(c->yield_probe);
}

static void _tick(struct daemon *d, int64_t now_ms)
{
	int held;

	_refresh(d);
	held = worker_pool_yield(d->pool, now_ms);
	atomic_store(&d->metrics->yield_busy_fs, (int)_nbusy + _unknown_busy);
	atomic_store(&d->metrics->yield_active, held);
	if (held > 0 && _last_ms > 0)
		atomic_fetch_add(&d->metrics->yield_ms, (uint64_t)(now_ms - _last_ms));
	_last_ms = now_ms;
}

static void _fini(struct daemon *d)
{
	yield_set_running(d, NULL);
	for (size_t i = 0; i < _nroots; i++)
		free(_roots[i]);
	_nroots = 0;
}

static int _init(struct daemon *d, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	_refresh(d);
	return 0;
}

const struct lifecycle_hook yield_hook = {
	.name = "yield",
	.period_ms = 500,
	.init = _init,
	.tick = _tick,
	.fini = _fini,
};
