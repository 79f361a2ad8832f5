/* test_shards.c - packing a plan into shards, the shards table, the engine's shard filter. */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mover_plan.h"
#include "queue.h"
#include "queue_shards.h"
#include "tests/tap.h"
#include "xfer.h"

static int _count(const char *relpath, int64_t size, void *arg)
{
	(void)relpath;
	(void)size;
	++*(int *)arg;
	return 0;
}

static int _count_done(const char *relpath, int64_t size, int64_t mtime_ns, void *arg)
{
	(void)mtime_ns;
	return _count(relpath, size, arg);
}

static void _pack(void)
{
	struct mover_plan p = { 0 };
	int64_t load[8] = { 0 }, files[8] = { 0 }, max = 0, min = INT64_MAX;
	char name[32];
	int k;

	/* One big file and many small ones: bytes balance, the big one alone. */
	mover_plan_add(&p, "big", 1000000);
	for (int i = 0; i < 300; i++) {
		snprintf(name, sizeof(name), "s%03d", i);
		mover_plan_add(&p, name, 10000 + i);
	}
	k = mover_plan_pack(&p, 1000000, 1000000, 16);
	ok(k == 5, "shards: ceil(4.0 MB / 1 MB) = 5 (got %d)", k);
	for (size_t i = 0; i < p.n; i++) {
		load[p.f[i].idx] += p.f[i].size;
		files[p.f[i].idx]++;
	}
	/* The big file's shard holds it alone; the others share the small files. */
	for (int s = 0; s < k; s++) {
		if (load[s] == 1000000)
			continue;
		max = load[s] > max ? load[s] : max;
		min = load[s] < min ? load[s] : min;
	}
	ok(max - min <= 10299, "other shards within one file of each other in bytes (%lld..%lld)",
	   (long long)min, (long long)max);
	for (size_t i = 0; i < p.n; i++)
		if (strcmp(p.f[i].relpath, "big") == 0)
			ok(files[p.f[i].idx] == 1, "the big file has a shard of its own");
	ok(mover_plan_pack(&p, 1ULL << 40, 100, 16) == 4, "by files: ceil(301 / 100) = 4");
	ok(mover_plan_pack(&p, 1000, 1, 6) == 6, "at most MoverMaxJobs shards");
	ok(mover_plan_pack(&p, 1ULL << 40, 1000, 16) == 1, "small enough: not split");
	mover_plan_free(&p);
	mover_plan_add(&p, "a", 5);
	mover_plan_add(&p, "b", 5);
	ok(mover_plan_pack(&p, 1, 1, 16) == 2, "never more shards than files");
	mover_plan_free(&p);
}

static void _table(void)
{
	char path[] = "/tmp/test_shards.XXXXXX", db[64], err[512] = "";
	struct queue_new_request nr = { 1000, 1000, "u", 0, "archive", "/s", "/d", NULL, 3 };
	struct queue_shard_file f[] = { { "x/b", 10, 0 }, { "a", 20, 1 }, { "x/a", 30, 0 } };
	struct queue_shard *s = NULL;
	struct queue_audit au = { 0, 1000, "/s/x/a", "/d/x/a", "ab", 30, 1, 2 };
	struct queue *q;
	int64_t id;
	int n = 0, nf = 0, nd = 0;

	ok(mkdtemp(path) != NULL, "temp dir");
	snprintf(db, sizeof(db), "%s/q.db", path);
	q = queue_open(db, err, sizeof(err));
	ok(q != NULL, "open (schema 3): %s", q ? "" : err);
	if (!q)
		return;
	ok(queue_request_create(q, &nr, &id, err, sizeof(err)) == 0, "request");
	ok(queue_shards_create(q, id, 2, f, 3, err, sizeof(err)) == 0, "plan stored%s%s", *err ? ": " : "", err);
	ok(queue_shards_list(q, id, &s, &n, err, sizeof(err)) == 0 && n == 2, "two shards");
	ok(n == 2 && s[0].files == 2 && s[0].bytes == 40 && s[1].files == 1 && s[1].bytes == 20,
	   "files and bytes per shard");
	queue_shards_free(s, n);
	ok(queue_shard_files(q, id, 0, _count, &nf, err, sizeof(err)) == 0 && nf == 2,
	   "shard 0 lists its 2 files");
	ok(queue_shard_submitted(q, id, 0, 77, err, sizeof(err)) == 0, "submitted as job 77");
	ok(queue_shard_set(q, id, 0, 78, QSH_DONE, NULL, err, sizeof(err)) == 1,
	   "another job cannot settle the shard");
	ok(queue_shard_job(q, 77, err, sizeof(err)) == 1 &&
	   queue_shard_job(q, 78, err, sizeof(err)) == 0 &&
	   queue_shard_job(q, 0, err, sizeof(err)) == 0, "job 77 is a mover job, 78 and 0 are not");
	ok(queue_item_file_done(q, id, "x/a", 30, 5, 0644, "ab", "ab", &au, err, sizeof(err)) == 0,
	   "a file verified");
	ok(queue_item_file_done(q, id, "x/a", 30, 5, 0644, "ab", "ab", &au, err, sizeof(err)) == 0,
	   "the same report again");
	ok(queue_shard_done(q, id, 0, _count_done, &nd,
			    err, sizeof(err)) == 0 && nd == 1, "the resume set of shard 0 has it");
	{
		struct queue_request *r = NULL;

		ok(queue_request_get(q, id, &r, err, sizeof(err)) == 0 && r->files_done == 1 &&
		   r->bytes_done == 30, "counted once");
		queue_request_free(r);
	}
	ok(queue_shard_set(q, id, 0, 77, QSH_QUEUED, "lost", err, sizeof(err)) == 0,
	   "its job gives it back");
	ok(queue_shards_list(q, id, &s, &n, err, sizeof(err)) == 0 && s[0].state == QSH_QUEUED &&
	   s[0].slurm_job == 0 && s[0].attempts == 1 && s[0].error && strcmp(s[0].error, "lost") == 0,
	   "queued again, job cleared, attempt counted, reason kept");
	queue_shards_free(s, n);
	ok(queue_shard_submitted(q, id, 0, 79, err, sizeof(err)) == 0 &&
	   queue_shard_set(q, id, 0, 79, QSH_DONE, NULL, err, sizeof(err)) == 0, "job 79 finishes it");
	ok(queue_shard_job(q, 79, err, sizeof(err)) == 1, "a done shard's job stays known");
	ok(queue_shard_set(q, id, 0, 0, QSH_QUEUED, NULL, err, sizeof(err)) == 1,
	   "a done shard stays done");
	nf = 0;
	ok(queue_shards_forget_files(q, id, err, sizeof(err)) == 0 &&
	   queue_shard_files(q, id, 1, _count, &nf, err, sizeof(err)) == 0 && nf == 0,
	   "file lists dropped once every shard is done");
	ok(queue_shards_list(q, id, &s, &n, err, sizeof(err)) == 0 && n == 2,
	   "... the shards stay (a retry is not planned again)");
	queue_shards_free(s, n);
	queue_close(q);
	unlink(db);
	snprintf(db, sizeof(db), "%s/q.db-wal", path);
	unlink(db);
	snprintf(db, sizeof(db), "%s/q.db-shm", path);
	unlink(db);
	rmdir(path);
}

static void _filter(void)
{
	const char *files[] = { "a", "d/x", "d/y" };
	struct xfer_shard sh = { files, 3 };
	struct xfer_ctx ctx;

	memset(&ctx, 0, sizeof(ctx));
	ok(!xfer_shard_skip(&ctx, "anything"), "no shard: nothing skipped");
	ctx.shard = &sh;
	ok(!xfer_shard_skip(&ctx, "a") && !xfer_shard_skip(&ctx, "d/y"), "the shard's files run");
	ok(xfer_shard_skip(&ctx, "b") && xfer_shard_skip(&ctx, "d") && xfer_shard_skip(&ctx, "d/z"),
	   "other paths are left to other shards");
}

int main(void)
{
	_pack();
	_table();
	_filter();
	return tap_done();
}
