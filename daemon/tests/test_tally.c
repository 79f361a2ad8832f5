/*
 * test_tally.c - the /metrics audit totals: equal to the whole trail's, read
 * once; reads through the trail kept apart from a user's calls.
 */
#include "config.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "audit_tally.h"
#include "queue.h"
#include "queue_audit.h"
#include "queue_private.h"
#include "qtest.h"
#include "tests/tap.h"

/* One row per request's user (1001 alice; 1002 bob; 1003 carl, then carla). */
static int _seed(struct queue *q)
{
	char err[256] = "";

	if (qp_exec(q, "INSERT INTO requests (id, uid, gid, user, job_id, action, source, state,"
		    " created, updated) VALUES (1, 1001, 1, 'alice', 1, 'archive', '/s', 'done', 0,"
		    " 0), (2, 1002, 1, 'bob', 2, 'stage_in', '/s', 'done', 0, 0), (3, 1003, 1,"
		    " 'carl', 3, 'archive', '/s', 'done', 0, 0), (4, 1003, 1, 'carla', 4,"
		    " 'archive', '/s', 'done', 0, 0)", err, sizeof(err)) < 0) {
		tap_diag("requests: %s", err);
		return -1;
	}
	return 0;
}

/* n audit rows, ids from first: sources and destinations in and out of the roots. */
static int _add_rows(struct queue *q, int first, int n)
{
	char sql[1024], err[256] = "";

	snprintf(sql, sizeof(sql),
		 "WITH RECURSIVE n(i) AS (SELECT %d UNION ALL SELECT i + 1 FROM n WHERE i < %d)"
		 " INSERT INTO audit (job_id, uid, request_id, path_src, path_dst, bytes, checksum,"
		 " started, ended) SELECT i %% 4 + 1, CASE i %% 4 WHEN 0 THEN 1001 WHEN 1 THEN 1002"
		 " ELSE 1003 END, i %% 4 + 1,"
		 " CASE i %% 3 WHEN 0 THEN '/scratch/j/' || i WHEN 1 THEN '/scratchy/' || i"
		 " ELSE '/archive/u/' || i END,"
		 " CASE i %% 5 WHEN 0 THEN '/archive/u/' || i WHEN 1 THEN '/archive' WHEN 2"
		 " THEN '/scratch/k/' || i WHEN 3 THEN 'rel/' || i ELSE '/other/' || i END,"
		 " i * 7 %% 1000, 'x' || i, 0, 0 FROM n", first, first + n - 1);
	if (qp_exec(q, sql, err, sizeof(err)) < 0) {
		tap_diag("audit rows: %s", err);
		return -1;
	}
	return 0;
}

/* The whole trail's count and sum where the SQL condition cond holds. */
static void _sum(struct queue *q, const char *cond, int64_t *files, int64_t *bytes)
{
	char sql[512];
	sqlite3_stmt *st;

	snprintf(sql, sizeof(sql), "SELECT count(*), COALESCE(sum(bytes), 0) FROM audit WHERE %s",
		 cond);
	*files = *bytes = -1;
	if (sqlite3_prepare_v2(q->db, sql, -1, &st, NULL) != SQLITE_OK)
		return;
	if (sqlite3_step(st) == SQLITE_ROW) {
		*files = sqlite3_column_int64(st, 0);
		*bytes = sqlite3_column_int64(st, 1);
	}
	sqlite3_finalize(st);
}

/* Every total of t against the whole trail, counted again in SQL. */
static void _agree(struct queue *q, const struct audit_tally *t, const char *when)
{
	static const struct { int64_t uid; const char *name; } users[] = {
		{ 1001, "alice" }, { 1002, "bob" }, { 1003, "carla" },
	};
	int bad = 0;

	for (int i = 0; i < 3; i++) {
		char cond[64];
		int64_t f, b;

		snprintf(cond, sizeof(cond), "uid = %lld", (long long)users[i].uid);
		_sum(q, cond, &f, &b);
		if (t->nusers != 3 || t->users[i].uid != users[i].uid || t->users[i].files != f ||
		    t->users[i].bytes != b || !t->users[i].user ||
		    strcmp(t->users[i].user, users[i].name) != 0) {
			tap_diag("%s: user %lld: %lld files %lld bytes '%s', want %lld %lld '%s'",
				 when, (long long)users[i].uid,
				 (long long)(i < (int)t->nusers ? t->users[i].files : -1),
				 (long long)(i < (int)t->nusers ? t->users[i].bytes : -1),
				 i < (int)t->nusers && t->users[i].user ? t->users[i].user : "",
				 (long long)f, (long long)b, users[i].name);
			bad++;
		}
	}
	for (int i = 0; i < t->nroots; i++) {
		const struct audit_root *r = &t->roots[i];
		char cond[256];
		int64_t rf, rb, wf, wb;
		const char *p = strcmp(r->path, "/") == 0 ? "" : r->path;

		snprintf(cond, sizeof(cond), "path_src = '%s' OR substr(path_src, 1, %zu) = '%s/'",
			 p, strlen(p) + 1, p);
		_sum(q, cond, &rf, &rb);
		snprintf(cond, sizeof(cond), "path_dst = '%s' OR substr(path_dst, 1, %zu) = '%s/'",
			 p, strlen(p) + 1, p);
		_sum(q, cond, &wf, &wb);
		if (r->read_files != rf || r->read_bytes != rb || r->written_files != wf ||
		    r->written_bytes != wb || rf <= 0 || wf <= 0) {
			tap_diag("%s: %s: read %lld/%lld written %lld/%lld, want %lld/%lld %lld/%lld",
				 when, r->path, (long long)r->read_files, (long long)r->read_bytes,
				 (long long)r->written_files, (long long)r->written_bytes,
				 (long long)rf, (long long)rb, (long long)wf, (long long)wb);
			bad++;
		}
	}
	ok(bad == 0, "%s: every user's and file system's totals equal the whole trail's", when);
}

/* A bulk read held in its callback on purpose, and a user's list made meanwhile. */
struct _hold {
	struct queue *q;
	pthread_mutex_t m;
	pthread_cond_t c;
	int inside, release, listed, n;
};

static int _held(const struct queue_audit_entry *e, void *arg)
{
	struct _hold *h = arg;
	struct timespec until;

	(void)e;
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;	/* a bound, so that a broken build fails instead of hanging */
	pthread_mutex_lock(&h->m);
	h->inside = 1;
	pthread_cond_broadcast(&h->c);
	while (!h->release && pthread_cond_timedwait(&h->c, &h->m, &until) == 0)
		;
	pthread_mutex_unlock(&h->m);
	return 1;
}

static void *_bulk(void *arg)
{
	struct _hold *h = arg;
	char err[256];

	queue_audit_after(h->q, 0, 10, _held, h, err, sizeof(err));
	return NULL;
}

static int _count_req(const struct queue_request *r, void *arg)
{
	(void)r;
	((struct _hold *)arg)->n++;
	return 0;
}

static void *_list(void *arg)
{
	struct _hold *h = arg;
	struct queue_filter f = { .uid = 1002, .state = -1 };
	char err[256];

	queue_request_list(h->q, &f, _count_req, h, err, sizeof(err));
	pthread_mutex_lock(&h->m);
	h->listed = 1;
	pthread_cond_broadcast(&h->c);
	pthread_mutex_unlock(&h->m);
	return NULL;
}

/*
 * A read through the whole trail (a scrape's first, an audit export) runs
 * on the bulk readers' connection: while one is held inside its callback,
 * a user's list of requests is answered.
 */
static void _test_bulk_apart(struct queue *q)
{
	struct _hold h = { .q = q };
	struct timespec until;
	pthread_t b, l;
	int listed;

	pthread_mutex_init(&h.m, NULL);
	pthread_cond_init(&h.c, NULL);
	if (pthread_create(&b, NULL, _bulk, &h) != 0) {
		ok(0, "a thread");
		return;
	}
	pthread_mutex_lock(&h.m);
	while (!h.inside)
		pthread_cond_wait(&h.c, &h.m);
	pthread_mutex_unlock(&h.m);
	pthread_create(&l, NULL, _list, &h);
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	pthread_mutex_lock(&h.m);
	while (!h.listed && pthread_cond_timedwait(&h.c, &h.m, &until) == 0)
		;
	listed = h.listed;
	h.release = 1;
	pthread_cond_broadcast(&h.c);
	pthread_mutex_unlock(&h.m);
	pthread_join(l, NULL);
	pthread_join(b, NULL);
	ok(listed && h.n == 1, "a user's list is answered while a bulk read of the audit trail "
	   "is held (%s, %d request%s)", listed ? "answered" : "still waiting after 10 s", h.n,
	   h.n == 1 ? "" : "s");
	pthread_cond_destroy(&h.c);
	pthread_mutex_destroy(&h.m);
}

static void _test_under(void)
{
	static const struct { const char *path, *root; int want; } c[] = {
		{ "/scratch", "/scratch", 1 }, { "/scratch/a/b", "/scratch", 1 },
		{ "/scratchy/a", "/scratch", 0 }, { "/scr", "/scratch", 0 },
		{ "/anything", "/", 1 }, { "rel/x", "/", 0 }, { "/scratch/", "/scratch", 1 },
		{ "", "/scratch", 0 },
	};
	int bad = 0;

	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++)
		if (audit_tally_under(c[i].path, c[i].root) != c[i].want) {
			tap_diag("'%s' under '%s': want %d", c[i].path, c[i].root, c[i].want);
			bad++;
		}
	ok(bad == 0, "audit_tally_under: whole components, '/' holds every absolute path");
}

int main(void)
{
	char dir[] = "/tmp/test_tally_XXXXXX", path[300], err[256] = "";
	char *roots[] = { "/scratch", "/archive", "/" };
	const int total = 2 * AUDIT_TALLY_CHUNK + 1234;  /* three chunks */
	struct audit_tally *t;
	struct queue *q;
	sqlite3 *rdb;
	long steps;
	int64_t before;

	_test_under();
	if (!mkdtemp(dir)) {
		ok(0, "a temporary directory");
		return tap_done();
	}
	snprintf(path, sizeof(path), "%s/q.db", dir);
	q = queue_open(path, err, sizeof(err));
	t = audit_tally_new();
	ok(q && t, "queue and tally (%s)", err);
	if (!q || !t || _seed(q) < 0 || _add_rows(q, 1, total) < 0)
		return tap_done();
	rdb = q->rdb ? q->rdb : q->db;

	ok(audit_tally_update(t, q, roots, 3, err, sizeof(err)) == 0 && t->rows_read == total &&
	   t->last_id == total, "first update: every row read once, in chunks (%lld of %d; %s)",
	   (long long)t->rows_read, total, err);
	_agree(q, t, "first update");

	qtest_vm_steps(rdb);
	ok(audit_tally_update(t, q, roots, 3, err, sizeof(err)) == 0 && t->rows_read == total,
	   "nothing new: no row read again (%lld)", (long long)t->rows_read);
	steps = qtest_vm_steps(rdb);
	ok(steps < 100, "nothing new: %ld VM steps (a scan of the trail takes over %d)", steps,
	   total);

	_add_rows(q, total + 1, 17);
	ok(audit_tally_update(t, q, roots, 3, err, sizeof(err)) == 0 &&
	   t->rows_read == total + 17, "17 new rows: only those read (%lld)",
	   (long long)t->rows_read);
	_agree(q, t, "after 17 more");

	before = t->rows_read;
	ok(audit_tally_update(t, q, roots, 2, err, sizeof(err)) == 0 &&
	   t->rows_read - before == total + 17 && t->nroots == 2,
	   "other roots: counted again from the start (%lld rows)",
	   (long long)(t->rows_read - before));
	_agree(q, t, "roots changed");

	_test_bulk_apart(q);
	audit_tally_free(t);
	queue_close(q);
	qtest_remove_db(path, dir);
	return tap_done();
}
