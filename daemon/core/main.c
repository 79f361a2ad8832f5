/*
 * main.c - stagehandd: startup, the main loop, teardown.
 *
 * Startup is straight-line and teardown mirrors it. Signal handlers only set
 * flags; the loop acts on them: SIGHUP reloads the configuration, SIGTERM and
 * SIGINT drain (no new transfers; in-flight ones get DrainTimeout seconds,
 * then are stopped and checkpointed as queued).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/capability.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "api.h"
#include "conf.h"
#include "executor.h"
#include "lifecycle.h"
#include "log.h"
#include "metrics.h"
#include "metrics_http.h"
#include "monoclock.h"
#include "mover_exec.h"
#include "notify.h"
#include "queue.h"
#include "queue_drain.h"
#include "resolve.h"
#include "sdnotify.h"
#include "userdir.h"
#include "worker.h"
#include "xfer.h"

#define MAX_POLL 300

static volatile sig_atomic_t _got_hup, _got_term;

static void _on_signal(int sig)
{
	if (sig == SIGHUP)
		_got_hup = 1;
	else
		_got_term = 1;
}

static void _usage(FILE *f)
{
	fprintf(f, "Usage: stagehandd [-F] [-c FILE] [--check-config]\n"
		"  -F, --foreground    stay in the foreground, log to stderr\n"
		"  -c, --config FILE   configuration (default %s)\n"
		"      --check-config  check the configuration and exit\n"
		"  -V, --version       print the version\n"
		"  -h, --help          this help\n", CONF_DEFAULT_FILE);
}

/*
 * What the configuration needs of the process's privileges that the shipped
 * unit does not grant by default: trusted.* labels need CAP_SYS_ADMIN, left
 * out of its CapabilityBoundingSet. Said at start (and by --check-config,
 * which the unit runs first) rather than as a failed label per file later.
 * 0, or -1 with err.
 */
static int _check_privileges(const struct conf *c, char *err, size_t errlen)
{
	if (c->xattr_ns == CONF_XATTR_TRUSTED && prctl(PR_CAPBSET_READ, CAP_SYS_ADMIN) == 0) {
		snprintf(err, errlen, "XattrNamespace=trusted needs CAP_SYS_ADMIN, which this "
			 "process may not have (capability bounding set): add it to the unit with "
			 "a drop-in, \"CapabilityBoundingSet=CAP_SYS_ADMIN\" under [Service] "
			 "(systemctl edit stagehandd), or use XattrNamespace=user");
		return -1;
	}
	return 0;
}

/* Load and check a configuration. NULL with the message in err. */
static struct conf *_load(const char *path, char *err, size_t errlen)
{
	struct conf *c = conf_create();

	if (!c) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (conf_parse_file(c, path, err, errlen) < 0 || conf_validate(c, err, errlen) < 0) {
		conf_destroy(c);
		return NULL;
	}
	return c;
}

static void _mkparent(const char *path, mode_t mode)
{
	char buf[4096];

	if (snprintf(buf, sizeof(buf), "%s", path) < (int)sizeof(buf))
		mkdir(dirname(buf), mode);	/* one level; EEXIST is the usual case */
}

/* Fork into the background; the parent exits with the child's startup status. */
static int _daemonize(int *status_fd)
{
	int p[2];
	pid_t pid;
	char c = 1;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0) {
		close(p[1]);
		if (read(p[0], &c, 1) != 1)
			c = 1;
		if (c)
			fprintf(stderr, "stagehandd: startup failed; the reason is in syslog "
				"(or run with -F to see it here)\n");
		_exit(c);
	}
	close(p[0]);
	setsid();
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid > 0)
		_exit(0);
	if (chdir("/") < 0)
		return -1;
	{
		int fd = open("/dev/null", O_RDWR);

		if (fd >= 0) {
			dup2(fd, 0);
			dup2(fd, 1);
			dup2(fd, 2);
			if (fd > 2)
				close(fd);
		}
	}
	*status_fd = p[1];
	return 0;
}

static void _report(int *status_fd, char ok)
{
	char c = ok ? 0 : 1;

	if (*status_fd >= 0) {
		if (write(*status_fd, &c, 1) < 0) {
			/* the parent is gone; nothing to tell */
		}
		close(*status_fd);
		*status_fd = -1;
	}
}

static int _write_pidfile(const char *path, char *err, size_t errlen)
{
	char buf[32];
	int fd, n;

	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	n = snprintf(buf, sizeof(buf), "%d\n", (int)getpid());
	if (fd < 0 || write(fd, buf, (size_t)n) != n) {
		snprintf(err, errlen, "cannot write PidFile %s: %s", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return 0;
}

/* Keep a restart-only string setting; say so when it changed. */
static void _keep_str(char **newv, char **oldv, const char *key)
{
	char *t;

	if ((*newv && *oldv && strcmp(*newv, *oldv) == 0) || (!*newv && !*oldv))
		return;
	log_warn("reload: %s changed; it takes effect at the next restart", key);
	t = *newv;
	*newv = *oldv;
	*oldv = t;
}

static void _reload(struct daemon *d)
{
	char err[1024];
	struct conf *nc = _load(d->conf_path, err, sizeof(err)), *old;

	if (!nc) {
		log_err("reload refused, keeping the running configuration: %s", err);
		return;
	}
	_keep_str(&nc->socket_path, &d->conf->socket_path, "SocketPath");
	_keep_str(&nc->listen_host, &d->conf->listen_host, "ListenAddress");
	nc->listen_port = d->conf->listen_port;
	_keep_str(&nc->state_db, &d->conf->state_db, "StateDB");
	_keep_str(&nc->pid_file, &d->conf->pid_file, "PidFile");
	_keep_str(&nc->metrics_host, &d->conf->metrics_host, "MetricsAddress");
	nc->metrics_port = d->conf->metrics_port;
	if (nc->connection_timeout != d->conf->connection_timeout) {
		log_warn("reload: ConnectionTimeout changed; it takes effect at the next restart");
		nc->connection_timeout = d->conf->connection_timeout;
	}
	pthread_rwlock_wrlock(&d->conf_lock);
	old = d->conf;
	d->conf = nc;
	d->conf_gen++;
	pthread_rwlock_unlock(&d->conf_lock);
	log_set_level(nc->log_level);
	xfer_bucket_set_rate(d->bucket, nc->bandwidth_cap);
	log_info("configuration reloaded from %s (Workers=%d, ArchiveWorkers=%d, BandwidthCap=%llu "
		 "B/s, YieldToJobs=%s, LogLevel=%s)", d->conf_path, nc->workers, nc->archive_workers,
		 (unsigned long long)nc->bandwidth_cap, nc->yield_to_jobs ? "yes" : "no",
		 conf_log_level_name(nc->log_level));
	conf_destroy(old);
}

/* An admin's drain outlives a restart: no transfer starts until 'stagehand resume'. */
static int _drained_at_start(struct daemon *d)
{
	struct queue_drain qd;
	char err[512];
	int rc = queue_drain_get(d->q, &qd, err, sizeof(err));

	if (rc < 0) {
		log_err("cannot read the drain state: %s", err);
		return -1;
	}
	if (rc == 1) {
		time_t t = (time_t)qd.since;
		struct tm tm;
		char when[32] = "?";

		if (gmtime_r(&t, &tm))
			strftime(when, sizeof(when), "%Y-%m-%d %H:%M:%S UTC", &tm);
		atomic_store(&d->drained, qd.since);
		log_warn("drained since %s by uid %lld%s%s: no transfer starts until "
			 "'stagehand resume'", when, (long long)qd.by_uid,
			 *qd.reason ? ": " : "", qd.reason);
		queue_drain_free(&qd);
	}
	return 0;
}

static void _schedule(struct daemon *d, int64_t now)
{
	char err[512];

	if (queue_requeue_due(d->q, now, err, sizeof(err)) < 0)
		log_err("requeue of due retries failed: %s", err);
	worker_pool_check_cancelled(d->pool);
	/* Drained by an admin: what runs finishes, nothing new is claimed (checked
	   on each claim, so a drain during this loop stops it at once). */
	while (!atomic_load(&d->drained) && worker_pool_busy(d->pool) < d->conf->workers) {
		struct queue_request *r = NULL;
		/* Stage-in is never starved by archives: those get ArchiveWorkers at most. */
		int after_ok = worker_pool_busy_after_job(d->pool) < d->conf->archive_workers;
		int rc = queue_request_claim_ex(d->q, now, after_ok, &r, err, sizeof(err));

		if (rc < 0)
			log_err("cannot claim a queued request: %s", err);
		if (rc != 0)
			break;
		if (executor_start(d, r) < 0)
			break;
	}
}

static void _loop(struct daemon *d)
{
	int64_t drain_deadline = 0, kill_deadline = 0;

	for (;;) {
		struct pollfd fds[MAX_POLL];
		int64_t now_ms = mono_ms(), now = (int64_t)time(NULL);
		int n;

		if (_got_hup) {
			_got_hup = 0;
			sdnotify_reloading();
			_reload(d);
			sdnotify_reloaded(d->q);
		}
		if (_got_term && !atomic_load(&d->draining)) {
			atomic_store(&d->draining, 1);
			sdnotify_stopping(worker_pool_busy(d->pool));
			drain_deadline = now_ms + (int64_t)d->conf->drain_timeout * 1000;
			log_info("draining: no new transfers; waiting up to %d s for %d running",
				 d->conf->drain_timeout, worker_pool_busy(d->pool));
		}
		if (atomic_load(&d->draining)) {
			if (worker_pool_busy(d->pool) == 0)
				break;
			if (!kill_deadline && now_ms >= drain_deadline) {
				log_warn("drain timeout: stopping %d transfers; they are redone at "
					 "the next start", worker_pool_busy(d->pool));
				worker_pool_stop_all(d->pool);
				kill_deadline = now_ms + 10000;
			} else if (kill_deadline && now_ms >= kill_deadline) {
				log_err("workers did not stop; killing them (recovery redoes their work)");
				break;
			}
		} else {
			/* Movers first: a request whose plan came back unsplit gets the
			   next free worker before a newly claimed one. */
			mover_exec_tick(d->movers, now_ms);
			_schedule(d, now);
			lifecycle_tick(d, now_ms);
		}
		notify_tick(d->notify, d, now_ms);
		metrics_tick(d->metrics, now);
		sdnotify_tick(d->q, now_ms);
		fds[0].fd = d->wake_fd;
		fds[0].events = POLLIN;
		fds[0].revents = 0;
		n = 1 + worker_pool_pollfds(d->pool, fds + 1, MAX_POLL - 1);
		if (poll(fds, (nfds_t)n, 200) < 0 && errno != EINTR)
			log_err("poll: %s", strerror(errno));
		if (fds[0].revents & POLLIN) {
			uint64_t v;

			if (read(d->wake_fd, &v, sizeof(v)) < 0 && errno != EAGAIN)
				log_err("wake: %s", strerror(errno));
		}
		worker_pool_service(d->pool, fds + 1, n - 1);
	}
}

/*
 * The command line into *path, *foreground and *check. Returns -1 to go on,
 * or the exit status when there is nothing more to do (--version, --help) or
 * an argument is wrong.
 */
static int _parse_args(int argc, char **argv, const char **path, int *foreground, int *check)
{
	static const struct option opts[] = {
		{ "foreground", no_argument, NULL, 'F' },
		{ "config", required_argument, NULL, 'c' },
		{ "check-config", no_argument, NULL, 'C' },
		{ "version", no_argument, NULL, 'V' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	int c;

	while ((c = getopt_long(argc, argv, "Fc:Vh", opts, NULL)) != -1) {
		switch (c) {
		case 'F': *foreground = 1; break;
		case 'c': *path = optarg; break;
		case 'C': *check = 1; break;
		case 'V': printf("stagehandd %s\n", PACKAGE_VERSION); return 0;
		case 'h': _usage(stdout); return 0;
		default: _usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, "stagehandd: unexpected argument '%s'\n", argv[optind]);
		_usage(stderr);
		return 2;
	}
	return -1;
}

/*
 * --check-config: "configuration OK" and 0, or the error (err: why conf could
 * not be loaded, when it is NULL) and 1. Takes conf and destroys it.
 */
static int _check_config(struct conf *conf, char *err, size_t errlen)
{
	if (!conf) {
		fprintf(stderr, "%s\n", err);
		return 1;
	}
	if (_check_privileges(conf, err, errlen) < 0) {
		fprintf(stderr, "%s\n", err);
		conf_destroy(conf);
		return 1;
	}
	/* Warnings only: a root may be mounted later. */
	userdir_check_roots(conf, stdout);
	printf("configuration OK\n");
	conf_destroy(conf);
	return 0;
}

/* Handlers only set flags (_on_signal); a peer gone away is not a SIGPIPE. */
static void _signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = _on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGHUP, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	sigaction(SIGPIPE, &sa, NULL);
}

/*
 * The parts of d made from nothing but memory (bandwidth bucket, metrics,
 * worker pool, notifications, movers) and the wake-up eventfd. Returns -1
 * with errno set when one could not be made; main's teardown destroys
 * whatever was.
 */
static int _create_parts(struct daemon *d)
{
	d->bucket = xfer_bucket_create(d->conf->bandwidth_cap);
	d->metrics = metrics_create();
	d->pool = worker_pool_create(d);
	/* Outcomes (archives, failed stage-ins and stage-outs) up to 5 minutes before
	   this start are still announced. */
	d->notify = notify_create((int64_t)d->started - 300);
	d->movers = mover_exec_create(d);
	d->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (!d->bucket || !d->metrics || !d->pool || !d->notify || !d->movers || d->wake_fd < 0)
		return -1;
	return 0;
}

/*
 * Long on purpose: straight-line startup, the loop, and the teardown
 * mirroring the startup, each label undoing the stages above it; a stage
 * moved out of sight would part it from its undo.
 */
int main(int argc, char **argv)
{
	struct daemon d;
	const char *path = CONF_DEFAULT_FILE;
	int foreground = 0, check = 0, c, status_fd = -1, nreq = 0, nitems = 0, rc = 1;
	char err[1024];

	c = _parse_args(argc, argv, &path, &foreground, &check);
	if (c >= 0)
		return c;
	memset(&d, 0, sizeof(d));
	d.wake_fd = -1;
	d.conf_path = path;
	d.conf = _load(path, err, sizeof(err));
	if (check)
		return _check_config(d.conf, err, sizeof(err));
	if (!d.conf || _check_privileges(d.conf, err, sizeof(err)) < 0) {
		fprintf(stderr, "stagehandd: %s\n", err);
		if (d.conf)
			conf_destroy(d.conf);
		return 1;
	}
	if (!foreground && _daemonize(&status_fd) < 0) {
		fprintf(stderr, "stagehandd: cannot go to the background: %s\n", strerror(errno));
		goto out_conf;
	}
	log_open("stagehandd", !foreground, d.conf->log_level);
	pthread_rwlock_init(&d.conf_lock, NULL);
	d.started = time(NULL);

	_signals();

	_mkparent(d.conf->state_db, 0700);
	d.q = queue_open(d.conf->state_db, err, sizeof(err));
	if (!d.q) {
		log_err("%s", err);
		goto out_log;
	}
	if (queue_recover(d.q, &nreq, &nitems, err, sizeof(err)) < 0) {
		log_err("recovery failed: %s", err);
		goto out_queue;
	}
	if (nreq || nitems)
		log_info("recovery: %d interrupted requests and %d files queued again", nreq, nitems);
	if (_drained_at_start(&d) < 0)
		goto out_queue;
	if (_create_parts(&d) < 0) {
		log_err("out of resources at startup: %s", strerror(errno));
		goto out_pool;
	}
	if (lifecycle_init(&d, err, sizeof(err)) < 0) {
		log_err("%s", err);
		goto out_pool;
	}
	_mkparent(d.conf->socket_path, 0755);
	d.api = api_bind(&d, err, sizeof(err));
	if (!d.api) {
		log_err("%s", err);
		goto out_lifecycle;
	}
	if (d.conf->pid_file) {
		_mkparent(d.conf->pid_file, 0755);
		if (_write_pidfile(d.conf->pid_file, err, sizeof(err)) < 0) {
			log_err("%s", err);
			goto out_api;
		}
	}
	if (api_start(d.api, err, sizeof(err)) < 0) {
		log_err("%s", err);
		goto out_pid;
	}
	err[0] = '\0';
	d.mhttp = metrics_http_start(&d, err, sizeof(err));
	if (!d.mhttp && err[0]) {
		log_err("%s", err);
		goto out_pid;
	}
	/* resolve_method: decided here, once, and inherited by every worker. */
	log_info("stagehandd %s started: socket %s%s%s, database %s, %d workers, user paths "
		 "resolved with %s", PACKAGE_VERSION, d.conf->socket_path,
		 d.conf->listen_host ? ", TCP " : "", d.conf->listen_host ? d.conf->listen_host : "",
		 d.conf->state_db, d.conf->workers, resolve_method());
	_report(&status_fd, 1);
	sdnotify_init();
	sdnotify_ready(d.q);

	_loop(&d);
	rc = 0;
	log_info("stagehandd stopping");
	metrics_http_stop(d.mhttp);

out_pid:
	if (d.conf->pid_file)
		unlink(d.conf->pid_file);
out_api:
	api_stop(d.api);
out_lifecycle:
	lifecycle_fini(&d);
out_pool:
	mover_exec_destroy(d.movers);
	notify_destroy(d.notify);
	worker_pool_destroy(d.pool);
	if (d.wake_fd >= 0)
		close(d.wake_fd);
	metrics_destroy(d.metrics);
	xfer_bucket_destroy(d.bucket);
out_queue:
	queue_close(d.q);
out_log:
	_report(&status_fd, 0);
	pthread_rwlock_destroy(&d.conf_lock);
	log_close();
out_conf:
	conf_destroy(d.conf);
	return rc;
}
