/*
 * client.c - the daemon-client subcommands: submit, status, queue, cancel,
 * retry, job-end, health. See client.h for daemon selection and the id
 * syntax, docs/api.md for the calls, stagehand(1) for the user's view.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdbool.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "client.h"
#include "client_int.h"
#include "commands.h"
#include "http.h"
#include "monoclock.h"
#include "progress.h"

#ifndef STAGEHAND_SYSCONFDIR
#define STAGEHAND_SYSCONFDIR "/etc"
#endif
#define CLIENT_DEFAULT_CONF STAGEHAND_SYSCONFDIR "/stagehand/stagehand.conf"


const char *client_opt_socket, *client_opt_server, *client_opt_config;

void client_errx(const char *fmt, ...)
{
	va_list ap;

	fputs("stagehand: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

int client_global_option(int argc, char **argv)
{
	static const struct { const char *name; const char **slot; } opts[] = {
		{ "--socket", &client_opt_socket },
		{ "--server", &client_opt_server },
		{ "--config", &client_opt_config },
	};
	size_t i, len;
	int used = 0;

	for (i = 0; i < sizeof(opts) / sizeof(opts[0]) && !used; i++) {
		len = strlen(opts[i].name);
		if (strncmp(argv[0], opts[i].name, len))
			continue;
		if (argv[0][len] == '=') {
			*opts[i].slot = argv[0] + len + 1;
			used = 1;
		} else if (argv[0][len] == '\0') {
			if (argc < 2) {
				client_errx("option '%s' needs a value", opts[i].name);
				return -1;
			}
			*opts[i].slot = argv[1];
			used = 2;
		} else {
			continue;
		}
		/* --socket and --server exclude each other; the later one wins. */
		if (opts[i].slot == &client_opt_socket)
			client_opt_server = NULL;
		else if (opts[i].slot == &client_opt_server)
			client_opt_socket = NULL;
	}
	return used;
}

/* getopt's '?': say which argument, in our voice, and point at --help. */
static void _bad_option(const char *cmd, const char *arg)
{
	client_errx("%s: bad option '%s': unknown, or missing its value (see 'stagehand %s --help')",
	      cmd, arg, cmd);
}

/* Returns 1 if c was a common option (handled), 0 otherwise. */
static int _common_opt(int c, const char *arg)
{
	switch (c) {
	case OPT_SOCKET: client_opt_socket = arg; client_opt_server = NULL; return 1;
	case OPT_SERVER: client_opt_server = arg; client_opt_socket = NULL; return 1;
	case OPT_CONFIG: client_opt_config = arg; return 1;
	default: return 0;
	}
}

int client_getopt(int argc, char **argv, const char *shortopts, const struct option *lo)
{
	int c;

	while ((c = getopt_long(argc, argv, shortopts, lo, NULL)) != -1) {
		if (_common_opt(c, optarg))
			continue;
		if (c == '?')
			_bad_option(argv[0], argv[optind - 1]);
		return c;
	}
	return -1;
}

int client_json_opts(int argc, char **argv, void (*usage)(FILE *fp), int *json_out)
{
	static const struct option lo[] = {
		{ "json", no_argument, NULL, 'J' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	int c;

	client_foreach_opt(c, argc, argv, "h", lo) {
		switch (c) {
		case 'J': *json_out = 1; break;
		case 'h': usage(stdout); return EXIT_OK;
		case '?': return EXIT_ENV;
		default: usage(stderr); return EXIT_ENV;
		}
	}
	return -1;
}

struct http *client_connect(const char *socket_path, const char *server, const char *config)
{
	struct dclient_target t;
	char err[1280];
	const char *conf = config && *config ? config : getenv("STAGEHAND_CONF");
	int conf_given = conf && *conf;
	struct http *h;

	if ((!server || !*server) && (!socket_path || !*socket_path)) {
		server = getenv("STAGEHAND_SERVER");
		socket_path = getenv("STAGEHAND_SOCKET");
	}
	if (dclient_find(&t, server, socket_path, conf_given ? conf : CLIENT_DEFAULT_CONF,
			 conf_given, err, sizeof(err)) < 0) {
		client_errx("%s (give --server HOST:PORT or --socket PATH, or fix --config / "
		      "STAGEHAND_CONF)", err);
		return NULL;
	}
	h = http_open(&t);
	if (!h)
		client_errx("out of memory");
	return h;
}

/* Open the daemon connection per client.h's order. NULL: message printed. */
struct http *client_open(void)
{
	return client_connect(client_opt_socket, client_opt_server, client_opt_config);
}

/*
 * One call. On a 2xx answer returns EXIT_OK with *resp a new reference (or
 * NULL). Otherwise prints the daemon's "error" message (or the transport
 * failure) and returns EXIT_REFUSED / EXIT_ENV; *status, if given, says
 * which HTTP status came back (0 for none).
 */
int client_call(struct http *h, const char *method, const char *path, json_t *body,
		 json_t **resp, long *status_out)
{
	char err[1024], *raw = NULL;
	long status = 0;
	json_t *r = NULL;
	struct http_reply hr;

	if (resp)
		*resp = NULL;
	if (status_out)
		*status_out = 0;
	if (http_call(h, method, path, body, &hr, err, sizeof(err)) < 0) {
		client_errx("%s", err);
		return EXIT_ENV;
	}
	status = hr.status;
	r = hr.json;
	raw = hr.raw;
	if (status_out)
		*status_out = status;
	if (status >= 200 && status < 300) {
		free(raw);
		if (resp)
			*resp = r;
		else
			json_decref(r);
		return EXIT_OK;
	}
	if (json_is_string(json_object_get(r, "error")))
		client_errx("%s", json_string_value(json_object_get(r, "error")));
	else
		client_errx("stagehandd at %s answered HTTP %ld to %s %s%s%.200s", http_target(h), status,
		      method, path, raw && *raw ? ": " : "", raw ? raw : "");
	free(raw);
	json_decref(r);
	return EXIT_REFUSED;
}

static void _print_json(json_t *j)
{
	char *s = json_dumps(j, JSON_INDENT(2) | JSON_PRESERVE_ORDER);

	if (s) {
		puts(s);
		free(s);
	}
}

void client_print_json_line(json_t *j)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);

	if (s) {
		puts(s);
		free(s);
	}
	fflush(stdout);
}

/* Ids: "r123" (or "R123") is a request, "123" a Slurm job id. */

enum id_kind client_parse_id(const char *s, unsigned long long *out)
{
	enum id_kind kind = ID_JOB;
	char *end;

	if (*s == 'r' || *s == 'R') {
		kind = ID_REQUEST;
		s++;
	}
	if (!isdigit((unsigned char)*s))
		return ID_BAD;
	errno = 0;
	*out = strtoull(s, &end, 10);
	if (errno || *end || *out == 0 || *out > (unsigned long long)INT64_MAX)
		return ID_BAD;
	return kind;
}

static void _bad_id(const char *cmd, const char *s)
{
	client_errx("%s: '%s' is not an id: write a request as r123 (see 'stagehand status') or a Slurm job as 123",
	      cmd, s);
}

void client_sleep(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

int client_path_fmt(char *buf, size_t len, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, len, fmt, ap);
	va_end(ap);
	return n < 0 || (size_t)n >= len ? -1 : 0;
}

/* The requests of a status answer: a request, a job, or a list. Borrowed. */
static json_t *_requests_of(json_t *resp, json_t **single)
{
	json_t *arr = json_object_get(resp, "requests");

	*single = NULL;
	if (json_is_array(arr))
		return arr;
	if (json_object_get(resp, "id")) {
		*single = json_array();
		json_array_append(*single, resp);
		return *single;
	}
	return NULL;
}

/* A job's input cleanup (InputRetention, hours away): nothing to wait for. */
static int _is_purge(json_t *r)
{
	const char *a = json_string_value(json_object_get(r, "action"));

	return a && !strcmp(a, "purge");
}

static int _all_terminal(json_t *reqs)
{
	size_t i;
	json_t *r;

	json_array_foreach(reqs, i, r)
		if (!_is_purge(r) &&
		    !progress_state_terminal(json_string_value(json_object_get(r, "state"))))
			return 0;
	return 1;
}

static int _all_done(json_t *reqs)
{
	size_t i;
	json_t *r;
	const char *s;

	json_array_foreach(reqs, i, r) {
		s = json_string_value(json_object_get(r, "state"));
		if (!_is_purge(r) && (!s || strcmp(s, "done")))
			return 0;
	}
	return 1;
}

/*
 * Poll path until every request is terminal. On a terminal: progress bars.
 * Otherwise: one JSON line per request each time it changes. Returns
 * EXIT_OK when all ended done, EXIT_REFUSED if any failed or was
 * cancelled, EXIT_ENV if the daemon went away.
 */
static int _watch(struct http *h, const char *path, double interval, int force_json)
{
	int tty = !force_json && isatty(STDOUT_FILENO);
	struct progress *p = tty ? progress_new(stdout) : NULL;
	json_t *last = json_object();	/* "id" -> last compact line printed */
	int rc;

	for (;;) {
		json_t *resp, *single, *reqs;
		size_t i;
		json_t *r;

		rc = client_call(h, "GET", path, NULL, &resp, NULL);
		if (rc != EXIT_OK)
			break;
		reqs = _requests_of(resp, &single);
		if (!reqs) {
			client_errx("stagehandd at %s sent an answer without requests for %s", http_target(h), path);
			json_decref(resp);
			rc = EXIT_REFUSED;
			break;
		}
		if (json_array_size(reqs) == 0) {
			if (tty)
				printf("no requests\n");
			json_decref(single);
			json_decref(resp);
			rc = EXIT_OK;
			break;
		}
		if (p) {
			progress_draw(p, reqs, mono_s());
		} else {
			json_array_foreach(reqs, i, r) {
				char key[32], *line = json_dumps(r, JSON_COMPACT | JSON_SORT_KEYS);
				const char *prev;

				if (!line)
					continue;
				snprintf(key, sizeof(key), "%" JSON_INTEGER_FORMAT,
					 json_integer_value(json_object_get(r, "id")));
				prev = json_string_value(json_object_get(last, key));
				if (!prev || strcmp(prev, line)) {
					client_print_json_line(r);
					json_object_set_new(last, key, json_string(line));
				}
				free(line);
			}
		}
		if (_all_terminal(reqs)) {
			rc = _all_done(reqs) ? EXIT_OK : EXIT_REFUSED;
			json_decref(single);
			json_decref(resp);
			break;
		}
		json_decref(single);
		json_decref(resp);
		client_sleep(interval);
	}
	progress_free(p);
	json_decref(last);
	return rc;
}

static int _make_absolute(const char *in, char *out, size_t len)
{
	char cwd[PATH_MAX];

	if (!*in) {
		client_errx("submit: empty path");
		return -1;
	}
	if (strstr(in, "://") || *in == '/') {
		if (snprintf(out, len, "%s", in) >= (int)len)
			goto toolong;
		return 0;
	}
	/* Relative paths are the user's view from here; no symlink is resolved. */
	if (!getcwd(cwd, sizeof(cwd))) {
		client_errx("submit: cannot resolve '%s': current directory: %s", in, strerror(errno));
		return -1;
	}
	if (snprintf(out, len, "%s/%s", cwd, in) >= (int)len)
		goto toolong;
	return 0;
toolong:
	client_errx("submit: path too long (max %zu bytes): %.80s...", len - 1, in);
	return -1;
}

/* ---- submit ------------------------------------------------------------ */

/* --interval SEC for --wait / --watch: 0, or -1 with a message. */
static int _interval_arg(const char *cmd, const char *v, double *out)
{
	double d = strtod(v, NULL);

	if (!(d >= 0.1 && d <= 3600)) {
		client_errx("%s: --interval wants seconds between 0.1 and 3600, got '%s'", cmd, v);
		return -1;
	}
	*out = d;
	return 0;
}

static void _submit_usage(FILE *fp)
{
	fprintf(fp,
		"usage: stagehand submit (--stage-in|--archive|--stage-out) SRC DEST [--job J] [--wait] [--json]\n"
		"       stagehand submit --label SRC [--job J]\n"
		"Queue one transfer with stagehandd, done with your own identity.\n"
		"  --stage-in SRC DEST   copy input SRC to DEST (SRC may be a URL the site allows)\n"
		"  --archive SRC DEST    archive SRC to DEST, verified\n"
		"  --stage-out SRC DEST  copy SRC to DEST (path or URL)\n"
		"  --label SRC           archive in label mode: mark SRC for the site's HSM engine\n"
		"  --job J               attach the request to Slurm job J\n"
		"  --backend NAME        transfer backend: local (default) or null (read and\n"
		"                        checksum only, write nothing; for tests and benchmarks)\n"
		"  --no-keep             archive: remove each source file once its copy is verified\n"
		"  --wait                follow the request until it ends; exit 0 only if it is done\n"
		"  --interval SEC        polling interval for --wait (default 1)\n"
		"  --json                print the daemon's answer as JSON\n"
		COMMON_HELP);
}

/* What 'stagehand submit' was asked (_submit_args). */
struct _submit_opts {
	const char *action, *backend;
	unsigned long long job;
	int wait, json_out, no_keep, nargs;
	double interval;
};

/* The command line into *o: -1 go on (optind at SRC), else the exit code (help or an error shown). */
static int _submit_args(int argc, char **argv, struct _submit_opts *o)
{
	static const struct option lo[] = {
		{ "stage-in", no_argument, NULL, 'i' },
		{ "archive", no_argument, NULL, 'a' },
		{ "stage-out", no_argument, NULL, 'o' },
		{ "label", no_argument, NULL, 'l' },
		{ "job", required_argument, NULL, 'j' },
		{ "backend", required_argument, NULL, 'b' },
		{ "no-keep", no_argument, NULL, 'K' },
		{ "wait", no_argument, NULL, 'w' },
		{ "interval", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'J' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	int c;

	*o = (struct _submit_opts){ .interval = 1.0 };
	client_foreach_opt(c, argc, argv, "h", lo) {
		if (c == '?')
			return EXIT_ENV;
		switch (c) {
		case 'i': case 'a': case 'o': case 'l': {
			const char *a = c == 'i' ? "stage_in" : c == 'a' ? "archive" :
					c == 'o' ? "stage_out" : "label";

			if (o->action && strcmp(o->action, a)) {
				client_errx("submit: give one of --stage-in, --archive, --stage-out, --label");
				return EXIT_ENV;
			}
			o->action = a;
			break;
		}
		case 'j':
			if (client_parse_id(optarg, &o->job) != ID_JOB) {
				client_errx("submit: --job wants a Slurm job id such as 4711, got '%s'", optarg);
				return EXIT_ENV;
			}
			break;
		case 'w': o->wait = 1; break;
		case 'J': o->json_out = 1; break;
		case 'b': o->backend = optarg; break;
		case 'K': o->no_keep = 1; break;
		case 'n':
			if (_interval_arg("submit", optarg, &o->interval) < 0)
				return EXIT_ENV;
			break;
		case 'h': _submit_usage(stdout); return EXIT_OK;
		default: _submit_usage(stderr); return EXIT_ENV;
		}
	}
	o->nargs = o->action && !strcmp(o->action, "label") ? 1 : 2;
	if (!o->action || argc - optind != o->nargs) {
		client_errx(o->nargs == 1 ? "submit: --label takes exactly one path"
				    : "submit: need an action and exactly SRC DEST");
		_submit_usage(stderr);
		return EXIT_ENV;
	}
	if (o->no_keep && strcmp(o->action, "archive")) {
		client_errx("submit: --no-keep only applies to --archive");
		return EXIT_ENV;
	}
	return -1;
}

/* The request's JSON body (new), or NULL out of memory. dst is ignored for --label. */
static json_t *_submit_body(const struct _submit_opts *o, const char *src, const char *dst)
{
	json_t *body = json_pack("{s:s, s:s}", "action", o->action, "source", src);

	if (!body)
		return NULL;
	if (o->nargs == 2)
		json_object_set_new(body, "dest", json_string(dst));
	if (o->job)
		json_object_set_new(body, "job_id", json_integer((json_int_t)o->job));
	if (o->backend || o->no_keep) {
		json_t *opt = json_object();

		if (o->backend)
			json_object_set_new(opt, "backend", json_string(o->backend));
		if (o->no_keep)
			json_object_set_new(opt, "keep", json_false());
		json_object_set_new(body, "options", opt);
	}
	return body;
}

/* The daemon's answer to a submission shown; with --wait, the request followed. The exit code. */
static int _submit_answer(struct http *h, const struct _submit_opts *o, json_t *resp)
{
	json_int_t id = json_integer_value(json_object_get(resp, "id"));
	char path[64];

	if (o->json_out)
		client_print_json_line(resp);
	else
		printf("submitted request r%" JSON_INTEGER_FORMAT " (%s)\n", id,
		       json_string_value(json_object_get(resp, "state")) ?: "queued");
	fflush(stdout);
	if (!o->wait)
		return EXIT_OK;
	if (id <= 0 || client_path_fmt(path, sizeof(path), "/v1/requests/%llu",
				       (unsigned long long)id) < 0) {
		client_errx("submit: the daemon answered without a request id; cannot wait");
		return EXIT_REFUSED;
	}
	return _watch(h, path, o->interval, o->json_out);
}

int cmd_submit(int argc, char **argv)
{
	struct _submit_opts o;
	char src[PATH_MAX + 64], dst[PATH_MAX + 64];
	struct http *h;
	json_t *body, *resp;
	int rc = _submit_args(argc, argv, &o);

	if (rc >= 0)
		return rc;
	if (_make_absolute(argv[optind], src, sizeof(src)) < 0 ||
	    (o.nargs == 2 && _make_absolute(argv[optind + 1], dst, sizeof(dst)) < 0))
		return EXIT_ENV;
	if (!(body = _submit_body(&o, src, dst))) {
		client_errx("submit: out of memory");
		return EXIT_ENV;
	}
	if (!(h = client_open())) {
		json_decref(body);
		return EXIT_ENV;
	}
	rc = client_call(h, "POST", "/v1/requests", body, &resp, NULL);
	json_decref(body);
	if (rc == EXIT_OK)
		rc = _submit_answer(h, &o, resp);
	json_decref(resp);
	http_close(h);
	return rc;
}

/* ---- status ------------------------------------------------------------ */

static void _status_usage(FILE *fp)
{
	fprintf(fp,
		"usage: stagehand status [--days N | --all] [--user USER] [--watch] [--json]\n"
		"       stagehand status JOB|rREQ [--watch] [--items] [--json]\n"
		"Without an id: your transfers that are not finished, and those that failed in\n"
		"the last N days (an admin sees every user's). With one: a Slurm job's (JOB,\n"
		"e.g. 4711) or one request's (rREQ, e.g. r12).\n"
		"  --days N        failed transfers of the last N days (default 7, at most 3650)\n"
		"  --all           every request, finished ones too, newest first\n"
		"  --user USER     one user's (name or uid); other users' need admin rights\n"
		"  --watch         follow until every request has ended: progress bars on a\n"
		"                  terminal, JSON lines (one per change) otherwise\n"
		"  --interval SEC  polling interval for --watch (default 1)\n"
		"  --items         with rREQ: list the request's files and their states\n"
		"  --json          print the daemon's answer as JSON\n"
		COMMON_HELP);
}

static void _print_items(json_t *resp)
{
	json_t *items = json_object_get(resp, "items"), *it;
	size_t i;
	char sz[24];

	if (!json_is_array(items))
		return;
	printf("\n%-10s %-8s %-10s %s\n", "STATE", "TYPE", "SIZE", "PATH");
	json_array_foreach(items, i, it) {
		const char *e = json_string_value(json_object_get(it, "error"));
		json_t *size = json_object_get(it, "size");

		printf("%-10s %-8s %-10s %s%s%s\n",
		       json_string_value(json_object_get(it, "state")) ?: "?",
		       json_string_value(json_object_get(it, "type")) ?: "?",
		       progress_fmt_bytes(json_is_number(size) ? json_number_value(size) : 0,
					  sz, sizeof(sz)),
		       json_string_value(json_object_get(it, "relpath")) ?: "?",
		       e ? "  error: " : "", e ? e : "");
	}
	if (json_is_true(json_object_get(resp, "items_truncated")))
		printf("(list truncated by the daemon)\n");
}

/*
 * When the job's staged inputs were or will be removed (its purge request,
 * cleanup.h in the daemon): "inputs: ..." lines.
 */
static void _print_inputs(json_t *reqs)
{
	size_t i;
	json_t *r;

	json_array_foreach(reqs, i, r) {
		const char *st = json_string_value(json_object_get(r, "state"));
		const char *src = json_string_value(json_object_get(r, "source"));
		const char *e = json_string_value(json_object_get(r, "error"));
		json_t *next = json_object_get(r, "next_attempt_at");
		json_int_t total = json_integer_value(json_object_get(r, "files_total"));
		time_t t = (time_t)json_integer_value(json_is_integer(next) ? next :
						      json_object_get(r, "updated"));
		char when[64] = "?";
		struct tm tm;

		if (!_is_purge(r) || !st)
			continue;
		if (t > 0 && localtime_r(&t, &tm))
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S", &tm);
		if (!strcmp(st, "done"))
			printf("inputs: removed %s (%" JSON_INTEGER_FORMAT " staged file%s in %s; "
			       "'stagehand status r%" JSON_INTEGER_FORMAT " --items' lists what "
			       "stayed and why)\n", when, total, total == 1 ? "" : "s", src ? src : "?",
			       json_integer_value(json_object_get(r, "id")));
		else if (!strcmp(st, "queued") && json_is_integer(next))
			printf("inputs: %" JSON_INTEGER_FORMAT " staged file%s in %s will be removed "
			       "after %s (InputRetention); move what you want to keep out of it\n",
			       total, total == 1 ? "" : "s", src ? src : "?", when);
		else if (!strcmp(st, "cancelled"))
			printf("inputs: removal cancelled; %s is left to the site's purge\n",
			       src ? src : "?");
		else
			printf("inputs: removal of %s %s%s%s\n", src ? src : "?", st, e ? ": " : "",
			       e ? e : "");
	}
}

static int _print_status(json_t *resp, int is_job)
{
	json_t *single, *reqs;

	if (is_job) {
		json_t *si = json_object_get(resp, "stage_in");
		const char *st = json_string_value(json_object_get(si, "state"));
		const char *e = json_string_value(json_object_get(si, "error"));

		json_int_t id = json_integer_value(json_object_get(resp, "job_id"));
		json_t *arr = json_object_get(resp, "array"), *end = json_object_get(resp, "end");
		json_int_t runs = json_integer_value(json_object_get(resp, "runs_requeued"));
		const char *last = json_string_value(json_object_get(resp, "last_requeued_run"));

		const char *sluid = json_string_value(json_object_get(resp, "sluid"));

		printf("job %" JSON_INTEGER_FORMAT ": stage-in %s%s%s\n", id, st ? st : "unknown",
		       e && *e ? ": " : "", e && *e ? e : "");
		if (sluid)
			printf("job %" JSON_INTEGER_FORMAT ": SLUID %s (the run whose end was "
			       "recorded)\n", id, sluid);
		if (json_is_object(json_object_get(resp, "after"))) {
			json_t *af = json_object_get(resp, "after");
			const char *as = json_string_value(json_object_get(af, "state"));
			const char *ar = json_string_value(json_object_get(af, "reason"));

			printf("job %" JSON_INTEGER_FORMAT ": after=%s: %s%s%s\n", id,
			       json_string_value(json_object_get(af, "jobs")) ?: "?",
			       as && !strcmp(as, "done") ? "every archive verified" : as ? as : "?",
			       ar && *ar ? ": " : "", ar && *ar ? ar : "");
		}
		if (json_is_object(arr))
			printf("job %" JSON_INTEGER_FORMAT ": task %" JSON_INTEGER_FORMAT "_%"
			       JSON_INTEGER_FORMAT " of an array\n", id,
			       json_integer_value(json_object_get(arr, "job_id")),
			       json_integer_value(json_object_get(arr, "task_id")));
		if (runs > 0)
			printf("job %" JSON_INTEGER_FORMAT ": requeued %" JSON_INTEGER_FORMAT
			       " time%s (last: %s); only the final run is archived\n", id, runs,
			       runs == 1 ? "" : "s", last ? last : "?");
		if (json_is_object(end))
			printf("job %" JSON_INTEGER_FORMAT ": ended %s (exit %" JSON_INTEGER_FORMAT
			       ")\n", id, json_string_value(json_object_get(end, "state")) ?
			       json_string_value(json_object_get(end, "state")) : "?",
			       json_integer_value(json_object_get(end, "exit_code")));
	}
	reqs = _requests_of(resp, &single);
	progress_print_table(stdout, reqs, 0);
	json_decref(single);
	if (is_job) {
		const char *refused = json_string_value(json_object_get(resp, "refused"));
		json_t *sk = json_object_get(resp, "skipped"), *n;
		size_t i;

		if (refused)
			printf("refused at job start: %s\n", refused);
		json_array_foreach(sk, i, n)
			printf("skipped: line %" JSON_INTEGER_FORMAT " %s=%s: %s\n",
			       json_integer_value(json_object_get(n, "line")),
			       json_string_value(json_object_get(n, "action")) ?: "?",
			       json_string_value(json_object_get(n, "path")) ?: "?",
			       json_string_value(json_object_get(n, "reason")) ?: "?");
		_print_inputs(reqs);
	}
	_print_items(resp);
	return EXIT_OK;
}

/* What 'stagehand status' was asked (_status_args). */
struct _status_opts {
	struct status_list sl;       /* the list's filters (no id) */
	int watch, json_out, items, is_job, days_given, has_id;
	double interval;
	char path[160];              /* what to GET: the request, the job, or the list */
};

/* One option of status into *o: -1 go on, else the exit code (its message shown). */
static int _status_option(int c, struct _status_opts *o)
{
	char *end;

	switch (c) {
	case 'w': o->watch = 1; break;
	case 'I': o->items = 1; break;
	case 'J': o->json_out = 1; break;
	case 'a': o->sl.all_states = 1; break;
	case 'u': o->sl.user = optarg; break;
	case 'd':
		o->sl.days = (int)strtol(optarg, &end, 10);
		if (*end || end == optarg || o->sl.days < 1 || o->sl.days > 3650) {
			client_errx("status: --days wants a number of days from 1 to 3650, "
				    "got '%s'", optarg);
			return EXIT_ENV;
		}
		o->days_given = 1;
		break;
	case 'n':
		if (_interval_arg("status", optarg, &o->interval) < 0)
			return EXIT_ENV;
		break;
	case 'h': _status_usage(stdout); return EXIT_OK;
	default: _status_usage(stderr); return EXIT_ENV;
	}
	return -1;
}

/* The id operand (a request or a job) into o->path: -1 go on, else the exit code. */
static int _status_id(const char *arg, struct _status_opts *o)
{
	unsigned long long id;

	switch (client_parse_id(arg, &id)) {
	case ID_REQUEST:
		client_path_fmt(o->path, sizeof(o->path), "/v1/requests/%llu%s", id,
				o->items && !o->watch ? "?items=1" : "");
		return -1;
	case ID_JOB:
		client_path_fmt(o->path, sizeof(o->path), "/v1/jobs/%llu", id);
		o->is_job = 1;
		return -1;
	default:
		_bad_id("status", arg);
		return EXIT_ENV;
	}
}

/* The command line into *o: -1 go on, else the exit code (help or an error shown). */
static int _status_args(int argc, char **argv, struct _status_opts *o)
{
	static const struct option lo[] = {
		{ "watch", no_argument, NULL, 'w' },
		{ "items", no_argument, NULL, 'I' },
		{ "interval", required_argument, NULL, 'n' },
		{ "json", no_argument, NULL, 'J' },
		{ "days", required_argument, NULL, 'd' },
		{ "all", no_argument, NULL, 'a' },
		{ "user", required_argument, NULL, 'u' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	int c, rc;

	*o = (struct _status_opts){ .sl = { 7, 0, NULL, 0 }, .interval = 1.0,
				    .path = "/v1/requests" };
	client_foreach_opt(c, argc, argv, "hw", lo) {
		if (c == '?')
			return EXIT_ENV;
		if ((rc = _status_option(c, o)) >= 0)
			return rc;
	}
	o->has_id = argc - optind == 1;
	if (argc - optind > 1) {
		_status_usage(stderr);
		return EXIT_ENV;
	}
	if (o->has_id && (o->days_given || o->sl.all_states || o->sl.user)) {
		client_errx("status: --days, --all and --user list requests; give them without an id");
		return EXIT_ENV;
	}
	if (o->days_given && o->sl.all_states) {
		client_errx("status: --all lists every request, of any age: give --days or --all");
		return EXIT_ENV;
	}
	if (o->has_id && (rc = _status_id(argv[optind], o)) >= 0)
		return rc;
	if (o->items && (!o->has_id || o->is_job)) {
		client_errx("status: --items needs one request id, e.g. 'stagehand status r12 --items'");
		return EXIT_ENV;
	}
	return -1;
}

/* One answer shown (a request, a job, or the list), with the yield and drain lines. */
static int _status_show(struct http *h, const struct _status_opts *o, json_t *health)
{
	json_t *resp = NULL;
	int rc = client_call(h, "GET", o->path, NULL, &resp, NULL);

	if (rc == EXIT_OK) {
		if (o->json_out)
			_print_json(resp);
		else if (!o->has_id)
			status_list_print(resp, &o->sl);
		else
			rc = _print_status(resp, o->is_job);
	}
	json_decref(resp);
	if (rc == EXIT_OK && !o->json_out && health) {
		/* How fast after-job ones may go now, and whether anything moves at all. */
		client_print_yield(health);
		client_print_drain(stdout, json_object_get(health, "drain"));
	}
	return rc;
}

int cmd_status(int argc, char **argv)
{
	struct _status_opts o;
	struct http *h;
	json_t *health = NULL;
	int rc = _status_args(argc, argv, &o);

	if (rc >= 0)
		return rc;
	if (!(h = client_open()))
		return EXIT_ENV;
	if (!o.has_id) {
		/* The list: whether the caller is an admin is the daemon's word. */
		rc = client_call(h, "GET", "/v1/health", NULL, &health, NULL);
		o.sl.admin = json_is_true(json_object_get(health, "admin"));
		if (rc != EXIT_OK || status_list_path(o.path, sizeof(o.path), &o.sl) < 0) {
			json_decref(health);
			http_close(h);
			return rc != EXIT_OK ? rc : EXIT_ENV;
		}
	}
	if (o.watch)
		rc = _watch(h, o.path, o.interval, o.json_out);
	else
		rc = _status_show(h, &o, health);
	json_decref(health);
	http_close(h);
	return rc;
}

/* ---- queue ------------------------------------------------------------- */

static const char *const _states[] = {
	"queued", "running", "verifying", "done", "failed_retryable", "failed_final", "cancelled",
};

int cmd_queue(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "state", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'J' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *state = NULL;
	int c, json_out = 0, rc;
	char path[128];
	struct http *h;
	json_t *resp;
	size_t i;

	client_foreach_opt(c, argc, argv, "h", lo) {
		if (c == '?')
			return EXIT_ENV;
		switch (c) {
		case 's':
			state = optarg;
			break;
		case 'J': json_out = 1; break;
		case 'h':
			printf("usage: stagehand queue [--state STATE] [--json]\n"
			       "List every user's requests (admins). STATE is one of queued, running,\n"
			       "verifying, done, failed_retryable, failed_final, cancelled.\n" COMMON_HELP);
			return EXIT_OK;
		default:
			fprintf(stderr, "usage: stagehand queue [--state STATE] [--json]\n");
			return EXIT_ENV;
		}
	}
	if (optind != argc) {
		client_errx("queue: unexpected argument '%s'", argv[optind]);
		return EXIT_ENV;
	}
	if (state) {
		for (i = 0; i < sizeof(_states) / sizeof(_states[0]); i++)
			if (!strcmp(state, _states[i]))
				break;
		if (i == sizeof(_states) / sizeof(_states[0])) {
			client_errx("queue: unknown state '%s'; use one of queued, running, verifying, done, "
			      "failed_retryable, failed_final, cancelled", state);
			return EXIT_ENV;
		}
	}
	if (snprintf(path, sizeof(path), "/v1/requests?all=1%s%s", state ? "&state=" : "",
		     state ? state : "") >= (int)sizeof(path))
		return EXIT_ENV;	/* cannot happen: state is one of _states */
	if (!(h = client_open()))
		return EXIT_ENV;
	rc = client_call(h, "GET", path, NULL, &resp, NULL);
	if (rc == EXIT_OK) {
		if (json_out)
			_print_json(resp);
		else
			progress_print_table(stdout, json_object_get(resp, "requests"), 1);
	}
	json_decref(resp);
	http_close(h);
	return rc;
}

/* ---- cancel, retry ----------------------------------------------------- */

/* POST /v1/requests/{id}/{verb}; prints "VERBED rN (state)". */
static int _request_verb(struct http *h, unsigned long long id, const char *verb, const char *done)
{
	char path[96];
	json_t *resp;
	int rc;

	if (snprintf(path, sizeof(path), "/v1/requests/%llu/%s", id, verb) >= (int)sizeof(path))
		return EXIT_ENV;
	rc = client_call(h, "POST", path, NULL, &resp, NULL);
	if (rc == EXIT_OK)
		printf("%s r%llu (%s)\n", done, id,
		       json_string_value(json_object_get(resp, "state")) ?: "?");
	json_decref(resp);
	return rc;
}

static int _verb_main(const char *cmd, int argc, char **argv)
{
	static const struct option lo[] = { COMMON_LONGOPTS, { NULL, 0, NULL, 0 } };
	int c, rc = EXIT_OK, is_cancel = !strcmp(cmd, "cancel");
	unsigned long long id;
	enum id_kind kind;
	struct http *h;

	client_foreach_opt(c, argc, argv, "h", lo) {
		if (c == '?')
			return EXIT_ENV;
		if (c == 'h') {
			if (is_cancel)
				printf("usage: stagehand cancel rREQ|JOB\n"
				       "Cancel one request (r12), or every unfinished request of Slurm job JOB.\n"
				       COMMON_HELP);
			else
				printf("usage: stagehand retry rREQ|JOB\n"
				       "Re-queue a failed request (r12), or every failed request of Slurm job JOB.\n"
				       COMMON_HELP);
			return EXIT_OK;
		}
		fprintf(stderr, "usage: stagehand %s rREQ|JOB\n", cmd);
		return EXIT_ENV;
	}
	if (argc - optind != 1) {
		fprintf(stderr, "usage: stagehand %s rREQ|JOB\n", cmd);
		return EXIT_ENV;
	}
	kind = client_parse_id(argv[optind], &id);
	if (kind == ID_BAD) {
		_bad_id(cmd, argv[optind]);
		return EXIT_ENV;
	}
	if (!(h = client_open()))
		return EXIT_ENV;
	if (kind == ID_REQUEST) {
		rc = _request_verb(h, id, cmd, is_cancel ? "cancelled" : "re-queued");
	} else if (!is_cancel) {
		char path[64];
		json_t *resp;

		client_path_fmt(path, sizeof(path), "/v1/jobs/%llu/retry", id);
		rc = client_call(h, "POST", path, NULL, &resp, NULL);
		if (rc == EXIT_OK) {
			json_t *ids = json_object_get(resp, "requeued"), *v;
			size_t i;

			if (json_array_size(ids) == 0) {
				printf("job %llu has no failed requests to retry\n", id);
			} else {
				printf("re-queued %zu request(s) of job %llu:", json_array_size(ids), id);
				json_array_foreach(ids, i, v)
					printf(" r%" JSON_INTEGER_FORMAT, json_integer_value(v));
				printf("\n");
			}
		}
		json_decref(resp);
	} else {
		/* The API cancels requests; a job's are the unfinished ones listed for it. */
		char path[64];
		json_t *resp, *single, *reqs, *r;
		size_t i, n = 0;

		client_path_fmt(path, sizeof(path), "/v1/jobs/%llu", id);
		rc = client_call(h, "GET", path, NULL, &resp, NULL);
		if (rc == EXIT_OK) {
			reqs = _requests_of(resp, &single);
			json_array_foreach(reqs, i, r) {
				const char *st = json_string_value(json_object_get(r, "state"));
				int one;

				if (progress_state_terminal(st))
					continue;
				one = _request_verb(h, (unsigned long long)json_integer_value(
							    json_object_get(r, "id")), "cancel", "cancelled");
				if (one != EXIT_OK && rc == EXIT_OK)
					rc = one;
				n++;
			}
			if (n == 0)
				printf("job %llu has no unfinished requests\n", id);
			json_decref(single);
		}
		json_decref(resp);
	}
	http_close(h);
	return rc;
}

int cmd_cancel(int argc, char **argv)
{
	return _verb_main("cancel", argc, argv);
}

int cmd_retry(int argc, char **argv)
{
	return _verb_main("retry", argc, argv);
}

/* ---- health ------------------------------------------------------------ */

void client_print_yield(const json_t *health)
{
	const json_t *y = json_object_get(health, "yield"), *pc = json_object_get(y, "pace");
	const char *mode = json_string_value(json_object_get(y, "mode"));

	if (!json_is_object(y) || !mode)
		return;
	printf("after-job transfers: YieldMode=%s, %" JSON_INTEGER_FORMAT " held back, %"
	       JSON_INTEGER_FORMAT " file systems with running jobs\n", mode,
	       json_integer_value(json_object_get(y, "active")),
	       json_integer_value(json_object_get(y, "busy_filesystems")));
	if (json_is_object(pc) && !strcmp(mode, "adaptive"))
		printf("scavenger: %" JSON_INTEGER_FORMAT " file systems paced (%" JSON_INTEGER_FORMAT
		       " held), rate %.1f MiB/s, idle bandwidth %.1f of %.1f MiB/s, %"
		       JSON_INTEGER_FORMAT " backoffs\n",
		       json_integer_value(json_object_get(pc, "filesystems")),
		       json_integer_value(json_object_get(pc, "held")),
		       json_number_value(json_object_get(pc, "rate")) / 1048576.0,
		       json_number_value(json_object_get(pc, "idle_bandwidth")) / 1048576.0,
		       json_number_value(json_object_get(pc, "capacity")) / 1048576.0,
		       json_integer_value(json_object_get(pc, "backoffs")));
}

static void _health_usage(FILE *fp)
{
	fprintf(fp, "usage: stagehand health [--json]\n"
		"Ask stagehandd whether it is up; exit 0 if it says ok.\n" COMMON_HELP);
}

int cmd_health(int argc, char **argv)
{
	int json_out = 0, rc;
	struct http *h;
	json_t *resp;

	if ((rc = client_json_opts(argc, argv, _health_usage, &json_out)) >= 0)
		return rc;
	if (!(h = client_open()))
		return EXIT_ENV;
	rc = client_call(h, "GET", "/v1/health", NULL, &resp, NULL);
	if (rc == EXIT_OK) {
		const char *st = json_string_value(json_object_get(resp, "status"));
		json_t *q = json_object_get(resp, "queue"), *v;
		const char *k;

		if (json_out) {
			_print_json(resp);
		} else {
			printf("stagehandd %s at %s: %s\n",
			       json_string_value(json_object_get(resp, "version")) ?: "(unknown version)",
			       http_target(h), st ? st : "(no status)");
			if (json_is_object(q)) {
				printf("queue:");
				json_object_foreach(q, k, v)
					if (json_is_integer(v))
						printf(" %s=%" JSON_INTEGER_FORMAT, k, json_integer_value(v));
				printf("\n");
			}
			client_print_yield(resp);
			client_print_drain(stdout, json_object_get(resp, "drain"));
		}
		if (!st || strcmp(st, "ok"))
			rc = EXIT_REFUSED;
	}
	json_decref(resp);
	http_close(h);
	return rc;
}
