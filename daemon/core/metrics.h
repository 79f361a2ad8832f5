/*
 * metrics.h - counters since start and the Prometheus text rendering.
 *
 * Owns: counters updated by the main loop (atomics, read by the API thread)
 * and the transfer-rate window. Must never: block on the database longer
 * than one count query.
 */
#ifndef STAGEHAND_METRICS_H
#define STAGEHAND_METRICS_H

#include <stdatomic.h>
#include <stdint.h>

#include "daemon.h"

struct audit_tally;

struct metrics {
	atomic_uint_fast64_t bytes_moved;     /* verified bytes since start */
	atomic_uint_fast64_t files_moved;     /* verified files since start */
	atomic_uint_fast64_t failures;        /* failed attempts */
	atomic_uint_fast64_t retries;         /* attempts scheduled for retry */
	atomic_uint_fast64_t job_end_events;  /* accepted job-end events */
	atomic_int workers_busy;              /* worker processes now */
	atomic_int yield_active;              /* after-job workers held back now */
	atomic_int yield_busy_fs;             /* file systems with running jobs */
	atomic_uint_fast64_t yield_ms;        /* time some worker was held back */
	_Atomic double rate;                  /* bytes/s over the window */
	uint64_t ring_bytes[10];              /* main loop only: bytes_moved per second */
	int64_t ring_time[10];
	int ring_pos;
	struct audit_tally *audit;            /* per-user and per-file-system totals */
};

struct metrics *metrics_create(void);
void metrics_destroy(struct metrics *m);
/* Once per main-loop turn: update the rate window. */
void metrics_tick(struct metrics *m, int64_t now_sec);
/* Render the text into a new string (free()); NULL on error. */
char *metrics_render(struct daemon *d);

#endif /* STAGEHAND_METRICS_H */
