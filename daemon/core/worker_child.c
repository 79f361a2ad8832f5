/*
 * worker_child.c - the worker process: what runs between the fork and the
 * transfer's end, in the child (worker.c is the daemon's side).
 *
 * Owns: the child's signals and descriptors, its I/O class, the drop to the
 * request's owner (verified id by id) and the transfer context it hands to
 * the backend.
 *
 * Must never: touch a user path before the drop (the one exception is the
 * url backend's site files, which only root reads, and which are not the
 * user's), or return to the daemon's code (it _exits).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <jansson.h>
#include <pthread.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "usercache.h"
#include "worker.h"
#include "cleanup.h"
#include "fdclose.h"
#include "worker_int.h"
#include "xfer.h"
#include "xfer_endpoint.h"
#include "xfer_engine.h"
#include "xfer_range.h"

/* ---- the worker process ---- */

static volatile sig_atomic_t _stop;

/* SIGTERM: stop and keep what a resume needs; SIGUSR1: cancelled, give it up too. */
static void _on_term(int sig)
{
	_stop = sig == SIGUSR1 ? XFER_STOP_CANCEL : _stop ? _stop : 1;
}

static int _ioprio_idle(void)
{
	/* IOPRIO_WHO_PROCESS = 1, IOPRIO_CLASS_IDLE = 3, class shift 13. */
	return (int)syscall(SYS_ioprio_set, 1, 0, 3 << 13);
}

int worker_become(uid_t uid, gid_t gid, const gid_t *groups, int ngroups)
{
	uid_t ru, eu, su;
	gid_t rg, eg, sg;

	if (setgroups((size_t)ngroups, groups) < 0 || setresgid(gid, gid, gid) < 0 ||
	    setresuid(uid, uid, uid) < 0 || getresuid(&ru, &eu, &su) < 0 ||
	    getresgid(&rg, &eg, &sg) < 0 || ru != uid || eu != uid || su != uid ||
	    rg != gid || eg != gid || sg != gid || (uid != 0 && setuid(0) == 0))
		return -1;
	return 0;
}

void worker_groups(uid_t uid, gid_t gid, gid_t *groups, int *ngroups)
{
	usercache_groups(uid, gid, NULL, 0, groups, ngroups);
}

/*
 * Before a stage-in of a local path copies anything: count its source, as the
 * owner, against budget (the bytes left of its job's burst buffer, pool.h;
 * -1 = no limit). Over it: report the totals (the daemon words the error,
 * pool_over_capacity) and fail for good, with nothing written. Errors are
 * left to the copy, which reports them in its own words.
 */
static int _preflight(struct xfer_ctx *ctx, int64_t budget)
{
	struct xfer_tally t;
	struct stat st;
	int fd;

	if (budget < 0 || strcmp(ctx->action, "stage_in") || ctx->source[0] != '/')
		return 0;
	fd = open(ctx->source, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
	if (fd < 0)
		return 0;
	memset(&t, 0, sizeof(t));
	pthread_mutex_init(&t.mu, NULL);
	t.ctx = ctx;
	if (fstat(fd, &st) < 0) {
		close(fd);
		return 0;
	}
	if (S_ISDIR(st.st_mode)) {
		xfer_count_tree(&t, dup(fd), 0);
	} else if (S_ISREG(st.st_mode)) {
		t.files = 1;
		t.bytes = st.st_size;
	}
	close(fd);
	if (t.bytes <= budget)
		return 0;
	xfer_emit(ctx, &(struct xfer_note){
		.type = XR_TOTALS, .a = t.files, .b = t.bytes, .c = t.skipped });
	xfer_emit(ctx, &(struct xfer_note){
		.type = XR_RESULT, .code = XFER_FINAL,
		.text = "stage-in larger than the job's burst buffer" });
	return 1;
}

void worker__child(struct daemon *d, const struct worker_order *o, int chan, pid_t parent)
{
	const struct queue_request *r = o->r;
	const struct xfer_endpoint *be = o->be;
	struct sigaction sa;
	struct xfer_ctx ctx;
	sigset_t all;
	char msg[256];

	memset(&ctx, 0, sizeof(ctx));
	ctx.chan = chan;
	/* Signals: defaults, but SIGTERM asks for a clean stop, SIGUSR1 a cancel. */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (int s = 1; s < NSIG; s++)
		sigaction(s, &sa, NULL);
	sa.sa_handler = _on_term;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
	sigemptyset(&all);
	sigprocmask(SIG_SETMASK, &all, NULL);
	/* Nothing of the daemon's stays open: database, sockets, other workers. */
	if (chan != 3) {
		dup2(chan, 3);
		close(chan);
		ctx.chan = chan = 3;
	}
	if (fd_close_from(4) < 0) {
		snprintf(msg, sizeof(msg), "worker could not close the daemon's descriptors: close_range, "
			 "then /proc/self/fd: %s (it needs Linux 5.9 or /proc mounted); "
			 "nothing was touched",
			 strerror(errno));
		xfer_emit(&ctx, &(struct xfer_note){
			.type = XR_RESULT, .code = XFER_FINAL, .text = msg });
		_exit(1);
	}
	if (o->idle)
		_ioprio_idle();
	/* The request as the site-file step (root) and the transfer (the user) see it. */
	ctx.conf = d->conf;
	ctx.request_id = r->id;
	ctx.uid = r->uid;
	ctx.action = r->action;
	ctx.source = r->source;
	ctx.dest = r->dest;
	ctx.backend = be->name;
	xfer_prepare(&ctx);	/* site files only root reads; still root here */
	if (worker_become(r->uid, r->gid, o->groups, o->ngroups) < 0) {
		snprintf(msg, sizeof(msg), "worker could not switch to uid %u gid %u: %s",
			 (unsigned)r->uid, (unsigned)r->gid, strerror(errno));
		xfer_emit(&ctx, &(struct xfer_note){
			.type = XR_RESULT, .code = XFER_FINAL, .text = msg });
		_exit(1);
	}
	/* Credentials changed: set the parent-death signal now (a uid change clears it). */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(1);
	umask(077);
	ctx.job_id = r->job_id;
	ctx.keep = o->keep;
	ctx.algo = o->algo;
	ctx.bucket = o->yb ? o->yb : d->bucket;
	ctx.xattr_ns = conf_xattr_prefix(d->conf);
	ctx.label_via_daemon = d->conf->xattr_ns == CONF_XATTR_TRUSTED;
	ctx.done = o->done;
	ctx.ndone = o->ndone;
	ctx.mpu = o->mpu;
	ctx.nmpu = o->nmpu;
	ctx.archive = o->arch;
	ctx.stop = &_stop;
	ctx.sync_batch = d->conf->sync_batch;
	ctx.verify_sample = d->conf->verify_sample ? 16 : 0;
	ctx.exclude = (const char *const *)o->exclude;
	{
		/* Directive paths: no symlink followed below options.beneath. This
		   child exits after the run: opts is not freed. */
		json_t *opts = json_loads(r->options, 0, NULL);

		ctx.beneath = json_string_value(json_object_get(opts, "beneath"));
		ctx.line = (int)json_integer_value(json_object_get(opts, "line"));
		ctx.label_policy = json_string_value(json_object_get(opts, "policy"));
	}
	/* A job's staged inputs, removed as their owner (cleanup.h); ctx.done lists them. */
	if (strcmp(r->action, "purge") == 0) {
		cleanup_run(&ctx);
		_exit(0);
	}
	if (_preflight(&ctx, o->budget))
		_exit(0);
	/* An archive copy stagehand made comes back as its files, verified. */
	if (xfer_restore_stage_in(&ctx) >= 0)
		_exit(0);
	/* Files movers copied in byte ranges are finished before the walk keeps them. */
	xfer_range_finish(&ctx, o->done, o->ndone);
	xfer_run(&ctx);
	_exit(0);
}

