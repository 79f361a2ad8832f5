/*
 * queue_stmt.c - a statement's parameters bound by a format and its row read
 * into a struct by a column map (see queue_private.h), so that a statement is
 * its SQL text, one line of values and, for a read, one table of fields.
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include "queue_private.h"

/*
 * Binds one parameter of letter c from ap. SQLITE_OK, an SQLite error, or -1
 * (bad letter). text: how SQLite keeps a string, SQLITE_TRANSIENT (a copy)
 * or SQLITE_STATIC (the caller's, which must outlive the step).
 */
static int _bind_one(sqlite3_stmt *st, int i, char c, va_list *ap, sqlite3_destructor_type text)
{
	int64_t v;
	const char *s;

	switch (c) {
	case 'i':
		return sqlite3_bind_int(st, i, va_arg(*ap, int));
	case 'I':
		return sqlite3_bind_int64(st, i, va_arg(*ap, int64_t));
	case 'P':
		v = va_arg(*ap, int64_t);
		return v > 0 ? sqlite3_bind_int64(st, i, v) : sqlite3_bind_null(st, i);
	case 'U':
		v = va_arg(*ap, int64_t);
		return v >= 0 ? sqlite3_bind_int64(st, i, v) : sqlite3_bind_null(st, i);
	case 'd':
		return sqlite3_bind_double(st, i, va_arg(*ap, double));
	case 't':
		s = va_arg(*ap, const char *);
		return s ? sqlite3_bind_text(st, i, s, -1, text) :
			   sqlite3_bind_null(st, i);
	case 'n':
		return sqlite3_bind_null(st, i);
	default:
		return -1;
	}
}

/* qp_vbindf with the strings' keeping chosen (see _bind_one). */
static int _vbindf(sqlite3_stmt *st, char *err, size_t errlen, sqlite3_destructor_type text,
		   const char *fmt, va_list ap)
{
	int n = (int)strlen(fmt), rc = SQLITE_OK;
	va_list aq;

	if (n != sqlite3_bind_parameter_count(st)) {
		qp_err(err, errlen, "internal: bind format '%s' has %d letters, the statement %d "
		       "parameters", fmt, n, sqlite3_bind_parameter_count(st));
		return -1;
	}
	va_copy(aq, ap);
	for (int i = 0; i < n; i++) {
		rc = _bind_one(st, i + 1, fmt[i], &aq, text);
		if (rc == -1) {
			qp_err(err, errlen, "internal: bind format '%s': unknown letter '%c'", fmt,
			       fmt[i]);
			break;
		}
		if (rc != SQLITE_OK) {
			qp_err(err, errlen, "database: binding ?%d: %s", i + 1,
			       sqlite3_errmsg(sqlite3_db_handle(st)));
			rc = -1;
			break;
		}
	}
	va_end(aq);
	return rc == SQLITE_OK ? 0 : -1;
}

int qp_vbindf(sqlite3_stmt *st, char *err, size_t errlen, const char *fmt, va_list ap)
{
	return _vbindf(st, err, errlen, SQLITE_TRANSIENT, fmt, ap);
}

int qp_bindf(sqlite3_stmt *st, char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;
	int rc;

	va_start(ap, fmt);
	rc = qp_vbindf(st, err, errlen, fmt, ap);
	va_end(ap);
	return rc;
}

/* A statement from where from says, bound by fmt from ap (see qp_stmtf). */
static sqlite3_stmt *_bound(struct queue *q, enum qp_from from, const char *sql, char *err,
			    size_t errlen, const char *fmt, va_list ap)
{
	sqlite3_stmt *st = from == QP_CACHED ? qp_cached(q, sql, err, errlen) :
			   from == QP_READ ? qp_read(q, sql, err, errlen) :
			   from == QP_BULK ? qp_read_bulk(q, sql, err, errlen) :
			   qp_prep(q, sql, err, errlen);

	/*
	 * A cached statement (the per-file hot path) keeps the caller's strings
	 * instead of copying them: it is stepped and reset before its caller
	 * returns, and qp_cached unbinds it before its next use.
	 */
	if (!st || _vbindf(st, err, errlen, from == QP_CACHED ? SQLITE_STATIC : SQLITE_TRANSIENT,
			   fmt, ap) == 0)
		return st;
	if (from == QP_CACHED)
		sqlite3_clear_bindings(st);
	else if (from == QP_READ || from == QP_BULK)
		qp_read_end(q, st, -1, err, errlen);
	else
		sqlite3_finalize(st);
	return NULL;
}

sqlite3_stmt *qp_stmtf(struct queue *q, enum qp_from from, const char *sql, char *err,
		       size_t errlen, const char *fmt, ...)
{
	sqlite3_stmt *st;
	va_list ap;

	va_start(ap, fmt);
	st = _bound(q, from, sql, err, errlen, fmt, ap);
	va_end(ap);
	return st;
}

int qp_execf(struct queue *q, const char *sql, char *err, size_t errlen, const char *fmt, ...)
{
	int cached = qp_cache_room(q, sql);
	sqlite3_stmt *st;
	va_list ap;

	va_start(ap, fmt);
	st = _bound(q, cached ? QP_CACHED : QP_PREP, sql, err, errlen, fmt, ap);
	va_end(ap);
	if (!st)
		return -1;
	return cached ? qp_step_reset(q, st, err, errlen) : qp_step_done(q, st, err, errlen);
}

/* The size of a field that holds type t; 0 for QC_CHARS (any array) and QC_SKIP. */
static size_t _col_size(int t)
{
	switch (t) {
	case QC_INT:
		return sizeof(int);
	case QC_I64:
	case QC_I64N:
		return sizeof(int64_t);
	case QC_ID:
		return sizeof(uid_t);
	case QC_DOUBLE:
		return sizeof(double);
	case QC_STR:
		return sizeof(char *);
	case QC_BORROW:
		return sizeof(const char *);
	default:
		return 0;
	}
}

/* Reads column i into the field at f as c says. 0, or -1 when a copy fails or does not fit. */
static int _col_one(sqlite3_stmt *st, int i, const struct qp_col *c, char *f)
{
	/* The type first: it is undefined once a column_ call has converted the value. */
	int null = sqlite3_column_type(st, i) == SQLITE_NULL;
	const char *s = NULL;
	char *dup;
	int64_t v;
	uid_t id;
	int n;

	if (c->type == QC_STR || c->type == QC_BORROW || c->type == QC_CHARS)
		s = (const char *)sqlite3_column_text(st, i);
	switch (c->type) {
	case QC_INT:
		n = sqlite3_column_int(st, i);
		memcpy(f, &n, sizeof(n));
		return 0;
	case QC_I64:
	case QC_I64N:
		v = c->type == QC_I64N && null ? -1 : sqlite3_column_int64(st, i);
		memcpy(f, &v, sizeof(v));
		return 0;
	case QC_ID:
		id = (uid_t)sqlite3_column_int64(st, i);
		memcpy(f, &id, sizeof(id));
		return 0;
	case QC_DOUBLE: {
		double d = sqlite3_column_double(st, i);

		memcpy(f, &d, sizeof(d));
		return 0;
	}
	case QC_STR:
		dup = s ? strdup(s) : NULL;
		memcpy(f, &dup, sizeof(dup));
		return s && !dup ? -1 : 0;
	case QC_BORROW:
		memcpy(f, &s, sizeof(s));
		return 0;
	case QC_CHARS:
		n = snprintf(f, c->size, "%s", s ? s : "");
		return n < 0 || (size_t)n >= c->size ? -1 : 0;
	default:
		return 0;
	}
}

int qp_row(sqlite3_stmt *st, const struct qp_col *map, int n, void *out, char *err,
	   size_t errlen)
{
	if (sqlite3_column_count(st) < n) {
		qp_err(err, errlen, "internal: a map of %d columns for a row of %d", n,
		       sqlite3_column_count(st));
		return -1;
	}
	for (int i = 0; i < n; i++) {
		size_t want = _col_size(map[i].type);

		if (map[i].type < QC_SKIP || map[i].type > QC_CHARS ||
		    (want && map[i].size != want) || (map[i].type == QC_CHARS && !map[i].size)) {
			qp_err(err, errlen, "internal: column %d: type %d does not fit a field of "
			       "%zu bytes", i, map[i].type, map[i].size);
			return -1;
		}
		if (_col_one(st, i, &map[i], (char *)out + map[i].off) < 0) {
			if (map[i].type == QC_CHARS)
				qp_err(err, errlen, "column %d: text longer than its field (%zu "
				       "bytes)", i, map[i].size);
			else
				qp_err(err, errlen, "out of memory");
			return -1;
		}
	}
	return 0;
}

void qp_row_free(const struct qp_col *map, int n, void *out)
{
	for (int i = 0; i < n; i++) {
		char *s;

		if (map[i].type != QC_STR)
			continue;
		memcpy(&s, (char *)out + map[i].off, sizeof(s));
		free(s);
	}
}
