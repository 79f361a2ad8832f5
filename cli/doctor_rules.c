/*
 * doctor_rules.c - the doctor's pure parts (doctor.h): which checks each
 * role runs, and the small decisions that need no host to make (a uid in
 * TrustedUids, the Lua release a Slurm plugin loads, two paths naming the
 * same directory). tests/unit/test_doctor.c tries them all.
 *
 * Must never: touch a file, the network or the environment.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "doctor.h"

/* One row per role: its name (what --role takes and --json prints) and the
   checks it runs. DOCTOR_ROLE_DEFAULT is what the doctor ran before roles. */
static const struct {
	const char *name;
	unsigned checks;
} _roles[] = {
	[DOCTOR_ROLE_DEFAULT] = { "default", DC_CONFIG | DC_SLURM | DC_PLUGSTACK | DC_DAEMON |
				  DC_MUNGE | DC_XATTR | DC_SCRATCH | DC_LUA },
	[DOCTOR_ROLE_CONTROLLER] = { "controller", DC_CONFIG | DC_SLURM | DC_LUA_VERSION |
				     DC_LUA_MODULES | DC_LUA | DC_TRUSTED | DC_CLIENT | DC_MUNGE },
	[DOCTOR_ROLE_DAEMON] = { "daemon", DC_CONFIG | DC_STAGEHANDD | DC_STATE | DC_LISTEN |
				 DC_MUNGE | DC_XATTR | DC_SCRATCH | DC_ARCHIVE },
	[DOCTOR_ROLE_NODE] = { "node", DC_CONFIG | DC_SLURM | DC_PLUGSTACK | DC_DAEMON |
			       DC_CLIENT | DC_MUNGE | DC_XATTR | DC_SCRATCH },
	[DOCTOR_ROLE_LOGIN] = { "login", DC_CONFIG | DC_CLI | DC_CLIENT | DC_MUNGE | DC_SBATCH },
};

#define NROLES ((int)(sizeof(_roles) / sizeof(_roles[0])))

int doctor_role_parse(const char *name)
{
	for (int i = 1; i < NROLES; i++)
		if (strcmp(name, _roles[i].name) == 0)
			return i;
	return -1;
}

const char *doctor_role_name(enum doctor_role role)
{
	return (int)role >= 0 && (int)role < NROLES ? _roles[role].name : "?";
}

const char *doctor_role_list(void)
{
	return "controller, daemon, node, login";
}

unsigned doctor_role_checks(enum doctor_role role)
{
	return (int)role >= 0 && (int)role < NROLES ? _roles[role].checks : 0;
}

int doctor_uid_listed(unsigned long uid, char *const *list)
{
	for (; list && *list; list++) {
		char *end;
		unsigned long v = strtoul(*list, &end, 10);

		if (end != *list && *end == '\0' && v == uid)
			return 1;
	}
	return 0;
}

/* "MAJ.MIN" starting at p (at most n bytes; "5.1.5" gives "5.1"), into ver;
   1 when found. */
static int _release_at(const char *p, size_t n, char *ver, size_t verlen)
{
	size_t i = 0;

	while (i < n && p[i] >= '0' && p[i] <= '9')
		i++;
	if (i == 0 || i + 1 >= n || p[i] != '.' || p[i + 1] < '0' || p[i + 1] > '9')
		return 0;
	i += 2;
	while (i < n && p[i] >= '0' && p[i] <= '9')
		i++;
	if (i + 1 > verlen)
		return 0;
	memcpy(ver, p, i);
	ver[i] = '\0';
	return 1;
}

int doctor_lua_linked(const char *buf, size_t len, char *ver, size_t verlen)
{
	static const char lib[] = "liblua";
	const char *p = buf, *end = buf + len;

	while ((p = memmem(p, (size_t)(end - p), lib, sizeof(lib) - 1)) != NULL) {
		p += sizeof(lib) - 1;
		if (p < end && *p == '-')	/* liblua-5.1.so */
			p++;
		if (_release_at(p, (size_t)(end - p), ver, verlen))
			return 1;
	}
	return 0;
}

int doctor_lua_banner(const char *out, char *ver, size_t verlen)
{
	const char *p = strstr(out, "Lua ");

	return p && _release_at(p + 4, strlen(p + 4), ver, verlen);
}

int doctor_scontrol_plugindir(const char *out, char *dir, size_t dirlen)
{
	for (const char *l = out; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
		const char *v;
		size_t n;

		if (strncmp(l, "PluginDir", 9) != 0 || (l[9] != ' ' && l[9] != '='))
			continue;
		v = l + 9 + strspn(l + 9, " =");
		n = strcspn(v, ":\n ");
		if (n == 0 || n >= dirlen)
			return 0;
		memcpy(dir, v, n);
		dir[n] = '\0';
		return 1;
	}
	return 0;
}

int doctor_same_dir(const char *a, const char *b)
{
	size_t la = strlen(a), lb = strlen(b);

	while (la > 1 && a[la - 1] == '/')
		la--;
	while (lb > 1 && b[lb - 1] == '/')
		lb--;
	return la == lb && strncmp(a, b, la) == 0;
}
