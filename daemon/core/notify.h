/*
 * notify.h - NotifyCommand: run a site program when an archive, stage-in or
 * stage-out request is done, has failed for good or was cancelled, in hold
 * and burst-buffer mode alike ("your archive is safe", "your data failed":
 * Slurm refuses updates of ended jobs, so nothing else reaches the user;
 * docs/admin-guide.md, "Notifications").
 *
 * Owns: the children it starts (at most NOTIFY_MAX at once), their
 * deadlines (NotifyTimeout, then SIGKILL to the child's process group) and
 * the first bytes of their stderr for the log. The program gets the job,
 * user, state (done, failed, cancelled) and paths as arguments and as
 * STAGEHAND_* environment variables, the kind (archive, stage_in, stage_out)
 * as STAGEHAND_EVENT
 * (nothing else of the daemon's environment).
 *
 * Must never: use a shell, block the main loop (posix_spawn, WNOHANG,
 * non-blocking reads), or announce one outcome of a request twice (the notices table).
 */
#ifndef STAGEHAND_NOTIFY_H
#define STAGEHAND_NOTIFY_H

#include <stdint.h>

#include "daemon.h"

#define NOTIFY_MAX 4

struct notify;

/* A new notifier; requests that ended since 'since' (epoch s) are announced. NULL on OOM. */
struct notify *notify_create(int64_t since);
/* Main loop, each turn: reap, enforce deadlines, start the next notices. */
void notify_tick(struct notify *n, struct daemon *d, int64_t now_ms);
/* Kill what still runs and free. */
void notify_destroy(struct notify *n);

#endif /* STAGEHAND_NOTIFY_H */
