/*
 * queue_drain.h - the daemon's drained state ('stagehand drain', 'stagehand
 * resume'; docs/admin-guide.md, "Maintenance: drain and resume"), kept in
 * the state database so that a daemon restarted during maintenance stays
 * drained.
 *
 * Owns the drain table: one row while drained (since when, by whom, why).
 * Must never: start, stop or change a transfer (the main loop reads the
 * daemon's flag and claims nothing while it is set), or decide who may drain
 * (the API handler does).
 */
#ifndef STAGEHAND_QUEUE_DRAIN_H
#define STAGEHAND_QUEUE_DRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "queue.h"

struct queue_drain {
	int64_t since;               /* epoch seconds of the first drain */
	int64_t by_uid;              /* the admin who drained */
	char *reason;                /* new string (queue_drain_free), "" when none was given */
};

/*
 * Drain: record since = now, by_uid and reason (NULL or "" = none). When
 * already drained, since and by_uid are kept and a non-empty reason replaces
 * the old one; *already (may be NULL) says which. Durable (the caller
 * answers the admin after it). 0 or -1 with err.
 */
int queue_drain_set(struct queue *q, const char *reason, int64_t by_uid, int64_t now,
		    int *already, char *err, size_t errlen);

/* Resume: forget the row. *was (may be NULL) = 1 if it was drained. 0 or -1. */
int queue_drain_clear(struct queue *q, int *was, char *err, size_t errlen);

/* 1 drained (*out filled, free with queue_drain_free), 0 not (*out zeroed), -1 with err. */
int queue_drain_get(struct queue *q, struct queue_drain *out, char *err, size_t errlen);

/* Frees out->reason; out itself is the caller's. */
void queue_drain_free(struct queue_drain *out);

#endif /* STAGEHAND_QUEUE_DRAIN_H */
