/* test_drain.c - the drained state kept in the queue (queue_drain.h): set, kept across a
   reopen, a second drain, resume. */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "queue.h"
#include "queue_drain.h"
#include "tests/tap.h"
#include "qtest.h"

static char _dir[] = "/tmp/test_drain_XXXXXX";
static char _db[300];

int main(void)
{
	struct queue *q;
	struct queue_drain qd;
	char err[512];
	int already = -1, was = -1;

	q = qtest_open(_dir, _db, sizeof(_db));
	if (!q)
		return tap_done();

	ok(queue_drain_get(q, &qd, err, sizeof(err)) == 0 && !qd.reason,
	   "a new database is not drained");
	ok(queue_drain_set(q, "lustre upgrade", 0, 1000, &already, err, sizeof(err)) == 0 &&
	   already == 0, "drain");
	ok(queue_drain_get(q, &qd, err, sizeof(err)) == 1 && qd.since == 1000 && qd.by_uid == 0 &&
	   qd.reason && !strcmp(qd.reason, "lustre upgrade"), "drained: since, by, reason kept");
	queue_drain_free(&qd);

	/* What a restart sees: a new connection to the same file. */
	queue_close(q);
	q = queue_open(_db, err, sizeof(err));
	ok(q && queue_drain_get(q, &qd, err, sizeof(err)) == 1 && qd.since == 1000 &&
	   !strcmp(qd.reason, "lustre upgrade"), "still drained after a reopen");
	queue_drain_free(&qd);

	ok(queue_drain_set(q, NULL, 1001, 2000, &already, err, sizeof(err)) == 0 && already == 1,
	   "a second drain says it was drained already");
	ok(queue_drain_get(q, &qd, err, sizeof(err)) == 1 && qd.since == 1000 && qd.by_uid == 0 &&
	   !strcmp(qd.reason, "lustre upgrade"),
	   "a second drain without reason keeps the first one's time, admin and reason");
	queue_drain_free(&qd);
	ok(queue_drain_set(q, "also the switch", 1001, 3000, &already, err, sizeof(err)) == 0 &&
	   queue_drain_get(q, &qd, err, sizeof(err)) == 1 && qd.since == 1000 &&
	   !strcmp(qd.reason, "also the switch"), "a new reason replaces the old one");
	queue_drain_free(&qd);

	ok(queue_drain_clear(q, &was, err, sizeof(err)) == 0 && was == 1, "resume");
	ok(queue_drain_get(q, &qd, err, sizeof(err)) == 0, "not drained after resume");
	ok(queue_drain_clear(q, &was, err, sizeof(err)) == 0 && was == 0,
	   "a second resume says it was not drained");
	ok(queue_drain_set(q, "", 0, 4000, &already, err, sizeof(err)) == 0 &&
	   queue_drain_get(q, &qd, err, sizeof(err)) == 1 && qd.reason && !*qd.reason &&
	   qd.since == 4000, "a drain without reason: empty reason, new time");
	queue_drain_free(&qd);
	queue_close(q);
	tap_rmtree(_dir);
	return tap_done();
}
