/* xfer.c - see xfer.h: backend table, record protocol, token bucket. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "xfer.h"

static const struct xfer_backend *const _backends[] = {
	&xfer_backend_local,
	&xfer_backend_null,
	&xfer_backend_bundle,
	&xfer_backend_url,
	NULL,
};

const struct xfer_backend *xfer_backend_select(const char *source, const char *name,
					       char *err, size_t errlen)
{
	const char *sep = strstr(source, "://");

	if (name) {
		for (int i = 0; _backends[i]; i++)
			if (strcmp(_backends[i]->name, name) == 0)
				return _backends[i];
		snprintf(err, errlen, "unknown backend '%s' (known: local, null, bundle, url)", name);
		return NULL;
	}
	if (sep) {
		size_t n = (size_t)(sep - source);

		for (int i = 0; _backends[i]; i++)
			for (const char *const *s = _backends[i]->schemes; s && *s; s++)
				if (strlen(*s) == n && strncasecmp(*s, source, n) == 0)
					return _backends[i];
		snprintf(err, errlen, "no backend for scheme '%.*s' in this build: only "
			 "absolute paths can be transferred", (int)(n > 32 ? 32 : n), source);
		return NULL;
	}
	return &xfer_backend_local;
}

static int _write_all(int fd, const void *buf, size_t len)
{
	const char *p = buf;

	while (len) {
		ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		p += n;
		len -= (size_t)n;
	}
	return 0;
}

static size_t _pack(char *out, enum xfer_rec_type type, int code, int64_t a, int64_t b,
		    int64_t c, const char *cks, const char *path, const char *text)
{
	struct xfer_rec r;
	size_t pl = path ? strnlen(path, XFER_PATH_MAX) : 0;
	size_t tl = text ? strnlen(text, XFER_TEXT_MAX) : 0;

	memset(&r, 0, sizeof(r));
	r.type = type;
	r.code = code;
	r.a = a;
	r.b = b;
	r.c = c;
	if (cks)
		snprintf(r.cks, sizeof(r.cks), "%s", cks);
	r.path_len = (uint16_t)pl;
	r.text_len = (uint16_t)tl;
	memcpy(out, &r, sizeof(r));
	if (pl)
		memcpy(out + sizeof(r), path, pl);
	if (tl)
		memcpy(out + sizeof(r) + pl, text, tl);
	return sizeof(r) + pl + tl;
}

/* A worker may copy with several threads: one record goes out whole. */
static pthread_mutex_t _emit_lock = PTHREAD_MUTEX_INITIALIZER;

static int _send(struct xfer_ctx *ctx, const char *buf, size_t n)
{
	int rc;

	pthread_mutex_lock(&_emit_lock);
	rc = _write_all(ctx->chan, buf, n);
	pthread_mutex_unlock(&_emit_lock);
	return rc;
}

int xfer_emit(struct xfer_ctx *ctx, enum xfer_rec_type type, int code, int64_t a, int64_t b,
	      int64_t c, const char *cks, const char *path, const char *text)
{
	char buf[sizeof(struct xfer_rec) + XFER_PATH_MAX + XFER_TEXT_MAX];
	size_t n = _pack(buf, type, code, a, b, c, cks, path, text);

	return _send(ctx, buf, n);
}

int xfer_emit_file(struct xfer_ctx *ctx, const char *relpath, int64_t size, int64_t mtime_ns,
		   int mode, int64_t started, int64_t ended, const char *cks_src,
		   const char *cks_dst)
{
	char buf[sizeof(struct xfer_rec) + XFER_PATH_MAX + XFER_TEXT_MAX];
	size_t n = _pack(buf, XR_ITEM_FILE, 0, size, mtime_ns, mode, cks_src, relpath, NULL);
	struct xfer_rec *r = (struct xfer_rec *)buf;

	r->d = started;
	r->e = ended;
	snprintf(r->cks2, sizeof(r->cks2), "%s", cks_dst ? cks_dst : "");
	return _send(ctx, buf, n);
}

int xfer_emit_label_fd(struct xfer_ctx *ctx, int fd, const char *name, const char *value)
{
	char buf[sizeof(struct xfer_rec) + XFER_PATH_MAX + XFER_TEXT_MAX];
	char cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov;
	struct msghdr mh;
	struct cmsghdr *cm;
	size_t n = _pack(buf, XR_LABEL, 0, 0, 0, 0, NULL, name, value);
	ssize_t w;

	memset(&mh, 0, sizeof(mh));
	memset(cbuf, 0, sizeof(cbuf));
	iov.iov_base = buf;
	iov.iov_len = n;
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	mh.msg_control = cbuf;
	mh.msg_controllen = sizeof(cbuf);
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	pthread_mutex_lock(&_emit_lock);
	do
		w = sendmsg(ctx->chan, &mh, MSG_NOSIGNAL);
	while (w < 0 && errno == EINTR);
	if (w >= 0 && (size_t)w != n && _write_all(ctx->chan, buf + w, n - (size_t)w) < 0)
		w = -1;
	pthread_mutex_unlock(&_emit_lock);
	return w < 0 ? -1 : 0;
}

void xfer_logf(struct xfer_ctx *ctx, int level, const char *fmt, ...)
{
	char text[XFER_TEXT_MAX];
	va_list ap;

	va_start(ap, fmt);
	if (vsnprintf(text, sizeof(text), fmt, ap) >= (int)sizeof(text))
		memcpy(text + sizeof(text) - 4, "...", 4);
	va_end(ap);
	xfer_emit(ctx, XR_LOG, level, 0, 0, 0, NULL, NULL, text);
}

ssize_t xfer_parse(const char *buf, size_t len, struct xfer_rec *rec,
		   char path[XFER_PATH_MAX + 1], char text[XFER_TEXT_MAX + 1])
{
	size_t need;

	if (len < sizeof(*rec))
		return 0;
	memcpy(rec, buf, sizeof(*rec));
	if (rec->type < XR_TOTALS || rec->type > XR_ITEM_FILE || rec->path_len > XFER_PATH_MAX ||
	    rec->text_len > XFER_TEXT_MAX || memchr(rec->cks, '\0', sizeof(rec->cks)) == NULL ||
	    memchr(rec->cks2, '\0', sizeof(rec->cks2)) == NULL)
		return -1;
	need = sizeof(*rec) + rec->path_len + rec->text_len;
	if (len < need)
		return 0;
	memcpy(path, buf + sizeof(*rec), rec->path_len);
	path[rec->path_len] = '\0';
	memcpy(text, buf + sizeof(*rec) + rec->path_len, rec->text_len);
	text[rec->text_len] = '\0';
	if (strlen(path) != rec->path_len || strlen(text) != rec->text_len)
		return -1;	/* embedded NUL */
	return (ssize_t)need;
}

/* ---- token bucket ---- */

struct xfer_bucket {
	pthread_mutex_t lock;    /* process-shared, robust: a worker may die holding it */
	uint64_t rate;           /* bytes per second, 0 = unlimited */
	double tokens;           /* may go negative: a debt the next callers wait out */
	double last;             /* monotonic seconds of the last refill */
	volatile int paused;     /* 1: takers wait until it is 0 again (yield) */
	struct xfer_bucket *parent; /* also charged after this one (the global cap) */
	/* Reported by the copy loops (xfer_bucket_wrote), read by the pace thread. */
	volatile int flush;      /* 1: write back each written range at once */
	dev_t dev;               /* st_dev of the file written, 0 = not yet known */
	uint64_t io_rbytes;      /* bytes taken since the last drain */
	uint64_t io_wbytes;      /* bytes written since the last drain */
	uint64_t io_rmax, io_wmax; /* largest take / write seen */
	double lat_sum;          /* latency samples (ns per MiB) since the last drain */
	int lat_n;
	int64_t last_call_us;    /* monotonic us of the last take/wrote: an I/O just ended */
	uint64_t sleeps;         /* times a taker slept (rate or pause); a latency sample
				    spanning a sleep measures the bucket, not the device */
};

/* This thread's previous bucket call: where latency samples start. */
static __thread const struct xfer_bucket *_prev_b;
static __thread double _prev_t;
static __thread uint64_t _prev_sleeps;
/* The worker's stop flag, as the takes pass it: a paused writer leaves on SIGTERM. */
static volatile sig_atomic_t *_stop_flag;

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
	_prev_t = _mono();
	_prev_sleeps = __atomic_load_n(&b->sleeps, __ATOMIC_RELAXED);
}

void xfer_bucket_take(struct xfer_bucket *b, uint64_t n, volatile sig_atomic_t *stop)
{
	if (!b)
		return;
	__atomic_store_n(&b->last_call_us, (int64_t)(_mono() * 1e6), __ATOMIC_RELAXED);
	__atomic_add_fetch(&b->io_rbytes, n, __ATOMIC_RELAXED);
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
	}
}

void xfer_bucket_wrote(struct xfer_bucket *b, int fd, int64_t off, uint64_t len)
{
	double now;

	if (!b || fd < 0)
		return;
	__atomic_store_n(&b->last_call_us, (int64_t)(_mono() * 1e6), __ATOMIC_RELAXED);
	if (__atomic_load_n(&b->dev, __ATOMIC_RELAXED) == 0) {
		struct stat st;

		if (fstat(fd, &st) == 0)
			__atomic_store_n(&b->dev, st.st_dev, __ATOMIC_RELAXED);
	}
	if (off < 0) {	/* appended: the len bytes before the file position */
		off_t pos = lseek(fd, 0, SEEK_CUR);

		off = pos >= (off_t)len ? (int64_t)pos - (int64_t)len : 0;
	}
	if (b->flush && len >= (256u << 10)) {
		int fl = fcntl(fd, F_GETFL);

		/* Buffered: the range goes to the device now, while the transfer is
		   allowed to run, instead of whenever writeback gets to it. Smaller
		   writes (small files) are left to SyncMode's batches: they leave at
		   most a batch (8 MiB) of dirty pages, and a write-back each would
		   cost small-file archives their batching. */
		if (fl >= 0 && !(fl & O_DIRECT))
			sync_file_range(fd, off, (off_t)len, SYNC_FILE_RANGE_WAIT_BEFORE |
					SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER);
	}
	now = _mono();
	__atomic_add_fetch(&b->io_wbytes, len, __ATOMIC_RELAXED);
	if (len > __atomic_load_n(&b->io_wmax, __ATOMIC_RELAXED))
		__atomic_store_n(&b->io_wmax, len, __ATOMIC_RELAXED);
	/* Small writes are dominated by per-call costs: no sample. */
	if (_prev_b == b && len >= (256u << 10) &&
	    __atomic_load_n(&b->sleeps, __ATOMIC_RELAXED) == _prev_sleeps) {
		_lock(b);
		b->lat_sum += (now - _prev_t) * 1e9 / ((double)len / (1 << 20));
		b->lat_n++;
		pthread_mutex_unlock(&b->lock);
	}
	_wait_paused(b, _stop_flag);
	_mark(b);
}

void xfer_bucket_set_flush(struct xfer_bucket *b, int flush)
{
	__atomic_store_n(&b->flush, flush, __ATOMIC_SEQ_CST);
}

void xfer_bucket_adjust_rate(struct xfer_bucket *b, uint64_t rate)
{
	double now;

	_lock(b);
	if (rate != b->rate) {
		now = _mono();
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
	io->lat_sum = b->lat_sum;
	io->lat_n = b->lat_n;
	b->lat_sum = 0;
	b->lat_n = 0;
	pthread_mutex_unlock(&b->lock);
}

double xfer_bucket_idle_s(struct xfer_bucket *b)
{
	return _mono() - (double)__atomic_load_n(&b->last_call_us, __ATOMIC_RELAXED) / 1e6;
}

void xfer_bucket_reset_io(struct xfer_bucket *b)
{
	_lock(b);
	b->dev = 0;
	b->io_rbytes = b->io_wbytes = b->io_rmax = b->io_wmax = 0;
	b->lat_sum = 0;
	b->lat_n = 0;
	b->flush = 0;
	pthread_mutex_unlock(&b->lock);
}

const struct xfer_done_ent *xfer_done_find(const struct xfer_done_ent *d, size_t n,
					   const char *relpath)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(relpath, d[mid].relpath);

		if (c == 0)
			return &d[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return NULL;
}

int xfer_exclude_check(const char *rel, char *err, size_t errlen)
{
	size_t n = rel ? strlen(rel) : 0;

	if (n == 0) {
		snprintf(err, errlen, "an exclude entry is empty");
		return -1;
	}
	if (n >= XFER_PATH_MAX) {
		snprintf(err, errlen, "an exclude entry is %zu bytes; the limit is %d", n,
			 XFER_PATH_MAX - 1);
		return -1;
	}
	if (rel[0] == '/' || rel[n - 1] == '/') {
		snprintf(err, errlen, "exclude entry '%.120s' must be relative to the source, "
			 "without a leading or trailing '/'", rel);
		return -1;
	}
	for (const char *c = rel; *c; c++)
		if ((unsigned char)*c < 0x20 || *c == 0x7f) {
			snprintf(err, errlen, "an exclude entry contains a control character");
			return -1;
		}
	for (const char *s = rel; s;) {
		const char *e = strchr(s, '/');
		size_t k = e ? (size_t)(e - s) : strlen(s);

		if (k == 0 || (k == 1 && s[0] == '.') || (k == 2 && s[0] == '.' && s[1] == '.')) {
			snprintf(err, errlen, "exclude entry '%.120s' has an empty, '.' or '..' "
				 "component", rel);
			return -1;
		}
		s = e ? e + 1 : NULL;
	}
	return 0;
}

int xfer_excluded(const struct xfer_ctx *ctx, const char *rel)
{
	if (!ctx || !ctx->exclude || !rel)
		return 0;
	for (const char *const *x = ctx->exclude; *x; x++)
		if (strcmp(*x, rel) == 0)
			return 1;
	return 0;
}
