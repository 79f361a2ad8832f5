/* test_usercache.c - a uid's name and groups: as the databases say, kept, and refused when unknown. */
#include "config.h"

#include <grp.h>
#include <pwd.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "usercache.h"
#include "tests/tap.h"

/* A uid the passwd database does not know. */
static uid_t _unknown_uid(void)
{
	for (uid_t u = 3999999000u; u < 3999999100u; u++)
		if (!getpwuid(u))
			return u;
	return (uid_t)-1;
}

static int _same_groups(const char *user, gid_t gid, const gid_t *g, int n)
{
	gid_t want[USERCACHE_GROUPS];
	int nw = USERCACHE_GROUPS;

	if (getgrouplist(user, gid, want, &nw) < 0 || nw != n)
		return 0;
	return memcmp(want, g, (size_t)n * sizeof(gid_t)) == 0;
}

/* A user with two groups or more, for the too-little-room case; NULL if none. */
static const struct passwd *_user_with_groups(void)
{
	static struct passwd copy;
	static char name[256];
	struct passwd *pw;
	gid_t g[USERCACHE_GROUPS];
	int n;

	setpwent();
	while ((pw = getpwent())) {
		n = USERCACHE_GROUPS;
		if (getgrouplist(pw->pw_name, pw->pw_gid, g, &n) >= 0 && n >= 2 &&
		    strlen(pw->pw_name) < sizeof(name)) {
			copy = *pw;
			memcpy(name, pw->pw_name, strlen(pw->pw_name) + 1);  /* fits: checked above */
			copy.pw_name = name;
			endpwent();
			return &copy;
		}
	}
	endpwent();
	return NULL;
}

int main(void)
{
	char name[64] = "";
	gid_t g[USERCACHE_GROUPS], small[1];
	int n = USERCACHE_GROUPS;
	unsigned long before;
	uid_t nobody = _unknown_uid();
	const struct passwd *multi = _user_with_groups();
	struct passwd *root = getpwuid(0);

	if (!root) {
		tap_diag("no passwd entry for uid 0");
		return 77;
	}
	ok(usercache_name(0, name, sizeof(name)) == 0 && strcmp(name, root->pw_name) == 0,
	   "uid 0's name is the passwd database's (%s)", name);
	before = usercache_lookups();
	ok(usercache_name(0, name, sizeof(name)) == 0 && usercache_lookups() == before,
	   "asked again within a minute: kept, the database not asked");
	ok(usercache_name(0, name, 2) < 0, "a name that does not fit is refused");
	n = USERCACHE_GROUPS;
	ok(usercache_groups(0, 0, NULL, 0, g, &n) == 0 && _same_groups(root->pw_name, 0, g, n),
	   "uid 0's groups are getgrouplist's (%d)", n);
	before = usercache_lookups();
	n = USERCACHE_GROUPS;
	ok(usercache_groups(0, 0, name, sizeof(name), g, &n) == 0 &&
	   _same_groups(root->pw_name, 0, g, n) && usercache_lookups() == before,
	   "groups asked again: kept");
	n = USERCACHE_GROUPS;
	ok(usercache_groups(0, 4242, NULL, 0, g, &n) == 0 && usercache_lookups() == before + 1 &&
	   _same_groups(root->pw_name, 4242, g, n) && g[0] == 4242,
	   "another primary gid: asked again, and it comes first");
	if (nobody != (uid_t)-1) {
		name[0] = 0;
		n = USERCACHE_GROUPS;
		ok(usercache_name(nobody, name, sizeof(name)) < 0 && !name[0],
		   "an unknown uid has no name");
		before = usercache_lookups();
		ok(usercache_groups(nobody, 77, NULL, 0, g, &n) < 0 && n == 1 && g[0] == 77 &&
		   usercache_lookups() == before + 1,
		   "an unknown uid: its gid alone, and not kept (asked each time)");
	} else {
		tap_diag("skipped 2: no free uid found");
	}
	if (multi) {
		n = 1;
		ok(usercache_groups(multi->pw_uid, multi->pw_gid, NULL, 0, small, &n) == 0 &&
		   n == 1 && small[0] == multi->pw_gid,
		   "%s's groups do not fit in the room given: its gid alone", multi->pw_name);
		n = USERCACHE_GROUPS;
		ok(usercache_groups(multi->pw_uid, multi->pw_gid, NULL, 0, g, &n) == 0 &&
		   _same_groups(multi->pw_name, multi->pw_gid, g, n) && n >= 2,
		   "and all of them with room (%d)", n);
	} else {
		tap_diag("skipped 2: no user with two groups or more");
	}
	return tap_done();
}
