/*
 * api_drain.h - /v1/drain (docs/api.md, "Drain"): an admin stops new
 * transfers before maintenance and lets them start again after it, and
 * anyone can see whether the daemon is drained.
 *
 * Owns: the admin check, the reason's limits, recording the state in the
 * queue (queue_drain.h) before the daemon's flag is set (so what the admin
 * was told survives a crash), and the log line saying who and why.
 *
 * Must never: stop a running transfer (running ones finish), or refuse or
 * lose a new request because of a drain (it is queued and runs after
 * resume).
 */
#ifndef STAGEHAND_API_DRAIN_H
#define STAGEHAND_API_DRAIN_H

#include <jansson.h>

#include "api_private.h"

/* Longest reason accepted, in bytes; it is shown in held jobs' status text. */
#define API_DRAIN_REASON_MAX 200

/*
 * GET (anyone): the state. POST (admins), body {"reason": TEXT} optional:
 * drain. DELETE (admins): resume. Called from api_route with conf_lock
 * held (read); body borrowed.
 */
void api_drain(struct daemon *d, const struct api_caller *who, const char *method,
	       json_t *body, struct api_reply *out);

/*
 * The state, for GET /v1/drain and /v1/health's "drain": {"drained":bool,
 * "since":EPOCH, "by":UID, "reason":TEXT, "running":N} (since, by and
 * reason null when not drained; running: transfers under way, -1 when
 * unknown). New reference (never NULL).
 */
json_t *api_drain_state(struct daemon *d);

#endif /* STAGEHAND_API_DRAIN_H */
