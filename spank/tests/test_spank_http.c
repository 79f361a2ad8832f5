/* Unit tests: the UNIX-socket HTTP client (uhttp.c) against a fake daemon. */
#include "config.h"

#include <stdlib.h>
#include <unistd.h>

#include "fakesrv.h"
#include "tests/tap.h"
#include "uhttp.h"

int main(void)
{
	char dir[] = "/tmp/sh-http-XXXXXX", err[512];
	struct fake_srv s = { 0 };
	struct uhttp_resp r;
	long long t0;
	int rc;

	if (mkdtemp(dir) == NULL)
		return 99;

	fake_start(&s, dir, FAKE_ANSWER, 200, "{\"stage_in\":{\"state\":\"ready\"}}", 0);
	rc = uhttp_request(s.sock, "GET", "/v1/jobs/12", NULL, 1000, &r, err, sizeof(err));
	ok(rc == 0 && r.status == 200, "GET answered 200 (rc %d: %s)", rc, rc ? err : "");
	is_str(r.body, "{\"stage_in\":{\"state\":\"ready\"}}", "body read exactly");
	uhttp_resp_free(&r);
	rc = uhttp_request(s.sock, "POST", "/v1/jobs/12/end", "{\"state\":\"COMPLETED\"}",
			   1000, &r, err, sizeof(err));
	ok(rc == 0 && r.status == 200, "POST answered");
	uhttp_resp_free(&r);
	char *log = fake_requests(&s);
	contains(log, "GET /v1/jobs/12\n", "server saw the GET");
	contains(log, "POST /v1/jobs/12/end\n{\"state\":\"COMPLETED\"}\n",
		 "server saw the POST and its body");
	free(log);
	fake_stop(&s);

	fake_start(&s, dir, FAKE_ANSWER, 503, "{\"error\":\"draining\"}", 0);
	rc = uhttp_request(s.sock, "GET", "/v1/health", NULL, 1000, &r, err, sizeof(err));
	ok(rc == 0 && r.status == 503, "a 503 is a response, not a failure");
	contains(r.body, "draining", "error body kept");
	uhttp_resp_free(&r);
	fake_stop(&s);

	fake_start(&s, dir, FAKE_NOLENGTH, 202, "{\"ok\":1}", 0);
	rc = uhttp_request(s.sock, "GET", "/x", NULL, 1000, &r, err, sizeof(err));
	ok(rc == 0 && r.status == 202, "answer without Content-Length read to EOF");
	is_str(r.body, "{\"ok\":1}", "body read to EOF");
	uhttp_resp_free(&r);
	fake_stop(&s);

	rc = uhttp_request(s.sock, "GET", "/x", NULL, 1000, &r, err, sizeof(err));
	ok(rc == UHTTP_ERR_CONNECT, "no daemon: connect error");
	contains(err, "cannot connect", "message says so");
	ok(r.body == NULL, "no body on failure");

	fake_start(&s, dir, FAKE_SILENT, 0, NULL, 0);
	t0 = uhttp_now_ms();
	rc = uhttp_request(s.sock, "POST", "/v1/jobs/1/end", "{}", 150, &r, err,
			   sizeof(err));
	long long took = uhttp_now_ms() - t0;
	ok(rc == UHTTP_ERR_TIMEOUT, "silent daemon: timeout");
	ok(took >= 140 && took < 600, "timeout honoured (%lld ms for 150)", took);
	fake_stop(&s);

	fake_start(&s, dir, FAKE_ANSWER, 200, "{}", 400);
	t0 = uhttp_now_ms();
	rc = uhttp_request(s.sock, "GET", "/x", NULL, 100, &r, err, sizeof(err));
	ok(rc == UHTTP_ERR_TIMEOUT && uhttp_now_ms() - t0 < 400, "slow daemon: timeout");
	fake_stop(&s);

	fake_start(&s, dir, FAKE_GARBAGE, 0, NULL, 0);
	rc = uhttp_request(s.sock, "GET", "/x", NULL, 1000, &r, err, sizeof(err));
	ok(rc == UHTTP_ERR_IO, "garbage answer: I/O error");
	contains(err, "malformed", "message says malformed");
	fake_stop(&s);

	fake_start(&s, dir, FAKE_CLOSE, 0, NULL, 0);
	rc = uhttp_request(s.sock, "GET", "/x", NULL, 1000, &r, err, sizeof(err));
	ok(rc == UHTTP_ERR_IO, "closed without answer: I/O error (%s)", err);
	fake_stop(&s);

	fake_start(&s, dir, FAKE_HUGE, 0, NULL, 0);
	rc = uhttp_request(s.sock, "GET", "/x", NULL, 1000, &r, err, sizeof(err));
	ok(rc == UHTTP_ERR_IO, "oversized answer refused");
	contains(err, "limit", "message names the limit");
	fake_stop(&s);

	/* A path that is not a socket. */
	rc = uhttp_request("/etc/passwd", "GET", "/x", NULL, 200, &r, err, sizeof(err));
	ok(rc == UHTTP_ERR_CONNECT, "not a socket: connect error");

	unlink(s.log);
	rmdir(dir);
	return tap_done();
}
