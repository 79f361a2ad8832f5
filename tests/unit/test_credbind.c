/*
 * test_credbind.c - common/credbind.c, the bound credential's canonical form
 * and its check: the digest against tests/vectors/credbind/ (worked out by
 * hand from the form docs/security.md gives), and a payload made for one
 * request refused for any other: each field changed in turn, a malformed
 * payload, an empty one (an old client), a time outside the window.
 */
#include "config.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "credbind.h"
#include "tests/tap.h"

static void _hexs(const unsigned char *b, size_t n, char *out)
{
	static const char h[] = "0123456789abcdef";

	for (size_t i = 0; i < n; i++) {
		out[2 * i] = h[b[i] >> 4];
		out[2 * i + 1] = h[b[i] & 15];
	}
	out[2 * n] = '\0';
}

static int _is_json(const struct dirent *d)
{
	size_t n = strlen(d->d_name);

	return n > 5 && !strcmp(d->d_name + n - 5, ".json");
}

/* Every .json of tests/vectors/credbind: the digest and the payload's check. */
static void _vectors(const char *dir)
{
	struct dirent **list;
	char path[4400], err[512] = "", hex[2 * CREDBIND_DIGEST_LEN + 1];
	int n = scandir(dir, &list, _is_json, alphasort);

	ok(n >= 4, "found %d bound-credential vectors in %s", n, dir);
	for (int i = 0; i < n; i++) {
		json_error_t je;
		unsigned char d[CREDBIND_DIGEST_LEN], d2[CREDBIND_DIGEST_LEN];
		long long t = 0;

		snprintf(path, sizeof(path), "%s/%s", dir, list[i]->d_name);
		json_t *v = json_load_file(path, 0, &je);
		const char *body = json_string_value(json_object_get(v, "body"));
		struct credbind_req rq = {
			.method = json_string_value(json_object_get(v, "method")),
			.target = json_string_value(json_object_get(v, "target")),
			.body = body, .body_len = body ? strlen(body) : 0,
		};
		long long vt = json_integer_value(json_object_get(v, "time"));
		const char *nonce = json_string_value(json_object_get(v, "nonce"));
		const char *want = json_string_value(json_object_get(v, "digest"));
		const char *payload = json_string_value(json_object_get(v, "payload"));

		if (!tap_ok(v && rq.method && rq.target && nonce && want && payload,
			    "%s: readable", list[i]->d_name)) {
			json_decref(v);
			free(list[i]);
			continue;
		}
		ok(credbind_digest(&rq, vt, nonce, d, err, sizeof(err)) == 0, "%s: digest made",
		   list[i]->d_name);
		_hexs(d, sizeof(d), hex);
		is_str(hex, want, "%s: digest as worked out by hand", list[i]->d_name);
		ok(credbind_check(payload, strlen(payload), &rq, vt + 10, &t, d2, err,
				  sizeof(err)) == CREDBIND_OK && t == vt &&
		   memcmp(d, d2, sizeof(d)) == 0, "%s: its payload binds its request (%s)",
		   list[i]->d_name, err);
		json_decref(v);
		free(list[i]);
	}
	free(list);
}

static enum credbind_result _check(const char *payload, const struct credbind_req *rq,
				   long long now, char *err, size_t errlen)
{
	long long t;

	err[0] = '\0';
	return credbind_check(payload, payload ? strlen(payload) : 0, rq, now, &t, NULL, err,
			      errlen);
}

/* One request's payload against each field changed in turn. */
static void _mismatch(void)
{
	static const char body[] = "{\"state\":\"COMPLETED\",\"exit_code\":0}";
	const struct credbind_req rq = { "POST", "/v1/jobs/77/end?x=1", body, sizeof(body) - 1 };
	char p[CREDBIND_PAYLOAD_MAX], p2[CREDBIND_PAYLOAD_MAX], err[512] = "";
	long long now = 1767225600;
	char other_body[sizeof(body)];

	ok(credbind_payload(&rq, now, p, sizeof(p), err, sizeof(err)) > 0, "payload made (%s)", err);
	ok(credbind_payload(&rq, now, p2, sizeof(p2), err, sizeof(err)) > 0 && strcmp(p, p2) != 0,
	   "two payloads for the same request differ (a fresh nonce each)");
	ok(_check(p, &rq, now, err, sizeof(err)) == CREDBIND_OK, "its own request: taken");

	struct credbind_req x = rq;
	x.method = "PUT";
	ok(_check(p, &x, now, err, sizeof(err)) == CREDBIND_MISMATCH, "another method: refused");
	contains(err, "made for another request", "mismatch message says so");
	x = rq;
	x.target = "/v1/jobs/78/end?x=1";
	ok(_check(p, &x, now, err, sizeof(err)) == CREDBIND_MISMATCH, "another path: refused");
	x.target = "/v1/jobs/77/end?x=2";
	ok(_check(p, &x, now, err, sizeof(err)) == CREDBIND_MISMATCH, "another query: refused");
	x.target = "/v1/jobs/77/end";
	ok(_check(p, &x, now, err, sizeof(err)) == CREDBIND_MISMATCH, "query dropped: refused");
	x.target = "/v1/jobs/77/end?x=1&x=1";
	ok(_check(p, &x, now, err, sizeof(err)) == CREDBIND_MISMATCH, "query added to: refused");
	x.target = "/v1/jobs/%37%37/end?x=1";
	ok(_check(p, &x, now, err, sizeof(err)) == CREDBIND_MISMATCH,
	   "the same path percent-encoded: refused (the target is bound as sent)");
	x = rq;
	memcpy(other_body, body, sizeof(body));
	other_body[10] = 'X';
	x.body = other_body;
	ok(_check(p, &x, now, err, sizeof(err)) == CREDBIND_MISMATCH, "one body byte changed: refused");
	x.body_len = rq.body_len - 1;
	x.body = body;
	ok(_check(p, &x, now, err, sizeof(err)) == CREDBIND_MISMATCH, "body cut short: refused");
	x.body_len = 0;
	x.body = NULL;
	ok(_check(p, &x, now, err, sizeof(err)) == CREDBIND_MISMATCH, "body dropped: refused");

	/* The payload's own fields: TIME, NONCE, DIGEST. */
	char q[CREDBIND_PAYLOAD_MAX];
	size_t tagl = strlen(CREDBIND_TAG " ");

	snprintf(q, sizeof(q), "%s", p);
	q[tagl + 9] = q[tagl + 9] == '1' ? '2' : '1';
	ok(_check(q, &rq, now, err, sizeof(err)) == CREDBIND_MISMATCH,
	   "payload's time changed: refused");
	snprintf(q, sizeof(q), "%s", p);
	q[tagl + 11] = q[tagl + 11] == 'a' ? 'b' : 'a';
	ok(_check(q, &rq, now, err, sizeof(err)) == CREDBIND_MISMATCH,
	   "payload's nonce changed: refused");
	snprintf(q, sizeof(q), "%s", p);
	q[strlen(q) - 1] = q[strlen(q) - 1] == '0' ? '1' : '0';
	ok(_check(q, &rq, now, err, sizeof(err)) == CREDBIND_MISMATCH,
	   "payload's digest changed: refused");
}

static void _malformed(void)
{
	const struct credbind_req rq = { "GET", "/v1/health", NULL, 0 };
	char p[CREDBIND_PAYLOAD_MAX], q[CREDBIND_PAYLOAD_MAX + 8], err[512];
	long long now = 1767225600, t;
	size_t tagl = strlen(CREDBIND_TAG " ");

	ok(_check(NULL, &rq, now, err, sizeof(err)) == CREDBIND_EMPTY, "no payload: refused");
	contains(err, "older than this stagehandd", "empty: says the client is old");
	contains(err, "on every node", "empty: says where to upgrade");
	ok(credbind_check("", 0, &rq, now, &t, NULL, err, sizeof(err)) == CREDBIND_EMPTY,
	   "empty payload: refused");
	ok(_check("stagehand-doctor", &rq, now, err, sizeof(err)) == CREDBIND_MALFORMED,
	   "another program's payload: refused");
	contains(err, "not a request digest", "malformed: says so");
	credbind_payload(&rq, now, p, sizeof(p), err, sizeof(err));
	ok(_check(p, &rq, now, err, sizeof(err)) == CREDBIND_OK, "well formed: taken");

	snprintf(q, sizeof(q), "%s", p);
	q[tagl - 2] = '2';	/* stagehand-req-v2 */
	ok(_check(q, &rq, now, err, sizeof(err)) == CREDBIND_MALFORMED, "another tag: refused");
	snprintf(q, sizeof(q), "%s ", p);
	ok(_check(q, &rq, now, err, sizeof(err)) == CREDBIND_MALFORMED, "trailing space: refused");
	ok(credbind_check(p, strlen(p) + 1, &rq, now, &t, NULL, err, sizeof(err)) ==
	   CREDBIND_MALFORMED, "trailing NUL: refused");
	ok(credbind_check(p, strlen(p) - 1, &rq, now, &t, NULL, err, sizeof(err)) ==
	   CREDBIND_MALFORMED, "one byte short: refused");
	snprintf(q, sizeof(q), "%.*s0%s", (int)tagl, p, p + tagl);
	ok(_check(q, &rq, now, err, sizeof(err)) == CREDBIND_MALFORMED,
	   "time with a leading zero: refused");
	snprintf(q, sizeof(q), "%.*s+%s", (int)tagl, p, p + tagl + 1);
	ok(_check(q, &rq, now, err, sizeof(err)) == CREDBIND_MALFORMED, "time with a sign: refused");
	snprintf(q, sizeof(q), "%s", p);
	for (char *c = q + strlen(q) - 64; *c; c++)
		if (*c >= 'a' && *c <= 'f')
			*c = (char)(*c - 'a' + 'A');
	ok(strcmp(q, p) == 0 || _check(q, &rq, now, err, sizeof(err)) == CREDBIND_MALFORMED,
	   "upper-case digest: refused");
	snprintf(q, sizeof(q), "%s", p);
	q[tagl + 10] = '-';	/* the space between TIME and NONCE */
	ok(_check(q, &rq, now, err, sizeof(err)) == CREDBIND_MALFORMED,
	   "fields not separated by spaces: refused");
}

static void _window(void)
{
	const struct credbind_req rq = { "POST", "/v1/jobs/5/end", "{}", 2 };
	char p[CREDBIND_PAYLOAD_MAX], err[512];
	long long t0 = 1767225600;

	credbind_payload(&rq, t0, p, sizeof(p), err, sizeof(err));
	ok(_check(p, &rq, t0 + CREDBIND_WINDOW_S, err, sizeof(err)) == CREDBIND_OK,
	   "at the window's end (%d s later): taken", CREDBIND_WINDOW_S);
	ok(_check(p, &rq, t0 + CREDBIND_WINDOW_S + 1, err, sizeof(err)) == CREDBIND_STALE,
	   "one second past the window: refused");
	contains(err, "behind the daemon's clock", "stale: says which way");
	contains(err, "NTP", "stale: says what to check");
	ok(_check(p, &rq, t0 - CREDBIND_WINDOW_S, err, sizeof(err)) == CREDBIND_OK,
	   "sender's clock %d s ahead: taken", CREDBIND_WINDOW_S);
	ok(_check(p, &rq, t0 - CREDBIND_WINDOW_S - 1, err, sizeof(err)) == CREDBIND_STALE,
	   "sender's clock further ahead: refused");
	contains(err, "ahead of the daemon's clock", "future: says which way");
}

static void _digest_args(void)
{
	unsigned char d[CREDBIND_DIGEST_LEN];
	char err[256];
	const char *nonce = "00112233445566778899aabbccddeeff";
	struct credbind_req rq = { "GET", "/v1/health\nX: y", NULL, 0 };

	ok(credbind_digest(&rq, 1, nonce, d, err, sizeof(err)) < 0, "newline in the target: no digest");
	rq.target = "/v1/health";
	rq.method = "GET\n";
	ok(credbind_digest(&rq, 1, nonce, d, err, sizeof(err)) < 0, "newline in the method: no digest");
	rq.method = "GET";
	ok(credbind_digest(&rq, 1, "00112233445566778899AABBCCDDEEFF", d, err, sizeof(err)) < 0,
	   "upper-case nonce: no digest");
	ok(credbind_digest(&rq, -1, nonce, d, err, sizeof(err)) < 0, "negative time: no digest");
	rq.body_len = 3;
	ok(credbind_digest(&rq, 1, nonce, d, err, sizeof(err)) < 0, "a length without a body: no digest");
}

int main(int argc, char **argv)
{
	const char *vec = argc > 1 ? argv[1] : getenv("STAGEHAND_VECTORS");
	char dir[4096];

	snprintf(dir, sizeof(dir), "%s/credbind", vec ? vec : "tests/vectors");
	_vectors(dir);
	_mismatch();
	_malformed();
	_window();
	_digest_args();
	return tap_done();
}
