/*
 * pool.c - see pool.h. The formula, and why free space is published rather
 * than asked for: docs/admin-guide.md, "Pools".
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "pool.h"
#include "queue_pool.h"

int pool_state_path(const struct conf *c, char *out, size_t outlen)
{
	const char *sp = c->socket_path, *slash = sp ? strrchr(sp, '/') : NULL;

	if (!slash || slash == sp)
		return -1;
	if (snprintf(out, outlen, "%.*s/pools.json", (int)(slash - sp), sp) >= (int)outlen)
		return -1;
	return 0;
}

/* The #DATA line of the stage_in whose source is src: that action's, or the only one's; 0. */
static int _stage_in_line(const char *plan, const char *src)
{
	json_t *p = plan ? json_loads(plan, 0, NULL) : NULL, *a;
	int line = 0, n = 0, only = 0;
	size_t i;

	json_array_foreach(json_object_get(p, "actions"), i, a) {
		if (strcmp(json_string_value(json_object_get(a, "action")) ?: "", "stage_in"))
			continue;
		n++;
		only = (int)json_integer_value(json_object_get(a, "line"));
		if (src && !strcmp(json_string_value(json_object_get(a, "path")) ?: "", src))
			line = only;
	}
	json_decref(p);
	return line ? line : n == 1 ? only : 0;
}

int pool_over_capacity(struct daemon *d, const struct queue_request *r, char *why,
		       size_t whylen)
{
	struct queue_job *qj = NULL;
	int64_t size, need;
	int counted, nreq, line, rc;
	char *pool = NULL, err[256], at[32];

	if (strcmp(r->action, "stage_in") || r->job_id <= 0)
		return 0;
	rc = queue_pool_get(d->q, r->job_id, &size, &pool, err, sizeof(err));
	if (rc < 0)
		log_warn("job %lld: %s", (long long)r->job_id, err);
	if (rc <= 0 || size <= 0) {
		free(pool);
		return 0;
	}
	if (queue_pool_need(d->q, r->job_id, &need, &counted, &nreq, err, sizeof(err)) < 0) {
		log_warn("job %lld: %s", (long long)r->job_id, err);
		free(pool);
		return 0;
	}
	if (need <= size) {
		free(pool);
		return 0;
	}
	queue_job_get(d->q, r->job_id, &qj, err, sizeof(err));
	line = _stage_in_line(qj ? qj->plan : NULL, r->source);
	at[0] = '\0';
	if (line > 0)
		snprintf(at, sizeof(at), " (line %d)", line);
	snprintf(why, whylen, "job %lld: stage_in of %s%s " POOL_OVER_TEXT ": "
		 "its inputs hold %lld bytes (%d of %d stage_in source%s counted), the job declared "
		 "%lld bytes (#DATA capacity=, pool %s); nothing more is staged. Raise capacity= "
		 "to at least %lld and resubmit, or stage less",
		 (long long)r->job_id, r->source, at, (long long)need, counted, nreq,
		 nreq == 1 ? "" : "s", (long long)size, pool ? pool : "?", (long long)need);
	queue_job_free(qj);
	free(pool);
	return 1;
}

int64_t pool_stage_in_budget(struct daemon *d, const struct queue_request *r)
{
	int64_t size, need;
	int counted, nreq, rc;
	char *pool = NULL, err[256];

	if (strcmp(r->action, "stage_in") || r->job_id <= 0)
		return -1;
	rc = queue_pool_get(d->q, r->job_id, &size, &pool, err, sizeof(err));
	free(pool);
	if (rc <= 0 || size <= 0)
		return -1;
	if (queue_pool_need(d->q, r->job_id, &need, &counted, &nreq, err, sizeof(err)) < 0) {
		log_warn("job %lld: %s", (long long)r->job_id, err);
		return size;
	}
	/* need includes this request's own count from an earlier attempt. */
	need -= r->bytes_total;
	return size > need ? size - need : 0;
}

static int _statvfs_failed;	/* main loop only */

/* free = min(quantity, statvfs free + held); -1 when statvfs fails. */
static int64_t _pool_free(struct daemon *d, const char *root, uint64_t quantity)
{
	struct statvfs sv;
	int64_t held = 0;
	uint64_t avail, fr;
	char err[256];

	if (statvfs(root, &sv) < 0) {
		/* Once until it works again: the tick comes every 5 s. */
		if (!_statvfs_failed++)
			log_warn("pool %s: statvfs: %s; Slurm keeps the last free space it was "
				 "given", root, strerror(errno));
		return -1;
	}
	_statvfs_failed = 0;
	if (queue_pool_held(d->q, root, &held, err, sizeof(err)) < 0) {
		log_warn("pool %s: %s", root, err);
		held = 0;
	}
	avail = (uint64_t)sv.f_bavail * (uint64_t)sv.f_frsize;
	fr = avail + (uint64_t)(held > 0 ? held : 0);
	return (int64_t)(fr < quantity ? fr : quantity);
}

static int _write_failed;	/* main loop only */

/* Write pools.json beside the socket: temp file, then rename, so a reader never sees half. */
static void _publish(struct daemon *d, int64_t now_ms)
{
	const struct conf *c = d->conf;
	char path[4096], tmp[4200];
	json_t *pools, *doc;
	char *text;
	FILE *f;
	int fd, ok;

	(void)now_ms;
	if (c->submit_mode != CONF_SUBMIT_BB || !c->pool_capacity || !c->scratch_roots ||
	    pool_state_path(c, path, sizeof(path)) < 0)
		return;
	pools = json_array();
	for (int i = 0; c->scratch_roots[i]; i++) {
		int64_t fr = _pool_free(d, c->scratch_roots[i], c->pool_capacity);
		json_t *p = json_pack("{s:s,s:I,s:i}", "id", c->scratch_roots[i], "quantity",
				      (json_int_t)c->pool_capacity, "granularity", 1);

		if (fr >= 0)
			json_object_set_new(p, "free", json_integer(fr));
		json_array_append_new(pools, p);
	}
	doc = json_pack("{s:o,s:I}", "pools", pools, "updated", (json_int_t)time(NULL));
	text = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
	json_decref(doc);
	if (!text || snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp)) {
		free(text);
		return;
	}
	/* 0644: slurmctld's SlurmUser reads it; pool sizes are no secret. */
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f && fd >= 0)
		close(fd);
	ok = f && fprintf(f, "%s\n", text) >= 0;
	if (f && fclose(f) != 0)
		ok = 0;
	if (!ok || rename(tmp, path) < 0) {
		/* Once until it works again: the tick comes every 5 s. */
		if (!_write_failed++)
			log_warn("cannot write the pool state %s: %s (slurm_bb_pools falls back "
				 "to PoolCapacity once it is 2 minutes old)", path, strerror(errno));
		unlink(tmp);
	} else {
		_write_failed = 0;
	}
	free(text);
}

const struct lifecycle_hook pool_hook = {
	.name = "pools",
	.period_ms = 5000,	/* slurmctld asks every 30 s */
	.tick = _publish,
};
