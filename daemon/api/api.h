/*
 * api.h - the HTTP/JSON API (docs/api.md) on libmicrohttpd.
 *
 * Owns: the listening sockets (UNIX socket bound here, mode 0666; optional
 * TCP), identifying every caller (SO_PEERCRED on the UNIX socket, on TCP a
 * MUNGE credential bound to its one request, checked by api_cred.c once the
 * whole body is in), per-user connection caps, body size caps, routing and
 * JSON in and out. Runs in libmicrohttpd's own thread.
 *
 * Must never: take an identity from a request body, touch user files, or
 * block on anything but the queue's lock.
 */
#ifndef STAGEHAND_API_H
#define STAGEHAND_API_H

#include <stddef.h>

#include "daemon.h"

/* Bind the sockets (before the pidfile is written). NULL with a message. */
struct api *api_bind(struct daemon *d, char *err, size_t errlen);
/* Start serving (libmicrohttpd thread). 0 or -1. */
int api_start(struct api *a, char *err, size_t errlen);
/* Stop serving, close the sockets and unlink the UNIX socket. */
void api_stop(struct api *a);

/*
 * The text of /metrics: metrics_render's and the API's own series (the
 * writer thread's). New string, or NULL without memory.
 */
char *api_metrics_render(struct daemon *d);

#endif /* STAGEHAND_API_H */
