/*
 * xfer_big.h - the large-file path of the local backend: one file copied by
 * a reader and a verifier thread around the caller (the writer), through a
 * ring of large aligned buffers, with direct I/O where the file systems
 * allow it.
 *
 * What it guarantees when it returns 0 (sample 0, VerifyMode=full): every
 * byte of the source was read once (O_DIRECT, or through the page cache) and
 * hashed into cks_src; every byte written to the destination was then read
 * back from the storage device - with O_DIRECT, or after sync_file_range()
 * wrote that range back and its pages were dropped - and hashed into
 * cks_dst, in order. The caller still fsyncs (data and metadata) before the
 * rename, and compares the two checksums before anything is reported done.
 *
 * With sample N > 1 (VerifyMode=sample): the bytes written are the very
 * buffers that were hashed (nothing copies them in between); the first, the
 * last and every Nth chunk are read back from the device and must match the
 * hash of what was written, and cks_dst is then set to cks_src. That catches
 * a wrong, truncated or misplaced file and systematic write failures, not a
 * single corrupted chunk between samples.
 *
 * Must never: run outside a worker that has the owner's identity.
 */
#ifndef STAGEHAND_XFER_BIG_H
#define STAGEHAND_XFER_BIG_H

#include <stdint.h>
#include <sys/types.h>

#include "checksum.h"
#include "xfer.h"

/*
 * Read len bytes of fd at off (direct: fd is O_DIRECT, the read is rounded
 * up to whole blocks, the file ends inside). 0, or an errno value (EAGAIN:
 * the file ends before off + len, shorter than when it was walked).
 */
int xfer_read_full(int fd, int direct, char *buf, size_t len, off_t off);

/* Files at least this large take the big path. */
#define XFER_BIG_MIN (32LL << 20)

/* One big file to copy (xfer_big_copy). */
struct xfer_big_job {
	int sfd;                     /* the source */
	int dfd;                     /* a new, empty temporary file */
	int vfd;                     /* the same file opened for reading: the read-back */
	int64_t size;                /* the bytes to copy */
	int sample;                  /* 0: read back every chunk; N: 1 in N (VerifyMode=sample) */
};

/*
 * Copy j->size bytes from j->sfd to j->dfd and verify them through j->vfd.
 * *total gets the bytes copied, cks_src and cks_dst the two checksums.
 * Returns 0 or an errno value (EAGAIN: the source changed size, EINTR:
 * stopped).
 */
int xfer_big_copy(struct xfer_ctx *ctx, const struct xfer_big_job *j, int64_t *total,
		  char cks_src[CKSUM_HEX_MAX], char cks_dst[CKSUM_HEX_MAX]);

#endif /* STAGEHAND_XFER_BIG_H */
