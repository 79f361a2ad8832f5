/*
 * xfer_bucket.c - the shared bandwidth token bucket (see xfer.h): one cap in
 * shared memory that every forked worker draws from, with a per-worker bucket
 * in front of it (yield).
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>
#include <time.h>

#include "xfer.h"

struct xfer_bucket {
	pthread_mutex_t lock;    /* process-shared, robust: a worker may die holding it */
	uint64_t rate;           /* bytes per second, 0 = unlimited */
	double tokens;           /* may go negative: a debt the next callers wait out */
	double last;             /* monotonic seconds of the last refill */
	volatile int paused;     /* 1: takers wait until it is 0 again (yield) */
	struct xfer_bucket *parent; /* also charged after this one (the global cap) */
};

static double _mono(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

struct xfer_bucket *xfer_bucket_create(uint64_t rate)
{
	pthread_mutexattr_t ma;
	struct xfer_bucket *b = mmap(NULL, sizeof(*b), PROT_READ | PROT_WRITE,
				     MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	if (b == MAP_FAILED)
		return NULL;
	pthread_mutexattr_init(&ma);
	pthread_mutexattr_setpshared(&ma, PTHREAD_PROCESS_SHARED);
	pthread_mutexattr_setrobust(&ma, PTHREAD_MUTEX_ROBUST);
	pthread_mutex_init(&b->lock, &ma);
	pthread_mutexattr_destroy(&ma);
	b->rate = rate;
	b->tokens = 0;
	b->last = _mono();
	return b;
}

void xfer_bucket_destroy(struct xfer_bucket *b)
{
	if (b) {
		pthread_mutex_destroy(&b->lock);
		munmap(b, sizeof(*b));
	}
}

static void _lock(struct xfer_bucket *b)
{
	if (pthread_mutex_lock(&b->lock) == EOWNERDEAD)
		pthread_mutex_consistent(&b->lock);
}

void xfer_bucket_set_rate(struct xfer_bucket *b, uint64_t rate)
{
	_lock(b);
	b->rate = rate;
	b->tokens = 0;
	b->last = _mono();
	pthread_mutex_unlock(&b->lock);
}

void xfer_bucket_set_parent(struct xfer_bucket *b, struct xfer_bucket *parent)
{
	b->parent = parent;
}

void xfer_bucket_set_paused(struct xfer_bucket *b, int paused)
{
	__atomic_store_n(&b->paused, paused, __ATOMIC_SEQ_CST);
}

int xfer_bucket_paused(const struct xfer_bucket *b)
{
	return __atomic_load_n(&b->paused, __ATOMIC_SEQ_CST);
}

static void _sleep(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (double)(time_t)s) * 1e9) };

	nanosleep(&ts, NULL);
}

void xfer_bucket_take(struct xfer_bucket *b, uint64_t n, volatile sig_atomic_t *stop)
{
	double wait = 0, now;

	if (!b)
		return;
	/* Paused (yielding to running jobs): hold the bytes already moved until released. */
	while (xfer_bucket_paused(b) && !(stop && *stop))
		_sleep(0.05);
	_lock(b);
	if (b->rate) {
		double burst = (double)b->rate / 4;	/* at most 250 ms of credit */

		now = _mono();
		b->tokens += (now - b->last) * (double)b->rate;
		if (b->tokens > burst)
			b->tokens = burst;
		b->last = now;
		b->tokens -= (double)n;
		if (b->tokens < 0)
			wait = -b->tokens / (double)b->rate;
	}
	pthread_mutex_unlock(&b->lock);
	while (wait > 0 && !(stop && *stop)) {
		double step = wait > 0.2 ? 0.2 : wait;

		_sleep(step);
		wait -= step;
		/* A pause set while we wait out a debt takes effect at once. */
		while (xfer_bucket_paused(b) && !(stop && *stop))
			_sleep(0.05);
	}
	if (b->parent)
		xfer_bucket_take(b->parent, n, stop);
}
