/*
 * test_cred.c - daemon/api_cred.c without munged: a payload checked
 * against the request received, and the replay cache (a request taken once
 * is refused the second time; a full cache drops its oldest entries and
 * never refuses a request it has not seen).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_cred.h"
#include "tests/tap.h"

static const long long T0 = 1767225600;

static int _take(struct api_cred *ac, const struct credbind_req *rq, long long t,
		 long long now, char *why, size_t whylen, char *p)
{
	char err[256];

	if (credbind_payload(rq, t, p, CREDBIND_PAYLOAD_MAX, err, sizeof(err)) < 0)
		return -1;
	why[0] = '\0';
	return api_cred_payload(ac, p, strlen(p), rq, now, why, whylen);
}

static void _replay(struct api_cred *ac)
{
	static const char body[] = "{\"state\":\"COMPLETED\"}";
	const struct credbind_req rq = { "POST", "/v1/jobs/9/end", body, sizeof(body) - 1 };
	const struct credbind_req other = { "POST", "/v1/jobs/9/end", "{\"state\":\"FAILED\"}", 18 };
	char p[CREDBIND_PAYLOAD_MAX], p2[CREDBIND_PAYLOAD_MAX], why[512];

	ok(_take(ac, &rq, T0, T0, why, sizeof(why), p) == 0, "a bound request: taken (%s)", why);
	ok(api_cred_payload(ac, p, strlen(p), &rq, T0 + 1, why, sizeof(why)) == 403,
	   "the same request again: refused");
	contains(why, "already taken", "replay: says so");
	ok(api_cred_payload(ac, p, strlen(p), &rq, T0 + CREDBIND_WINDOW_S, why, sizeof(why)) == 403,
	   "again at the window's end: still refused");
	contains(why, "already taken", "still as a replay");
	ok(api_cred_payload(ac, p, strlen(p), &rq, T0 + CREDBIND_WINDOW_S + 1, why, sizeof(why)) == 403,
	   "after the window: refused");
	contains(why, "outside the", "by the window");
	ok(_take(ac, &rq, T0, T0 + 2, why, sizeof(why), p2) == 0,
	   "the same request with a new credential (a new nonce): taken");
	ok(api_cred_payload(ac, p2, strlen(p2), &other, T0 + 3, why, sizeof(why)) == 403,
	   "that payload with another body: refused");
	contains(why, "made for another request", "as a mismatch");
	ok(api_cred_payload(ac, NULL, 0, &rq, T0 + 3, why, sizeof(why)) == 403,
	   "an old client's empty payload: refused");
	contains(why, "install stagehand", "with the upgrade hint");
}

/* 40,000 distinct requests in one window: more than the cache holds. */
static void _full(struct api_cred *ac)
{
	char p[CREDBIND_PAYLOAD_MAX], last[CREDBIND_PAYLOAD_MAX], why[512], target[64];
	struct credbind_req rq = { "GET", target, NULL, 0 };
	int refused = 0;

	for (int i = 0; i < 40000; i++) {
		snprintf(target, sizeof(target), "/v1/requests/%d", i);
		if (_take(ac, &rq, T0 + 10, T0 + 10, why, sizeof(why), p) != 0)
			refused++;
	}
	memcpy(last, p, sizeof(p));
	ok(refused == 0, "40,000 different requests: none refused as a replay (%d)", refused);
	ok(api_cred_evicted(ac) > 0, "the cache dropped its oldest entries (%lu)",
	   api_cred_evicted(ac));
	ok(api_cred_payload(ac, last, strlen(last), &rq, T0 + 11, why, sizeof(why)) == 403,
	   "the newest request again: refused");
	contains(why, "already taken", "as a replay");
}

int main(void)
{
	struct api_cred *ac = api_cred_new();

	if (!tap_ok(ac != NULL, "checker made"))
		return tap_done();
	_replay(ac);
	_full(ac);
	api_cred_free(ac);
	return tap_done();
}
