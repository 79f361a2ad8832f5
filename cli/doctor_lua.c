/*
 * doctor_lua.c - the doctor's Lua checks (see doctor.h): load the site's
 * job_submit.lua (or burst_buffer.lua) the way slurmctld does, under Lua
 * 5.1 with a stub 'slurm' table, and compare what its stagehand module
 * reports (stagehand.VERSION, stagehand.site_config(), a table keyed by
 * stagehand.conf key names) with the daemon's version and stagehand.conf.
 *
 * A script from before the module has only a SITE table (stagehand.site,
 * lower-case keys): the doctor says so and compares what that table holds.
 *
 * The interpreter runs as a child (posix_spawn, no shell) with a 10 s
 * limit; its output is read, never evaluated.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "doctor.h"

#define LUA_TIMEOUT_MS 10000
#define LUA_MAX_OUT (64u * 1024)

extern char **environ;

/*
 * The driver: run the script as slurmctld would (a script that does not load
 * is the first failure), then take its global 'stagehand' (the shipped
 * wrappers set it), else the module as the script's directory holds it
 * (require "stagehand": a site script that keeps it local); print
 * tab-separated lines: error|why|mode|version|key|legacy. The module reads
 * STAGEHAND_CONF: the doctor's own when set (say what slurmctld's is), else
 * the stagehand.conf being checked.
 */
static const char _driver[] =
	"local script = os.getenv('STAGEHAND_DOCTOR_SCRIPT')\n"
	"local function clean(s) return (tostring(s):gsub('[%c]', ' ')) end\n"
	"local function out(...) local t = {...}\n"
	"  for i = 1, #t do t[i] = clean(t[i]) end\n"
	"  io.write(table.concat(t, '\\t'), '\\n') end\n"
	"local function val(v)\n"
	"  if type(v) == 'table' then local t = {}\n"
	"    for _, x in ipairs(v) do t[#t + 1] = tostring(x) end\n"
	"    return table.concat(t, ',') end\n"
	"  if type(v) == 'boolean' then return v and 'yes' or 'no' end\n"
	"  return tostring(v) end\n"
	"local function nop() end\n"
	"slurm = { SUCCESS = 0, ERROR = -1, log_info = nop, log_debug = nop,\n"
	"  log_verbose = nop, log_error = nop, log_user = nop }\n"
	"package.path = (script:match('^(.*)/[^/]*$') or '.') .. '/?.lua;' .. package.path\n"
	"local ok, e = pcall(dofile, script)\n"
	"if not ok then out('error', e) return end\n"
	"local m = rawget(_G, 'stagehand')\n"
	"local legacy = type(m) == 'table' and type(m.site_config) ~= 'function'\n"
	"if type(m) ~= 'table' or legacy then\n"
	"  local ok2, m2 = pcall(require, 'stagehand')\n"
	"  if ok2 and type(m2) == 'table' and type(m2.site_config) == 'function' then\n"
	"    m = m2 legacy = false\n"
	"  else out('why', string.sub(clean(m2), 1, 300)) legacy = true end\n"
	"end\n"
	"if type(m) ~= 'table' then out('mode', 'none') return end\n"
	"out('version', m.VERSION)\n"
	"if type(m.site_config) == 'function' then\n"
	"  local ok3, cfg = pcall(m.site_config)\n"
	"  if not ok3 or type(cfg) ~= 'table' then out('error', 'site_config() failed: ' ..\n"
	"    tostring(cfg)) return end\n"
	"  out('mode', legacy and 'script' or 'module')\n"
	"  for k, v in pairs(cfg) do out('key', k, val(v)) end\n"
	"elseif type(m.site) == 'table' then\n"
	"  out('mode', 'legacy')\n"
	"  for k, v in pairs(m.site) do out('legacy', k, val(v)) end\n"
	"else out('mode', 'none') end\n";

/* Run the driver; returns the child's output (free()) or NULL with err. */
static char *_run(const struct doctor *dr, char *err, size_t errlen)
{
	char env_script[PATH_MAX + 32], env_conf[PATH_MAX + 32], *argv[] = { (char *)dr->lua_bin, "-e", (char *)_driver, NULL };
	char **env = NULL, *out, why[512];
	size_t n = 0;
	int timed_out;

	for (char **e = environ; *e; e++)
		n++;
	env = calloc(n + 3, sizeof(*env));
	if (!env) {
		snprintf(err, errlen, "cannot start %.200s: %s", dr->lua_bin, strerror(errno));
		return NULL;
	}
	snprintf(env_script, sizeof(env_script), "STAGEHAND_DOCTOR_SCRIPT=%s", dr->lua_script);
	snprintf(env_conf, sizeof(env_conf), "STAGEHAND_CONF=%s", dr->conf_path);
	n = 0;
	for (char **e = environ; *e; e++)
		if (strncmp(*e, "STAGEHAND_DOCTOR_SCRIPT=", 24) != 0)
			env[n++] = *e;
	env[n++] = env_script;
	if (!getenv("STAGEHAND_CONF"))
		env[n++] = env_conf;
	out = doctor_capture(argv, env, LUA_TIMEOUT_MS, LUA_MAX_OUT, &timed_out, why, sizeof(why));
	free(env);
	if (!out && timed_out)
		snprintf(err, errlen, "%.200s did not finish loading %.300s within %d s (slurmctld "
			 "would stall the same way)", dr->lua_bin, dr->lua_script, LUA_TIMEOUT_MS / 1000);
	else if (!out)
		snprintf(err, errlen, "%.300s (install lua5.1, the Lua Debian's Slurm links, or name "
			 "another with --lua)", why);
	return out;
}

/* The keys compared: those the submit check uses, and the mode it holds jobs
   in (stagehand.site_config() gives more). Legacy: the SITE field. */
#define SUBMIT_CHECK "a job the submit check accepts could be refused later, or the reverse"

static const struct {
	const char *key, *legacy;
	int list;
	const char *harm;            /* what a mismatch does */
} _keys[] = {
	{ "AllowedSchemes", "allowed_schemes", 1, SUBMIT_CHECK },
	{ "StageInRoots", "stage_in_roots", 1, SUBMIT_CHECK },
	{ "MaxDirectives", "max_directives", 0, SUBMIT_CHECK },
	{ "MaxDirectiveLine", "max_line", 0, SUBMIT_CHECK },
	{ "MaxPathLength", "max_path", 0, SUBMIT_CHECK },
	{ "ScratchRoots", NULL, 1, SUBMIT_CHECK },
	{ "SubmitMode", NULL, 0, "slurmctld's scripts and the daemon expect jobs in different "
	  "modes (jobs held that nothing releases, or stage-ins nothing runs)" },
};

static void _join(char *out, size_t len, char **l)
{
	size_t o = 0;

	out[0] = '\0';
	for (; l && *l && o < len; l++)
		o += (size_t)snprintf(out + o, len - o, "%s%s", o ? "," : "", *l);
}

static int _conf_value(const struct conf *c, const char *key, char *out, size_t len)
{
	if (!strcmp(key, "AllowedSchemes"))
		_join(out, len, c->allowed_schemes);
	else if (!strcmp(key, "StageInRoots"))
		_join(out, len, c->stage_in_roots);
	else if (!strcmp(key, "ScratchRoots"))
		_join(out, len, c->scratch_roots);
	else if (!strcmp(key, "MaxDirectives"))
		snprintf(out, len, "%d", c->max_directives);
	else if (!strcmp(key, "MaxDirectiveLine"))
		snprintf(out, len, "%d", c->max_directive_line);
	else if (!strcmp(key, "MaxPathLength"))
		snprintf(out, len, "%d", c->max_path_length);
	else if (!strcmp(key, "SubmitMode"))
		snprintf(out, len, "%s", c->submit_mode == CONF_SUBMIT_BB ? "bb" : "hold");
	else
		return -1;
	return 0;
}

static int _cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Same list as sets: order, case of schemes and trailing '/' do not count. */
static int _same(const char *a, const char *b, int list)
{
	char x[4096], y[4096], *vx[128], *vy[128], *s = NULL;
	int nx = 0, ny = 0;

	if (!list)
		return strcmp(a, b) == 0;
	snprintf(x, sizeof(x), "%s", a);
	snprintf(y, sizeof(y), "%s", b);
	for (char *t = strtok_r(x, ",", &s); t && nx < 128; t = strtok_r(NULL, ",", &s))
		vx[nx++] = t;
	for (char *t = strtok_r(y, ",", &s); t && ny < 128; t = strtok_r(NULL, ",", &s))
		vy[ny++] = t;
	if (nx != ny)
		return 0;
	for (int i = 0; i < nx; i++) {
		for (char *p = vx[i]; *p; p++)
			*p = (char)tolower((unsigned char)*p);
		for (char *p = vy[i]; *p; p++)
			*p = (char)tolower((unsigned char)*p);
		for (size_t k = strlen(vx[i]); k > 1 && vx[i][k - 1] == '/';)
			vx[i][--k] = '\0';
		for (size_t k = strlen(vy[i]); k > 1 && vy[i][k - 1] == '/';)
			vy[i][--k] = '\0';
	}
	qsort(vx, (size_t)nx, sizeof(*vx), _cmp_str);
	qsort(vy, (size_t)ny, sizeof(*vy), _cmp_str);
	for (int i = 0; i < nx; i++)
		if (strcmp(vx[i], vy[i]))
			return 0;
	return 1;
}

/* One "key"/"legacy" line: compare with stagehand.conf. Returns 1 on a
   mismatch, 0 when equal, -1 for a key the doctor cannot render. */
static int _compare(struct doctor *dr, int legacy, const char *name, const char *lua_val)
{
	char conf_val[4096];

	for (size_t i = 0; i < sizeof(_keys) / sizeof(_keys[0]); i++) {
		const char *key = _keys[i].key;

		if (strcmp(legacy ? (_keys[i].legacy ? _keys[i].legacy : "") : key, name) != 0)
			continue;
		if (_conf_value(dr->conf, key, conf_val, sizeof(conf_val)) < 0)
			return -1;
		if (_same(lua_val, conf_val, _keys[i].list))
			return 0;
		doctor_add(dr, "site", DOC_FAIL, legacy ? "make the SITE table in the Lua script "
			   "and stagehand.conf agree (or install the stagehand.lua module, which "
			   "reads stagehand.conf itself); slurmctld rereads the script when it changes" :
			   "make stagehand.lua read the same stagehand.conf as the daemon, or make "
			   "the two files agree", "Lua %s%s = '%s' but %s has %s=%s: %s",
			   legacy ? "SITE." : "site_config().", name,
			   lua_val, dr->conf_path, key, conf_val[0] ? conf_val : "(empty)",
			   _keys[i].harm);
		return 1;
	}
	return -1;
}

/* Walk the driver's lines. */
static void _digest(struct doctor *dr, char *text)
{
	char *save = NULL, version[128] = "", mode[16] = "", why[400] = "";
	int compared = 0, bad = 0;

	for (char *l = strtok_r(text, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
		char *f1 = strchr(l, '\t'), *f2;

		if (!f1)
			continue;
		*f1++ = '\0';
		if (!strcmp(l, "error")) {
			doctor_add(dr, "lua", DOC_FAIL, "run it by hand with lua5.1 to see the "
				   "error; slurmctld fails to load it the same way", "%s: %s",
				   dr->lua_script, f1);
			return;
		}
		if (!strcmp(l, "why")) /* Lua's first clause: "module 'stagehand' not found" */
			snprintf(why, sizeof(why), "%.*s", (int)strcspn(f1, ":"), f1);
		else if (!strcmp(l, "version"))
			snprintf(version, sizeof(version), "%s", f1);
		else if (!strcmp(l, "mode"))
			snprintf(mode, sizeof(mode), "%s", f1);
		else if ((!strcmp(l, "key") || !strcmp(l, "legacy")) && (f2 = strchr(f1, '\t'))) {
			*f2++ = '\0';
			int r = _compare(dr, l[0] == 'l', f1, f2);

			bad += r > 0;
			compared += r >= 0;
		}
	}
	if (!strcmp(mode, "none") || !mode[0]) {
		doctor_add(dr, "lua", DOC_FAIL, "install stagehand's Lua scripts beside slurm.conf",
			   "%s defines no stagehand module or table: is it stagehand's script?",
			   dr->lua_script);
		return;
	}
	if (!strcmp(mode, "legacy")) {
		doctor_add(dr, "lua", DOC_WARN, "install the job_submit.lua, burst_buffer.lua and "
			   "stagehand.lua of this stagehand release beside slurm.conf",
			   "%s has no stagehand module: it predates stagehand.lua (require: %s); its "
			   "version cannot be matched with the daemon's; its SITE table was compared "
			   "with stagehand.conf instead", dr->lua_script, why[0] ? why : "not found");
	} else {
		const char *want = dr->daemon_version[0] ? dr->daemon_version : PACKAGE_VERSION;

		if (strcmp(version, want) != 0)
			doctor_add(dr, "lua", DOC_FAIL, "install the Lua scripts of the daemon's "
				   "release beside slurm.conf (slurmctld rereads them when they change)",
				   "%s's stagehand module is version %s but %s is %s", dr->lua_script,
				   version, dr->daemon_version[0] ? "stagehandd" : "this stagehand",
				   want);
		else
			doctor_add(dr, "lua", DOC_OK, NULL, "%s: stagehand module %s, same as %s",
				   dr->lua_script, version,
				   dr->daemon_version[0] ? "stagehandd" : "this stagehand");
	}
	if (!bad)
		doctor_add(dr, "site", DOC_OK, NULL, "%d Lua site setting%s agree with %s", compared,
			   compared == 1 ? "" : "s", dr->conf_path);
}

void doctor_check_lua(struct doctor *dr)
{
	struct stat st;
	char err[1024], *out;

	if (!dr->lua_script[0]) {
		doctor_add(dr, "lua", DOC_SKIP, NULL, "no Lua hook configured in slurm.conf");
		return;
	}
	if (stat(dr->lua_script, &st) < 0) {
		doctor_add(dr, "lua", DOC_FAIL, "install stagehand's Lua scripts in the directory "
			   "of slurm.conf (slurmctld reads them from there)", "%s: %s",
			   dr->lua_script, strerror(errno));
		return;
	}
	out = _run(dr, err, sizeof(err));
	if (!out) {
		doctor_add(dr, "lua", DOC_FAIL, "see the message", "%s", err);
		return;
	}
	_digest(dr, out);
	free(out);
}
