/*
 * test_attention.c - failures after the job reach the user: the notices
 * NotifyCommand is run for (queue_notice_next: archives, stage-ins and
 * stage-outs done, failed or cancelled; never labels) and the list 'stagehand status' shows
 * without an id (queue_filter.attention_since: unfinished requests and
 * those failed since a time).
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "queue.h"
#include "queue_audit.h"
#include "tests/tap.h"
#include "qtest.h"

static char _dir[] = "/tmp/test_attention_XXXXXX";
static char _db[300];

static int64_t _create(struct queue *q, int64_t uid, const char *action, int64_t job)
{
	struct queue_new_request nr = { uid, uid, uid == 1001 ? "alice" : "bob", job, action,
					"/src", "/dst", NULL, 0 };
	int64_t id = 0;
	char err[256];

	if (queue_request_create(q, &nr, &id, err, sizeof(err)) < 0)
		printf("# create: %s\n", err);
	return id;
}

/* Claim id (the next queued one) and end it: done (verify) or failed for good. */
static void _finish(struct queue *q, int64_t id, int done)
{
	struct queue_request *r = NULL;
	char err[256];
	int final;

	if (queue_request_claim(q, 100, &r, err, sizeof(err)) != 0 || r->id != id)
		printf("# claim of %lld: %s\n", (long long)id, r ? "another one" : err);
	queue_request_free(r);
	if (done) {
		queue_request_set_state(q, id, QS_RUNNING, QS_VERIFYING, NULL, err, sizeof(err));
		queue_request_set_state(q, id, QS_VERIFYING, QS_DONE, NULL, err, sizeof(err));
	} else {
		queue_request_fail(q, id,
				   &(struct queue_failure){ "Permission denied", 0, 30, 100 }, &final, err,
				   sizeof(err));
	}
}

struct _seen {
	int64_t id;
	char action[16], state[16];
};

static void _take(const struct queue_notice *n, void *arg)
{
	struct _seen *s = arg;

	s->id = n->id;
	snprintf(s->action, sizeof(s->action), "%s", n->action ? n->action : "(null)");
	snprintf(s->state, sizeof(s->state), "%s", n->state ? n->state : "(null)");
}

static int _collect(const struct queue_request *r, void *arg)
{
	char *ids = arg;
	size_t n = strlen(ids);

	snprintf(ids + n, 256 - n, "%s%lld", n ? "," : "", (long long)r->id);
	return 0;
}

/* The ids the filter lists, oldest last ("5,3,1"). */
static const char *_list(struct queue *q, int64_t uid, int64_t since)
{
	static char ids[256];
	struct queue_filter f = { .uid = uid, .job_id = 0, .state = -1, .limit = 0,
				  .attention_since = since };
	char err[256];

	ids[0] = '\0';
	if (queue_request_list(q, &f, _collect, ids, err, sizeof(err)) < 0)
		snprintf(ids, sizeof(ids), "error: %.200s", err);
	return ids;
}

int main(void)
{
	struct queue *q;
	struct _seen s;
	char err[512];
	int64_t si_ok, si_bad, so_bad, ar_ok, ar_bad, lab_bad, queued, other, so_gone, lab_ok;
	char want[128];

	q = qtest_open(_dir, _db, sizeof(_db));
	if (!q)
		return tap_done();

	si_ok = _create(q, 1001, "stage_in", 10);
	_finish(q, si_ok, 1);
	si_bad = _create(q, 1001, "stage_in", 11);
	_finish(q, si_bad, 0);
	so_bad = _create(q, 1001, "stage_out", 12);
	_finish(q, so_bad, 0);
	ar_ok = _create(q, 1001, "archive", 13);
	_finish(q, ar_ok, 1);
	ar_bad = _create(q, 1001, "archive", 14);
	_finish(q, ar_bad, 0);
	lab_bad = _create(q, 1001, "label", 15);
	_finish(q, lab_bad, 0);
	queued = _create(q, 1001, "archive", 16);
	other = _create(q, 1002, "stage_in", 17);
	_finish(q, other, 0);

	/* NotifyCommand: each outcome once, oldest first, with its kind. */
	memset(&s, 0, sizeof(s));
	ok(queue_notice_next(q, 0, _take, &s, err, sizeof(err)) == 1 && s.id == si_ok &&
	   !strcmp(s.action, "stage_in") && !strcmp(s.state, "done"),
	   "a done stage_in is announced, kind stage_in (%s %s)", s.action, s.state);
	ok(queue_notice_next(q, 0, _take, &s, err, sizeof(err)) == 1 && s.id == si_bad &&
	   !strcmp(s.action, "stage_in") && !strcmp(s.state, "failed_final"),
	   "a failed stage_in is announced, kind stage_in (%s %s)", s.action, s.state);
	ok(queue_notice_next(q, 0, _take, &s, err, sizeof(err)) == 1 && s.id == so_bad &&
	   !strcmp(s.action, "stage_out"), "a failed stage_out is announced, kind stage_out");
	ok(queue_notice_next(q, 0, _take, &s, err, sizeof(err)) == 1 && s.id == ar_ok &&
	   !strcmp(s.action, "archive") && !strcmp(s.state, "done"),
	   "a done archive is announced, kind archive");
	ok(queue_notice_next(q, 0, _take, &s, err, sizeof(err)) == 1 && s.id == ar_bad &&
	   !strcmp(s.state, "failed_final"), "a failed archive is announced");
	ok(queue_notice_next(q, 0, _take, &s, err, sizeof(err)) == 1 && s.id == other,
	   "another user's failed stage_in is announced too");
	ok(queue_notice_next(q, 0, _take, &s, err, sizeof(err)) == 0,
	   "nothing else: no label, nothing unfinished, none twice");

	/* 'stagehand status': unfinished, and failed since the time asked. */
	snprintf(want, sizeof(want), "%lld,%lld,%lld,%lld,%lld", (long long)queued,
		 (long long)lab_bad, (long long)ar_bad, (long long)so_bad, (long long)si_bad);
	is_str(_list(q, 1001, 1), want, "attention: alice's unfinished and failed ones, newest "
	       "first; not the done ones, not bob's");
	snprintf(want, sizeof(want), "%lld", (long long)queued);
	is_str(_list(q, 1001, (int64_t)time(NULL) + 3600), want,
	       "attention: failures older than the time asked are left out, unfinished ones stay");
	snprintf(want, sizeof(want), "%lld,%lld,%lld,%lld,%lld,%lld", (long long)other,
		 (long long)queued, (long long)lab_bad, (long long)ar_bad, (long long)so_bad,
		 (long long)si_bad);
	is_str(_list(q, -1, 1), want, "attention, every user (an admin's view)");
	snprintf(want, sizeof(want), "%lld,%lld,%lld,%lld,%lld,%lld,%lld,%lld", (long long)other,
		 (long long)queued, (long long)lab_bad, (long long)ar_bad, (long long)ar_ok,
		 (long long)so_bad, (long long)si_bad, (long long)si_ok);
	is_str(_list(q, -1, 0), want, "without attention: every request, as before");

	/* A cancelled transfer is announced as such; a done label never is. */
	so_gone = _create(q, 1002, "stage_out", 18);
	queue_request_set_state(q, so_gone, -1, QS_CANCELLED, "cancelled by uid", err, sizeof(err));
	lab_ok = _create(q, 1002, "label", 19);
	_finish(q, lab_ok, 1);
	ok(queue_notice_next(q, 0, _take, &s, err, sizeof(err)) == 1 && s.id == so_gone &&
	   !strcmp(s.action, "stage_out") && !strcmp(s.state, "cancelled"),
	   "a cancelled stage_out is announced as cancelled (%s %s)", s.action, s.state);
	ok(queue_notice_next(q, 0, _take, &s, err, sizeof(err)) == 0,
	   "nothing else: a done label is not announced");
	queue_close(q);
	tap_rmtree(_dir);
	return tap_done();
}
