/*
 * test_doctor.c - the doctor's pure parts (cli/doctor_rules.c): the role
 * table (names, what each role runs and does not run), a uid in a
 * TrustedUids list, the Lua release in a Slurm plugin's bytes and in an
 * interpreter's banner, and when two scratch paths are the same directory.
 */
#include "config.h"

#include <stdio.h>
#include <string.h>

#include "doctor.h"
#include "tests/tap.h"

static void _roles(void)
{
	static const char *const names[] = { "controller", "daemon", "node", "login" };

	for (int i = 0; i < 4; i++) {
		int r = doctor_role_parse(names[i]);

		ok(r > 0, "role %s is known", names[i]);
		is_str(doctor_role_name((enum doctor_role)r), names[i], "role %s names itself", names[i]);
		contains(doctor_role_list(), names[i], "the usage error lists %s", names[i]);
		ok(doctor_role_checks((enum doctor_role)r) & DC_CONFIG, "%s parses stagehand.conf",
		   names[i]);
		ok(doctor_role_checks((enum doctor_role)r) & DC_MUNGE, "%s checks MUNGE", names[i]);
	}
	ok(doctor_role_parse("Controller") < 0, "role names are exact (case)");
	ok(doctor_role_parse("default") < 0, "no --role is not a role name");
	ok(doctor_role_parse("") < 0 && doctor_role_parse("compute") < 0, "unknown roles refused");
	is_str(doctor_role_name(DOCTOR_ROLE_DEFAULT), "default", "no --role: \"default\" in JSON");
}

/* What each role needs (the assignment of checks to hosts, docs/admin-guide.md). */
static void _role_checks(void)
{
	unsigned c = doctor_role_checks(DOCTOR_ROLE_CONTROLLER);
	unsigned d = doctor_role_checks(DOCTOR_ROLE_DAEMON);
	unsigned n = doctor_role_checks(DOCTOR_ROLE_NODE);
	unsigned l = doctor_role_checks(DOCTOR_ROLE_LOGIN);
	unsigned def = doctor_role_checks(DOCTOR_ROLE_DEFAULT);

	ok((c & (DC_SLURM | DC_LUA | DC_LUA_MODULES | DC_LUA_VERSION | DC_TRUSTED | DC_CLIENT)) ==
	   (DC_SLURM | DC_LUA | DC_LUA_MODULES | DC_LUA_VERSION | DC_TRUSTED | DC_CLIENT),
	   "controller: slurm.conf, Lua release, files, site settings, TrustedUids, Server=");
	ok(!(c & (DC_PLUGSTACK | DC_XATTR | DC_SCRATCH)), "controller: no plugin, no scratch");
	ok((d & (DC_STAGEHANDD | DC_STATE | DC_LISTEN | DC_XATTR | DC_SCRATCH | DC_ARCHIVE)) ==
	   (DC_STAGEHANDD | DC_STATE | DC_LISTEN | DC_XATTR | DC_SCRATCH | DC_ARCHIVE),
	   "daemon: stagehandd --check-config, state directory, listeners, scratch, archive");
	ok(!((c | n | l | def) & DC_STAGEHANDD), "only the daemon host runs stagehandd");
	ok(!(d & (DC_SLURM | DC_PLUGSTACK | DC_LUA)), "daemon: no slurm.conf checks");
	ok((n & (DC_PLUGSTACK | DC_DAEMON | DC_CLIENT | DC_XATTR)) ==
	   (DC_PLUGSTACK | DC_DAEMON | DC_CLIENT | DC_XATTR),
	   "node: plugstack (release, scratch=), the plugin's daemon, Server=, xattrs");
	ok(!(n & (DC_LUA | DC_TRUSTED | DC_STATE)), "node: no Lua, no TrustedUids, no StateDB");
	ok((l & (DC_CLI | DC_SBATCH | DC_CLIENT)) == (DC_CLI | DC_SBATCH | DC_CLIENT),
	   "login: stagehand, sbatch, Server=");
	ok(!(l & (DC_SLURM | DC_PLUGSTACK | DC_XATTR | DC_LUA)), "login: nothing of the nodes' or "
	   "the controller's");
	ok(def == (DC_CONFIG | DC_SLURM | DC_PLUGSTACK | DC_DAEMON | DC_MUNGE | DC_XATTR |
		   DC_SCRATCH | DC_LUA), "no --role: the checks of before roles, no more");
}

static void _uids(void)
{
	char *l0[] = { "0", NULL }, *l2[] = { "0", "64030", NULL }, *bad[] = { "64030x", "", NULL };

	ok(doctor_uid_listed(0, l0), "0 in TrustedUids=0");
	ok(!doctor_uid_listed(64030, l0), "64030 not in TrustedUids=0");
	ok(doctor_uid_listed(64030, l2), "64030 in TrustedUids=0,64030");
	ok(!doctor_uid_listed(64030, bad) && !doctor_uid_listed(0, bad), "no partial numbers");
	ok(!doctor_uid_listed(0, NULL), "an empty list holds nothing");
}

static void _lua(void)
{
	/* Bytes as in Debian 12's job_submit_lua.so: DT_NEEDED first, then dlopen names. */
	static const char so[] = "\x7f" "ELF\0\0libslurmfull.so\0liblua5.1.so.0\0liblua.so\0";
	static const char dash[] = "xx\0liblua-5.3.so\0";
	static const char none[] = "liblua.so\0libluajit\0liblua5\0";
	char v[16];

	ok(doctor_lua_linked(so, sizeof(so) - 1, v, sizeof(v)) == 1 && !strcmp(v, "5.1"),
	   "liblua5.1.so.0 gives 5.1 (got %s)", v);
	ok(doctor_lua_linked(dash, sizeof(dash) - 1, v, sizeof(v)) == 1 && !strcmp(v, "5.3"),
	   "liblua-5.3.so gives 5.3");
	ok(doctor_lua_linked(none, sizeof(none) - 1, v, sizeof(v)) == 0, "no release: 0");
	ok(doctor_lua_linked("liblua5.", 8, v, sizeof(v)) == 0, "a release cut at the end: 0");
	ok(doctor_lua_banner("Lua 5.1.5  Copyright (C) 1994-2012 Lua.org, PUC-Rio\n", v,
			     sizeof(v)) && !strcmp(v, "5.1"), "lua5.1 -v gives 5.1");
	ok(doctor_lua_banner("Lua 5.4.4  Copyright (C) 1994-2022 Lua.org, PUC-Rio\n", v,
			     sizeof(v)) && !strcmp(v, "5.4"), "lua5.4 -v gives 5.4");
	ok(!doctor_lua_banner("LuaJIT 2.1.0-beta3 -- Copyright\n", v, sizeof(v)),
	   "LuaJIT's banner has no Lua release");
	ok(!doctor_lua_banner("sh: lua5.9: not found\n", v, sizeof(v)), "an error has none");
}

static void _scontrol(void)
{
	char d[64];

	ok(doctor_scontrol_plugindir("Configuration data as of 2026-12-07T22:30:00\n"
				     "PluginDir               = /usr/lib/x86_64-linux-gnu/slurm-wlm\n"
				     "PlugStackConfig         = /etc/slurm/plugstack.conf\n", d, sizeof(d)) &&
	   !strcmp(d, "/usr/lib/x86_64-linux-gnu/slurm-wlm"), "scontrol's PluginDir line");
	ok(doctor_scontrol_plugindir("PluginDir = /opt/slurm/lib:/site/lib\n", d, sizeof(d)) &&
	   !strcmp(d, "/opt/slurm/lib"), "its first entry");
	ok(!doctor_scontrol_plugindir("PlugStackConfig = /x\nPluginDirX = /y\n", d, sizeof(d)),
	   "no PluginDir line: 0");
	ok(!doctor_scontrol_plugindir("scontrol: error: Unable to contact slurm controller\n", d,
				      sizeof(d)), "an error: 0");
}

static void _dirs(void)
{
	ok(doctor_same_dir("/scratch", "/scratch"), "same");
	ok(doctor_same_dir("/scratch/", "/scratch"), "a trailing / does not count");
	ok(doctor_same_dir("/scratch//", "/scratch/"), "nor several");
	ok(!doctor_same_dir("/scratch", "/scratch2"), "a longer name differs");
	ok(!doctor_same_dir("/scratch/a", "/scratch"), "a subdirectory differs");
	ok(doctor_same_dir("/", "/"), "the root");
}

int main(void)
{
	_roles();
	_role_checks();
	_uids();
	_lua();
	_dirs();
	_scontrol();
	return tap_done();
}
