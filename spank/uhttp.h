/*
 * uhttp.h - a minimal HTTP/1.1 client over a UNIX socket.
 *
 * Owns: one request/response exchange with stagehandd's local socket under
 * a hard deadline (connect, write and read all share it; poll() waits).
 * Why not libcurl: this runs inside slurmstepd, where a small, fully
 * bounded client with no global state, no threads and no DNS is easier to
 * trust than a general library (see docs/spank.md).
 * Must never: block past the deadline, read more than UHTTP_MAX_BODY bytes,
 * raise SIGPIPE, or keep a descriptor open after returning.
 */
#ifndef STAGEHAND_UHTTP_H
#define STAGEHAND_UHTTP_H

#include <stddef.h>

#define UHTTP_MAX_BODY (256u * 1024u)

struct uhttp_resp {
	int status;    /* HTTP status code, e.g. 200 */
	char *body;    /* NUL-terminated body; owned by the caller: uhttp_resp_free */
	size_t len;    /* bytes in body */
};

/* Why a request failed (uhttp_request's return value when < 0). */
enum uhttp_fail {
	UHTTP_ERR_CONNECT = -1,  /* no daemon: socket missing or refused */
	UHTTP_ERR_TIMEOUT = -2,  /* deadline passed */
	UHTTP_ERR_IO = -3,       /* connection broke, or bad response */
};

/*
 * Send method path (body may be NULL; it is sent as application/json) to
 * the socket at sockpath and read the whole response within timeout_ms.
 * Returns 0 with resp filled (any status), or a uhttp_fail with a message
 * in err. resp is zeroed first and is empty on failure.
 */
int uhttp_request(const char *sockpath, const char *method, const char *path,
		  const char *body, int timeout_ms, struct uhttp_resp *resp,
		  char *err, size_t errlen);

void uhttp_resp_free(struct uhttp_resp *resp);

/* Milliseconds on a monotonic clock. */
long long uhttp_now_ms(void);

#endif /* STAGEHAND_UHTTP_H */
