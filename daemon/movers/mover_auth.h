/*
 * mover_auth.h - who may report a shard's records: the mover job the daemon
 * launched for it, and nobody else (docs/admin-guide.md, "Who may report").
 *
 * A mover job runs as the request's owner, so the owner's MUNGE credential
 * alone says nothing about whether a record comes from the mover. Three
 * more things must hold for a record to be taken:
 *
 *   - the shard's token: HMAC-SHA256 under a secret key of the daemon's
 *     (MOVER_KEY_FILE beside the state database, root-only) of the request,
 *     the shard and the shard's attempt count. The daemon puts it in the
 *     mover job's environment at submit (never in its script, which the
 *     owner can read back from slurmctld); stagehand-mover takes it out of
 *     its environment, makes itself non-dumpable and sends it in the body
 *     of each POST, which the credential binds (common/credbind.h);
 *   - the credential came over TCP from the address of a node slurmctld
 *     gave the mover job (slurm/slurm_nodes.h, cached, looked up off the
 *     caller's thread);
 *   - the query's job id is the shard's current mover job (api_mover.c).
 *
 * Owns: the key (loaded or made once) and making and checking tokens in
 * constant time. Must never: log or return the key, or log a token.
 */
#ifndef STAGEHAND_MOVER_AUTH_H
#define STAGEHAND_MOVER_AUTH_H

#include <stddef.h>
#include <stdint.h>

#define MOVER_KEY_LEN 32
#define MOVER_TOKEN_HEX 64           /* hex digits of a token (no NUL) */
#define MOVER_TOKEN_ENV "STAGEHAND_MOVER_TOKEN"
#define MOVER_KEY_FILE "mover.key"

struct mover_auth;

/*
 * A checker whose key is read from key_path (exactly MOVER_KEY_LEN bytes,
 * a regular file of root's, mode 0600), made there when missing; key_path
 * NULL: a fresh random key for this run only. NULL with err (the path, the
 * failing call and errno). Free with mover_auth_free.
 */
struct mover_auth *mover_auth_new(const char *key_path, char *err, size_t errlen);
void mover_auth_free(struct mover_auth *a);

/*
 * The token of shard idx of request req for its attempt-th mover job into
 * out (NUL-terminated). 0 or -1.
 */
int mover_auth_token(const struct mover_auth *a, int64_t req, int idx, int attempt,
		     char out[MOVER_TOKEN_HEX + 1]);

/* 1 if given (may be NULL) is that token, compared in constant time; else 0. */
int mover_auth_token_ok(const struct mover_auth *a, int64_t req, int idx, int attempt,
			const char *given);

#endif /* STAGEHAND_MOVER_AUTH_H */
