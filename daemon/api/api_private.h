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

/* Who is calling, for one HTTP request. */
struct api_caller {
	uid_t uid;
	gid_t gid;
	int admin;                   /* root, AdminUsers or AdminGroups */
	int tcp;                     /* came over TCP: identity from MUNGE */
	const struct sockaddr *peer; /* TCP: the kernel's remote address (borrowed
					from MHD for the request); NULL on UNIX */
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

/* 1 if method and url are POST /v1/requests (creating requests). */
int api_route_is_submit(const char *method, const char *url);

/* {"error": msg} with status. */
void api_error(struct api_reply *out, unsigned status, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* 1 if uid (with primary gid) is an admin under the current config. */
int api_is_admin(struct daemon *d, uid_t uid, gid_t gid);

#endif
