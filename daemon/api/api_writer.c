/* api_writer.c - see api_writer.h. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_writer.h"
#include "log.h"
#include "queue.h"

struct api_writer {
	struct daemon *d;
	pthread_t thread;
	pthread_mutex_t lock;        /* guards head, tail, stop, running */
	pthread_cond_t cond;
	struct api_wjob *head, *tail;
	int stop;
	int running;                 /* taking jobs: cleared, under lock, as it leaves */
	unsigned long submitted, answered, groups;   /* under lock */
	int (*after)(void *arg, struct api_wjob *j);  /* under lock: api_writer_set_after */
	void *after_arg;
};

/* Answer j: route it under the config's read lock, with its work order. */
static void _route(struct api_writer *w, struct api_wjob *j)
{
	pthread_rwlock_rdlock(&w->d->conf_lock);
	j->who.admin = api_is_admin(w->d, j->who.uid, j->who.gid);
	j->who.order = &j->order;
	/* j->jb stays: the listener frees it once the answer is sent, off this thread. */
	api_route_json(w->d, &j->who, j->c, j->method, j->url, j->jb, j->body_err, &j->rep);
	pthread_rwlock_unlock(&w->d->conf_lock);
}

/*
 * The submits from j on, as many as follow each other, in one transaction:
 * each is answered as it would be alone (a refused one changes nothing:
 * its statements are a savepoint of their own), and if the one commit
 * fails every one of them is told so (500, as a single one's failed
 * commit is). Returns the first job after them.
 */
static struct api_wjob *_group(struct api_writer *w, struct api_wjob *j)
{
	struct api_wjob *end = j, *k;
	char err[512];
	int batched, n = 0;

	while (end && end->submit)
		end = end->next;
	batched = queue_batch_begin(w->d->q) == 0;
	for (k = j; k != end; k = k->next, n++)
		_route(w, k);
	if (batched && queue_batch_end(w->d->q, err, sizeof(err)) < 0) {
		log_err("api: %d request(s) to create requests not stored: %s", n, err);
		for (k = j; k != end; k = k->next)
			if (k->rep.status < 300)
				api_error(&k->rep, 500, "could not store the request: %s; nothing "
					  "was created, submit again", err);
	}
	if (n > 1) {
		pthread_mutex_lock(&w->lock);
		w->groups++;
		pthread_mutex_unlock(&w->lock);
	}
	return end;
}

static void *_run(void *arg)
{
	struct api_writer *w = arg;

	pthread_mutex_lock(&w->lock);
	for (;;) {
		struct api_wjob *j, *next;

		while (!w->head && !w->stop)
			pthread_cond_wait(&w->cond, &w->lock);
		if (!w->head) {
			w->running = 0;	/* stop, and nothing waits: submit refuses from now on */
			break;
		}
		j = w->head;
		w->head = w->tail = NULL;
		pthread_mutex_unlock(&w->lock);
		while (j) {
			struct api_wjob *after;

			if (j->submit) {
				after = _group(w, j);
			} else {
				_route(w, j);
				after = j->next;
			}
			/* Resumed, a job belongs to its connection again: read next first. */
			for (; j != after; j = next) {
				int handed;

				next = j->next;
				pthread_mutex_lock(&w->lock);
				w->answered++;
				/* Its status text for slurmctld is set off this thread. */
				handed = j->order.status_job > 0 && w->after &&
					 w->after(w->after_arg, j) == 0;
				pthread_mutex_unlock(&w->lock);
				if (!handed)
					MHD_resume_connection(j->c);
			}
		}
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

struct api_writer *api_writer_start(struct daemon *d, char *err, size_t errlen)
{
	struct api_writer *w = calloc(1, sizeof(*w));
	int e;

	if (!w) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	w->d = d;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->cond, NULL);
	w->running = 1;
	e = pthread_create(&w->thread, NULL, _run, w);
	if (e == 0)
		pthread_setname_np(w->thread, "api-writer");	/* top -H, ps -L, the tests */
	if (e != 0) {
		snprintf(err, errlen, "cannot start the API writer thread: %s", strerror(e));
		pthread_cond_destroy(&w->cond);
		pthread_mutex_destroy(&w->lock);
		free(w);
		return NULL;
	}
	return w;
}

/*
 * Append j to the writer's list and wake it: 0, or -1 if the writer is
 * stopping or absent. suspend: suspend j->c first, under the same lock,
 * so the writer cannot resume the connection before it is suspended.
 */
static int _enqueue(struct api_writer *w, struct api_wjob *j, int suspend)
{
	int rc = -1;

	if (!w)
		return -1;
	j->next = NULL;
	pthread_mutex_lock(&w->lock);
	if (w->running && !w->stop) {
		if (suspend)
			MHD_suspend_connection(j->c);
		if (w->tail)
			w->tail->next = j;
		else
			w->head = j;
		w->tail = j;
		w->submitted++;
		pthread_cond_signal(&w->cond);
		rc = 0;
	}
	pthread_mutex_unlock(&w->lock);
	return rc;
}

int api_writer_submit(struct api_writer *w, struct api_wjob *j)
{
	return _enqueue(w, j, 1);
}

/* The prep stage's job: its connection was suspended when the prep stage took it. */
int api_writer_take(struct api_writer *w, struct api_wjob *j)
{
	return _enqueue(w, j, 0);
}

void api_writer_set_after(struct api_writer *w, int (*after)(void *arg, struct api_wjob *j),
			  void *arg)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->after = after;
	w->after_arg = arg;
	pthread_mutex_unlock(&w->lock);
}

void api_writer_stop(struct api_writer *w)
{
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	w->stop = 1;
	pthread_cond_signal(&w->cond);
	pthread_mutex_unlock(&w->lock);
	pthread_join(w->thread, NULL);
	log_info("api: the writer thread answered %lu request(s); %lu commit(s) stored several "
		 "requests at once", w->answered, w->groups);
	pthread_cond_destroy(&w->cond);
	pthread_mutex_destroy(&w->lock);
	free(w);
}

void api_writer_stats(struct api_writer *w, unsigned long *waiting, unsigned long *answered,
		      unsigned long *groups)
{
	*waiting = *answered = *groups = 0;
	if (!w)
		return;
	pthread_mutex_lock(&w->lock);
	*waiting = w->submitted - w->answered;
	*answered = w->answered;
	*groups = w->groups;
	pthread_mutex_unlock(&w->lock);
}
