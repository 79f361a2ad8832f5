/*
 * Unit tests: the daemon client (common/dclient.c) against a fake daemon
 * on a UNIX socket and on TCP (127.0.0.1), and the daemon lookup order.
 */
#include "config.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <errno.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <munge.h>

#include "fakesrv.h"
#include "tests/tap.h"
#include "credbind.h"
#include "dclient.h"
#include "monoclock.h"

/* Open descriptors of this process. */
static int _nfds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (d == NULL)
		return -1;
	while (readdir(d) != NULL)
		n++;
	closedir(d);
	return n;
}

/* Is munged answering here? */
static int _have_munge(void)
{
	char *cred = NULL;
	int ok_ = munge_encode(&cred, NULL, NULL, 0) == EMUNGE_SUCCESS;

	free(cred);
	return ok_;
}

/* TCP: answers, deadline, size limit, the MUNGE header. Returns 0, or 77
 * when munged does not answer and the exchange tests could not run. */
static int _tcp(const char *dir)
{
	struct fake_srv s = { 0 };
	struct dclient_target t;
	struct dclient_resp r;
	char hp[64], err[512];
	int rc;

	ok(dclient_target_server(&t, "mover1", err, sizeof(err)) < 0, "server without port refused");
	contains(err, "HOST:PORT", "message says HOST:PORT");
	ok(dclient_target_server(&t, "[fd00::5]:7780", err, sizeof(err)) == 0 &&
	   strcmp(t.host, "fd00::5") == 0 && strcmp(t.port, "7780") == 0,
	   "bracketed IPv6 parsed");
	ok(dclient_target_server(&t, "a:70000", err, sizeof(err)) < 0, "port out of range refused");

	if (!_have_munge()) {
		printf("# SKIP munged not running: no TCP exchange tests\n");
		return 77;
	}
	fake_start_tcp(&s, dir, FAKE_ANSWER, 200, "{\"status\":\"ok\"}", 0);
	snprintf(hp, sizeof(hp), "127.0.0.1:%d", s.port);
	dclient_target_server(&t, hp, err, sizeof(err));
	rc = dclient_request(&t, &(struct dclient_call){ .method = "POST", .path = "/v1/jobs/5/end",
			       .body = "{\"state\":\"FAILED\"}", .timeout_ms = 2000 },
			     &r, err, sizeof(err));
	ok(rc == 0 && r.status == 200, "TCP: answered 200 (rc %d: %s)", rc, rc ? err : "");
	is_str(r.body, "{\"status\":\"ok\"}", "TCP: body read exactly");
	dclient_resp_free(&r);
	char *log = fake_requests(&s);
	contains(log, "POST /v1/jobs/5/end\n{\"state\":\"FAILED\"}\n", "TCP: request and body seen");
	char *m = strstr(log, "munge: ");
	ok(m != NULL, "TCP: X-Stagehand-Munge header present");
	if (m) {
		char cred[2048], why[512] = "";
		uid_t uid = (uid_t)-1;
		gid_t gid;
		void *pl = NULL;
		int plen = 0;
		long long when = 0;
		static const char body[] = "{\"state\":\"FAILED\"}";
		struct credbind_req rq = { "POST", "/v1/jobs/5/end", body, sizeof(body) - 1 };

		sscanf(m + 7, "%2047s", cred);
		ok(munge_decode(cred, NULL, &pl, &plen, &uid, &gid) == EMUNGE_SUCCESS &&
		   uid == geteuid(), "TCP: the credential decodes to our uid (%ld)", (long)uid);
		ok(credbind_check(pl, plen > 0 ? (size_t)plen : 0, &rq, (long long)time(NULL),
				  &when, NULL, why, sizeof(why)) == CREDBIND_OK,
		   "TCP: the credential is bound to the request sent (%s)", why);
		rq.target = "/v1/jobs/6/end";
		ok(credbind_check(pl, plen > 0 ? (size_t)plen : 0, &rq, (long long)time(NULL),
				  &when, NULL, why, sizeof(why)) == CREDBIND_MISMATCH,
		   "TCP: and to no other");
		free(pl);
	}
	free(log);
	fake_stop(&s);

	/* Nothing listens on the port any more. */
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/v1/health",
			       .timeout_ms = 1000 }, &r, err, sizeof(err));
	ok(rc == DCLIENT_ERR_CONNECT, "TCP: refused is a connect error");
	contains(err, "Connection refused", "message says refused");

	fake_start_tcp(&s, dir, FAKE_SILENT, 0, NULL, 0);
	snprintf(hp, sizeof(hp), "127.0.0.1:%d", s.port);
	dclient_target_server(&t, hp, err, sizeof(err));
	long long t0 = mono_ms();
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/v1/health",
			       .timeout_ms = 200 }, &r, err, sizeof(err));
	long long took = mono_ms() - t0;
	/* Not before the deadline; the upper bound only tells "at the deadline"
	 * from "never" (a silent server answers nothing), with room for a slow,
	 * loaded machine. */
	ok(rc == DCLIENT_ERR_TIMEOUT && took >= 190 && took < 5000,
	   "TCP: silent daemon times out at the deadline (%lld ms for 200)", took);
	fake_stop(&s);

	/* The caller's size limit, not just the default. */
	fake_start_tcp(&s, dir, FAKE_ANSWER, 200, "{\"pad\":\"0123456789012345678901234567890123456789\"}", 0);
	snprintf(hp, sizeof(hp), "127.0.0.1:%d", s.port);
	dclient_target_server(&t, hp, err, sizeof(err));
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/x",
			       .timeout_ms = 1000, .max_body = 16 }, &r, err, sizeof(err));
	ok(rc == DCLIENT_ERR_IO && r.body == NULL, "TCP: body over the caller's limit refused");
	contains(err, "16 byte limit", "message names the limit");
	fake_stop(&s);
	/* The same limit when the body runs to EOF (found by fuzz_dclient). */
	fake_start_tcp(&s, dir, FAKE_NOLENGTH, 200, "{\"pad\":\"0123456789012345678901234567890123456789\"}", 0);
	snprintf(hp, sizeof(hp), "127.0.0.1:%d", s.port);
	dclient_target_server(&t, hp, err, sizeof(err));
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/x",
			       .timeout_ms = 1000, .max_body = 16 }, &r, err, sizeof(err));
	ok(rc == DCLIENT_ERR_IO && r.body == NULL, "TCP: body to EOF over the caller's limit refused");
	contains(err, "larger than 16 bytes", "message names the limit");
	fake_stop(&s);
	fake_start_tcp(&s, dir, FAKE_HUGE, 0, NULL, 0);
	snprintf(hp, sizeof(hp), "127.0.0.1:%d", s.port);
	dclient_target_server(&t, hp, err, sizeof(err));
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/x",
			       .timeout_ms = 1000 }, &r, err, sizeof(err));
	ok(rc == DCLIENT_ERR_IO, "TCP: announced 999999999 bytes refused before reading");
	fake_stop(&s);
	return 0;
}

/* The lookup order: explicit server, explicit socket, conf Server, SocketPath. */
static void _find(const char *dir)
{
	struct dclient_target t;
	char conf[256], err[1024];
	FILE *f;

	ok(dclient_find(&t, "10.0.0.1:7780", "/x.sock", NULL, 0, err, sizeof(err)) == 0 &&
	   t.kind == DCLIENT_TCP, "find: an explicit server wins");
	ok(dclient_find(&t, "", "/x.sock", NULL, 0, err, sizeof(err)) == 0 &&
	   t.kind == DCLIENT_UNIX && strcmp(t.path, "/x.sock") == 0, "find: then the socket");
	snprintf(conf, sizeof(conf), "%s/none.conf", dir);
	ok(dclient_find(&t, NULL, NULL, conf, 0, err, sizeof(err)) == 0 &&
	   strcmp(t.path, DCLIENT_DEFAULT_SOCKET) == 0, "find: absent default file: default socket");
	ok(dclient_find(&t, NULL, NULL, conf, 1, err, sizeof(err)) < 0,
	   "find: absent named file is an error");
	snprintf(conf, sizeof(conf), "%s/a.conf", dir);
	f = fopen(conf, "w");
	/* ListenAddress=off after Server= must leave Server= alone (it once freed it). */
	fprintf(f, "SocketPath=/run/x/d.sock\nServer=mover1:7780\nListenAddress=off\n");
	fclose(f);
	ok(dclient_find(&t, NULL, NULL, conf, 1, err, sizeof(err)) == 0 &&
	   t.kind == DCLIENT_TCP && strcmp(t.host, "mover1") == 0, "find: conf Server= wins");
	ok(dclient_find(&t, NULL, "/y.sock", conf, 1, err, sizeof(err)) == 0 &&
	   t.kind == DCLIENT_UNIX, "find: an explicit socket beats conf Server=");
	f = fopen(conf, "w");
	fprintf(f, "SocketPath=/run/x/d.sock\n");
	fclose(f);
	ok(dclient_find(&t, NULL, NULL, conf, 1, err, sizeof(err)) == 0 &&
	   t.kind == DCLIENT_UNIX && strcmp(t.path, "/run/x/d.sock") == 0,
	   "find: else conf SocketPath=");
	f = fopen(conf, "w");
	fprintf(f, "Server=mover1\n");
	fclose(f);
	ok(dclient_find(&t, NULL, NULL, conf, 1, err, sizeof(err)) < 0, "find: bad Server= refused");
	contains(err, ":1:", "message names the line");
	unlink(conf);
}

/* A UNIX target for path (test helper; aborts the test on a bad path). */
static void U(struct dclient_target *t, const char *path)
{
	char e[256];

	if (dclient_target_unix(t, path, e, sizeof(e)) < 0) {
		printf("Bail out! %s\n", e);
		exit(1);
	}
}

/*
 * A UNIX listener whose backlog is full (nobody accepts; connections are
 * queued until a non-blocking connect fails EAGAIN). Returns the listener;
 * the queued connections are in q[0..*nq).
 */
static int _full_backlog(const char *path, int *q, int *nq)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int l = socket(AF_UNIX, SOCK_STREAM, 0);

	if (strlen(path) >= sizeof(sa.sun_path))
		return -1;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	unlink(path);
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 0) < 0)
		return -1;
	for (*nq = 0; *nq < 64; (*nq)++) {
		q[*nq] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0);
		if (connect(q[*nq], (struct sockaddr *)&sa, sizeof(sa)) < 0) {
			int e = errno;
			close(q[*nq]);
			return e == EAGAIN ? l : -1;
		}
	}
	return -1;
}

/* A UNIX socket whose listen backlog is full: the client tries the connect
 * again until its deadline (a flood must not make it fail at once, or send
 * on a socket that never connected). */
static void _backlog(const char *dir)
{
	char path[256], err[512];
	struct dclient_target t;
	struct dclient_resp r;
	int q[64], nq = 0, l, rc;

	snprintf(path, sizeof(path), "%s/full.sock", dir);
	l = _full_backlog(path, q, &nq);
	ok(l >= 0, "a listener with a full backlog (%d queued)", nq);
	if (l < 0)
		return;
	U(&t, path);
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/v1/health",
			       .timeout_ms = 200 }, &r, err, sizeof(err));
	ok(rc == DCLIENT_ERR_TIMEOUT, "backlog full to the deadline: timeout (rc %d)", rc);
	contains(err, "timed out connecting", "message says it timed out connecting");
	dclient_resp_free(&r);

	/* Room is made 100 ms later, and the request is answered. */
	pid_t pid = fork();
	if (pid == 0) {
		for (int i = 0; i < nq; i++)
			close(q[i]);
		usleep(100000);
		for (;;) {
			char buf[4096];
			struct timeval tv = { .tv_usec = 100000 };
			int c = accept(l, NULL, NULL);
			if (c < 0)
				_exit(0);
			/* The queued connections never send: they time out. */
			setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
			if (read(c, buf, sizeof(buf)) > 0 &&
			    write(c, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", 40) < 0)
				_exit(1);
			close(c);
		}
	}
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/v1/health",
			       .timeout_ms = 10000 }, &r, err, sizeof(err));
	ok(rc == 0 && r.status == 200, "backlog emptied before the deadline: answered (rc %d: %s)",
	   rc, rc ? err : "");
	dclient_resp_free(&r);
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	for (int i = 0; i < nq; i++)
		close(q[i]);
	close(l);
	unlink(path);
}

int main(void)
{
	char dir[] = "/tmp/sh-http-XXXXXX", err[512];
	struct fake_srv s = { 0 };
	struct dclient_resp r;
	struct dclient_target t;
	long long t0;
	int rc, tcp;

	if (mkdtemp(dir) == NULL)
		return 99;

	fake_start(&s, dir, FAKE_ANSWER, 200, "{\"stage_in\":{\"state\":\"ready\"}}", 0);
	U(&t, s.sock);
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/v1/jobs/12",
			       .timeout_ms = 1000 }, &r, err, sizeof(err));
	ok(rc == 0 && r.status == 200, "GET answered 200 (rc %d: %s)", rc, rc ? err : "");
	is_str(r.body, "{\"stage_in\":{\"state\":\"ready\"}}", "body read exactly");
	dclient_resp_free(&r);
	U(&t, s.sock);
	rc = dclient_request(&t, &(struct dclient_call){ .method = "POST",
			       .path = "/v1/jobs/12/end", .body = "{\"state\":\"COMPLETED\"}",
			       .timeout_ms = 1000 },
			     &r, err, sizeof(err));
	ok(rc == 0 && r.status == 200, "POST answered");
	dclient_resp_free(&r);
	char *log = fake_requests(&s);
	contains(log, "GET /v1/jobs/12\n", "server saw the GET");
	contains(log, "POST /v1/jobs/12/end\n{\"state\":\"COMPLETED\"}\n",
		 "server saw the POST and its body");
	free(log);
	fake_stop(&s);

	fake_start(&s, dir, FAKE_ANSWER, 503, "{\"error\":\"draining\"}", 0);
	U(&t, s.sock);
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/v1/health",
			       .timeout_ms = 1000 }, &r, err, sizeof(err));
	ok(rc == 0 && r.status == 503, "a 503 is a response, not a failure");
	contains(r.body, "draining", "error body kept");
	dclient_resp_free(&r);
	fake_stop(&s);

	fake_start(&s, dir, FAKE_NOLENGTH, 202, "{\"ok\":1}", 0);
	U(&t, s.sock);
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/x",
			       .timeout_ms = 1000 }, &r, err, sizeof(err));
	ok(rc == 0 && r.status == 202, "answer without Content-Length read to EOF");
	is_str(r.body, "{\"ok\":1}", "body read to EOF");
	dclient_resp_free(&r);
	fake_stop(&s);

	U(&t, s.sock);
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/x",
			       .timeout_ms = 1000 }, &r, err, sizeof(err));
	ok(rc == DCLIENT_ERR_CONNECT, "no daemon: connect error");
	contains(err, "cannot reach stagehandd at", "message says so");
	ok(r.body == NULL, "no body on failure");

	fake_start(&s, dir, FAKE_SILENT, 0, NULL, 0);
	t0 = mono_ms();
	U(&t, s.sock);
	rc = dclient_request(&t, &(struct dclient_call){ .method = "POST", .path = "/v1/jobs/1/end",
			       .body = "{}", .timeout_ms = 150 }, &r, err, sizeof(err));
	long long took = mono_ms() - t0;
	ok(rc == DCLIENT_ERR_TIMEOUT, "silent daemon: timeout");
	ok(took >= 140 && took < 5000, "timeout honoured (%lld ms for 150; never would hang)",
	   took);
	fake_stop(&s);

	/* The daemon answers after 20 s: a client that waited for it would take
	 * 20 s; one that keeps its 100 ms deadline is far under 10 s. */
	fake_start(&s, dir, FAKE_ANSWER, 200, "{}", 20000);
	t0 = mono_ms();
	U(&t, s.sock);
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/x",
			       .timeout_ms = 100 }, &r, err, sizeof(err));
	took = mono_ms() - t0;
	ok(rc == DCLIENT_ERR_TIMEOUT && took < 10000, "slow daemon: timeout (%lld ms for 100)",
	   took);
	fake_stop(&s);

	fake_start(&s, dir, FAKE_GARBAGE, 0, NULL, 0);
	U(&t, s.sock);
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/x",
			       .timeout_ms = 1000 }, &r, err, sizeof(err));
	ok(rc == DCLIENT_ERR_IO, "garbage answer: I/O error");
	contains(err, "malformed HTTP status line", "message says malformed");
	fake_stop(&s);

	fake_start(&s, dir, FAKE_CLOSE, 0, NULL, 0);
	U(&t, s.sock);
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/x",
			       .timeout_ms = 1000 }, &r, err, sizeof(err));
	ok(rc == DCLIENT_ERR_IO, "closed without answer: I/O error (%s)", err);
	fake_stop(&s);

	fake_start(&s, dir, FAKE_HUGE, 0, NULL, 0);
	U(&t, s.sock);
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/x",
			       .timeout_ms = 1000 }, &r, err, sizeof(err));
	ok(rc == DCLIENT_ERR_IO, "oversized answer refused");
	contains(err, "limit", "message names the limit");
	fake_stop(&s);

	/* A path that is not a socket. */
	U(&t, "/etc/passwd");
	rc = dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/x",
			       .timeout_ms = 200 }, &r, err, sizeof(err));
	ok(rc == DCLIENT_ERR_CONNECT, "not a socket: connect error");

	_backlog(dir);

	int fds = _nfds();
	signal(SIGPIPE, SIG_DFL);   /* a SIGPIPE would kill this test */
	tcp = _tcp(dir);
	_find(dir);
	fake_start(&s, dir, FAKE_CLOSE, 0, NULL, 0);
	U(&t, s.sock);
	for (int i = 0; i < 20; i++) {
		rc = dclient_request(&t, &(struct dclient_call){ .method = "POST", .path = "/x",
				       .body = "{}", .timeout_ms = 200 }, &r, err, sizeof(err));
		dclient_resp_free(&r);
	}
	fake_stop(&s);
	ok(_nfds() == fds, "no descriptor left open (%d before, %d after)", fds, _nfds());

	unlink(s.log);
	rmdir(dir);
	/* Without munged the TCP exchange went untested: a skip, not a pass
	 * (unless something else failed). */
	rc = tap_done();
	return rc == 0 && tcp == 77 ? 77 : rc;
}
