/* usercache.c - see usercache.h.
 *
 * Why: every request created one a call, and every worker started, looked
 * its owner up again. With "files" in nsswitch.conf that is a stat of
 * nsswitch.conf, an open, a read and a parse of /etc/passwd and /etc/group,
 * and with systemd in it a try of its user database socket; it was a fifth
 * of a request's cost in the API's thread and a ninth of the daemon's CPU in
 * the main loop (docs/scaling.md). With sssd or LDAP it is a round trip.
 * nscd or sssd's own cache may not run on a storage server.
 */
#include "config.h"

#include <grp.h>
#include <pthread.h>
#include <pwd.h>
#include <string.h>
#include <time.h>

#include "monoclock.h"
#include "usercache.h"

#define SLOTS 64                      /* owners seen within a minute */

struct _entry {
	uid_t uid;
	time_t at;                    /* when the name was read; 0: empty */
	char name[64];
	gid_t gid;                    /* the primary gid groups were read for */
	time_t groups_at;             /* when they were; 0: not read */
	int ngroups;
	gid_t groups[USERCACHE_GROUPS];
};

static struct _entry _slot[SLOTS];
static unsigned long _lookups;        /* passwd lookups made, under _lock */
static pthread_mutex_t _lock = PTHREAD_MUTEX_INITIALIZER;

unsigned long usercache_lookups(void)
{
	unsigned long n;

	pthread_mutex_lock(&_lock);
	n = _lookups;
	pthread_mutex_unlock(&_lock);
	return n;
}

static time_t _now(void)
{
	return (time_t)(mono_ns() / 1000000000) + 1;	/* never 0, the empty mark */
}

static int _fresh(time_t at, time_t now)
{
	return at && now - at < USERCACHE_TTL;
}

/* The entry of uid (fresh or not), else the oldest; under _lock. */
static struct _entry *_find(uid_t uid)
{
	struct _entry *old = &_slot[0];

	for (struct _entry *e = _slot; e < _slot + SLOTS; e++) {
		if (e->at && e->uid == uid)
			return e;
		if (e->at < old->at)
			old = e;
	}
	return old;
}

static int _copy(char *out, size_t len, const char *name)
{
	size_t n = strlen(name);

	if (!out)
		return 0;
	if (n >= len)
		return -1;
	memcpy(out, name, n + 1);
	return 0;
}

int usercache_groups(uid_t uid, gid_t gid, char *name, size_t len, gid_t *groups, int *ngroups)
{
	struct passwd pw, *pwp = NULL;
	char buf[4096];
	gid_t got[USERCACHE_GROUPS];
	int n = USERCACHE_GROUPS, room = *ngroups, rc;
	time_t now = _now();
	struct _entry *e;

	pthread_mutex_lock(&_lock);
	e = _find(uid);
	if (e->at && e->uid == uid && _fresh(e->at, now) &&
	    (!groups || (e->gid == gid && _fresh(e->groups_at, now) && e->ngroups <= room))) {
		rc = _copy(name, len, e->name);
		if (groups) {
			memcpy(groups, e->groups, (size_t)e->ngroups * sizeof(gid_t));
			*ngroups = e->ngroups;
		}
		pthread_mutex_unlock(&_lock);
		return rc;
	}
	_lookups++;
	pthread_mutex_unlock(&_lock);
	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &pwp) != 0 || !pwp)
		goto unknown;
	/* More groups than an entry keeps, or than the caller has room for: its
	   gid alone, as getgrouplist's own shortfall gave, and nothing kept. */
	if (groups && (getgrouplist(pwp->pw_name, gid, got, &n) < 0 || n > room)) {
		groups[0] = gid;
		*ngroups = 1;
		return _copy(name, len, pwp->pw_name);
	}
	if (strlen(pwp->pw_name) < sizeof(e->name)) {
		pthread_mutex_lock(&_lock);
		e = _find(uid);
		if (!(e->at && e->uid == uid))
			memset(e, 0, sizeof(*e));
		e->uid = uid;
		e->at = now;
		memcpy(e->name, pwp->pw_name, strlen(pwp->pw_name) + 1);
		if (groups) {
			e->gid = gid;
			e->groups_at = now;
			e->ngroups = n;
			memcpy(e->groups, got, (size_t)n * sizeof(gid_t));
		}
		pthread_mutex_unlock(&_lock);
	}
	if (groups) {
		memcpy(groups, got, (size_t)n * sizeof(gid_t));
		*ngroups = n;
	}
	return _copy(name, len, pwp->pw_name);
unknown:
	if (groups) {
		groups[0] = gid;
		*ngroups = 1;
	}
	return -1;
}

int usercache_name(uid_t uid, char *name, size_t len)
{
	int n = 0;

	return usercache_groups(uid, 0, name, len, NULL, &n);
}
