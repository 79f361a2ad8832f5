/* test_yield.c - mapping paths to file systems and the yield decision. */
#include "config.h"

#include <string.h>

#include "tap.h"
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

	ok(yield_after_job("archive") && yield_after_job("stage_out"), "after-job actions");
	ok(!yield_after_job("stage_in") && !yield_after_job("label") && !yield_after_job(NULL),
	   "stage_in and label are not held back");
	return tap_done();
}
