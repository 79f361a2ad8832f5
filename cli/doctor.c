/*
 * doctor.c - 'stagehand doctor': check a site's setup from the node it runs
 * on and say, for each problem, what to do about it.
 *
 * Checks, in order: stagehand.conf; slurm.conf (JobSubmitPlugins=lua or
 * BurstBufferType=burst_buffer/lua); the plugstack.conf line of stagehand.so
 * and its arguments; the daemon over the transport this node uses (UNIX
 * socket, or TCP with a MUNGE credential); a MUNGE round trip; xattrs and
 * per-user directories on each scratch root (doctor_fs.c); the Lua hooks'
 * version and site settings (doctor_lua.c). With --role, the checks that
 * kind of host needs (doctor_rules.c's table), some of them only there
 * (doctor_role.c, and the client and listener checks here).
 *
 * Exit status: 0 nothing failed (warnings allowed), 1 a check failed,
 * 2 usage error.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <glob.h>
#include <libgen.h>
#include <munge.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "commands.h"
#include "dclient.h"
#include "doctor.h"

#ifndef STAGEHAND_SLURM_PLUGINDIR
#define STAGEHAND_SLURM_PLUGINDIR "/usr/lib/x86_64-linux-gnu/slurm-wlm"
#endif

struct doctor_result *doctor_add(struct doctor *dr, const char *name, enum doctor_status st,
				 const char *hint, const char *fmt, ...)
{
	struct doctor_result *r = &dr->r[dr->n < DOCTOR_MAX_RESULTS ? dr->n++ : dr->n - 1];
	va_list ap;

	snprintf(r->name, sizeof(r->name), "%s", name);
	r->status = st;
	va_start(ap, fmt);
	if (vsnprintf(r->message, sizeof(r->message), fmt, ap) >= (int)sizeof(r->message))
		memcpy(r->message + sizeof(r->message) - 4, "...", 4);
	va_end(ap);
	snprintf(r->hint, sizeof(r->hint), "%s", hint ? hint : "");
	return r;
}

void doctor_hint(struct doctor *dr, const char *fmt, ...)
{
	struct doctor_result *r = &dr->r[dr->n ? dr->n - 1 : 0];
	va_list ap;

	va_start(ap, fmt);
	if (vsnprintf(r->hint, sizeof(r->hint), fmt, ap) >= (int)sizeof(r->hint))
		memcpy(r->hint + sizeof(r->hint) - 4, "...", 4);
	va_end(ap);
}

/* ---- slurm.conf ---- */

struct _slurm_facts {
	char job_submit[256];     /* JobSubmitPlugins value, "" = unset */
	int job_submit_line;
	char bb_type[256];        /* BurstBufferType value */
	int bb_line;
	char plugstack[PATH_MAX]; /* PlugStackConfig, "" = beside slurm.conf */
	char plugindir[PATH_MAX]; /* PluginDir (first entry) */
	char slurm_user[64];      /* SlurmUser, "" = unset (root) */
	int slurm_user_line;
};

/* Slurm's "Key=Value Key=Value ..." lines; keys case-insensitive. */
static int _read_slurm_conf(const char *path, struct _slurm_facts *f, char *err, size_t errlen)
{
	FILE *fp = fopen(path, "re");
	char line[8192];
	int lineno = 0;

	if (!fp) {
		snprintf(err, errlen, "cannot open %s: %s", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof(line), fp)) {
		char *save = NULL, *hash = strchr(line, '#');

		lineno++;
		if (hash)
			*hash = '\0';
		for (char *t = strtok_r(line, " \t\r\n", &save); t;
		     t = strtok_r(NULL, " \t\r\n", &save)) {
			char *eq = strchr(t, '=');

			if (!eq)
				continue;
			*eq++ = '\0';
			if (strcasecmp(t, "JobSubmitPlugins") == 0) {
				snprintf(f->job_submit, sizeof(f->job_submit), "%s", eq);
				f->job_submit_line = lineno;
			} else if (strcasecmp(t, "BurstBufferType") == 0) {
				snprintf(f->bb_type, sizeof(f->bb_type), "%s", eq);
				f->bb_line = lineno;
			} else if (strcasecmp(t, "PlugStackConfig") == 0) {
				snprintf(f->plugstack, sizeof(f->plugstack), "%s", eq);
			} else if (strcasecmp(t, "SlurmUser") == 0) {
				snprintf(f->slurm_user, sizeof(f->slurm_user), "%s", eq);
				f->slurm_user_line = lineno;
			} else if (strcasecmp(t, "PluginDir") == 0) {
				snprintf(f->plugindir, sizeof(f->plugindir), "%s", eq);
				f->plugindir[strcspn(f->plugindir, ":")] = '\0';
			}
		}
	}
	fclose(fp);
	return 0;
}

/* 1 if a comma list (JobSubmitPlugins) names lua or job_submit/lua. */
static int _has_lua(const char *list)
{
	char buf[256], *save = NULL;

	snprintf(buf, sizeof(buf), "%s", list);
	for (char *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save))
		if (strcasecmp(t, "lua") == 0 || strcasecmp(t, "job_submit/lua") == 0)
			return 1;
	return 0;
}

static void _beside(char *out, size_t len, const char *file, const char *name)
{
	char dir[PATH_MAX];

	snprintf(dir, sizeof(dir), "%s", file);
	if (snprintf(out, len, "%s/%s", dirname(dir), name) >= (int)len)
		out[0] = '\0';
}

static void _check_slurm(struct doctor *dr, const char *opt_path, struct _slurm_facts *f)
{
	const char *src = "--slurm-conf";
	const char *path = opt_path;
	char err[PATH_MAX + 128];
	int lua, bb;

	if (!path && dr->conf->slurm_conf) {
		path = dr->conf->slurm_conf;
		src = "SlurmConf in stagehand.conf";
	}
	if (!path && getenv("SLURM_CONF") && *getenv("SLURM_CONF")) {
		path = getenv("SLURM_CONF");
		src = "SLURM_CONF";
	}
	if (!path) {
		path = "/etc/slurm/slurm.conf";
		src = "the default";
	}
	if (_read_slurm_conf(path, f, err, sizeof(err)) < 0) {
		doctor_add(dr, "slurm.conf", DOC_FAIL, "point the doctor at the cluster's slurm.conf "
			   "with --slurm-conf, SLURM_CONF or SlurmConf= in stagehand.conf",
			   "%s (from %s)", err, src);
		return;
	}
	snprintf(dr->slurm_conf, sizeof(dr->slurm_conf), "%s", path);
	lua = f->job_submit[0] && _has_lua(f->job_submit);
	bb = strcasecmp(f->bb_type, "burst_buffer/lua") == 0;
	dr->hook_lua = lua;
	dr->hook_bb = bb;
	snprintf(dr->slurm_user, sizeof(dr->slurm_user), "%s", f->slurm_user);
	dr->slurm_user_line = f->slurm_user_line;
	if (f->plugindir[0]) {
		snprintf(dr->plugindir, sizeof(dr->plugindir), "%s", f->plugindir);
		dr->plugindir_from = "slurm.conf";
	}
	if (!lua && !bb) {
		char js[320] = "JobSubmitPlugins is unset", bt[320] = "BurstBufferType is unset";

		if (f->job_submit_line)
			snprintf(js, sizeof(js), "line %d: JobSubmitPlugins=%s", f->job_submit_line,
				 f->job_submit);
		if (f->bb_line)
			snprintf(bt, sizeof(bt), "line %d: BurstBufferType=%s", f->bb_line, f->bb_type);
		doctor_add(dr, "slurm.conf", DOC_FAIL, "add JobSubmitPlugins=lua (hold mode) or "
			   "BurstBufferType=burst_buffer/lua (burst-buffer mode) to slurm.conf and "
			   "run 'scontrol reconfigure' (docs/admin-submit.md, docs/burst-buffer-slurm.md)",
			   "%s: neither JobSubmitPlugins=lua nor BurstBufferType=burst_buffer/lua is "
			   "set (%s; %s): jobs' #DATA lines are never read", path, js, bt);
		return;
	}
	_beside(dr->lua_script, sizeof(dr->lua_script), path,
		lua ? "job_submit.lua" : "burst_buffer.lua");
	doctor_add(dr, "slurm.conf", DOC_OK, NULL, "%s:%d: %s (%s mode); Slurm loads %s", path,
		   lua ? f->job_submit_line : f->bb_line,
		   lua ? "JobSubmitPlugins=lua" : "BurstBufferType=burst_buffer/lua",
		   lua ? "hold" : "burst-buffer", dr->lua_script);
}

/* ---- plugstack.conf ---- */

/* One plugstack file (includes followed, depth-limited). 1 found, 0 not, -1 error. */
static int _scan_plugstack(struct doctor *dr, const char *file, int depth, const char *plugindir)
{
	FILE *fp = fopen(file, "re");
	char line[8192];
	int lineno = 0, found = 0;

	if (!fp) {
		doctor_add(dr, "plugstack", DOC_FAIL, "create it with the line from "
			   "etc/plugstack.conf.example, or fix PlugStackConfig= in slurm.conf",
			   "cannot open %s: %s", file, strerror(errno));
		return -1;
	}
	while (!found && fgets(line, sizeof(line), fp)) {
		char *av[64], *save = NULL, *hash = strchr(line, '#'), *base;
		int ac = 0;

		lineno++;
		if (hash)
			*hash = '\0';
		for (char *t = strtok_r(line, " \t\r\n", &save); t && ac < 64;
		     t = strtok_r(NULL, " \t\r\n", &save))
			av[ac++] = t;
		if (ac >= 2 && strcasecmp(av[0], "include") == 0 && depth < 4) {
			glob_t g;

			if (glob(av[1], 0, NULL, &g) == 0) {
				for (size_t i = 0; !found && i < g.gl_pathc; i++)
					found = _scan_plugstack(dr, g.gl_pathv[i], depth + 1, plugindir) != 0;
				globfree(&g);
			}
			continue;
		}
		if (ac < 2 || (strcmp(av[0], "required") && strcmp(av[0], "optional")))
			continue;
		base = strrchr(av[1], '/');
		base = base ? base + 1 : av[1];
		if (strcmp(base, "stagehand.so") != 0)
			continue;
		found = 1;
		{
			char so[PATH_MAX], err[512];
			struct stat st;

			if (av[1][0] == '/')
				snprintf(so, sizeof(so), "%s", av[1]);
			else if (snprintf(so, sizeof(so), "%s/%s", plugindir, av[1]) >= (int)sizeof(so))
				so[0] = '\0';
			if (stat(so, &st) < 0) {
				doctor_add(dr, "plugstack", DOC_FAIL, "install the stagehand Slurm plugin "
					   "package on this node, or correct the path on that line",
					   "%s:%d: %s: cannot stat %s: %s", file, lineno, av[1], so,
					   strerror(errno));
				break;
			}
			plugargs_init(&dr->args);
			if (plugargs_parse(&dr->args, ac - 2, av + 2, err, sizeof(err)) < 0) {
				doctor_add(dr, "plugstack", DOC_FAIL, "correct the argument (see "
					   "docs/spank.md for the keys); slurmd reads plugstack.conf when "
					   "it starts: restart slurmd after the change",
					   "%s:%d: bad stagehand.so argument: %s", file, lineno, err);
				break;
			}
			dr->have_plugin = 1;
			snprintf(dr->plug_where, sizeof(dr->plug_where), "%s:%d", file, lineno);
			doctor_add(dr, "plugstack", DOC_OK, NULL, "%s:%d: %s %s with %d argument%s",
				   file, lineno, av[0], so, ac - 2, ac - 2 == 1 ? "" : "s");
			doctor_check_release(dr, so);
		}
	}
	fclose(fp);
	return found;
}

static void _check_plugstack(struct doctor *dr, const struct _slurm_facts *f)
{
	char path[PATH_MAX];
	const struct conf *c = dr->conf;

	if (!dr->slurm_conf[0]) {
		doctor_add(dr, "plugstack", DOC_SKIP, NULL, "no slurm.conf: plugstack.conf unknown");
		return;
	}
	if (f->plugstack[0])
		snprintf(path, sizeof(path), "%s", f->plugstack);
	else
		_beside(path, sizeof(path), dr->slurm_conf, "plugstack.conf");
	if (_scan_plugstack(dr, path, 0, dr->plugindir) == 0)
		doctor_add(dr, "plugstack", DOC_FAIL, "add the line from etc/plugstack.conf.example "
			   "and restart slurmd on every compute node",
			   "%s has no 'required|optional .../stagehand.so' line: jobs are neither "
			   "labelled nor reported at their end", path);
	if (!dr->have_plugin)
		return;
	/* The plugin and the daemon must agree on where labels go and where scratch is. */
	if (strcmp(dr->args.xattr_ns, c->xattr_ns == CONF_XATTR_TRUSTED ? "trusted" : "user"))
		doctor_add(dr, "plugstack", DOC_FAIL, "make xattr_ns= on the plugstack line and "
			   "XattrNamespace= in stagehand.conf the same",
			   "plugstack xattr_ns=%s but %s has XattrNamespace=%s: labels written on "
			   "the nodes would not be the ones the daemon reads", dr->args.xattr_ns,
			   dr->conf_path, c->xattr_ns == CONF_XATTR_TRUSTED ? "trusted" : "user");
}

/*
 * The plugin's scratch= is where it labels a job's directory; the daemon
 * looks for the labels in its first ScratchRoots entry. After the daemon
 * check: the daemon's own list when it said it, else this host's file.
 */
static void _check_plugin_scratch(struct doctor *dr)
{
	const struct conf *c = dr->conf;
	const char *first = dr->daemon_scratch[0] ? dr->daemon_scratch : c->scratch_roots[0];
	char from[PATH_MAX + 32];

	if (!dr->have_plugin || !first)
		return;
	if (dr->daemon_scratch[0])
		snprintf(from, sizeof(from), "stagehandd's (/v1/health)");
	else
		snprintf(from, sizeof(from), "%s's", dr->conf_path);
	if (doctor_same_dir(dr->args.scratch, first))
		return;
	doctor_add(dr, "plugstack", DOC_FAIL, NULL, "%s: scratch=%s is not %s, the first "
		   "entry of %s ScratchRoots: jobs' labels would be written where the daemon "
		   "does not look", dr->plug_where, dr->args.scratch, first, from);
	doctor_hint(dr, "set scratch=%s on the stagehand.so line (%s) and restart slurmd, or "
		    "put %s first in the daemon's ScratchRoots=", first, dr->plug_where,
		    dr->args.scratch);
}

/* ---- the daemon, MUNGE ---- */

/* An admin's drain (stagehand drain): a warning, since transfers wait until resume. */
static void _check_drain(struct doctor *dr, const json_t *st)
{
	const char *reason = json_string_value(json_object_get(st, "reason"));
	time_t since = (time_t)json_integer_value(json_object_get(st, "since"));
	struct tm tm;
	char when[64] = "?";

	if (!json_is_object(st)) {
		doctor_add(dr, "drain", DOC_SKIP, NULL, "stagehandd %s does not report a drain "
			   "state", dr->daemon_version);
		return;
	}
	if (!json_is_true(json_object_get(st, "drained"))) {
		doctor_add(dr, "drain", DOC_OK, NULL, "not drained: transfers start as queued");
		return;
	}
	if (localtime_r(&since, &tm))
		strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S %Z", &tm);
	doctor_add(dr, "drain", DOC_WARN, "run 'stagehand resume' when the maintenance is over",
		   "stagehandd is drained since %s by uid %" JSON_INTEGER_FORMAT "%s%.200s: no "
		   "new transfers start (%" JSON_INTEGER_FORMAT " still running); requests "
		   "and jobs wait", when, json_integer_value(json_object_get(st, "by")),
		   reason && *reason ? ": " : "", reason ? reason : "",
		   json_integer_value(json_object_get(st, "running")));
}

/* The daemon's first ScratchRoots entry from its health answer j. */
static void _daemon_scratch(struct doctor *dr, const json_t *j)
{
	const char *first = json_string_value(json_array_get(json_object_get(j, "scratch_roots"), 0));

	if (first)
		snprintf(dr->daemon_scratch, sizeof(dr->daemon_scratch), "%s", first);
}

/* GET /v1/health from the daemon at server (TCP + MUNGE) or sock; how: where
   the target came from. The version and drain are said once per run. */
static void _daemon_health(struct doctor *dr, const char *server, const char *sock,
			   const char *how)
{
	struct dclient_target t;
	struct dclient_resp resp;
	char err[1024];
	int first = !dr->daemon_version[0];
	json_t *j;

	if (dclient_find(&t, server, sock, dr->conf_path, 0, err, sizeof(err)) < 0) {
		doctor_add(dr, "daemon", DOC_FAIL, "fix Server= or SocketPath= (stagehand.conf) "
			   "or server=/socket= (plugstack.conf)", "%s", err);
		return;
	}
	if (dclient_request(&t, &(struct dclient_call){ .method = "GET", .path = "/v1/health",
			      .timeout_ms = 5000 }, &resp, err, sizeof(err)) < 0) {
		doctor_add(dr, "daemon", DOC_FAIL, t.kind == DCLIENT_TCP ?
			   "start stagehandd (systemctl start stagehandd); check ListenAddress= on "
			   "the daemon, the firewall, and that munged runs here and there with the "
			   "same key" : "start stagehandd (systemctl start stagehandd) on this host, "
			   "or give this node Server=HOST:PORT", "%s (target from %s)", err, how);
		return;
	}
	j = json_loads(resp.body ? resp.body : "", 0, NULL);
	if (resp.status != 200 || !json_is_object(j)) {
		doctor_add(dr, "daemon", DOC_FAIL, resp.status == 401 ? "check that munged runs "
			   "on both hosts with the same /etc/munge/munge.key and clocks agree" :
			   "read stagehandd's log", "%s answered HTTP %d: %.300s", t.label,
			   resp.status, resp.body ? resp.body : "");
	} else {
		const char *v = json_string_value(json_object_get(j, "version"));

		snprintf(dr->daemon_version, sizeof(dr->daemon_version), "%s", v ? v : "?");
		_daemon_scratch(dr, j);
		doctor_add(dr, "daemon", DOC_OK, NULL, "stagehandd %s answers on %s (%s, target "
			   "from %s)", dr->daemon_version, t.label, t.kind == DCLIENT_TCP ?
			   "TCP + MUNGE" : "UNIX socket", how);
		if (first && strcmp(dr->daemon_version, PACKAGE_VERSION) != 0)
			doctor_add(dr, "daemon", DOC_WARN, "install the same stagehand version on "
				   "every host", "stagehandd is %s but this stagehand is %s",
				   dr->daemon_version, PACKAGE_VERSION);
		if (first)
			_check_drain(dr, json_object_get(j, "drain"));
	}
	json_decref(j);
	dclient_resp_free(&resp);
}

/* The daemon as the plugin reaches it (the plugstack line), else as the
   command line or stagehand.conf say. */
static void _check_daemon(struct doctor *dr, const char *server, const char *sock)
{
	const char *how = "command line";

	if (!server && !sock && dr->have_plugin) {
		server = dr->args.server;
		sock = dr->args.socket;
		how = "the plugstack line";
	} else if (!server && !sock) {
		how = "stagehand.conf";
	}
	_daemon_health(dr, server, sock, how);
}

/* The empty string counts as unset, as for the CLI. */
static const char *_env(const char *name)
{
	const char *v = getenv(name);

	return v && *v ? v : NULL;
}

/*
 * The daemon as users' stagehand on this host reaches it (cli/client.c's
 * order): --server/--socket, STAGEHAND_SERVER/STAGEHAND_SOCKET, Server=,
 * else SocketPath=, which only works on the daemon's own host.
 */
static void _check_client(struct doctor *dr, const char *server, const char *sock)
{
	const struct conf *c = dr->conf;
	char how[PATH_MAX + 64];
	struct stat st;

	if (server || sock) {
		snprintf(how, sizeof(how), "the command line");
	} else if ((server = _env("STAGEHAND_SERVER"))) {
		snprintf(how, sizeof(how), "STAGEHAND_SERVER in the environment");
	} else if ((sock = _env("STAGEHAND_SOCKET"))) {
		snprintf(how, sizeof(how), "STAGEHAND_SOCKET in the environment");
	} else if (c->server) {
		server = c->server;
		snprintf(how, sizeof(how), "Server= at %s:%d", dr->conf_path,
			 conf_key_line(c, "Server"));
	} else {
		sock = c->socket_path;
		if (stat(sock, &st) < 0) {
			doctor_add(dr, "server", DOC_FAIL, NULL, "%s sets no Server=, so stagehand "
				   "here looks for the daemon's UNIX socket: stat %s: %s", dr->conf_path,
				   sock, strerror(errno));
			doctor_hint(dr, "add Server=HOST:PORT (the daemon host's ListenAddress=) "
				    "to %s", dr->conf_path);
			return;
		}
		snprintf(how, sizeof(how), "SocketPath= of %s (no Server=; the socket is on this "
			 "host)", dr->conf_path);
	}
	doctor_add(dr, "server", DOC_OK, NULL, "stagehand here reaches the daemon at %s (from %s)",
		   server ? server : sock, how);
	_daemon_health(dr, server, server ? NULL : sock, how);
}

/* The daemon's host: it answers on its socket and on ListenAddress=. */
static void _check_listen(struct doctor *dr)
{
	const struct conf *c = dr->conf;
	char hp[300], how[PATH_MAX + 64];
	const char *h = c->listen_host;

	snprintf(how, sizeof(how), "SocketPath= of %s", dr->conf_path);
	_daemon_health(dr, NULL, c->socket_path, how);
	if (!h) {
		doctor_add(dr, "daemon", DOC_OK, NULL, "%s sets no ListenAddress=: the daemon is "
			   "reached on this host only (nodes and login hosts need it)", dr->conf_path);
		return;
	}
	/* A wildcard address is probed on the loopback. */
	if (!strcmp(h, "0.0.0.0") || !strcmp(h, "*") || !*h)
		h = "127.0.0.1";
	else if (!strcmp(h, "::"))
		h = "::1";
	if (strchr(h, ':'))
		snprintf(hp, sizeof(hp), "[%s]:%u", h, c->listen_port);
	else
		snprintf(hp, sizeof(hp), "%s:%u", h, c->listen_port);
	snprintf(how, sizeof(how), "ListenAddress= at %s:%d", dr->conf_path,
		 conf_key_line(c, "ListenAddress"));
	_daemon_health(dr, hp, NULL, how);
}

static void _check_munge(struct doctor *dr)
{
	char *cred = NULL;
	void *payload = NULL;
	int plen = 0;
	uid_t uid;
	gid_t gid;
	munge_err_t e = munge_encode(&cred, NULL, "stagehand-doctor", 16);

	if (e != EMUNGE_SUCCESS) {
		doctor_add(dr, "munge", DOC_FAIL, "start munged (systemctl start munge) on this "
			   "node; TCP clients and the plugin need it", "munge_encode: %s",
			   munge_strerror(e));
		return;
	}
	e = munge_decode(cred, NULL, &payload, &plen, &uid, &gid);
	if (e != EMUNGE_SUCCESS || plen != 16 || memcmp(payload, "stagehand-doctor", 16) ||
	    uid != getuid())
		doctor_add(dr, "munge", DOC_FAIL, "check munged's log and /etc/munge/munge.key",
			   "munge round trip: %s (uid %u, expected %u)", e == EMUNGE_SUCCESS ?
			   "payload or identity changed" : munge_strerror(e), (unsigned)uid,
			   (unsigned)getuid());
	else
		doctor_add(dr, "munge", DOC_OK, NULL, "a credential encoded and decoded here "
			   "carries uid %u", (unsigned)uid);
	free(cred);
	free(payload);
}

/* ---- output ---- */

static const char *_st_name(enum doctor_status s)
{
	static const char *n[] = { "ok", "warn", "fail", "skip" };

	return n[s];
}

static int _print(const struct doctor *dr, int json)
{
	int failed = 0;

	for (int i = 0; i < dr->n; i++)
		failed |= dr->r[i].status == DOC_FAIL;
	if (json) {
		json_t *arr = json_array(), *o;
		char *s;

		for (int i = 0; i < dr->n; i++)
			json_array_append_new(arr, json_pack("{s:s,s:s,s:s,s:s}", "check",
					      dr->r[i].name, "status", _st_name(dr->r[i].status),
					      "message", dr->r[i].message, "hint", dr->r[i].hint));
		o = json_pack("{s:b,s:s,s:s,s:o}", "ok", !failed, "version", PACKAGE_VERSION,
			      "role", doctor_role_name(dr->role), "checks", arr);
		s = o ? json_dumps(o, JSON_INDENT(2)) : NULL;
		if (s)
			printf("%s\n", s);
		free(s);
		json_decref(o);
	} else {
		for (int i = 0; i < dr->n; i++) {
			printf("%-4s %-10s %s\n", _st_name(dr->r[i].status), dr->r[i].name,
			       dr->r[i].message);
			if (dr->r[i].hint[0] && dr->r[i].status != DOC_OK)
				printf("     %-10s fix: %s\n", "", dr->r[i].hint);
		}
		printf("stagehand doctor%s%s%s: %s\n", dr->role ? " (role " : "",
		       dr->role ? doctor_role_name(dr->role) : "", dr->role ? ")" : "",
		       failed ? "problems found (see 'fix:' lines)" : "no problems found");
	}
	return failed ? 1 : 0;
}

/* The checks of run (DC_* bits) in their order; the slurm.conf facts
   feed the later ones. */
static void _run_checks(struct doctor *dr, unsigned run, struct _slurm_facts *f,
			const char *slurm, const char *server, const char *sock, int lua_given)
{
	if (run & (DC_SLURM | DC_LUA_VERSION | DC_LUA_MODULES | DC_TRUSTED))
		_check_slurm(dr, slurm, f);
	/* A roled run asks slurmctld for a PluginDir slurm.conf leaves to Slurm's default. */
	if (dr->role && (run & (DC_LUA_VERSION | DC_PLUGSTACK)) && dr->slurm_conf[0] &&
	    !f->plugindir[0])
		doctor_plugindir(dr);
	if (run & DC_LUA_VERSION)
		doctor_check_lua_version(dr, lua_given);
	if (run & DC_LUA_MODULES)
		doctor_check_lua_modules(dr);
	if (run & DC_TRUSTED)
		doctor_check_trusted(dr);
	if (run & DC_PLUGSTACK)
		_check_plugstack(dr, f);
	if (run & DC_STAGEHANDD)
		doctor_check_stagehandd(dr);
	if (run & DC_STATE)
		doctor_check_state(dr);
	if (run & DC_LISTEN)
		_check_listen(dr);
	if (run & DC_CLI)
		doctor_check_cli(dr);
	if (run & DC_SBATCH)
		doctor_check_sbatch(dr);
	if (run & DC_DAEMON)
		_check_daemon(dr, server, sock);
	if (run & DC_CLIENT)
		_check_client(dr, server, sock);
	if (run & DC_PLUGSTACK)
		_check_plugin_scratch(dr);
	if (run & DC_MUNGE)
		_check_munge(dr);
	if (run & DC_XATTR)
		doctor_check_xattrs(dr);
	if (run & DC_SCRATCH)
		doctor_check_scratch(dr);
	if (run & DC_ARCHIVE)
		doctor_check_archive(dr);
	if (run & DC_LUA)
		doctor_check_lua(dr);
}

static void _usage(FILE *fp)
{
	fprintf(fp,
		"usage: stagehand doctor [--role ROLE] [--json] [--config FILE] [--slurm-conf FILE]\n"
		"                        [--lua PROGRAM] [--socket PATH | --server HOST:PORT]\n"
		"\n"
		"Check this node's stagehand setup: slurm.conf, the plugstack line, the daemon,\n"
		"MUNGE, scratch xattrs and permissions, and the Lua hooks' version and site\n"
		"settings against stagehand.conf. Each problem comes with a fix.\n"
		"\n"
		"  --role ROLE        check what this kind of host needs instead:\n"
		"                     controller  slurm.conf's Lua hooks, the Lua release Slurm\n"
		"                                 loads, the scripts and modules, site settings,\n"
		"                                 TrustedUids and SlurmUser, the daemon, MUNGE\n"
		"                     daemon      stagehandd --check-config, StateDB's directory,\n"
		"                                 SocketPath= and ListenAddress= answer, MUNGE,\n"
		"                                 scratch roots, ArchiveRoot\n"
		"                     node        the plugstack line, its Slurm release and\n"
		"                                 scratch= (the daemon's first ScratchRoots),\n"
		"                                 Server=, the daemon, MUNGE, scratch roots\n"
		"                     login       stagehand and sbatch, Server=, the daemon, MUNGE\n"
		"  --json             one JSON document: {\"ok\", \"version\", \"role\", \"checks\": [...]}\n"
		"  --config FILE      stagehand.conf (default %s, env STAGEHAND_CONF)\n"
		"  --slurm-conf FILE  slurm.conf (default SlurmConf=, SLURM_CONF, /etc/slurm/slurm.conf)\n"
		"  --lua PROGRAM      Lua interpreter for the hooks (default lua5.1)\n"
		"  --socket, --server the daemon (default: the plugstack line's, else stagehand.conf's)\n"
		"\n"
		"Exit status: 0 no check failed, 1 a check failed, 2 usage error.\n",
		CONF_DEFAULT_FILE);
}

int cmd_doctor(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "json", no_argument, NULL, 'j' },
		{ "role", required_argument, NULL, 'r' },
		{ "config", required_argument, NULL, 'c' },
		{ "slurm-conf", required_argument, NULL, 's' },
		{ "lua", required_argument, NULL, 'l' },
		{ "socket", required_argument, NULL, 'S' },
		{ "server", required_argument, NULL, 'T' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct doctor dr;
	struct _slurm_facts f;
	const char *conf_path = getenv("STAGEHAND_CONF"), *slurm = NULL;
	const char *sock = NULL, *server = NULL;
	struct conf *c;
	char err[1024];
	int json = 0, o, rc, role = DOCTOR_ROLE_DEFAULT, lua_given = 0;
	unsigned run;

	if (!conf_path || !*conf_path)
		conf_path = CONF_DEFAULT_FILE;
	memset(&dr, 0, sizeof(dr));
	snprintf(dr.lua_bin, sizeof(dr.lua_bin), "lua5.1");
	snprintf(dr.plugindir, sizeof(dr.plugindir), "%s", STAGEHAND_SLURM_PLUGINDIR);
	dr.plugindir_from = "the build's default";
	optind = 1;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (o) {
		case 'j': json = 1; break;
		case 'c': conf_path = optarg; break;
		case 's': slurm = optarg; break;
		case 'l':
			snprintf(dr.lua_bin, sizeof(dr.lua_bin), "%s", optarg);
			lua_given = 1;
			break;
		case 'r':
			role = doctor_role_parse(optarg);
			if (role < 0) {
				fprintf(stderr, "stagehand doctor: unknown role '%s' (valid roles: %s)\n",
					optarg, doctor_role_list());
				return 2;
			}
			break;
		case 'S': sock = optarg; break;
		case 'T': server = optarg; break;
		case 'h': _usage(stdout); return 0;
		default: _usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "stagehand doctor: unexpected argument '%s'\n", argv[optind]);
		return 2;
	}
	c = conf_create();
	if (!c) {
		fprintf(stderr, "stagehand doctor: out of memory\n");
		return 2;
	}
	dr.conf = c;
	dr.conf_path = conf_path;
	dr.role = (enum doctor_role)role;
	run = doctor_role_checks(dr.role);
	if (conf_parse_file(c, conf_path, err, sizeof(err)) < 0 ||
	    conf_validate(c, err, sizeof(err)) < 0) {
		doctor_add(&dr, "config", DOC_FAIL, "correct that line ('stagehandd --check-config' "
			   "checks the file), or give the right file with --config", "%s", err);
		/* The rest still runs on the defaults: it may find more to fix. */
		conf_destroy(c);
		c = conf_create();
		dr.conf = c;
		if (!c)
			return 2;
	} else {
		doctor_add(&dr, "config", DOC_OK, NULL, "%s is valid", conf_path);
	}
	memset(&f, 0, sizeof(f));
	_run_checks(&dr, run, &f, slurm, server, sock, lua_given);
	rc = _print(&dr, json);
	conf_destroy(c);
	return rc;
}
