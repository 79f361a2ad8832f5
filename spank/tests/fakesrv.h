/*
 * fakesrv.h - a fake stagehandd for unit tests: a forked child serving a
 * UNIX socket, or TCP on 127.0.0.1, with canned answers, logging each
 * request it reads.
 */
#ifndef STAGEHAND_SPANK_FAKESRV_H
#define STAGEHAND_SPANK_FAKESRV_H

#include <sys/types.h>

enum fake_mode {
	FAKE_ANSWER = 0,   /* "HTTP/1.1 <status>" with body and Content-Length */
	FAKE_NOLENGTH,     /* answer without Content-Length, then close */
	FAKE_GARBAGE,      /* a line that is not HTTP */
	FAKE_CLOSE,        /* close without a word */
	FAKE_SILENT,       /* read the request, never answer */
	FAKE_HUGE,         /* Content-Length far over the client's limit */
};

struct fake_srv {
	pid_t pid;
	char sock[108];
	char log[256];     /* requests appended here: "METHOD PATH\nBODY\n---\n",
			      with "munge: CRED\n" before "---" when the request
			      carried X-Stagehand-Munge */
	int port;          /* TCP: the port bound on 127.0.0.1; 0 for UNIX */
};

/* Start serving; returns 0 or -1. */
int fake_start(struct fake_srv *s, const char *dir, enum fake_mode mode,
	       int status, const char *body, int delay_ms);
/* The same on TCP 127.0.0.1, port chosen by the kernel (s->port). */
int fake_start_tcp(struct fake_srv *s, const char *dir, enum fake_mode mode,
		   int status, const char *body, int delay_ms);
void fake_stop(struct fake_srv *s);
/* Contents of the request log (malloc'd, caller frees; "" when empty). */
char *fake_requests(const struct fake_srv *s);

#endif
