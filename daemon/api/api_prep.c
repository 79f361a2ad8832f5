/* api_prep.c - see api_prep.h. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_prep.h"
#include "log.h"
#include "slurm_owner.h"

#define LANES 2

struct _lane {
	struct api_prep *p;
	int idx;
	pthread_t thread;
	int started;
	struct api_wjob *head, *tail; /* under p->lock */
	unsigned long waiting;       /* under p->lock */
	uid_t last_uid;              /* the user served last (requests: taken in turn) */
	int served;                  /* last_uid is set */
};

struct api_prep {
	struct daemon *d;
	struct api_writer *w;
	struct sowner *owners;       /* whose job: slurmctld's answers, cached */
	pthread_mutex_t lock;        /* guards the lanes' lists and stop */
	pthread_cond_t cond;
	int stop;
	struct _lane lanes[LANES];
};

int api_prep_lane(const char *method, const char *url)
{
	if (api_route_is_event(method, url))
		return 0;
	if (api_route_is_submit(method, url))
		return 1;
	return -1;
}

/* Under p->lock: the next job of l, a user other than the last served first. */
static struct api_wjob *_take(struct _lane *l)
{
	struct api_wjob *j = l->head, *prev = NULL;

	if (l->served)
		for (; j && j->who.uid == l->last_uid && !j->finishing; prev = j, j = j->next)
			;
	if (!j) {
		j = l->head;
		prev = NULL;
	}
	if (prev)
		prev->next = j->next;
	else
		l->head = j->next;
	if (l->tail == j)
		l->tail = prev;
	j->next = NULL;
	l->waiting--;
	l->last_uid = j->who.uid;
	l->served = 1;
	return j;
}

/* Under p->lock. */
static void _put(struct _lane *l, struct api_wjob *j)
{
	j->next = NULL;
	if (l->tail)
		l->tail->next = j;
	else
		l->head = j;
	l->tail = j;
	l->waiting++;
}

static void _resume(struct api_wjob *j)
{
	MHD_resume_connection(j->c);
}

/* One job of the lane: prepared and handed on, refused, or (finishing) its status
   set. 1 for a job-start marked and waiting to settle (not resumed yet). */
static int _one(struct api_prep *p, struct api_wjob *j, int stopping)
{
	int answered;

	if (j->finishing) {
		api_order_finish(&j->order);
		_resume(j);
		return 0;
	}
	if (stopping) {
		api_error(&j->rep, 503, "stagehandd is shutting down: send it again when it is back");
		_resume(j);
		return 0;
	}
	pthread_rwlock_rdlock(&p->d->conf_lock);
	j->who.admin = api_is_admin(p->d, j->who.uid, j->who.gid);
	j->who.order = &j->order;
	answered = api_prepare(p->d, &j->who, j->method, j->url, j->jb, p->owners, &j->rep);
	pthread_rwlock_unlock(&p->d->conf_lock);
	if (answered == 2)
		return 1;
	if (answered)
		_resume(j);
	else if (api_writer_take(p->w, j) < 0) {
		api_error(&j->rep, 503, "stagehandd is shutting down: send it again when it is back");
		_resume(j);
	}
	return 0;
}

/*
 * The job-starts marked (newest first): one wait for the main loop covers
 * them all (the newest's; the others are applied by then), then each is
 * answered.
 */
static void _settle(struct api_prep *p, struct api_wjob *pending)
{
	while (pending) {
		struct api_wjob *j = pending;

		pending = j->next;
		j->next = NULL;
		pthread_rwlock_rdlock(&p->d->conf_lock);
		api_start_finish(p->d, &j->who, &j->order.start, &j->rep);
		pthread_rwlock_unlock(&p->d->conf_lock);
		_resume(j);
	}
}

#define SETTLE_BATCH_MAX 64	/* job-starts marked before one wait for them all */

static void *_run(void *arg)
{
	struct _lane *l = arg;
	struct api_prep *p = l->p;
	struct api_wjob *pending = NULL;
	int npending = 0;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct api_wjob *j;
		int stopping;

		/* Starts marked and nothing else waiting (or enough of them): settle. */
		if (pending && (!l->head || npending >= SETTLE_BATCH_MAX)) {
			pthread_mutex_unlock(&p->lock);
			_settle(p, pending);
			pending = NULL;
			npending = 0;
			pthread_mutex_lock(&p->lock);
			continue;
		}
		while (!l->head && !p->stop)
			pthread_cond_wait(&p->cond, &p->lock);
		if (!l->head)
			break;
		j = _take(l);
		stopping = p->stop;
		pthread_mutex_unlock(&p->lock);
		if (_one(p, j, stopping)) {
			j->next = pending;	/* newest first */
			pending = j;
			npending++;
		}
		pthread_mutex_lock(&p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	_settle(p, pending);
	return NULL;
}

struct api_prep *api_prep_start(struct daemon *d, struct api_writer *w, char *err,
				size_t errlen)
{
	struct api_prep *p = calloc(1, sizeof(*p));

	if (!p || !(p->owners = sowner_new())) {
		free(p);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	p->d = d;
	p->w = w;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	for (int i = 0; i < LANES; i++) {
		struct _lane *l = &p->lanes[i];
		int e;

		l->p = p;
		l->idx = i;
		e = pthread_create(&l->thread, NULL, _run, l);
		if (e != 0) {
			snprintf(err, errlen, "cannot start the API's prep thread: %s", strerror(e));
			api_prep_stop(p);
			return NULL;
		}
		l->started = 1;
		pthread_setname_np(l->thread, i == 0 ? "api-prep-events" : "api-prep-reqs");
	}
	return p;
}

int api_prep_submit(struct api_prep *p, struct api_wjob *j)
{
	int rc = -1;

	if (!p || j->lane < 0 || j->lane >= LANES)
		return -1;
	pthread_mutex_lock(&p->lock);
	if (!p->stop) {
		MHD_suspend_connection(j->c);
		_put(&p->lanes[j->lane], j);
		pthread_cond_broadcast(&p->cond);
		rc = 0;
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

int api_prep_after(void *arg, struct api_wjob *j)
{
	struct api_prep *p = arg;
	int rc = -1;

	pthread_mutex_lock(&p->lock);
	if (!p->stop) {
		j->finishing = 1;
		_put(&p->lanes[0], j);
		pthread_cond_broadcast(&p->cond);
		rc = 0;
	}
	pthread_mutex_unlock(&p->lock);
	return rc;
}

void api_prep_stats(struct api_prep *p, unsigned long waiting[2], unsigned long *calls,
		    unsigned long *hits)
{
	waiting[0] = waiting[1] = *calls = *hits = 0;
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < LANES; i++)
		waiting[i] = p->lanes[i].waiting;
	pthread_mutex_unlock(&p->lock);
	sowner_stats(p->owners, calls, hits);
}

void api_prep_stop(struct api_prep *p)
{
	if (!p)
		return;
	pthread_mutex_lock(&p->lock);
	p->stop = 1;
	pthread_cond_broadcast(&p->cond);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < LANES; i++)
		if (p->lanes[i].started)
			pthread_join(p->lanes[i].thread, NULL);
	pthread_cond_destroy(&p->cond);
	pthread_mutex_destroy(&p->lock);
	sowner_free(p->owners);
	free(p);
}
