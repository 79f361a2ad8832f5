/* history.c - see history.h. */
#include "config.h"

#include <time.h>

#include "history.h"
#include "log.h"
#include "monoclock.h"
#include "queue_history.h"

static int64_t _idle_until;            /* main thread only */
static struct queue_pruned _pruned;    /* removed since the last log line */

/* The two kinds of pruning: the function, its key, and what it removes. */
static const struct {
	int (*prune)(struct queue *q, int64_t before, int budget, struct queue_pruned *done,
		     char *err, size_t errlen);
	const char *key, *what;
} _kinds[2] = {
	{ queue_history_prune, "HistoryRetention", "finished requests' rows" },
	{ queue_audit_prune, "AuditRetention", "audit rows" },
};

/*
 * One slice: prune calls until nothing is left or the slice is spent. 1 if
 * more is left, 0 if not, -1 after a failure (logged).
 */
static int _slice(struct daemon *d, int64_t now, int64_t end_ms)
{
	int retention[2] = { d->conf->history_retention, d->conf->audit_retention };
	int more[2] = { retention[0] >= 0, retention[1] >= 0 };
	char err[256];

	while (more[0] || more[1]) {
		for (int k = 0; k < 2; k++) {
			int r;

			if (!more[k])
				continue;
			r = _kinds[k].prune(d->q, now - retention[k], HISTORY_BUDGET, &_pruned, err,
					    sizeof(err));
			if (r < 0) {
				log_err("%s: removing %s: %s (tried again in a minute)", _kinds[k].key,
					_kinds[k].what, err);
				return -1;
			}
			more[k] = r > 0;
		}
		if (mono_ms() >= end_ms)
			return more[0] || more[1];
	}
	return 0;
}

static void _tick(struct daemon *d, int64_t now_ms)
{
	const struct conf *c = d->conf;
	int r;

	if ((c->history_retention < 0 && c->audit_retention < 0) || now_ms < _idle_until)
		return;
	r = _slice(d, (int64_t)time(NULL), mono_ms() + HISTORY_SLICE_MS);
	if (r > 0)
		return;	/* more: the next tick, a second from now, goes on */
	_idle_until = now_ms + (r < 0 ? 60000 : HISTORY_IDLE_MS);
	if (_pruned.requests || _pruned.rows || _pruned.audit)
		log_info("history: removed the file rows of %lld finished request%s (%lld rows) "
			 "and %lld audit row%s (HistoryRetention, AuditRetention)",
			 (long long)_pruned.requests, _pruned.requests == 1 ? "" : "s",
			 (long long)_pruned.rows, (long long)_pruned.audit,
			 _pruned.audit == 1 ? "" : "s");
	_pruned = (struct queue_pruned){ 0 };
}

const struct lifecycle_hook history_hook = {
	.name = "history",
	.period_ms = 1000,
	.tick = _tick,
};
