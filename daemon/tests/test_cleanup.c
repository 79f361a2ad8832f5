/*
 * test_cleanup.c - the input cleanup (cleanup.h): where a staged item lies
 * in the input directory, a purge request not claimed before its time and
 * counted for /metrics, and the removal on a real tree: only the staged
 * files still there unchanged; no symlink followed; the job's own files,
 * files it changed or moved away stay; empty directories go; the counters
 * /metrics shows, kept as purges end.
 */
#include "config.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cleanup.h"
#include "queue.h"
#include "queue_cleanup.h"
#include "queue_private.h"
#include "xfer.h"
#include "xfer_util.h"
#include "qtest.h"
#include "tests/tap.h"

static char _dir[] = "/tmp/test_cleanup_XXXXXX";

/* The counts as the tables say them, read the long way (as every scrape did before). */
static int _counts_agree(struct queue *q, const char *when)
{
	struct cleanup_counts cc;
	sqlite3_stmt *st;
	char err[256] = "";
	int64_t want[4] = { -1, -1, -1, -1 };

	if (sqlite3_prepare_v2(q->db, "SELECT"
			       " (SELECT count(*) FROM requests WHERE action='purge' AND state IN"
			       "  ('queued','running','verifying','failed_retryable')),"
			       " (SELECT count(*) FROM requests WHERE action='purge' AND state='done'),"
			       " (SELECT count(*) FROM items i JOIN requests r ON r.id=i.request_id"
			       "  WHERE r.action='purge' AND i.state='done'),"
			       " (SELECT coalesce(sum(i.size),0) FROM items i JOIN requests r"
			       "  ON r.id=i.request_id WHERE r.action='purge' AND i.state='done')",
			       -1, &st, NULL) == SQLITE_OK && sqlite3_step(st) == SQLITE_ROW)
		for (int i = 0; i < 4; i++)
			want[i] = sqlite3_column_int64(st, i);
	sqlite3_finalize(st);
	if (queue_cleanup_counts(q, &cc, err, sizeof(err)) < 0)
		tap_diag("%s: %s", when, err);
	ok(cc.pending == want[0] && cc.done == want[1] && cc.files_freed == want[2] &&
	   cc.bytes_freed == want[3] && want[2] > 0, "%s: counts %lld %lld %lld %lld, the tables "
	   "say %lld %lld %lld %lld", when, (long long)cc.pending, (long long)cc.done,
	   (long long)cc.files_freed, (long long)cc.bytes_freed, (long long)want[0],
	   (long long)want[1], (long long)want[2], (long long)want[3]);
	return 0;
}

/*
 * The input cleanup's counters (/metrics) from totals kept as purges end:
 * equal to the tables through ends, a retry and a reopen of a database made
 * without them, and read in few VM steps past 8,000 finished requests.
 */
static void _test_totals(void)
{
	char db[600], err[256] = "";
	struct queue *q;
	long steps;
	struct cleanup_counts cc;

	snprintf(db, sizeof(db), "%s/totals.db", _dir);
	q = queue_open(db, err, sizeof(err));
	if (!q) {
		ok(0, "queue opens (%s)", err);
		return;
	}
	/* 7,500 done archives, 500 purges done (3 of 4 items removed), 3 under way. */
	qp_exec(q, "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 8003)"
		" INSERT INTO requests (id, uid, gid, user, action, source, state, created, updated)"
		" SELECT i, 1001, 1, 'u', CASE WHEN i > 7500 THEN 'purge' ELSE 'archive' END, '/s',"
		" CASE WHEN i > 7500 THEN 'running' ELSE 'done' END, 0, 0 FROM n;"
		"WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 4)"
		" INSERT INTO items (request_id, relpath, size, state) SELECT r.id, 'f' || n.i,"
		" r.id + n.i, CASE WHEN n.i < 4 THEN 'done' ELSE 'skipped' END FROM requests r, n"
		" WHERE r.action = 'purge';"
		"UPDATE requests SET state = 'done' WHERE action = 'purge' AND id <= 8000;"
		"UPDATE requests SET state = 'failed_final' WHERE id = 8000;", err, sizeof(err));
	_counts_agree(q, "500 purges over, 3 under way");
	qtest_vm_steps(q->bdb);
	queue_cleanup_counts(q, &cc, err, sizeof(err));
	steps = qtest_vm_steps(q->bdb);
	ok(steps < 500, "read in %ld VM steps (the tables' way reads over 8,000 rows)", steps);
	qp_exec(q, "UPDATE requests SET state = 'queued' WHERE id = 8000", err, sizeof(err));
	_counts_agree(q, "a failed purge retried");
	qp_exec(q, "UPDATE items SET state = 'done' WHERE request_id = 8000;"
		"UPDATE requests SET state = 'done' WHERE id IN (8000, 8001)", err, sizeof(err));
	_counts_agree(q, "it and another over");
	queue_close(q);
	/* A database from before the totals: their table and triggers made and filled at open. */
	{
		sqlite3 *raw;

		if (sqlite3_open(db, &raw) == SQLITE_OK)
			sqlite3_exec(raw, "DROP TRIGGER cleanup_totals_over;"
				     "DROP TRIGGER cleanup_totals_again; DROP TRIGGER cleanup_totals_done;"
				     "DROP TABLE cleanup_totals;"
				     /* 0.x kept no record of migrations (queue_schema.c) */
				     "DROP TABLE schema_migrations",
				     NULL, NULL, NULL);
		sqlite3_close(raw);
	}
	q = queue_open(db, err, sizeof(err));
	if (q)
		_counts_agree(q, "a database without the totals, opened");
	else
		ok(0, "reopened (%s)", err);
	queue_close(q);
}

static void _relpath(const char *dest, size_t n, const char *rel, int want_rc, const char *want)
{
	char out[256] = "";
	int rc = cleanup_relpath("/s/u/7/input", dest, n, rel, out, sizeof(out));

	ok(rc == want_rc && (rc != 0 || strcmp(out, want) == 0),
	   "relpath of %s item %s: rc %d '%s' (want %d '%s')", dest, rel, rc, out, want_rc,
	   want ? want : "");
}

static void _write(const char *rel, const char *text)
{
	char p[512];
	int fd;

	snprintf(p, sizeof(p), "%s/%s", _dir, rel);
	fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd >= 0) {
		if (write(fd, text, strlen(text)) < 0)
			perror("write");
		close(fd);
	}
}

static int _exists(const char *rel)
{
	char p[512];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", _dir, rel);
	return lstat(p, &st) == 0;
}

/* touch -r: to gets from's times, so only a followed link could match it. */
static void _same_time(const char *from, const char *to)
{
	char a[512], b[512];
	struct stat st;
	struct timespec ts[2];

	snprintf(a, sizeof(a), "%s/%s", _dir, from);
	snprintf(b, sizeof(b), "%s/%s", _dir, to);
	if (stat(a, &st) == 0) {
		ts[0] = st.st_atim;
		ts[1] = st.st_mtim;
		utimensat(AT_FDCWD, b, ts, 0);
	}
}

/* An entry as the daemon records it: the file's size and mtime now. */
static void _ent(struct xfer_done_ent *e, const char *in_rel, const char *rel)
{
	char p[512];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", _dir, in_rel);
	stat(p, &st);
	e->relpath = strdup(rel);
	e->size = st.st_size;
	e->mtime_ns = xfer_ns(&st.st_mtim);
	e->ranged_cks = NULL;
}

/* Run cleanup_run on input/ with ents; count the records. */
static int _run(struct xfer_done_ent *ents, size_t n, int *removed, int *left)
{
	struct xfer_ctx ctx;
	char src[512], beneath[512], buf[1 << 16];
	int sv[2], rc;
	ssize_t got, off = 0;

	*removed = *left = 0;
	snprintf(src, sizeof(src), "%s/scratch/u/7/input", _dir);
	snprintf(beneath, sizeof(beneath), "%s/scratch", _dir);
	if (socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return -1;
	memset(&ctx, 0, sizeof(ctx));
	ctx.chan = sv[1];
	ctx.request_id = 1;
	ctx.job_id = 7;
	ctx.uid = getuid();
	ctx.action = "purge";
	ctx.source = src;
	ctx.beneath = beneath;
	ctx.xattr_ns = "user.";
	ctx.done = ents;
	ctx.ndone = n;
	rc = cleanup_run(&ctx);
	close(sv[1]);
	got = read(sv[0], buf, sizeof(buf));
	while (got > 0 && off < got) {
		struct xfer_rec rec;
		char path[XFER_PATH_MAX + 1], text[XFER_TEXT_MAX + 1];
		ssize_t used = xfer_parse(buf + off, (size_t)(got - off), &rec, path, text);

		if (used <= 0)
			break;
		if (rec.type == XR_ITEM_DONE)
			++*removed;
		else if (rec.type == XR_ITEM_SKIPPED) {
			++*left;
			printf("# left %s: %s\n", path, text);
		}
		off += used;
	}
	close(sv[0]);
	return rc;
}

int main(void)
{
	struct queue *q;
	struct queue_request *r = NULL;
	struct cleanup_counts cc;
	struct xfer_done_ent e[8];
	struct cleanup_item items[2] = { { "a.dat", 10, 5 }, { "t/b.dat", 20, 6 } };
	struct queue_new_request nr = { 1001, 1001, "alice", 7, "purge", "/s/alice/7/input", NULL,
					"{}", 3 };
	char err[512], db[512], p[1024], p2[1024];
	int64_t id = 0, now = time(NULL);
	int removed, left;

	if (!mkdtemp(_dir))
		return 99;

	/* ---- where a staged item lies ---- */
	_relpath("/s/u/7/input/ref.fa", 1, "ref.fa", 0, "ref.fa");
	_relpath("/s/u/7/input/set1", 2, "a/x.dat", 0, "set1/a/x.dat");
	_relpath("/s/u/7/input/set1", 1, "x.dat", 0, "set1/x.dat");
	_relpath("/work/u/inputs/ref.fa", 1, "ref.fa", 1, NULL);
	_relpath("/s/u/7/input/a/b", 1, "b", 1, NULL);
	_relpath("/s/u/7/inputs/a", 1, "a", 1, NULL);

	/* ---- the schedule is a queue row, not claimed before its time ---- */
	snprintf(db, sizeof(db), "%s/q.db", _dir);
	q = queue_open(db, err, sizeof(err));
	ok(q != NULL, "queue opens (%s)", q ? "" : err);
	ok(queue_cleanup_create(q, &nr, now + 3600, items, 2, &id, err, sizeof(err)) == 0 && id > 0,
	   "a purge request with two items is stored (%s)", id ? "" : err);
	ok(queue_request_claim(q, now, &r, err, sizeof(err)) == 1,
	   "it is not claimed before InputRetention has passed");
	ok(queue_cleanup_counts(q, &cc, err, sizeof(err)) == 0 && cc.pending == 1 && cc.done == 0,
	   "counted pending (%lld) and not done (%lld)", (long long)cc.pending, (long long)cc.done);
	queue_close(q);
	q = queue_open(db, err, sizeof(err));
	ok(q && queue_request_claim(q, now + 3601, &r, err, sizeof(err)) == 0 && r &&
	   r->id == id && !strcmp(r->action, "purge") && r->dest == NULL,
	   "after a reopen (a restart) it is claimed once its time has come");
	queue_request_free(r);
	queue_item_finish(q, id, "a.dat", "file", QI_DONE, NULL, err, sizeof(err));
	queue_item_finish(q, id, "t/b.dat", "file", QI_SKIPPED, "changed", err, sizeof(err));
	queue_request_set_state(q, id, QS_RUNNING, QS_VERIFYING, NULL, NULL, 0);
	queue_request_set_state(q, id, QS_VERIFYING, QS_DONE, NULL, NULL, 0);
	ok(queue_cleanup_counts(q, &cc, err, sizeof(err)) == 0 && cc.pending == 0 &&
	   cc.done == 1 && cc.files_freed == 1 && cc.bytes_freed == 10,
	   "done: 1 request, 1 file removed, 10 bytes freed (got %lld %lld %lld %lld)",
	   (long long)cc.pending, (long long)cc.done, (long long)cc.files_freed,
	   (long long)cc.bytes_freed);
	queue_close(q);

	/* ---- the removal on a real tree ---- */
	snprintf(p, sizeof(p), "mkdir -p %s/scratch/u/7/input/set/sub %s/scratch/u/7/input/d "
		 "%s/other %s/scratch/u/7/moved", _dir, _dir, _dir, _dir);
	if (system(p) != 0)
		return 99;
	_write("scratch/u/7/input/a.dat", "staged a\n");
	_write("scratch/u/7/input/set/sub/b.dat", "staged b\n");
	_write("scratch/u/7/input/c.dat", "staged c\n");
	_write("scratch/u/7/input/m.dat", "staged m\n");
	_write("scratch/u/7/input/l.dat", "staged l\n");
	_write("scratch/u/7/input/d/f.dat", "staged f\n");
	_write("other/victim", "staged l\n");	/* same size as l.dat */
	_write("other/f.dat", "staged f\n");
	_ent(&e[0], "scratch/u/7/input/a.dat", "a.dat");
	_ent(&e[1], "scratch/u/7/input/set/sub/b.dat", "set/sub/b.dat");
	_ent(&e[2], "scratch/u/7/input/c.dat", "c.dat");
	_ent(&e[3], "scratch/u/7/input/m.dat", "m.dat");
	_ent(&e[4], "scratch/u/7/input/l.dat", "l.dat");
	_ent(&e[5], "scratch/u/7/input/d/f.dat", "d/f.dat");
	_same_time("scratch/u/7/input/l.dat", "other/victim");
	_same_time("scratch/u/7/input/d/f.dat", "other/f.dat");
	/* The job: changes c.dat, moves m.dat out, writes its own file; the user
	   plants links in place of l.dat (to a file) and d/ (to a directory). */
	_write("scratch/u/7/input/c.dat", "changed by the job\n");
	snprintf(p, sizeof(p), "%s/scratch/u/7/input/m.dat", _dir);
	snprintf(p2, sizeof(p2), "%s/scratch/u/7/moved/m.dat", _dir);
	rename(p, p2);
	_write("scratch/u/7/input/new.dat", "made by the job\n");
	snprintf(p, sizeof(p), "%s/scratch/u/7/input/l.dat", _dir);
	unlink(p);
	snprintf(p2, sizeof(p2), "%s/other/victim", _dir);
	if (symlink(p2, p) < 0)
		return 99;
	snprintf(p, sizeof(p), "%s/scratch/u/7/input/d", _dir);
	tap_rmtree(p);
	snprintf(p2, sizeof(p2), "%s/other", _dir);
	if (symlink(p2, p) < 0)
		return 99;
	/* Sorted by relpath, as the worker gets them. */
	{
		struct xfer_done_ent s[6] = { e[0], e[2], e[5], e[4], e[3], e[1] };

		ok(_run(s, 6, &removed, &left) == XFER_OK, "the cleanup runs");
	}
	ok(removed == 2 && left == 4, "2 staged files removed, 4 left (got %d, %d)", removed, left);
	ok(!_exists("scratch/u/7/input/a.dat") && !_exists("scratch/u/7/input/set/sub/b.dat"),
	   "the unchanged staged files are gone");
	ok(!_exists("scratch/u/7/input/set"), "the staged tree's directories, now empty, are gone");
	ok(_exists("scratch/u/7/input/c.dat"), "a staged file the job changed stays");
	ok(_exists("scratch/u/7/moved/m.dat"), "a staged file the job moved out stays");
	ok(_exists("scratch/u/7/input/new.dat"), "a file the job made in input/ stays");
	ok(_exists("other/victim") && _exists("scratch/u/7/input/l.dat"),
	   "a symlink in place of a staged file is not followed: its target stays");
	ok(_exists("other/f.dat"), "a symlink in place of a staged directory is not followed");
	ok(_exists("scratch/u/7/input"), "the input directory stays: it holds the job's files");

	/* Everything staged and nothing else: the input directory goes too. */
	snprintf(p, sizeof(p), "rm -rf %s/scratch/u/7/input && mkdir -p %s/scratch/u/7/input/t",
		 _dir, _dir);
	if (system(p) != 0)
		return 99;
	_write("scratch/u/7/input/t/x.dat", "x\n");
	_ent(&e[6], "scratch/u/7/input/t/x.dat", "t/x.dat");
	ok(_run(&e[6], 1, &removed, &left) == XFER_OK && removed == 1 && left == 0,
	   "a tree staged alone is removed");
	ok(!_exists("scratch/u/7/input"), "the input directory, left empty, is removed");
	ok(_exists("scratch/u/7/moved/m.dat"), "the job's directory keeps what was moved out");
	ok(_run(&e[6], 1, &removed, &left) == XFER_OK && removed == 0 && left == 1,
	   "run again (a retry after a crash): nothing to remove, done");

	/* The input directory itself a symlink: not followed. */
	snprintf(p, sizeof(p), "%s/scratch/u/7/input", _dir);
	snprintf(p2, sizeof(p2), "%s/other", _dir);
	if (symlink(p2, p) < 0)
		return 99;
	_ent(&e[7], "other/f.dat", "f.dat");
	ok(_run(&e[7], 1, &removed, &left) != XFER_OK && removed == 0,
	   "an input directory that is a symlink is refused");
	ok(_exists("other/f.dat"), "and the file its target holds stays");

	for (int i = 0; i < 8; i++)
		free(e[i].relpath);
	_test_totals();
	tap_rmtree(_dir);
	return tap_done();
}
