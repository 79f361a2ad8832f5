/*
 * client_int.h - what the daemon-client subcommands share (client.c,
 * job_end.c, bb.c, audit.c); nothing else includes it.
 *
 * Owns: exit codes, the common options, and the call helpers that print
 * their own messages. Must never: be used outside cli/.
 */
#ifndef STAGEHAND_CLI_CLIENT_INT_H
#define STAGEHAND_CLI_CLIENT_INT_H

#include <getopt.h>
#include <stddef.h>
#include <stdio.h>

#include <jansson.h>

#include "client.h"
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

/*
 * getopt_long over a subcommand's argv with the common options taken care
 * of: returns the next other option, -1 at the end, or '?' once the bad
 * argument has been reported. Use it through
 * client_foreach_opt, which starts the scan at argv[1].
 */
int client_getopt(int argc, char **argv, const char *shortopts, const struct option *lo);

/*
 * Loop over the options of one subcommand: for each one not common, the body
 * sees it in c (and its value in optarg); on '?' the body returns EXIT_ENV,
 * the message is printed already. optind is left at the first operand.
 */
#define client_foreach_opt(c, argc, argv, shortopts, lo) \
	for (optind = 1, opterr = 0; \
	     ((c) = client_getopt((argc), (argv), (shortopts), (lo))) != -1;)

/*
 * The options of a subcommand whose only own option is --json (sets
 * *json_out): -1 to go on, optind at the first operand; else the exit code,
 * EXIT_OK once usage(stdout) printed the help, EXIT_ENV on a bad option.
 */
int client_json_opts(int argc, char **argv, void (*usage)(FILE *fp), int *json_out);

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

/* A daemon answer as one line of JSON on stdout (keys in the daemon's order), flushed. */
void client_print_json_line(json_t *j);


/* Sleep s seconds (fractions too), resumed across signals. */
void client_sleep(double s);

/* snprintf of an API path; the paths used always fit. */
int client_path_fmt(char *buf, size_t len, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * One line on an admin's drain from a drain state (GET /v1/drain, or
 * /v1/health's "drain"): since when, by whom, why, how many transfers still
 * run. Nothing when not drained. drain.c.
 */
void client_print_drain(FILE *fp, const json_t *state);

/* One line on how after-job transfers share the file systems with jobs (/v1/health). */
void client_print_yield(const json_t *health);

/* 'stagehand status' without an id (status_list.c). */
struct status_list {
	int days;                    /* failed ones of the last days (--days, default 7) */
	int all_states;              /* --all: every request, finished ones too */
	const char *user;            /* --user NAME|UID, or NULL */
	int admin;                   /* the daemon says the caller is an admin: every user's */
};
/* The API path for sl into buf. 0, or -1 with a message printed. */
int status_list_path(char *buf, size_t len, const struct status_list *sl);
/* Print the daemon's answer to that path. */
void status_list_print(json_t *resp, const struct status_list *sl);

#endif /* STAGEHAND_CLI_CLIENT_INT_H */
