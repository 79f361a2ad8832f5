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

#define MIB (1LL << 20)

/* The ranges of relpath in p cover it exactly, in order; returns how many. */
static int _covered(const struct mover_plan *p, const char *relpath, int64_t size)
{
	int64_t next = 0;
	int n = 0, found = 1;

	while (found) {
		found = 0;
		for (size_t i = 0; i < p->n; i++)
			if (strcmp(p->f[i].relpath, relpath) == 0 && p->f[i].ranged &&
			    p->f[i].off == next) {
				next += p->f[i].len;
				n++;
				found = 1;
			}
	}
	return next == size ? n : -1;
}

static void _ranges(void)
{
	struct mover_plan p = { 0 };
	int seen[8] = { 0 }, k, distinct = 0;

	/* One 96 MiB file, shards of 32 MiB: three ranges on three shards. */
	mover_plan_add(&p, "big", 96 * MIB);
	k = mover_plan_pack(&p, 32 * MIB, 1000, 16);
	ok(k == 3, "a 96 MiB file with 32 MiB shards: 3 shards (got %d)", k);
	ok(p.n == 3 && _covered(&p, "big", 96 * MIB) == 3, "three ranges cover it exactly");
	ok(p.files == 1 && p.bytes == 96 * MIB, "still one file of 96 MiB (%lld, %lld)",
	   (long long)p.files, (long long)p.bytes);
	for (size_t i = 0; i < p.n; i++)
		if (p.f[i].idx >= 0 && p.f[i].idx < 8 && !seen[p.f[i].idx]++)
			distinct++;
	ok(distinct == 3, "each range on a shard of its own");
	mover_plan_free(&p);

	/* Uneven: 100 MiB + 1 byte and a small file; ranges are MiB multiples. */
	mover_plan_add(&p, "d/odd", 100 * MIB + 1);
	mover_plan_add(&p, "small", 1000);
	k = mover_plan_pack(&p, 32 * MIB, 1000, 16);
	ok(k == 4 && _covered(&p, "d/odd", 100 * MIB + 1) == 4, "100 MiB + 1: 4 ranges (k %d)", k);
	{
		int aligned = 1;

		for (size_t i = 0; i < p.n; i++)
			if (p.f[i].ranged && p.f[i].off % MOVER_RANGE_ALIGN != 0)
				aligned = 0;
		ok(aligned, "every range starts at a MiB multiple");
	}
	ok(p.files == 2 && p.bytes == 100 * MIB + 1001, "two files, their bytes counted once");
	mover_plan_free(&p);

	/* Not split at all: no ranges either (a local worker copies whole files). */
	mover_plan_add(&p, "big", 96 * MIB);
	ok(mover_plan_pack(&p, 32 * MIB, 1000, 1) == 1 && p.n == 1 && !p.f[0].ranged,
	   "MoverMaxJobs=1: one shard, the file whole");
	mover_plan_free(&p);

	/* Ranges are at least MOVER_RANGE_ALIGN: a 1 MiB file stays whole. */
	mover_plan_add(&p, "a", MIB);
	mover_plan_add(&p, "b", MIB - 1);
	ok(mover_plan_pack(&p, 1000, 1000, 16) == 2 && p.n == 2 && !p.f[0].ranged &&
	   !p.f[1].ranged, "files of one alignment unit or less are not split");
	mover_plan_free(&p);
}

struct _asm {
	int n;
	char cks[CKSUM_HEX_MAX];
};

static int _asm(const char *relpath, int64_t size, int64_t mtime_ns, const char *cks, void *arg)
{
	struct _asm *a = arg;

	(void)relpath;
	(void)size;
	(void)mtime_ns;
	a->n++;
	snprintf(a->cks, sizeof(a->cks), "%s", cks);
	return 0;
}

static int _count_range(const char *relpath, int64_t off, int64_t len, int64_t size, void *arg)
{
	(void)relpath;
	(void)off;
	(void)len;
	(void)size;
	++*(int *)arg;
	return 0;
}

/* The shard_ranges table: ranges listed per shard, done once, assembled when all are. */
static int _count_rdone(const char *relpath, int64_t off, int64_t len, int64_t src_size,
			int64_t mtime_ns, const char *cks, void *arg)
{
	(void)relpath;
	(void)off;
	(void)len;
	(void)src_size;
	(void)mtime_ns;
	if (strncmp(cks, "xxh128:", 7) == 0)
		++*(int *)arg;
	return 0;
}

/* Range off..off+10 of the 30-byte file "big", held by shard idx, done (queue_range_done). */
static int _big_range(struct queue *q, int64_t id, int idx, int64_t off, int64_t mtime,
		      const char *cks)
{
	struct queue_range_rec rg = { "big", off, 10, 30, mtime, cks };
	char err[256];

	return queue_range_done(q, id, idx, &rg, err, sizeof(err));
}

static void _range_table(struct queue *q, int64_t id)
{
	struct queue_shard_file f[] = {
		{ "big", 30, 0, 1, 0, 10 }, { "big", 30, 1, 1, 10, 10 }, { "big", 30, 0, 1, 20, 10 },
		{ "small", 5, 1, 0, 0, 5 },
	};
	struct queue_shard *s = NULL;
	struct _asm a = { 0 };
	char err[512] = "";
	int n = 0, nr = 0;

	ok(queue_shards_create(q, id, 2, f, 4, err, sizeof(err)) == 0, "plan with ranges stored%s%s",
	   *err ? ": " : "", err);
	ok(queue_shards_list(q, id, &s, &n, err, sizeof(err)) == 0 && n == 2 && s[0].files == 0 &&
	   s[0].bytes == 20 && s[1].files == 1 && s[1].bytes == 15, "ranges count in shard bytes");
	queue_shards_free(s, n);
	ok(queue_shard_ranges(q, id, 0, _count_range, &nr, err, sizeof(err)) == 0 && nr == 2,
	   "shard 0 has two ranges");
	ok(_big_range(q, id, 0, 0, 7, "xxh128:aa") == 0, "range 0 done");
	ok(_big_range(q, id, 0, 0, 7, "xxh128:aa") == 1, "range 0 reported again: recorded once");
	ok(_big_range(q, id, 0, 10, 7, "xxh128:bb") == 1, "shard 0 cannot report shard 1's range");
	nr = 0;
	ok(queue_shard_ranges(q, id, 0, _count_range, &nr, err, sizeof(err)) == 0 && nr == 1,
	   "a done range is not handed out again");
	ok(queue_ranges_assembled(q, id, CKSUM_XXH128, _asm, &a, err, sizeof(err)) == 0 && a.n == 0,
	   "not assembled while ranges are missing");
	ok(_big_range(q, id, 1, 10, 7, "xxh128:bb") == 0 &&
	   _big_range(q, id, 0, 20, 8, "xxh128:cc") == 0,
	   "the other two done, one from a newer source");
	ok(queue_ranges_assembled(q, id, CKSUM_XXH128, _asm, &a, err, sizeof(err)) == 0 && a.n == 0,
	   "ranges of two versions of the source are not assembled");
	ok(queue_shards_create(q, id, 2, f, 4, err, sizeof(err)) == 0 &&
	   _big_range(q, id, 0, 0, 7, "xxh128:aa") == 0 &&
	   _big_range(q, id, 1, 10, 7, "xxh128:bb") == 0 &&
	   _big_range(q, id, 0, 20, 7, "xxh128:cc") == 0,
	   "planned again, all three done from one version");
	nr = 0;
	ok(queue_ranges_done(q, id, _count_rdone, &nr, err, sizeof(err)) == 0 && nr == 3,
	   "the three done ranges listed with their checksums, for the read-back");
	ok(queue_range_undo(q, id, "big", 10, err, sizeof(err)) == 0, "a range undone");
	nr = 0;
	ok(queue_ranges_done(q, id, _count_rdone, &nr, err, sizeof(err)) == 0 && nr == 2 &&
	   queue_ranges_assembled(q, id, CKSUM_XXH128, _asm, &a, err, sizeof(err)) == 0 && a.n == 0,
	   "an undone range is not done: the file is not assembled from its ranges");
	ok(_big_range(q, id, 1, 10, 7, "xxh128:bb") == 0, "and its shard's next job can report it again");
	ok(queue_ranges_assembled(q, id, CKSUM_XXH128, _asm, &a, err, sizeof(err)) == 0 &&
	   a.n == 1 && strncmp(a.cks, "ranges-xxh128:", 14) == 0,
	   "assembled, with a checksum of its ranges (%s)", a.cks);
	ok(queue_item_file_done(q, id, &(struct queue_file_done){ "big", a.cks, a.cks, 30, 7, 0644,
				{ 0 } }, err,
				sizeof(err)) == 0, "finished as one file");
	a.n = 0;
	ok(queue_ranges_assembled(q, id, CKSUM_XXH128, _asm, &a, err, sizeof(err)) == 0 && a.n == 0,
	   "a finished file is not handed out again");
}

static void _table(void)
{
	char path[] = "/tmp/test_shards.XXXXXX", db[64], err[512] = "";
	struct queue_new_request nr = { 1000, 1000, "u", 0, "archive", "/s", "/d", NULL, 3 };
	struct queue_shard_file f[] = { { "x/b", 10, 0, 0, 0, 10 }, { "a", 20, 1, 0, 0, 20 },
					{ "x/a", 30, 0, 0, 0, 30 } };
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
	ok(queue_item_file_done(q, id, &(struct queue_file_done){ "x/a", "ab", "ab", 30, 5, 0644,
				au }, err, sizeof(err)) == 0,
	   "a file verified");
	ok(queue_item_file_done(q, id, &(struct queue_file_done){ "x/a", "ab", "ab", 30, 5, 0644,
				au }, err, sizeof(err)) == 0,
	   "the same report again");
	ok(queue_shard_done(q, id, 0, _count_done, &nd,
			    err, sizeof(err)) == 0 && nd == 1, "the resume set of shard 0 has it");
	{
		struct queue_request *r = NULL;

		ok(queue_request_get(q, id, &r, err, sizeof(err)) == 0 && r->files_done == 1 &&
		   r->bytes_done == 30, "counted once");
		queue_request_free(r);
		r = NULL;
		ok(queue_item_unverified(q, id, "x/a", "not as recorded", err, sizeof(err)) == 0 &&
		   queue_item_unverified(q, id, "x/a", "not as recorded", err, sizeof(err)) == 0 &&
		   queue_item_unverified(q, id, "none", "not as recorded", err, sizeof(err)) == 0,
		   "a file found unlike its record (twice), and a path with no item");
		ok(queue_request_get(q, id, &r, err, sizeof(err)) == 0 && r->files_done == 0 &&
		   r->bytes_done == 0, "no longer counted, once");
		queue_request_free(r);
		r = NULL;
		nd = 0;
		ok(queue_shard_done(q, id, 0, _count_done, &nd, err, sizeof(err)) == 0 && nd == 0,
		   "not in the resume set");
		ok(queue_item_file_done(q, id, &(struct queue_file_done){ "x/a", "ab", "ab", 30, 5, 0644,
				au }, err,
					sizeof(err)) == 0 &&
		   queue_request_get(q, id, &r, err, sizeof(err)) == 0 && r->files_done == 1 &&
		   r->bytes_done == 30, "copied again: counted once again");
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
	ok(queue_request_create(q, &nr, &id, err, sizeof(err)) == 0, "a second request");
	_range_table(q, id);
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
	_ranges();
	_table();
	_filter();
	return tap_done();
}
