/*
 * uhttp.c - a minimal HTTP/1.1 client over a UNIX socket (see uhttp.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "uhttp.h"

#define HEAD_MAX 8192

long long uhttp_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for events on fd until deadline. 1 ready, 0 timeout, -1 error. */
static int _wait(int fd, short events, long long deadline)
{
	for (;;) {
		long long left = deadline - uhttp_now_ms();
		if (left <= 0)
			return 0;
		struct pollfd p = { .fd = fd, .events = events };
		int r = poll(&p, 1, (int)left);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			return 0;
		return 1;
	}
}

static int _connect(const char *sockpath, long long deadline, int *out,
		    char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int n = snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sockpath);

	if (n < 0 || (size_t)n >= sizeof(sa.sun_path)) {
		snprintf(err, errlen, "socket path '%s' is too long", sockpath);
		return UHTTP_ERR_CONNECT;
	}
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		snprintf(err, errlen, "socket(): %s", strerror(errno));
		return UHTTP_ERR_CONNECT;
	}
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		if (errno != EINPROGRESS && errno != EAGAIN) {
			snprintf(err, errlen, "cannot connect to %s: %s", sockpath,
				 strerror(errno));
			close(fd);
			return UHTTP_ERR_CONNECT;
		}
		/* A full listen backlog: wait for the daemon to accept. */
		int r = _wait(fd, POLLOUT, deadline);
		int soerr = 0;
		socklen_t sl = sizeof(soerr);
		if (r == 0) {
			snprintf(err, errlen, "timed out connecting to %s", sockpath);
			close(fd);
			return UHTTP_ERR_TIMEOUT;
		}
		if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 ||
		    soerr != 0) {
			snprintf(err, errlen, "cannot connect to %s: %s", sockpath,
				 strerror(soerr ? soerr : errno));
			close(fd);
			return UHTTP_ERR_CONNECT;
		}
	}
	*out = fd;
	return 0;
}

static int _write_all(int fd, const char *buf, size_t len, long long deadline,
		      char *err, size_t errlen)
{
	size_t off = 0;

	while (off < len) {
		ssize_t w = send(fd, buf + off, len - off, MSG_NOSIGNAL);
		if (w > 0) {
			off += (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
			int r = _wait(fd, POLLOUT, deadline);
			if (r == 0) {
				snprintf(err, errlen, "timed out sending the request");
				return UHTTP_ERR_TIMEOUT;
			}
			if (r > 0)
				continue;
		}
		snprintf(err, errlen, "sending the request: %s", strerror(errno));
		return UHTTP_ERR_IO;
	}
	return 0;
}

/* Find "\r\n\r\n" in buf[0..len). Returns its offset or -1. */
static long _head_end(const char *buf, size_t len)
{
	for (size_t i = 0; i + 3 < len; i++)
		if (buf[i] == '\r' && buf[i + 1] == '\n' && buf[i + 2] == '\r' &&
		    buf[i + 3] == '\n')
			return (long)i;
	return -1;
}

/*
 * Parse the status line and the headers we need. Chunked bodies are not
 * accepted: the daemon sends Content-Length or closes the connection.
 */
static int _parse_head(char *head, int *status, long *clen, char *err, size_t errlen)
{
	int maj, min, st;
	char *line, *save = NULL;

	*clen = -1;
	line = strtok_r(head, "\r\n", &save);
	if (line == NULL || sscanf(line, "HTTP/%d.%d %3d", &maj, &min, &st) != 3 ||
	    st < 100 || st > 599) {
		snprintf(err, errlen, "malformed HTTP status line from the daemon");
		return -1;
	}
	*status = st;
	while ((line = strtok_r(NULL, "\r\n", &save)) != NULL) {
		char *colon = strchr(line, ':');
		if (colon == NULL)
			continue;
		*colon = '\0';
		char *v = colon + 1;
		while (*v == ' ' || *v == '\t')
			v++;
		if (strcasecmp(line, "Content-Length") == 0) {
			char *end;
			errno = 0;
			long n = strtol(v, &end, 10);
			if (errno || end == v || n < 0) {
				snprintf(err, errlen, "bad Content-Length from the daemon");
				return -1;
			}
			*clen = n;
		} else if (strcasecmp(line, "Transfer-Encoding") == 0 &&
			   strcasecmp(v, "identity") != 0) {
			snprintf(err, errlen, "the daemon sent Transfer-Encoding '%s', "
				 "which this client does not read", v);
			return -1;
		}
	}
	return 0;
}

int uhttp_request(const char *sockpath, const char *method, const char *path,
		  const char *body, int timeout_ms, struct uhttp_resp *resp,
		  char *err, size_t errlen)
{
	long long deadline = uhttp_now_ms() + (timeout_ms > 0 ? timeout_ms : 1);
	char head[1024];
	size_t blen = body ? strlen(body) : 0;
	int fd = -1, rc;
	char *buf = NULL;
	size_t len = 0, cap = HEAD_MAX + UHTTP_MAX_BODY + 1;

	memset(resp, 0, sizeof(*resp));
	int n = snprintf(head, sizeof(head),
			 "%s %s HTTP/1.1\r\nHost: localhost\r\n"
			 "User-Agent: stagehand-spank\r\nAccept: application/json\r\n"
			 "Connection: close\r\n%s"
			 "Content-Length: %zu\r\n\r\n",
			 method, path,
			 body ? "Content-Type: application/json\r\n" : "", blen);
	if (n < 0 || (size_t)n >= sizeof(head)) {
		snprintf(err, errlen, "request line for %s %s is too long", method, path);
		return UHTTP_ERR_IO;
	}
	rc = _connect(sockpath, deadline, &fd, err, errlen);
	if (rc < 0)
		return rc;
	rc = _write_all(fd, head, (size_t)n, deadline, err, errlen);
	if (rc == 0 && blen)
		rc = _write_all(fd, body, blen, deadline, err, errlen);
	if (rc < 0)
		goto out;

	buf = malloc(cap);
	if (buf == NULL) {
		snprintf(err, errlen, "out of memory");
		rc = UHTTP_ERR_IO;
		goto out;
	}
	long hend = -1, clen = -1;
	int status = 0;
	bool eof = false;
	for (;;) {
		if (hend >= 0 && clen >= 0 && len >= (size_t)hend + 4 + (size_t)clen)
			break;
		if (eof)
			break;
		if (len >= cap - 1) {
			snprintf(err, errlen, "response from the daemon is larger than %u bytes",
				 UHTTP_MAX_BODY);
			rc = UHTTP_ERR_IO;
			goto out;
		}
		ssize_t r = recv(fd, buf + len, cap - 1 - len, 0);
		if (r > 0) {
			len += (size_t)r;
		} else if (r == 0) {
			eof = true;
		} else if (errno == EINTR) {
			continue;
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			int w = _wait(fd, POLLIN, deadline);
			if (w == 0) {
				snprintf(err, errlen, "timed out waiting for the daemon's answer "
					 "(%d ms)", timeout_ms);
				rc = UHTTP_ERR_TIMEOUT;
				goto out;
			}
			if (w < 0) {
				snprintf(err, errlen, "poll(): %s", strerror(errno));
				rc = UHTTP_ERR_IO;
				goto out;
			}
			continue;
		} else {
			snprintf(err, errlen, "reading the answer: %s", strerror(errno));
			rc = UHTTP_ERR_IO;
			goto out;
		}
		if (hend < 0) {
			hend = _head_end(buf, len);
			if (hend < 0 && len > HEAD_MAX) {
				snprintf(err, errlen, "response headers longer than %d bytes",
					 HEAD_MAX);
				rc = UHTTP_ERR_IO;
				goto out;
			}
			if (hend >= 0) {
				char *h = strndup(buf, (size_t)hend);
				if (h == NULL) {
					snprintf(err, errlen, "out of memory");
					rc = UHTTP_ERR_IO;
					goto out;
				}
				int pr = _parse_head(h, &status, &clen, err, errlen);
				free(h);
				if (pr < 0) {
					rc = UHTTP_ERR_IO;
					goto out;
				}
				if (clen > (long)UHTTP_MAX_BODY) {
					snprintf(err, errlen, "response body of %ld bytes is "
						 "over the %u byte limit", clen, UHTTP_MAX_BODY);
					rc = UHTTP_ERR_IO;
					goto out;
				}
			}
		}
	}
	if (hend < 0) {
		snprintf(err, errlen, "the daemon closed the connection before answering");
		rc = UHTTP_ERR_IO;
		goto out;
	}
	size_t bstart = (size_t)hend + 4, bl = len - bstart;
	if (clen >= 0) {
		if (bl < (size_t)clen) {
			snprintf(err, errlen, "the daemon's answer was cut short (%zu of %ld "
				 "bytes)", bl, clen);
			rc = UHTTP_ERR_IO;
			goto out;
		}
		bl = (size_t)clen;
	}
	memmove(buf, buf + bstart, bl);
	buf[bl] = '\0';
	resp->status = status;
	resp->body = buf;
	resp->len = bl;
	buf = NULL;
	rc = 0;
out:
	free(buf);
	if (fd >= 0)
		close(fd);
	return rc;
}

void uhttp_resp_free(struct uhttp_resp *resp)
{
	if (resp == NULL)
		return;
	free(resp->body);
	resp->body = NULL;
	resp->len = 0;
}
