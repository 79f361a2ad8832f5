/* lifecycle.c - see lifecycle.h. */
#include "config.h"

#include <ctype.h>
#include <jansson.h>
#include <pthread.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "cleanup.h"
#include "dsl.h"
#include "lifecycle.h"
#include "log.h"
#include "queue.h"
#include "xfer.h"

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
		snprintf(err, errlen, "'%s' must be an absolute path here, not a URL", field);
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
		/* A tab is allowed, as in #DATA values (docs/directives.md). */
		if (((unsigned char)*c < 0x20 && *c != '\t') || *c == 0x7f) {
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

/* Schemes the url backend serves (daemon/xfer_url.c). */
static const char *const _url_schemes[] = { "http", "https", "s3", "ftp", "ftps", "sftp", NULL };

/*
 * A URL source or destination: a scheme the site allows (AllowedSchemes)
 * and a backend serves, something after "://", no password (the URL is
 * stored, logged and shown), no control characters.
 */
static int _bad_url(const struct conf *c, const char *u, const char *field, char *err,
		    size_t errlen)
{
	const char *sep = strstr(u, "://"), *auth, *end, *at;
	char scheme[32], list[512] = "";
	size_t sl = (size_t)(sep - u), used = 0;
	int allowed = 0, served = 0;

	if (sl == 0 || sl >= sizeof(scheme)) {
		snprintf(err, errlen, "'%s': '%.200s' has no valid URL scheme", field, u);
		return -1;
	}
	for (size_t i = 0; i < sl; i++) {
		if (!isalnum((unsigned char)u[i]) && u[i] != '+' && u[i] != '-' && u[i] != '.') {
			snprintf(err, errlen, "'%s': '%.200s' has no valid URL scheme", field, u);
			return -1;
		}
		scheme[i] = (char)tolower((unsigned char)u[i]);
	}
	scheme[sl] = '\0';
	if (strlen(u) > PATH_LIMIT) {
		snprintf(err, errlen, "'%s' is %zu bytes; the limit is %d", field, strlen(u), PATH_LIMIT);
		return -1;
	}
	for (const char *p = u; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f || *p == ' ') {
			snprintf(err, errlen, "'%s' contains a space or a control character: "
				 "percent-encode it (%%20)", field);
			return -1;
		}
	for (char **a = c->allowed_schemes; a && *a; a++) {
		int k;

		allowed |= strcmp(*a, scheme) == 0;
		k = snprintf(list + used, sizeof(list) - used, "%s%s", used ? ", " : "", *a);
		if (k > 0 && (size_t)k < sizeof(list) - used)
			used += (size_t)k;
	}
	if (!allowed) {
		snprintf(err, errlen, "'%s': URL scheme '%s' is not allowed on this site "
			 "(AllowedSchemes: %s)", field, scheme, used ? list : "none");
		return -1;
	}
	for (int i = 0; _url_schemes[i]; i++)
		served |= strcmp(_url_schemes[i], scheme) == 0;
	if (!served) {
		snprintf(err, errlen, "'%s': '%s' URLs cannot be transferred by this daemon (it "
			 "serves http, https, s3, ftp, ftps, sftp)%s", field, scheme,
			 strcmp(scheme, "file") == 0 ? ": give the path itself" : "");
		return -1;
	}
	auth = sep + 3;
	end = auth + strcspn(auth, "/?#");
	if (end == auth) {
		snprintf(err, errlen, "'%s': '%.200s' names no host%s", field, u,
			 strcmp(scheme, "s3") == 0 ? " (use s3://BUCKET/KEY)" : "");
		return -1;
	}
	at = memchr(auth, '@', (size_t)(end - auth));
	if (at && memchr(auth, ':', (size_t)(at - auth))) {
		snprintf(err, errlen, "'%s': a password in the URL is refused (URLs are stored and "
			 "shown): put it in ~/.netrc, mode 0600", field);
		return -1;
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

/* options.exclude: directories (relative to the source) left out of the copy. */
static int _bad_exclude(const json_t *v, const char *action, char *err, size_t errlen)
{
	char why[256];
	size_t i;
	json_t *e;

	if (strcmp(action, "archive") != 0 && strcmp(action, "stage_out") != 0) {
		snprintf(err, errlen, "options.exclude is for archive and stage_out requests only");
		return -1;
	}
	if (!json_is_array(v) || json_array_size(v) > XFER_EXCLUDE_MAX) {
		snprintf(err, errlen, "options.exclude must be an array of at most %d relative "
			 "paths", XFER_EXCLUDE_MAX);
		return -1;
	}
	json_array_foreach(v, i, e) {
		if (!json_is_string(e)) {
			snprintf(err, errlen, "options.exclude[%zu] must be a string", i);
			return -1;
		}
		if (xfer_exclude_check(json_string_value(e), why, sizeof(why)) < 0) {
			snprintf(err, errlen, "options.exclude[%zu]: %s", i, why);
			return -1;
		}
	}
	return 0;
}

/*
 * One key k of a request's options with its value v: -1 with err filled when
 * it is unknown or not allowed for lr (src_url, dst_url: its source, its dest
 * is a URL). k and v are borrowed.
 */
static int _bad_option(const struct lifecycle_request *lr, const char *k, const json_t *v,
		       int src_url, int dst_url, char *err, size_t errlen)
{
	if (strcmp(k, "backend") == 0) {
		if (!json_is_string(v) || (strcmp(json_string_value(v), "local") &&
					   strcmp(json_string_value(v), "null") &&
					   strcmp(json_string_value(v), "bundle"))) {
			snprintf(err, errlen, "options.backend must be \"local\", \"null\" "
				 "or \"bundle\"");
			return -1;
		}
		if (strcmp(json_string_value(v), "bundle") == 0 && dst_url) {
			snprintf(err, errlen, "options.backend \"bundle\" writes to a "
				 "path, not to a URL");
			return -1;
		}
		if (strcmp(json_string_value(v), "bundle") == 0 &&
		    strcmp(lr->action, "archive") != 0) {
			snprintf(err, errlen, "options.backend \"bundle\" is for archive "
				 "requests only");
			return -1;
		}
	} else if (strcmp(k, "keep") == 0) {
		if (!json_is_boolean(v) || strcmp(lr->action, "archive") != 0) {
			snprintf(err, errlen, "options.keep is a boolean for archive requests only");
			return -1;
		}
	} else if (strcmp(k, "shared") == 0) {
		/* An array's input staged once for all its tasks (slurm_watch.c). */
		if (!json_is_boolean(v) || strcmp(lr->action, "stage_in") != 0) {
			snprintf(err, errlen, "options.shared is a boolean for stage_in "
				 "requests only");
			return -1;
		}
	} else if (strcmp(k, "exclude") == 0) {
		if (_bad_exclude(v, lr->action, err, errlen) < 0)
			return -1;
	} else if (strcmp(k, "beneath") == 0) {
		/* Only ever stricter: no symlink followed below it. */
		if (!json_is_string(v) || src_url ||
		    json_string_value(v)[0] != '/' ||
		    !_under(lr->source, json_string_value(v))) {
			snprintf(err, errlen, "options.beneath must be an absolute "
				 "directory above the source path");
			return -1;
		}
	} else if (strcmp(k, "policy") == 0) {
		if (!json_is_string(v) || strcmp(lr->action, "label") != 0 ||
		    (strcmp(json_string_value(v), "archive") &&
		     strcmp(json_string_value(v), "skipped") &&
		     strcmp(json_string_value(v), "purge") &&
		     strcmp(json_string_value(v), "exempt"))) {
			snprintf(err, errlen, "options.policy is \"archive\", "
				 "\"skipped\", \"purge\" or \"exempt\", for label "
				 "requests only");
			return -1;
		}
	} else if (strcmp(k, "line") == 0) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 ||
		    json_integer_value(v) > 1000000) {
			snprintf(err, errlen, "options.line must be a #DATA line number");
			return -1;
		}
	} else {
		snprintf(err, errlen, "unknown option '%.64s' (known: backend, keep, "
			 "exclude, shared, beneath, line, policy)", k);
		return -1;
	}
	return 0;
}

/* lr->options, when set: a JSON object whose every key passes _bad_option. */
static int _bad_options(const struct lifecycle_request *lr, int src_url, int dst_url,
			char *err, size_t errlen)
{
	json_error_t je;
	json_t *o;
	const char *k;
	json_t *v;

	if (!lr->options)
		return 0;
	o = json_loads(lr->options, 0, &je);
	if (!json_is_object(o)) {
		json_decref(o);
		snprintf(err, errlen, "'options' must be a JSON object");
		return -1;
	}
	json_object_foreach(o, k, v) {
		if (_bad_option(lr, k, v, src_url, dst_url, err, errlen) < 0) {
			json_decref(o);
			return -1;
		}
	}
	json_decref(o);
	return 0;
}

/*
 * The site's rules for a new request, one check after another, each with its
 * own message; the request's options last (_bad_options), each key by
 * _bad_option. Every rule is on the one path down this function.
 */
int lifecycle_check_request(struct daemon *d, const struct lifecycle_request *lr,
			    char *err, size_t errlen)
{
	const struct conf *c = d->conf;
	int is_label, src_url, dst_url;

	if (!lr->action || (strcmp(lr->action, "stage_in") && strcmp(lr->action, "stage_out") &&
			    strcmp(lr->action, "archive") && strcmp(lr->action, "label") &&
			    strcmp(lr->action, "purge"))) {
		snprintf(err, errlen, "'action' must be stage_in, stage_out, archive or label");
		return -1;
	}
	if (lr->uid == 0) {
		snprintf(err, errlen, "transfers run as the data's owner and never as root: "
			 "submit the request as that user");
		return -1;
	}
	/* purge (cleanup.c) removes a job's staged inputs: like a label, a path and no dest. */
	is_label = strcmp(lr->action, "label") == 0 || strcmp(lr->action, "purge") == 0;
	src_url = lr->source && strstr(lr->source, "://") != NULL;
	dst_url = lr->dest && strstr(lr->dest, "://") != NULL;
	if (src_url && strcmp(lr->action, "stage_in") != 0) {
		snprintf(err, errlen, "'source' of %s must be an absolute path: only stage_in reads "
			 "from a URL", lr->action);
		return -1;
	}
	if (dst_url && strcmp(lr->action, "stage_out") != 0 && strcmp(lr->action, "archive") != 0) {
		snprintf(err, errlen, "'dest' of %s must be an absolute path: only stage_out and "
			 "archive write to a URL", lr->action);
		return -1;
	}
	if ((src_url ? _bad_url(c, lr->source, "source", err, errlen) :
		       _bad_path(lr->source, "source", 0, err, errlen)) < 0 ||
	    (dst_url ? _bad_url(c, lr->dest, "dest", err, errlen) :
		       _bad_path(lr->dest, "dest", is_label, err, errlen)) < 0)
		return -1;
	if (!is_label && !lr->dest) {
		snprintf(err, errlen, "'dest' is required for %s", lr->action);
		return -1;
	}
	if (is_label && lr->dest) {
		snprintf(err, errlen, "'dest' is not used by %s: leave it out", lr->action);
		return -1;
	}
	if (strcmp(lr->action, "purge") == 0 &&
	    _check_roots(lr->source, c->scratch_roots, "source", "ScratchRoots", err, errlen) < 0)
		return -1;
	if (lr->dest && strcmp(lr->source, lr->dest) == 0) {
		snprintf(err, errlen, "'source' and 'dest' are the same path");
		return -1;
	}
	if (strcmp(lr->action, "stage_in") == 0 &&
	    ((!src_url &&
	      _check_roots(lr->source, c->stage_in_roots, "source", "StageInRoots", err, errlen) < 0) ||
	     _check_roots(lr->dest, c->scratch_roots, "dest", "ScratchRoots", err, errlen) < 0))
		return -1;
	if (strcmp(lr->action, "archive") == 0 && c->archive_root && !dst_url) {
		char *const roots[2] = { c->archive_root, NULL };

		if (_check_roots(lr->dest, roots, "dest", "ArchiveRoot", err, errlen) < 0)
			return -1;
	}
	if (_bad_options(lr, src_url, dst_url, err, errlen) < 0)
		return -1;
	return 0;
}

void lifecycle_request_init(struct lifecycle_request *lr, const struct queue_job *j,
			    const char *action, const char *source, const char *options)
{
	memset(lr, 0, sizeof(*lr));
	lr->uid = (uid_t)j->uid;
	lr->gid = (gid_t)(j->gid >= 0 ? j->gid : j->uid);
	lr->user = j->user;
	lr->job_id = j->job_id;
	lr->action = action;
	lr->source = source;
	lr->options = options;
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

/* Set while the main loop's job-end hook processes ends (see _end_check). */
static __thread bool _in_hook;

/* Expand the patterns of a plan value (the SPANK plugin usually has already). */
static int _expand(const char *in, const struct queue_job *j, char *out, size_t outlen,
		   char *err, size_t errlen)
{
	bool task = j->array_job_id > 0 && j->array_task_id >= 0;
	struct dsl_expand_ctx ctx = { .job_id = (unsigned long)j->job_id,
				      .user = j->user ? j->user : "", .job_name = NULL,
				      .array_job_id = task ? (unsigned long)j->array_job_id : 0,
				      .array_task_id = task ? (long)j->array_task_id : -1 };

	return dsl_expand(in, &ctx, out, outlen, err, errlen);
}

/*
 * Before a stored end is turned into transfers, slurmctld has its say: a
 * run that ended in a requeue is not archived (the final run is), and
 * TIMEOUT, PREEMPTED, NODE_FAIL, ... replace what a node could tell (a
 * script killed by a signal looks CANCELLED there). The job's array is
 * recorded too if it was not yet. Returns 1 when the end was a requeue or
 * slurmctld still sees the job running (nothing to do now; the job-end
 * hook asks again every second), 0 to go on (j updated), -1 on a database
 * error.
 */
static int _end_check(struct daemon *d, struct queue_job *j, char *err, size_t errlen)
{
	struct slurm_watch_end_event ev = { j->job_id, j->end_state, j->end_received, !j->plan };
	struct slurm_watch_end_word word;
	char how[128], *plan, *st = word.state;
	int64_t aj, at;
	int restarts, code;
	enum slurm_watch_end r;

	/* The API thread only stores the event: asking slurmctld may block, so the
	   main loop's job-end hook (within a second) does it. */
	if (!_in_hook && d->conf->slurm_watch)
		return 1;
	r = lifecycle_ops.end_check(d, &ev, &word);
	plan = word.plan;
	code = word.exit_code;
	restarts = word.restarts;
	aj = word.array_job_id;
	at = word.array_task_id;
	/* No plan known: the end came from Epilog= (no plugin, which sends it) for
	   a job that was never held. slurmctld's record has the one job_submit.lua
	   wrote. */
	if (plan) {
		struct queue_job_rec rec = { j->job_id, -1, -1, NULL, NULL, plan };

		if (queue_job_upsert(d->q, &rec, err, errlen) < 0) {
			free(plan);
			return -1;
		}
		log_info("job %lld: plan taken from slurmctld's record (its end event had none)",
			 (long long)j->job_id);
		j->plan = plan;
	}

	if (r == SW_END_WAIT)
		return 1;
	if (r == SW_END_REQUEUED) {
		int run = restarts > 0 ? restarts : j->runs + 1;

		snprintf(how, sizeof(how), "run %d ended %s on its node; requeued", run,
			 j->end_state ? j->end_state : "?");
		log_info("job %lld: %s: its outputs are archived after the final run",
			 (long long)j->job_id, how);
		return queue_job_requeued(d->q, j->job_id, run, how, err, errlen) < 0 ? -1 : 1;
	}
	if (aj > 0 && j->array_job_id < 0) {
		if (queue_job_set_array(d->q, j->job_id, aj, at, err, errlen) < 0)
			return -1;
		j->array_job_id = aj;
		j->array_task_id = at;
	}
	/* slurmctld's final record wins: it knows the time limit, the preemption and the
	   node failure, and the run that ended last (the event may be a late one). */
	if (r == SW_END_FINAL && (!j->end_state || strcmp(st, j->end_state) != 0 ||
				  code != j->end_exit_code)) {
		log_info("job %lld: ended %s (exit %d) by slurmctld's record (the event said %s, "
			 "exit %d)", (long long)j->job_id, st, code,
			 j->end_state ? j->end_state : "?", j->end_exit_code);
		if (queue_job_set_end_state(d->q, j->job_id, st, code, err, errlen) < 0)
			return -1;
		free(j->end_state);
		j->end_state = strdup(st);
		j->end_exit_code = code;
	}
	return 0;
}

static int _resolve(const char *path, const char *work_dir, char *out, size_t outlen,
		    char *err, size_t errlen)
{
	int n;

	if (path[0] == '/' || strstr(path, "://"))	/* a URL is kept as written */
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

/*
 * Below which directory a directive path is opened without following any
 * symlink (options.beneath): the longest ScratchRoot holding it, else the
 * job's working directory when it is there, else "/" (every component).
 * Those directories are the site's or were checked when the job started.
 */
static const char *_beneath(const struct conf *c, const char *src, const char *work_dir)
{
	const char *best = NULL;

	for (char **r = c->scratch_roots; r && *r; r++)
		if (_under(src, *r) && (!best || strlen(*r) > strlen(best)))
			best = *r;
	if (!best && work_dir && work_dir[0] == '/' && _under(src, work_dir))
		best = work_dir;
	return best ? best : "/";
}

/*
 * Job ends are processed by the API thread that stored the event and by the
 * main loop's job-end hook (events left pending). One at a time, and a job
 * already processed is left alone, so one event never makes two sets of
 * requests.
 */
static pthread_mutex_t _job_end_lock = PTHREAD_MUTEX_INITIALIZER;

static int _process_job_end(struct daemon *d, int64_t job_id, int64_t *ids, int max, int *n,
			    char *err, size_t errlen);

int lifecycle_process_job_end(struct daemon *d, int64_t job_id, int64_t *ids, int max, int *n,
			      char *err, size_t errlen)
{
	int rc;

	pthread_mutex_lock(&_job_end_lock);
	rc = _process_job_end(d, job_id, ids, max, n, err, errlen);
	pthread_mutex_unlock(&_job_end_lock);
	return rc;
}

/* Length of p without trailing '/' (but "/" stays). */
static size_t _trimmed_len(const char *p)
{
	size_t n = strlen(p);

	while (n > 1 && p[n - 1] == '/')
		n--;
	return n;
}

/*
 * The plan's exempt= directories strictly inside src (an archive or
 * stage_out source), as paths relative to src, appended to the array ex.
 * Returns the number added; one that cannot be used is logged and left out.
 */
static int _exempts_inside(const json_t *actions, const char *src, const char *work_dir,
			   int64_t job_id, int line, json_t *ex)
{
	size_t i, sl = _trimmed_len(src);
	const json_t *a;
	int added = 0;

	json_array_foreach(actions, i, a) {
		const char *act = json_string_value(json_object_get(a, "action"));
		const char *path = json_string_value(json_object_get(a, "path"));
		char ep[PATH_LIMIT + 1], rel[PATH_LIMIT + 1], why[512];
		size_t el;

		if (!act || !path || strcmp(act, "exempt") != 0 || strstr(path, "://"))
			continue;
		if (_resolve(path, work_dir, ep, sizeof(ep), why, sizeof(why)) < 0)
			continue;
		el = _trimmed_len(ep);
		if (el <= sl + 1 || strncmp(ep, src, sl) != 0 || ep[sl] != '/')
			continue;	/* not strictly inside */
		snprintf(rel, sizeof(rel), "%.*s", (int)(el - sl - 1), ep + sl + 1);
		if (json_array_size(ex) >= XFER_EXCLUDE_MAX ||
		    xfer_exclude_check(rel, why, sizeof(why)) < 0) {
			log_warn("job %lld: exempt=%s (line %d) is still copied with line %d: %s",
				 (long long)job_id, path,
				 (int)json_integer_value(json_object_get(a, "line")), line,
				 json_array_size(ex) >= XFER_EXCLUDE_MAX ? "too many exempt "
				 "directories inside it" : why);
			continue;
		}
		if (json_array_append_new(ex, json_string(rel)) == 0)
			added++;
	}
	return added;
}

/*
 * Record that line's action was not done and why: the job's notes (shown by
 * GET /v1/jobs/ID and 'stagehand status'), and the daemon log.
 */
static void _note(struct daemon *d, int64_t job_id, int line, const char *act, const char *path,
		  const char *reason)
{
	json_t *n = json_pack("{s:i,s:s,s:s,s:s}", "line", line, "action", act, "path", path,
			      "reason", reason);
	char *text = n ? json_dumps(n, JSON_COMPACT) : NULL;
	char err[256];

	log_info("job %lld: line %d: %s of %s skipped: %s", (long long)job_id, line, act, path,
		 reason);
	if (!text || queue_job_add_note(d->q, job_id, text, err, sizeof(err)) < 0)
		log_err("job %lld: cannot record that line %d was skipped: %s", (long long)job_id,
			line, text ? err : "out of memory");
	free(text);
	json_decref(n);
}

/*
 * A skipped archive's directory leaves 'pending' for 'skipped' (label mode
 * and copy mode alike): a label request, run as the owner with no symlink
 * followed, so the HSM engine does not wait on it for ever.
 */
static int _label_skipped(struct daemon *d, const struct queue_job *j, const char *path,
			  int line, int64_t *id)
{
	struct lifecycle_request lr;
	char src[PATH_LIMIT + 1], why[512], *opt_text;
	json_t *opt;
	int rc;

	if (_resolve(path, j->work_dir, src, sizeof(src), why, sizeof(why)) < 0)
		return -1;
	opt = json_pack("{s:s,s:s,s:i}", "policy", "skipped", "beneath",
			_beneath(d->conf, src, j->work_dir), "line", line);
	opt_text = opt ? json_dumps(opt, JSON_COMPACT) : NULL;
	json_decref(opt);
	if (!opt_text)
		return -1;
	lifecycle_request_init(&lr, j, "label", src, opt_text);
	rc = lifecycle_create_request(d, &lr, id, why, sizeof(why));
	if (rc < 0)
		log_warn("job %lld: line %d: cannot label %s 'skipped': %s", (long long)j->job_id,
			 line, src, why);
	free(opt_text);
	return rc;
}

/*
 * Where an archive action without ArchiveMode=label copies to: its to=,
 * expanded and resolved, or ArchiveRoot/USER/RUN/NAME. Returns 0, or -1 with
 * why filled (the action is skipped).
 */
static int _end_archive_dest(const struct daemon *d, const struct queue_job *j,
			     const char *path, const char *to, char *dst, size_t dstlen,
			     char *why, size_t whylen)
{
	char exp[PATH_LIMIT + 1];

	if (to) {
		if (_expand(to, j, exp, sizeof(exp), why, whylen) < 0 ||
		    _resolve(exp, j->work_dir, dst, dstlen, why, whylen) < 0)
			return -1;
	} else if (!d->conf->archive_root) {
		snprintf(why, whylen, "no to= and no ArchiveRoot configured");
		return -1;
	} else {
		const char *rel = path[0] == '/' ? strrchr(path, '/') + 1 : path;
		char run[48];
		int k;

		/* An array task is archived under ARRAYID_TASK, as squeue names it. */
		if (j->array_job_id > 0 && j->array_task_id >= 0)
			snprintf(run, sizeof(run), "%lld_%lld",
				 (long long)j->array_job_id, (long long)j->array_task_id);
		else
			snprintf(run, sizeof(run), "%lld", (long long)j->job_id);
		k = snprintf(dst, dstlen, "%s/%s/%s/%s", d->conf->archive_root,
			     j->user ? j->user : "unknown", run, rel);

		if (k < 0 || (size_t)k >= dstlen) {
			snprintf(why, whylen, "archive path too long");
			return -1;
		}
	}
	return 0;
}

/*
 * What a request from line of an ended job's plan carries in its options
 * (opt) besides backend= and keep=: beneath= and line= for a path source,
 * exclude= for the plan's exempt= directories inside src.
 */
static void _end_options(const struct daemon *d, const struct queue_job *j,
			 const json_t *actions, const char *src, const char *action, int line,
			 json_t *opt)
{
	/* Nothing below the scratch root or work dir is followed (xfer_open_beneath). */
	if (!strstr(src, "://")) {
		json_object_set_new(opt, "beneath",
				    json_string(_beneath(d->conf, src, j->work_dir)));
		if (line > 0)
			json_object_set_new(opt, "line", json_integer(line));
	}
	/* exempt= directories inside this one are left out of the copy. */
	if (strcmp(action, "label") != 0) {
		json_t *ex = json_array();

		if (ex && _exempts_inside(actions, src, j->work_dir, j->job_id, line, ex) > 0)
			json_object_set(opt, "exclude", ex);
		json_decref(ex);
	}
}

/*
 * One action of an ended job's plan (a) into its request, whose id is added
 * to ids (at most max, *n so far); an action that cannot be done is noted on
 * the job (_note) and logged. actions is the whole plan (for exempt=),
 * success whether the job ended COMPLETED with exit code 0.
 */
static void _end_action(struct daemon *d, const struct queue_job *j, const json_t *actions,
			json_t *a, int success, int64_t *ids, int max, int *n)
{
	int64_t job_id = j->job_id;
	const char *act = json_string_value(json_object_get(a, "action"));
	const char *path = json_string_value(json_object_get(a, "path"));
	const char *to = json_string_value(json_object_get(a, "to"));
	const char *when = json_string_value(json_object_get(a, "when"));
	json_t *keep = json_object_get(a, "keep");
	json_t *opt = NULL;
	char *opt_text = NULL;
	char src[PATH_LIMIT + 1], dst[PATH_LIMIT + 1], exp[PATH_LIMIT + 1], why[512];
	struct lifecycle_request lr;
	int64_t id;
	int line = (int)json_integer_value(json_object_get(a, "line"));

	if (!act || !path)
		return;
	if (strcmp(act, "archive") != 0 && strcmp(act, "stage_out") != 0)
		return;
	if (j->refused) {
		/* The plugin refused the job's directories: nothing is copied,
		   labelled or removed (the daemon would refuse a link as well). */
		snprintf(why, sizeof(why), "the job was refused at start: %.400s", j->refused);
		_note(d, job_id, line, act, path, why);
		return;
	}
	if (strcmp(act, "archive") == 0 && when && strcmp(when, "success") == 0 && !success) {
		snprintf(why, sizeof(why), "when=success and the job ended %s (exit %d)",
			 j->end_state ? j->end_state : "?", j->end_exit_code);
		_note(d, job_id, line, act, path, why);
		if (_label_skipped(d, j, path, line, &id) == 0 && *n < max)
			ids[(*n)++] = id;
		return;
	}
	/* action, source, dest and options are set below. */
	lifecycle_request_init(&lr, j, NULL, NULL, NULL);
	if (_resolve(path, j->work_dir, src, sizeof(src), why, sizeof(why)) < 0)
		goto skip;
	opt = json_object();
	if (!opt) {
		snprintf(why, sizeof(why), "out of memory");
		goto skip;
	}
	if (strcmp(act, "archive") == 0 && d->conf->archive_mode == CONF_ARCHIVE_LABEL) {
		lr.action = "label";
	} else if (strcmp(act, "archive") == 0) {
		lr.action = "archive";
		if (_end_archive_dest(d, j, path, to, dst, sizeof(dst), why, sizeof(why)) < 0)
			goto skip;
		lr.dest = dst;
		/* ArchiveBundle=yes: small-file trees become tar bundles (xfer_bundle.c);
		 * a URL destination goes to the url backend, file by file. */
		if (d->conf->archive_bundle && !strstr(dst, "://"))
			json_object_set_new(opt, "backend", json_string("bundle"));
		if (json_is_false(keep))
			json_object_set_new(opt, "keep", json_false());
	} else {
		lr.action = "stage_out";
		if (!to) {
			snprintf(why, sizeof(why), "stage_out without to=");
			goto skip;
		}
		if (_expand(to, j, exp, sizeof(exp), why, sizeof(why)) < 0 ||
		    _resolve(exp, j->work_dir, dst, sizeof(dst), why, sizeof(why)) < 0)
			goto skip;
		lr.dest = dst;
	}
	lr.source = src;
	_end_options(d, j, actions, src, lr.action, line, opt);
	if (json_object_size(opt) > 0) {
		opt_text = json_dumps(opt, JSON_COMPACT);
		if (!opt_text) {
			snprintf(why, sizeof(why), "out of memory");
			goto skip;
		}
		lr.options = opt_text;
	}
	if (lifecycle_create_request(d, &lr, &id, why, sizeof(why)) < 0)
		goto skip;
	free(opt_text);
	json_decref(opt);
	if (*n < max)
		ids[(*n)++] = id;
	return;
skip:
	free(opt_text);
	json_decref(opt);
	log_warn("job %lld: plan line %d (%s=%s) skipped: %s", (long long)job_id, line, act,
		 path, why);
	/* A job waiting for this one (after=) must learn the archive never comes. */
	_note(d, job_id, line, act, path, why);
}

/*
 * A job's end, read top to bottom: its record, the requeue and end-state
 * rules (_end_check), then each action of the plan into its request
 * (_end_action), then the cleanup of its staged inputs.
 */
static int _process_job_end(struct daemon *d, int64_t job_id, int64_t *ids, int max, int *n,
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
	if (j->end_processed) {
		queue_job_free(j);
		return 0;
	}
	rc = _end_check(d, j, err, errlen);
	if (rc != 0) {
		queue_job_free(j);
		return rc < 0 ? -1 : 0;
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
	json_array_foreach(actions, i, a)
		_end_action(d, j, actions, a, success, ids, max, n);
	json_decref(plan);
	/* Hold mode: the inputs staged for it are done with (bb mode: at teardown, api_bb.c). */
	if (d->conf->submit_mode != CONF_SUBMIT_BB) {
		int64_t lid, pid;
		char why[512];

		if (cleanup_schedule(d, j, &lid, &pid, why, sizeof(why)) < 0)
			log_warn("job %lld: its staged inputs stay (no cleanup scheduled): %s",
				 (long long)job_id, why);
	}
	queue_job_free(j);
	return queue_job_end_processed(d->q, job_id, err, errlen);
}

int lifecycle_job_rerun(struct daemon *d, int64_t job_id, int runs, const char *how,
			const char *end_state, int exit_code, char *err, size_t errlen)
{
	struct queue_job *j = NULL;
	int cancelled, relabel;
	int64_t lid = 0;
	char why[512];

	if (queue_job_rerun(d->q, job_id, &(struct queue_rerun){ runs, how, end_state, exit_code },
			    &cancelled, &relabel, err, errlen) < 0)
		return -1;
	log_info("job %lld: %s: the earlier run's after-job transfers are superseded (%d "
		 "unfinished cancelled); the final run's end makes them again", (long long)job_id,
		 how, cancelled);
	if (!relabel)
		return 0;
	if (queue_job_get(d->q, job_id, &j, err, errlen) != 0)
		return -1;
	lid = cleanup_rerun(d, j, why, sizeof(why));
	if (lid < 0)
		log_warn("job %lld: its input directory stays labelled purge while it runs again "
			 "(relabel it exempt by hand: setfattr -n user.stagehand.policy -v exempt "
			 "DIR): %s", (long long)job_id, why);
	else if (lid > 0)
		log_info("request %lld: the inputs of job %lld are in use again: labelled exempt",
			 (long long)lid, (long long)job_id);
	queue_job_free(j);
	return 0;
}

/* ---- built-in hook: job-end events left pending (e.g. by a crash) ---- */

static void _job_end_tick(struct daemon *d, int64_t now_ms)
{
	int64_t jobs[32], ids[64];
	char err[512];
	int n = queue_job_ends_pending(d->q, jobs, 32, err, sizeof(err));

	(void)now_ms;
	_in_hook = true;
	for (int i = 0; i < n; i++) {
		int made;

		if (lifecycle_process_job_end(d, jobs[i], ids, 64, &made, err, sizeof(err)) < 0)
			log_err("job %lld: after-job requests not created: %s", (long long)jobs[i], err);
	}
	_in_hook = false;
}

const struct lifecycle_hook lifecycle_job_end_hook = {
	.name = "job-end",
	.period_ms = 1000,
	.tick = _job_end_tick,
};

/* ---- built-in hook: Bundle* settings for the bundle backend ---- */

/* Workers are forked from this process: they inherit what is set here. */
static void _bundle_conf_tick(struct daemon *d, int64_t now_ms)
{
	struct xfer_bundle_params p = {
		.min_files = d->conf->bundle_min_files, .file_max = d->conf->bundle_file_max,
		.bundle_size = d->conf->bundle_size,
	};

	(void)now_ms;
	xfer_bundle_configure(&p);
}

static int _bundle_conf_init(struct daemon *d, char *err, size_t errlen)
{
	(void)err;
	(void)errlen;
	_bundle_conf_tick(d, 0);
	return 0;
}

const struct lifecycle_hook lifecycle_bundle_conf_hook = {
	.name = "bundle-conf",
	.period_ms = 1000,
	.init = _bundle_conf_init,
	.tick = _bundle_conf_tick,
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
