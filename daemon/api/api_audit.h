/*
 * api_audit.h - GET /v1/audit: bytes and files moved per job, per user or per
 * file, from the audit trail (docs/api.md), for chargeback and for "where
 * did my data go".
 *
 * Owns: the query arguments (job, user, since, by, limit) and the JSON rows.
 * A caller who is not an admin sees only their own rows: asking for another
 * user is refused (403), and with no user given the caller's uid applies.
 *
 * Must never: take the caller's identity from the query, or write anything.
 */
#ifndef STAGEHAND_API_AUDIT_H
#define STAGEHAND_API_AUDIT_H

#include "api_private.h"

void api_audit(struct daemon *d, const struct api_caller *who, struct MHD_Connection *c,
	       struct api_reply *out);

#endif
