/*
 * audit.c - 'stagehand audit': bytes and files moved per job, per user or
 * per file, from the daemon's audit trail (GET /v1/audit), as a table, CSV
 * or JSON. The daemon decides what the caller may see (their own rows;
 * admins every user's); this command only formats.
 */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_int.h"
#include "commands.h"
#include "conf.h"

static const char _usage_text[] =
	"usage: stagehand audit [--job JOB] [--user USER] [--since WHEN]\n"
	"                       [--by job|user|file] [--format table|csv|json] [--limit N]\n"
	"Bytes and files moved (verified copies) per job, per user or per file, from\n"
	"stagehandd's audit trail. You see your own transfers; admins see everyone's.\n"
	"  --job JOB       one Slurm job\n"
	"  --user USER     one user (name or uid); others than you need admin rights\n"
	"  --since WHEN    copies that ended since WHEN: 2026-11-01, 2026-11-01T08:00\n"
	"                  (UTC), @EPOCH_SECONDS, or a time ago: 90m, 12h, 7d\n"
	"  --by KIND       job (default: per job, user and action), user, or file\n"
	"  --format FMT    table (default), csv or json\n"
	"  --limit N       at most N rows (default 10000)\n" COMMON_HELP;

/* WHEN -> epoch seconds; -1 if it is none of the forms above. */
static long long _since(const char *s)
{
	struct tm tm;
	const char *end;
	long secs;

	if (s[0] == '@') {
		char *e;
		long long v = strtoll(s + 1, &e, 10);

		return (s[1] && !*e && v >= 0) ? v : -1;
	}
	if (strchr(s, '-')) {
		memset(&tm, 0, sizeof(tm));
		end = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
		if (!end || *end) {
			memset(&tm, 0, sizeof(tm));
			end = strptime(s, "%Y-%m-%dT%H:%M", &tm);
		}
		if (!end || *end) {
			memset(&tm, 0, sizeof(tm));
			end = strptime(s, "%Y-%m-%d", &tm);
		}
		return (end && !*end) ? (long long)timegm(&tm) : -1;
	}
	if (conf_parse_seconds(s, &secs) < 0)
		return -1;
	return (long long)time(NULL) - secs;
}

/* Append "&key=value" with value percent-encoded. */
static int _arg(char *buf, size_t len, const char *key, const char *val)
{
	size_t o = strlen(buf);

	if (snprintf(buf + o, len - o, "%s%s=", strchr(buf, '?') ? "&" : "?", key) >=
	    (int)(len - o))
		return -1;
	for (o = strlen(buf); *val; val++) {
		unsigned char ch = (unsigned char)*val;
		int n = isalnum(ch) || ch == '.' || ch == '_' || ch == '-' ?
			snprintf(buf + o, len - o, "%c", ch) :
			snprintf(buf + o, len - o, "%%%02X", ch);

		if (n < 0 || (size_t)n >= len - o)
			return -1;
		o += (size_t)n;
	}
	return 0;
}

static void _time(char *out, size_t len, json_int_t t)
{
	struct tm tm;
	time_t tt = (time_t)t;

	if (!t || !gmtime_r(&tt, &tm) || !strftime(out, len, "%Y-%m-%dT%H:%M:%SZ", &tm))
		snprintf(out, len, "-");
}

/* CSV field: quoted when it holds a comma, quote or line break. */
static void _csv(const char *s, int last)
{
	if (strpbrk(s, ",\"\r\n")) {
		putchar('"');
		for (; *s; s++) {
			if (*s == '"')
				putchar('"');
			putchar(*s);
		}
		putchar('"');
	} else {
		fputs(s, stdout);
	}
	putchar(last ? '\n' : ',');
}

static const char *_s(json_t *o, const char *k)
{
	const char *v = json_string_value(json_object_get(o, k));

	return v ? v : "";
}

static json_int_t _i(json_t *o, const char *k)
{
	return json_integer_value(json_object_get(o, k));
}

static void _print(json_t *resp, const char *by, int csv)
{
	static const char *const cols_job[] = { "job_id", "user", "uid", "action", "requests",
		"files", "bytes", "first", "last", NULL };
	static const char *const cols_user[] = { "user", "uid", "jobs", "requests", "files",
		"bytes", "first", "last", NULL };
	static const char *const cols_file[] = { "job_id", "user", "uid", "action", "source",
		"dest", "bytes", "checksum", "ended", NULL };
	const char *const *cols = !strcmp(by, "user") ? cols_user : !strcmp(by, "file") ?
				  cols_file : cols_job;
	json_t *rows = json_object_get(resp, "rows"), *r;
	size_t i;

	for (int k = 0; cols[k]; k++) {
		if (csv)
			_csv(cols[k], !cols[k + 1]);
		else
			printf("%s%s", cols[k], cols[k + 1] ? "\t" : "\n");
	}
	json_array_foreach(rows, i, r) {
		for (int k = 0; cols[k]; k++) {
			char v[64];
			const char *txt = v;
			json_t *x = json_object_get(r, cols[k]);

			if (json_is_string(x))
				txt = _s(r, cols[k]);
			else if (!strcmp(cols[k], "first") || !strcmp(cols[k], "last") ||
				 !strcmp(cols[k], "ended"))
				_time(v, sizeof(v), _i(r, cols[k]));
			else if (x)
				snprintf(v, sizeof(v), "%" JSON_INTEGER_FORMAT, _i(r, cols[k]));
			else
				txt = "";
			if (csv)
				_csv(txt, !cols[k + 1]);
			else
				printf("%s%s", txt, cols[k + 1] ? "\t" : "\n");
		}
	}
	if (json_is_true(json_object_get(resp, "truncated")))
		fprintf(stderr, "stagehand audit: more rows than --limit; narrow with --job, "
			"--user or --since, or raise --limit\n");
}

int cmd_audit(int argc, char **argv)
{
	static const struct option lo[] = {
		{ "job", required_argument, NULL, 'j' },
		{ "user", required_argument, NULL, 'u' },
		{ "since", required_argument, NULL, 's' },
		{ "by", required_argument, NULL, 'b' },
		{ "format", required_argument, NULL, 'f' },
		{ "limit", required_argument, NULL, 'l' },
		COMMON_LONGOPTS,
		{ NULL, 0, NULL, 0 }
	};
	const char *job = NULL, *user = NULL, *by = "job", *fmt = "table", *limit = NULL;
	char path[1024] = "/v1/audit", num[32];
	long long since = -1;
	struct http *h;
	json_t *resp = NULL;
	int c, rc;

	client_foreach_opt(c, argc, argv, "h", lo) {
		switch (c) {
		case 'j': job = optarg; break;
		case 'u': user = optarg; break;
		case 'b': by = optarg; break;
		case 'f': fmt = optarg; break;
		case 'l': limit = optarg; break;
		case 's':
			since = _since(optarg);
			if (since < 0) {
				client_errx("--since %s: use a date (2026-11-01, 2026-11-01T08:00), "
					    "@EPOCH_SECONDS or a time ago (90m, 12h, 7d)", optarg);
				return EXIT_ENV;
			}
			break;
		case 'h': fputs(_usage_text, stdout); return EXIT_OK;
		case '?': return EXIT_ENV;
		default: fputs(_usage_text, stderr); return EXIT_ENV;
		}
	}
	if (optind < argc) {
		client_errx("audit: unexpected argument '%s' (see --help)", argv[optind]);
		return EXIT_ENV;
	}
	if (strcmp(by, "job") && strcmp(by, "user") && strcmp(by, "file")) {
		client_errx("audit: --by %s: use job, user or file", by);
		return EXIT_ENV;
	}
	if (strcmp(fmt, "table") && strcmp(fmt, "csv") && strcmp(fmt, "json")) {
		client_errx("audit: --format %s: use table, csv or json", fmt);
		return EXIT_ENV;
	}
	snprintf(num, sizeof(num), "%lld", since);
	if ((job && _arg(path, sizeof(path), "job", job) < 0) ||
	    (user && _arg(path, sizeof(path), "user", user) < 0) ||
	    (since >= 0 && _arg(path, sizeof(path), "since", num) < 0) ||
	    (limit && _arg(path, sizeof(path), "limit", limit) < 0) ||
	    _arg(path, sizeof(path), "by", by) < 0) {
		client_errx("audit: arguments too long");
		return EXIT_ENV;
	}
	if (!(h = client_open()))
		return EXIT_ENV;
	rc = client_call(h, "GET", path, NULL, &resp, NULL);
	http_close(h);
	if (rc != EXIT_OK)
		return rc;
	if (!strcmp(fmt, "json")) {
		char *s = json_dumps(resp, JSON_INDENT(2));

		if (s)
			printf("%s\n", s);
		free(s);
	} else {
		_print(resp, by, !strcmp(fmt, "csv"));
	}
	json_decref(resp);
	return fflush(stdout) == 0 ? EXIT_OK : EXIT_ENV;
}
