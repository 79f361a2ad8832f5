/*
 * metrics_http.h - MetricsAddress: a plain-HTTP, read-only /metrics for a
 * stock Prometheus, beside the authenticated API (api.h).
 *
 * Owns: one libmicrohttpd server on its own thread and TCP address. It
 * answers GET and HEAD /metrics with metrics_render()'s text and nothing
 * else (404 for other paths, 405 for other methods, bodies dropped).
 *
 * Why no authentication: Prometheus scrapes plain HTTP and cannot make
 * MUNGE credentials. The text names no user paths; user names can be
 * hashed (MetricsHashUsers). Bind it to a management address.
 *
 * Must never: change anything, or serve anything but the metrics text.
 */
#ifndef STAGEHAND_METRICS_HTTP_H
#define STAGEHAND_METRICS_HTTP_H

#include <stddef.h>

#include "daemon.h"

struct metrics_http;

/*
 * Listen on the configured MetricsAddress and serve. Returns the server;
 * NULL when MetricsAddress is off (err empty) or on failure (err set).
 */
struct metrics_http *metrics_http_start(struct daemon *d, char *err, size_t errlen);
void metrics_http_stop(struct metrics_http *m);

#endif
