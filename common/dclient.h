/*
 * dclient.h - the one client of stagehandd's HTTP/JSON API, used by the CLI,
 * the SPANK plugin, the epilog (through `stagehand job-end`) and the tests.
 *
 * Owns: finding the daemon (a UNIX socket, identity from the kernel; or
 * HOST:PORT over TCP, identity from a MUNGE credential in the
 * X-Stagehand-Munge header) and one HTTP/1.1 request/response exchange
 * under a hard overall deadline: name resolution aside (below), connect,
 * write and read all share it, and poll() does every wait.
 *
 * Why not libcurl: this code runs inside slurmstepd, on every compute node,
 * at every job start and end. A small, fully bounded client with no global
 * state, no threads of its own, no signal handlers and no proxy, cookie or
 * redirect logic is easier to trust there than a general library, and a
 * single exchange with one known server needs only a few hundred lines: a
 * status line, Content-Length, a bounded body. libcurl would add a process-
 * wide initialisation inside slurmstepd, proxies taken from the process
 * environment (http_proxy, no_proxy), TLS libraries and, for names, a
 * resolver thread per request. The CLI
 * uses the same code so that the plugin's transport is the one exercised
 * by every test and every admin command; it no longer links libcurl.
 *
 * Name resolution: a numeric host ("10.1.0.5:7780", "[fd00::5]:7780") never
 * touches the resolver, so the deadline is hard. A name goes through
 * getaddrinfo(), which cannot be interrupted: inside slurmstepd it may wait
 * on NSS and DNS for the resolver's own timeouts (resolv.conf timeout:,
 * attempts:) before the deadline applies. Sites should give the plugin a
 * numeric address, or a name in /etc/hosts (docs/spank.md).
 *
 * MUNGE: munge_encode() talks to the local munged; it is called once per
 * TCP request, before connecting, and a deadline that passed meanwhile ends
 * the request. A missing munged fails at once; a busy one is subject to
 * libmunge's own retries, which this code cannot cut short. The
 * credential's payload binds it to this one request: a SHA-256 of the
 * method, path, query, body, the time and a random nonce (common/
 * credbind.h has the canonical form; docs/security.md why). That digest is
 * the reason this library, and so the plugin, links libcrypto: one
 * EVP_sha256 per TCP request, no other OpenSSL state (OpenSSL pins itself
 * in memory, so slurmstepd unloading the plugin leaves nothing dangling).
 *
 * Must never: block past the deadline (resolver aside), read more than the
 * caller's body limit, raise SIGPIPE, keep a descriptor open after
 * returning, print, or exit.
 */
#ifndef STAGEHAND_DCLIENT_H
#define STAGEHAND_DCLIENT_H

#include <stddef.h>

/* Default body limit (the plugin's); the CLI asks for more. */
#define DCLIENT_MAX_BODY (256u * 1024u)

/* The header that carries a MUNGE credential on TCP (docs/api.md). */
#define DCLIENT_MUNGE_HEADER "X-Stagehand-Munge"

/* The daemon's built-in default socket (stagehand.conf SocketPath). */
#define DCLIENT_DEFAULT_SOCKET "/run/stagehand/stagehandd.sock"

enum dclient_kind {
	DCLIENT_UNIX = 0,   /* local socket; the kernel tells the daemon who we are */
	DCLIENT_TCP,        /* HOST:PORT with a MUNGE credential */
};

/* Where the daemon is. Plain data: copy it freely. */
struct dclient_target {
	enum dclient_kind kind;
	char path[108];      /* UNIX: socket path (sun_path limit) */
	char host[256];      /* TCP: host name or numeric address, no brackets */
	char port[8];        /* TCP: decimal port */
	char label[300];     /* for messages: the path, or HOST:PORT as given */
};

struct dclient_resp {
	int status;    /* HTTP status code, e.g. 200 */
	char *body;    /* NUL-terminated body; owned by the caller: dclient_resp_free */
	size_t len;    /* bytes in body */
};

/* Why a request failed (dclient_request's return value when < 0). */
enum dclient_fail {
	DCLIENT_ERR_CONNECT = -1,  /* no daemon: socket missing, refused, no route */
	DCLIENT_ERR_TIMEOUT = -2,  /* deadline passed */
	DCLIENT_ERR_IO = -3,       /* connection broke, or bad or oversized response */
	DCLIENT_ERR_AUTH = -4,     /* no MUNGE credential could be made */
};

/* A UNIX-socket target. Returns 0, or -1 with err (too long, not absolute). */
int dclient_target_unix(struct dclient_target *t, const char *path, char *err,
			size_t errlen);

/*
 * A TCP target from "HOST:PORT" or "[V6ADDR]:PORT". Returns 0, or -1 with
 * err naming what is wrong. Nothing is resolved here.
 */
int dclient_target_server(struct dclient_target *t, const char *hostport, char *err,
			  size_t errlen);

/*
 * Pick the target by the order of docs/api.md "Finding the daemon": the
 * first non-empty of server (TCP) and socket (UNIX), each an explicit
 * choice (option, environment or plugstack argument; NULL or "" = not
 * given); else conf_file's Server=, else its SocketPath=, else the default
 * socket. conf_file may be NULL (no file); a file that does not exist is
 * "not given" unless conf_required. Returns 0, or -1 with err.
 */
int dclient_find(struct dclient_target *t, const char *server, const char *socket,
		 const char *conf_file, int conf_required, char *err, size_t errlen);

/* One exchange with the daemon (dclient_request). All borrowed. */
struct dclient_call {
	const char *method;          /* "GET", "POST" or "DELETE" */
	const char *path;            /* starts with '/', with its query */
	const char *body;            /* sent as application/json; NULL: none */
	int timeout_ms;              /* the whole exchange */
	size_t max_body;             /* a response body over this is refused; 0: DCLIENT_MAX_BODY */
};

/*
 * Send c's method and path (and body) to the daemon at t and read the
 * whole response within c->timeout_ms. Returns 0 with resp filled (any
 * status), or a dclient_fail with a message in err that names the target.
 * resp is zeroed first and is empty on failure.
 */
int dclient_request(const struct dclient_target *t, const struct dclient_call *c,
		    struct dclient_resp *resp, char *err, size_t errlen);

/*
 * The exact bytes dclient_request would send to t for the same call:
 * the request head (over TCP with a fresh credential bound to this request)
 * and the body. For tests and diagnosis (the CLI's STAGEHAND_DUMP_REQUEST):
 * over TCP the bytes hold a live credential of the caller, good for this
 * one request until it expires. Returns 0 with *out (NUL-terminated,
 * *outlen bytes before the NUL; owned by the caller: free) or a
 * dclient_fail with err, *out then NULL.
 */
int dclient_format_request(const struct dclient_target *t, const struct dclient_call *c,
			   char **out, size_t *outlen, char *err, size_t errlen);

void dclient_resp_free(struct dclient_resp *resp);

#endif /* STAGEHAND_DCLIENT_H */
