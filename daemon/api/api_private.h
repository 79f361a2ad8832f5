/*
 * api_private.h - shared by api.c (transport, identity) and api_handlers.c
 * (endpoints). Nothing else includes it.
 */
#ifndef STAGEHAND_API_PRIVATE_H
#define STAGEHAND_API_PRIVATE_H

#include <jansson.h>
#include <microhttpd.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "daemon.h"

struct sjob;

/* One job a request names, and its owner on slurmctld's word (a uid, or
   SOWNER_UNKNOWN_JOB / SOWNER_ERROR of slurm_owner.h). */
struct api_owner {
	uint32_t job;
	int64_t uid;
	int queue_checked;           /* the queue's verdict below is this stage's own */
	int queue_other;             /* the queue says the job is another user's */
};

/* A job-start event marked and waiting for the main loop to apply it (api_start_finish). */
struct api_start {
	int64_t job;                 /* 0: none */
	unsigned seq;                /* yield_job_start_mark's */
	int64_t uid;
	size_t npaths;
	char node[64];
};

/*
 * A request's work order (api_prep.h): what slurmctld said, asked before
 * the writer took the request, and what is left to tell slurmctld after
 * the writer's commit. The writer's handlers read it and never ask
 * slurmctld themselves: the writer holds the queue's lock, and every
 * worker's progress, job start and job end waits for it.
 */
struct api_order {
	int ready;                   /* api_prepare ran: the look-ups below were made */
	struct api_owner *owners;    /* a submit's jobs, sorted by job id (new: api_order_clear) */
	size_t nowners;
	char why[256];               /* owners: why slurmctld could not be asked, if it could not */
	int64_t status_job;          /* > 0: after the commit, set this job's status text */
	char status_text[512];       /* (api_order_finish), in the job's admin_comment */
	struct api_start start;      /* a job-start: answered by the prep stage alone */
	struct sjob *job;            /* a burst-buffer call's job as slurmctld has it (new:
					api_order_clear), read by the prep stage; NULL: none */
	int job_rc;                  /* sjob_get's answer for it: 0, 1 unknown, -1 job_err */
	char job_err[256];
};

/* Who is calling, for one HTTP request. */
struct api_caller {
	uid_t uid;
	gid_t gid;
	int admin;                   /* root, AdminUsers or AdminGroups */
	int tcp;                     /* came over TCP: identity from MUNGE */
	const struct sockaddr *peer; /* TCP: the kernel's remote address (borrowed
					from MHD for the request); NULL on UNIX */
	struct api_order *order;     /* the request's work order (borrowed) on the prep and
					writer threads; NULL on a listener, which asks
					slurmctld itself */
};

/* One HTTP response built by a handler. */
struct api_reply {
	unsigned status;
	json_t *body;                /* owned; NULL with text set for /metrics */
	char *text;                  /* owned plain text body */
};

/* Route one complete request. body may be NULL (no body). */
void api_route(struct daemon *d, const struct api_caller *who, struct MHD_Connection *conn,
	       const char *method, const char *url, const char *body, size_t len,
	       struct api_reply *out);
/*
 * The same with a POST's body decoded already (api_decode_body; borrowed:
 * the caller frees it): jb NULL means it could not be, and body_err says why.
 */
void api_route_json(struct daemon *d, const struct api_caller *who, struct MHD_Connection *conn,
		    const char *method, const char *url, json_t *jb, const char *body_err,
		    struct api_reply *out);

struct sowner;

/*
 * The prep stage's half of a request (api_prep.h), before the writer: asks
 * slurmctld what the writer's handler will need into o (the owners of the
 * jobs a submit names, through the cache c; whether a job event's peer is
 * one of the job's nodes) and checks all that can be checked without the
 * queue's lock: a request refused here never reaches the writer. Called
 * with conf_lock held (read). 1 answered (out set), 0 hand it to the writer,
 * 2 a job-start marked: answer it with api_start_finish (after the newest
 * of the starts waiting together), never through the writer.
 */
int api_prepare(struct daemon *d, const struct api_caller *who, const char *method,
		const char *url, json_t *jb, struct sowner *c, struct api_reply *out);
/* 1 if method and url are a job event (POST or DELETE /v1/jobs/N/start, POST .../end),
   or a burst-buffer hook's call (POST /v1/bb/N/CALL): the prep stage's events lane. */
int api_route_is_event(const char *method, const char *url);
/* A job-start's second half: wait until the main loop applied it (st->seq), log, answer. */
void api_start_finish(struct daemon *d, const struct api_caller *who, struct api_start *st,
		      struct api_reply *out);
/*
 * The job's status text (its admin_comment): into who's work order when
 * there is one, for api_order_finish after the writer's commit (an RPC the
 * writer must not wait for), else set now (a listener's own request).
 */
void api_set_status(const struct api_caller *who, int64_t job, const char *text);
/* After the writer's commit: what o still has to tell slurmctld (prep thread). */
void api_order_finish(struct api_order *o);
/* Frees what o holds; o may be reused. */
void api_order_clear(struct api_order *o);

/* 1 if method and url are POST /v1/requests (creating requests). */
int api_route_is_submit(const char *method, const char *url);

/* {"error": msg} with status. */
void api_error(struct api_reply *out, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* 1 if uid (with primary gid) is an admin under the current config. */
int api_is_admin(struct daemon *d, uid_t uid, gid_t gid);

#endif
