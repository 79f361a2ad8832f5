/*
 * queue_cleanup.h - the queue's rows for the input cleanup (core/cleanup.h
 * decides what is removed and when; queue_cleanup.c stores it): a purge
 * request with its items and the time it may run, and the counts /metrics
 * and `stagehand status` show.
 *
 * Owns the row types, so that the queue needs nothing of core/ to store
 * them. Must never: decide which files are removed or when (cleanup.c
 * does), or touch a file.
 */
#ifndef STAGEHAND_QUEUE_CLEANUP_H
#define STAGEHAND_QUEUE_CLEANUP_H

#include <stddef.h>
#include <stdint.h>

#include "queue.h"

/* What the metrics and `stagehand status` show. */
struct cleanup_counts {
	int64_t pending;      /* purge requests not done yet (waiting for their time or running) */
	int64_t done;         /* purge requests done */
	int64_t files_freed;  /* files they removed */
	int64_t bytes_freed;  /* bytes those files held */
};
/* Reads the totals of the purges that are over and the purges under way: 0 or -1. */
int queue_cleanup_counts(struct queue *q, struct cleanup_counts *c, char *err, size_t errlen);

/* One staged file to remove (borrowed relpath). */
struct cleanup_item {
	const char *relpath;  /* below the input directory */
	int64_t size, mtime_ns;
};

/*
 * Store a purge request (nr) with its items, not claimed before not_before
 * (seconds since the epoch; 0 = at once), in one transaction. 0 or -1.
 */
int queue_cleanup_create(struct queue *q, const struct queue_new_request *nr, int64_t not_before,
			 const struct cleanup_item *items, size_t n, int64_t *id_out,
			 char *err, size_t errlen);

#endif /* STAGEHAND_QUEUE_CLEANUP_H */
