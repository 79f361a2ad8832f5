/* sdnotify.c - systemd notifications; see sdnotify.h. */
#include "config.h"

#include <stdio.h>
#include <systemd/sd-daemon.h>

#include "log.h"
#include "queue.h"
#include "sdnotify.h"

#define STATUS_PERIOD_MS 5000

static uint64_t _wd_usec;        /* 0: no watchdog asked for */
static int64_t _wd_last_ms, _status_last_ms;
static int _warned;

static void _send(const char *msg)
{
	int rc = sd_notify(0, msg);

	/* 0: not under systemd. < 0 once is worth a line; more would flood. */
	if (rc < 0 && !_warned) {
		_warned = 1;
		log_warn("sd_notify failed (%d): systemd is not told the daemon's state", rc);
	}
}

static void _status(struct queue *q, const char *prefix)
{
	int64_t n[QS_COUNT] = { 0 };
	char err[256], msg[256];

	if (!q || queue_count_states(q, n, err, sizeof(err)) < 0) {
		snprintf(msg, sizeof(msg), "%sSTATUS=serving", prefix);
	} else {
		/* Truncation only shortens the status text, never the prefix. */
		(void)snprintf(msg, sizeof(msg),
			       "%sSTATUS=%lld queued, %lld running, %lld verifying, %lld waiting to "
			       "retry, %lld failed", prefix, (long long)n[QS_QUEUED],
			       (long long)n[QS_RUNNING], (long long)n[QS_VERIFYING],
			       (long long)n[QS_FAILED_RETRYABLE], (long long)n[QS_FAILED_FINAL]);
	}
	_send(msg);
}

void sdnotify_init(void)
{
	/* > 0 only when WATCHDOG_USEC is set and WATCHDOG_PID, if set, is us. */
	if (sd_watchdog_enabled(0, &_wd_usec) <= 0)
		_wd_usec = 0;
	else
		log_info("systemd watchdog: pinging every %llu ms",
			 (unsigned long long)(_wd_usec / 2000));
}

void sdnotify_ready(struct queue *q)
{
	_status(q, "READY=1\n");
}

void sdnotify_reloading(void)
{
	_send("RELOADING=1\nSTATUS=reloading the configuration");
}

void sdnotify_reloaded(struct queue *q)
{
	_status(q, "READY=1\n");
}

void sdnotify_stopping(int running)
{
	char msg[128];

	(void)snprintf(msg, sizeof(msg), "STOPPING=1\nSTATUS=draining: %d transfers running",
		       running);
	_send(msg);
}

void sdnotify_tick(struct queue *q, int64_t now_ms)
{
	if (_wd_usec && now_ms - _wd_last_ms >= (int64_t)(_wd_usec / 2000)) {
		_wd_last_ms = now_ms;
		_send("WATCHDOG=1");
	}
	if (now_ms - _status_last_ms >= STATUS_PERIOD_MS) {
		_status_last_ms = now_ms;
		_status(q, "");
	}
}
