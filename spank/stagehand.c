/*
 * stagehand.c - the SPANK plugin: stagehand in the job's own context.
 *
 * Owns, for the batch step of every job (with or without #DATA lines):
 *   init_post_opt (slurmstepd, root, before the tasks exist): tell
 *              stagehandd the job starts (POST /v1/jobs/{id}/start), so
 *              after-job transfers on its file systems step aside at once;
 *              at most START_TIMEOUT_MS, never spooled, never fails the job;
 * and for the batch step of a job whose script has #DATA lines:
 *   user_init  (slurmstepd, job owner's euid, in the working directory):
 *              read the batch script, build the expanded plan;
 *   task_init_privileged (the task, root, before it becomes the owner):
 *              with xattr_ns=trusted only: have the declared directories
 *              created by a child that is the job owner, and label the
 *              descriptors it hands back with trusted.* (privlabel.h);
 *   task_init  (the task, as the job owner, just before exec): report any
 *              problem found so far; with xattr_ns=user create and label
 *              the declared directories; export STAGEHAND_*, confirm that
 *              stage-in is complete;
 *   task_exit  (slurmstepd, root): remember the script's wait status;
 *   exit       (slurmstepd, root): tell stagehandd the job ended, or spool
 *              the event; deliver older spooled events first.
 * Must never: crash or exit slurmstepd, block it longer than the configured
 * timeouts, act on steps other than the batch step, or touch user data as
 * root (directories are made as the owner; root only labels descriptors the
 * owner opened, and only directories the owner owns). See docs/spank.md.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SLURM_COMPAT_SPANK
#include "monoclock.h"
#include "slurm_compat.h"

#include "jobdir.h"
#include "jobplan.h"
#include "plugargs.h"
#include "privlabel.h"
#include "conf.h"
#include "dclient.h"
#include "spool.h"

SPANK_PLUGIN(stagehand, 1);

/* The Slurm release this plugin is built for, as 'stagehand doctor' reads
   it from the file (cli/doctor_release.c). */
__attribute__((used)) const char stagehand_built_for_slurm[] =
	"stagehand-built-for-slurm=" STAGEHAND_SLURM_RELEASE;

#define PFX "stagehand: "

/* Budget for the job-start event: a late one is useless, and the job waits. */
#define START_TIMEOUT_MS 300

/* Budget for creating a job's directories as the owner in trusted mode. */
#define TRUSTED_DIRS_TIMEOUT_MS 30000
/* The refusal message shared from the task to slurmstepd (one page). */
#define REFUSED_MAX 4096
#define SLUID_MAX 40

/* State of this slurmstepd (one job step); task_init sees a forked copy. */
static struct {
	bool active;             /* batch step of a job with a plan */
	bool batch;              /* this is the batch step */
	struct plugargs args;
	struct dclient_target daemon;  /* where stagehandd is (dclient_find) */
	struct jobplan *plan;    /* owned */
	unsigned long job_id;
	unsigned long array_job_id;  /* array tasks: the array's job id (%A), else 0 */
	uid_t uid;
	gid_t gid;
	char user[256];
	char *sluid;             /* the run's SLUID (SLURM_JOB_SLUID, Slurm 25.11+) or "",
				    SLUID_MAX bytes after refused's on the same shared
				    page: Slurm sets the variable in the task's
				    environment only, read in task_init. NULL if none. */
	char workdir[PATH_MAX];
	bool have_status;
	int status;              /* wait status of the batch script */
	bool bad_args;           /* plugstack.conf arguments did not parse */
	char fail[1024];         /* a problem found before the task started,
				    reported (and acted on) in task_init */
	bool trusted;            /* xattr_ns=trusted: root labels */
	bool dirs_done;          /* task_init_privileged prepared the dirs */
	char dirs_fail[2048];    /* ... or why it could not (for task_init) */
	char *refused;           /* why task_init refused the job's directories, sent in
				    the end event so the daemon makes no after-job
				    transfers (it checks again itself). A MAP_SHARED page
				    made before the task is forked: task_init runs in the
				    task, slurm_spank_exit in slurmstepd. NULL if none. */
	bool started;            /* the daemon took the job-start event */
	bool end_sent;           /* ... and the job-end event (which clears it) */
} g;

/* slurm_error reaches both the slurmd log and the job's stderr. */
/* Remember (in the page slurmstepd shares with the task) why the job was refused. */
static void _refused(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void _refused(const char *fmt, ...)
{
	va_list ap;

	if (!g.refused)
		return;
	va_start(ap, fmt);
	vsnprintf(g.refused, REFUSED_MAX, fmt, ap);
	va_end(ap);
}

static void _user_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void _user_error(const char *fmt, ...)
{
	char msg[2048];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	slurm_error(PFX "%s", msg);
}

/* At job end, slurm_error would also land in the job's stderr: a daemon
 * being down is the admin's business, so it goes to the slurmd log only. */
static void _log_warn(const char *msg)
{
	slurm_info(PFX "%s", msg);
}

/* Read at most max bytes of path. Returns malloc'd bytes (owned) or NULL. */
static char *_read_script(const char *path, size_t max, size_t *len,
			  char *err, size_t errlen)
{
	struct stat st;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);

	if (fd < 0) {
		snprintf(err, errlen, "cannot open the batch script %s: %s", path,
			 strerror(errno));
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "the batch script %s is not a regular file", path);
		close(fd);
		return NULL;
	}
	if ((size_t)st.st_size > max) {
		snprintf(err, errlen, "the batch script %s is %lld bytes, over the %zu "
			 "bytes this plugin reads (max_script_kb=)", path,
			 (long long)st.st_size, max);
		close(fd);
		return NULL;
	}
	char *buf = malloc((size_t)st.st_size + 1);
	size_t off = 0;
	if (buf == NULL) {
		snprintf(err, errlen, "out of memory");
		close(fd);
		return NULL;
	}
	while (off < (size_t)st.st_size) {
		ssize_t r = read(fd, buf + off, (size_t)st.st_size - off);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "cannot read the batch script %s: %s", path,
				 strerror(errno));
			free(buf);
			close(fd);
			return NULL;
		}
		if (r == 0)
			break;
		off += (size_t)r;
	}
	close(fd);
	buf[off] = '\0';
	*len = off;
	return buf;
}

/* Remember a problem for task_init; always 0 (see g.fail). */
static int _defer(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int _defer(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(g.fail, sizeof(g.fail), fmt, ap);
	va_end(ap);
	return 0;
}

/*
 * Where the daemon is: plugstack server= or socket=, else stagehand.conf
 * (conf=, or the default file if it exists) Server=, else its SocketPath.
 */
static int _find_daemon(char *err, size_t errlen)
{
	char e[1024];

	if (dclient_find(&g.daemon, g.args.server, g.args.socket,
			 g.args.conf[0] ? g.args.conf : CONF_DEFAULT_FILE,
			 g.args.conf[0] != '\0', e, sizeof(e)) < 0) {
		snprintf(err, errlen, "cannot tell where stagehandd is: %.880s (fix stagehand.conf, "
			 "or give server= or socket= in plugstack.conf)", e);
		return -1;
	}
	return 0;
}

int slurm_spank_init(spank_t sp, int ac, char **av)
{
	char err[1024];
	uint32_t stepid = 0;

	memset(&g, 0, sizeof(g));
	plugargs_init(&g.args);
	bool bad = plugargs_parse(&g.args, ac, av, err, sizeof(err)) < 0;
	if (spank_context() != S_CTX_REMOTE) {
		if (bad && spank_context() == S_CTX_SLURMD)
			slurm_error(PFX "plugstack.conf: %s; batch jobs on this node "
				    "are refused until it is fixed", err);
		return 0;
	}
	if (spank_get_item(sp, S_JOB_STEPID, &stepid) != ESPANK_SUCCESS ||
	    stepid != SLURM_BATCH_SCRIPT)
		return 0;
	g.batch = true;
	g.bad_args = bad;
	if (!bad && _find_daemon(err, sizeof(err)) < 0) {
		_defer("%s", err);
		g.bad_args = bad = true;
	}
	g.refused = mmap(NULL, REFUSED_MAX + SLUID_MAX, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
			 -1, 0);
	if (g.refused == MAP_FAILED)
		g.refused = NULL;	/* the daemon's own check still applies */
	g.sluid = g.refused ? g.refused + REFUSED_MAX : NULL;
	g.trusted = !bad && strcmp(g.args.xattr_ns, "trusted") == 0;
	if (bad) {
		/* Refused in task_init: failing here (or in user_init) would
		 * make Slurm drain the node for a "launch failure". */
		_defer("plugstack.conf: %s", err);
		g.args.fail_on_error = true;
	}
	return 0;
}

/* NAME=value from the job's environment, or NULL. Borrowed from Slurm. */
static const char *_job_env(spank_t sp, const char *name)
{
	char **env = NULL;
	size_t n = strlen(name);

	if (spank_get_item(sp, S_JOB_ENV, &env) != ESPANK_SUCCESS || env == NULL)
		return NULL;
	for (char **e = env; *e; e++)
		if (strncmp(*e, name, n) == 0 && (*e)[n] == '=')
			return *e + n + 1;
	return NULL;
}

/*
 * The job-start event (docs/spank.md): every batch job, plan or not, since
 * the point is to keep after-job transfers off the file systems that any
 * running job computes on. Root, before the tasks are forked; the working
 * directory is not known yet (slurmstepd changes to it later), so the
 * job's PWD (falling back to SLURM_SUBMIT_DIR) stands for it, with the
 * job's directory under the scratch root. A short, single attempt.
 */
static void _send_start(spank_t sp)
{
	uint32_t jid = 0;
	uid_t uid = 0;
	struct passwd pw, *res = NULL;
	char pwbuf[4096], scratch[PATH_MAX], host[256] = "", path[64], err[512];
	const char *wd = _job_env(sp, "PWD");
	struct dclient_resp resp;
	json_t *body, *dirs;
	char *text;
	long long t0 = mono_ms();

	if (spank_get_item(sp, S_JOB_ID, &jid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_UID, &uid) != ESPANK_SUCCESS)
		return;
	g.job_id = jid;
	if (!wd || wd[0] != '/')
		wd = _job_env(sp, "SLURM_SUBMIT_DIR");
	if (wd && wd[0] != '/')
		wd = NULL;
	(void)gethostname(host, sizeof(host) - 1);
	dirs = json_array();
	if (getpwuid_r(uid, &pw, pwbuf, sizeof(pwbuf), &res) == 0 && res != NULL) {
		int n = snprintf(scratch, sizeof(scratch), "%s/%s/%lu", g.args.scratch,
				 pw.pw_name, (unsigned long)jid);

		if (n > 0 && (size_t)n < sizeof(scratch) && scratch[0] == '/')
			json_array_append_new(dirs, json_string(scratch));
	}
	body = json_pack("{s:I, s:s?, s:s, s:o}", "uid", (json_int_t)uid, "work_dir", wd,
			 "node", host, "dirs", dirs);
	text = body ? json_dumps(body, JSON_COMPACT) : NULL;
	json_decref(body);
	if (text == NULL)
		return;
	snprintf(path, sizeof(path), "/v1/jobs/%lu/start", (unsigned long)jid);
	int tmo = g.args.timeout_ms > 0 && g.args.timeout_ms < START_TIMEOUT_MS ?
		  g.args.timeout_ms : START_TIMEOUT_MS;
	if (dclient_request(&g.daemon, &(struct dclient_call){ .method = "POST", .path = path,
			      .body = text, .timeout_ms = tmo }, &resp, err, sizeof(err)) < 0) {
		slurm_info(PFX "job %lu: job-start event not sent (%s); after-job "
			   "transfers yield once stagehandd sees the job in slurmctld",
			   (unsigned long)jid, err);
	} else {
		if (resp.status == 202)
			g.started = true;
		else
			slurm_info(PFX "job %lu: stagehandd answered HTTP %d to the job-start "
				   "event: %.200s", (unsigned long)jid, resp.status,
				   resp.body ? resp.body : "");
		dclient_resp_free(&resp);
	}
	free(text);
	slurm_debug(PFX "job %lu: job-start event took %lld ms", (unsigned long)jid,
		    mono_ms() - t0);
}

int slurm_spank_init_post_opt(spank_t sp, int ac, char **av)
{
	(void)ac;
	(void)av;
	if (!g.batch || spank_context() != S_CTX_REMOTE || g.bad_args || geteuid() != 0)
		return 0;
	_send_start(sp);
	return 0;      /* never fail a job for the daemon */
}

/* The job ended without an end event that clears its start mark (no plan,
   or the event was not delivered): withdraw the mark, one short attempt. */
static void _withdraw_start(void)
{
	char path[64], err[512];
	struct dclient_resp resp;

	if (!g.started || g.end_sent)
		return;
	snprintf(path, sizeof(path), "/v1/jobs/%lu/start", g.job_id);
	if (dclient_request(&g.daemon, &(struct dclient_call){ .method = "DELETE", .path = path,
			      .timeout_ms = START_TIMEOUT_MS }, &resp, err, sizeof(err)) == 0)
		dclient_resp_free(&resp);
	else
		slurm_info(PFX "job %lu: job-start mark not withdrawn (%s); stagehandd "
			   "drops it when slurmctld reports the job ended", g.job_id, err);
	g.started = false;
}

/*
 * The run's SLUID, which the end event carries so that stagehandd can tell
 * this run from an earlier one of the same job, or from another job that had
 * the same id: read in the task (Slurm sets SLURM_JOB_SLUID in the task's
 * environment, not in the one user_init sees) into the page shared with
 * slurmstepd. Only where Slurm sets the variable itself (25.11 and later):
 * on older releases it would be the submitter's own.
 */
static void _job_sluid(spank_t sp)
{
#if SLURM_VERSION_NUMBER >= SLURM_VERSION_NUM(25, 11, 0)
	char v[SLUID_MAX];
	size_t n;

	if (!g.sluid || spank_getenv(sp, "SLURM_JOB_SLUID", v, (int)sizeof(v)) != ESPANK_SUCCESS)
		return;
	n = strlen(v);
	if (n == 0 || n > 32 || strspn(v, "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ"
				       "abcdefghijklmnopqrstuvwxyz") != n) {
		slurm_info(PFX "job %lu: SLURM_JOB_SLUID '%.40s' is not a SLUID: the end event "
			   "goes without one", g.job_id, v);
		return;
	}
	memcpy(g.sluid, v, n + 1);
#else
	(void)sp;
#endif
}

/* Fill the expansion context and the job's identity. */
static int _job_identity(spank_t sp, struct dsl_expand_ctx *ctx, char *jobname,
			 size_t jnlen, char *err, size_t errlen)
{
	uint32_t jid = 0, arr = 0, task = 0;
	struct passwd pw, *res = NULL;
	char pwbuf[4096];

	if (spank_get_item(sp, S_JOB_ID, &jid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_UID, &g.uid) != ESPANK_SUCCESS ||
	    spank_get_item(sp, S_JOB_GID, &g.gid) != ESPANK_SUCCESS) {
		snprintf(err, errlen, "cannot read the job id, uid or gid from Slurm");
		return -1;
	}
	g.job_id = jid;
	if (getpwuid_r(g.uid, &pw, pwbuf, sizeof(pwbuf), &res) != 0 || res == NULL) {
		snprintf(err, errlen, "job %lu: no passwd entry for uid %lu (needed for %%u)",
			 g.job_id, (unsigned long)g.uid);
		return -1;
	}
	snprintf(g.user, sizeof(g.user), "%s", pw.pw_name);
	if (spank_getenv(sp, "SLURM_JOB_NAME", jobname, (int)jnlen) != ESPANK_SUCCESS)
		jobname[0] = '\0';
	memset(ctx, 0, sizeof(*ctx));
	ctx->job_id = g.job_id;
	ctx->user = g.user;
	ctx->job_name = jobname;
	ctx->array_job_id = 0;
	ctx->array_task_id = -1;
	if (spank_get_item(sp, S_JOB_ARRAY_ID, &arr) == ESPANK_SUCCESS && arr != 0 &&
	    arr != NO_VAL &&
	    spank_get_item(sp, S_JOB_ARRAY_TASK_ID, &task) == ESPANK_SUCCESS &&
	    task != NO_VAL) {
		ctx->array_job_id = arr;
		ctx->array_task_id = (long)task;
		g.array_job_id = arr;
	}
	return 0;
}

/*
 * slurmstepd has dropped to the job owner and changed to the working
 * directory: read the script and decide whether there is anything to do.
 */
int slurm_spank_user_init(spank_t sp, int ac, char **av)
{
	char err[1024], jobname[1024];
	struct dsl_expand_ctx ctx;
	int argc = 0;
	char **argv = NULL;
	size_t len = 0;

	if (!g.batch || spank_context() != S_CTX_REMOTE || g.fail[0])
		return 0;
	if (spank_get_item(sp, S_JOB_ARGV, &argc, &argv) != ESPANK_SUCCESS || argc < 1 ||
	    argv[0] == NULL)
		return _defer("cannot read the batch script path from Slurm; #DATA lines "
			      "of this job are not handled");
	char *script = _read_script(argv[0], g.args.max_script, &len, err, sizeof(err));
	if (script == NULL)
		return _defer("%s", err);
	if (!jobplan_has_directives(script, len)) {
		free(script);      /* fast path: no #DATA, nothing to do */
		return 0;
	}
	if (getcwd(g.workdir, sizeof(g.workdir)) == NULL) {
		free(script);
		return _defer("cannot read the working directory: %s", strerror(errno));
	}
	if (_job_identity(sp, &ctx, jobname, sizeof(jobname), err, sizeof(err)) < 0) {
		free(script);
		return _defer("%s", err);
	}
	int rc = jobplan_build(script, len, NULL, &ctx, g.workdir, &g.plan, err,
			       sizeof(err));
	free(script);
	if (rc < 0)
		return _defer("job %lu: #DATA in the batch script: %s", g.job_id, err);
	g.active = g.plan != NULL;
	if (g.active)
		slurm_info(PFX "job %lu: %zu directories to prepare%s", g.job_id,
			   g.plan->ndirs, g.plan->has_stage_in ? ", stage-in to confirm" : "");
	return 0;
}

static int _setenv(spank_t sp, const char *k, const char *v)
{
	if (spank_setenv(sp, k, v ? v : "", 1) != ESPANK_SUCCESS) {
		slurm_error(PFX "job %lu: cannot set %s in the job environment", g.job_id, k);
		return -1;
	}
	return 0;
}

/* Where the walk for dir starts: the part below the working directory is
 * walked from its descriptor, so only what the user wrote is checked for
 * links; anything else is absolute and walked from "/". */
static const char *_dir_rel(const struct jobplan_dir *d)
{
	size_t wl = strlen(g.workdir);

	if (strncmp(d->abs, g.workdir, wl) == 0 && d->abs[wl] == '/')
		return d->abs + wl + 1;
	return d->abs;
}

/* xattr_ns=user: the job's directories, made and labelled as the job owner
 * (this runs in the task after it became the owner). */
static int _make_dirs(char *err, size_t errlen)
{
	int base = open(g.workdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);

	if (base < 0) {
		snprintf(err, errlen, "cannot open the working directory %s: %s", g.workdir,
			 strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < g.plan->ndirs; i++) {
		const struct jobplan_dir *d = &g.plan->dirs[i];
		char e[1024];
		int fd = jobdir_open(base, _dir_rel(d), e, sizeof(e));
		if (fd < 0) {
			snprintf(err, errlen, "#DATA line %d: %s", d->line, e);
			close(base);
			return -1;
		}
		if (jobdir_label(fd, g.args.xattr_ns, d->policy, g.job_id, g.uid, e,
				 sizeof(e)) < 0) {
			snprintf(err, errlen, "#DATA line %d: %s: %s", d->line, d->abs, e);
			close(fd);
			close(base);
			return -1;
		}
		close(fd);
	}
	close(base);
	return 0;
}

/* The job's umask (sbatch propagates it as SLURM_UMASK), or -1. */
static int _job_umask(spank_t sp)
{
	char v[16], *end;

	if (spank_getenv(sp, "SLURM_UMASK", v, sizeof(v)) != ESPANK_SUCCESS || !v[0])
		return -1;
	errno = 0;
	long m = strtol(v, &end, 8);
	if (errno || *end != '\0' || m < 0 || m > 0777)
		return -1;
	return (int)m;
}

/* xattr_ns=trusted: a child that is the job owner makes the directories;
 * root (this task, before it drops) labels the descriptors it hands back. */
static int _make_dirs_trusted(spank_t sp, char *err, size_t errlen)
{
	struct privlabel_owner o = { .uid = g.uid, .gid = g.gid, .umask = _job_umask(sp) };
	gid_t *gids = NULL;
	int ngids = 0;
	size_t failed = 0;

	if (geteuid() != 0) {
		snprintf(err, errlen, "xattr_ns=trusted, but the privileged task hook runs "
			 "as uid %lu, not root: trusted labels cannot be written",
			 (unsigned long)geteuid());
		return -1;
	}
	/* The groups Slurm gives the job (from its credential, no NSS lookup). */
	if (spank_get_item(sp, S_JOB_SUPPLEMENTARY_GIDS, &gids, &ngids) ==
	    ESPANK_SUCCESS && gids != NULL && ngids > 0) {
		o.groups = gids;
		o.ngroups = (size_t)ngids;
	} else {
		o.groups = &g.gid;
		o.ngroups = 1;
	}
	struct privlabel_dir *dirs = calloc(g.plan->ndirs, sizeof(*dirs));
	if (dirs == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	for (size_t i = 0; i < g.plan->ndirs; i++) {
		dirs[i].path = _dir_rel(&g.plan->dirs[i]);
		dirs[i].policy = g.plan->dirs[i].policy;
	}
	char e[1024];
	int rc = privlabel_prepare(g.workdir, dirs, g.plan->ndirs, &o,
				   &(struct privlabel_run){ "trusted", g.job_id, TRUSTED_DIRS_TIMEOUT_MS },
				   &failed, e, sizeof(e));
	free(dirs);
	if (rc < 0) {
		if (failed < g.plan->ndirs)
			snprintf(err, errlen, "#DATA line %d: %s: %s",
				 g.plan->dirs[failed].line, g.plan->dirs[failed].abs, e);
		else
			snprintf(err, errlen, "%s", e);
		return -1;
	}
	return 0;
}

/*
 * The task, still root, just before it becomes the job owner: the only
 * place in the task where trusted.* labels can be written. Problems are
 * kept for task_init, which reports them to the job (failing here would
 * only print Slurm's own terse message).
 */
int slurm_spank_task_init_privileged(spank_t sp, int ac, char **av)
{
	char err[2048];

	if (!g.batch || spank_context() != S_CTX_REMOTE || g.fail[0] || !g.active ||
	    !g.trusted)
		return 0;
	if (_make_dirs_trusted(sp, err, sizeof(err)) < 0)
		snprintf(g.dirs_fail, sizeof(g.dirs_fail), "%s", err);
	g.dirs_done = true;
	return 0;
}

/*
 * Where a stage_in lands, by the daemon's rule (daemon/slurm/slurm_watch.c
 * _stage_in_dest): to= absolute as is, relative under the working
 * directory; no to= in SCRATCH/USER/JOBID/input/NAME. 0, or -1 if too long.
 */
static int _input_dest(const char *src, const char *to, char *out, size_t outlen)
{
	const char *base = strrchr(src, '/');
	int n;

	base = base && base[1] ? base + 1 : src;
	if (to && to[0] == '/')
		n = snprintf(out, outlen, "%s", to);
	else if (to)
		n = snprintf(out, outlen, "%s/%s", g.workdir, to);
	else
		n = snprintf(out, outlen, "%s/%s/%lu/input/%s", g.args.scratch, g.user,
			     g.job_id, base);
	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

/*
 * The fallback when stagehandd cannot be asked (docs/spank.md): the job
 * runs, so its stage-in hold was released, which the daemon does only once
 * every input is verified at its destination (or an admin did it by hand).
 * What is left to check is that the inputs are still there: every
 * destination must exist, looked up as the job owner (this is the task,
 * after it became the owner). Returns how many were found, or -1 with the
 * first missing one in err.
 */
static int _inputs_on_disk(char *err, size_t errlen)
{
	json_t *acts = json_object_get(g.plan->plan, "actions"), *a;
	size_t i;
	int found = 0;

	json_array_foreach(acts, i, a) {
		const char *act = json_string_value(json_object_get(a, "action"));
		const char *src = json_string_value(json_object_get(a, "path"));
		const char *to = json_string_value(json_object_get(a, "to"));
		long line = (long)json_integer_value(json_object_get(a, "line"));
		char dest[PATH_MAX];
		struct stat st;

		if (act == NULL || strcmp(act, "stage_in") != 0 || src == NULL)
			continue;
		if (_input_dest(src, to, dest, sizeof(dest)) < 0) {
			snprintf(err, errlen, "#DATA line %ld: the destination of %.200s is too "
				 "long to check", line, src);
			return -1;
		}
		if (stat(dest, &st) < 0) {
			snprintf(err, errlen, "#DATA line %ld: input %.200s is not at %.400s (%s)",
				 line, src, dest, strerror(errno));
			return -1;
		}
		found++;
	}
	return found;
}

/* Pause ms milliseconds (the task may be signalled: just return early). */
static void _nap(int ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	(void)nanosleep(&ts, NULL);
}

/*
 * Ask the daemon once. 0 answered ready, 1 answered not ready (err says),
 * 2 no usable answer (err says; worth another try).
 */
static int _ask_stage_in(int tmo, char *err, size_t errlen)
{
	char path[64], e[512];
	struct dclient_resp resp;
	json_error_t jerr;

	snprintf(path, sizeof(path), "/v1/jobs/%lu", g.job_id);
	if (dclient_request(&g.daemon, &(struct dclient_call){ .method = "GET", .path = path,
			      .timeout_ms = tmo }, &resp, e, sizeof(e)) < 0) {
		snprintf(err, errlen, "%s", e);
		return 2;
	}
	if (resp.status >= 500 || resp.status == 429 || resp.status == 408) {
		snprintf(err, errlen, "stagehandd at %s answered HTTP %d (%.200s)",
			 g.daemon.label, resp.status, resp.body ? resp.body : "");
		dclient_resp_free(&resp);
		return 2;
	}
	json_t *j = resp.status == 200 ? json_loads(resp.body, 0, &jerr) : NULL;
	const char *st = json_string_value(json_object_get(json_object_get(j,
								 "stage_in"), "state"));
	int rc = 0;
	if (resp.status != 200) {
		snprintf(err, errlen, "job %lu: stagehandd answered HTTP %d when asked "
			 "about stage-in (%.200s) — contact your admin", g.job_id,
			 resp.status, resp.body ? resp.body : "");
		rc = 1;
	} else if (st == NULL) {
		snprintf(err, errlen, "job %lu: stagehandd's answer about stage-in has "
			 "no stage_in.state — contact your admin", g.job_id);
		rc = 1;
	} else if (strcmp(st, "ready") != 0) {
		snprintf(err, errlen, "job %lu: stage-in not complete (state %.32s); the "
			 "job was started before its inputs were ready — contact your admin",
			 g.job_id, st);
		rc = 1;
	}
	json_decref(j);
	dclient_resp_free(&resp);
	return rc;
}

/*
 * Confirm stage-in (docs/spank.md "When the daemon is unreachable"): ask
 * the daemon, again and again within timeout_ms while it does not answer;
 * if it never does, check the inputs on disk. 0 ready, -1 not (err says).
 */
static int _confirm_stage_in(char *err, size_t errlen)
{
	long long deadline = mono_ms() + g.args.timeout_ms;
	char why[1024] = "", e[1024];
	int tries = 0, rc;

	for (;;) {
		long long left = deadline - mono_ms();
		if (left <= 0)
			break;
		tries++;
		rc = _ask_stage_in((int)left, why, sizeof(why));
		if (rc < 2) {
			if (rc == 1)
				snprintf(err, errlen, "%s", why);
			return rc == 0 ? 0 : -1;
		}
		left = deadline - mono_ms();
		if (left > 0)
			_nap(left < 250 ? (int)left : 250);
	}
	int n = _inputs_on_disk(e, sizeof(e));
	if (n < 0) {
		snprintf(err, errlen, "job %lu: stage-in cannot be confirmed: stagehandd did "
			 "not answer (%d tries in %d ms; last: %s) and %s — contact your admin",
			 g.job_id, tries, g.args.timeout_ms, why, e);
		return -1;
	}
	slurm_info(PFX "job %lu: stagehandd did not answer (%d tries in %d ms; last: %s); "
		   "the job was released by slurmctld and its %d input%s %s on disk: "
		   "starting", g.job_id, tries, g.args.timeout_ms, why, n, n == 1 ? "" : "s",
		   n == 1 ? "is" : "are");
	return 0;
}

int slurm_spank_task_init(spank_t sp, int ac, char **av)
{
	char err[2048], buf[PATH_MAX + 64], num[32];
	int rc = 0;

	if (!g.batch || spank_context() != S_CTX_REMOTE)
		return 0;
	if (g.fail[0]) {
		_user_error("%s", g.fail);
		if (g.args.fail_on_error)
			return -1;
		slurm_error(PFX "continuing (on_error=warn)");
		return 0;
	}
	if (!g.active)
		return 0;
	_job_sluid(sp);
	snprintf(num, sizeof(num), "%lu", g.job_id);
	int n = snprintf(buf, sizeof(buf), "%s/%s/%lu/input", g.args.scratch, g.user,
			 g.job_id);
	if (n < 0 || (size_t)n >= sizeof(buf)) {
		_user_error("job %lu: scratch path too long", g.job_id);
		return g.args.fail_on_error ? -1 : 0;
	}
	if (_setenv(sp, "STAGEHAND_JOB_ID", num) < 0 ||
	    _setenv(sp, "STAGEHAND_ARCHIVE_DIRS", g.plan->archive_env) < 0 ||
	    _setenv(sp, "STAGEHAND_EXEMPT_DIRS", g.plan->exempt_env) < 0 ||
	    _setenv(sp, "STAGEHAND_INPUT_DIR", buf) < 0)
		rc = -1;
	/* An array's inputs without %a/%j are staged once for all tasks (stagehandd). */
	n = snprintf(buf, sizeof(buf), "%s/%s/%lu/shared", g.args.scratch, g.user, g.array_job_id);
	if (g.array_job_id && n > 0 && (size_t)n < sizeof(buf) &&
	    _setenv(sp, "STAGEHAND_SHARED_INPUT_DIR", buf) < 0)
		rc = -1;
	if (g.trusted) {
		if (!g.dirs_done) {
			_user_error("job %lu: xattr_ns=trusted, but the directories were not "
				    "prepared before the task started (did Slurm skip "
				    "slurm_spank_task_init_privileged?)", g.job_id);
			rc = -1;
		} else if (g.dirs_fail[0]) {
			_user_error("job %lu: %s", g.job_id, g.dirs_fail);
			_refused("%s", g.dirs_fail);
			rc = -1;
		}
	} else if (_make_dirs(err, sizeof(err)) < 0) {
		_user_error("job %lu: %s", g.job_id, err);
		_refused("%s", err);
		rc = -1;
	}
	if (g.plan->has_stage_in && _confirm_stage_in(err, sizeof(err)) < 0) {
		_user_error("%s", err);
		rc = -1;
	}
	if (rc < 0 && !g.args.fail_on_error) {
		slurm_error(PFX "job %lu: continuing (on_error=warn)", g.job_id);
		if (g.refused)	/* the job runs: the daemon checks its paths itself */
			g.refused[0] = '\0';
		rc = 0;
	}
	return rc;
}

int slurm_spank_task_exit(spank_t sp, int ac, char **av)
{
	int status = 0;

	if (!g.batch || spank_context() != S_CTX_REMOTE)
		return 0;
	if (spank_get_item(sp, S_TASK_EXIT_STATUS, &status) == ESPANK_SUCCESS) {
		g.status = status;
		g.have_status = true;
	}
	return 0;
}

/* The end event body (new reference), as in docs/api.md; the state comes
 * from the shared rule (spool.h jobend_state) applied to the wait status. */
static json_t *_end_event(void)
{
	char host[256] = "";
	struct jobend_info ji = {
		.uid = (long long)g.uid, .gid = (long long)g.gid, .user = g.user,
		.work_dir = g.workdir, .source = "spank", .plan = g.plan->plan,
		.sluid = g.sluid && g.sluid[0] ? g.sluid : NULL,
	};

	if (g.have_status && WIFEXITED(g.status)) {
		ji.have_exit = true;
		ji.exit_code = WEXITSTATUS(g.status);
	} else if (g.have_status && WIFSIGNALED(g.status)) {
		ji.have_exit = true;
		ji.sig = WTERMSIG(g.status);
	}
	(void)gethostname(host, sizeof(host) - 1);
	ji.node = host;
	json_t *ev = jobend_event(&ji);

	/* The job's directories were refused: no after-job transfers. */
	if (ev && g.refused && g.refused[0]) {
		json_t *r = json_string(g.refused);   /* NULL when a path is not UTF-8 */

		if (!r)
			r = json_string("the job's #DATA directories were refused at start");
		if (json_object_set_new(ev, "refused", r) < 0)
			slurm_error(PFX "job %lu: the end event cannot say the job was refused",
				    g.job_id);
	}
	return ev;
}

/* Deliver older spooled events; true if the daemon looked reachable. */
static bool _drain_spool(int budget_ms)
{
	struct spool_budget b = { g.args.spool_max, g.args.end_timeout_ms, budget_ms };
	struct spool_stats st;
	char err[1024];

	if (spool_deliver(g.args.spool, &g.daemon, &b, &st, _log_warn, err, sizeof(err)) < 0) {
		slurm_info(PFX "%s", err);
		return true;
	}
	if (st.delivered || st.rejected)
		slurm_info(PFX "delivered %d spooled job-end event(s), set aside %d, "
			   "%d left", st.delivered, st.rejected, st.left);
	return !st.daemon_down;
}

int slurm_spank_exit(spank_t sp, int ac, char **av)
{
	char err[1024];

	if (!g.batch || spank_context() != S_CTX_REMOTE || g.bad_args)
		return 0;
	if (geteuid() != 0) {
		/* Only root may write the spool; this is not expected. */
		if (g.active)
			slurm_error(PFX "job %lu: slurm_spank_exit runs as uid %lu, not "
				    "root; job-end event not sent", g.job_id,
				    (unsigned long)geteuid());
		goto out;
	}
	/* Older events first: one timeout at most when the daemon is down. */
	bool reachable = _drain_spool(2 * g.args.end_timeout_ms);
	if (!g.active) {
		if (reachable)
			_withdraw_start();
		goto out;
	}

	json_t *ev = _end_event();
	if (ev == NULL) {
		slurm_error(PFX "job %lu: cannot build the job-end event (out of memory?)",
			    g.job_id);
		goto out;
	}
	enum spool_send r = SPOOL_RETRY;
	if (reachable) {
		r = spool_send_event(&g.daemon, g.job_id, ev, g.args.end_timeout_ms,
				     err, sizeof(err));
	} else {
		snprintf(err, sizeof(err), "stagehandd did not answer for older events");
	}
	if (r == SPOOL_SENT) {
		g.end_sent = true;
		slurm_info(PFX "job %lu: job-end event delivered", g.job_id);
	} else {
		char e2[1024];
		if (spool_prepare_dir(g.args.spool, e2, sizeof(e2)) < 0 ||
		    spool_write(g.args.spool, g.job_id, ev, e2, sizeof(e2)) < 0) {
			slurm_error(PFX "job %lu: job-end event LOST: not delivered (%s) "
				    "and not spooled (%s); run 'stagehand job-end %lu' by "
				    "hand", g.job_id, err, e2, g.job_id);
		} else if (r == SPOOL_REJECTED) {
			spool_set_aside(g.args.spool, g.job_id, _log_warn, err);
		} else {
			slurm_info(PFX "job %lu: job-end event spooled in %s (%s); it is "
				   "sent at a later job end on this node", g.job_id,
				   g.args.spool, err);
		}
	}
	json_decref(ev);
	if (reachable)
		_withdraw_start();
out:
	jobplan_free(g.plan);
	g.plan = NULL;
	g.active = false;
	if (g.refused)
		munmap(g.refused, REFUSED_MAX + SLUID_MAX);
	g.refused = NULL;
	g.sluid = NULL;
	return 0;     /* never fail the step or drain the node at job end */
}
