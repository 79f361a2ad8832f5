/* lifecycle.c - see lifecycle.h. */
#include "config.h"

#include <ctype.h>
#include <jansson.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "dsl.h"
#include "lifecycle.h"
#include "slurm_watch.h"
#include "yield.h"
#include "log.h"
#include "queue.h"

#define PATH_LIMIT 4095

void daemon_wake(struct daemon *d)
{
	uint64_t one = 1;

	if (d->wake_fd >= 0 && write(d->wake_fd, &one, sizeof(one)) < 0) {
		/* Full counter: the loop is awake anyway. */
	}
}

static int _bad_path(const char *p, const char *field, int allow_null, char *err, size_t errlen)
{
	size_t n;

	if (!p) {
		if (allow_null)
			return 0;
		snprintf(err, errlen, "'%s' is required (an absolute path)", field);
		return -1;
	}
	n = strlen(p);
	if (strstr(p, "://")) {
		snprintf(err, errlen, "'%s': no backend for URLs in this build: give an absolute "
			 "path", field);
		return -1;
	}
	if (p[0] != '/') {
		snprintf(err, errlen, "'%s' must be an absolute path, not '%.200s'", field, p);
		return -1;
	}
	if (n > PATH_LIMIT) {
		snprintf(err, errlen, "'%s' is %zu bytes; the limit is %d", field, n, PATH_LIMIT);
		return -1;
	}
	for (const char *c = p; *c; c++) {
		if ((unsigned char)*c < 0x20 || *c == 0x7f) {
			snprintf(err, errlen, "'%s' contains a control character", field);
			return -1;
		}
		if (c[0] == '.' && c[1] == '.' && c[-1] == '/' && (c[2] == '/' || c[2] == '\0')) {
			snprintf(err, errlen, "'%s': '..' is not allowed in paths: '%.200s'", field, p);
			return -1;
		}
	}
	return 0;
}

static int _under(const char *p, const char *root)
{
	size_t n = strlen(root);

	if (strcmp(root, "/") == 0)
		return 1;
	return strncmp(p, root, n) == 0 && (p[n] == '/' || p[n] == '\0');
}

static int _check_roots(const char *p, char *const *roots, const char *field, const char *key,
			char *err, size_t errlen)
{
	char list[1024] = "";
	size_t used = 0;

	if (!roots || !roots[0])
		return 0;
	for (char *const *r = roots; *r; r++) {
		int k;

		if (_under(p, *r))
			return 0;
		k = snprintf(list + used, sizeof(list) - used, "%s%s", used ? ", " : "", *r);
		if (k > 0 && (size_t)k < sizeof(list) - used)
			used += (size_t)k;
	}
	snprintf(err, errlen, "'%s' %.300s is outside the allowed %s (%s)", field, p, key, list);
	return -1;
}

int lifecycle_check_request(struct daemon *d, const struct lifecycle_request *lr,
			    char *err, size_t errlen)
{
	const struct conf *c = d->conf;
	int is_label;

	if (!lr->action || (strcmp(lr->action, "stage_in") && strcmp(lr->action, "stage_out") &&
			    strcmp(lr->action, "archive") && strcmp(lr->action, "label"))) {
		snprintf(err, errlen, "'action' must be stage_in, stage_out, archive or label");
		return -1;
	}
	if (lr->uid == 0) {
		snprintf(err, errlen, "transfers run as the data's owner and never as root: "
			 "submit the request as that user");
		return -1;
	}
	is_label = strcmp(lr->action, "label") == 0;
	if (_bad_path(lr->source, "source", 0, err, errlen) < 0 ||
	    _bad_path(lr->dest, "dest", is_label, err, errlen) < 0)
		return -1;
	if (!is_label && !lr->dest) {
		snprintf(err, errlen, "'dest' is required for %s", lr->action);
		return -1;
	}
	if (is_label && lr->dest) {
		snprintf(err, errlen, "'dest' is not used by label: leave it out");
		return -1;
	}
	if (lr->dest && strcmp(lr->source, lr->dest) == 0) {
		snprintf(err, errlen, "'source' and 'dest' are the same path");
		return -1;
	}
	if (strcmp(lr->action, "stage_in") == 0 &&
	    (_check_roots(lr->source, c->stage_in_roots, "source", "StageInRoots", err, errlen) < 0 ||
	     _check_roots(lr->dest, c->scratch_roots, "dest", "ScratchRoots", err, errlen) < 0))
		return -1;
	if (strcmp(lr->action, "archive") == 0 && c->archive_root) {
		char *const roots[2] = { c->archive_root, NULL };

		if (_check_roots(lr->dest, roots, "dest", "ArchiveRoot", err, errlen) < 0)
			return -1;
	}
	if (lr->options) {
		json_error_t je;
		json_t *o = json_loads(lr->options, 0, &je);
		const char *k;
		json_t *v;

		if (!json_is_object(o)) {
			json_decref(o);
			snprintf(err, errlen, "'options' must be a JSON object");
			return -1;
		}
		json_object_foreach(o, k, v) {
			if (strcmp(k, "backend") == 0) {
				if (!json_is_string(v) || (strcmp(json_string_value(v), "local") &&
							   strcmp(json_string_value(v), "null"))) {
					json_decref(o);
					snprintf(err, errlen, "options.backend must be \"local\" or \"null\"");
					return -1;
				}
			} else if (strcmp(k, "keep") == 0) {
				if (!json_is_boolean(v) || strcmp(lr->action, "archive") != 0) {
					json_decref(o);
					snprintf(err, errlen, "options.keep is a boolean for archive requests only");
					return -1;
				}
			} else {
				snprintf(err, errlen, "unknown option '%.64s' (known: backend, keep)", k);
				json_decref(o);
				return -1;
			}
		}
		json_decref(o);
	}
	return 0;
}

int lifecycle_create_request(struct daemon *d, const struct lifecycle_request *lr,
			     int64_t *id_out, char *err, size_t errlen)
{
	struct queue_new_request nr;
	struct passwd pw, *pwp = NULL;
	char buf[4096];

	if (lifecycle_check_request(d, lr, err, errlen) < 0)
		return -1;
	memset(&nr, 0, sizeof(nr));
	nr.uid = lr->uid;
	nr.gid = lr->gid;
	nr.user = lr->user;
	if (!nr.user) {
		if (getpwuid_r(lr->uid, &pw, buf, sizeof(buf), &pwp) == 0 && pwp)
			nr.user = pwp->pw_name;
		else
			nr.user = "?";
	}
	nr.job_id = lr->job_id;
	nr.action = lr->action;
	nr.source = lr->source;
	nr.dest = lr->dest;
	nr.options = lr->options;
	nr.max_retries = d->conf->max_retries;
	if (queue_request_create(d->q, &nr, id_out, err, errlen) < 0)
		return -1;
	log_info("request %lld: %s %s -> %s for uid %u%s", (long long)*id_out, lr->action,
		 lr->source, lr->dest ? lr->dest : "-", (unsigned)lr->uid,
		 lr->job_id > 0 ? " (job)" : "");
	daemon_wake(d);
	return 0;
}

/* Expand the patterns of a plan value (the SPANK plugin usually has already). */
static int _expand(const char *in, int64_t job_id, const char *user, char *out, size_t outlen,
		   char *err, size_t errlen)
{
	struct dsl_expand_ctx ctx = { .job_id = (unsigned long)job_id, .user = user,
				      .job_name = NULL, .array_job_id = 0, .array_task_id = -1 };

	return dsl_expand(in, &ctx, out, outlen, err, errlen);
}

static int _resolve(const char *path, const char *work_dir, char *out, size_t outlen,
		    char *err, size_t errlen)
{
	int n;

	if (path[0] == '/')
		n = snprintf(out, outlen, "%s", path);
	else if (!work_dir || work_dir[0] != '/') {
		snprintf(err, errlen, "relative path '%.200s' but the job's work_dir is unknown", path);
		return -1;
	} else
		n = snprintf(out, outlen, "%s/%s", work_dir, path);
	if (n < 0 || (size_t)n >= outlen) {
		snprintf(err, errlen, "path too long: '%.200s'", path);
		return -1;
	}
	return 0;
}

int lifecycle_process_job_end(struct daemon *d, int64_t job_id, int64_t *ids, int max, int *n,
			      char *err, size_t errlen)
{
	struct queue_job *j = NULL;
	json_t *plan = NULL, *actions;
	size_t i;
	json_t *a;
	int success, rc;

	*n = 0;
	rc = queue_job_get(d->q, job_id, &j, err, errlen);
	if (rc != 0) {
		if (rc == 1)
			snprintf(err, errlen, "job %lld is unknown", (long long)job_id);
		return -1;
	}
	success = j->end_state && strcmp(j->end_state, "COMPLETED") == 0 && j->end_exit_code == 0;
	if (j->plan)
		plan = json_loads(j->plan, 0, NULL);
	actions = json_object_get(plan, "actions");
	if (j->plan && !json_is_array(actions))
		log_warn("job %lld: stored plan has no 'actions' array; no after-job transfers",
			 (long long)job_id);
	if (j->uid <= 0 && json_array_size(actions) > 0) {
		log_warn("job %lld: owner uid unknown or root; after-job transfers skipped",
			 (long long)job_id);
		actions = NULL;
	}
	json_array_foreach(actions, i, a) {
		const char *act = json_string_value(json_object_get(a, "action"));
		const char *path = json_string_value(json_object_get(a, "path"));
		const char *to = json_string_value(json_object_get(a, "to"));
		const char *when = json_string_value(json_object_get(a, "when"));
		json_t *keep = json_object_get(a, "keep");
		char src[PATH_LIMIT + 1], dst[PATH_LIMIT + 1], exp[PATH_LIMIT + 1], why[512];
		struct lifecycle_request lr;
		int64_t id;
		int line = (int)json_integer_value(json_object_get(a, "line"));

		if (!act || !path)
			continue;
		if (strcmp(act, "archive") != 0 && strcmp(act, "stage_out") != 0)
			continue;
		if (strcmp(act, "archive") == 0 && when && strcmp(when, "success") == 0 && !success) {
			log_info("job %lld: line %d: archive of %s skipped: when=success and the job "
				 "ended %s (exit %d)", (long long)job_id, line, path,
				 j->end_state ? j->end_state : "?", j->end_exit_code);
			continue;
		}
		memset(&lr, 0, sizeof(lr));
		lr.uid = (uid_t)j->uid;
		lr.gid = (gid_t)(j->gid >= 0 ? j->gid : j->uid);
		lr.user = j->user;
		lr.job_id = job_id;
		if (_resolve(path, j->work_dir, src, sizeof(src), why, sizeof(why)) < 0)
			goto skip;
		if (strcmp(act, "archive") == 0 && d->conf->archive_mode == CONF_ARCHIVE_LABEL) {
			lr.action = "label";
		} else if (strcmp(act, "archive") == 0) {
			lr.action = "archive";
			if (to) {
				if (_expand(to, job_id, j->user ? j->user : "", exp, sizeof(exp), why,
					    sizeof(why)) < 0 ||
				    _resolve(exp, j->work_dir, dst, sizeof(dst), why, sizeof(why)) < 0)
					goto skip;
			} else if (!d->conf->archive_root) {
				snprintf(why, sizeof(why), "no to= and no ArchiveRoot configured");
				goto skip;
			} else {
				const char *rel = path[0] == '/' ? strrchr(path, '/') + 1 : path;
				int k = snprintf(dst, sizeof(dst), "%s/%s/%lld/%s", d->conf->archive_root,
						 j->user ? j->user : "unknown", (long long)job_id, rel);

				if (k < 0 || (size_t)k >= sizeof(dst)) {
					snprintf(why, sizeof(why), "archive path too long");
					goto skip;
				}
			}
			lr.dest = dst;
			if (json_is_false(keep))
				lr.options = "{\"keep\":false}";
		} else {
			lr.action = "stage_out";
			if (!to) {
				snprintf(why, sizeof(why), "stage_out without to=");
				goto skip;
			}
			if (_expand(to, job_id, j->user ? j->user : "", exp, sizeof(exp), why,
				    sizeof(why)) < 0 ||
			    _resolve(exp, j->work_dir, dst, sizeof(dst), why, sizeof(why)) < 0)
				goto skip;
			lr.dest = dst;
		}
		lr.source = src;
		if (lifecycle_create_request(d, &lr, &id, why, sizeof(why)) < 0)
			goto skip;
		if (*n < max)
			ids[(*n)++] = id;
		continue;
skip:
		log_warn("job %lld: plan line %d (%s=%s) skipped: %s", (long long)job_id, line, act,
			 path, why);
	}
	json_decref(plan);
	queue_job_free(j);
	return queue_job_end_processed(d->q, job_id, err, errlen);
}

/* ---- built-in hook: job-end events left pending (e.g. by a crash) ---- */

static void _job_end_tick(struct daemon *d, int64_t now_ms)
{
	int64_t jobs[32], ids[64];
	char err[512];
	int n = queue_job_ends_pending(d->q, jobs, 32, err, sizeof(err));

	(void)now_ms;
	for (int i = 0; i < n; i++) {
		int made;

		if (lifecycle_process_job_end(d, jobs[i], ids, 64, &made, err, sizeof(err)) < 0)
			log_err("job %lld: after-job requests not created: %s", (long long)jobs[i], err);
	}
}

static const struct lifecycle_hook _job_end_hook = {
	.name = "job-end",
	.period_ms = 1000,
	.tick = _job_end_tick,
};

const struct lifecycle_hook *const lifecycle_hooks[] = {
	&_job_end_hook,
	&slurm_watch_hook,
	&yield_hook,
	NULL,
};

static int64_t _last_run[16];

int lifecycle_init(struct daemon *d, char *err, size_t errlen)
{
	for (int i = 0; lifecycle_hooks[i]; i++)
		if (lifecycle_hooks[i]->init && lifecycle_hooks[i]->init(d, err, errlen) < 0)
			return -1;
	return 0;
}

void lifecycle_tick(struct daemon *d, int64_t now_ms)
{
	for (int i = 0; lifecycle_hooks[i] && i < 16; i++)
		if (now_ms - _last_run[i] >= lifecycle_hooks[i]->period_ms) {
			_last_run[i] = now_ms;
			lifecycle_hooks[i]->tick(d, now_ms);
		}
}

void lifecycle_fini(struct daemon *d)
{
	for (int i = 0; lifecycle_hooks[i]; i++)
		if (lifecycle_hooks[i]->fini)
			lifecycle_hooks[i]->fini(d);
}
