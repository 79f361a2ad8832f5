/* metrics.c - see metrics.h. */
#include "config.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit_tally.h"
#include "checksum.h"
#include "cleanup.h"
#include "grow.h"
#include "log.h"
#include "metrics.h"
#include "pace.h"
#include "queue.h"
#include "queue_audit.h"

#define METRICS_MAX_USERS 10000      /* per-user series at most (a scrape stays small) */

struct metrics *metrics_create(void)
{
	struct metrics *m = calloc(1, sizeof(struct metrics));

	if (m && !(m->audit = audit_tally_new())) {
		free(m);
		return NULL;
	}
	return m;
}

void metrics_destroy(struct metrics *m)
{
	if (!m)
		return;
	audit_tally_free(m->audit);
	free(m);
}

void metrics_tick(struct metrics *m, int64_t now)
{
	int last = (m->ring_pos + 9) % 10;
	uint64_t bytes = atomic_load(&m->bytes_moved);
	int oldest;

	if (m->ring_time[last] == now)
		return;
	m->ring_time[m->ring_pos] = now;
	m->ring_bytes[m->ring_pos] = bytes;
	m->ring_pos = (m->ring_pos + 1) % 10;
	oldest = m->ring_pos;
	if (m->ring_time[oldest] == 0)
		oldest = 0;
	if (now > m->ring_time[oldest])
		atomic_store(&m->rate, (double)(bytes - m->ring_bytes[oldest]) /
			     (double)(now - m->ring_time[oldest]));
}

struct _buf {
	char *s;
	size_t len, cap;
	int oom;
};

static void _add(struct _buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void _add(struct _buf *b, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (b->oom)
		return;
	for (;;) {
		va_start(ap, fmt);
		n = vsnprintf(b->s + b->len, b->cap - b->len, fmt, ap);
		va_end(ap);
		if (n < 0) {
			b->oom = 1;
			return;
		}
		if ((size_t)n < b->cap - b->len) {
			b->len += (size_t)n;
			return;
		}
		if (grow_array((void **)&b->s, &b->cap, b->len + (size_t)n + 1, 1, 4096) < 0) {
			b->oom = 1;
			return;
		}
	}
}

/* A Prometheus label value: backslash, double quote and newline escaped. */
static void _add_label(struct _buf *b, const char *v)
{
	for (; v && *v; v++) {
		if (*v == '\\' || *v == '"')
			_add(b, "\\%c", *v);
		else if (*v == '\n')
			_add(b, "\\n");
		else
			_add(b, "%c", *v);
	}
}

/* The user label: the name, or (MetricsHashUsers=yes) 16 hex digits of its SHA-256. */
static void _user_label(struct _buf *b, const char *name, int64_t uid, int hash)
{
	char fallback[32], hex[CKSUM_HEX_MAX];
	struct cksum c;

	if (!name || !*name) {
		snprintf(fallback, sizeof(fallback), "uid%lld", (long long)uid);
		name = fallback;
	}
	if (!hash || cksum_init(&c, CKSUM_SHA256) < 0) {
		_add_label(b, name);
		return;
	}
	cksum_update(&c, name, strlen(name));
	cksum_final(&c, hex);
	_add(b, "%.16s", cksum_hex(hex));
}

/* Each user's series of one family (files or bytes), at most METRICS_MAX_USERS, by uid. */
static void _render_users(struct _buf *b, const struct audit_tally *t, int files, int hash)
{
	const char *name = files ? "stagehand_user_files_moved_total" :
		"stagehand_user_bytes_moved_total";

	_add(b, "# HELP %s Verified %s moved for each user (audit trail).\n# TYPE %s counter\n",
	     name, files ? "files" : "bytes", name);
	for (size_t i = 0; i < t->nusers && i < METRICS_MAX_USERS; i++) {
		const struct audit_user *u = &t->users[i];

		_add(b, "%s{user=\"", name);
		_user_label(b, u->user, u->uid, hash);
		_add(b, "\"} %lld\n", (long long)(files ? u->files : u->bytes));
	}
}

/*
 * Series from the audit trail, so they survive restarts: per user (name or
 * hash) and per configured file system (ScratchRoots, ArchiveRoot; site
 * paths, never a user's). The totals are kept between scrapes
 * (audit_tally.h): a scrape reads only the rows added since the last one.
 */
static void _render_audit(struct daemon *d, struct _buf *b)
{
	static const char *const name[3] = { "stagehand_filesystem_bytes_read_total",
		"stagehand_filesystem_bytes_written_total",
		"stagehand_filesystem_files_written_total" };
	static const char *const help[3] = { "Verified bytes read from each configured "
		"file system (ScratchRoots, ArchiveRoot).", "Verified bytes written to each "
		"configured file system.", "Verified files written to each configured file "
		"system." };
	struct audit_tally *t = d->metrics->audit;
	char err[256], *roots[66];
	int n = 0, hash;

	pthread_rwlock_rdlock(&d->conf_lock);
	hash = d->conf->metrics_hash_users;
	for (char **r = d->conf->scratch_roots; *r && n < 64; r++)
		if ((roots[n] = strdup(*r)))
			n++;
	if (d->conf->archive_root && (roots[n] = strdup(d->conf->archive_root)))
		n++;
	pthread_rwlock_unlock(&d->conf_lock);
	pthread_mutex_lock(&t->lock);
	if (audit_tally_update(t, d->q, roots, n, err, sizeof(err)) < 0)
		log_warn("metrics: the audit trail's totals: %s (the series show the "
			"rows read before it)", err);
	_render_users(b, t, 0, hash);
	_render_users(b, t, 1, hash);
	/* Each family's samples together, as the exposition format requires. */
	for (int s = 0; s < 3; s++) {
		_add(b, "# HELP %s %s\n# TYPE %s counter\n", name[s], help[s], name[s]);
		for (int i = 0; i < t->nroots; i++) {
			const struct audit_root *r = &t->roots[i];

			_add(b, "%s{filesystem=\"", name[s]);
			_add_label(b, r->path);
			_add(b, "\"} %lld\n", (long long)(s == 0 ? r->read_bytes : s == 1 ?
							  r->written_bytes : r->written_files));
		}
	}
	pthread_mutex_unlock(&t->lock);
	for (int i = 0; i < n; i++)
		free(roots[i]);
}

/* Long on purpose: the /metrics page in the order it is served, one family after another. */
char *metrics_render(struct daemon *d)
{
	struct metrics *m = d->metrics;
	struct _buf b = { malloc(4096), 0, 4096, 0 };
	struct pace_stats ps;
	int64_t counts[QS_COUNT];
	char err[256];
	int workers;

	if (!b.s)
		return NULL;
	b.s[0] = '\0';
	pthread_rwlock_rdlock(&d->conf_lock);
	workers = d->conf->workers;
	pthread_rwlock_unlock(&d->conf_lock);
	_add(&b, "# HELP stagehand_up 1 when stagehandd is serving.\n# TYPE stagehand_up gauge\n"
	     "stagehand_up 1\n");
	_add(&b, "# HELP stagehand_draining 1 while stagehandd is shutting down.\n"
	     "# TYPE stagehand_draining gauge\nstagehand_draining %d\n", atomic_load(&d->draining));
	{
		int64_t since = atomic_load(&d->drained);

		_add(&b, "# HELP stagehand_drained 1 while an admin has drained stagehandd "
		     "(stagehand drain): no new transfers start, running ones finish.\n"
		     "# TYPE stagehand_drained gauge\nstagehand_drained %d\n"
		     "# HELP stagehand_drained_since_seconds When the drain began (Unix time), "
		     "0 when not drained.\n# TYPE stagehand_drained_since_seconds gauge\n"
		     "stagehand_drained_since_seconds %lld\n", since != 0, (long long)since);
	}
	if (queue_count_states(d->q, counts, err, sizeof(err)) == 0) {
		_add(&b, "# HELP stagehand_requests Transfer requests by state (queue depth).\n"
		     "# TYPE stagehand_requests gauge\n");
		for (int s = 0; s < QS_COUNT; s++)
			_add(&b, "stagehand_requests{state=\"%s\"} %lld\n",
			     queue_state_name((enum queue_state)s), (long long)counts[s]);
	}
	{
		/* The input cleanup (cleanup.h): from the queue, so it survives restarts. */
		struct cleanup_counts cc;

		if (queue_cleanup_counts(d->q, &cc, err, sizeof(err)) == 0)
			_add(&b, "# HELP stagehand_input_cleanups Removals of jobs' staged inputs "
			     "(InputRetention): pending (waiting for their time or running) and "
			     "done.\n# TYPE stagehand_input_cleanups gauge\n"
			     "stagehand_input_cleanups{state=\"pending\"} %lld\n"
			     "stagehand_input_cleanups{state=\"done\"} %lld\n"
			     "# HELP stagehand_input_cleanup_files_removed_total Staged input files "
			     "removed after their jobs.\n"
			     "# TYPE stagehand_input_cleanup_files_removed_total counter\n"
			     "stagehand_input_cleanup_files_removed_total %lld\n"
			     "# HELP stagehand_input_cleanup_bytes_freed_total Bytes those files held.\n"
			     "# TYPE stagehand_input_cleanup_bytes_freed_total counter\n"
			     "stagehand_input_cleanup_bytes_freed_total %lld\n",
			     (long long)cc.pending, (long long)cc.done, (long long)cc.files_freed,
			     (long long)cc.bytes_freed);
	}
	_add(&b, "# HELP stagehand_workers_busy Worker processes running now.\n"
	     "# TYPE stagehand_workers_busy gauge\nstagehand_workers_busy %d\n",
	     atomic_load(&m->workers_busy));
	_add(&b, "# HELP stagehand_workers_max Configured Workers.\n"
	     "# TYPE stagehand_workers_max gauge\nstagehand_workers_max %d\n", workers);
	_add(&b, "# HELP stagehand_bytes_moved_total Bytes copied and verified since start.\n"
	     "# TYPE stagehand_bytes_moved_total counter\nstagehand_bytes_moved_total %llu\n",
	     (unsigned long long)atomic_load(&m->bytes_moved));
	_add(&b, "# HELP stagehand_files_moved_total Files copied and verified since start.\n"
	     "# TYPE stagehand_files_moved_total counter\nstagehand_files_moved_total %llu\n",
	     (unsigned long long)atomic_load(&m->files_moved));
	_add(&b, "# HELP stagehand_transfer_failures_total Failed transfer attempts since start.\n"
	     "# TYPE stagehand_transfer_failures_total counter\n"
	     "stagehand_transfer_failures_total %llu\n",
	     (unsigned long long)atomic_load(&m->failures));
	_add(&b, "# HELP stagehand_transfer_retries_total Attempts scheduled for retry since start.\n"
	     "# TYPE stagehand_transfer_retries_total counter\n"
	     "stagehand_transfer_retries_total %llu\n",
	     (unsigned long long)atomic_load(&m->retries));
	_add(&b, "# HELP stagehand_transfer_rate_bytes_per_second Verified bytes per second, "
	     "last 10 s.\n# TYPE stagehand_transfer_rate_bytes_per_second gauge\n"
	     "stagehand_transfer_rate_bytes_per_second %.0f\n", atomic_load(&m->rate));
	_add(&b, "# HELP stagehand_job_end_events_total Job-end events accepted since start.\n"
	     "# TYPE stagehand_job_end_events_total counter\nstagehand_job_end_events_total %llu\n",
	     (unsigned long long)atomic_load(&m->job_end_events));
	_add(&b, "# HELP stagehand_yield_active After-job transfers held back now (paused or "
	     "throttled) because jobs run on their file system.\n"
	     "# TYPE stagehand_yield_active gauge\nstagehand_yield_active %d\n",
	     atomic_load(&m->yield_active));
	_add(&b, "# HELP stagehand_yield_busy_filesystems File systems holding running jobs' "
	     "directories.\n# TYPE stagehand_yield_busy_filesystems gauge\n"
	     "stagehand_yield_busy_filesystems %d\n", atomic_load(&m->yield_busy_fs));
	_add(&b, "# HELP stagehand_yield_seconds_total Time some after-job transfer was held "
	     "back for running jobs.\n# TYPE stagehand_yield_seconds_total counter\n"
	     "stagehand_yield_seconds_total %.1f\n",
	     (double)atomic_load(&m->yield_ms) / 1000.0);
	_render_audit(d, &b);
	pace_run_stats(&ps);
	_add(&b, "# HELP stagehand_pace_mode YieldMode in force: 0 pause, 1 cap, 2 adaptive.\n"
	     "# TYPE stagehand_pace_mode gauge\nstagehand_pace_mode %d\n", d->conf->yield_mode);
	_add(&b, "# HELP stagehand_pace_filesystems File systems with transfers paced by the "
	     "adaptive scavenger now.\n# TYPE stagehand_pace_filesystems gauge\n"
	     "stagehand_pace_filesystems %d\n", ps.controllers);
	_add(&b, "# HELP stagehand_pace_held File systems whose paced transfers are held now "
	     "(others use the device).\n# TYPE stagehand_pace_held gauge\n"
	     "stagehand_pace_held %d\n", ps.held);
	_add(&b, "# HELP stagehand_pace_rate_bytes_per_second Rate the scavenger allows its "
	     "transfers now, summed over file systems.\n"
	     "# TYPE stagehand_pace_rate_bytes_per_second gauge\n"
	     "stagehand_pace_rate_bytes_per_second %.0f\n", ps.rate);
	_add(&b, "# HELP stagehand_pace_idle_bytes_per_second Estimated bandwidth the other "
	     "users of the paced file systems leave idle.\n"
	     "# TYPE stagehand_pace_idle_bytes_per_second gauge\n"
	     "stagehand_pace_idle_bytes_per_second %.0f\n", ps.idle);
	_add(&b, "# HELP stagehand_pace_capacity_bytes_per_second Estimated bandwidth of the "
	     "paced file systems (highest seen, fading over minutes).\n"
	     "# TYPE stagehand_pace_capacity_bytes_per_second gauge\n"
	     "stagehand_pace_capacity_bytes_per_second %.0f\n", ps.capacity);
	_add(&b, "# HELP stagehand_pace_backoffs_total Times the scavenger held its transfers "
	     "because others needed the device.\n# TYPE stagehand_pace_backoffs_total counter\n"
	     "stagehand_pace_backoffs_total %llu\n", (unsigned long long)ps.backoffs);
	{
		/* Per file system (pace_metrics.c): target rate, others' load, holds, share. */
		struct pace_fs_stats fs[PACE_FS_MAX];
		char *t = pace_metrics_render(fs, pace_run_fs_stats(fs, PACE_FS_MAX));

		if (!t)
			b.oom = 1;
		else
			_add(&b, "%s", t);
		free(t);
	}
	if (b.oom) {
		free(b.s);
		return NULL;
	}
	return b.s;
}
