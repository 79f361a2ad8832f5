/*
 * doctor_role.c - the doctor's checks that only some kinds of host need
 * (doctor.h; doctor_rules.c says which role runs which): on the controller
 * the Lua release Slurm's hook plugins load, the hook scripts and their
 * modules, and TrustedUids against SlurmUser; on the daemon's host its
 * state directory, ArchiveRoot and stagehandd's own --check-config; on a
 * login node sbatch and stagehand.
 *
 * Each problem names the file (and line) or program, the call that failed
 * with its errno text, and the fix. Must never: write anything but nothing
 * here writes at all; load a Slurm plugin (it is read as bytes).
 */
#include "config.h"

#include <errno.h>
#include <libgen.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "doctor.h"

#ifndef STAGEHAND_PKGDATADIR
#define STAGEHAND_PKGDATADIR "/usr/share/stagehand"
#endif
#ifndef STAGEHAND_SBINDIR
#define STAGEHAND_SBINDIR "/usr/sbin"
#endif

#define PLUGIN_MAX (64u << 20)   /* a Slurm plugin is far smaller */
#define RUN_TIMEOUT_MS 5000

extern char **environ;

/* ---- Slurm's PluginDir (controller, node) ---- */

void doctor_plugindir(struct doctor *dr)
{
	char *argv[] = { "scontrol", "show", "config", NULL }, *out, why[512], dir[PATH_MAX];
	int timed_out;

	out = doctor_capture(argv, environ, RUN_TIMEOUT_MS, 256 * 1024, &timed_out, why,
			     sizeof(why));
	if (out && doctor_scontrol_plugindir(out, dir, sizeof(dir))) {
		snprintf(dr->plugindir, sizeof(dr->plugindir), "%s", dir);
		dr->plugindir_from = "scontrol show config";
	}
	free(out);
}

/* ---- the Lua release Slurm loads (controller) ---- */

/* The Lua release named in plugin file path into ver: 1 found, 0 not, -1
   unreadable (err: the failing call and errno). */
static int _plugin_lua(const char *path, char *ver, size_t verlen, char *err, size_t errlen)
{
	FILE *fp = fopen(path, "rb");
	char *buf;
	size_t n;
	int rc;

	if (!fp) {
		snprintf(err, errlen, "fopen %s: %s", path, strerror(errno));
		return -1;
	}
	buf = malloc(PLUGIN_MAX);
	if (!buf) {
		snprintf(err, errlen, "malloc: %s", strerror(errno));
		fclose(fp);
		return -1;
	}
	n = fread(buf, 1, PLUGIN_MAX, fp);
	if (ferror(fp)) {
		snprintf(err, errlen, "read %s: %s", path, strerror(errno));
		rc = -1;
	} else {
		rc = doctor_lua_linked(buf, n, ver, verlen);
	}
	free(buf);
	fclose(fp);
	return rc;
}

/* The interpreter's release ("5.1") from `LUA -v`, or "" with why. */
static void _interp_lua(const char *lua, char *ver, size_t verlen, char *why, size_t whylen)
{
	char *argv[] = { (char *)lua, "-v", NULL }, *out;
	int timed_out;

	ver[0] = '\0';
	out = doctor_capture(argv, environ, RUN_TIMEOUT_MS, 4096, &timed_out, why, whylen);
	if (!out)
		return;
	if (!doctor_lua_banner(out, ver, verlen))
		snprintf(why, whylen, "'%s -v' printed no Lua release: %.200s", lua, out);
	free(out);
}

void doctor_check_lua_version(struct doctor *dr, int lua_given)
{
	const char *names[2] = { NULL, NULL };
	char path[PATH_MAX], ver[16] = "", v[16], err[PATH_MAX + 256], iv[16];
	const char *from = NULL;

	if (!dr->hook_lua && !dr->hook_bb) {
		doctor_add(dr, "lua-version", DOC_SKIP, NULL, "no Lua hook in slurm.conf");
		return;
	}
	names[0] = dr->hook_lua ? "job_submit_lua.so" : "burst_buffer_lua.so";
	names[1] = dr->hook_lua && dr->hook_bb ? "burst_buffer_lua.so" : NULL;
	for (int i = 0; i < 2 && names[i]; i++) {
		int rc;

		if (snprintf(path, sizeof(path), "%s/%s", dr->plugindir, names[i]) >= (int)sizeof(path))
			continue;
		rc = _plugin_lua(path, v, sizeof(v), err, sizeof(err));
		if (rc < 0) {
			doctor_add(dr, "lua-version", DOC_FAIL, "install Slurm's Lua plugins on this "
				   "host (Debian: apt-get install slurm-wlm-basic-plugins), or correct "
				   "PluginDir= in slurm.conf", "%s (PluginDir %s, from %s): slurmctld "
				   "cannot load the hook", err, dr->plugindir, dr->plugindir_from);
			return;
		}
		if (rc == 0) {
			doctor_add(dr, "lua-version", DOC_WARN, "run the doctor with --lua naming the "
				   "interpreter of the Lua release Slurm was built with",
				   "%s names no liblua: the Lua release slurmctld uses is unknown", path);
			return;
		}
		if (!ver[0]) {
			snprintf(ver, sizeof(ver), "%s", v);
			from = names[i];
		}
	}
	if (strcmp(ver, "5.1") < 0 || strcmp(ver, "5.4") > 0 || strlen(ver) != 3) {
		doctor_add(dr, "lua-version", DOC_FAIL, "build Slurm against Lua 5.1 to 5.4 (the "
			   "releases stagehand's scripts run on)", "%s/%s loads Lua %s: stagehand's "
			   "scripts run on Lua 5.1 to 5.4", dr->plugindir, from, ver);
		return;
	}
	/* The Lua checks load the scripts with the interpreter of Slurm's release. */
	if (!lua_given)
		snprintf(dr->lua_bin, sizeof(dr->lua_bin), "lua%s", ver);
	_interp_lua(dr->lua_bin, iv, sizeof(iv), err, sizeof(err));
	if (!iv[0]) {
		doctor_add(dr, "lua-version", DOC_FAIL, lua_given ? "name an interpreter that "
			   "runs with --lua" : "install the interpreter (Debian: apt-get install "
			   "lua5.x, here the one named) so the doctor can load the scripts as "
			   "slurmctld does, or name one with --lua", "%s/%s loads Lua %s; %s",
			   dr->plugindir, from, ver, err);
		return;
	}
	if (strcmp(iv, ver) != 0) {
		doctor_add(dr, "lua-version", DOC_FAIL, "run the doctor with --lua lua5.x of "
			   "slurmctld's release (or without --lua: it picks that one)",
			   "%s/%s loads Lua %s but %s is Lua %s: the scripts would be checked "
			   "under another Lua than slurmctld's", dr->plugindir, from, ver,
			   dr->lua_bin, iv);
		return;
	}
	doctor_add(dr, "lua-version", DOC_OK, NULL, "%s/%s loads Lua %s (PluginDir from %s); "
		   "the scripts are loaded here with %s (Lua %s)", dr->plugindir, from, ver,
		   dr->plugindir_from, dr->lua_bin, iv);
}

/* ---- the hook scripts and their modules (controller) ---- */

/* Where name is: dir (0), the package data directory (1), neither (-1, with
   both stat errors in err). */
static int _find_module(const char *dir, const char *name, char *err, size_t errlen)
{
	char a[PATH_MAX], b[PATH_MAX];
	struct stat st;
	int ea, eb;

	if (snprintf(a, sizeof(a), "%s/%s", dir, name) >= (int)sizeof(a))
		ea = ENAMETOOLONG;
	else if (stat(a, &st) == 0)
		return 0;
	else
		ea = errno;
	if (snprintf(b, sizeof(b), "%s/%s", STAGEHAND_PKGDATADIR, name) >= (int)sizeof(b))
		eb = ENAMETOOLONG;
	else if (stat(b, &st) == 0)
		return 1;
	else
		eb = errno;
	snprintf(err, errlen, "stat %s: %s; stat %s: %s", a, strerror(ea), b, strerror(eb));
	return -1;
}

void doctor_check_lua_modules(struct doctor *dr)
{
	static const char *const mods[] = { "stagehand.lua", "stagehand_conf.lua",
		"stagehand_dsl.lua", "stagehand_bb.lua" };
	char dir[PATH_MAX], tmp[PATH_MAX], err[2 * PATH_MAX + 128], where[512] = "";
	const char *hooks[2] = { NULL, NULL };
	size_t o = 0;
	int bad = 0;

	if (!dr->hook_lua && !dr->hook_bb) {
		doctor_add(dr, "lua-files", DOC_SKIP, NULL, "no Lua hook in slurm.conf");
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s", dr->slurm_conf);
	snprintf(dir, sizeof(dir), "%s", dirname(tmp));
	hooks[0] = dr->hook_lua ? "job_submit.lua" : "burst_buffer.lua";
	hooks[1] = dr->hook_lua && dr->hook_bb ? "burst_buffer.lua" : NULL;
	for (int i = 0; i < 2 && hooks[i]; i++) {
		char p[PATH_MAX];
		struct stat st;

		if (snprintf(p, sizeof(p), "%s/%s", dir, hooks[i]) >= (int)sizeof(p))
			continue;
		if (stat(p, &st) < 0) {
			doctor_add(dr, "lua-files", DOC_FAIL, NULL, "stat %s: %s (%s sets %s)", p,
				   strerror(errno), dr->slurm_conf, i == 0 && dr->hook_lua ?
				   "JobSubmitPlugins=lua" : "BurstBufferType=burst_buffer/lua");
			doctor_hint(dr, "link it there from the package's data directory: "
				    "ln -s %s/%s %s (slurmctld looks for it only beside slurm.conf)",
				    STAGEHAND_PKGDATADIR, hooks[i], p);
			bad++;
		}
	}
	for (size_t i = 0; i < sizeof(mods) / sizeof(mods[0]); i++) {
		int at = _find_module(dir, mods[i], err, sizeof(err));

		if (at < 0) {
			doctor_add(dr, "lua-files", DOC_FAIL, "install stagehand's Lua files (Debian: "
				   "the stagehand-slurm package; from source: make install) in "
				   STAGEHAND_PKGDATADIR, "%s is neither beside %s nor in the package "
				   "data directory (%s): the hook fails to load and slurmctld refuses "
				   "jobs", mods[i], hooks[0], err);
			bad++;
		} else if (o < sizeof(where)) {
			o += (size_t)snprintf(where + o, sizeof(where) - o, "%s%s (%s)", o ? ", " : "",
					      mods[i], at ? "data directory" : "beside");
		}
	}
	if (!bad)
		doctor_add(dr, "lua-files", DOC_OK, NULL, "%s/%s%s%s; modules %s; data directory "
			   STAGEHAND_PKGDATADIR, dir, hooks[0], hooks[1] ? " and " : "",
			   hooks[1] ? hooks[1] : "", where);
}

/* ---- TrustedUids against SlurmUser (controller) ---- */

static void _join_uids(char *out, size_t len, char *const *l)
{
	size_t o = 0;

	out[0] = '\0';
	for (; l && *l && o < len; l++)
		o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "," : "", *l);
}

void doctor_check_trusted(struct doctor *dr)
{
	const char *user = dr->slurm_user[0] ? dr->slurm_user : "root";
	char list[512], at[PATH_MAX + 16];
	struct passwd *pw;
	int line = conf_key_line(dr->conf, "TrustedUids");

	_join_uids(list, sizeof(list), dr->conf->trusted_uids);
	if (line)
		snprintf(at, sizeof(at), "%s:%d", dr->conf_path, line);
	else
		snprintf(at, sizeof(at), "%s (default)", dr->conf_path);
	if (!dr->slurm_conf[0]) {
		doctor_add(dr, "trusted-uids", DOC_SKIP, NULL, "no slurm.conf: SlurmUser unknown");
		return;
	}
	errno = 0;
	pw = getpwnam(user);
	if (!pw) {
		doctor_add(dr, "trusted-uids", DOC_FAIL, "create the user, or correct SlurmUser= "
			   "in slurm.conf", "%s:%d: SlurmUser=%s: getpwnam: %s", dr->slurm_conf,
			   dr->slurm_user_line, user, errno ? strerror(errno) : "no such user");
		return;
	}
	if (pw->pw_uid == 0 || doctor_uid_listed(pw->pw_uid, dr->conf->trusted_uids)) {
		doctor_add(dr, "trusted-uids", DOC_OK, NULL, "SlurmUser %s (uid %u)%s%s", user,
			   (unsigned)pw->pw_uid, pw->pw_uid == 0 ? " is root" : " is in TrustedUids=",
			   pw->pw_uid == 0 ? "" : list);
		return;
	}
	doctor_add(dr, "trusted-uids", DOC_FAIL, NULL, "%s:%d: SlurmUser=%s (uid %u) is not in "
		   "TrustedUids=%s (%s): job_submit.lua refuses a release of a held job by uid %u "
		   "while its stage-in is pending", dr->slurm_conf, dr->slurm_user_line, user,
		   (unsigned)pw->pw_uid, list, at, (unsigned)pw->pw_uid);
	doctor_hint(dr, "set TrustedUids=%s%s%u in %s (slurmctld's Lua module reads it when "
		    "the scripts load: scontrol reconfigure)", list, list[0] ? "," : "",
		    (unsigned)pw->pw_uid, dr->conf_path);
}

/* ---- the daemon's own files (daemon) ---- */

void doctor_check_state(struct doctor *dr)
{
	char dir[PATH_MAX], tmp[PATH_MAX];
	struct stat st;
	const char *db = dr->conf->state_db;

	if (!db) {
		doctor_add(dr, "state", DOC_FAIL, "set StateDB= in stagehand.conf",
			   "%s sets no StateDB", dr->conf_path);
		return;
	}
	snprintf(tmp, sizeof(tmp), "%s", db);
	snprintf(dir, sizeof(dir), "%s", dirname(tmp));
	errno = 0;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode)) {
		const char *why = errno ? strerror(errno) : "not a directory";

		doctor_add(dr, "state", DOC_FAIL, NULL, "StateDB=%s: stat %s: %s", db, dir, why);
		doctor_hint(dr, "create it for the daemon (install -d -m 0700 %s), or correct "
			    "StateDB= in %s", dir, dr->conf_path);
		return;
	}
	/* The daemon runs as root (stagehandd.service): root's access() fails only on a
	   read-only file system or a file system that refuses root. */
	if (access(dir, W_OK | X_OK) < 0 || (stat(db, &st) == 0 && access(db, R_OK | W_OK) < 0)) {
		doctor_add(dr, "state", DOC_FAIL, "make it writable by the daemon (root): mount "
			   "it read-write, or move StateDB= to a local disk", "StateDB=%s: access "
			   "W_OK: %s%s", db, strerror(errno), geteuid() ? " (the doctor does not run "
			   "as root, as the daemon does: run it as root)" : "");
		return;
	}
	doctor_add(dr, "state", DOC_OK, NULL, "StateDB=%s: %s is writable%s", db, dir,
		   stat(db, &st) == 0 ? ", the database too" : " (the database is made at start)");
}

void doctor_check_archive(struct doctor *dr)
{
	const char *a = dr->conf->archive_root;
	const char *path = a;
	struct stat st;

	if (!a) {
		doctor_add(dr, "archive", DOC_OK, NULL, "no ArchiveRoot: jobs name their archive= "
			   "destinations");
		return;
	}
	if (strncmp(a, "file://", 7) == 0)
		path = a + 7;
	else if (strstr(a, "://")) {
		doctor_add(dr, "archive", DOC_SKIP, NULL, "ArchiveRoot=%s is remote: not probed "
			   "(a transfer to it shows whether it answers)", a);
		return;
	}
	errno = 0;
	if (stat(path, &st) < 0 || !S_ISDIR(st.st_mode)) {
		doctor_add(dr, "archive", DOC_FAIL, "mount the archive file system here, or "
			   "correct ArchiveRoot= in stagehand.conf", "ArchiveRoot=%s: stat %s: %s",
			   a, path, errno ? strerror(errno) : "not a directory");
		return;
	}
	doctor_add(dr, "archive", DOC_OK, NULL, "ArchiveRoot=%s is a directory here", a);
}

/* ---- users' commands (login) ---- */

void doctor_check_sbatch(struct doctor *dr)
{
	char *argv[] = { "sbatch", "--version", NULL }, *out, why[512];
	int timed_out;

	out = doctor_capture(argv, environ, RUN_TIMEOUT_MS, 4096, &timed_out, why, sizeof(why));
	if (!out) {
		doctor_add(dr, "sbatch", DOC_FAIL, "install Slurm's client commands here (Debian: "
			   "apt-get install slurm-client) with the cluster's slurm.conf",
			   "%s (PATH=%.300s)", why, getenv("PATH") ? getenv("PATH") : "");
		return;
	}
	out[strcspn(out, "\n")] = '\0';
	doctor_add(dr, "sbatch", DOC_OK, NULL, "sbatch runs: %.200s", out);
	free(out);
}

/* 1 if prog is an executable file in one of PATH's directories (into at). */
static int _on_path(const char *prog, char *at, size_t atlen)
{
	char path[4096], *save = NULL;
	const char *p = getenv("PATH");

	snprintf(path, sizeof(path), "%s", p ? p : "/usr/bin:/bin");
	for (char *d = strtok_r(path, ":", &save); d; d = strtok_r(NULL, ":", &save))
		if (snprintf(at, atlen, "%s/%s", *d ? d : ".", prog) < (int)atlen &&
		    access(at, X_OK) == 0)
			return 1;
	return 0;
}

void doctor_check_cli(struct doctor *dr)
{
	char at[PATH_MAX];

	if (_on_path("stagehand", at, sizeof(at)))
		doctor_add(dr, "cli", DOC_OK, NULL, "stagehand %s; users find %s on PATH",
			   PACKAGE_VERSION, at);
	else
		doctor_add(dr, "cli", DOC_WARN, "install the stagehand package here (it puts "
			   "stagehand in /usr/bin)", "stagehand %s runs, but no stagehand is on "
			   "PATH=%.300s: users would not find it", PACKAGE_VERSION,
			   getenv("PATH") ? getenv("PATH") : "");
}

/* ---- stagehandd's own configuration check (daemon) ---- */

/* stagehandd on PATH, else where make install puts it; 1 found (into at). */
static int _find_stagehandd(char *at, size_t atlen, char *why, size_t whylen)
{
	if (_on_path("stagehandd", at, atlen))
		return 1;
	if (snprintf(at, atlen, "%s/stagehandd", STAGEHAND_SBINDIR) < (int)atlen &&
	    access(at, X_OK) == 0)
		return 1;
	snprintf(why, whylen, "stagehandd is neither on PATH nor in %s: access %s: %s",
		 STAGEHAND_SBINDIR, at, strerror(errno));
	return 0;
}

void doctor_check_stagehandd(struct doctor *dr)
{
	char bin[PATH_MAX], why[PATH_MAX + 128], *out, *save = NULL;
	char *argv[] = { bin, "-c", (char *)dr->conf_path, "--check-config", NULL };
	int timed_out, ok = 0, warned = 0;

	if (!_find_stagehandd(bin, sizeof(bin), why, sizeof(why))) {
		doctor_add(dr, "stagehandd", DOC_FAIL, "install the stagehandd package on the "
			   "daemon's host (from source: make install)", "%s", why);
		return;
	}
	out = doctor_capture(argv, environ, RUN_TIMEOUT_MS, 16384, &timed_out, why, sizeof(why));
	if (!out) {
		doctor_add(dr, "stagehandd", DOC_FAIL, "run it by hand to see why", "%s", why);
		return;
	}
	for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		if (!strcmp(l, "configuration OK")) {
			ok = 1;
		} else if (!strncmp(l, "warning: ", 9)) {
			doctor_add(dr, "stagehandd", DOC_WARN, "see the warning: the daemon starts, "
				   "but users' transfers there fail", "%s -c %s --check-config: %s", bin,
				   dr->conf_path, l + 9);
			warned++;
		} else if (!ok) {
			doctor_add(dr, "stagehandd", DOC_FAIL, "correct what it names; stagehandd "
				   "refuses to start until then", "%s -c %s --check-config: %s", bin,
				   dr->conf_path, l);
			free(out);
			return;
		}
	}
	free(out);
	if (!ok)
		doctor_add(dr, "stagehandd", DOC_FAIL, "run it by hand to see why", "%s -c %s "
			   "--check-config printed no verdict", bin, dr->conf_path);
	else
		doctor_add(dr, "stagehandd", DOC_OK, NULL, "%s -c %s --check-config: configuration "
			   "OK%s", bin, dr->conf_path, warned ? ", with the warnings above" : "");
}
