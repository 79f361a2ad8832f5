/*
 * slurm_nodes.c - job -> node addresses from slurmctld (see slurm_nodes.h).
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "monoclock.h"
#include "slurm_compat.h"

#include "log.h"
#include "slurm_nodes.h"

#define SLOTS 256              /* jobs cached */
#define JOB_TTL_MS 10000       /* a job's node list is reused this long */
#define RECHECK_MS 2000        /* a "no" from data older than this is asked again */
#define ERR_TTL_MS 1000        /* a failed lookup is not retried sooner */
#define NODE_TTL_MS 60000      /* the node table is reloaded at most this often */
#define MAX_LOOKUPS 4          /* slurmctld queries in flight at once */
#define MAX_ADDRS 4096         /* addresses kept per job */

/* An address reduced to its bytes: 4 for IPv4 (also v4-mapped IPv6), 16 for IPv6. */
struct _addr {
	unsigned char len;
	unsigned char b[16];
};

enum { FREE = 0, PENDING, DONE };

struct _slot {
	uint32_t job;
	int state;
	enum snodes_verdict kind;  /* DONE: SNODES_NO (known job), NOJOB or UNKNOWN */
	int64_t at_ms;             /* when the lookup finished */
	struct _addr *addrs;       /* owned */
	size_t naddrs;
	int local;                 /* one of the job's nodes is this host */
	char nodes[256];           /* slurmctld's node list, for messages */
	char err[256];             /* UNKNOWN: why */
};

static pthread_mutex_t _lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t _done = PTHREAD_COND_INITIALIZER;
static struct _slot _slots[SLOTS];
static int _lookups;

/* The node table, reloaded by lookups at most every NODE_TTL_MS. */
static pthread_mutex_t _node_lock = PTHREAD_MUTEX_INITIALIZER;
static node_info_msg_t *_nodes;
static int64_t _nodes_at;

static int _addr_of(const struct sockaddr *sa, struct _addr *out)
{
	if (sa->sa_family == AF_INET) {
		out->len = 4;
		memcpy(out->b, &((const struct sockaddr_in *)sa)->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;

		if (IN6_IS_ADDR_V4MAPPED(a)) {
			out->len = 4;
			memcpy(out->b, a->s6_addr + 12, 4);
		} else {
			out->len = 16;
			memcpy(out->b, a->s6_addr, 16);
		}
		return 0;
	}
	return -1;
}

static int _addr_eq(const struct _addr *a, const struct _addr *b)
{
	return a->len == b->len && memcmp(a->b, b->b, a->len) == 0;
}

static int _is_local(const struct _addr *a)
{
	static const unsigned char v6lo[16] = { [15] = 1 };
	struct ifaddrs *ifs = NULL;
	int local = 0;

	if ((a->len == 4 && a->b[0] == 127) || (a->len == 16 && !memcmp(a->b, v6lo, 16)))
		return 1;
	if (getifaddrs(&ifs) < 0)
		return 0;
	for (struct ifaddrs *i = ifs; i && !local; i = i->ifa_next) {
		struct _addr x;

		if (i->ifa_addr && _addr_of(i->ifa_addr, &x) == 0 && _addr_eq(&x, a))
			local = 1;
	}
	freeifaddrs(ifs);
	return local;
}

int snodes_is_local(const struct sockaddr *sa)
{
	struct _addr a;

	return _addr_of(sa, &a) == 0 && _is_local(&a);
}

/* NodeAddr of node name (into out), from the cached node table. */
static void _node_addr(const char *name, char *out, size_t outlen)
{
	int64_t now = mono_ms();

	snprintf(out, outlen, "%s", name);   /* no NodeAddr: the name itself */
	pthread_mutex_lock(&_node_lock);
	for (int pass = 0; pass < 2; pass++) {
		if (!_nodes || now - _nodes_at > (pass ? RECHECK_MS : NODE_TTL_MS)) {
			node_info_msg_t *m = NULL;

			if (slurm_load_node(0, &m, SHOW_ALL) == SLURM_SUCCESS) {
				slurm_free_node_info_msg(_nodes);
				_nodes = m;
				_nodes_at = now;
			} else {
				log_warn("job events: slurm_load_node: %s",
					 slurm_strerror(slurm_errno_now()));
			}
		}
		for (uint32_t i = 0; _nodes && i < _nodes->record_count; i++) {
			node_info_t *n = &_nodes->node_array[i];

			if (n->name && strcmp(n->name, name) == 0) {
				if (n->node_addr && *n->node_addr)
					snprintf(out, outlen, "%s", n->node_addr);
				pthread_mutex_unlock(&_node_lock);
				return;
			}
		}
		/* A node added since the last load: one fresh look. */
	}
	pthread_mutex_unlock(&_node_lock);
}

/* Append host's addresses to *v. */
static void _resolve(const char *host, struct _addr **v, size_t *n, int *local)
{
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_NUMERICHOST };
	struct addrinfo *res = NULL;

	if (getaddrinfo(host, NULL, &hints, &res) != 0) {
		hints.ai_flags = 0;
		if (getaddrinfo(host, NULL, &hints, &res) != 0) {
			log_warn("job events: node address '%s' does not resolve", host);
			return;
		}
	}
	for (struct addrinfo *ai = res; ai && *n < MAX_ADDRS; ai = ai->ai_next) {
		struct _addr a;
		struct _addr *nv;

		if (_addr_of(ai->ai_addr, &a) < 0)
			continue;
		if (!(nv = realloc(*v, (*n + 1) * sizeof(**v))))
			break;
		*v = nv;
		(*v)[(*n)++] = a;
		if (_is_local(&a))
			*local = 1;
	}
	freeaddrinfo(res);
}

/* Every node of one job record. */
static void _job_addrs(const char *nodes, struct _addr **v, size_t *n, int *local)
{
	slurm_hostlist_ptr_t hl = slurm_hostlist_create(nodes);
	char *name, addr[256];

	if (!hl)
		return;
	while ((name = slurm_hostlist_shift(hl)) != NULL && *n < MAX_ADDRS) {
		_node_addr(name, addr, sizeof(addr));
		_resolve(addr, v, n, local);
		free(name);
	}
	slurm_hostlist_destroy(hl);
}

/* The helper thread: one slurmctld query for one job, result into its slot. */
static void *_lookup(void *arg)
{
	uint32_t job = (uint32_t)(uintptr_t)arg;
	job_info_msg_t *msg = NULL;
	struct _addr *v = NULL;
	size_t n = 0;
	int local = 0;
	char nodes[256] = "", err[256] = "";
	enum snodes_verdict kind = SNODES_NO;

	if (slurm_compat_load_job(&msg, job, SHOW_ALL) != SLURM_SUCCESS) {
		int e = slurm_errno_now();

		if (e == ESLURM_INVALID_JOB_ID) {
			kind = SNODES_NOJOB;
		} else {
			kind = SNODES_UNKNOWN;
			snprintf(err, sizeof(err), "slurm_load_job: %s", slurm_strerror(e));
		}
	} else {
		for (uint32_t i = 0; i < msg->record_count; i++) {
			const char *nl = msg->job_array[i].nodes;

			if (!nl || !*nl)
				continue;
			if (!nodes[0])
				snprintf(nodes, sizeof(nodes), "%s", nl);
			_job_addrs(nl, &v, &n, &local);
		}
		slurm_free_job_info_msg(msg);
	}
	pthread_mutex_lock(&_lock);
	for (int i = 0; i < SLOTS; i++) {
		struct _slot *s = &_slots[i];

		if (s->job != job || s->state != PENDING)
			continue;
		free(s->addrs);
		s->addrs = v;
		s->naddrs = n;
		v = NULL;
		s->local = local;
		s->kind = kind;
		s->at_ms = mono_ms();
		snprintf(s->nodes, sizeof(s->nodes), "%s", nodes);
		snprintf(s->err, sizeof(s->err), "%s", err);
		s->state = DONE;
		break;
	}
	_lookups--;
	pthread_cond_broadcast(&_done);
	pthread_mutex_unlock(&_lock);
	free(v);
	return NULL;
}

/* Under _lock: the slot of job, or NULL. */
static struct _slot *_find(uint32_t job)
{
	for (int i = 0; i < SLOTS; i++)
		if (_slots[i].state != FREE && _slots[i].job == job)
			return &_slots[i];
	return NULL;
}

/* Under _lock: a slot for a new lookup of job (free, else the oldest done). */
static struct _slot *_take(uint32_t job)
{
	struct _slot *s = _find(job), *old = NULL;

	for (int i = 0; !s && i < SLOTS; i++) {
		if (_slots[i].state == FREE)
			s = &_slots[i];
		else if (_slots[i].state == DONE && (!old || _slots[i].at_ms < old->at_ms))
			old = &_slots[i];
	}
	if (!s)
		s = old;
	if (!s)
		return NULL;
	s->job = job;
	s->state = PENDING;
	return s;
}

/* Under _lock: start a lookup of job. 0, or -1 with why. */
static int _start(uint32_t job, char *why, size_t whylen)
{
	pthread_attr_t at;
	pthread_t t;
	struct _slot *s;
	int rc;

	if (_lookups >= MAX_LOOKUPS) {
		snprintf(why, whylen, "%d slurmctld lookups are already running", _lookups);
		return -1;
	}
	if (!(s = _take(job))) {
		snprintf(why, whylen, "the job lookup cache is full");
		return -1;
	}
	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	rc = pthread_create(&t, &at, _lookup, (void *)(uintptr_t)job);
	pthread_attr_destroy(&at);
	if (rc != 0) {
		s->state = FREE;
		snprintf(why, whylen, "cannot start a lookup thread: %s", strerror(rc));
		return -1;
	}
	_lookups++;
	return 0;
}

/* Under _lock: wait until job's slot is done or the deadline passes. */
static struct _slot *_wait(uint32_t job, int64_t deadline)
{
	struct _slot *s;

	while ((s = _find(job)) && s->state == PENDING) {
		int64_t ms = deadline;
		struct timespec ts;

		clock_gettime(CLOCK_REALTIME, &ts);
		int64_t left = ms - mono_ms();
		if (left <= 0)
			return NULL;
		ts.tv_sec += left / 1000;
		ts.tv_nsec += (left % 1000) * 1000000L;
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		pthread_cond_timedwait(&_done, &_lock, &ts);
	}
	return s;
}

/* Under _lock: the verdict of a done slot for peer. */
static enum snodes_verdict _judge(const struct _slot *s, const struct _addr *peer,
				  char *why, size_t whylen)
{
	if (s->kind == SNODES_NOJOB) {
		snprintf(why, whylen, "slurmctld does not know job %u (never submitted, or "
			 "purged after MinJobAge)", s->job);
		return SNODES_NOJOB;
	}
	if (s->kind == SNODES_UNKNOWN) {
		snprintf(why, whylen, "cannot ask slurmctld about job %u: %s", s->job, s->err);
		return SNODES_UNKNOWN;
	}
	for (size_t i = 0; i < s->naddrs; i++)
		if (_addr_eq(&s->addrs[i], peer)) {
			snprintf(why, whylen, "job %u runs on %s", s->job, s->nodes);
			return SNODES_YES;
		}
	if (s->local && _is_local(peer)) {
		snprintf(why, whylen, "job %u runs on %s, a node on this host", s->job, s->nodes);
		return SNODES_YES;
	}
	snprintf(why, whylen, "job %u runs on %s, not on the sending node", s->job,
		 s->nodes[0] ? s->nodes : "no node yet");
	return SNODES_NO;
}

enum snodes_verdict snodes_check(uint32_t job_id, const struct sockaddr *peer,
				 socklen_t peerlen, int timeout_ms, char *why, size_t whylen)
{
	int64_t now = mono_ms(), deadline = now + timeout_ms;
	struct _addr pa;
	enum snodes_verdict v;
	struct _slot *s;

	if (!peer || peerlen < sizeof(sa_family_t) || _addr_of(peer, &pa) < 0) {
		snprintf(why, whylen, "the connection has no IP peer address");
		return SNODES_NO;
	}
	pthread_mutex_lock(&_lock);
	s = _find(job_id);
	if (s && s->state == DONE) {
		int64_t age = now - s->at_ms;

		v = _judge(s, &pa, why, whylen);
		/* Fresh enough, or a "no" that is recent: answer from the cache. */
		if ((v == SNODES_YES && age < JOB_TTL_MS) ||
		    (v == SNODES_UNKNOWN && age < ERR_TTL_MS) ||
		    ((v == SNODES_NO || v == SNODES_NOJOB) && age < RECHECK_MS)) {
			pthread_mutex_unlock(&_lock);
			return v;
		}
	}
	if ((!s || s->state != PENDING) && _start(job_id, why, whylen) < 0) {
		pthread_mutex_unlock(&_lock);
		return SNODES_UNKNOWN;
	}
	s = _wait(job_id, deadline);
	if (!s || s->state != DONE) {
		snprintf(why, whylen, "slurmctld did not say within %d ms where job %u runs",
			 timeout_ms, job_id);
		v = SNODES_UNKNOWN;
	} else {
		v = _judge(s, &pa, why, whylen);
	}
	pthread_mutex_unlock(&_lock);
	return v;
}
