/* queue_mpu.c - see queue_mpu.h. */
#include "config.h"

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "queue_mpu.h"
#include "queue_private.h"

/* S3's bounds (as the worker checks them too): what a record may say. */
#define PART_MIN (5LL << 20)
#define PART_MAX (5LL << 30)
#define PARTS_MAX 10000
#define ID_MAX 1024

static int _id_ok(const char *id)
{
	size_t n = strlen(id);

	if (n == 0 || n >= ID_MAX)
		return 0;
	for (const char *p = id; *p; p++)
		if ((unsigned char)*p <= 0x20 || *p == 0x7f)
			return 0;
	return 1;
}

static int _md5_ok(const char *h)
{
	size_t n = strlen(h);

	if (n != 32)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')))
			return 0;
	return 1;
}

static int _forget(struct queue *q, int64_t req, const char *rel, char *err, size_t errlen)
{
	static const char *const sql[] = {
		"DELETE FROM s3_upload_parts WHERE request_id=?1 AND relpath=?2",
		"DELETE FROM s3_uploads WHERE request_id=?1 AND relpath=?2",
	};

	for (int i = 0; i < 2; i++)
		if (qp_execf(q, sql[i], err, errlen, "It", req, rel) < 0)
			return -1;
	return 0;
}

static int _begin(struct queue *q, int64_t req, const struct xfer_rec *rec, const char *rel,
		  const char *id, char *err, size_t errlen)
{
	if (_forget(q, req, rel, err, errlen) < 0)
		return -1;
	return qp_execf(q, "INSERT INTO s3_uploads (request_id, relpath, upload_id, size, mtime,"
			" part_size, started) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", err, errlen,
			"IttIIII", req, rel, id, rec->a, rec->b, rec->c,
			qp_now());
}

static int _part(struct queue *q, int64_t req, const struct xfer_rec *rec, const char *rel,
		 const char *id, char *err, size_t errlen)
{
	return qp_execf(q, "INSERT OR REPLACE INTO s3_upload_parts (request_id, relpath, part,"
			" len, md5) SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM"
			" s3_uploads WHERE request_id=?1 AND relpath=?2 AND upload_id=?6)", err,
			errlen, "ItIItt", req, rel, rec->a, rec->b, rec->cks, id);
}

int queue_mpu_apply(struct queue *q, int64_t req, const struct xfer_rec *rec, const char *path,
		    const char *text, char *err, size_t errlen)
{
	int rc;

	if (!*path || !_id_ok(text)) {
		qp_err(err, errlen, "request %lld: multipart record without a relpath or with an "
		       "unusable upload id", (long long)req);
		return -1;
	}
	switch (rec->code) {
	case XFER_MPU_BEGIN:
		if (rec->a <= 0 || rec->c < PART_MIN || rec->c > PART_MAX)
			goto bad;
		break;
	case XFER_MPU_PART:
		if (rec->a < 1 || rec->a > PARTS_MAX || rec->b < 1 || rec->b > PART_MAX ||
		    !_md5_ok(rec->cks))
			goto bad;
		break;
	case XFER_MPU_END:
		break;
	default:
		goto bad;
	}
	qp_begin(q);
	rc = rec->code == XFER_MPU_BEGIN ? _begin(q, req, rec, path, text, err, errlen) :
	     rec->code == XFER_MPU_PART ? _part(q, req, rec, path, text, err, errlen) :
	     _forget(q, req, path, err, errlen);
	return qp_end(q, rc, 0, err, errlen);
bad:
	qp_err(err, errlen, "request %lld: '%s': multipart record %d out of bounds (%lld, %lld, "
	       "%lld)", (long long)req, path, rec->code, (long long)rec->a, (long long)rec->b,
	       (long long)rec->c);
	return -1;
}

void queue_mpu_free(struct xfer_mpu_ent *e, size_t n)
{
	for (size_t i = 0; e && i < n; i++) {
		free(e[i].relpath);
		free(e[i].upload_id);
		free(e[i].parts);
	}
	free(e);
}

/* One row of the join: a new upload when relpath changes, then its part (if any). */
static int _row(sqlite3_stmt *st, struct xfer_mpu_ent **out, size_t *n, size_t *cap)
{
	const char *rel = (const char *)sqlite3_column_text(st, 0);
	struct xfer_mpu_ent *e = *n ? &(*out)[*n - 1] : NULL;

	if (!rel)
		return -1;
	if (!e || strcmp(e->relpath, rel) != 0) {
		if (grow_array((void **)out, cap, *n + 1, sizeof(**out), 4) < 0)
			return -1;
		e = &(*out)[(*n)++];
		memset(e, 0, sizeof(*e));
		e->relpath = strdup(rel);
		e->upload_id = qp_col_dup(st, 1);
		e->size = sqlite3_column_int64(st, 2);
		e->mtime_ns = sqlite3_column_int64(st, 3);
		e->part_size = sqlite3_column_int64(st, 4);
		if (!e->relpath || !e->upload_id)
			return -1;
	}
	if (sqlite3_column_type(st, 5) == SQLITE_NULL)
		return 0;
	{
		struct xfer_mpu_part *p = realloc(e->parts, (e->nparts + 1) * sizeof(*p));
		const char *md5 = (const char *)sqlite3_column_text(st, 7);

		if (!p)
			return -1;
		e->parts = p;
		p += e->nparts++;
		p->number = sqlite3_column_int(st, 5);
		p->len = sqlite3_column_int64(st, 6);
		snprintf(p->md5, sizeof(p->md5), "%s", md5 ? md5 : "");
	}
	return 0;
}

int queue_mpu_load(struct queue *q, int64_t req, struct xfer_mpu_ent **out, size_t *n,
		   char *err, size_t errlen)
{
	sqlite3_stmt *st;
	size_t cap = 0;
	int rc;

	*out = NULL;
	*n = 0;
	st = qp_readf(q, "SELECT u.relpath, u.upload_id, u.size, u.mtime, u.part_size, p.part,"
		      " p.len, p.md5 FROM s3_uploads u LEFT JOIN s3_upload_parts p"
		      " ON p.request_id=u.request_id AND p.relpath=u.relpath"
		      " WHERE u.request_id=?1 ORDER BY u.relpath, p.part", err, errlen, "I", req);
	if (!st)
		return -1;
	while ((rc = sqlite3_step(st)) == SQLITE_ROW)
		if (_row(st, out, n, &cap) < 0) {
			qp_err(err, errlen, "out of memory");
			rc = -1;
			break;
		}
	if (qp_read_end(q, st, rc, err, errlen) < 0) {
		queue_mpu_free(*out, *n);
		*out = NULL;
		*n = 0;
		return -1;
	}
	return 0;
}
