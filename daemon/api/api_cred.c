/* api_cred.c - see api_cred.h. */
#include "config.h"

#include <errno.h>
#include <munge.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <openssl/evp.h>

#include "api_cred.h"
#include "evpguard.h"
#include "log.h"

/*
 * The replay cache: 4096 buckets of 8 digests (32,768 requests within the
 * window, about 1.3 MB; a request a second per 109 nodes, every node busy).
 * A request's bucket is picked by a SHA-256 of a secret salt and its
 * digest, so that a user grinding nonces cannot aim at another's bucket.
 * A full bucket drops its oldest entry: munged's own replay cache still
 * guards it; the drop is counted and logged.
 */
#define CACHE_BUCKETS 4096
#define CACHE_WAYS 8
#define LOG_BURST 10                 /* refusal lines per LOG_PERIOD_S, then a count */
#define LOG_PERIOD_S 10

struct _seen {
	unsigned char digest[CREDBIND_DIGEST_LEN];
	long long until;             /* forget after this time (s); 0 = free */
};

struct api_cred {
	pthread_mutex_t lock;        /* guards everything below */
	unsigned char salt[32];
	struct _seen *cache;         /* CACHE_BUCKETS * CACHE_WAYS */
	unsigned long evicted;       /* entries dropped inside their window */
	time_t evict_logged;         /* last time an eviction was logged */
	time_t log_period;           /* start of the current logging period */
	unsigned log_lines;          /* refusal lines logged in it */
	unsigned long log_quiet;     /* refusals not logged in it */
};

struct api_cred *api_cred_new(void)
{
	struct api_cred *ac = calloc(1, sizeof(*ac));
	size_t got = 0;

	if (!ac)
		return NULL;
	ac->cache = calloc((size_t)CACHE_BUCKETS * CACHE_WAYS, sizeof(*ac->cache));
	while (ac->cache && got < sizeof(ac->salt)) {
		ssize_t r = getrandom(ac->salt + got, sizeof(ac->salt) - got, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	if (!ac->cache || got < sizeof(ac->salt)) {
		free(ac->cache);
		free(ac);
		return NULL;
	}
	pthread_mutex_init(&ac->lock, NULL);
	return ac;
}

void api_cred_free(struct api_cred *ac)
{
	if (!ac)
		return;
	pthread_mutex_destroy(&ac->lock);
	free(ac->cache);
	free(ac);
}

unsigned long api_cred_evicted(const struct api_cred *ac)
{
	return ac->evicted;
}

static size_t _bucket(const struct api_cred *ac, const unsigned char *digest)
{
	unsigned char in[sizeof(ac->salt) + CREDBIND_DIGEST_LEN], h[EVP_MAX_MD_SIZE];
	unsigned int hl = 0;
	int ok;

	memcpy(in, ac->salt, sizeof(ac->salt));
	memcpy(in + sizeof(ac->salt), digest, CREDBIND_DIGEST_LEN);
	evpguard_enter();             /* a worker may be forked meanwhile (evpguard.h) */
	ok = EVP_Digest(in, sizeof(in), h, &hl, EVP_sha256(), NULL);
	evpguard_leave();
	if (!ok || hl < 4)
		memcpy(h, digest, 4);   /* libcrypto failed: still a valid bucket */
	return (((size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3]) %
		CACHE_BUCKETS);
}

/* Remember digest until until; 1 if it was already there (a replay), else 0. */
static int _seen(struct api_cred *ac, const unsigned char *digest, long long until,
		 long long now)
{
	struct _seen *b = ac->cache + _bucket(ac, digest) * CACHE_WAYS, *slot = NULL;
	int replay = 0, evict = 0;

	pthread_mutex_lock(&ac->lock);
	for (int i = 0; i < CACHE_WAYS; i++) {
		struct _seen *e = &b[i];

		if (e->until >= now && memcmp(e->digest, digest, CREDBIND_DIGEST_LEN) == 0) {
			replay = 1;
			break;
		}
		if (e->until < now) {
			if (!slot || slot->until >= now)
				slot = e;
		} else if (!slot || (slot->until >= now && e->until < slot->until)) {
			slot = e;
		}
	}
	if (!replay) {
		if (slot->until >= now) {
			ac->evicted++;
			if (now - ac->evict_logged >= LOG_PERIOD_S) {
				ac->evict_logged = (time_t)now;
				evict = 1;
			}
		}
		memcpy(slot->digest, digest, CREDBIND_DIGEST_LEN);
		slot->until = until;
	}
	unsigned long n = ac->evicted;
	pthread_mutex_unlock(&ac->lock);
	if (evict)
		log_warn("api: replay cache full: %lu request digest(s) dropped inside their "
			 "%d s window so far (munged's replay cache still guards them)", n,
			 CREDBIND_WINDOW_S);
	return replay;
}

int api_cred_payload(struct api_cred *ac, const void *payload, size_t plen,
		     const struct credbind_req *rq, long long now, char *why, size_t whylen)
{
	unsigned char digest[CREDBIND_DIGEST_LEN];
	long long t = 0;
	int rc;

	evpguard_enter();             /* its SHA-256, as in _bucket */
	rc = credbind_check(payload, plen, rq, now, &t, digest, why, whylen);
	evpguard_leave();
	if (rc != CREDBIND_OK)
		return 403;
	/* Kept until TIME leaves the window: after that the window refuses it. */
	if (_seen(ac, digest, t + CREDBIND_WINDOW_S, now)) {
		snprintf(why, whylen, "this request was already taken (its MUNGE credential "
			 "and digest were seen before): a replay, refused");
		return 403;
	}
	return 0;
}

/* Log a refusal; at most LOG_BURST lines per LOG_PERIOD_S, then a count. */
static void _log_refusal(struct api_cred *ac, const char *peer, const struct credbind_req *rq,
			 int uid, const char *why)
{
	time_t now = time(NULL);
	unsigned long quiet = 0;
	int say;

	pthread_mutex_lock(&ac->lock);
	if (now - ac->log_period >= LOG_PERIOD_S) {
		quiet = ac->log_quiet;
		ac->log_period = now;
		ac->log_lines = 0;
		ac->log_quiet = 0;
	}
	say = ac->log_lines < LOG_BURST;
	if (say)
		ac->log_lines++;
	else
		ac->log_quiet++;
	pthread_mutex_unlock(&ac->lock);
	if (quiet)
		log_warn("api: %lu more TCP request(s) refused for their credential in the "
			 "last %d s", quiet, LOG_PERIOD_S);
	if (!say)
		return;
	if (uid >= 0)
		log_warn("api: TCP request %.16s %.200s from %s (uid %d) refused: %s", rq->method,
			 rq->target, peer ? peer : "?", uid, why);
	else
		log_warn("api: TCP request %.16s %.200s from %s refused: %s", rq->method,
			 rq->target, peer ? peer : "?", why);
}

int api_cred_check(struct api_cred *ac, const char *cred, const struct credbind_req *rq,
		   const char *peer, uid_t *uid, gid_t *gid, char *why, size_t whylen)
{
	void *payload = NULL;
	int plen = 0, rc;
	uid_t u;
	gid_t g;
	munge_err_t e;

	if (!cred) {
		snprintf(why, whylen, "TCP requests need a MUNGE credential in the "
			 "X-Stagehand-Munge header, bound to the request (docs/security.md)");
		_log_refusal(ac, peer, rq, -1, why);
		return 401;
	}
	/* munged checks the signature, expiry and replay; any failure is a refusal. */
	e = munge_decode(cred, NULL, &payload, &plen, &u, &g);
	if (e != EMUNGE_SUCCESS) {
		snprintf(why, whylen, "MUNGE credential refused: %s", munge_strerror(e));
		free(payload);
		_log_refusal(ac, peer, rq, -1, why);
		return 401;
	}
	rc = api_cred_payload(ac, payload, plen > 0 ? (size_t)plen : 0, rq,
			      (long long)time(NULL), why, whylen);
	free(payload);
	if (rc) {
		_log_refusal(ac, peer, rq, (int)u, why);
		return rc;
	}
	*uid = u;
	*gid = g;
	return 0;
}
