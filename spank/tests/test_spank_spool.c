/* Unit tests: the job-end spool (spool.c), with a fake daemon. */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fakesrv.h"
#include "monoclock.h"
#include "spool.h"
#include "tests/tap.h"
#include "dclient.h"

static char msgs[4096];
static void warn(const char *m)
{
	size_t l = strlen(msgs);
	snprintf(msgs + l, sizeof(msgs) - l, "%s\n", m);
}

static int exists(const char *dir, const char *name)
{
	char p[512];
	struct stat st;
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return lstat(p, &st) == 0;
}

static void put(const char *dir, const char *name, const char *text)
{
	char p[512];
	snprintf(p, sizeof(p), "%s/%s", dir, name);
	FILE *f = fopen(p, "w");
	fputs(text, f);
	fclose(f);
}

/* A UNIX target for path; the same static object each call. */
static const struct dclient_target *T(const char *path)
{
	static struct dclient_target t;
	char e[256];

	if (dclient_target_unix(&t, path, e, sizeof(e)) < 0) {
		printf("Bail out! %s\n", e);
		exit(1);
	}
	return &t;
}

/* The end-state rule and the event body, shared by the plugin and the epilog. */
static void _jobend(void)
{
	ok(strcmp(jobend_state("TIMEOUT", true, 0, 15), "TIMEOUT") == 0,
	   "a final Slurm state is kept");
	ok(strcmp(jobend_state("COMPLETING", true, 0, 0), "COMPLETED") == 0,
	   "COMPLETING with exit 0: COMPLETED");
	ok(strcmp(jobend_state("COMPLETING", true, 3, 0), "FAILED") == 0, "exit 3: FAILED");
	ok(strcmp(jobend_state(NULL, true, 0, 9), "CANCELLED") == 0, "SIGKILL: CANCELLED");
	ok(strcmp(jobend_state(NULL, true, 0, 11), "FAILED") == 0, "SIGSEGV: FAILED");
	ok(strcmp(jobend_state(NULL, false, 0, 0), "UNKNOWN") == 0, "nothing known: UNKNOWN");
	ok(strcmp(jobend_state("RUNNING", false, 0, 0), "UNKNOWN") == 0,
	   "not final and no exit: UNKNOWN");

	json_t *plan = json_pack("{s:i,s:[]}", "version", 1, "actions");
	struct jobend_info ji = { .slurm_state = "COMPLETING", .have_exit = true,
				  .exit_code = 2, .uid = 1001, .gid = -1, .user = "shtest",
				  .work_dir = "/w", .node = "n1", .source = "epilog",
				  .plan = plan };
	json_t *ev = jobend_event(&ji);
	char *txt = ev ? json_dumps(ev, JSON_SORT_KEYS | JSON_COMPACT) : NULL;
	is_str(txt, "{\"exit_code\":2,\"node\":\"n1\",\"plan\":{\"actions\":[],"
	       "\"version\":1},\"signal\":0,\"source\":\"epilog\",\"state\":\"FAILED\","
	       "\"uid\":1001,\"user\":\"shtest\",\"work_dir\":\"/w\"}",
	       "event body: the documented fields, no unknown gid");
	free(txt);
	json_decref(ev);
	json_decref(plan);
}

int main(void)
{
	char top[] = "/tmp/sh-spool-XXXXXX", dir[256], err[1024], p[512];
	struct fake_srv s = { 0 };
	struct spool_stats st;
	struct stat sb;
	unsigned long id;

	if (mkdtemp(top) == NULL)
		return 99;
	snprintf(dir, sizeof(dir), "%s/spool", top);

	ok(spool_prepare_dir(dir, err, sizeof(err)) == 0, "spool dir created");
	ok(stat(dir, &sb) == 0 && (sb.st_mode & 0777) == 0700, "spool dir is 0700");
	chmod(dir, 0755);
	ok(spool_prepare_dir(dir, err, sizeof(err)) == 0 && stat(dir, &sb) == 0 &&
	   (sb.st_mode & 0777) == 0700, "a loose mode is tightened");
	snprintf(p, sizeof(p), "%s/linkspool", top);
	symlink(dir, p);
	ok(spool_prepare_dir(p, err, sizeof(err)) < 0, "a symlinked spool is refused");
	snprintf(p, sizeof(p), "%s/no/such/parent", top);
	ok(spool_prepare_dir(p, err, sizeof(err)) < 0, "missing parent reported");
	contains(err, "cannot create spool directory", "message says so");

	json_t *ev = json_pack("{s:s, s:i, s:i}", "state", "COMPLETED", "exit_code", 0,
			       "uid", 1001);
	ok(spool_write(dir, 42, ev, err, sizeof(err)) == 0, "event spooled");
	ok(exists(dir, "job-42.json"), "job-42.json exists");
	snprintf(p, sizeof(p), "%s/job-42.json", dir);
	ok(stat(p, &sb) == 0 && (sb.st_mode & 0777) == 0600, "spool file is 0600");
	json_t *back = spool_read(dir, "job-42.json", &id, err, sizeof(err));
	ok(back && id == 42 && json_equal(back, ev), "read back equal");
	json_decref(back);
	json_error_t je;
	json_t *rec = json_load_file(p, 0, &je);
	ok(rec && json_integer_value(json_object_get(rec, "version")) == 1 &&
	   json_integer_value(json_object_get(rec, "job_id")) == 42,
	   "file has version and job_id");
	json_decref(rec);
	ok(spool_write(dir, 42, ev, err, sizeof(err)) == 0, "rewrite replaces");
	ok(spool_write(dir, 7, ev, err, sizeof(err)) == 0, "second job spooled");

	/* Bad files. */
	put(dir, "job-9.json", "{not json");
	put(dir, "job-10.json", "{\"version\":1,\"job_id\":11,\"event\":{}}");
	put(dir, "notes.txt", "ignored");
	ok(spool_read(dir, "job-9.json", &id, err, sizeof(err)) == NULL, "garbage refused");
	ok(spool_read(dir, "job-10.json", &id, err, sizeof(err)) == NULL,
	   "job id mismatch refused");
	contains(err, "job 10", "message names the job");
	ok(spool_read(dir, "job-x.json", &id, err, sizeof(err)) == NULL, "bad name refused");

	/* Daemon down: nothing removed, stops at once. */
	snprintf(p, sizeof(p), "%s/none.sock", top);
	long long t0 = mono_ms();
	/* Budgets long enough that waiting any of them out is told apart from
	 * stopping at once on a slow, loaded machine. */
	ok(spool_deliver(dir, T(p), &(struct spool_budget){ 20, 10000, 20000 }, &st, warn, err,
		      sizeof(err)) == 0,
	   "deliver with no daemon returns");
	ok(st.daemon_down && st.delivered == 0, "daemon reported down");
	ok(mono_ms() - t0 < 5000, "and at once, not after a timeout (%lld ms)",
	   mono_ms() - t0);
	ok(exists(dir, "job-7.json") && exists(dir, "job-42.json"), "events kept");
	ok(exists(dir, "job-9.json") && exists(dir, "job-10.json"),
	   "stopped at the first event: later ones untouched");

	/* Silent daemon: one timeout, then stop. */
	fake_start(&s, top, FAKE_SILENT, 0, NULL, 0);
	t0 = mono_ms();
	/* 4 events of 2 s each: one timeout is 2 s, a second would make 4. */
	spool_deliver(dir, T(s.sock), &(struct spool_budget){ 20, 2000, 20000 }, &st, warn, err,
		      sizeof(err));
	ok(st.daemon_down && mono_ms() - t0 < 3900, "silent daemon: one timeout (%lld ms)",
	   mono_ms() - t0);
	ok(exists(dir, "job-7.json"), "event kept after timeout");
	fake_stop(&s);

	/* Busy daemon (503): kept. */
	fake_start(&s, top, FAKE_ANSWER, 503, "{\"error\":\"draining\"}", 0);
	spool_deliver(dir, T(s.sock), &(struct spool_budget){ 20, 200, 1000 }, &st, warn, err,
		      sizeof(err));
	ok(st.daemon_down && exists(dir, "job-7.json"), "503: kept for later");
	fake_stop(&s);

	/* Limit per call, oldest first. */
	fake_start(&s, top, FAKE_ANSWER, 202, "{}", 0);
	spool_deliver(dir, T(s.sock), &(struct spool_budget){ 1, 200, 1000 }, &st, warn, err,
		      sizeof(err));
	ok(st.delivered == 1 && st.left == 3, "max=1 delivers one (%d, left %d)",
	   st.delivered, st.left);
	ok(!exists(dir, "job-7.json") && exists(dir, "job-42.json"), "oldest job first");
	spool_deliver(dir, T(s.sock), &(struct spool_budget){ 20, 200, 1000 }, &st, warn, err,
		      sizeof(err));
	ok(st.delivered == 1 && !exists(dir, "job-42.json"), "the rest delivered");
	ok(st.rejected == 2 && exists(dir, "bad-job-9.json") &&
	   exists(dir, "bad-job-10.json"), "unreadable events set aside");
	contains(msgs, "job 10", "the reason is logged");
	char *log = fake_requests(&s);
	contains(log, "POST /v1/jobs/7/end\n{\"state\":\"COMPLETED\"", "POST for job 7");
	contains(log, "POST /v1/jobs/42/end\n", "POST for job 42");
	free(log);
	fake_stop(&s);

	/* Rejected (400): set aside. 409 (already known): delivered. */
	spool_write(dir, 50, ev, err, sizeof(err));
	fake_start(&s, top, FAKE_ANSWER, 400, "{\"error\":\"bad plan\"}", 0);
	spool_deliver(dir, T(s.sock), &(struct spool_budget){ 20, 200, 1000 }, &st, warn, err,
		      sizeof(err));
	ok(st.rejected == 1 && exists(dir, "bad-job-50.json"), "400: set aside");
	contains(msgs, "bad plan", "the daemon's reason is logged");
	fake_stop(&s);
	spool_write(dir, 51, ev, err, sizeof(err));
	fake_start(&s, top, FAKE_ANSWER, 409, "{}", 0);
	spool_deliver(dir, T(s.sock), &(struct spool_budget){ 20, 200, 1000 }, &st, warn, err,
		      sizeof(err));
	ok(st.delivered == 1 && !exists(dir, "job-51.json"), "409: delivered");
	fake_stop(&s);

	ok(spool_send_event(T(s.sock), 1, ev, 100, err, sizeof(err)) == SPOOL_RETRY,
	   "send with no daemon: retry");

	json_decref(ev);
	/* clean up */
	const char *names[] = { "bad-job-9.json", "bad-job-10.json", "bad-job-50.json",
				"notes.txt", NULL };
	for (int i = 0; names[i]; i++) {
		snprintf(p, sizeof(p), "%s/%s", dir, names[i]);
		unlink(p);
	}
	rmdir(dir);
	snprintf(p, sizeof(p), "%s/linkspool", top);
	unlink(p);
	snprintf(p, sizeof(p), "%s/requests.log", top);
	unlink(p);
	rmdir(top);
	_jobend();
	return tap_done();
}
