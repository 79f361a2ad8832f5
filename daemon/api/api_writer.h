/*
 * api_writer.h - the API's writer thread: every request that changes
 * something (POST, DELETE) is answered here, one at a time, while the
 * listener threads keep answering reads (status, lists, /metrics) at once.
 *
 * The listener decodes a POST's JSON before handing it over, so on a
 * machine with two cores the next mover's records are parsed while the
 * writer stores the last ones.
 *
 * Why a thread of its own: libmicrohttpd's listener thread answered every
 * request in turn, so a `stagehand status` waited behind a mover's 250
 * records or a request's durable commit (an fsync); reads go to the queue's
 * readers' connection and need wait for neither. Writes stay one at a time,
 * as before, so no handler that changes state runs beside another; a read
 * handler runs beside a write one, as it always ran beside the main loop.
 *
 * Group commit: requests to create requests (POST /v1/requests) waiting
 * together are stored in one transaction, one fsync for all of them; each
 * caller is answered only after that commit, so a 201 still means the
 * request is on disk.
 *
 * Owns: its queue of waiting requests and the thread. Must never: answer a
 * request before its changes are committed, or leave a connection
 * suspended (api_writer_stop answers every waiting request first).
 */
#ifndef STAGEHAND_API_WRITER_H
#define STAGEHAND_API_WRITER_H

#include <microhttpd.h>
#include <stddef.h>

#include "api_private.h"

/* One request handed to the writer; the caller owns it and its strings. */
struct api_wjob {
	struct MHD_Connection *c;    /* suspended while the writer has the job */
	struct api_caller who;
	const char *method, *url;
	json_t *jb;                  /* a POST's body, decoded and freed by the listener; */
	char body_err[512];          /* NULL: why it could not be */
	int submit;                  /* POST /v1/requests: may share a commit */
	struct api_order order;      /* its work order: the prep stage's look-ups (api_prep.h) */
	int lane;                    /* the prep stage's lane; -1: none */
	int finishing;               /* back in the prep stage after the writer (order.status_job) */
	struct api_reply rep;        /* the answer, set before c is resumed */
	struct api_wjob *next;
};

struct api_writer;

/* Start the thread. NULL with err. */
struct api_writer *api_writer_start(struct daemon *d, char *err, size_t errlen);

/*
 * Hand j to the writer: suspends j->c (so call it from libmicrohttpd's
 * access handler), and the writer resumes it once j->rep is set. 0, or -1
 * if the writer is stopping or absent: then nothing is suspended and the
 * caller answers the request itself.
 */
int api_writer_submit(struct api_writer *w, struct api_wjob *j);

/*
 * The same for a job whose connection is suspended already (the prep
 * stage's, api_prep.h): 0, or -1 if the writer is stopping (then the caller
 * answers and resumes it).
 */
int api_writer_take(struct api_writer *w, struct api_wjob *j);

/*
 * Once the writer has answered a job whose work order has something left to
 * tell slurmctld (order.status_job), it hands the job to after(arg, j)
 * instead of resuming it; after returns 0 when it took the job (and resumes
 * it later), -1 when it did not (the writer resumes it). after runs under
 * the writer's lock: it must only queue the job. NULL: resume at once.
 */
void api_writer_set_after(struct api_writer *w, int (*after)(void *arg, struct api_wjob *j),
			  void *arg);

/*
 * Answer every waiting request, stop and free the thread, and log how many
 * it answered and how many commits were shared. NULL is fine.
 */
void api_writer_stop(struct api_writer *w);

/* Requests handed over and not yet answered, answered, commits shared (for /metrics). */
void api_writer_stats(struct api_writer *w, unsigned long *waiting, unsigned long *answered,
		      unsigned long *groups);

#endif
