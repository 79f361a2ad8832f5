/*
 * api_mover.h - the endpoints stagehand-mover calls (docs/api.md, "Mover
 * jobs"): fetch a shard, report records. Routed from api_handlers.c.
 *
 * Owns: checking that the caller is the request's owner (or root) and that
 * the shard is held by the caller's mover job (a mover whose shard went to
 * another job is told to stop with 409); for records, that they come from
 * that mover job itself: over TCP, from its node, as its uid, with the
 * shard's token (movers/mover_auth.h; anything else 403, logged); and
 * turning reported records into queue changes, each as a worker's record
 * would be. A file recorded here is not yet verified for the request: the
 * daemon reads it back before the final pass (movers/mover_verify.h).
 *
 * Must never: touch user files, or take a record for a path that is not a
 * clean relative path.
 */
#ifndef STAGEHAND_API_MOVER_H
#define STAGEHAND_API_MOVER_H

#include "api_private.h"

/* seg: "v1" "requests" ID "shards" IDX ["records"]; nseg 5 or 6. */
void api_mover_route(struct daemon *d, const struct api_caller *who, struct MHD_Connection *c,
		     const char *method, char **seg, int nseg, json_t *body, struct api_reply *out);

#endif /* STAGEHAND_API_MOVER_H */
