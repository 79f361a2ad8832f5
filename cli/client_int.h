/*
 * client_int.h - what the daemon-client subcommands share (client.c and
 * job_end.c); nothing else includes it.
 *
 * Owns: exit codes, the common options, and the call helpers that print
 * their own messages. Must never: be used outside cli/.
 */
#ifndef STAGEHAND_CLI_CLIENT_INT_H
#define STAGEHAND_CLI_CLIENT_INT_H

#include <getopt.h>
#include <stddef.h>

#include <jansson.h>

#include "http.h"

enum { EXIT_OK = 0, EXIT_REFUSED = 1, EXIT_ENV = 2 };

/* Long-option codes shared by every subcommand. */
enum { OPT_SOCKET = 1000, OPT_SERVER, OPT_CONFIG, OPT_HELP };
#define COMMON_LONGOPTS \
	{ "socket", required_argument, NULL, OPT_SOCKET }, \
	{ "server", required_argument, NULL, OPT_SERVER }, \
	{ "config", required_argument, NULL, OPT_CONFIG }, \
	{ "help", no_argument, NULL, 'h' }

#define COMMON_HELP \
	"daemon selection:\n" \
	"  --socket PATH       UNIX socket of stagehandd (env STAGEHAND_SOCKET)\n" \
	"  --server HOST:PORT  TCP address, authenticated with MUNGE (env STAGEHAND_SERVER)\n" \
	"  --config FILE       config file to read Server or SocketPath from (env STAGEHAND_CONF)\n"

/* "stagehand: " + message + newline on stderr. */
void client_errx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* getopt's '?': say which argument and point at --help. Returns EXIT_ENV. */
int client_bad_option(const char *cmd, const char *arg);

/* 1 if c was a common option (handled), 0 otherwise. */
int client_common_opt(int c, const char *arg);

/* The daemon connection per client.h's order; NULL with a message printed. */
struct http *client_open(void);

/*
 * One call. On a 2xx answer returns EXIT_OK with *resp a new reference (or
 * NULL). Otherwise prints the daemon's message (or the transport failure)
 * and returns EXIT_REFUSED / EXIT_ENV; *status_out, if given, says which
 * HTTP status came back (0 for none).
 */
int client_call(struct http *h, const char *method, const char *path, json_t *body,
		json_t **resp, long *status_out);

enum id_kind { ID_BAD, ID_REQUEST, ID_JOB };

/* "r12" -> ID_REQUEST, "12" -> ID_JOB (value in *out), else ID_BAD. */
enum id_kind client_parse_id(const char *s, unsigned long long *out);

/* snprintf of an API path; the paths used always fit. */
int client_path_fmt(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif /* STAGEHAND_CLI_CLIENT_INT_H */
