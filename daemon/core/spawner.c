/*
 * spawner.c - see spawner.h.
 *
 * Owns: the spawner process (its signals, descriptors and loop) and the
 * exchange with it: one datagram a call on a SOCK_SEQPACKET pair, answered
 * in order, since only the daemon's main loop calls.
 *
 * Must never: make a worker with anything but fork() (glibc registers the
 * child's robust-mutex list and thread id there; the buckets' locks are
 * robust), or touch a user path (the worker does, after its drop).
 */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fdclose.h"
#include "fdpass.h"
#include "spawner.h"
#include "worker_int.h"

#define SP_MAX (64 * 1024)           /* a larger request forks in the daemon */
#define SP_GROUPS 256

enum { _SPAWN = 1, _WAIT = 2 };

/* A call: this header, then nstr NUL-terminated strings. */
struct _hdr {
	int type;
	pid_t pid;                       /* _WAIT */
	int64_t id, job_id, budget;
	uid_t uid;
	gid_t gid;
	int ngroups;
	gid_t groups[SP_GROUPS];
	const struct xfer_endpoint *be;  /* the same image: valid in the spawner */
	struct xfer_bucket *yb;          /* a slot's the spawner holds (spawner_fits) */
	int algo, keep, idle, has_dest;
	uint32_t nstr;                   /* action, source, dest, options, user, exclude... */
};

struct _reply {
	pid_t pid;
	int err;
	int status;
};

struct spawner {
	pid_t pid;
	int fd;
	unsigned conf_gen;               /* the configuration it holds a copy of (daemon.h) */
	int nslots;                      /* slots (and their buckets) made before its fork */
	int live;
	int broken;
};

/* ---- the spawner process ---- */

static void _child_signals(void)
{
	struct sigaction sa;
	sigset_t none;

	static const int ignored[] = { SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
				       SIGPIPE, SIGALRM };

	/* Stopped by its socket's end or the daemon's death, not by the signals
	   meant for the daemon (pkill, a terminal's ^C); the rest as by default
	   (SIGCHLD, so that its children can be waited for). */
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = SIG_DFL;
	for (int s = 1; s < NSIG; s++)
		if (s != SIGKILL && s != SIGSTOP)
			sigaction(s, &sa, NULL);
	sa.sa_handler = SIG_IGN;
	for (size_t i = 0; i < sizeof(ignored) / sizeof(ignored[0]); i++)
		sigaction(ignored[i], &sa, NULL);
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* Split n strings out of buf (len bytes) into out; -1 if they do not fit. */
static int _strings(char *buf, size_t len, uint32_t n, char **out)
{
	size_t off = 0;

	for (uint32_t i = 0; i < n; i++) {
		char *z = off < len ? memchr(buf + off, '\0', len - off) : NULL;

		if (!z)
			return -1;
		out[i] = buf + off;
		off = (size_t)(z - buf) + 1;
	}
	return 0;
}

static void _start_worker(struct daemon *d, int sock, pid_t self, struct _hdr *h, char *strs,
			  size_t slen, int chan, struct _reply *rep)
{
	char **s = calloc((size_t)h->nstr + 1, sizeof(*s));
	struct queue_request r;
	sigset_t all, old;
	pid_t pid;

	if (!s || h->nstr < 5 || _strings(strs, slen, h->nstr, s) < 0 || h->ngroups < 1 ||
	    h->ngroups > SP_GROUPS) {
		rep->err = s ? EPROTO : ENOMEM;
		free(s);
		return;
	}
	memset(&r, 0, sizeof(r));
	r.id = h->id;
	r.uid = h->uid;
	r.gid = h->gid;
	r.job_id = h->job_id;
	r.action = s[0];
	r.source = s[1];
	r.dest = h->has_dest ? s[2] : NULL;
	r.options = s[3];
	r.user = s[4];
	/* Blocked until the worker has its handlers (worker__child): a cancel or
	   stop sent meanwhile waits for them instead of being ignored here. */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, &old);
	pid = fork();
	if (pid == 0) {
		struct worker_order o = {
			.r = &r, .groups = h->groups, .ngroups = h->ngroups, .be = h->be,
			.algo = (enum cksum_algo)h->algo, .keep = h->keep, .idle = h->idle,
			.yb = h->yb, .exclude = h->nstr > 5 ? s + 5 : NULL, .budget = h->budget,
		};

		close(sock);
		prctl(PR_SET_NAME, "stagehandd");	/* a worker is named as one forked by the daemon */
		worker__child(d, &o, chan, self);
	}
	rep->err = pid < 0 ? errno : 0;
	sigprocmask(SIG_SETMASK, &old, NULL);
	rep->pid = pid;
	free(s);
}

static void _loop(struct daemon *d, int sock, pid_t daemon_pid) __attribute__((noreturn));
static void _loop(struct daemon *d, int sock, pid_t daemon_pid)
{
	static char buf[SP_MAX];
	pid_t self = getpid();

	prctl(PR_SET_NAME, "stagehand-spawn");
	_child_signals();
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != daemon_pid)
		_exit(0);
	/* Nothing of the daemon's stays open here but this socket (and 0-2). */
	if (sock != 3) {
		if (dup2(sock, 3) < 0)
			_exit(1);
		sock = 3;
	}
	if (fd_close_from(4) < 0)
		_exit(1);	/* the daemon's first call sees it gone, and forks workers itself */
	for (;;) {
		char cb[FDPASS_SPACE];
		struct iovec iov = { .iov_base = buf, .iov_len = sizeof(buf) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cb,
				     .msg_controllen = sizeof(cb) };
		struct _reply rep = { .pid = -1 };
		struct cmsghdr *cm;
		struct _hdr h;
		int chan = -1;
		ssize_t n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			_exit(0);	/* the daemon closed its end: stop */
		for (cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm))
			if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS) {
				if (chan >= 0)
					close(chan);	/* one a call: the last one stays */
				memcpy(&chan, CMSG_DATA(cm), sizeof(int));
			}
		if ((size_t)n < sizeof(h) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
			rep.err = EPROTO;
		} else {
			memcpy(&h, buf, sizeof(h));
			if (h.type == _SPAWN && chan >= 0) {
				/* The worker keeps its own copy; its chan is not CLOEXEC
				   there (worker__child moves it to 3). */
				_start_worker(d, sock, self, &h, buf + sizeof(h),
					      (size_t)n - sizeof(h), chan, &rep);
			} else if (h.type == _WAIT) {
				int st = 0;
				pid_t w;

				while ((w = waitpid(h.pid, &st, 0)) < 0 && errno == EINTR)
					;
				rep.pid = w;
				rep.err = w < 0 ? errno : 0;
				rep.status = st;
			} else {
				rep.err = EPROTO;
			}
		}
		if (chan >= 0)
			close(chan);
		if (send(sock, &rep, sizeof(rep), MSG_NOSIGNAL) != (ssize_t)sizeof(rep))
			_exit(0);
	}
}

/* ---- the daemon's side ---- */

struct spawner *spawner_start(struct daemon *d, int nslots)
{
	struct spawner *s = calloc(1, sizeof(*s));
	pid_t me = getpid();
	int sv[2];

	if (!s) {
		errno = ENOMEM;
		return NULL;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0) {
		free(s);
		return NULL;
	}
	s->pid = fork();
	if (s->pid == 0) {
		close(sv[0]);
		_loop(d, sv[1], me);
	}
	close(sv[1]);
	if (s->pid < 0) {
		int e = errno;

		close(sv[0]);
		free(s);
		errno = e;
		return NULL;
	}
	s->fd = sv[0];
	s->conf_gen = d->conf_gen;
	s->nslots = nslots;
	return s;
}

int spawner_fits(const struct spawner *s, unsigned gen, int slot)
{
	return spawner_current(s, gen) && slot < s->nslots;
}

/* One call and its reply; -1 with errno, and s broken, when the exchange failed. */
static int _call(struct spawner *s, const void *msg, size_t len, int fd, struct _reply *rep)
{
	char cb[FDPASS_SPACE];
	struct iovec iov = { .iov_base = (void *)msg, .iov_len = len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (fd >= 0)
		fdpass_attach(&mh, cb, fd);
	while ((n = sendmsg(s->fd, &mh, MSG_NOSIGNAL)) < 0 && errno == EINTR)
		;
	/* Not sent for want of buffer room: the spawner is whole, the caller
	   does without it this time. */
	if (n < 0 && (errno == EMSGSIZE || errno == ENOBUFS || errno == ENOMEM))
		return -1;
	if (n == (ssize_t)len)
		while ((n = recv(s->fd, rep, sizeof(*rep), 0)) < 0 && errno == EINTR)
			;
	if (n != (ssize_t)sizeof(*rep)) {
		s->broken = 1;
		if (n >= 0)
			errno = EPIPE;
		return -1;
	}
	return 0;
}

pid_t spawner_spawn(struct spawner *s, const struct worker_order *a, int chan)
{
	static char msg[SP_MAX];
	const struct queue_request *r = a->r;
	const char *fixed[5] = { r->action, r->source, r->dest ? r->dest : "", r->options,
				 r->user ? r->user : "" };
	struct _hdr h;
	struct _reply rep;
	size_t off = sizeof(h);

	if (s->broken) {
		errno = EPIPE;
		return -1;
	}
	memset(&h, 0, sizeof(h));
	h.type = _SPAWN;
	h.id = r->id;
	h.job_id = r->job_id;
	h.budget = a->budget;
	h.uid = r->uid;
	h.gid = r->gid;
	h.ngroups = a->ngroups < SP_GROUPS ? a->ngroups : SP_GROUPS;
	memcpy(h.groups, a->groups, (size_t)h.ngroups * sizeof(gid_t));
	h.be = a->be;
	h.yb = a->yb;
	h.algo = (int)a->algo;
	h.keep = a->keep;
	h.idle = a->idle;
	h.has_dest = r->dest != NULL;
	for (size_t i = 0;; i++) {
		const char *str = i < 5 ? fixed[i] : a->exclude ? a->exclude[i - 5] : NULL;
		size_t n;

		if (!str)
			break;
		n = strlen(str) + 1;
		if (off + n > sizeof(msg)) {
			errno = E2BIG;	/* not broken: the caller forks this one itself */
			return -1;
		}
		memcpy(msg + off, str, n);
		off += n;
		h.nstr++;
	}
	memcpy(msg, &h, sizeof(h));
	if (_call(s, msg, off, chan, &rep) < 0)
		return -1;
	if (rep.pid < 0) {
		errno = rep.err ? rep.err : EIO;
		return -1;	/* fork failed there: the spawner itself still works */
	}
	s->live++;
	return rep.pid;
}

int spawner_wait(struct spawner *s, pid_t pid, int *status)
{
	struct _hdr h;
	struct _reply rep;

	if (s->broken) {
		s->live--;
		errno = EPIPE;
		return -1;
	}
	memset(&h, 0, sizeof(h));
	h.type = _WAIT;
	h.pid = pid;
	if (_call(s, &h, sizeof(h), -1, &rep) < 0) {
		if (s->broken)
			s->live--;
		return -1;
	}
	s->live--;
	if (rep.pid != pid) {
		errno = rep.err ? rep.err : ECHILD;
		return -1;
	}
	*status = rep.status;
	return 0;
}

int spawner_current(const struct spawner *s, unsigned gen)
{
	return s && !s->broken && gen == s->conf_gen;
}

int spawner_live(const struct spawner *s)
{
	return s ? s->live : 0;
}

int spawner_broken(const struct spawner *s)
{
	return s && s->broken;
}

pid_t spawner_pid(const struct spawner *s)
{
	return s ? s->pid : -1;
}

void spawner_stop(struct spawner *s)
{
	if (!s)
		return;
	close(s->fd);
	/* No worker of its own is left (or it is broken and they are gone): it
	   is killed rather than left to see its socket's end, which a process
	   forked from the daemon meanwhile may still hold open. */
	if (s->broken || s->live <= 0)
		kill(s->pid, SIGKILL);
	while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR)
		;
	free(s);
}
