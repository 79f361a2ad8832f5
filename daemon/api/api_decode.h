/*
 * api_decode.h - turning one HTTP request (path, query, body) into checked
 * values for the endpoints of docs/api.md.
 *
 * Owns: splitting the path into segments, parsing ids, parsing the JSON
 * body, and checking the types and ranges of every field and query
 * argument a handler reads. Everything here is pure: no I/O, no daemon
 * state, no locks, so fuzz/fuzz_api.c runs it on arbitrary bytes.
 *
 * Must never: take an identity from the body (the uid/gid/user fields of a
 * job-end event are data about the job, checked here and only honoured for
 * admins by the handler); trust a length or a string it has not checked;
 * crash or read past len on any input.
 */
#ifndef STAGEHAND_API_DECODE_H
#define STAGEHAND_API_DECODE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#define API_PATH_MAX 256	/* longer paths are 404 */
#define API_SEG_MAX 6		/* more segments are 404 */
#define API_LIST_LIMIT_MAX 100000
#define API_ATTENTION_DAYS_MAX 3650  /* attention=N: ten years */

/* A request path split at '/'. seg[] point into buf. */
struct api_path {
	char buf[API_PATH_MAX];
	char *seg[API_SEG_MAX];
	int nseg;
};

/* Split url into p. 0, or -1 when it is too long or has too many segments (404). */
int api_decode_path(const char *url, struct api_path *p);

/* A decimal number >= min with nothing after it ("12", not "+12", "12x"). 0 or -1. */
int api_decode_num(const char *s, int64_t min, int64_t *out);

/* A positive decimal id with nothing after it ("12", not "+12", "12x", "0"). 0 or -1. */
int api_decode_id(const char *s, int64_t *out);

/*
 * The body of a POST: an empty body is {}; otherwise it must be one JSON
 * object (duplicate keys refused). *out is a new reference. 0, or -1 with
 * the reason (line and column) in err (400).
 */
int api_decode_body(const char *body, size_t len, json_t **out, char *err, size_t errlen);

/* POST /v1/requests. Strings are borrowed from the body; options_text is new (free). */
struct api_submit {
	const char *action, *source, *dest;  /* NULL when absent or null */
	int64_t job_id;                      /* 0 when absent */
	char *options_text;                  /* compact JSON object, or NULL */
};

/* 0, or -1 with the field named in err (400). On -1 nothing needs freeing. */
int api_decode_submit(json_t *body, struct api_submit *s, char *err, size_t errlen);

/* Query arguments: the value of key, or NULL (libmicrohttpd's lookup in the daemon). */
typedef const char *(*api_arg_fn)(void *cls, const char *key);

/* GET /v1/requests. Strings borrowed from the query. */
struct api_list_query {
	int all;               /* all=1 (admins only: the handler checks) */
	int64_t job_id;        /* job=J, 0 when absent */
	const char *state;     /* state=S, a state name, or NULL */
	int limit;             /* limit=N, default 1000 */
	int attention_days;    /* attention=N (1..3650): unfinished requests and those failed
				  in the last N days only; 0 when absent */
	const char *user;      /* user=NAME or user=UID (borrowed), or NULL: the handler
				  resolves it and checks who may ask */
};

/*
 * Fill q from the query. is_state: 1 if the name is a request state (the
 * queue's table, so this file does not need the queue). 0, or -1 with the
 * argument named in err (400).
 */
int api_decode_list(api_arg_fn arg, void *cls, int (*is_state)(const char *name),
		    struct api_list_query *q, char *err, size_t errlen);

/* POST /v1/jobs/{job}/end. Strings borrowed from the body; plan_text is new (free). */
struct api_job_end {
	const char *state;       /* Slurm state name, never empty */
	int exit_code;
	int64_t uid, gid;        /* -1 when absent */
	const char *user;        /* NULL when absent */
	const char *work_dir;    /* absolute, or NULL */
	char *plan_text;         /* compact JSON of the plan object, or NULL */
	const char *refused;     /* the SPANK plugin refused the job at start: why; or NULL */
	const char *sluid;       /* the run's SLUID (Slurm 25.11+), or NULL */
};

/* 0, or -1 with the field named in err (400). On -1 nothing needs freeing. */
int api_decode_job_end(json_t *body, struct api_job_end *e, char *err, size_t errlen);

/* POST /v1/jobs/{job}/start. Strings borrowed from the body. */
#define API_START_DIRS_MAX 31	/* with work_dir: yield.h's YIELD_START_PATHS_MAX */
#define API_START_PATH_MAX 4096
struct api_job_start {
	int64_t uid;             /* -1 when absent */
	const char *work_dir;    /* absolute, or NULL */
	const char *node;        /* NULL when absent */
	const char *dirs[API_START_DIRS_MAX];  /* absolute paths */
	size_t ndirs;
};

/* 0, or -1 with the field named in err (400). Nothing to free. */
int api_decode_job_start(json_t *body, struct api_job_start *s, char *err, size_t errlen);

#endif /* STAGEHAND_API_DECODE_H */
