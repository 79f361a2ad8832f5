/* test_yield.c - mapping paths to file systems and the yield decision. */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include "tests/tap.h"
#include "yield.h"

int main(void)
{
	char *roots[] = { "/scratch", "/scratch/fast", "/archive", "/" };
	dev_t devs[] = { 10, 11, 20, 0 };
	dev_t busy_scratch[] = { 10 };
	struct yield_view v = { roots, devs, 3, busy_scratch, 1, 0 };

	ok(yield_root_index("/scratch/u/job", roots, 3) == 0, "path under a root");
	ok(yield_root_index("/scratch", roots, 3) == 0, "the root itself");
	ok(yield_root_index("/scratch/fast/x", roots, 3) == 1, "longest root wins");
	ok(yield_root_index("/scratchy/x", roots, 3) == -1, "prefix must end at a '/'");
	ok(yield_root_index("/home/u", roots, 3) == -1, "no root");
	ok(yield_root_index("relative/x", roots, 3) == -1, "relative path matches nothing");
	ok(yield_root_index(NULL, roots, 3) == -1, "NULL path");
	ok(yield_root_index("/home/u", roots, 4) == 3, "'/' holds everything");
	ok(yield_root_index("/archive/u", roots, 4) == 2, "a longer root beats '/'");

	ok(yield_paths_affected(&v, "/scratch/u/out", "/archive/u/out"), "source on a busy device");
	ok(!yield_paths_affected(&v, "/scratch/fast/u", "/archive/u"), "other devices: not held");
	ok(yield_paths_affected(&v, "/archive/u", "/scratch/u/in"), "destination on a busy device");
	ok(yield_paths_affected(&v, "/home/u/out", "/archive/u"),
	   "a path under no root is held while anything is busy");
	ok(!yield_paths_affected(&v, "/scratch/fast/u", "https://example.org/x"),
	   "a URL is not a local file system");
	v.nbusy = 0;
	ok(!yield_paths_affected(&v, "/scratch/u/out", "/home/u"), "nothing busy: nothing held");
	v.unknown_busy = 1;
	ok(!yield_paths_affected(&v, "/scratch/u/out", "/archive/u"),
	   "a job on an unknown file system does not hold known roots");
	ok(yield_paths_affected(&v, "/home/u/out", "/archive/u"),
	   "... but holds paths of unknown file systems");

	/* Job-start events: until the end event, the watch, or the expiry. */
	struct yield_starts t = { 0 };
	const char *j1[] = { "/scratch/u/run1", "/scratch/u/1" };
	const char *j2[] = { "/home/v/run2", "relative/ignored" };
	char *watch_none[] = { NULL };
	char *watch_j1[] = { "/scratch/u/run1", "/scratch/u/run1/slurm-1.out", NULL };

	ok(yield_starts_add(&t, 1, j1, 2, 1000) == 0 && t.n == 1 && t.v[0].npaths == 2,
	   "a start event records its paths");
	ok(yield_starts_add(&t, 2, j2, 2, 5000) == 0 && t.n == 2, "a second job");
	ok(t.v[1].npaths == 1, "relative paths are not kept");
	ok(yield_starts_add(&t, 1, j1, 1, 1000) == 0 && t.n == 2 && t.v[0].npaths == 1,
	   "a repeat replaces the job's paths");
	ok(t.v[0].mover == -1 && t.v[1].mover == -1 && yield_starts_users(&t) == 2,
	   "a new event is not yet known as a mover job, and counts");
	t.v[0].mover = 1;
	ok(yield_starts_users(&t) == 1, "a mover job's event is not counted");
	ok(yield_starts_add(&t, 1, j1, 1, 1000) == 0 && t.v[0].mover == 1,
	   "a repeat keeps what is known of the job");
	t.v[0].mover = 0;
	ok(yield_starts_watch(&t, watch_none, NULL, 0, 0) == 0 && t.n == 2,
	   "the watch not listing a job it never saw drops nothing");
	ok(yield_starts_watch(&t, watch_j1, NULL, 0, 0) == 0 && t.v[0].seen && !t.v[1].seen,
	   "the watch listing the work directory marks the job seen");
	ok(yield_starts_watch(&t, NULL, NULL, 0, 0) == 1 && t.n == 1 && t.v[0].job == 2,
	   "a seen job the watch no longer lists is dropped");
	{
		/* A job killed as it started: never seen by the watch, no end event. */
		const uint32_t ids_2[] = { 2, 7 }, ids_7[] = { 7 };
		time_t ev = t.v[0].event_time;

		ok(yield_starts_watch(&t, NULL, ids_7, 1, ev) == 0 && t.n == 1,
		   "a table of the event's own second drops nothing (it may predate the start)");
		ok(yield_starts_watch(&t, NULL, ids_2, 2, ev + 1) == 0 && t.n == 1,
		   "a later table that lists the job as running keeps it");
		ok(yield_starts_watch(&t, NULL, NULL, 0, ev + 5) == 0 && t.n == 1,
		   "no running ids (not known): kept");
		ok(yield_starts_add(&t, 9, j1, 1, 1000) == 0 && t.n == 2, "another job");
		t.v[1].event_time = ev;
		ok(yield_starts_watch(&t, NULL, ids_7, 1, ev + 1) == 2 && t.n == 0,
		   "a later table that does not list them drops jobs never seen");
		ok(yield_starts_add(&t, 2, j2, 1, 5000) == 0 && t.n == 1, "job 2 again");
	}
	ok(yield_starts_expire(&t, 4999) == 0 && t.n == 1, "not expired before its time");
	ok(yield_starts_expire(&t, 5000) == 1 && t.n == 0, "expired at its time");
	ok(yield_starts_add(&t, 3, j1, 2, 1000) == 0 && yield_starts_remove(&t, 3) == 1 &&
	   t.n == 0, "the end event removes it");
	ok(yield_starts_remove(&t, 3) == 0, "a second end event is a no-op");
	for (int64_t k = 0; k < YIELD_STARTS_MAX; k++)
		yield_starts_add(&t, 100 + k, j1, 1, 1000);
	ok(t.n == YIELD_STARTS_MAX && yield_starts_add(&t, 99, j1, 1, 1000) < 0,
	   "the table is bounded");
	ok(yield_starts_add(&t, 100, j2, 1, 1000) == 0, "... a repeat still fits");
	yield_starts_free(&t);
	ok(t.n == 0 && t.v == NULL, "freed");

	ok(yield_after_job("archive") && yield_after_job("stage_out"), "after-job actions");
	ok(!yield_after_job("stage_in") && !yield_after_job("label") && !yield_after_job(NULL),
	   "stage_in and label are not held back");
	return tap_done();
}
