/* notify.c - see notify.h. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "log.h"
#include "notify.h"
#include "queue_audit.h"
#include "spawn_attr.h"
#include "urlredact.h"

#define NOTIFY_POLL_MS 1000
#define NOTIFY_ERR_MAX 400

struct _child {
	pid_t pid;                   /* 0 = free slot */
	int err_fd;                  /* read end of its stderr; -1 closed */
	int64_t deadline_ms;
	int killed;
	int64_t req_id, job_id;
	char err[NOTIFY_ERR_MAX + 1];
	size_t err_len;
};

struct notify {
	int64_t since;
	int64_t next_poll_ms;
	struct _child c[NOTIFY_MAX];
};

/* What the program is told; filled from the queue row (copies). */
struct _event {
	char vars[13][4200];
	int nvars;
	char job[24], state[16], src[4096], dst[4096], user[64], err[4096];
	int64_t id, job_id;
};

struct notify *notify_create(int64_t since)
{
	struct notify *n = calloc(1, sizeof(*n));

	if (n)
		n->since = since;
	return n;
}

static void _var(struct _event *e, const char *name, const char *val)
{
	if (e->nvars < 13 && snprintf(e->vars[e->nvars], sizeof(e->vars[0]), "%s=%s", name,
				      val ? val : "") < (int)sizeof(e->vars[0]))
		e->nvars++;
}

static void _var_num(struct _event *e, const char *name, long long val)
{
	char num[32];

	snprintf(num, sizeof(num), "%lld", val);
	_var(e, name, num);
}

static void _take(const struct queue_notice *q, void *arg)
{
	struct _event *e = arg;
	/* failed_final is "failed" to the site: a retry by hand may still follow. */
	const char *qs = q->state ? q->state : "";
	const char *state = !strcmp(qs, "done") ? "done" : !strcmp(qs, "cancelled") ? "cancelled" :
			    "failed";

	e->id = q->id;
	e->job_id = q->job_id;
	snprintf(e->job, sizeof(e->job), "%lld", (long long)q->job_id);
	snprintf(e->state, sizeof(e->state), "%s", state);
	snprintf(e->user, sizeof(e->user), "%s", q->user ? q->user : "");
	/* The site's program sees no URL's query: it may hold a secret (urlredact.h). */
	url_redact(q->source ? q->source : "", e->src, sizeof(e->src));
	url_redact(q->dest ? q->dest : "", e->dst, sizeof(e->dst));
	url_redact(q->error ? q->error : "", e->err, sizeof(e->err));
	_var(e, "PATH", "/usr/sbin:/usr/bin:/sbin:/bin");
	/* The kind: archive, stage_in or stage_out (done, failed or cancelled). */
	_var(e, "STAGEHAND_EVENT", q->action ? q->action : "archive");
	_var(e, "STAGEHAND_STATE", state);
	_var(e, "STAGEHAND_JOB_ID", e->job);
	_var(e, "STAGEHAND_USER", e->user);
	_var_num(e, "STAGEHAND_UID", (long long)q->uid);
	_var_num(e, "STAGEHAND_REQUEST_ID", (long long)q->id);
	_var(e, "STAGEHAND_SOURCE", e->src);
	_var(e, "STAGEHAND_DEST", e->dst);
	_var_num(e, "STAGEHAND_FILES", (long long)q->files);
	_var_num(e, "STAGEHAND_BYTES", (long long)q->bytes);
	_var(e, "STAGEHAND_ERROR", e->err);
}

/* Start the program for e in slot k. */
static void _spawn(struct notify *n, struct _child *k, char **cmd, int timeout,
		   const struct _event *e, int64_t now_ms)
{
	char *argv[64 + 6], *envp[14];
	int p[2], rc, a = 0;
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t at;

	(void)n;
	for (char **c = cmd; *c && a < 64; c++)
		argv[a++] = *c;
	/* Fixed positions after the site's own arguments: JOB USER STATE SOURCE DEST. */
	argv[a++] = (char *)e->job;
	argv[a++] = (char *)e->user;
	argv[a++] = (char *)e->state;
	argv[a++] = (char *)e->src;
	argv[a++] = (char *)e->dst;
	argv[a] = NULL;
	for (int i = 0; i < e->nvars; i++)
		envp[i] = (char *)e->vars[i];
	envp[e->nvars] = NULL;
	if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0) {
		log_err("NotifyCommand for request %lld (job %s): pipe: %s; not run",
			(long long)e->id, e->job, strerror(errno));
		return;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	/* Its own process group, so a timeout also ends what it started. */
	rc = spawn_attr_init(&at, POSIX_SPAWN_SETPGROUP);
	if (rc == 0 && (rc = posix_spawnattr_setpgroup(&at, 0)) != 0)
		posix_spawnattr_destroy(&at);
	if (rc != 0) {
		posix_spawn_file_actions_destroy(&fa);
		close(p[0]);
		close(p[1]);
		log_err("NotifyCommand for request %lld (job %s): posix_spawnattr: %s; not run",
			(long long)e->id, e->job, strerror(rc));
		return;
	}
	rc = posix_spawn(&k->pid, argv[0], &fa, &at, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	posix_spawnattr_destroy(&at);
	close(p[1]);
	if (rc != 0) {
		k->pid = 0;
		close(p[0]);
		log_err("NotifyCommand %s for request %lld (job %s, %s): cannot run: %s; check "
			"NotifyCommand in stagehand.conf", argv[0], (long long)e->id, e->job,
			e->state, strerror(rc));
		return;
	}
	k->err_fd = p[0];
	k->err_len = 0;
	k->killed = 0;
	k->req_id = e->id;
	k->job_id = e->job_id;
	k->deadline_ms = now_ms + (int64_t)timeout * 1000;
	log_debug("NotifyCommand started for request %lld (job %s, %s), pid %d",
		  (long long)e->id, e->job, e->state, (int)k->pid);
}

static void _drain_err(struct _child *k)
{
	char buf[512];
	ssize_t got = -1;	/* stays -1 when there is no pipe to read */

	while (k->err_fd >= 0 && (got = read(k->err_fd, buf, sizeof(buf))) != 0) {
		if (got < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				close(k->err_fd), k->err_fd = -1;
			return;
		}
		if (k->err_len < NOTIFY_ERR_MAX) {
			size_t take = (size_t)got < NOTIFY_ERR_MAX - k->err_len ?
				      (size_t)got : NOTIFY_ERR_MAX - k->err_len;

			memcpy(k->err + k->err_len, buf, take);
			k->err_len += take;
		}
	}
	if (k->err_fd >= 0 && got == 0) {
		close(k->err_fd);
		k->err_fd = -1;
	}
}

static void _reap(struct _child *k, int64_t now_ms, int timeout)
{
	int status;
	pid_t r;

	_drain_err(k);
	r = waitpid(k->pid, &status, WNOHANG);
	if (r == 0) {
		if (!k->killed && now_ms >= k->deadline_ms) {
			kill(-k->pid, SIGKILL);
			k->killed = 1;
			log_err("NotifyCommand for request %lld (job %lld) ran longer than "
				"NotifyTimeout=%d s: killed", (long long)k->req_id,
				(long long)k->job_id, timeout);
		}
		return;
	}
	if (r < 0 && errno == EINTR)
		return;
	_drain_err(k);
	for (size_t i = 0; i < k->err_len; i++)
		if (k->err[i] == '\n' || k->err[i] == '\r' || k->err[i] == '\0')
			k->err[i] = ' ';
	k->err[k->err_len] = '\0';
	if (r > 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0)
		log_info("NotifyCommand for request %lld (job %lld) done", (long long)k->req_id,
			 (long long)k->job_id);
	else if (!k->killed)
		log_err("NotifyCommand for request %lld (job %lld) failed: %s %d%s%s",
			(long long)k->req_id, (long long)k->job_id,
			r > 0 && WIFSIGNALED(status) ? "killed by signal" : "exit status",
			r > 0 && WIFSIGNALED(status) ? WTERMSIG(status) :
			r > 0 ? WEXITSTATUS(status) : -1, k->err_len ? "; stderr: " : "", k->err);
	if (k->err_fd >= 0)
		close(k->err_fd);
	k->err_fd = -1;
	k->pid = 0;
}

void notify_tick(struct notify *n, struct daemon *d, int64_t now_ms)
{
	char **cmd = d->conf->notify_argv, err[512];
	int timeout = d->conf->notify_timeout, busy = 0;

	for (int i = 0; i < NOTIFY_MAX; i++) {
		if (n->c[i].pid)
			_reap(&n->c[i], now_ms, timeout);
		busy += n->c[i].pid != 0;
	}
	if (!cmd || now_ms < n->next_poll_ms)
		return;
	n->next_poll_ms = now_ms + NOTIFY_POLL_MS;
	for (int i = 0; i < NOTIFY_MAX && busy < NOTIFY_MAX; i++) {
		struct _event *e;
		int rc;

		if (n->c[i].pid)
			continue;
		e = calloc(1, sizeof(*e));
		if (!e)
			return;
		rc = queue_notice_next(d->q, n->since, _take, e, err, sizeof(err));
		if (rc < 0)
			log_err("notifications: %s", err);
		if (rc == 1) {
			_spawn(n, &n->c[i], cmd, timeout, e, now_ms);
			busy += n->c[i].pid != 0;
		}
		free(e);
		if (rc != 1)
			return;
	}
}

void notify_destroy(struct notify *n)
{
	if (!n)
		return;
	for (int i = 0; i < NOTIFY_MAX; i++)
		if (n->c[i].pid) {
			kill(-n->c[i].pid, SIGKILL);
			waitpid(n->c[i].pid, NULL, 0);
			if (n->c[i].err_fd >= 0)
				close(n->c[i].err_fd);
		}
	free(n);
}
