/* test_sluid.c - the SLUIDs of a job's runs (queue_sluid.h): the first is the
   current run, a repeat is too, a new one replaces it, an earlier one is
   refused and changes nothing, jobs do not mix, a reopen keeps them. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "queue.h"
#include "queue_sluid.h"
#include "tests/tap.h"
#include "qtest.h"

static char _dir[] = "/tmp/test_sluid_XXXXXX";
static char _db[300];

static const char *_current(struct queue *q, int64_t job)
{
	static char s[QUEUE_SLUID_MAX + 1];
	char err[256];

	if (queue_job_sluid_get(q, job, s, sizeof(s), err, sizeof(err)) < 0)
		snprintf(s, sizeof(s), "error");
	return s;
}

int main(void)
{
	struct queue *q;
	char err[512], known[QUEUE_SLUID_MAX + 1];

	q = qtest_open(_dir, _db, sizeof(_db));
	if (!q)
		return tap_done();

	ok(queue_sluid_valid("s2H9M99A0E7S00") && !queue_sluid_valid("") &&
	   !queue_sluid_valid("s2H9/") && !queue_sluid_valid("s 1") &&
	   queue_sluid_valid("s23456789012345678901234567890AB") &&
	   !queue_sluid_valid("s23456789012345678901234567890ABC"),
	   "a SLUID: 1 to 32 letters and digits");
	ok(!strcmp(_current(q, 7), ""), "a job with no SLUID has none");
	ok(queue_job_sluid_record(q, 7, "sRUNA", known, sizeof(known), err, sizeof(err)) ==
	   QS_SLUID_CURRENT && !strcmp(known, "") && !strcmp(_current(q, 7), "sRUNA"),
	   "the first SLUID is the current run");
	ok(queue_job_sluid_record(q, 7, "sRUNA", known, sizeof(known), err, sizeof(err)) ==
	   QS_SLUID_CURRENT && !strcmp(known, "sRUNA"), "a repeat is the current run's");
	ok(queue_job_sluid_record(q, 7, "sRUNB", known, sizeof(known), err, sizeof(err)) ==
	   QS_SLUID_NEW && !strcmp(known, "sRUNA") && !strcmp(_current(q, 7), "sRUNB"),
	   "a new SLUID is the next run, naming the one before");
	ok(queue_job_sluid_record(q, 7, "sRUNA", known, sizeof(known), err, sizeof(err)) ==
	   QS_SLUID_EARLIER && !strcmp(known, "sRUNB") && !strcmp(_current(q, 7), "sRUNB"),
	   "an earlier run's is refused and the current run stays");
	ok(queue_job_sluid_record(q, 8, "sRUNA", known, sizeof(known), err, sizeof(err)) ==
	   QS_SLUID_CURRENT && !strcmp(_current(q, 8), "sRUNA") &&
	   !strcmp(_current(q, 7), "sRUNB"), "another job's runs are its own");

	queue_close(q);
	q = queue_open(_db, err, sizeof(err));
	ok(q && !strcmp(_current(q, 7), "sRUNB") &&
	   queue_job_sluid_record(q, 7, "sRUNA", known, sizeof(known), err, sizeof(err)) ==
	   QS_SLUID_EARLIER, "kept across a reopen");
	if (q)
		queue_close(q);
	tap_rmtree(_dir);
	return tap_done();
}
