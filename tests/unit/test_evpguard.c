/*
 * test_evpguard.c - common/evpguard.c: a fork waits for a digest's set-up
 * in flight in another thread, and the child starts with the guard free and
 * sets up digests of its own.
 */
#include "config.h"

#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checksum.h"
#include "evpguard.h"
#include "tests/tap.h"

static int _entered[2];
static volatile int _released;

/* Holds the guard on purpose while the main thread forks. */
static void *_holder(void *arg)
{
	(void)arg;
	evpguard_enter();
	if (write(_entered[1], "x", 1) != 1)
		_exit(3);
	usleep(300 * 1000);
	_released = 1;
	evpguard_leave();
	return NULL;
}

/* In the child: the guard and a SHA-256 of "abc" (FIPS 180-2, B.1). */
static int _child(void)
{
	static const char want[] =
		"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
	struct cksum c;
	char got[CKSUM_HEX_MAX];

	alarm(20);                    /* a guard left held would hang it */
	evpguard_enter();
	evpguard_leave();
	if (cksum_init(&c, CKSUM_SHA256) < 0)
		return 1;
	cksum_update(&c, "abc", 3);
	cksum_final(&c, got);
	return strcmp(got, want) == 0 ? 0 : 2;
}

int main(void)
{
	pthread_t t;
	char x;
	pid_t pid;
	int st = -1, was;

	if (pipe(_entered) < 0 || pthread_create(&t, NULL, _holder, NULL) != 0) {
		tap_diag("pipe or thread: cannot set the test up");
		return 77;
	}
	if (read(_entered[0], &x, 1) != 1) {
		tap_diag("the holder thread never entered");
		return 1;
	}
	pid = fork();
	if (pid == 0)
		_exit(_child());
	was = _released;
	ok(pid > 0 && was == 1, "the fork waited for the set-up in flight in another thread");
	ok(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
	   "the child starts with the guard free and sets up a SHA-256 (status %#x)", st);
	pthread_join(t, NULL);
	evpguard_enter();
	evpguard_leave();
	ok(1, "the parent's guard is free again after the fork");
	return tap_done();
}
