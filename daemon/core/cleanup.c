/* cleanup.c - see cleanup.h: the daemon's side of the input cleanup. */
#include "config.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cleanup.h"
#include "grow.h"
#include "lifecycle.h"
#include "log.h"
#include "queue.h"

int cleanup_input_dir(const struct conf *c, const struct queue_job *j, char *out, size_t outlen)
{
	int n;

	if (!c->scratch_roots || !c->scratch_roots[0] || !j->user || !j->user[0] ||
	    strchr(j->user, '/'))
		return 1;
	n = snprintf(out, outlen, "%s/%s/%lld/input", c->scratch_roots[0], j->user,
		     (long long)j->job_id);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

int cleanup_relpath(const char *input, const char *dest, size_t nitems, const char *rel,
		    char *out, size_t outlen)
{
	size_t il = strlen(input);
	const char *name;
	int n;

	if (strncmp(dest, input, il) != 0 || dest[il] != '/')
		return 1;
	name = dest + il + 1;
	/* Inputs without to= land as input/NAME (slurm_watch.c, _stage_in_dest). */
	if (!*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, ".."))
		return 1;
	if (nitems == 1 && !strcmp(rel, name))
		n = snprintf(out, outlen, "%s", name);	/* a single file */
	else
		n = snprintf(out, outlen, "%s/%s", name, rel);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

/* The job's verified stage_in requests (collected first: no queue call under the list). */
struct _req {
	int64_t id;
	char *dest;
};

struct _reqs {
	struct _req *r;
	size_t n, cap;
	int64_t existing;          /* a purge request already made for the job, or 0 */
	int labelled;              /* a 'purge' label request already made */
	int64_t boundary;          /* requests up to this id are of runs a rerun superseded */
};

static int _collect_req(const struct queue_request *r, void *arg)
{
	struct _reqs *s = arg;

	/* A purge or its label made at the end of a run the job's rerun superseded
	   (queue_job_rerun) is not this run's: the final end makes its own. */
	if (!strcmp(r->action, "purge") && r->state != QS_CANCELLED) {
		if (r->id > s->boundary)
			s->existing = r->id;
		return 0;
	}
	if (!strcmp(r->action, "label") && strstr(r->options, "\"purge\"")) {
		if (r->id > s->boundary)
			s->labelled = 1;
		return 0;
	}
	if (strcmp(r->action, "stage_in") != 0 || r->state != QS_DONE || !r->dest ||
	    strstr(r->options, "\"shared\":true"))
		return 0;
	if (grow_array((void **)&s->r, &s->cap, s->n + 1, sizeof(*s->r), 8) < 0)
		return 1;
	s->r[s->n].id = r->id;
	s->r[s->n].dest = strdup(r->dest);
	if (!s->r[s->n].dest)
		return 1;
	s->n++;
	return 0;
}

struct _items {
	const char *input, *dest;
	size_t nitems;             /* the request's verified files */
	struct cleanup_item *v;
	char **paths;              /* owned relpaths of v */
	size_t n, cap;
	int bad;                   /* out of memory or a path too long */
};

static int _count(const struct queue_item *it, void *arg)
{
	if (!strcmp(it->type, "file"))
		((struct _items *)arg)->nitems++;
	return 0;
}

static int _collect_item(const struct queue_item *it, void *arg)
{
	struct _items *s = arg;
	char rel[4096];
	size_t cap, pcap;
	int rc;

	if (strcmp(it->type, "file") != 0)
		return 0;	/* symlinks and skipped entries: never removed */
	rc = cleanup_relpath(s->input, s->dest, s->nitems, it->relpath, rel, sizeof(rel));
	if (rc != 0) {
		s->bad |= rc < 0;
		return rc < 0;
	}
	/* paths is v's twin: both grow to the same capacity. */
	cap = pcap = s->cap;
	if (grow_array((void **)&s->v, &cap, s->n + 1, sizeof(*s->v), 64) < 0 ||
	    grow_array((void **)&s->paths, &pcap, s->n + 1, sizeof(*s->paths), 64) < 0) {
		s->bad = 1;
		return 1;
	}
	s->cap = cap;
	s->paths[s->n] = strdup(rel);
	if (!s->paths[s->n]) {
		s->bad = 1;
		return 1;
	}
	s->v[s->n].relpath = s->paths[s->n];
	s->v[s->n].size = it->size;
	s->v[s->n].mtime_ns = it->mtime_ns;
	s->n++;
	return 0;
}

static int64_t _label(struct daemon *d, const struct queue_job *j, const char *input,
		      const char *policy, const char *beneath, char *err, size_t errlen)
{
	struct lifecycle_request lr;
	json_t *o = json_pack("{s:s,s:s}", "policy", policy, "beneath", beneath);
	char *opt = o ? json_dumps(o, JSON_COMPACT) : NULL;
	int64_t id = 0;

	json_decref(o);
	if (!opt) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	lifecycle_request_init(&lr, j, "label", input, opt);
	if (lifecycle_create_request(d, &lr, &id, err, errlen) < 0)
		id = -1;
	free(opt);
	return id;
}

/*
 * One job's cleanup from its records, in the order the decisions are made (where, what was staged, done already, the
 * label, the schedule), so that nothing is removed by a path through helpers.
 */
int cleanup_schedule(struct daemon *d, const struct queue_job *j, int64_t *label_id,
		     int64_t *purge_id, char *err, size_t errlen)
{
	const struct conf *c = d->conf;
	struct queue_filter f = { .uid = -1, .job_id = j->job_id, .state = -1, .limit = 0 };
	struct _reqs rq = { 0 };
	struct _items it = { 0 };
	struct queue_new_request nr;
	struct lifecycle_request lr;
	char input[4096], *opt = NULL;
	json_t *o;
	int rc = -1, retention = c->input_retention;

	*label_id = *purge_id = 0;
	if (j->uid <= 0 || cleanup_input_dir(c, j, input, sizeof(input)) != 0)
		return 0;
	if ((rq.boundary = queue_rerun_boundary(d->q, j->job_id, err, errlen)) < 0 ||
	    queue_request_list(d->q, &f, _collect_req, &rq, err, errlen) < 0)
		goto out;
	if (rq.existing) {
		*purge_id = rq.existing;	/* a second teardown, or a replayed end */
		rc = 0;
		goto out;
	}
	it.input = input;
	for (size_t i = 0; i < rq.n; i++) {
		it.dest = rq.r[i].dest;
		it.nitems = 0;
		if (queue_item_list(d->q, rq.r[i].id, QI_DONE, 0, _count, &it, err, errlen) < 0 ||
		    queue_item_list(d->q, rq.r[i].id, QI_DONE, 0, _collect_item, &it, err,
				    errlen) < 0)
			goto out;
		if (it.bad) {
			snprintf(err, errlen, "out of memory or a staged path too long");
			goto out;
		}
	}
	if (it.n == 0) {
		rc = 0;		/* nothing staged into the input directory */
		goto out;
	}
	/* InputRetention=0: the purge worker labels the directory itself, first. */
	if (retention != 0 && !rq.labelled) {
		*label_id = _label(d, j, input, "purge", c->scratch_roots[0], err, errlen);
		if (*label_id < 0) {
			*label_id = 0;
			goto out;
		}
	}
	if (retention < 0) {
		log_info("job %lld: %s labelled purge; InputRetention=never: the site's purge "
			 "removes its %zu staged file%s", (long long)j->job_id, input, it.n,
			 it.n == 1 ? "" : "s");
		rc = 0;
		goto out;
	}
	o = json_pack("{s:s}", "beneath", c->scratch_roots[0]);
	opt = o ? json_dumps(o, JSON_COMPACT) : NULL;
	json_decref(o);
	lifecycle_request_init(&lr, j, "purge", input, opt);
	if (!opt) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (lifecycle_check_request(d, &lr, err, errlen) < 0)
		goto out;
	memset(&nr, 0, sizeof(nr));
	nr.uid = lr.uid;
	nr.gid = lr.gid;
	nr.user = lr.user;
	nr.job_id = lr.job_id;
	nr.action = lr.action;
	nr.source = lr.source;
	nr.options = lr.options;
	nr.max_retries = c->max_retries;
	if (queue_cleanup_create(d->q, &nr, retention > 0 ? (int64_t)time(NULL) + retention : 0,
				 it.v, it.n, purge_id, err, errlen) < 0)
		goto out;
	log_info("request %lld: purge of %zu staged file%s in %s for job %lld, %s",
		 (long long)*purge_id, it.n, it.n == 1 ? "" : "s", input, (long long)j->job_id,
		 retention ? "after InputRetention" : "now (InputRetention=0)");
	daemon_wake(d);
	rc = 0;
out:
	free(opt);
	for (size_t i = 0; i < rq.n; i++)
		free(rq.r[i].dest);
	free(rq.r);
	for (size_t i = 0; i < it.n; i++)
		free(it.paths[i]);
	free(it.paths);
	free(it.v);
	return rc;
}

int64_t cleanup_rerun(struct daemon *d, const struct queue_job *j, char *err, size_t errlen)
{
	char input[4096];

	if (j->uid <= 0 || cleanup_input_dir(d->conf, j, input, sizeof(input)) != 0)
		return 0;
	return _label(d, j, input, "exempt", d->conf->scratch_roots[0], err, errlen);
}
