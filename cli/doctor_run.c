/*
 * doctor_run.c - the doctor's one way to run a program and read what it
 * prints (doctor.h): posix_spawnp, no shell, stdin /dev/null, stdout and
 * stderr into one pipe, a time limit and a size limit. Used for the site's
 * Lua hooks (doctor_lua.c) and for `slurmd -V` (doctor_release.c).
 *
 * Must never: evaluate what the child prints, or leave the child running
 * past its limit.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "doctor.h"
#include "monoclock.h"

char *doctor_capture(char *const argv[], char *const env[], int timeout_ms, size_t max,
		     int *timed_out, char *err, size_t errlen)
{
	posix_spawn_file_actions_t fa;
	long long deadline;
	char *buf;
	size_t len = 0;
	int p[2], status = 0, rc;
	pid_t pid;

	*timed_out = 0;
	buf = malloc(max + 1);
	if (!buf || pipe2(p, O_CLOEXEC) < 0) {
		snprintf(err, errlen, "cannot start %.200s: %s", argv[0], strerror(errno));
		free(buf);
		return NULL;
	}
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, p[1], 1);
	posix_spawn_file_actions_adddup2(&fa, p[1], 2);
	rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, env);
	posix_spawn_file_actions_destroy(&fa);
	close(p[1]);
	if (rc != 0) {
		snprintf(err, errlen, "cannot run %.200s: %s", argv[0], strerror(rc));
		close(p[0]);
		free(buf);
		return NULL;
	}
	deadline = mono_ms() + timeout_ms;
	for (;;) {
		struct pollfd pf = { p[0], POLLIN, 0 };
		long long now = mono_ms();
		ssize_t got;

		if (now >= deadline || poll(&pf, 1, (int)(deadline - now)) == 0) {
			kill(pid, SIGKILL);
			*timed_out = 1;
			break;
		}
		got = read(p[0], buf + len, max - len);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0 || (len += (size_t)got) >= max)
			break;
	}
	close(p[0]);
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (*timed_out) {
		snprintf(err, errlen, "%.200s did not finish within %d s", argv[0], timeout_ms / 1000);
		free(buf);
		return NULL;
	}
	buf[len] = '\0';
	return buf;
}
