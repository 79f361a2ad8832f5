/*
 * worker_int.h - private to the worker pool (worker.c, the daemon's side;
 * worker_child.c, the worker process).
 */
#ifndef STAGEHAND_WORKER_INT_H
#define STAGEHAND_WORKER_INT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon.h"
#include "queue.h"
#include "spawner.h"	/* struct worker_order */
#include "xfer.h"

/*
 * The worker process, after the fork: become the request's owner, run the
 * backend on the work order o (spawner.h) and _exit. chan is its end of the
 * record socket; parent the daemon's pid (the child exits if it is already
 * gone). Never returns.
 */
void worker__child(struct daemon *d, const struct worker_order *o, int chan, pid_t parent)
	__attribute__((noreturn));

/*
 * worker_archive.c: before the fork of a stage-in of a local path, the
 * archive copy the source lies in, from the daemon's records (its root and
 * the checksums of its files when they were archived) into *a. 1 found, 0
 * none, -1 (logged): the stage-in then copies as usual.
 */
int worker__archive_load(struct daemon *d, const struct queue_request *r, struct xfer_archive *a);
void worker__archive_free(struct xfer_archive *a);

#endif /* STAGEHAND_WORKER_INT_H */
