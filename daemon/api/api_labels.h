/*
 * api_labels.h - POST /v1/labels/verify (docs/api.md, "Label verification").
 *
 * Owns: judging stagehand labels that a client read from a directory tree
 * against the daemon's records (job plans, requests, audit trail), so a
 * forged or stale label can be told from one the system wrote.
 *
 * Must never: touch the paths it is given (the client read the labels; the
 * daemon only compares them with its records), or tell a user anything
 * about another user's job.
 */
#ifndef STAGEHAND_API_LABELS_H
#define STAGEHAND_API_LABELS_H

#include <jansson.h>

#include "api_private.h"

/* Labels per request; a client sends bigger trees in several requests. */
#define API_LABELS_MAX 1000

/*
 * May who ask for a label request with these options (the request's JSON
 * options text, or NULL)? Users may write only the labels docs/api.md gives
 * them, "archive" (the default) and "skipped"; "exempt" and "purge" say what
 * a #DATA line or the daemon's cleanup decided, so only admins (root,
 * AdminUsers, AdminGroups) may ask for them. 0 allowed (or not a label
 * request), -1 with a 403 and the reason in out.
 */
int api_labels_policy_allowed(const struct api_caller *who, const char *action,
			      const char *options, struct api_reply *out);

/* Called from api_route with conf_lock held (read). body is borrowed. */
void api_labels_verify(struct daemon *d, const struct api_caller *who, json_t *body,
		       struct api_reply *out);

#endif /* STAGEHAND_API_LABELS_H */
