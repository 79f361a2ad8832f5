/*
 * urlredact.h - the query of every URL in a text, hidden: "?..." becomes
 * "?<redacted>".
 *
 * A pre-signed URL carries its secret in the query (X-Amz-Signature=,
 * sig=, token=). The transfer needs the whole URL, but nothing that shows
 * or keeps it for people does: the daemon's log, the API's listings and
 * `stagehand status`, the job's status text in admin_comment (which other
 * users may read) and NotifyCommand's arguments and environment all go
 * through this. A URL is "SCHEME://" and what follows up to a blank, a
 * quote, '<' or '>'; its query runs from its first '?' to '#' or the URL's
 * end. A '?' outside a URL (a local file name) is kept.
 *
 * Owns: that rule. Must never: allocate but in url_redact_dup, or fail to
 * terminate out.
 */
#ifndef STAGEHAND_URLREDACT_H
#define STAGEHAND_URLREDACT_H

#include <stddef.h>

#define URL_REDACTED "?<redacted>"

/*
 * in, redacted, into out (outlen bytes, always NUL-terminated when outlen
 * > 0; a text cut short is cut, never left with part of a query). Returns
 * the length the whole result needs, as snprintf does.
 */
size_t url_redact(const char *in, char *out, size_t outlen);

/* A new string (the caller frees it): in redacted; NULL for NULL in or no memory. */
char *url_redact_dup(const char *in);

/* 1 when in holds a URL with a query (something to redact), else 0. */
int url_has_query(const char *in);

#endif /* STAGEHAND_URLREDACT_H */
