/*
 * dclient.c - the client of stagehandd's API (see dclient.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
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

#include <munge.h>

#include "conf.h"
#include "credbind.h"
#include "dclient.h"
#include "grow.h"
#include "monoclock.h"

#define HEAD_MAX 8192

/* ---- targets ------------------------------------------------------------ */

int dclient_target_unix(struct dclient_target *t, const char *path, char *err,
			size_t errlen)
{
	memset(t, 0, sizeof(*t));
	t->kind = DCLIENT_UNIX;
	if (path == NULL || path[0] != '/') {
		snprintf(err, errlen, "daemon socket '%s' must be an absolute path",
			 path ? path : "");
		return -1;
	}
	int n = snprintf(t->path, sizeof(t->path), "%s", path);
	if (n < 0 || (size_t)n >= sizeof(t->path)) {
		snprintf(err, errlen, "daemon socket '%s' is longer than %zu bytes (a UNIX "
			 "socket limit)", path, sizeof(t->path) - 1);
		return -1;
	}
	memcpy(t->label, t->path, (size_t)n + 1);
	return 0;
}

int dclient_target_server(struct dclient_target *t, const char *hp, char *err,
			  size_t errlen)
{
	const char *colon, *hs, *he;
	char *end;

	memset(t, 0, sizeof(*t));
	t->kind = DCLIENT_TCP;
	if (hp == NULL || *hp == '\0' || (colon = strrchr(hp, ':')) == NULL) {
		snprintf(err, errlen, "bad server '%s': expected HOST:PORT, e.g. mover1:7780",
			 hp ? hp : "");
		return -1;
	}
	hs = hp;
	he = colon;
	if (hp[0] == '[') {
		if (colon[-1] != ']') {
			snprintf(err, errlen, "bad server '%s': an IPv6 address goes in "
				 "brackets, e.g. [fd00::5]:7780", hp);
			return -1;
		}
		hs = hp + 1;
		he = colon - 1;
	} else if (memchr(hp, ':', (size_t)(colon - hp)) != NULL) {
		snprintf(err, errlen, "bad server '%s': put an IPv6 address in brackets, "
			 "e.g. [fd00::5]:7780", hp);
		return -1;
	}
	errno = 0;
	long port = strtol(colon + 1, &end, 10);
	if (he <= hs || (size_t)(he - hs) >= sizeof(t->host) || errno || *end ||
	    end == colon + 1 || port < 1 || port > 65535 || strpbrk(hp, "/ \t") != NULL) {
		snprintf(err, errlen, "bad server '%s': expected HOST:PORT with a port "
			 "from 1 to 65535, e.g. mover1:7780", hp);
		return -1;
	}
	memcpy(t->host, hs, (size_t)(he - hs));
	t->host[he - hs] = '\0';
	snprintf(t->port, sizeof(t->port), "%ld", port);
	int n = snprintf(t->label, sizeof(t->label), "%s", hp);
	if (n < 0 || (size_t)n >= sizeof(t->label)) {
		snprintf(err, errlen, "bad server '%.64s...': too long", hp);
		return -1;
	}
	return 0;
}

int dclient_find(struct dclient_target *t, const char *server, const char *socket,
		 const char *conf_file, int conf_required, char *err, size_t errlen)
{
	struct conf *c;
	char cerr[1024];
	int rc;

	if (server && *server)
		return dclient_target_server(t, server, err, errlen);
	if (socket && *socket)
		return dclient_target_unix(t, socket, err, errlen);
	if (conf_file == NULL)
		return dclient_target_unix(t, DCLIENT_DEFAULT_SOCKET, err, errlen);
	if (!conf_required) {
		/* An absent or unreadable default file means "not configured". */
		int fd = open(conf_file, O_RDONLY | O_CLOEXEC);

		if (fd < 0 && (errno == ENOENT || errno == EACCES))
			return dclient_target_unix(t, DCLIENT_DEFAULT_SOCKET, err, errlen);
		if (fd >= 0)
			close(fd);
	}
	c = conf_create();
	if (c == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (conf_parse_file(c, conf_file, cerr, sizeof(cerr)) < 0) {
		snprintf(err, errlen, "%s", cerr);
		conf_destroy(c);
		return -1;
	}
	if (c->server)
		rc = dclient_target_server(t, c->server, err, errlen);
	else
		rc = dclient_target_unix(t, c->socket_path, err, errlen);
	conf_destroy(c);
	return rc;
}

/* ---- one exchange -------------------------------------------------------- */

/* Wait for events on fd until deadline. 1 ready, 0 timeout, -1 error. */
static int _wait(int fd, short events, long long deadline)
{
	for (;;) {
		long long left = deadline - mono_ms();
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

/*
 * Connect a non-blocking socket of family fam to sa within deadline.
 * Returns the descriptor, or -1 with *why (an errno, ETIMEDOUT on timeout).
 */
static int _connect_one(int fam, const struct sockaddr *sa, socklen_t salen,
			long long deadline, int *why)
{
	int fd = socket(fam, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (fd < 0) {
		*why = errno;
		return -1;
	}
	/* A UNIX socket whose listen backlog is full (a flood, or a daemon busy
	 * for a moment) refuses a non-blocking connect with EAGAIN and stays
	 * unconnected; polling it would report it writable at once. So the
	 * connect is tried again, 1 ms apart doubling to 50 ms, until deadline. */
	for (int pause = 1;; pause = pause < 50 ? pause * 2 : 50) {
		if (connect(fd, sa, salen) == 0)
			return fd;
		if (!(fam == AF_UNIX && errno == EAGAIN))
			break;
		long long left = deadline - mono_ms();
		if (left <= 0) {
			*why = ETIMEDOUT;
			close(fd);
			return -1;
		}
		poll(NULL, 0, (int)(left < pause ? left : pause));
	}
	if (errno != EINPROGRESS && errno != EINTR) {
		*why = errno;
		close(fd);
		return -1;
	}
	/* In progress (TCP): wait for it. */
	int r = _wait(fd, POLLOUT, deadline);
	int soerr = 0;
	socklen_t sl = sizeof(soerr);
	if (r == 0) {
		*why = ETIMEDOUT;
		close(fd);
		return -1;
	}
	if (r < 0 || getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0 || soerr) {
		*why = soerr ? soerr : errno;
		close(fd);
		return -1;
	}
	return fd;
}

static int _connect_unix(const struct dclient_target *t, long long deadline, int *out,
			 char *err, size_t errlen)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int why = 0;

	memcpy(sa.sun_path, t->path, strlen(t->path) + 1);  /* length checked */
	int fd = _connect_one(AF_UNIX, (struct sockaddr *)&sa, sizeof(sa), deadline, &why);
	if (fd < 0) {
		snprintf(err, errlen, "cannot reach stagehandd at %s: %s%s", t->label,
			 why == ETIMEDOUT ? "timed out connecting" : strerror(why),
			 why == ENOENT || why == ECONNREFUSED ?
			 " (is the daemon running? systemctl status stagehandd)" : "");
		return why == ETIMEDOUT ? DCLIENT_ERR_TIMEOUT : DCLIENT_ERR_CONNECT;
	}
	*out = fd;
	return 0;
}

/* Every address of the host in turn, all within the one deadline. */
static int _connect_tcp(const struct dclient_target *t, long long deadline, int *out,
			char *err, size_t errlen)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV };
	struct addrinfo *res = NULL;
	int why = 0, fd = -1;

	int g = getaddrinfo(t->host, t->port, &hints, &res);
	if (g == EAI_NONAME) {
		/* A name: the resolver (see dclient.h for its caveat). */
		hints.ai_flags = AI_NUMERICSERV | AI_ADDRCONFIG;
		g = getaddrinfo(t->host, t->port, &hints, &res);
	}
	if (g != 0) {
		snprintf(err, errlen, "cannot reach stagehandd at %s: cannot resolve '%s': %s",
			 t->label, t->host, g == EAI_SYSTEM ? strerror(errno) : gai_strerror(g));
		return DCLIENT_ERR_CONNECT;
	}
	for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
		if (mono_ms() >= deadline) {
			why = ETIMEDOUT;
			break;
		}
		fd = _connect_one(ai->ai_family, ai->ai_addr, ai->ai_addrlen, deadline, &why);
	}
	freeaddrinfo(res);
	if (fd < 0) {
		snprintf(err, errlen, "cannot reach stagehandd at %s: %s%s", t->label,
			 why == ETIMEDOUT ? "timed out connecting" : strerror(why),
			 why == ECONNREFUSED ? " (is the daemon running with ListenAddress= "
			 "on that host and port?)" : "");
		return why == ETIMEDOUT ? DCLIENT_ERR_TIMEOUT : DCLIENT_ERR_CONNECT;
	}
	*out = fd;
	return 0;
}

static int _write_all(int fd, const char *buf, size_t len, long long deadline,
		      const char *label, char *err, size_t errlen)
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
				snprintf(err, errlen, "timed out sending the request to "
					 "stagehandd at %s", label);
				return DCLIENT_ERR_TIMEOUT;
			}
			if (r > 0)
				continue;
		}
		snprintf(err, errlen, "sending the request to stagehandd at %s: %s", label,
			 strerror(errno));
		return DCLIENT_ERR_IO;
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
		snprintf(err, errlen, "malformed HTTP status line");
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
				snprintf(err, errlen, "bad Content-Length");
				return -1;
			}
			*clen = n;
		} else if (strcasecmp(line, "Transfer-Encoding") == 0 &&
			   strcasecmp(v, "identity") != 0) {
			snprintf(err, errlen, "Transfer-Encoding '%s', which this client "
				 "does not read", v);
			return -1;
		}
	}
	return 0;
}

/*
 * The request head; over TCP with a fresh MUNGE credential whose payload
 * binds it to method, path and body (common/credbind.h). Returns its
 * length, or a dclient_fail with err.
 */
static int _head(const struct dclient_target *t, const struct dclient_call *c, size_t blen,
		 char *head, size_t cap, char *err, size_t errlen)
{
	const char *method = c->method, *path = c->path, *body = c->body;
	char *cred = NULL;

	if (strpbrk(path, " \r\n") || strpbrk(method, " \r\n") || path[0] != '/' ||
	    !method[0]) {
		snprintf(err, errlen, "request %s %.64s is malformed", method, path);
		return DCLIENT_ERR_IO;
	}
	if (t->kind == DCLIENT_TCP) {
		struct credbind_req rq = { .method = method, .target = path, .body = body,
					   .body_len = blen };
		char pl[CREDBIND_PAYLOAD_MAX], e[256];
		int pn = credbind_payload(&rq, (long long)time(NULL), pl, sizeof(pl), e,
					  sizeof(e));

		if (pn < 0) {
			snprintf(err, errlen, "cannot bind a MUNGE credential to the request "
				 "for stagehandd at %s: %s", t->label, e);
			return DCLIENT_ERR_AUTH;
		}
		munge_err_t me = munge_encode(&cred, NULL, pl, pn);
		if (me != EMUNGE_SUCCESS) {
			snprintf(err, errlen, "cannot make a MUNGE credential for stagehandd at "
				 "%s: %s (is munged running on this host?)", t->label,
				 munge_strerror(me));
			free(cred);
			return DCLIENT_ERR_AUTH;
		}
	}
	int n = snprintf(head, cap,
			 "%s %s HTTP/1.1\r\nHost: %s\r\n"
			 "User-Agent: stagehand/" PACKAGE_VERSION "\r\nAccept: application/json\r\n"
			 "Connection: close\r\n%s%s%s%s"
			 "Content-Length: %zu\r\n\r\n",
			 method, path, t->kind == DCLIENT_TCP ? t->host : "localhost",
			 body ? "Content-Type: application/json\r\n" : "",
			 cred ? DCLIENT_MUNGE_HEADER ": " : "", cred ? cred : "",
			 cred ? "\r\n" : "", blen);
	free(cred);
	if (n < 0 || (size_t)n >= cap) {
		snprintf(err, errlen, "request %s %.64s is too long", method, path);
		return DCLIENT_ERR_IO;
	}
	return n;
}

int dclient_format_request(const struct dclient_target *t, const struct dclient_call *c,
			   char **out, size_t *outlen, char *err, size_t errlen)
{
	char head[2048];
	const char *body = c->body;
	size_t blen = body ? strlen(body) : 0;
	int n = _head(t, c, blen, head, sizeof(head), err, errlen);
	char *buf;

	*out = NULL;
	*outlen = 0;
	if (n < 0)
		return n;
	buf = malloc((size_t)n + blen + 1);
	if (buf == NULL) {
		snprintf(err, errlen, "out of memory");
		return DCLIENT_ERR_IO;
	}
	memcpy(buf, head, (size_t)n);
	if (blen)
		memcpy(buf + n, body, blen);
	buf[(size_t)n + blen] = '\0';
	*out = buf;
	*outlen = (size_t)n + blen;
	return 0;
}

/* Read the response into resp. 0, or a dclient_fail with err. */
/*
 * Long on purpose: one bounded read loop over a hostile peer's
 * bytes (header, then a length-delimited or closed body, each against the
 * deadline and the size limit); one loop keeps every bound in sight.
 */
static int _read_resp(int fd, const struct dclient_target *t, long long deadline,
		      int timeout_ms, size_t max_body, struct dclient_resp *resp,
		      char *err, size_t errlen)
{
	char *buf = NULL, e[256];
	size_t len = 0, cap = 0, limit = HEAD_MAX + max_body + 1;
	long hend = -1, clen = -1;
	int status = 0, rc = DCLIENT_ERR_IO;
	bool eof = false;

	for (;;) {
		if ((hend >= 0 && clen >= 0 && len >= (size_t)hend + 4 + (size_t)clen) || eof)
			break;
		if (len >= limit - 1) {
			snprintf(err, errlen, "the answer of stagehandd at %s is larger than "
				 "%zu bytes; refusing it", t->label, max_body);
			goto out;
		}
		if (len + 4096 > cap &&
		    grow_array((void **)&buf, &cap, len + 4096 < limit ? len + 4096 : limit, 1,
			       16384) < 0) {
			snprintf(err, errlen, "out of memory");
			goto out;
		}
		size_t room = (cap < limit ? cap : limit) - 1 - len;
		ssize_t r = recv(fd, buf + len, room, 0);
		if (r > 0) {
			len += (size_t)r;
		} else if (r == 0) {
			eof = true;
		} else if (errno == EINTR) {
			continue;
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			int w = _wait(fd, POLLIN, deadline);
			if (w == 0) {
				snprintf(err, errlen, "timed out waiting for the answer of "
					 "stagehandd at %s (%d ms)", t->label, timeout_ms);
				rc = DCLIENT_ERR_TIMEOUT;
				goto out;
			}
			if (w < 0) {
				snprintf(err, errlen, "poll(): %s", strerror(errno));
				goto out;
			}
			continue;
		} else {
			snprintf(err, errlen, "reading the answer of stagehandd at %s: %s",
				 t->label, strerror(errno));
			goto out;
		}
		if (hend >= 0) {
			/* Without Content-Length the body runs to EOF: bound it too. */
			if (clen < 0 && len - (size_t)hend - 4 > max_body) {
				snprintf(err, errlen, "the answer of stagehandd at %s is larger "
					 "than %zu bytes; refusing it", t->label, max_body);
				goto out;
			}
			continue;
		}
		hend = _head_end(buf, len);
		if (hend < 0 && len > HEAD_MAX) {
			snprintf(err, errlen, "stagehandd at %s sent headers longer than %d "
				 "bytes", t->label, HEAD_MAX);
			goto out;
		}
		if (hend >= 0) {
			char *h = strndup(buf, (size_t)hend);
			if (h == NULL) {
				snprintf(err, errlen, "out of memory");
				goto out;
			}
			int pr = _parse_head(h, &status, &clen, e, sizeof(e));
			free(h);
			if (pr < 0) {
				snprintf(err, errlen, "bad answer from stagehandd at %s: %s "
					 "(is that address really stagehandd?)", t->label, e);
				goto out;
			}
			if (clen > (long)max_body) {
				snprintf(err, errlen, "the answer of stagehandd at %s is %ld "
					 "bytes, over the %zu byte limit", t->label, clen,
					 max_body);
				goto out;
			}
			if (len - (size_t)hend - 4 > max_body && clen < 0) {
				snprintf(err, errlen, "the answer of stagehandd at %s is larger "
					 "than %zu bytes; refusing it", t->label, max_body);
				goto out;
			}
		}
	}
	if (hend < 0) {
		snprintf(err, errlen, "stagehandd at %s closed the connection before "
			 "answering", t->label);
		goto out;
	}
	size_t bstart = (size_t)hend + 4, bl = len - bstart;
	if (clen >= 0) {
		if (bl < (size_t)clen) {
			snprintf(err, errlen, "the answer of stagehandd at %s was cut short "
				 "(%zu of %ld bytes)", t->label, bl, clen);
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
	return rc;
}

int dclient_request(const struct dclient_target *t, const struct dclient_call *c,
		    struct dclient_resp *resp, char *err, size_t errlen)
{
	int timeout_ms = c->timeout_ms;
	size_t max_body = c->max_body;
	long long deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 1);
	char *req = NULL;
	size_t len = 0;
	int fd = -1, rc;

	memset(resp, 0, sizeof(*resp));
	if (max_body == 0)
		max_body = DCLIENT_MAX_BODY;
	rc = dclient_format_request(t, c, &req, &len, err, errlen);
	if (rc < 0)
		return rc;
	if (mono_ms() >= deadline) {
		snprintf(err, errlen, "timed out making a MUNGE credential for stagehandd at "
			 "%s (is munged slow?)", t->label);
		free(req);
		return DCLIENT_ERR_TIMEOUT;
	}
	rc = t->kind == DCLIENT_TCP ? _connect_tcp(t, deadline, &fd, err, errlen)
				    : _connect_unix(t, deadline, &fd, err, errlen);
	if (rc == 0)
		rc = _write_all(fd, req, len, deadline, t->label, err, errlen);
	free(req);
	if (rc == 0)
		rc = _read_resp(fd, t, deadline, timeout_ms, max_body, resp, err, errlen);
	if (fd >= 0)
		close(fd);
	return rc;
}

void dclient_resp_free(struct dclient_resp *resp)
{
	if (resp == NULL)
		return;
	free(resp->body);
	resp->body = NULL;
	resp->len = 0;
}
