/* api.c - see api.h: sockets, identity, limits; endpoints are in api_handlers.c. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <netdb.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "api_cred.h"
#include "api_decode.h"
#include "api_private.h"
#include "api_prep.h"
#include "api_writer.h"
#include "log.h"
#include "metrics.h"
#include "monoclock.h"

#define MAX_UIDS 1024
#define MAX_CONNECTIONS 1024         /* per listening socket, at most */
#define MIN_CONNECTIONS 64           /* per listening socket, however few descriptors */
/*
 * Descriptors kept for all but the API's connections (database, workers'
 * channels, NotifyCommand pipes, Slurm, MUNGE, the metrics listener). Each
 * connection takes two: libmicrohttpd's and our dup for the sweeper.
 */
#define FD_RESERVE 512
/*
 * Near a listener's limit (api.conn_limit) each new connection closes the
 * one that has waited longest for its next complete request (api.evict_at).
 * libmicrohttpd at its limit, or out of descriptors, stops accepting, so
 * without this, peers that never send a request (TCP peers need no
 * credential to connect) would lock everyone out until ConnectionTimeout;
 * with it a client that sends its request at once always gets in. The
 * headroom covers connections already shut down that libmicrohttpd has not
 * yet closed (it accepts at most 10 per pass).
 */
#define EVICT_HEADROOM(limit) ((limit) / 16 > 16 ? (limit) / 16 : 16)
/*
 * Per connection, libmicrohttpd keeps the request line and headers in a
 * pool of this size (its default, said here because the bound depends on
 * it): a larger header is refused with 431. With MAX_CONNECTIONS this
 * bounds a listener's header memory at 32 MiB.
 */
#define CONN_MEMORY (32 * 1024)
#define PER_IP_FACTOR 4              /* TCP: connections per address = this x MaxConnectionsPerUser */
#define REFUSED_GRACE_MS 200         /* a refused client's time to send its request */

struct _uidcount {
	uid_t uid;
	int n;
};

/* Per connection (socket context); linked into api.conns while open. */
struct _conn {
	int is_tcp;
	int known;                   /* uid/gid are set and counted */
	int over;                    /* over the per-user cap: every request gets 429 */
	uid_t uid;
	gid_t gid;
	int fd;                      /* our dup of the socket, for the deadline sweeper; -1 none */
	time_t since;                /* connection start or end of its last request */
	int cut;                     /* shut down (sweeper, refusal or room for another) */
	int64_t cut_at_ms;           /* refused: shut it down at this time (ms), 0 = no */
	int linked;                  /* in api.conns */
	int busy;                    /* its request is with the writer: complete, not idle */
	struct _conn *prev, *next;
};

struct api {
	struct daemon *d;
	int unix_fd, tcp_fd;
	char *unix_path;
	struct MHD_Daemon *mu, *mt;
	struct api_cred *cred;       /* TCP: bound MUNGE credentials and their replay cache */
	pthread_mutex_t lock;        /* guards counts, conns, stop and the counters */
	struct _uidcount counts[MAX_UIDS];
	struct _conn *conns;         /* open connections, newest since first */
	struct _conn *oldest;        /* the list's tail */
	int live[2];                 /* linked and not cut, [is_tcp] */
	pthread_t sweeper;
	int sweeper_on;
	pthread_cond_t wake;         /* signals the sweeper to stop */
	int stop;
	unsigned long refused;       /* connections closed at once: over MaxConnectionsPerUser */
	time_t refused_logged;       /* last time a refusal was logged */
	unsigned long cut;           /* connections closed: no complete request in time */
	unsigned conn_limit;         /* per listener: MAX_CONNECTIONS or what descriptors allow */
	int evict_at;                /* open connections on a listener before making room */
	unsigned long evicted;       /* connections closed to make room (evict_at) */
	time_t evicted_logged;       /* last time an eviction was logged */
	struct api_writer *writer;   /* answers POST and DELETE (api_writer.h) */
	struct api_prep *prep;       /* asks slurmctld before the writer (api_prep.h) */
	int answering;               /* requests handed to the writer, not yet completed */
};

/* Per HTTP request (con_cls). */
struct _req {
	char *target;                /* the request target as sent (path?query), for credbind */
	int started;                 /* the handler has seen this request once */
	char *body;
	size_t len, cap;
	int too_big;
	int queued;                  /* handed to the writer; job.rep is the answer once resumed */
	struct api_wjob job;
};

void api_error(struct api_reply *out, unsigned status, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	if (vsnprintf(msg, sizeof(msg), fmt, ap) >= (int)sizeof(msg))
		memcpy(msg + sizeof(msg) - 4, "...", 4);
	va_end(ap);
	out->status = status;
	json_decref(out->body);
	out->body = json_pack("{s:s}", "error", msg);
	if (!out->body)	/* message not UTF-8: say so without it */
		out->body = json_pack("{s:s}", "error", "invalid request (text is not UTF-8)");
}

static int _in_list(char *const *list, const char *name)
{
	for (char *const *p = list; p && *p; p++)
		if (strcmp(*p, name) == 0)
			return 1;
	return 0;
}

int api_is_admin(struct daemon *d, uid_t uid, gid_t gid)
{
	const struct conf *c = d->conf;
	struct passwd pw, *pwp = NULL;
	char buf[4096];
	gid_t groups[256];
	int ng = 256;

	if (uid == 0)
		return 1;
	if (!c->admin_users[0] && !c->admin_groups[0])
		return 0;
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &pwp) != 0 || !pwp)
		return 0;
	if (_in_list(c->admin_users, pwp->pw_name))
		return 1;
	if (getgrouplist(pwp->pw_name, gid, groups, &ng) < 0)
		ng = 0;
	for (int i = 0; i < ng; i++) {
		struct group gr, *grp = NULL;
		char gbuf[8192];

		if (getgrgid_r(groups[i], &gr, gbuf, sizeof(gbuf), &grp) == 0 && grp &&
		    _in_list(c->admin_groups, grp->gr_name))
			return 1;
	}
	return 0;
}

/* Count a connection for uid; returns 1 if over the cap. */
static int _count(struct api *a, uid_t uid, int delta)
{
	struct _uidcount *slot = NULL;
	int over = 0, cap;

	pthread_rwlock_rdlock(&a->d->conf_lock);
	cap = a->d->conf->max_connections_per_user;
	pthread_rwlock_unlock(&a->d->conf_lock);
	pthread_mutex_lock(&a->lock);
	/* The uid's own slot wherever it is; a free one only if it has none. */
	for (int i = 0; i < MAX_UIDS; i++) {
		struct _uidcount *u = &a->counts[i];

		if (u->n > 0 && u->uid == uid) {
			slot = u;
			break;
		}
		if (!slot && u->n == 0)
			slot = u;
	}
	if (slot && (slot->n > 0 || delta > 0)) {
		if (slot->n == 0)
			slot->uid = uid;
		slot->n += delta;
		over = delta > 0 && slot->n > cap;
	}
	pthread_mutex_unlock(&a->lock);
	return over;
}

/*
 * A UNIX connection over MaxConnectionsPerUser: answer 429 at once, so that a
 * user holding idle connections cannot use up the server's connection slots.
 * If the request is already there the socket is shut at once (libmicrohttpd
 * closes it on its next poll). Otherwise only our sending side is shut: a
 * client about to send still can, and then reads the 429 (libcurl reports a
 * fully shut socket as "could not connect"); the sweeper shuts the rest
 * REFUSED_GRACE_MS later. Returns 1 when the socket is fully shut.
 */
static int _refuse(struct api *a, int fd, uid_t uid)
{
	char peek;
	int sent, say = 0;
	time_t now;

	static const char body[] = "{\"error\":\"too many connections from your uid "
		"(MaxConnectionsPerUser): close some and try again\"}";
	char msg[512];
	int n = snprintf(msg, sizeof(msg), "HTTP/1.1 429 Too Many Requests\r\n"
			 "Content-Type: application/json\r\nContent-Length: %zu\r\n"
			 "Connection: close\r\n\r\n%s", sizeof(body) - 1, body);
	unsigned long total;

	if (n > 0 && (size_t)n < sizeof(msg) &&
	    send(fd, msg, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0) {
		/* The peer is gone or its buffer is full: closing is all that is left. */
	}
	sent = recv(fd, &peek, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
	shutdown(fd, sent ? SHUT_RDWR : SHUT_WR);
	/* A flood refuses thousands a second: one log line per 10 s at most. */
	pthread_mutex_lock(&a->lock);
	total = ++a->refused;
	now = time(NULL);
	if (now - a->refused_logged >= 10) {
		a->refused_logged = now;
		say = 1;
	}
	pthread_mutex_unlock(&a->lock);
	if (say)
		log_warn("uid %u is over MaxConnectionsPerUser: connection refused (%lu refused "
			 "since start)", (unsigned)uid, total);
	return sent;
}

/* The list of open connections, kept newest first by since; a->lock held. */
static void _link(struct api *a, struct _conn *k)
{
	k->prev = NULL;
	k->next = a->conns;
	if (a->conns)
		a->conns->prev = k;
	else
		a->oldest = k;
	a->conns = k;
	k->linked = 1;
}

static void _unlink(struct api *a, struct _conn *k)
{
	if (k->prev)
		k->prev->next = k->next;
	else
		a->conns = k->next;
	if (k->next)
		k->next->prev = k->prev;
	else
		a->oldest = k->prev;
	k->prev = k->next = NULL;
	k->linked = 0;
}

/* Shut k down; libmicrohttpd closes it on its next pass. a->lock held. */
static void _cut(struct api *a, struct _conn *k)
{
	shutdown(k->fd, SHUT_RDWR);
	k->cut = 1;
	a->live[k->is_tcp]--;
}

/*
 * A connection has just joined k's listener: over evict_at, shut down the one
 * of that listener that has waited longest for a complete request. a->lock
 * held. Returns 1 if one was shut down.
 */
static int _make_room(struct api *a, const struct _conn *k)
{
	if (a->live[k->is_tcp] <= a->evict_at)
		return 0;
	for (struct _conn *o = a->oldest; o; o = o->prev)
		if (o != k && !o->cut && o->fd >= 0 && o->is_tcp == k->is_tcp) {
			_cut(a, o);
			a->evicted++;
			return 1;
		}
	return 0;
}

static void _notify(void *cls, struct MHD_Connection *c, void **socket_context,
		    enum MHD_ConnectionNotificationCode toe)
{
	struct api *a = cls;
	struct _conn *k = *socket_context;

	if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
		const union MHD_ConnectionInfo *ci =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);

		k = calloc(1, sizeof(*k));
		*socket_context = k;
		if (!k)
			return;
		k->fd = -1;
		k->since = time(NULL);
		if (!ci)
			return;
		/* Anything but a UNIX socket must prove its identity with MUNGE. */
		k->is_tcp = getsockname(ci->connect_fd, (struct sockaddr *)&ss, &sl) < 0 ||
			    ss.ss_family != AF_UNIX;
		if (!k->is_tcp) {
			struct ucred cr;
			socklen_t len = sizeof(cr);

			/* The kernel's word on who is at the other end of the UNIX socket. */
			if (getsockopt(ci->connect_fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0) {
				k->uid = cr.uid;
				k->gid = cr.gid;
				k->known = 1;
				k->over = _count(a, k->uid, 1);
			}
		}
		if (k->over && _refuse(a, ci->connect_fd, k->uid))
			return;
		/* A dup keeps the socket alive while the sweeper may shut it down. */
		k->fd = fcntl(ci->connect_fd, F_DUPFD_CLOEXEC, 0);
		pthread_mutex_lock(&a->lock);
		if (k->over) {
			k->cut_at_ms = mono_ms() + REFUSED_GRACE_MS;
			pthread_cond_signal(&a->wake);
		}
		_link(a, k);
		a->live[k->is_tcp]++;
		if (_make_room(a, k) && time(NULL) - a->evicted_logged >= 10) {
			/* A flood makes room thousands of times a second: a line per 10 s. */
			a->evicted_logged = time(NULL);
			log_warn("api: over %d connections open on the %s socket: closing the one "
				 "waiting longest for a request as each new one comes (%lu so far)",
				 a->evict_at, k->is_tcp ? "TCP" : "UNIX", a->evicted);
		}
		pthread_mutex_unlock(&a->lock);
	} else if (toe == MHD_CONNECTION_NOTIFY_CLOSED && k) {
		if (k->known)
			_count(a, k->uid, -1);
		pthread_mutex_lock(&a->lock);
		if (k->linked) {
			_unlink(a, k);
			if (!k->cut)
				a->live[k->is_tcp]--;
		}
		pthread_mutex_unlock(&a->lock);
		if (k->fd >= 0)
			close(k->fd);
		free(k);
		*socket_context = NULL;
	}
}

static void _completed(void *cls, struct MHD_Connection *c, void **con_cls,
		       enum MHD_RequestTerminationCode toe)
{
	struct api *a = cls;
	struct _req *r = *con_cls;
	const union MHD_ConnectionInfo *si =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct _conn *k = si ? si->socket_context : NULL;

	(void)toe;
	if (k) {
		/* The next request on a kept-alive connection gets a full ConnectionTimeout,
		   and the connection is the last to be closed to make room. */
		pthread_mutex_lock(&a->lock);
		k->since = time(NULL);
		if (k->linked && a->conns != k) {
			_unlink(a, k);
			_link(a, k);
		}
		pthread_mutex_unlock(&a->lock);
	}
	if (r && r->queued) {
		pthread_mutex_lock(&a->lock);
		a->answering--;
		pthread_mutex_unlock(&a->lock);
	}
	if (r) {
		json_decref(r->job.jb);
		api_order_clear(&r->job.order);
		free(r->target);
		free(r->body);
		free(r);
		*con_cls = NULL;
	}
}

static enum MHD_Result _send(struct MHD_Connection *c, struct api_reply *rep, int close_after)
{
	struct MHD_Response *resp;
	enum MHD_Result ret;
	char *txt = rep->text;
	const char *ctype = "text/plain; version=0.0.4; charset=utf-8";

	if (!txt) {
		txt = rep->body ? json_dumps(rep->body, JSON_COMPACT) : NULL;
		ctype = "application/json";
		if (!txt) {
			rep->status = MHD_HTTP_INTERNAL_SERVER_ERROR;
			txt = strdup("{\"error\":\"out of memory\"}");
		}
	}
	rep->text = NULL;
	json_decref(rep->body);
	rep->body = NULL;
	if (!txt)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(txt);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
	if (close_after)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	ret = MHD_queue_response(c, rep->status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static enum MHD_Result _fail(struct MHD_Connection *c, unsigned status, const char *msg)
{
	struct api_reply rep = { 0 };

	api_error(&rep, status, "%s", msg);
	/* After a refusal the connection is not reused: it frees its slot now. */
	return _send(c, &rep, status == MHD_HTTP_TOO_MANY_REQUESTS || status == 413 ||
		     status == MHD_HTTP_UNAUTHORIZED);
}

/*
 * libmicrohttpd hands the handler a decoded path and the query split into
 * arguments; a bound credential covers the target as sent, which only this
 * callback sees. Its result becomes the request's con_cls.
 */
static void *_uri(void *cls, const char *uri, struct MHD_Connection *c)
{
	struct _req *r = calloc(1, sizeof(*r));

	(void)cls;
	(void)c;
	if (r)
		r->target = strdup(uri);
	return r;
}

/*
 * TCP: identity from a MUNGE credential bound to this request (api_cred.h).
 * Called once the whole body is in. 0, or the refusal's HTTP status with
 * the reason in why.
 */
static int _munge_identity(struct api *a, struct MHD_Connection *c, struct _conn *k,
			   const char *method, const struct _req *r, char *why, size_t whylen)
{
	const char *cred = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Stagehand-Munge");
	const union MHD_ConnectionInfo *ai =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
	struct credbind_req rq = { .method = method, .target = r->target ? r->target : "",
				   .body = r->body, .body_len = r->len };
	char peer[NI_MAXHOST] = "?";
	uid_t uid;
	gid_t gid;
	int st;

	if (ai && ai->client_addr)
		getnameinfo(ai->client_addr, ai->client_addr->sa_family == AF_INET6 ?
			    sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in),
			    peer, sizeof(peer), NULL, 0, NI_NUMERICHOST);
	st = api_cred_check(a->cred, cred, &rq, peer, &uid, &gid, why, whylen);
	if (st)
		return st;
	if (!k->known) {
		k->uid = uid;
		k->gid = gid;
		k->known = 1;
		k->over = _count(a, uid, 1);
	} else if (k->uid != uid) {
		snprintf(why, whylen, "MUNGE credential is for uid %u but this connection "
			 "belongs to uid %u", (unsigned)uid, (unsigned)k->uid);
		return MHD_HTTP_UNAUTHORIZED;
	}
	return 0;
}

/*
 * A change (anything but GET and HEAD) goes to the writer thread, its body
 * decoded here first; reads go on here meanwhile. 1 if handed over (the
 * connection is suspended until the answer is ready), 0 to answer here.
 */
static int _to_writer(struct api *a, struct MHD_Connection *c, struct _conn *k, struct _req *r,
		      const struct api_caller *who, const char *method, const char *url)
{
	if (!a->writer || strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0)
		return 0;
	r->job = (struct api_wjob){ .c = c, .who = *who, .method = method, .url = url,
				    .submit = api_route_is_submit(method, url),
				    .lane = api_prep_lane(method, url) };
	if (strcmp(method, "POST") == 0 &&
	    api_decode_body(r->body, r->len, &r->job.jb, r->job.body_err,
			    sizeof(r->job.body_err)) < 0)
		r->job.jb = NULL;
	pthread_mutex_lock(&a->lock);
	k->busy = 1;		/* a complete request: not the sweeper's to cut */
	pthread_mutex_unlock(&a->lock);
	/* What needs slurmctld asks it first, off the writer's thread (api_prep.h). */
	if ((r->job.lane >= 0 && api_prep_submit(a->prep, &r->job) == 0) ||
	    (r->job.lane < 0 && api_writer_submit(a->writer, &r->job) == 0)) {
		r->queued = 1;
		pthread_mutex_lock(&a->lock);
		a->answering++;
		pthread_mutex_unlock(&a->lock);
		return 1;
	}
	pthread_mutex_lock(&a->lock);
	k->busy = 0;
	pthread_mutex_unlock(&a->lock);
	json_decref(r->job.jb);
	r->job.jb = NULL;
	return 0;
}

/* The writer's answer to r, once it has resumed the connection. */
static enum MHD_Result _answer_resumed(struct api *a, struct MHD_Connection *c, struct _req *r,
				       const char *method, const char *url)
{
	const union MHD_ConnectionInfo *si =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	struct _conn *k = si ? si->socket_context : NULL;

	if (k) {
		pthread_mutex_lock(&a->lock);
		k->busy = 0;
		pthread_mutex_unlock(&a->lock);
	}
	log_debug("api: uid %u %s %s -> %u", (unsigned)r->job.who.uid, method, url,
		  r->job.rep.status);
	return _send(c, &r->job.rep, 0);
}

static enum MHD_Result _handle(void *cls, struct MHD_Connection *c, const char *url,
			       const char *method, const char *version, const char *upload,
			       size_t *upload_size, void **con_cls)
{
	struct api *a = cls;
	struct daemon *d = a->d;
	struct _req *r = *con_cls;
	const union MHD_ConnectionInfo *si;
	struct _conn *k;
	struct api_caller who;
	struct api_reply rep = { 0 };
	size_t limit;
	char why[512];
	enum MHD_Result ret;
	int st;

	(void)version;
	pthread_rwlock_rdlock(&d->conf_lock);
	limit = d->conf->max_request_bytes;
	pthread_rwlock_unlock(&d->conf_lock);
	if (!r || !r->started) {
		const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND,
							     MHD_HTTP_HEADER_CONTENT_LENGTH);

		if (!r && !(r = calloc(1, sizeof(*r))))
			return MHD_NO;
		*con_cls = r;
		r->started = 1;
		if (cl && strtoull(cl, NULL, 10) > limit) {
			snprintf(why, sizeof(why), "request body is %s bytes; the limit is %zu "
				 "(MaxRequestBytes)", cl, limit);
			return _fail(c, 413, why);
		}
		return MHD_YES;
	}
	if (r->queued)	/* resumed by the writer: its answer is ready */
		return _answer_resumed(a, c, r, method, url);
	if (*upload_size) {
		if (!r->too_big && r->len + *upload_size <= limit) {
			if (r->len + *upload_size + 1 > r->cap) {
				size_t cap = r->len + *upload_size + 1 + 1024;
				char *b = realloc(r->body, cap);

				if (!b)
					return MHD_NO;
				r->body = b;
				r->cap = cap;
			}
			memcpy(r->body + r->len, upload, *upload_size);
			r->len += *upload_size;
			r->body[r->len] = '\0';
		} else {
			r->too_big = 1;
		}
		*upload_size = 0;
		return MHD_YES;
	}
	if (r->too_big) {
		snprintf(why, sizeof(why), "request body is over the limit of %zu bytes "
			 "(MaxRequestBytes)", limit);
		return _fail(c, 413, why);
	}
	si = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
	k = si ? si->socket_context : NULL;
	if (!k)
		return _fail(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "connection state lost");
	if (k->is_tcp && (st = _munge_identity(a, c, k, method, r, why, sizeof(why))) != 0)
		return _fail(c, (unsigned)st, why);
	if (!k->known)
		return _fail(c, MHD_HTTP_FORBIDDEN, "cannot identify the caller (no peer credentials)");
	if (k->over)
		return _fail(c, MHD_HTTP_TOO_MANY_REQUESTS, "too many connections from your uid "
			     "(MaxConnectionsPerUser): close some and try again");
	who.uid = k->uid;
	who.gid = k->gid;
	who.tcp = k->is_tcp;
	who.peer = NULL;
	if (k->is_tcp) {
		const union MHD_ConnectionInfo *ai =
			MHD_get_connection_info(c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);

		who.peer = ai ? ai->client_addr : NULL;
	}
	if (_to_writer(a, c, k, r, &who, method, url))
		return MHD_YES;
	pthread_rwlock_rdlock(&d->conf_lock);
	who.admin = api_is_admin(d, who.uid, who.gid);
	api_route(d, &who, c, method, url, r->body, r->len, &rep);
	pthread_rwlock_unlock(&d->conf_lock);
	log_debug("api: uid %u %s %s -> %u", (unsigned)who.uid, method, url, rep.status);
	ret = _send(c, &rep, 0);
	return ret;
}

char *api_metrics_render(struct daemon *d)
{
	char *core = metrics_render(d), *text = NULL;
	unsigned long waiting, answered, groups, prep[2], calls, hits;
	size_t len = 0;
	FILE *f;

	if (!core || !d->api)
		return core;
	api_writer_stats(d->api->writer, &waiting, &answered, &groups);
	api_prep_stats(d->api->prep, prep, &calls, &hits);
	f = open_memstream(&text, &len);
	if (!f)
		return core;
	fprintf(f, "%s# HELP stagehand_api_writes_waiting Requests that change something (POST, "
		"DELETE) handed to the API's writer thread and not yet answered.\n"
		"# TYPE stagehand_api_writes_waiting gauge\nstagehand_api_writes_waiting %lu\n"
		"# HELP stagehand_api_writes_total Such requests answered by the writer thread "
		"since start.\n# TYPE stagehand_api_writes_total counter\n"
		"stagehand_api_writes_total %lu\n"
		"# HELP stagehand_api_shared_commits_total Commits that stored the requests of "
		"several POST /v1/requests calls at once (group commit).\n"
		"# TYPE stagehand_api_shared_commits_total counter\n"
		"stagehand_api_shared_commits_total %lu\n"
		"# HELP stagehand_api_prep_waiting Changes waiting for their look-ups at "
		"slurmctld before the writer thread, by lane (job events; POST /v1/requests).\n"
		"# TYPE stagehand_api_prep_waiting gauge\n"
		"stagehand_api_prep_waiting{lane=\"events\"} %lu\n"
		"stagehand_api_prep_waiting{lane=\"requests\"} %lu\n"
		"# HELP stagehand_api_owner_lookups_total Calls to slurmctld asking whose jobs "
		"the requests name (one per uncached job, or one table read per batch).\n"
		"# TYPE stagehand_api_owner_lookups_total counter\n"
		"stagehand_api_owner_lookups_total %lu\n"
		"# HELP stagehand_api_owner_cache_hits_total Owners of jobs answered from the "
		"cache.\n# TYPE stagehand_api_owner_cache_hits_total counter\n"
		"stagehand_api_owner_cache_hits_total %lu\n", core, waiting, answered, groups,
		prep[0], prep[1], calls, hits);
	free(core);
	if (fclose(f) != 0) {
		free(text);
		return NULL;
	}
	return text;
}

static int _bind_unix(const char *path, char *err, size_t errlen)
{
	struct sockaddr_un sa;
	struct stat st;
	int fd;

	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	if (snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path) >= (int)sizeof(sa.sun_path)) {
		snprintf(err, errlen, "SocketPath %s is too long for a UNIX socket", path);
		return -1;
	}
	/* Replace a stale socket left by a crash, but never another kind of file. */
	if (lstat(path, &st) == 0) {
		if (!S_ISSOCK(st.st_mode)) {
			snprintf(err, errlen, "SocketPath %s exists and is not a socket: remove it "
				 "or choose another path", path);
			return -1;
		}
		fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
			close(fd);
			snprintf(err, errlen, "another stagehandd is listening on %s", path);
			return -1;
		}
		if (fd >= 0)
			close(fd);
		unlink(path);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    chmod(path, 0666) < 0 || listen(fd, 128) < 0) {
		snprintf(err, errlen, "cannot listen on %s: %s (does its directory exist?)", path,
			 strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

static int _bind_tcp(const char *host, unsigned short port, char *err, size_t errlen)
{
	struct addrinfo hints = { 0 }, *res = NULL;
	char ps[16];
	int fd = -1, one = 1, e;

	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_flags = AI_PASSIVE;
	snprintf(ps, sizeof(ps), "%u", port);
	e = getaddrinfo(host, ps, &hints, &res);
	if (e != 0) {
		snprintf(err, errlen, "ListenAddress %s:%u: %s", host, port, gai_strerror(e));
		return -1;
	}
	fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, res->ai_addr, res->ai_addrlen) < 0 || listen(fd, 128) < 0) {
		snprintf(err, errlen, "cannot listen on %s:%u: %s", host, port, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	return fd;
}

struct api *api_bind(struct daemon *d, char *err, size_t errlen)
{
	struct api *a = calloc(1, sizeof(*a));

	if (!a) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	a->d = d;
	a->tcp_fd = -1;
	a->cred = api_cred_new();
	if (!a->cred) {
		snprintf(err, errlen, "out of memory (or no random bytes for the replay cache)");
		free(a);
		return NULL;
	}
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->wake, NULL);
	a->unix_path = strdup(d->conf->socket_path);
	a->unix_fd = a->unix_path ? _bind_unix(a->unix_path, err, errlen) : -1;
	if (a->unix_fd < 0) {
		free(a->unix_path);
		a->unix_path = NULL;
		api_stop(a);
		return NULL;
	}
	if (d->conf->listen_host) {
		a->tcp_fd = _bind_tcp(d->conf->listen_host, d->conf->listen_port, err, errlen);
		if (a->tcp_fd < 0) {
			api_stop(a);
			return NULL;
		}
	}
	return a;
}

/*
 * libmicrohttpd's timeout only closes idle connections: a client sending a
 * byte a second is never idle. Once a second this thread shuts down every
 * connection that has not delivered a complete request within
 * ConnectionTimeout of its start (or of the end of its previous request).
 * It works on our dup of the socket, so a descriptor libmicrohttpd has
 * already closed and reused is never touched.
 */
static void *_sweep(void *arg)
{
	struct api *a = arg;
	struct timespec ts;

	pthread_mutex_lock(&a->lock);
	while (!a->stop) {
		time_t now = time(NULL), limit;
		int64_t ms = mono_ms(), next_ms = ms + 1000;
		unsigned long n = 0;

		pthread_rwlock_rdlock(&a->d->conf_lock);
		limit = a->d->conf->connection_timeout;
		pthread_rwlock_unlock(&a->d->conf_lock);

		for (struct _conn *k = a->conns; k; k = k->next) {
			if (k->cut || k->fd < 0 || k->busy)
				continue;
			if (k->cut_at_ms && k->cut_at_ms <= ms) {
				_cut(a, k);	/* refused, and the grace is over */
				continue;
			}
			if (k->cut_at_ms && k->cut_at_ms < next_ms)
				next_ms = k->cut_at_ms;
			if (now - k->since < limit)
				continue;
			_cut(a, k);
			n++;
		}
		if (n) {
			a->cut += n;
			log_warn("api: closed %lu connection(s) that sent no complete request within "
				 "ConnectionTimeout=%lds (%lu so far)", n, (long)limit, a->cut);
		}
		clock_gettime(CLOCK_REALTIME, &ts);
		ms = next_ms - ms;
		ts.tv_sec += ms / 1000;
		ts.tv_nsec += (ms % 1000) * 1000000;
		if (ts.tv_nsec >= 1000000000) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000;
		}
		pthread_cond_timedwait(&a->wake, &a->lock, &ts);
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

static struct MHD_Daemon *_start(struct api *a, int fd, unsigned timeout, unsigned per_ip)
{
	return MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO |
				MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL, _handle, a,
				MHD_OPTION_LISTEN_SOCKET, fd,
				MHD_OPTION_CONNECTION_TIMEOUT, timeout,
				MHD_OPTION_CONNECTION_LIMIT, a->conn_limit,
				MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)CONN_MEMORY,
				MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip,
				MHD_OPTION_NOTIFY_CONNECTION, _notify, a,
				MHD_OPTION_NOTIFY_COMPLETED, _completed, a,
				MHD_OPTION_URI_LOG_CALLBACK, _uri, a,
				MHD_OPTION_END);
}

/*
 * Connections per listener that the descriptor limit allows: the soft
 * RLIMIT_NOFILE is raised to the hard one first (the unit sets both with
 * LimitNOFILE=; a daemon started by hand often has 1024 of a larger hard
 * limit). Every socket is polled with epoll, so descriptors above 1024 are
 * fine.
 */
static unsigned _conn_limit(int listeners)
{
	struct rlimit rl;
	rlim_t per;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return MIN_CONNECTIONS;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur == RLIM_INFINITY)
		return MAX_CONNECTIONS;
	per = rl.rlim_cur > FD_RESERVE ? (rl.rlim_cur - FD_RESERVE) / 2 / (rlim_t)listeners : 0;
	if (per >= MAX_CONNECTIONS)
		return MAX_CONNECTIONS;
	log_warn("api: RLIMIT_NOFILE is %llu: %u connections per socket instead of %u "
		 "(LimitNOFILE= in the unit, ulimit -n by hand)", (unsigned long long)rl.rlim_cur,
		 per > MIN_CONNECTIONS ? (unsigned)per : MIN_CONNECTIONS, MAX_CONNECTIONS);
	return per > MIN_CONNECTIONS ? (unsigned)per : MIN_CONNECTIONS;
}

int api_start(struct api *a, char *err, size_t errlen)
{
	unsigned timeout = (unsigned)a->d->conf->connection_timeout;
	/*
	 * TCP callers are anonymous until their MUNGE header arrives, so their
	 * per-user cap cannot act before that: cap connections per address
	 * instead (several users may share a login node's address).
	 */
	unsigned per_ip = (unsigned)a->d->conf->max_connections_per_user * PER_IP_FACTOR;

	a->conn_limit = _conn_limit(a->tcp_fd >= 0 ? 2 : 1);
	a->evict_at = (int)(a->conn_limit - EVICT_HEADROOM(a->conn_limit));
	if (pthread_create(&a->sweeper, NULL, _sweep, a) != 0) {
		snprintf(err, errlen, "cannot start the API connection sweeper thread");
		return -1;
	}
	a->sweeper_on = 1;
	a->writer = api_writer_start(a->d, err, errlen);
	if (!a->writer)
		return -1;
	a->prep = api_prep_start(a->d, a->writer, err, errlen);
	if (!a->prep)
		return -1;
	api_writer_set_after(a->writer, api_prep_after, a->prep);
	if (a->tcp_fd >= 0) {
		a->mt = _start(a, a->tcp_fd, timeout, per_ip);
		if (!a->mt) {
			snprintf(err, errlen, "cannot start the TCP API server");
			return -1;
		}
	}
	a->mu = _start(a, a->unix_fd, timeout, 0);
	if (!a->mu) {
		snprintf(err, errlen, "cannot start the API server on %s", a->unix_path);
		return -1;
	}
	return 0;
}

void api_stop(struct api *a)
{
	if (!a)
		return;
	if (a->sweeper_on) {
		pthread_mutex_lock(&a->lock);
		a->stop = 1;
		pthread_cond_signal(&a->wake);
		pthread_mutex_unlock(&a->lock);
		pthread_join(a->sweeper, NULL);
	}
	/*
	 * First: the writer answers what waits and resumes those connections;
	 * then the listeners send those answers (up to 10 s) before they stop,
	 * so a change that was made is never left unanswered.
	 */
	api_writer_set_after(a->writer, NULL, NULL);
	api_prep_stop(a->prep);	/* answers what waits there, or hands it to the writer */
	a->prep = NULL;
	api_writer_stop(a->writer);
	a->writer = NULL;
	for (int i = 0, n = 1; n > 0; i++) {
		pthread_mutex_lock(&a->lock);
		n = a->answering;
		pthread_mutex_unlock(&a->lock);
		if (n > 0 && i == 1000) {
			log_warn("api: %d answer(s) of the writer thread not sent within 10 s; "
				 "stopping anyway (the clients see the connection close)", n);
			break;
		}
		if (n > 0)
			usleep(10000);
	}
	if (a->mu)
		MHD_stop_daemon(a->mu);
	if (a->mt)
		MHD_stop_daemon(a->mt);
	if (a->unix_fd >= 0)
		close(a->unix_fd);
	if (a->tcp_fd >= 0)
		close(a->tcp_fd);
	if (a->unix_path) {
		unlink(a->unix_path);
		free(a->unix_path);
	}
	if (a->refused || a->cut || a->evicted)
		log_info("api: %lu connection(s) refused over MaxConnectionsPerUser, %lu closed "
			 "for sending no complete request in time, %lu to make room for others",
			 a->refused, a->cut, a->evicted);
	api_cred_free(a->cred);
	pthread_cond_destroy(&a->wake);
	pthread_mutex_destroy(&a->lock);
	free(a);
}
