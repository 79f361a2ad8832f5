/*
 * api_cred.h - who a TCP caller is: the MUNGE credential of its
 * X-Stagehand-Munge header, bound to the request it came with
 * (common/credbind.h) and good for that one request (docs/security.md,
 * "Bound credentials").
 *
 * Owns: decoding the credential (munged checks its signature, expiry and
 * replay), checking its payload against the request as received (method,
 * target, whole body, time window), and a bounded cache of the digests of
 * the requests taken within the window, so that a request is refused the
 * second time even if munged, restarted, forgot it. Refusals are logged,
 * at most one line a second.
 *
 * Must never: be called before the whole body has arrived, answer for the
 * UNIX socket (identity there is the kernel's), log or keep a credential,
 * or block on anything but munged.
 */
#ifndef STAGEHAND_API_CRED_H
#define STAGEHAND_API_CRED_H

#include <stddef.h>
#include <sys/types.h>

#include "credbind.h"

struct api_cred;

/* A checker with an empty replay cache; NULL when out of memory. Free with api_cred_free. */
struct api_cred *api_cred_new(void);
void api_cred_free(struct api_cred *ac);

/*
 * Check cred (the header's value, NULL = none) for request rq, sent from
 * peer (an address for the log, may be NULL). Returns 0 with *uid and *gid
 * (MUNGE's word), or the HTTP status of the refusal with why filled: 401
 * when there is no credential or munged refuses it (invalid, expired,
 * replayed), 403 when it is valid but not for this request (no digest, a
 * malformed one, another request's, outside the time window, or a request
 * already taken).
 */
int api_cred_check(struct api_cred *ac, const char *cred, const struct credbind_req *rq,
		   const char *peer, uid_t *uid, gid_t *gid, char *why, size_t whylen);

/*
 * The payload half of api_cred_check, at time now (for the unit tests: no
 * munged). Returns 0, or 403 with why; a request taken is remembered.
 */
int api_cred_payload(struct api_cred *ac, const void *payload, size_t plen,
		     const struct credbind_req *rq, long long now, char *why, size_t whylen);

/* Cache figures, for tests and the log: entries dropped while still in their window. */
unsigned long api_cred_evicted(const struct api_cred *ac);

#endif /* STAGEHAND_API_CRED_H */
