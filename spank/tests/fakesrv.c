/* fakesrv.c - see fakesrv.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fakesrv.h"

static void _sleep_ms(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* Read one request (head + Content-Length body) into buf. */
static size_t _read_req(int c, char *buf, size_t cap)
{
	size_t len = 0;
	long clen = 0;
	char *hend = NULL;

	while (len < cap - 1) {
		ssize_t r = read(c, buf + len, cap - 1 - len);
		if (r <= 0)
			break;
		len += (size_t)r;
		buf[len] = '\0';
		if (hend == NULL && (hend = strstr(buf, "\r\n\r\n")) != NULL) {
			char *cl = strcasestr(buf, "Content-Length:");
			if (cl && cl < hend)
				clen = strtol(cl + 15, NULL, 10);
		}
		if (hend && len >= (size_t)(hend - buf) + 4 + (size_t)clen)
			break;
	}
	buf[len] = '\0';
	return len;
}

static void _serve(int ls, const char *logpath, enum fake_mode mode, int status,
		   const char *body, int delay_ms)
{
	static char buf[1 << 20];

	for (;;) {
		int c = accept(ls, NULL, NULL);
		if (c < 0)
			continue;
		_read_req(c, buf, sizeof(buf));
		FILE *f = fopen(logpath, "a");
		if (f) {
			char *hend = strstr(buf, "\r\n\r\n");
			char *eol = strstr(buf, " HTTP/1.1");
			char *m = strcasestr(buf, "\r\nX-Stagehand-Munge: ");
			char *mend = m ? strstr(m + 2, "\r\n") : NULL;
			if (hend)
				*hend = '\0';
			fprintf(f, "%.*s\n%s\n", eol ? (int)(eol - buf) : 0, buf,
				hend ? hend + 4 : "");
			if (m && mend && (!hend || m < hend))
				fprintf(f, "munge: %.*s\n", (int)(mend - m - 21), m + 21);
			fprintf(f, "---\n");
			fclose(f);
		}
		if (delay_ms)
			_sleep_ms(delay_ms);
		char out[8192];
		int n = 0;
		switch (mode) {
		case FAKE_ANSWER:
			n = snprintf(out, sizeof(out), "HTTP/1.1 %d X\r\nContent-Type: "
				     "application/json\r\nContent-Length: %zu\r\n\r\n%s",
				     status, strlen(body), body);
			break;
		case FAKE_NOLENGTH:
			n = snprintf(out, sizeof(out), "HTTP/1.1 %d X\r\n\r\n%s", status, body);
			break;
		case FAKE_GARBAGE:
			n = snprintf(out, sizeof(out), "SMTP ready\r\n\r\n");
			break;
		case FAKE_HUGE:
			n = snprintf(out, sizeof(out), "HTTP/1.1 200 OK\r\nContent-Length: "
				     "999999999\r\n\r\n{");
			break;
		case FAKE_CLOSE:
			break;
		case FAKE_SILENT:
			_sleep_ms(60000);
			break;
		}
		if (n > 0 && write(c, out, (size_t)n) < 0)
			(void)0;
		close(c);
	}
}

int fake_start(struct fake_srv *s, const char *dir, enum fake_mode mode,
	       int status, const char *body, int delay_ms)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };

	snprintf(s->sock, sizeof(s->sock), "%s/d.sock", dir);
	snprintf(s->log, sizeof(s->log), "%s/requests.log", dir);
	unlink(s->sock);
	unlink(s->log);
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", s->sock);
	int ls = socket(AF_UNIX, SOCK_STREAM, 0);
	if (ls < 0 || bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(ls, 16) < 0)
		return -1;
	s->pid = fork();
	if (s->pid < 0)
		return -1;
	if (s->pid == 0) {
		_serve(ls, s->log, mode, status, body ? body : "", delay_ms);
		_exit(0);
	}
	close(ls);
	return 0;
}

int fake_start_tcp(struct fake_srv *s, const char *dir, enum fake_mode mode,
		   int status, const char *body, int delay_ms)
{
	struct sockaddr_in sa = { .sin_family = AF_INET };
	socklen_t sl = sizeof(sa);
	int one = 1;

	s->sock[0] = '\0';
	snprintf(s->log, sizeof(s->log), "%s/requests.log", dir);
	unlink(s->log);
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	int ls = socket(AF_INET, SOCK_STREAM, 0);
	if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(ls, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(ls, 16) < 0 ||
	    getsockname(ls, (struct sockaddr *)&sa, &sl) < 0)
		return -1;
	s->port = ntohs(sa.sin_port);
	s->pid = fork();
	if (s->pid < 0)
		return -1;
	if (s->pid == 0) {
		_serve(ls, s->log, mode, status, body ? body : "", delay_ms);
		_exit(0);
	}
	close(ls);
	return 0;
}

void fake_stop(struct fake_srv *s)
{
	if (s->pid > 0) {
		kill(s->pid, SIGKILL);
		waitpid(s->pid, NULL, 0);
		s->pid = 0;
	}
	if (s->sock[0])
		unlink(s->sock);
}

char *fake_requests(const struct fake_srv *s)
{
	FILE *f = fopen(s->log, "r");
	char *out = calloc(1, 1 << 20);

	if (out == NULL)
		return NULL;
	if (f) {
		size_t n = fread(out, 1, (1 << 20) - 1, f);
		out[n] = '\0';
		fclose(f);
	}
	return out;
}
