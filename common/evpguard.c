/* evpguard.c - see evpguard.h.
 *
 * A mutex, a condition and a count rather than a read-write lock: the
 * child starts with fresh ones (a write lock taken by the parent's forking
 * thread cannot be released by the child's, whose thread id differs).
 */
#include "config.h"

#include <pthread.h>

#include "evpguard.h"

static pthread_mutex_t _mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t _cv = PTHREAD_COND_INITIALIZER;
static int _in;                       /* set-ups in flight, under _mu */
static int _forking;                  /* a fork is waiting for _in to be 0 */
static pthread_once_t _once = PTHREAD_ONCE_INIT;

/* In the forking thread, before the fork: wait for the set-ups in flight;
   _mu stays held until the fork is made, so none starts meanwhile. */
static void _prepare(void)
{
	pthread_mutex_lock(&_mu);
	_forking = 1;
	while (_in > 0)
		pthread_cond_wait(&_cv, &_mu);
}

static void _parent(void)
{
	_forking = 0;
	pthread_cond_broadcast(&_cv);
	pthread_mutex_unlock(&_mu);
}

/* The child has one thread and no set-up in flight. */
static void _child(void)
{
	pthread_mutex_init(&_mu, NULL);
	pthread_cond_init(&_cv, NULL);
	_in = 0;
	_forking = 0;
}

static void _register(void)
{
	pthread_atfork(_prepare, _parent, _child);
}

void evpguard_enter(void)
{
	pthread_once(&_once, _register);
	pthread_mutex_lock(&_mu);
	while (_forking)
		pthread_cond_wait(&_cv, &_mu);
	_in++;
	pthread_mutex_unlock(&_mu);
}

void evpguard_leave(void)
{
	pthread_mutex_lock(&_mu);
	if (--_in == 0)
		pthread_cond_broadcast(&_cv);
	pthread_mutex_unlock(&_mu);
}
