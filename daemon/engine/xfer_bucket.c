/*
 * xfer_bucket.c - the shared bandwidth token bucket (see xfer.h): one cap in
 * shared memory that every forked worker draws from, with a per-worker bucket
 * in front of it (yield), and what the copy loops report of their I/O
 * (xfer_bucket_wrote) for the pace controller (pace.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>

#include "monoclock.h"
#include "xfer.h"

struct xfer_bucket {
	pthread_mutex_t lock;    /* process-shared, robust: a worker may die holding it */
	uint64_t rate;           /* bytes per second, 0 = unlimited */
	double tokens;           /* may go negative: a debt the next callers wait out */
	double last;             /* monotonic seconds of the last refill */
	volatile int paused;     /* 1: takers wait until it is 0 again (yield) */
	struct xfer_bucket *parent; /* also charged after this one (the global cap) */
	/* Reported by the copy loops (xfer_bucket_wrote), read by the pace thread. */
	volatile int flush;      /* XFER_FLUSH_*: write back each written range at once */
	dev_t dev;               /* st_dev of the file written, 0 = not yet known */
	uint64_t io_rbytes;      /* bytes taken since the last drain */
	uint64_t io_wbytes;      /* bytes written since the last drain */
	uint64_t io_rmax, io_wmax; /* largest take / write seen */
	double lat_sum[XFER_LAT_CLASSES]; /* latency samples (ns per MiB) since the last
					     drain, by class */
	int lat_n[XFER_LAT_CLASSES];
	uint64_t starts;         /* I/Os begun (takes): another thread's, seen during a
				    write, make its sample a concurrent one */
	int64_t last_call_us;    /* monotonic us of the last take/wrote: an I/O just ended */
	uint64_t sleeps;         /* times a taker slept (rate or pause); a latency sample
				    spanning a sleep measures the bucket, not the device */
};

/* This thread's previous bucket call: where latency samples start. */
static __thread const struct xfer_bucket *_prev_b;
static __thread double _prev_t;
static __thread uint64_t _prev_sleeps;
static __thread uint64_t _prev_starts;
/* The worker's stop flag, as the takes pass it: a paused writer leaves on SIGTERM. */
static volatile sig_atomic_t *_stop_flag;

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
	b->last = mono_s();
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
	b->last = mono_s();
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

static void _take(struct xfer_bucket *b, uint64_t n, volatile sig_atomic_t *stop);

static void _slept(struct xfer_bucket *b)
{
	__atomic_add_fetch(&b->sleeps, 1, __ATOMIC_RELAXED);
}

/* Paused: wait in short steps (a resume is seen within 10 ms). */
static void _wait_paused(struct xfer_bucket *b, volatile sig_atomic_t *stop)
{
	if (!xfer_bucket_paused(b))
		return;
	_slept(b);
	while (xfer_bucket_paused(b) && !(stop && *stop))
		_sleep(0.01);
}

static void _mark(const struct xfer_bucket *b)
{
	_prev_b = b;
	_prev_t = mono_s();
	_prev_sleeps = __atomic_load_n(&b->sleeps, __ATOMIC_RELAXED);
	_prev_starts = __atomic_load_n(&b->starts, __ATOMIC_RELAXED);
}

int xfer_lat_class(uint64_t len, int direct, int concurrent)
{
	int size = 0;

	for (uint64_t lim = 512u << 10; size < XFER_LAT_SIZES - 1 && len >= lim; lim *= 2)
		size++;
	return (size * 2 + !!direct) * 2 + !!concurrent;
}

void xfer_bucket_take(struct xfer_bucket *b, uint64_t n, volatile sig_atomic_t *stop)
{
	if (!b)
		return;
	__atomic_store_n(&b->last_call_us, (int64_t)(mono_s() * 1e6), __ATOMIC_RELAXED);
	__atomic_add_fetch(&b->io_rbytes, n, __ATOMIC_RELAXED);
	__atomic_add_fetch(&b->starts, 1, __ATOMIC_RELAXED);
	if (n > __atomic_load_n(&b->io_rmax, __ATOMIC_RELAXED))
		__atomic_store_n(&b->io_rmax, n, __ATOMIC_RELAXED);
	if (stop)
		_stop_flag = stop;
	_take(b, n, stop);
	_mark(b);
}

static void _take(struct xfer_bucket *b, uint64_t n, volatile sig_atomic_t *stop)
{
	double wait = 0, now;

	/* Paused (yielding to running jobs): hold the bytes already moved until released. */
	_wait_paused(b, stop);
	_lock(b);
	if (b->rate) {
		double burst = (double)b->rate / 4;	/* at most 250 ms of credit */

		now = mono_s();
		b->tokens += (now - b->last) * (double)b->rate;
		if (b->tokens > burst)
			b->tokens = burst;
		b->last = now;
		b->tokens -= (double)n;
		if (b->tokens < 0)
			wait = -b->tokens / (double)b->rate;
	}
	pthread_mutex_unlock(&b->lock);
	if (wait > 0)
		_slept(b);
	while (wait > 0 && !(stop && *stop)) {
		double step = wait > 0.2 ? 0.2 : wait;

		_sleep(step);
		wait -= step;
		/* A pause set while we wait out a debt takes effect at once. */
		_wait_paused(b, stop);
	}
	if (b->parent) {
		uint64_t before = __atomic_load_n(&b->parent->sleeps, __ATOMIC_RELAXED);

		_take(b->parent, n, stop);
		if (__atomic_load_n(&b->parent->sleeps, __ATOMIC_RELAXED) != before)
			_slept(b);	/* held by the global cap: not the device's latency */
		/* Paused while the global cap held us (the pause is on this bucket,
		   not the parent): the bytes wait for the resume, not the write. */
		_wait_paused(b, stop);
	}
}

void xfer_bucket_wrote(struct xfer_bucket *b, int fd, int64_t off, uint64_t len)
{
	double now;
	int direct = 0;

	if (!b || fd < 0)
		return;
	__atomic_store_n(&b->last_call_us, (int64_t)(mono_s() * 1e6), __ATOMIC_RELAXED);
	if (__atomic_load_n(&b->dev, __ATOMIC_RELAXED) == 0) {
		struct stat st;

		if (fstat(fd, &st) == 0)
			__atomic_store_n(&b->dev, st.st_dev, __ATOMIC_RELAXED);
	}
	if (off < 0) {	/* appended: the len bytes before the file position */
		off_t pos = lseek(fd, 0, SEEK_CUR);

		off = pos >= (off_t)len ? (int64_t)pos - (int64_t)len : 0;
	}
	/* Paced or paused (the only buckets whose samples the pace thread reads):
	   no fcntl on an unpaced transfer's writes. */
	if (b->flush && len >= (256u << 10)) {
		int fl = fcntl(fd, F_GETFL);

		direct = fl >= 0 && (fl & O_DIRECT);
		/* Buffered: the range goes to the device now, while the transfer is
		   allowed to run, instead of whenever writeback gets to it. Smaller
		   writes (small files) are left to SyncMode's batches: they leave at
		   most a batch (8 MiB) of dirty pages, and a write-back each would
		   cost small-file archives their batching. */
		if (!direct)
			sync_file_range(fd, off, (off_t)len, SYNC_FILE_RANGE_WAIT_BEFORE |
					SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
	}
	now = mono_s();
	__atomic_add_fetch(&b->io_wbytes, len, __ATOMIC_RELAXED);
	if (len > __atomic_load_n(&b->io_wmax, __ATOMIC_RELAXED))
		__atomic_store_n(&b->io_wmax, len, __ATOMIC_RELAXED);
	/* Small writes are dominated by per-call costs: no sample. */
	if (_prev_b == b && len >= (256u << 10) &&
	    __atomic_load_n(&b->sleeps, __ATOMIC_RELAXED) == _prev_sleeps) {
		/* Takes by this thread come before _mark: any start since is another's. */
		int k = xfer_lat_class(len, direct, __atomic_load_n(&b->starts, __ATOMIC_RELAXED) !=
				       _prev_starts);

		_lock(b);
		b->lat_sum[k] += (now - _prev_t) * 1e9 / ((double)len / (1 << 20));
		b->lat_n[k]++;
		pthread_mutex_unlock(&b->lock);
	}
	_wait_paused(b, _stop_flag);
	_mark(b);
}

void xfer_bucket_set_flush(struct xfer_bucket *b, int flush)
{
	__atomic_store_n(&b->flush, flush, __ATOMIC_SEQ_CST);
}

int xfer_bucket_paced_io(const struct xfer_bucket *b)
{
	return b && __atomic_load_n(&b->flush, __ATOMIC_SEQ_CST) == XFER_FLUSH_PACED;
}

int xfer_bucket_unbounded(const struct xfer_bucket *b)
{
	for (int up = 0; b; b = b->parent, up = 1) {
		if (!up && __atomic_load_n(&b->flush, __ATOMIC_SEQ_CST) != XFER_FLUSH_OFF)
			return 0;
		if (__atomic_load_n(&b->rate, __ATOMIC_RELAXED))
			return 0;
	}
	return 1;
}

void xfer_bucket_adjust_rate(struct xfer_bucket *b, uint64_t rate)
{
	double now;

	_lock(b);
	if (rate != b->rate) {
		now = mono_s();
		if (b->rate)	/* credit earned at the old rate up to now */
			b->tokens += (now - b->last) * (double)b->rate;
		if (b->tokens > 0)
			b->tokens = 0;	/* no saved-up burst across a change */
		b->last = now;
		b->rate = rate;
	}
	pthread_mutex_unlock(&b->lock);
}

void xfer_bucket_drain_io(struct xfer_bucket *b, struct xfer_bucket_io *io)
{
	io->dev = __atomic_load_n(&b->dev, __ATOMIC_RELAXED);
	io->rbytes = __atomic_exchange_n(&b->io_rbytes, 0, __ATOMIC_RELAXED);
	io->wbytes = __atomic_exchange_n(&b->io_wbytes, 0, __ATOMIC_RELAXED);
	io->rmax = __atomic_load_n(&b->io_rmax, __ATOMIC_RELAXED);
	io->wmax = __atomic_load_n(&b->io_wmax, __ATOMIC_RELAXED);
	_lock(b);
	memcpy(io->lat_sum, b->lat_sum, sizeof(io->lat_sum));
	memcpy(io->lat_n, b->lat_n, sizeof(io->lat_n));
	memset(b->lat_sum, 0, sizeof(b->lat_sum));
	memset(b->lat_n, 0, sizeof(b->lat_n));
	pthread_mutex_unlock(&b->lock);
}

double xfer_bucket_idle_s(struct xfer_bucket *b)
{
	return mono_s() - (double)__atomic_load_n(&b->last_call_us, __ATOMIC_RELAXED) / 1e6;
}

void xfer_bucket_reset_io(struct xfer_bucket *b)
{
	_lock(b);
	b->dev = 0;
	b->io_rbytes = b->io_wbytes = b->io_rmax = b->io_wmax = 0;
	memset(b->lat_sum, 0, sizeof(b->lat_sum));
	memset(b->lat_n, 0, sizeof(b->lat_n));
	b->flush = 0;
	pthread_mutex_unlock(&b->lock);
}
