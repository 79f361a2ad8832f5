/* spawn_attr.c - see spawn_attr.h. */
#include "config.h"

#include <signal.h>
#include <spawn.h>

#include "spawn_attr.h"

int spawn_attr_init(posix_spawnattr_t *at, short flags)
{
	sigset_t def, none;
	int rc;

	rc = posix_spawnattr_init(at);
	if (rc != 0)
		return rc;
	sigemptyset(&def);
	sigaddset(&def, SIGPIPE);
	sigemptyset(&none);
	rc = posix_spawnattr_setsigdefault(at, &def);
	if (rc == 0)
		rc = posix_spawnattr_setsigmask(at, &none);
	if (rc == 0)
		rc = posix_spawnattr_setflags(at, (short)(flags | POSIX_SPAWN_SETSIGDEF |
							  POSIX_SPAWN_SETSIGMASK));
	if (rc != 0)
		posix_spawnattr_destroy(at);
	return rc;
}
