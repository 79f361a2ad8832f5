/*
 * tags.c - `stagehand tags [--verify] PATH...`: the stagehand labels of a
 * tree, and, with --verify, the daemon's judgement of each one
 * (POST /v1/labels/verify). The CLI only reads labels; the daemon, which
 * holds the plans, requests and audit trail, decides whether a record
 * explains them.
 */
#include "config.h"

#include <getopt.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "grow.h"
#include "labels.h"

#define BATCH_LABELS 200          /* labels per verify request */
#define BATCH_BYTES (40 * 1024)   /* and at most this much JSON (MaxRequestBytes is 64 KiB) */

struct _entry {
	char *path;
	struct label l;
	long long uid;               /* owner of the directory (lstat) */
	int is_dir;
	/* --verify */
	int verified, ok;
	char *code, *reason;
	long long request;
};

struct _tags {
	const char *ns;
	struct _entry *e;
	size_t n, cap;
	int errors;
	int json;
};

static void _usage(FILE *fp)
{
	fprintf(fp,
		"usage: stagehand tags [--verify] [--json] [--namespace user.|trusted.]\n"
		"                      [--stale-after SECONDS] PATH...\n"
		"\n"
		"Show the stagehand labels (<ns>stagehand.policy, .job, .owner, .location) of every\n"
		"file and directory under each PATH. Symbolic links are never followed.\n"
		"\n"
		"  --verify            ask stagehandd whether its records explain each label; exit 1\n"
		"                      if any label is forged, stale or unexplained\n"
		"  --json              one JSON document instead of a table\n"
		"  --namespace NS      user. or trusted. (default: XattrNamespace of stagehand.conf)\n"
		"  --stale-after SECS  a pending label on a job that ended this long ago with no\n"
		"                      archive request is stale (default 86400)\n"
		"daemon selection (for --verify):\n"
		"  --socket PATH, --server HOST:PORT, --config FILE  as for 'stagehand status'\n"
		"\n"
		"Exit: 0 no problem, 1 problems found, 2 usage error, unreadable path or no daemon.\n");
}

static int _collect(const char *path, const struct stat *st, int depth, const char *err,
		    void *arg)
{
	struct _tags *t = arg;
	struct _entry *e;
	struct label l;
	char e2[1024];
	int rc;

	(void)depth;
	if (!st) {
		client_errx("%s", err);
		t->errors++;
		return 0;
	}
	if (S_ISLNK(st->st_mode))
		return 0;
	rc = labels_read(path, t->ns, &l, e2, sizeof(e2));
	if (rc < 0) {
		client_errx("%s", e2);
		t->errors++;
		return 0;
	}
	if (rc == 0)
		return 0;
	if (grow_array((void **)&t->e, &t->cap, t->n + 1, sizeof(*t->e), 64) < 0) {
		client_errx("out of memory after %zu labels", t->n);
		return -1;
	}
	e = &t->e[t->n];
	memset(e, 0, sizeof(*e));
	e->path = strdup(path);
	if (!e->path) {
		client_errx("out of memory");
		return -1;
	}
	e->l = l;
	e->uid = (long long)st->st_uid;
	e->is_dir = S_ISDIR(st->st_mode);
	t->n++;
	return 0;
}

static json_t *_label_json(const struct _entry *e)
{
	return json_pack("{s:o,s:o,s:o,s:o,s:o}",
			 "path", labels_jstr(e->path),
			 "policy", e->l.policy[0] ? labels_jstr(e->l.policy) : json_null(),
			 "job", e->l.job[0] ? labels_jstr(e->l.job) : json_null(),
			 "owner", e->l.owner[0] ? labels_jstr(e->l.owner) : json_null(),
			 "location", e->l.location[0] ? labels_jstr(e->l.location) : json_null());
}

static void _set_result(struct _entry *e, int ok, const char *code, const char *reason,
			long long request)
{
	e->verified = 1;
	e->ok = ok;
	free(e->code);
	free(e->reason);
	e->code = strdup(code ? code : "?");
	e->reason = strdup(reason ? reason : "");
	e->request = request;
}

/* Send entries [from, to) that have a JSON-able path. Returns 0, or an exit code. */
static int _verify_batch(struct http *h, struct _tags *t, size_t *idx, size_t nidx,
			 long stale_after)
{
	json_t *body = json_object(), *arr = json_array(), *resp = NULL, *res;
	char err[1024], *raw = NULL;
	long status = 0;
	size_t i;
	struct http_reply hr;

	for (i = 0; i < nidx; i++)
		json_array_append_new(arr, _label_json(&t->e[idx[i]]));
	json_object_set_new(body, "labels", arr);
	if (stale_after >= 0)
		json_object_set_new(body, "stale_after", json_integer(stale_after));
	if (http_call(h, "POST", "/v1/labels/verify", body, &hr, err, sizeof(err)) < 0) {
		json_decref(body);
		client_errx("%s", err);
		return 2;
	}
	status = hr.status;
	resp = hr.json;
	raw = hr.raw;
	json_decref(body);
	if (status != 200) {
		const char *m = json_string_value(json_object_get(resp, "error"));

		if (status == 404)
			client_errx("stagehandd at %s does not know label verification (HTTP 404): "
				    "it is older than this stagehand; upgrade it", http_target(h));
		else
			client_errx("stagehandd at %s answered HTTP %ld: %s", http_target(h), status,
				    m ? m : raw ? raw : "");
		free(raw);
		json_decref(resp);
		return 2;
	}
	free(raw);
	{
		const char *dns = json_string_value(json_object_get(resp, "namespace"));
		static int warned;

		if (dns && strcmp(dns, t->ns) != 0 && !warned) {
			warned = 1;
			fprintf(stderr, "stagehand: note: these are %s labels but stagehandd writes "
				"%s ones (XattrNamespace): a pending or exempt label here is one the "
				"daemon never updates\n", t->ns, dns);
		}
	}
	res = json_object_get(resp, "results");
	if (!json_is_array(res) || json_array_size(res) != nidx) {
		client_errx("stagehandd at %s answered with %zu results for %zu labels",
			    http_target(h), json_array_size(res), nidx);
		json_decref(resp);
		return 2;
	}
	for (i = 0; i < nidx; i++) {
		json_t *r = json_array_get(res, i);
		json_t *rq = json_object_get(r, "request");

		_set_result(&t->e[idx[i]], json_is_true(json_object_get(r, "ok")),
			    json_string_value(json_object_get(r, "code")),
			    json_string_value(json_object_get(r, "reason")),
			    json_is_integer(rq) ? (long long)json_integer_value(rq) : 0);
	}
	json_decref(resp);
	return 0;
}

static int _verify(struct _tags *t, long stale_after)
{
	struct http *h = labels_connect();
	size_t *idx, nidx = 0, bytes = 0;
	int rc = 0;

	if (!h)
		return 2;
	idx = calloc(BATCH_LABELS, sizeof(*idx));
	if (!idx) {
		http_close(h);
		client_errx("out of memory");
		return 2;
	}
	for (size_t i = 0; i < t->n && rc == 0; i++) {
		struct _entry *e = &t->e[i];
		json_t *probe = json_string(e->path);

		if (!probe) {
			_set_result(e, 0, "bad_input", "the path is not valid UTF-8: stagehandd "
				    "cannot have recorded it; the label was set by hand", 0);
			continue;
		}
		json_decref(probe);
		idx[nidx++] = i;
		bytes += strlen(e->path) + strlen(e->l.location) + 160;
		if (nidx == BATCH_LABELS || bytes >= BATCH_BYTES) {
			rc = _verify_batch(h, t, idx, nidx, stale_after);
			nidx = 0;
			bytes = 0;
		}
	}
	if (rc == 0 && nidx)
		rc = _verify_batch(h, t, idx, nidx, stale_after);
	free(idx);
	http_close(h);
	return rc;
}

static void _print_table(const struct _tags *t, int verify)
{
	size_t i;

	if (t->n == 0) {
		printf("no %sstagehand.* labels found\n", t->ns);
		return;
	}
	printf("%-9s %-10s %-7s %s%s\n", "POLICY", "JOB", "OWNER", verify ? "VERDICT           " : "",
	       "PATH");
	for (i = 0; i < t->n; i++) {
		const struct _entry *e = &t->e[i];

		if (!e->l.policy[0] || labels_policy_known(e->l.policy)) {
			printf("%-9s ", e->l.policy[0] ? e->l.policy : "-");
		} else {
			labels_print_safe(stdout, e->l.policy);
			fputc(' ', stdout);
		}
		printf("%-10s %-7s ", e->l.job[0] ? e->l.job : "-", e->l.owner[0] ? e->l.owner : "-");
		if (verify)
			printf("%-17s ", e->verified ? (e->ok ? "ok" : e->code) : "?");
		labels_print_safe(stdout, e->path);
		if (e->l.location[0]) {
			fputs(" -> ", stdout);
			labels_print_safe(stdout, e->l.location);
		}
		fputc('\n', stdout);
		if (verify && e->verified && !e->ok) {
			fputs("    ", stdout);
			labels_print_safe(stdout, e->reason);
			fputc('\n', stdout);
		}
	}
}

static void _print_json(const struct _tags *t, int verify, int problems)
{
	json_t *arr = json_array(), *doc;

	for (size_t i = 0; i < t->n; i++) {
		const struct _entry *e = &t->e[i];
		json_t *o = _label_json(e);

		json_object_set_new(o, "path", labels_jstr(e->path));
		json_object_set_new(o, "uid", json_integer(e->uid));
		json_object_set_new(o, "type", json_string(e->is_dir ? "directory" : "file"));
		if (verify && e->verified)
			json_object_set_new(o, "verify", json_pack("{s:b,s:s,s:o,s:o}",
				"ok", e->ok, "code", e->code, "reason", labels_jstr(e->reason),
				"request", e->request ? json_integer(e->request) : json_null()));
		json_array_append_new(arr, o);
	}
	doc = json_pack("{s:s,s:o,s:i}", "namespace", t->ns, "labels", arr, "errors", t->errors);
	if (verify)
		json_object_set_new(doc, "problems", json_integer(problems));
	labels_put_json(doc);
}

static int _by_path(const void *a, const void *b)
{
	return strcmp(((const struct _entry *)a)->path, ((const struct _entry *)b)->path);
}

int cmd_tags(int argc, char **argv)
{
	enum { O_JSON = 1, O_VERIFY, O_NS, O_STALE, O_SOCKET, O_SERVER, O_CONFIG };
	static const struct option lo[] = {
		{ "json", no_argument, NULL, O_JSON },
		{ "verify", no_argument, NULL, O_VERIFY },
		{ "namespace", required_argument, NULL, O_NS },
		{ "stale-after", required_argument, NULL, O_STALE },
		{ "socket", required_argument, NULL, O_SOCKET },
		{ "server", required_argument, NULL, O_SERVER },
		{ "config", required_argument, NULL, O_CONFIG },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct _tags t = { 0 };
	const char *ns_opt = NULL;
	char ns[16], root[PATH_MAX], err[PATH_MAX + 256];
	long stale_after = -1;
	int c, verify = 0, problems = 0, rc = 0;

	optind = 1;
	opterr = 0;
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case O_JSON: t.json = 1; break;
		case O_VERIFY: verify = 1; break;
		case O_NS: ns_opt = optarg; break;
		case O_STALE: {
			char *end;

			stale_after = strtol(optarg, &end, 10);
			if (*optarg < '0' || *optarg > '9' || *end || stale_after < 0) {
				client_errx("tags: --stale-after %s: give a number of seconds", optarg);
				return 2;
			}
			break;
		}
		case O_SOCKET: client_opt_socket = optarg; client_opt_server = NULL; break;
		case O_SERVER: client_opt_server = optarg; client_opt_socket = NULL; break;
		case O_CONFIG: client_opt_config = optarg; break;
		case 'h': _usage(stdout); return 0;
		default:
			client_errx("tags: bad option '%s': unknown, or missing its value (see "
				    "'stagehand tags --help')", argv[optind - 1]);
			return 2;
		}
	}
	if (optind >= argc) {
		client_errx("tags: give at least one PATH");
		_usage(stderr);
		return 2;
	}
	if (labels_namespace(ns_opt, ns, sizeof(ns)) < 0)
		return 2;
	t.ns = ns;
	for (int i = optind; i < argc; i++) {
		if (labels_root(argv[i], root, sizeof(root), err, sizeof(err)) < 0) {
			client_errx("tags: %s", err);
			t.errors++;
			continue;
		}
		if (labels_walk(root, 0, _collect, &t) < 0) {
			rc = 2;
			goto out;
		}
	}
	qsort(t.e, t.n, sizeof(*t.e), _by_path);
	if (verify && t.n) {
		rc = _verify(&t, stale_after);
		if (rc)
			goto out;
	}
	for (size_t i = 0; i < t.n; i++)
		if (verify && t.e[i].verified && !t.e[i].ok)
			problems++;
	if (t.json) {
		_print_json(&t, verify, problems);
	} else {
		_print_table(&t, verify);
		if (verify)
			printf("%zu label(s) checked, %d problem(s)%s\n", t.n, problems,
			       t.errors ? "; some paths could not be read (see above)" : "");
	}
	rc = problems ? 1 : t.errors ? 2 : 0;
out:
	for (size_t i = 0; i < t.n; i++) {
		free(t.e[i].path);
		free(t.e[i].code);
		free(t.e[i].reason);
	}
	free(t.e);
	return rc;
}
