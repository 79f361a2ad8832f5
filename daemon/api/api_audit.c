/* api_audit.c - see api_audit.h. */
#include "config.h"

#include <errno.h>
#include <pwd.h>
#include <stdlib.h>
#include <string.h>

#include "api_audit.h"
#include "queue_audit.h"
#include "urlredact.h"

#define AUDIT_MAX_ROWS 100000        /* per answer; the CLI says when it was cut */
#define AUDIT_DEFAULT_ROWS 10000

/* A decimal in [lo, hi], the whole string. */
static int _num(const char *s, long long lo, long long hi, long long *out)
{
	char *end;
	long long v;

	if (!s || !*s || *s == '-' || *s == '+')
		return -1;
	errno = 0;
	v = strtoll(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

static int _row(const struct queue_audit_row *r, void *arg)
{
	json_t *rows = arg, *o;

	o = json_pack("{s:I,s:s?,s:I,s:I,s:I,s:I}", "uid", (json_int_t)r->uid, "user", r->user,
		      "files", (json_int_t)r->files, "bytes", (json_int_t)r->bytes, "first",
		      (json_int_t)r->first, "last", (json_int_t)r->last);
	if (!o)
		return 1;
	if (r->src) {	/* per file */
		json_object_set_new(o, "job_id", json_integer(r->job_id));
		json_object_set_new(o, "action", json_string(r->action ? r->action : ""));
		char *src = url_redact_dup(r->src), *dst = url_redact_dup(r->dst ? r->dst : "");

		/* a URL's query may hold a secret (common/urlredact.h) */
		json_object_set_new(o, "source", json_string(src ? src : "(out of memory)"));
		json_object_set_new(o, "dest", json_string(dst ? dst : "(out of memory)"));
		free(src);
		free(dst);
		if (r->checksum)
			json_object_set_new(o, "checksum", json_string(r->checksum));
		json_object_del(o, "first");
		json_object_set_new(o, "ended", json_integer(r->last));
		json_object_del(o, "last");
	} else if (r->action) {	/* per job */
		json_object_set_new(o, "job_id", json_integer(r->job_id));
		json_object_set_new(o, "action", json_string(r->action));
		json_object_set_new(o, "requests", json_integer(r->requests));
	} else {		/* per user */
		json_object_set_new(o, "jobs", json_integer(r->job_id));
		json_object_set_new(o, "requests", json_integer(r->requests));
	}
	/* Paths and names come from users: a non-UTF-8 one yields NULL above. */
	if (r->src && !json_object_get(o, "source"))
		json_object_set_new(o, "source", json_string("(not UTF-8)"));
	return json_array_append_new(rows, o) ? 1 : 0;
}

void api_audit(struct daemon *d, const struct api_caller *who, struct MHD_Connection *c,
	       struct api_reply *out)
{
	const char *job = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "job");
	const char *user = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "user");
	const char *since = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "since");
	const char *by = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "by");
	const char *limit = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "limit");
	struct queue_audit_filter f = { 0, -1, 0, QA_BY_JOB, AUDIT_DEFAULT_ROWS };
	long long v;
	char err[512];
	json_t *rows;
	int n;

	if (job && (_num(job, 1, INT64_MAX, &v) < 0 || !(f.job_id = v))) {
		api_error(out, 400, "job=%.40s: not a job id", job);
		return;
	}
	if (since && _num(since, 0, INT64_MAX, &v) < 0) {
		api_error(out, 400, "since=%.40s: not a time (seconds since the epoch)", since);
		return;
	}
	f.since = since ? v : 0;
	if (limit && _num(limit, 1, AUDIT_MAX_ROWS, &v) < 0) {
		api_error(out, 400, "limit=%.40s: not a number from 1 to %d", limit, AUDIT_MAX_ROWS);
		return;
	}
	f.limit = limit ? v : AUDIT_DEFAULT_ROWS;
	if (!by || !strcmp(by, "job"))
		f.by = QA_BY_JOB;
	else if (!strcmp(by, "user"))
		f.by = QA_BY_USER;
	else if (!strcmp(by, "file"))
		f.by = QA_BY_FILE;
	else {
		api_error(out, 400, "by=%.40s: use job, user or file", by);
		return;
	}
	if (user) {
		struct passwd pw, *pwp = NULL;
		char buf[4096];

		if (_num(user, 0, 4294967294LL, &v) == 0)
			f.uid = v;
		else if (getpwnam_r(user, &pw, buf, sizeof(buf), &pwp) == 0 && pwp)
			f.uid = pwp->pw_uid;
		else {
			api_error(out, 404, "user=%.64s: no such user", user);
			return;
		}
	}
	if (!who->admin) {
		if (f.uid >= 0 && f.uid != (long long)who->uid) {
			api_error(out, 403, "you may see only your own transfers (uid %u); ask an "
				  "admin (AdminUsers/AdminGroups) for other users'", (unsigned)who->uid);
			return;
		}
		f.uid = who->uid;
	}
	rows = json_array();
	if (!rows) {
		api_error(out, 500, "out of memory");
		return;
	}
	n = queue_audit_rows(d->q, &f, _row, rows, err, sizeof(err));
	if (n < 0) {
		json_decref(rows);
		api_error(out, 500, "audit: %s", err);
		return;
	}
	out->status = 200;
	out->body = json_pack("{s:s,s:o,s:b}", "by", f.by == QA_BY_JOB ? "job" :
			      f.by == QA_BY_USER ? "user" : "file", "rows", rows,
			      "truncated", (int64_t)n >= f.limit);
}
