/*
 * credbind.h - bound credentials: the MUNGE payload that ties a TCP
 * request's credential to that one request (docs/security.md, "Bound
 * credentials"). The client (common/dclient.c) makes the payload; the
 * daemon (daemon/api/api_cred.c) checks it against what it received. Both use
 * the functions below, so the canonical form exists once.
 *
 * The canonical form of a request is these fields, each followed by one
 * "\n" (0x0a), the body last and followed by nothing:
 *
 *   stagehand-req-v1     the version tag (CREDBIND_TAG)
 *   METHOD               the request method as sent, e.g. POST
 *   TARGET               the request target as sent on the request line:
 *                        the path and, after a '?', the query, byte for
 *                        byte (no percent decoding, no normalisation)
 *   TIME                 seconds since the Epoch (UTC), decimal, no sign,
 *                        no leading zero
 *   NONCE                32 lower-case hex digits (16 random bytes)
 *   BODYLEN              the body's length in bytes, decimal
 *   BODY                 the body, byte for byte (empty when there is none)
 *
 * The digest is SHA-256 (OpenSSL EVP) of that text. The MUNGE payload is
 * the ASCII text
 *
 *   stagehand-req-v1 TIME NONCE DIGEST
 *
 * (single spaces, DIGEST in 64 lower-case hex digits, no NUL, no newline).
 * METHOD and TARGET can hold no "\n" (an HTTP request line cannot), and
 * BODY is last and counted, so two different requests never share a
 * canonical form. MUNGE signs the payload with the sender's uid and gid,
 * so nobody but the sender can make a payload for another request.
 *
 * Owns: the canonical form, the payload's syntax and the time window. Must
 * never: accept a payload it did not fully parse, compare digests in
 * variable time, allocate, or keep state (the replay cache is the
 * daemon's).
 */
#ifndef STAGEHAND_CREDBIND_H
#define STAGEHAND_CREDBIND_H

#include <stddef.h>
#include <time.h>

/* Names this form; a new form gets a new tag and the daemon says which it wants. */
#define CREDBIND_TAG "stagehand-req-v1"

/*
 * The largest distance, in seconds and either way, between a payload's
 * TIME and the daemon's clock: MUNGE's default credential TTL (300 s),
 * which also bounds how long munged remembers a credential for replay.
 */
#define CREDBIND_WINDOW_S 300

#define CREDBIND_NONCE_HEX 32
#define CREDBIND_DIGEST_LEN 32
/* "stagehand-req-v1 " + 20 digits + " " + 32 + " " + 64 + NUL, rounded up. */
#define CREDBIND_PAYLOAD_MAX 160

/* The parts of a request a credential is bound to. All borrowed. */
struct credbind_req {
	const char *method;     /* "GET", "POST", ... */
	const char *target;     /* path[?query] as on the request line */
	const char *body;       /* may be NULL when body_len is 0 */
	size_t body_len;
};

/* What credbind_check found. */
enum credbind_result {
	CREDBIND_OK = 0,
	CREDBIND_EMPTY,         /* no payload: a client older than bound credentials */
	CREDBIND_MALFORMED,     /* a payload, but not "stagehand-req-v1 TIME NONCE DIGEST" */
	CREDBIND_MISMATCH,      /* well formed, but made for another request */
	CREDBIND_STALE,         /* TIME outside CREDBIND_WINDOW_S of the daemon's clock */
};

/*
 * The digest of rq's canonical form at time t with nonce (CREDBIND_NONCE_HEX
 * lower-case hex digits) into out. Returns 0, or -1 with err when a field
 * cannot be put in the form (a "\n" in method or target, no method or
 * target, a bad nonce, t < 0) or libcrypto fails.
 */
int credbind_digest(const struct credbind_req *rq, long long t, const char *nonce,
		    unsigned char out[CREDBIND_DIGEST_LEN], char *err, size_t errlen);

/*
 * Client: the payload for rq at time t, with a fresh random nonce, into out
 * (NUL-terminated; at least CREDBIND_PAYLOAD_MAX bytes). Returns its length
 * (without the NUL), or -1 with err.
 */
int credbind_payload(const struct credbind_req *rq, long long t, char *out, size_t outlen,
		     char *err, size_t errlen);

/*
 * Daemon: does payload (plen bytes, not NUL-terminated, as munge_decode
 * returns it; NULL or 0 = none) bind rq, at the daemon's time now? On
 * CREDBIND_OK, *t holds the payload's TIME and digest (if not NULL) its
 * digest, which names this request for a replay cache. Otherwise err says
 * why in words an admin can act on.
 */
enum credbind_result credbind_check(const void *payload, size_t plen,
				    const struct credbind_req *rq, long long now,
				    long long *t, unsigned char digest[CREDBIND_DIGEST_LEN],
				    char *err, size_t errlen);

#endif /* STAGEHAND_CREDBIND_H */
