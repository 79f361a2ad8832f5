/*
 * sdnotify.h - telling systemd how the daemon is doing (Type=notify).
 *
 * Owns: READY once the API serves, RELOADING/READY around a SIGHUP reload,
 * STOPPING when draining starts, a STATUS line with the queue's counts, and
 * WATCHDOG pings from the main loop at half the unit's WatchdogSec, so a
 * wedged loop gets the daemon restarted. libsystemd's sd_notify does the
 * talking: it is a no-op when NOTIFY_SOCKET is unset (not under systemd, or
 * Type=simple), so callers never need to know.
 * Must never: block, fail the daemon, or ping the watchdog from anywhere but
 * the main loop (a ping from another thread would hide a stuck loop).
 */
#ifndef STAGEHAND_SDNOTIFY_H
#define STAGEHAND_SDNOTIFY_H

#include <stdint.h>

struct queue;

/* Read WATCHDOG_USEC / WATCHDOG_PID once, at startup, in the main process. */
void sdnotify_init(void);

/* The daemon serves: READY=1 with a first STATUS line. */
void sdnotify_ready(struct queue *q);

/* Around a configuration reload (SIGHUP). */
void sdnotify_reloading(void);
void sdnotify_reloaded(struct queue *q);

/* Draining has begun (SIGTERM): STOPPING=1 and why. */
void sdnotify_stopping(int running);

/*
 * Called every turn of the main loop: a watchdog ping when half the
 * interval has passed, a fresh STATUS line every 5 s.
 */
void sdnotify_tick(struct queue *q, int64_t now_ms);

#endif /* STAGEHAND_SDNOTIFY_H */
