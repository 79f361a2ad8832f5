/*
 * privlabel.c - owner creates, root labels the descriptor (see privlabel.h).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "jobdir.h"
#include "monoclock.h"
#include "privlabel.h"

/* One answer of the creator per directory (or one for a general failure,
 * with idx == n). ok: a descriptor comes with it. */
struct _msg {
	uint32_t idx;
	int32_t ok;
	char text[1024];
};

/* ---- the creator (child): runs as the job owner, never returns ---- */

static void _send(int sock, uint32_t idx, int fd, const char *text)
{
	struct _msg m;
	struct iovec iov = { .iov_base = &m, .iov_len = sizeof(m) };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} c;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	memset(&m, 0, sizeof(m));
	m.idx = idx;
	m.ok = fd >= 0;
	snprintf(m.text, sizeof(m.text), "%s", text ? text : "");
	if (fd >= 0) {
		memset(&c, 0, sizeof(c));
		mh.msg_control = c.buf;
		mh.msg_controllen = sizeof(c.buf);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	while (sendmsg(sock, &mh, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

/* Become the owner for good: groups, gid, uid; root must be out of reach. */
static int _become(const struct privlabel_owner *o, char *err, size_t errlen)
{
	if (setgroups(o->ngroups, o->ngroups ? o->groups : NULL) < 0) {
		snprintf(err, errlen, "cannot set the job owner's %zu supplementary "
			 "groups: %s", o->ngroups, strerror(errno));
		return -1;
	}
	if (setresgid(o->gid, o->gid, o->gid) < 0) {
		snprintf(err, errlen, "cannot switch to gid %lu: %s", (unsigned long)o->gid,
			 strerror(errno));
		return -1;
	}
	if (setresuid(o->uid, o->uid, o->uid) < 0) {
		snprintf(err, errlen, "cannot switch to uid %lu: %s", (unsigned long)o->uid,
			 strerror(errno));
		return -1;
	}
	if (o->uid != 0 && (setuid(0) == 0 || seteuid(0) == 0)) {
		snprintf(err, errlen, "could switch back to root after becoming uid %lu; "
			 "refusing to continue", (unsigned long)o->uid);
		return -1;
	}
	return 0;
}

__attribute__((noreturn))
static void _creator(int sock, const char *base, const struct privlabel_dir *dirs,
		     size_t n, const struct privlabel_owner *o)
{
	char e[900], msg[1024];

	if (_become(o, e, sizeof(e)) < 0) {
		_send(sock, (uint32_t)n, -1, e);
		_exit(1);
	}
	/* Never outlive the labelling process (set after the identity change,
	 * which clears it). */
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() == 1)
		_exit(1);
	if (o->umask >= 0)
		umask((mode_t)o->umask & 0777);
	int bfd = open(base, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (bfd < 0) {
		snprintf(msg, sizeof(msg), "cannot open the working directory %s as uid %lu: "
			 "%s", base, (unsigned long)o->uid, strerror(errno));
		_send(sock, (uint32_t)n, -1, msg);
		_exit(1);
	}
	for (size_t i = 0; i < n; i++) {
		int fd = jobdir_open(bfd, dirs[i].path, e, sizeof(e));
		if (fd < 0) {
			_send(sock, (uint32_t)i, -1, e);
			_exit(1);
		}
		_send(sock, (uint32_t)i, fd, NULL);
		close(fd);
	}
	close(bfd);
	_exit(0);
}

/* ---- the labeller (caller, root) ---- */

/*
 * Receive one answer before deadline. Returns 0 with *m and *fd (-1 when
 * none came), or -1 with err.
 */
static int _recv(int sock, long deadline, uid_t uid, struct _msg *m, int *fd,
		 char *err, size_t errlen)
{
	struct iovec iov = { .iov_base = m, .iov_len = sizeof(*m) };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} c;
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
			     .msg_control = c.buf, .msg_controllen = sizeof(c.buf) };
	struct pollfd p = { .fd = sock, .events = POLLIN };
	ssize_t r;

	*fd = -1;
	for (;;) {
		long left = deadline - mono_ms();
		if (left <= 0) {
			snprintf(err, errlen, "creating the directories as uid %lu took too "
				 "long (is the filesystem hanging?)", (unsigned long)uid);
			return -1;
		}
		int pr = poll(&p, 1, (int)left);
		if (pr < 0 && errno == EINTR)
			continue;
		if (pr < 0) {
			snprintf(err, errlen, "poll: %s", strerror(errno));
			return -1;
		}
		if (pr == 0)
			continue;
		r = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
		if (r < 0 && errno == EINTR)
			continue;
		break;
	}
	if (r < 0) {
		snprintf(err, errlen, "cannot read from the process creating the "
			 "directories: %s", strerror(errno));
		return -1;
	}
	if (r == 0) {
		snprintf(err, errlen, "the process creating the directories as uid %lu "
			 "ended without an answer", (unsigned long)uid);
		return -1;
	}
	/* Take every descriptor that came, keep at most one. */
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t j = 0; j < k; j++) {
			int x;
			memcpy(&x, CMSG_DATA(cm) + j * sizeof(int), sizeof(int));
			if (*fd < 0)
				*fd = x;
			else
				close(x);
		}
	}
	if ((size_t)r != sizeof(*m) || (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC))) {
		if (*fd >= 0)
			close(*fd);
		*fd = -1;
		snprintf(err, errlen, "malformed answer from the process creating the "
			 "directories");
		return -1;
	}
	m->text[sizeof(m->text) - 1] = '\0';
	return 0;
}

/* Collect the creator; kill it first when it is not done. */
static void _reap(pid_t pid, int kill_it)
{
	int st;

	if (kill_it)
		kill(pid, SIGKILL);
	/* A creator stuck in the kernel (a dead NFS server) cannot be waited
	 * for: give up after about a second rather than hang the job. */
	for (int i = 0; i < 100; i++) {
		pid_t r = waitpid(pid, &st, WNOHANG);
		if (r == pid || (r < 0 && errno != EINTR))
			return;
		if (r == 0)
			usleep(10000);
	}
}

int privlabel_prepare(const char *base, const struct privlabel_dir *dirs, size_t n,
		      const struct privlabel_owner *owner, const struct privlabel_run *run,
		      size_t *failed, char *err, size_t errlen)
{
	const char *ns = run->ns;
	unsigned long job_id = run->job_id;
	int timeout_ms = run->timeout_ms;
	int sp[2], rc = -1;
	char e[1024];

	*failed = n;
	if (n == 0)
		return 0;
	if (n > UINT32_MAX - 1) {
		snprintf(err, errlen, "too many directories");
		return -1;
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) < 0) {
		snprintf(err, errlen, "socketpair: %s", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		snprintf(err, errlen, "cannot fork the process that creates the directories "
			 "as uid %lu: %s", (unsigned long)owner->uid, strerror(errno));
		close(sp[0]);
		close(sp[1]);
		return -1;
	}
	if (pid == 0) {
		close(sp[0]);
		_creator(sp[1], base, dirs, n, owner);
	}
	close(sp[1]);

	long deadline = mono_ms() + (timeout_ms > 0 ? timeout_ms : 1);
	size_t i;
	for (i = 0; i < n; i++) {
		struct _msg m;
		int fd;

		if (_recv(sp[0], deadline, owner->uid, &m, &fd, err, errlen) < 0)
			goto out;
		if (!m.ok) {
			if (fd >= 0)
				close(fd);
			*failed = m.idx < n ? m.idx : n;
			snprintf(err, errlen, "%s", m.text);
			goto out;
		}
		if (m.idx != i || fd < 0) {
			if (fd >= 0)
				close(fd);
			snprintf(err, errlen, "malformed answer from the process creating the "
				 "directories");
			goto out;
		}
		if (jobdir_label_owned(fd, ns, dirs[i].policy, job_id, owner->uid, e,
				       sizeof(e)) < 0) {
			close(fd);
			*failed = i;
			snprintf(err, errlen, "%s", e);
			goto out;
		}
		close(fd);
	}
	rc = 0;
out:
	close(sp[0]);
	_reap(pid, rc < 0);
	return rc;
}
