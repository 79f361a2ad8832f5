/*
 * usercache.h - a uid's user name and groups, remembered for a minute.
 *
 * Owns a small process-wide table filled from the passwd and group databases
 * (getpwuid_r, getgrouplist). The name labels a request and names the
 * owner's directory below ArchiveRoot/ScratchRoots; the groups are the ones a
 * worker takes before it touches the owner's data. Must never answer for a
 * uid the databases do not know, and never keeps an entry longer than
 * USERCACHE_TTL seconds: a user taken out of a group loses it for new
 * workers within that time (sssd and nscd keep theirs far longer).
 */
#ifndef STAGEHAND_USERCACHE_H
#define STAGEHAND_USERCACHE_H

#include <stddef.h>
#include <sys/types.h>

#define USERCACHE_TTL 60             /* seconds an entry is reused */
#define USERCACHE_GROUPS 256         /* groups kept per entry; more: not kept */

/* uid's user name into name (len bytes). 0, or -1 when the passwd database
 * has no such uid or the name does not fit. Thread-safe. */
int usercache_name(uid_t uid, char *name, size_t len);

/* uid's supplementary groups with gid as the primary one, into groups (room
 * for *ngroups, at least 1; *ngroups set to the count), and its name as usercache_name
 * does when name is not NULL. -1 when the uid is unknown (or its name does not
 * fit). When it is unknown or its groups cannot be read or do not fit, groups
 * is {gid} alone and *ngroups 1. Thread-safe. */
int usercache_groups(uid_t uid, gid_t gid, char *name, size_t len, gid_t *groups, int *ngroups);

/* How many times the passwd database was asked (for tests and metrics). */
unsigned long usercache_lookups(void);

#endif
