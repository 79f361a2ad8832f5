/* mover_exec.c - see mover_exec.h. */
#include "config.h"

#include <errno.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#include "executor.h"
#include "grow.h"
#include "log.h"
#include "mover_auth.h"
#include "mover_exec.h"
#include "pool.h"
#include "mover_plan.h"
#include "mover_verify.h"
#include "queue_shards.h"
#include "slurm_compat.h"
#include "slurm_jobs.h"
#include "worker.h"
#include "xfer.h"

#ifndef STAGEHAND_BINDIR
#define STAGEHAND_BINDIR "/usr/bin"
#endif
#define MOVER_DEFAULT_COMMAND STAGEHAND_BINDIR "/stagehand-mover"
#define TICK_MS 1000
/* Listings at once: a hung file system holds up only this many planners. */
#define PLANNERS 4

/*
 * A request waiting for its plan, or planned. The planner thread reads the
 * request and the settings copied here (never d->conf, which a reload may
 * free under it) and writes split; the main loop takes it back from done.
 */
struct plan_job {
	struct queue_request *r;     /* owned */
	uint64_t shard_bytes;        /* MoverShardBytes, MoverShardFiles, MoverMaxJobs */
	int64_t shard_files;
	int max_jobs;
	char *partition;             /* owned, for the log */
	_Atomic int cancel;          /* the main loop: the request left, stop listing */
	int split;                   /* 1 shards stored, 0 a local worker runs it, -1 it left */
	int verify;                  /* a read-back of what movers recorded (mover_verify.h),
					not a plan: every shard is done */
	int vrc;                     /* its verdict: mover_verify_run's return */
	int vwait;                   /* verified, waiting for a free local worker */
	struct mover_verify_set set; /* what it read back */
	struct mover_verify_result res;
	char verr[512];
	struct plan_job *next;
};

struct mover_exec {
	struct daemon *d;
	struct mover_auth *auth;     /* the mover jobs' tokens (mover_auth.h) */
	struct queue_request **r;    /* owned: requests run by mover jobs */
	int n;
	size_t cap;
	int64_t next_ms;
	int64_t check_ms;            /* next look whether the request being listed left */
	/* The planner threads: each lists one request at a time as its owner (a
	   child), packs and stores the plan, so no listing ever stalls the main
	   loop, and one hung listing does not hold up the plans of others. */
	pthread_t planner[PLANNERS];
	int nplanners;
	pthread_mutex_t lock;        /* guards what follows */
	pthread_cond_t cv;
	struct plan_job *todo, *cur[PLANNERS], *done;
	int stop;
	struct planner_arg {
		struct mover_exec *m;
		int slot;            /* its cur[] */
	} args[PLANNERS];
};

static void _plan_job_free(struct plan_job *j)
{
	mover_verify_result_free(&j->res);
	mover_verify_set_free(&j->set);
	queue_request_free(j->r);
	free(j->partition);
	free(j);
}

static void _plan_job(struct daemon *d, struct plan_job *j);
static void _verify_job(struct daemon *d, struct plan_job *j);

static void *_planner(void *arg)
{
	struct mover_exec *m = ((struct planner_arg *)arg)->m;
	int slot = ((struct planner_arg *)arg)->slot;

	pthread_mutex_lock(&m->lock);
	for (;;) {
		struct plan_job *j = m->todo;

		if (m->stop)
			break;
		if (!j) {
			pthread_cond_wait(&m->cv, &m->lock);
			continue;
		}
		m->todo = j->next;
		m->cur[slot] = j;
		pthread_mutex_unlock(&m->lock);
		if (j->verify)
			_verify_job(m->d, j);
		else
			_plan_job(m->d, j);
		pthread_mutex_lock(&m->lock);
		m->cur[slot] = NULL;
		j->next = m->done;
		m->done = j;
		daemon_wake(m->d);
	}
	pthread_mutex_unlock(&m->lock);
	return NULL;
}

/* The key beside the state database (mover_auth.h); NULL: none there, a key for this run. */
static struct mover_auth *_auth(const struct conf *c)
{
	const char *db = c->state_db, *slash = db ? strrchr(db, '/') : NULL;
	char path[4096], err[512];
	struct mover_auth *a;
	int n;

	if (!slash || strncmp(db, "file:", 5) == 0) {
		a = mover_auth_new(NULL, err, sizeof(err));
	} else {
		n = snprintf(path, sizeof(path), "%.*s/%s", (int)(slash - db), db, MOVER_KEY_FILE);
		if (n < 0 || n >= (int)sizeof(path)) {
			log_err("movers: the mover key's path beside %s is too long", db);
			return NULL;
		}
		a = mover_auth_new(path, err, sizeof(err));
		if (!a) {
			/* Never a key others may have read; the daemon still starts. */
			log_err("movers: %s. This run uses a key of its own: mover jobs running "
				"across its next restart are refused and run again", err);
			a = mover_auth_new(NULL, err, sizeof(err));
		}
	}
	if (!a)
		log_err("movers: %s", err);
	return a;
}

struct mover_exec *mover_exec_create(struct daemon *d)
{
	struct mover_exec *m = calloc(1, sizeof(*m));

	if (!m)
		return NULL;
	m->d = d;
	m->auth = _auth(d->conf);
	if (!m->auth) {
		free(m);
		return NULL;
	}
	pthread_mutex_init(&m->lock, NULL);
	pthread_cond_init(&m->cv, NULL);
	for (int i = 0; i < PLANNERS; i++) {
		int e;

		m->args[i] = (struct planner_arg){ m, i };
		if ((e = pthread_create(&m->planner[i], NULL, _planner, &m->args[i])) != 0) {
			log_err("cannot start a mover planner thread: pthread_create: %s",
				strerror(e));
			mover_exec_destroy(m);
			return NULL;
		}
		m->nplanners++;
	}
	return m;
}

static void _plan_jobs_free(struct plan_job *j)
{
	while (j) {
		struct plan_job *next = j->next;

		_plan_job_free(j);
		j = next;
	}
}

void mover_exec_destroy(struct mover_exec *m)
{
	if (!m)
		return;
	pthread_mutex_lock(&m->lock);
	m->stop = 1;
	for (int i = 0; i < PLANNERS; i++)
		if (m->cur[i])
			atomic_store(&m->cur[i]->cancel, 1);	/* its listing child is killed */
	pthread_cond_broadcast(&m->cv);
	pthread_mutex_unlock(&m->lock);
	for (int i = 0; i < m->nplanners; i++)
		pthread_join(m->planner[i], NULL);
	/* Still running in the queue: claimed again after a restart. */
	_plan_jobs_free(m->todo);
	_plan_jobs_free(m->done);
	pthread_cond_destroy(&m->cv);
	pthread_mutex_destroy(&m->lock);
	for (int i = 0; i < m->n; i++)
		queue_request_free(m->r[i]);
	free(m->r);
	mover_auth_free(m->auth);
	free(m);
}

const struct mover_auth *mover_exec_auth(const struct mover_exec *m)
{
	return m ? m->auth : NULL;
}

int mover_exec_active(const struct mover_exec *m)
{
	return m ? m->n : 0;
}

static int _add(struct mover_exec *m, struct queue_request *r)
{
	if (grow_array((void **)&m->r, &m->cap, (size_t)m->n + 1, sizeof(*m->r), 16) < 0)
		return -1;
	m->r[m->n++] = r;
	return 0;
}

/* Local paths, local backend: what stagehand-mover runs. */
static int _eligible(const struct conf *c, const struct queue_request *r)
{
	json_t *opts, *b;
	int ok;

	if (strcmp(r->action, "archive") != 0 && strcmp(r->action, "stage_out") != 0 &&
	    strcmp(r->action, "stage_in") != 0)
		return 0;
	if (!r->dest || strstr(r->source, "://") || strstr(r->dest, "://"))
		return 0;
	if (strcmp(r->action, "archive") == 0 && c->archive_bundle)
		return 0;
	opts = json_loads(r->options, 0, NULL);
	b = json_object_get(opts, "backend");
	ok = !b || (json_is_string(b) && strcmp(json_string_value(b), "local") == 0);
	json_decref(opts);
	return ok;
}

/* What the movers dial: Server=, else ListenAddress=. */
static int _server(const struct conf *c, char *buf, size_t len)
{
	int n;

	if (c->server)
		n = snprintf(buf, len, "%s", c->server);
	else if (!c->listen_host || strcmp(c->listen_host, "0.0.0.0") == 0 ||
		 strcmp(c->listen_host, "::") == 0)
		return -1;
	else if (strchr(c->listen_host, ':'))
		n = snprintf(buf, len, "[%s]:%u", c->listen_host, c->listen_port);
	else
		n = snprintf(buf, len, "%s:%u", c->listen_host, c->listen_port);
	return n < 0 || n >= (int)len || strchr(buf, '\'') ? -1 : 0;
}

/* Is request id still running (not cancelled or failed from outside)? */
static int _still_running(struct daemon *d, int64_t id)
{
	struct queue_request *cur = NULL;
	char err[256];
	int ok;

	if (queue_request_get(d->q, id, &cur, err, sizeof(err)) != 0)
		return 1;	/* unknown now: the main loop's tick decides */
	ok = cur->state == QS_RUNNING || cur->state == QS_VERIFYING;
	queue_request_free(cur);
	return ok;
}

/* The planner thread: list, pack and store one request's plan (j->split says). */
static void _plan_job(struct daemon *d, struct plan_job *j)
{
	const struct queue_request *r = j->r;
	struct mover_plan p = { 0 };
	struct queue_shard_file *sf;
	char err[512];
	int k, rc;

	j->split = 0;
	if (!_still_running(d, r->id)) {
		j->split = -1;
		return;
	}
	rc = mover_plan_list(r, &p, &j->cancel, err, sizeof(err));
	if (atomic_load(&j->cancel)) {
		j->split = -1;
		mover_plan_free(&p);
		return;
	}
	if (rc < 0)
		log_warn("request %lld: not split into mover jobs (%s); a local worker runs it",
			 (long long)r->id, err);
	if (rc != 0) {
		mover_plan_free(&p);
		return;
	}
	k = mover_plan_pack(&p, j->shard_bytes, j->shard_files, j->max_jobs);
	if (k < 2) {
		mover_plan_free(&p);
		return;
	}
	sf = calloc(p.n, sizeof(*sf));
	if (!sf) {
		mover_plan_free(&p);
		return;
	}
	for (size_t i = 0; i < p.n; i++)
		sf[i] = (struct queue_shard_file){ p.f[i].relpath, p.f[i].size, p.f[i].idx,
						   p.f[i].ranged, p.f[i].off, p.f[i].len };
	rc = queue_shards_create(d->q, r->id, k, sf, p.n, err, sizeof(err));
	if (rc == 0)
		rc = queue_request_totals(d->q, r->id, p.files, p.bytes, 0, err, sizeof(err));
	if (rc < 0)
		log_err("request %lld: cannot store its shards: %s; a local worker runs it",
			(long long)r->id, err);
	else
		log_info("request %lld: %lld files, %lld bytes: %d shards (%zu pieces: files and "
			 "byte ranges of files larger than a shard), mover jobs on partition %s",
			 (long long)r->id, (long long)p.files, (long long)p.bytes, k, p.n,
			 j->partition);
	free(sf);
	mover_plan_free(&p);
	j->split = rc < 0 ? 0 : 1;
}

/* Hand r to the planner thread (it owns r until the main loop takes it back). */
static int _plan_later(struct mover_exec *m, struct queue_request *r)
{
	const struct conf *c = m->d->conf;
	struct plan_job *j = calloc(1, sizeof(*j)), **t;

	if (!j || !(j->partition = strdup(c->mover_partition))) {
		free(j);
		return -1;
	}
	j->r = r;
	j->shard_bytes = c->mover_shard_bytes;
	j->shard_files = c->mover_shard_files;
	j->max_jobs = c->mover_max_jobs;
	pthread_mutex_lock(&m->lock);
	for (t = &m->todo; *t; t = &(*t)->next)
		;	/* first come, first listed */
	*t = j;
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->lock);
	log_debug("request %lld: listing %s for its mover plan (as uid %u)", (long long)r->id,
		  r->source, (unsigned)r->uid);
	return 0;
}

/*
 * The planner thread: read back, as the owner, every file the movers
 * recorded (mover_verify.h); j->vrc says how it went.
 */
static void _verify_job(struct daemon *d, struct plan_job *j)
{
	j->vrc = -1;
	if (!_still_running(d, j->r->id)) {
		j->split = -1;
		return;
	}
	if (mover_verify_collect(d->q, j->r, &j->set, j->verr, sizeof(j->verr)) < 0)
		return;
	j->vrc = mover_verify_run(j->r, &j->set, &j->cancel, &j->res, j->verr, sizeof(j->verr));
	if (atomic_load(&j->cancel))
		j->split = -1;
}

/* Every shard of r is done: its records are read back before the final pass (takes r). */
static int _verify_later(struct mover_exec *m, struct queue_request *r)
{
	struct plan_job *j = calloc(1, sizeof(*j)), **t;

	if (!j)
		return -1;
	j->r = r;
	j->verify = 1;
	pthread_mutex_lock(&m->lock);
	for (t = &m->todo; *t; t = &(*t)->next)
		;
	*t = j;
	pthread_cond_signal(&m->cv);
	pthread_mutex_unlock(&m->lock);
	log_info("request %lld: every shard done; reading back what its movers recorded, as "
		 "uid %u, before the final pass", (long long)r->id, (unsigned)r->uid);
	return 0;
}

/*
 * A read-back finished (j->verify). 1: verified, r may have its final pass;
 * 0: r failed or waits to be read again (logged, recorded); j keeps r.
 */
static int _verified(struct daemon *d, struct plan_job *j)
{
	const struct queue_request *r = j->r;
	char err[512], why[1400];
	int final = 0;

	if (j->vrc == 0) {
		log_info("request %lld: read back %zu files and %zu byte ranges its movers "
			 "recorded (%lld bytes hashed, destination and source) in %.2f s: every "
			 "checksum as recorded", (long long)r->id, j->res.files, j->res.ranges,
			 (long long)j->res.bytes, j->res.seconds);
		return 1;
	}
	if (j->vrc < 0) {
		struct queue_failure f = { why, 1, d->conf->retry_backoff, time(NULL) };

		snprintf(why, sizeof(why), "the daemon could not read back what its mover jobs "
			 "recorded: %s", j->verr);
		if (queue_request_fail(d->q, r->id, &f, &final, err, sizeof(err)) < 0)
			log_err("request %lld: cannot record failure: %s", (long long)r->id, err);
		log_warn("request %lld: failed%s: %s", (long long)r->id,
			 final ? " (final)" : ", will retry", why);
		return 0;
	}
	/* Not what was recorded: those files are not done (a retry copies them
	   again), and the request is not verified. */
	for (size_t i = 0; i < j->res.mismatched; i++)
		if (queue_item_unverified(d->q, r->id, j->res.bad[i], "its checksum at the "
					  "destination is not the one its mover recorded", err,
					  sizeof(err)) < 0)
			log_err("request %lld: %s", (long long)r->id, err);
	for (size_t i = 0; i < j->res.rmismatched; i++) {
		const struct mover_verify_range *g = &j->set.rg[j->res.badr[i]];

		if (queue_range_undo(d->q, r->id, g->relpath, g->off, err, sizeof(err)) < 0)
			log_err("request %lld: %s", (long long)r->id, err);
	}
	snprintf(why, sizeof(why), "verification of the mover jobs' records failed: %zu of %zu "
		 "files and %zu of %zu byte ranges are not what was recorded; the first: %s. The "
		 "archive is not verified: `stagehand retry r%lld` copies them again",
		 j->res.mismatched, j->res.files, j->res.rmismatched, j->res.ranges, j->res.first,
		 (long long)r->id);
	if (queue_request_fail(d->q, r->id, &(struct queue_failure){ why, 0, 0, time(NULL) },
			       &final, err, sizeof(err)) < 0)
		log_err("request %lld: cannot record failure: %s", (long long)r->id, err);
	log_warn("request %lld: failed (final): %s", (long long)r->id, why);
	return 0;
}

static int _mover_start(struct daemon *d, struct queue_request *r)
{
	struct mover_exec *m = d->movers;
	struct queue_shard *s = NULL;
	char err[512], srv[300];
	int n = 0;

	if (!m || !d->conf->mover_partition || !_eligible(d->conf, r))
		return 0;
	/* A stage-in held to its job's burst buffer runs locally: the local worker
	   counts its source against the size before copying (pool.h). */
	if (pool_stage_in_budget(d, r) >= 0)
		return 0;
	/* A stage-in from an archive copy the daemon made is a restore, verified
	   against its records (xfer_restore.c): a local worker runs it. */
	if (strcmp(r->action, "stage_in") == 0) {
		int64_t areq;
		char *adest = NULL;
		int in = queue_archive_of(d->q, r->source, &areq, &adest, err, sizeof(err));

		free(adest);
		if (in != 0)
			return 0;
	}
	if (_server(d->conf, srv, sizeof(srv)) < 0) {
		log_warn("MoverPartition=%s is set but movers have no address to reach this daemon "
			 "(set Server= or a specific ListenAddress=); request %lld runs locally",
			 d->conf->mover_partition, (long long)r->id);
		return 0;
	}
	if (queue_shards_list(d->q, r->id, &s, &n, err, sizeof(err)) < 0) {
		log_err("request %lld: cannot read its shards: %s", (long long)r->id, err);
		return 0;
	}
	queue_shards_free(s, n);
	if (n > 0) {
		/* Claimed again (retry, restart): the plan stands; failed shards run again. */
		if (queue_shards_retry(d->q, r->id, err, sizeof(err)) < 0)
			log_err("request %lld: %s", (long long)r->id, err);
		log_info("request %lld: resumes its %d mover shards", (long long)r->id, n);
	} else {
		/* Listed off the main loop; the tick takes the plan back (_planned). */
		if (_plan_later(m, r) < 0) {
			log_err("request %lld: out of memory", (long long)r->id);
			queue_request_checkpoint(d->q, r->id, err, sizeof(err));
			queue_request_free(r);
			return -1;
		}
		return 1;
	}
	if (_add(m, r) < 0) {
		log_err("request %lld: out of memory", (long long)r->id);
		queue_request_checkpoint(d->q, r->id, err, sizeof(err));
		queue_request_free(r);
		return -1;
	}
	daemon_wake(d);
	m->next_ms = 0;
	return 1;
}

const struct executor executor_mover = { "mover", _mover_start };

/* ---- Slurm ---- */

static int _submit(struct daemon *d, const struct queue_request *r, int idx, int attempt,
		   int64_t *job, char *err, size_t errlen)
{
	const struct conf *c = d->conf;
	const char *cmd = c->mover_command ? c->mover_command : MOVER_DEFAULT_COMMAND;
	char tok[sizeof(MOVER_TOKEN_ENV) + MOVER_TOKEN_HEX + 1];
	char *env[] = { "PATH=/usr/sbin:/usr/bin:/sbin:/bin", tok, NULL };
	char name[64], script[XFER_PATH_MAX + 512], srv[300];
	submit_response_msg_t *resp = NULL;
	job_desc_msg_t jd;
	int n;

	if (_server(c, srv, sizeof(srv)) < 0 || strchr(cmd, '\'')) {
		snprintf(err, errlen, "MoverCommand or the daemon's address cannot be quoted "
			 "for the mover job's script");
		return -1;
	}
	snprintf(name, sizeof(name), "stagehand-mover-%lld", (long long)r->id);
	n = snprintf(script, sizeof(script), "#!/bin/sh\n# stagehand request %lld, shard %d\n"
		     "exec '%s' --server '%s' --request %lld --shard %d\n", (long long)r->id, idx,
		     cmd, srv, (long long)r->id, idx);
	if (n < 0 || n >= (int)sizeof(script)) {
		snprintf(err, errlen, "mover job script too long (MoverCommand)");
		return -1;
	}
	/* The shard's token goes in the job's environment, never in its script
	   (which its owner can read back from slurmctld): mover_auth.h. */
	memcpy(tok, MOVER_TOKEN_ENV "=", sizeof(MOVER_TOKEN_ENV));
	if (mover_auth_token(d->movers->auth, r->id, idx, attempt,
			     tok + sizeof(MOVER_TOKEN_ENV)) < 0) {
		snprintf(err, errlen, "cannot make the mover job's token (libcrypto HMAC failed)");
		return -1;
	}
	slurm_init_job_desc_msg(&jd);
	jd.name = name;
	jd.partition = c->mover_partition;
	jd.user_id = r->uid;
	jd.group_id = r->gid;
	jd.script = script;
	jd.work_dir = "/";
	jd.std_out = "/dev/null";
	jd.std_err = "/dev/null";
	jd.environment = env;
	jd.env_size = 2;
	jd.min_nodes = 1;
	jd.max_nodes = 1;
	jd.num_tasks = 1;
	/* A node failure ends the job; the daemon submits a new one (a new job id
	   fences off the old mover's reports should it still be running). */
	jd.requeue = 0;
	if (slurm_submit_batch_job(&jd, &resp) != SLURM_SUCCESS) {
		snprintf(err, errlen, "slurm_submit_batch_job (partition %s, uid %u): %s",
			 c->mover_partition, (unsigned)r->uid, slurm_strerror(slurm_errno_now()));
		OPENSSL_cleanse(tok, sizeof(tok));
		return -1;
	}
	OPENSSL_cleanse(tok, sizeof(tok));
	*job = slurm_compat_submitted_id(resp);
	slurm_free_submit_response_response_msg(resp);
	return 0;
}

/* 1 the job is pending or running, 0 it ended (how says how), -1 unknown now. */
static int _job_alive(int64_t job, char *how, size_t howlen)
{
	job_info_msg_t *msg = NULL;
	int alive;

	if (slurm_compat_load_job(&msg, (uint32_t)job, SHOW_ALL) != SLURM_SUCCESS) {
		if (slurm_errno_now() == ESLURM_INVALID_JOB_ID) {
			snprintf(how, howlen, "is no longer known to slurmctld");
			return 0;
		}
		return -1;
	}
	if (!msg || msg->record_count < 1) {
		slurm_free_job_info_msg(msg);
		snprintf(how, howlen, "is no longer known to slurmctld");
		return 0;
	}
	{
		slurm_job_info_t *ji = &msg->job_array[0];
		uint32_t base = ji->job_state & JOB_STATE_BASE;

		alive = base == JOB_PENDING || base == JOB_RUNNING || base == JOB_SUSPENDED;
		if (!alive)
			snprintf(how, howlen, "ended %s on %s", sjob_state_name(ji->job_state),
				 ji->nodes && *ji->nodes ? ji->nodes : "no node");
	}
	slurm_free_job_info_msg(msg);
	return alive;
}

static void _kill_jobs(struct daemon *d, int64_t req, const struct queue_shard *s, int n,
		       const char *why)
{
	char err[256];

	for (int i = 0; i < n; i++) {
		if (s[i].state != QSH_SUBMITTED || !s[i].slurm_job)
			continue;
		if (slurm_compat_kill_job((uint32_t)s[i].slurm_job, SIGKILL, 0) != SLURM_SUCCESS &&
		    slurm_errno_now() != ESLURM_ALREADY_DONE &&
		    slurm_errno_now() != ESLURM_INVALID_JOB_ID)
			log_warn("request %lld: cannot cancel mover job %lld: %s", (long long)req,
				 (long long)s[i].slurm_job, slurm_strerror(slurm_errno_now()));
		else
			log_info("request %lld: mover job %lld (shard %d) cancelled: %s",
				 (long long)req, (long long)s[i].slurm_job, s[i].idx, why);
		queue_shard_set(d->q, req, s[i].idx, s[i].slurm_job, QSH_QUEUED, why, err,
				sizeof(err));
	}
}

/*
 * One request: submit queued shards, notice mover jobs that ended without
 * a result, fail the request when a shard failed for good or too often.
 * Returns 1 when every shard is done, -1 when the request left (failed,
 * cancelled), 0 otherwise.
 */
static int _step(struct daemon *d, const struct queue_request *r)
{
	struct queue_shard *s = NULL;
	char err[512], how[256], why[1024];
	int n = 0, done = 0, final = 0, rc = 0;
	int max_attempts = r->max_retries + 2;

	if (queue_shards_list(d->q, r->id, &s, &n, err, sizeof(err)) < 0) {
		log_err("request %lld: cannot read its shards: %s", (long long)r->id, err);
		return 0;
	}
	why[0] = '\0';
	for (int i = 0; i < n && !why[0]; i++) {
		struct queue_shard *e = &s[i];
		int64_t job = 0;

		if (e->state == QSH_DONE) {
			done++;
		} else if (e->state == QSH_FAILED) {
			snprintf(why, sizeof(why), "shard %d: %s", e->idx,
				 e->error ? e->error : "failed");
			final = 1;
		} else if (e->state == QSH_QUEUED && e->attempts >= max_attempts) {
			snprintf(why, sizeof(why), "shard %d: %d mover jobs ran without finishing it; "
				 "the last: %s", e->idx, e->attempts, e->error ? e->error : "?");
		} else if (e->state == QSH_QUEUED) {
			if (_submit(d, r, e->idx, e->attempts + 1, &job, err, sizeof(err)) < 0) {
				log_err("request %lld: shard %d: %s", (long long)r->id, e->idx, err);
				continue;	/* tried again next tick */
			}
			if (queue_shard_submitted(d->q, r->id, e->idx, job, err, sizeof(err)) < 0)
				log_err("request %lld: shard %d: mover job %lld not recorded: %s",
					(long long)r->id, e->idx, (long long)job, err);
			log_info("request %lld: shard %d (%lld files, %lld bytes): mover job %lld "
				 "submitted as uid %u to partition %s (attempt %d)", (long long)r->id,
				 e->idx, (long long)e->files, (long long)e->bytes, (long long)job,
				 (unsigned)r->uid, d->conf->mover_partition, e->attempts + 1);
		} else if (_job_alive(e->slurm_job, how, sizeof(how)) == 0) {
			char msg[512];

			snprintf(msg, sizeof(msg), "mover job %lld %s without reporting its result",
				 (long long)e->slurm_job, how);
			/* Its unfinished files go back: the next job has the verified ones
			   in its resume set. */
			if (queue_shard_set(d->q, r->id, e->idx, e->slurm_job, QSH_QUEUED, msg, err,
					    sizeof(err)) == 0)
				log_warn("request %lld: shard %d: %s; its unfinished files are queued "
					 "again", (long long)r->id, e->idx, msg);
		}
	}
	if (why[0]) {
		struct queue_failure f = { why, !final, d->conf->retry_backoff, time(NULL) };

		if (final)
			_kill_jobs(d, r->id, s, n, "another shard failed");
		if (queue_request_fail(d->q, r->id, &f, &final, err, sizeof(err)) < 0)
			log_err("request %lld: cannot record failure: %s", (long long)r->id, err);
		else
			log_warn("request %lld: failed%s: %s", (long long)r->id,
				 final ? " (final)" : ", will retry", why);
		rc = -1;
	} else if (n > 0 && done == n) {
		rc = 1;
	}
	queue_shards_free(s, n);
	return rc;
}

/*
 * Plans the planner finished: split ones join the mover requests, the
 * others go to a local worker when one is free (they wait in done until
 * then), and those whose request left are dropped. Every turn, so a plan
 * is picked up as soon as the planner wakes the loop. Also stops the
 * listing of a request that was cancelled meanwhile.
 */
static void _planned(struct mover_exec *m, int64_t now_ms)
{
	struct daemon *d = m->d;
	struct plan_job *j, *keep = NULL;
	char err[256];

	pthread_mutex_lock(&m->lock);
	j = m->done;
	m->done = NULL;
	if (now_ms >= m->check_ms) {
		m->check_ms = now_ms + TICK_MS;
		for (int i = 0; i < PLANNERS; i++)
			if (m->cur[i] && !_still_running(d, m->cur[i]->r->id))
				atomic_store(&m->cur[i]->cancel, 1);
	}
	pthread_mutex_unlock(&m->lock);
	while (j) {
		struct plan_job *next = j->next;
		int gone = 1;

		if (j->verify && j->split != -1 && (j->vwait || _verified(d, j))) {
			/* Read back and as recorded: the final pass, when a worker is free. */
			if (worker_pool_busy(d->pool) < d->conf->workers) {
				if (queue_shards_forget_files(d->q, j->r->id, err, sizeof(err)) < 0)
					log_warn("request %lld: %s", (long long)j->r->id, err);
				log_info("request %lld: a local worker makes the final pass (what no "
					 "shard held, labels, the count)", (long long)j->r->id);
				worker_pool_start(d->pool, j->r);	/* takes r */
				j->r = NULL;
			} else {
				j->vwait = 1;
				j->next = keep;
				keep = j;
				gone = 0;
			}
		} else if (j->verify && j->split != -1) {
			;	/* failed: recorded by _verified */
		} else if (j->split == 1 && _add(m, j->r) == 0) {
			j->r = NULL;
			m->next_ms = 0;
		} else if (j->split == 1) {
			log_err("request %lld: out of memory", (long long)j->r->id);
			queue_request_checkpoint(d->q, j->r->id, err, sizeof(err));
		} else if (j->split == 0 && worker_pool_busy(d->pool) < d->conf->workers) {
			worker_pool_start(d->pool, j->r);	/* takes r */
			j->r = NULL;
		} else if (j->split == 0) {
			j->next = keep;
			keep = j;
			gone = 0;
		} else {
			log_info("request %lld: left while it was listed for its mover plan",
				 (long long)j->r->id);
		}
		if (gone)
			_plan_job_free(j);
		j = next;
	}
	if (keep) {
		pthread_mutex_lock(&m->lock);
		for (j = keep; j->next; j = j->next)
			;
		j->next = m->done;
		m->done = keep;
		pthread_mutex_unlock(&m->lock);
	}
}

void mover_exec_tick(struct mover_exec *m, int64_t now_ms)
{
	struct daemon *d = m->d;
	int k = 0;

	_planned(m, now_ms);
	if (!m->n || now_ms < m->next_ms)
		return;
	m->next_ms = now_ms + TICK_MS;
	for (int i = 0; i < m->n; i++) {
		struct queue_request *r = m->r[i], *cur = NULL;
		char err[512];
		int rc = 0;

		if (queue_request_get(d->q, r->id, &cur, err, sizeof(err)) != 0) {
			m->r[k++] = r;
			continue;
		}
		if (cur->state != QS_RUNNING && cur->state != QS_VERIFYING) {
			/* Cancelled (or failed) from outside: no mover job may go on. */
			struct queue_shard *s = NULL;
			int n = 0;

			if (queue_shards_list(d->q, r->id, &s, &n, err, sizeof(err)) == 0)
				_kill_jobs(d, r->id, s, n, cur->state == QS_CANCELLED ?
					   "request cancelled" : "request no longer running");
			queue_shards_free(s, n);
			rc = -1;
		} else {
			rc = _step(d, r);
		}
		queue_request_free(cur);
		if (rc == 1 && _verify_later(m, r) == 0) {
			;	/* the planner threads have it now */
		} else if (rc == -1) {
			queue_request_free(r);
		} else {
			m->r[k++] = r;
		}
	}
	m->n = k;
}
