/*
 * spawn_attr.h - the attributes every program the daemon starts gets
 * (NotifyCommand, mmpmon for the Spectrum Scale probe).
 *
 * Owns: one answer to "what does a child inherit of the daemon's signal
 * state": the daemon ignores SIGPIPE and may block signals in its threads,
 * and neither may leak into a site's program, which would then never see a
 * closed pipe or a signal it expects.
 * Must never: start anything itself, or change the daemon's own signal state.
 */
#ifndef STAGEHAND_SPAWN_ATTR_H
#define STAGEHAND_SPAWN_ATTR_H

#include <spawn.h>

/*
 * Initialise at for posix_spawn: SIGPIPE back to its default action, no
 * signal blocked, plus flags (e.g. POSIX_SPAWN_SETPGROUP, with the group
 * set by the caller). The caller destroys at (posix_spawnattr_destroy).
 * 0, or the error posix_spawnattr_* returned.
 */
int spawn_attr_init(posix_spawnattr_t *at, short flags);

#endif /* STAGEHAND_SPAWN_ATTR_H */
