/*
 * queue_mpu.h - the daemon's record of S3 multipart uploads in progress, so
 * that a request interrupted mid-file (a daemon killed, a drain, a failed
 * attempt) sends only the parts the server does not hold yet.
 *
 * Owns: the s3_uploads and s3_upload_parts tables, written only from a
 * worker's XR_MPU records (checked here: the worker runs as the user) and
 * read back, per request, into the resume set its next worker gets
 * (xfer_ctx.mpu).
 *
 * Must never: be taken as proof that a part is on the server. The next
 * attempt asks the server (ListParts) before it trusts a recorded part;
 * what is recorded is what the server acknowledged at the time and the md5
 * of the bytes that were sent, which the object's final ETag is checked
 * against.
 */
#ifndef STAGEHAND_QUEUE_MPU_H
#define STAGEHAND_QUEUE_MPU_H

#include <stddef.h>
#include <stdint.h>

#include "queue.h"
#include "xfer.h"


/*
 * Apply one XR_MPU record of request req: begin replaces any upload
 * recorded for the relpath (and its parts), part adds a part to the upload
 * the record names (ignored when another upload is recorded now), end
 * forgets it. A record whose fields are out of S3's bounds is refused.
 * 0, or -1 with err.
 */
int queue_mpu_apply(struct queue *q, int64_t req, const struct xfer_rec *rec, const char *path,
		    const char *text, char *err, size_t errlen);

/*
 * The uploads recorded for req, sorted by relpath, each with its parts by
 * number: *out new (queue_mpu_free), *n (0: none, *out NULL). 0 or -1.
 */
int queue_mpu_load(struct queue *q, int64_t req, struct xfer_mpu_ent **out, size_t *n,
		   char *err, size_t errlen);
void queue_mpu_free(struct xfer_mpu_ent *e, size_t n);

#endif /* STAGEHAND_QUEUE_MPU_H */
