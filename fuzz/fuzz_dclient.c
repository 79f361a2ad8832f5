/*
 * fuzz_dclient.c - libFuzzer target for the daemon client's response reader
 * (common/dclient.c): whatever bytes come back from an address a node was
 * told is the daemon. A helper thread serves one connection on a UNIX
 * socket per input: it reads the request, writes the input, closes.
 *
 * Input format: byte 0 picks the body limit (16 << (byte % 12) bytes), the
 * rest is the raw answer. Broken promises abort: a success without a
 * NUL-terminated body, a body over the limit or a status outside 100..599;
 * a failure that leaves a body behind; a descriptor left open.
 */
#include "config.h"

#include <dirent.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "dclient.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int _ls = -1;
static struct dclient_target _t;

struct _job {
	const uint8_t *data;
	size_t size;
};

static void _setup(void)
{
	char dir[] = "/tmp/fuzz-dclient-XXXXXX", e[256];
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	if (!mkdtemp(dir))
		abort();
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/d.sock", dir);
	_ls = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (_ls < 0 || bind(_ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(_ls, 4) < 0 ||
	    dclient_target_unix(&_t, sa.sun_path, e, sizeof(e)) < 0)
		abort();
}

/* Serve one connection: read the request head (and its small body), answer, close. */
static void *_serve(void *arg)
{
	struct _job *j = arg;
	char buf[8192];
	size_t len = 0;
	int c = accept(_ls, NULL, NULL);

	if (c < 0)
		return NULL;
	while (len < sizeof(buf) - 1) {
		ssize_t r = read(c, buf + len, sizeof(buf) - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
		buf[len] = '\0';
		char *h = strstr(buf, "\r\n\r\n");
		if (h && (size_t)(h - buf) + 4 + 2 <= len)   /* body "{}" */
			break;
	}
	for (size_t off = 0; off < j->size;) {
		ssize_t w = send(c, j->data + off, j->size - off, MSG_NOSIGNAL);
		if (w <= 0)
			break;
		off += (size_t)w;
	}
	close(c);
	return NULL;
}

static int _nfds(void)
{
	DIR *d = opendir("/proc/self/fd");
	int n = 0;

	if (!d)
		return -1;
	while (readdir(d))
		n++;
	closedir(d);
	return n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct dclient_resp r;
	struct _job j;
	pthread_t th;
	char err[512];
	size_t limit;
	int rc, fds;

	if (_ls < 0)
		_setup();
	if (size < 1)
		return 0;
	limit = (size_t)16 << (data[0] % 12);
	j.data = data + 1;
	j.size = size - 1;
	fds = _nfds();
	if (pthread_create(&th, NULL, _serve, &j) != 0)
		abort();
	rc = dclient_request(&_t, &(struct dclient_call){ .method = "POST",
			       .path = "/v1/jobs/1/end", .body = "{}", .timeout_ms = 2000,
			       .max_body = limit }, &r, err, sizeof(err));
	pthread_join(th, NULL);
	if (rc == 0) {
		if (!r.body || r.body[r.len] != '\0' || r.len > limit || r.status < 100 ||
		    r.status > 599)
			abort();
	} else if (r.body || !err[0]) {
		abort();
	}
	dclient_resp_free(&r);
	if (_nfds() != fds)
		abort();
	return 0;
}
