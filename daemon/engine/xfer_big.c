/*
 * xfer_big.c - see xfer_big.h.
 *
 * Three stages overlap: the reader thread fills slot i (and hashes the
 * source), the calling thread writes slot i-1, the verifier thread reads
 * back chunk i-2 from the device (and hashes the destination). A slot is
 * reused once its chunk is written; the verifier has its own buffer. So the
 * source read, the destination write and the read-back run at the same time
 * instead of one after the other, and the final fsync finds little left.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <xxhash.h>

#include "xfer_big.h"
#include "xfer_engine.h"

/*
 * Unpaced: few, large I/Os, and enough of each stream's bytes in flight. A
 * stage has one I/O in flight at a time, so the chunk is what the device
 * sees queued per stream; the block layer splits it into requests of at
 * most max_sectors_kb (often 4 MiB). With 8 MiB chunks (two requests each)
 * a verified 4 GiB copy on a virtio disk took 12-20 s; with 32 MiB 6.8-12 s
 * (docs/performance.md). Memory: BIG_SLOTS + 1 chunks, 128 MiB per big copy
 * (one at a time per worker).
 *
 * A transfer that can be held or slowed keeps 8 MiB: YieldMode=pause
 * answers a job's start once our in-flight I/O has ended, for at most 0.3 s,
 * which 32 MiB can outlast on a 100 MiB/s device; and a rate (BandwidthCap)
 * is kept in bursts of one chunk.
 */
#define BIG_CHUNK (32u << 20)
#define BIG_CHUNK_HELD (8u << 20)
#define BIG_SLOTS 3
#define ALIGN 4096u

struct _big {
	struct xfer_ctx *ctx;
	int sfd, dfd, vfd;
	int sdirect, ddirect, vdirect;
	int64_t size, nchunks;
	size_t chunk;                        /* BIG_CHUNK; XFER_PACE_CHUNK when paced */
	int ahead;                           /* the reader reads chunk i once i - ahead was written */
	char *slot[BIG_SLOTS];
	size_t slen[BIG_SLOTS];
	char *vbuf;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int64_t nread, nwritten, nverified;   /* chunks through each stage */
	int err;                             /* first error (errno value), 0 = none */
	struct cksum cs, cd;
	int sample;                          /* 0: read back every chunk; N: 1 in N */
	uint64_t *chk;                       /* sample: per-chunk hash of what was written */
};

/* Sampled verification reads back the first, the last and every Nth chunk. */
static int _sampled(const struct _big *b, int64_t i)
{
	return !b->sample || i == 0 || i == b->nchunks - 1 || i % b->sample == 0;
}

static int _stopped(struct _big *b)
{
	return b->ctx->stop && *b->ctx->stop;
}

static void _fail(struct _big *b, int e)
{
	pthread_mutex_lock(&b->mu);
	if (!b->err)
		b->err = e;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
}

/* Wait until *counter > want (or an error); returns 0, or the error. */
static int _wait_for(struct _big *b, const int64_t *counter, int64_t want)
{
	int e;

	pthread_mutex_lock(&b->mu);
	while (!b->err && *counter <= want)
		pthread_cond_wait(&b->cv, &b->mu);
	e = b->err;
	pthread_mutex_unlock(&b->mu);
	return e;
}

static void _advance(struct _big *b, int64_t *counter)
{
	pthread_mutex_lock(&b->mu);
	++*counter;
	pthread_cond_broadcast(&b->cv);
	pthread_mutex_unlock(&b->mu);
}

static size_t _chunk_len(const struct _big *b, int64_t i)
{
	int64_t left = b->size - i * (int64_t)b->chunk;

	return left > (int64_t)b->chunk ? b->chunk : (size_t)left;
}

static size_t _round_up(size_t n)
{
	return (n + ALIGN - 1) / ALIGN * ALIGN;
}

int xfer_read_full(int fd, int direct, char *buf, size_t len, off_t off)
{
	size_t want = direct ? _round_up(len) : len, got = 0;

	while (got < len) {
		ssize_t n = pread(fd, buf + got, want - got, off + (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return errno;
		if (n == 0)
			return EAGAIN;	/* shorter than when it was walked */
		got += (size_t)n;
	}
	return 0;
}

static void *_reader(void *arg)
{
	struct _big *b = arg;

	for (int64_t i = 0; i < b->nchunks; i++) {
		int s = (int)(i % BIG_SLOTS), e;
		size_t len = _chunk_len(b, i);

		/* Slot s is free once chunk i - BIG_SLOTS was written; paced, the
		   reader reads chunk i while chunk i - 1 is written, no further. */
		if ((e = _wait_for(b, &b->nwritten, i - b->ahead)) != 0)
			return NULL;
		if (_stopped(b)) {
			_fail(b, EINTR);
			return NULL;
		}
		e = xfer_read_full(b->sfd, b->sdirect, b->slot[s], len, (off_t)(i * (int64_t)b->chunk));
		if (e) {
			_fail(b, e);
			return NULL;
		}
		cksum_update(&b->cs, b->slot[s], len);
		if (b->sample && _sampled(b, i))
			b->chk[i] = XXH3_64bits(b->slot[s], len);
		b->slen[s] = len;
		if (!b->sdirect)
			posix_fadvise(b->sfd, (off_t)(i * (int64_t)b->chunk), (off_t)len,
				      POSIX_FADV_DONTNEED);
		_advance(b, &b->nread);
	}
	return NULL;
}

static void *_verifier(void *arg)
{
	struct _big *b = arg;

	for (int64_t i = 0; i < b->nchunks; i++) {
		off_t off = (off_t)(i * (int64_t)b->chunk);
		size_t len = _chunk_len(b, i);
		int e;

		if ((e = _wait_for(b, &b->nwritten, i)) != 0)
			return NULL;
		if (_stopped(b)) {
			_fail(b, EINTR);
			return NULL;
		}
		if (!_sampled(b, i)) {
			_advance(b, &b->nverified);
			continue;
		}
		if (!b->ddirect) {
			/* Written back and dropped: the read below comes from the device. */
			if (sync_file_range(b->dfd, off, (off_t)len, SYNC_FILE_RANGE_WAIT_BEFORE |
					    SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER) < 0) {
				_fail(b, errno);
				return NULL;
			}
			posix_fadvise(b->vfd, off, (off_t)len, POSIX_FADV_DONTNEED);
		}
		e = xfer_read_full(b->vfd, b->vdirect, b->vbuf, len, off);
		if (e) {
			_fail(b, e == EAGAIN ? EIO : e);
			return NULL;
		}
		if (!b->sample)
			cksum_update(&b->cd, b->vbuf, len);
		else if (XXH3_64bits(b->vbuf, len) != b->chk[i]) {
			_fail(b, EIO);
			return NULL;
		}
		if (!b->vdirect)
			posix_fadvise(b->vfd, off, (off_t)len, POSIX_FADV_DONTNEED);
		xfer_engine_pace(b->ctx, len);
		_advance(b, &b->nverified);
	}
	return NULL;
}

/* Ask for O_DIRECT on fd; 1 if granted. */
static int _direct(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl >= 0 && fcntl(fd, F_SETFL, fl | O_DIRECT) == 0;
}

static void _undirect(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl >= 0)
		fcntl(fd, F_SETFL, fl & ~O_DIRECT);
}

static int _write_chunk(struct _big *b, int64_t i)
{
	int s = (int)(i % BIG_SLOTS);
	off_t off = (off_t)(i * (int64_t)b->chunk);
	size_t len = b->slen[s], want = len;
	int e;

	if (b->ddirect && len % ALIGN) {
		/* The tail: pad to the block size; ftruncate trims it at the end. */
		want = _round_up(len);
		memset(b->slot[s] + len, 0, want - len);
	}
	/* Charged to the bucket here, as every write to a destination is. */
	e = xfer_engine_write(b->ctx, b->dfd, b->slot[s], want, (int64_t)off);
	if (e)
		return e;
	if (!b->ddirect)
		sync_file_range(b->dfd, off, (off_t)len, SYNC_FILE_RANGE_WRITE);
	return 0;
}

/*
 * Long on purpose: the pipeline's set-up, run and tear-down in
 * one place (buffers, checksums, reader thread, preallocation, the writer
 * loop, the join), so that every early exit releases what was set up.
 */
int xfer_big_copy(struct xfer_ctx *ctx, const struct xfer_big_job *j, int64_t *total,
		  char cks_src[CKSUM_HEX_MAX], char cks_dst[CKSUM_HEX_MAX])
{
	int sfd = j->sfd, dfd = j->dfd, vfd = j->vfd, sample = j->sample;
	int64_t size = j->size;
	struct _big b;
	pthread_t rt, vt;
	int e = 0, have_r = 0, have_v = 0;
	struct stat st;

	memset(&b, 0, sizeof(b));
	b.ctx = ctx;
	b.sfd = sfd;
	b.dfd = dfd;
	b.vfd = vfd;
	b.size = size;
	/* Paced (YieldMode=adaptive): every stage moves
	   XFER_PACE_CHUNK at a time, so a hold or a lower rate takes effect
	   within one small I/O. The reader then reads only the chunk after
	   the one being written, not BIG_SLOTS ahead: the pace controller
	   counts a read as ours when its chunk is charged at the write, and
	   more unreported reads than it allows for (pace.c, _foreign) would
	   look like a job's. */
	if (xfer_bucket_paced_io(ctx->bucket)) {
		b.chunk = XFER_PACE_CHUNK;
		b.ahead = 2;
	} else {
		b.chunk = xfer_bucket_unbounded(ctx->bucket) ? BIG_CHUNK : BIG_CHUNK_HELD;
		b.ahead = BIG_SLOTS;
	}
	b.nchunks = (size + (int64_t)b.chunk - 1) / (int64_t)b.chunk;
	b.sample = sample > 1 ? sample : 0;
	*total = 0;
	if (b.sample && !(b.chk = calloc((size_t)b.nchunks, sizeof(*b.chk))))
		return ENOMEM;
	if (cksum_init(&b.cs, ctx->algo) < 0) {
		free(b.chk);
		return ENOMEM;
	}
	if (cksum_init(&b.cd, ctx->algo) < 0) {
		cksum_abort(&b.cs);
		free(b.chk);
		return ENOMEM;
	}
	for (int s = 0; s < BIG_SLOTS; s++)
		if (posix_memalign((void **)&b.slot[s], ALIGN, b.chunk) != 0)
			e = ENOMEM;
	if (posix_memalign((void **)&b.vbuf, ALIGN, b.chunk) != 0)
		e = ENOMEM;
	pthread_mutex_init(&b.mu, NULL);
	pthread_cond_init(&b.cv, NULL);
	if (e)
		goto out;
	/* Reserve the space in one piece; not every file system can. */
	if (fallocate(dfd, 0, 0, (off_t)size) < 0 && errno != EOPNOTSUPP && errno != ENOSYS)
		e = errno;	/* ENOSPC now rather than after gigabytes */
	if (e)
		goto out;
	b.sdirect = _direct(sfd);
	b.ddirect = _direct(dfd);
	b.vdirect = _direct(vfd);
	if (!b.sdirect)
		posix_fadvise(sfd, 0, 0, POSIX_FADV_SEQUENTIAL);
	if ((e = pthread_create(&rt, NULL, _reader, &b)) != 0)
		goto out;
	have_r = 1;
	if ((e = pthread_create(&vt, NULL, _verifier, &b)) != 0) {
		_fail(&b, e);
		goto join;
	}
	have_v = 1;
	for (int64_t i = 0; i < b.nchunks; i++) {
		if ((e = _wait_for(&b, &b.nread, i)) != 0)
			break;
		/* Charged and reported to the pace controller in xfer_engine_write. */
		if ((e = _write_chunk(&b, i)) != 0) {
			_fail(&b, e);
			break;
		}
		_advance(&b, &b.nwritten);
	}
join:
	if (have_r)
		pthread_join(rt, NULL);
	if (have_v)
		pthread_join(vt, NULL);
	e = b.err;
	if (!e && b.ddirect && size % ALIGN && ftruncate(dfd, (off_t)size) < 0)
		e = errno;
	/* Grown since the walk: the copy is of an older version; redo it. */
	if (!e && (fstat(sfd, &st) < 0 || st.st_size != size))
		e = EAGAIN;
	if (!e)
		*total = size;
out:
	if (b.sdirect)
		_undirect(sfd);
	if (b.ddirect)
		_undirect(dfd);
	if (!e) {
		cksum_final(&b.cs, cks_src);
		cksum_final(&b.cd, cks_dst);
		/* Sampled: the bytes written were the hashed ones (same buffers, and the
		   samples read back matched); the destination's checksum is the source's. */
		if (b.sample)
			memcpy(cks_dst, cks_src, CKSUM_HEX_MAX);
	} else {
		cksum_abort(&b.cs);
		cksum_abort(&b.cd);
	}
	pthread_cond_destroy(&b.cv);
	pthread_mutex_destroy(&b.mu);
	for (int s = 0; s < BIG_SLOTS; s++)
		free(b.slot[s]);
	free(b.vbuf);
	free(b.chk);
	return e;
}
