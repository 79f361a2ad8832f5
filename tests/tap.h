/*
 * tap.h - the one Test Anything Protocol writer for every C unit test
 * (tests/unit, daemon/tests, spank/tests), read by automake's
 * tap-driver.sh or its simple driver. Header-only: each test program
 * includes it once, as "tests/tap.h" (-I$(top_srcdir)).
 *
 *   ok(cond, fmt, ...)        one test; on failure prints the file, line and
 *                             condition
 *   tap_ok(cond, fmt, ...)    the same as a function returning cond, for
 *                             "if (!tap_ok(...)) tap_diag(...)"
 *   is_str(a, b, fmt, ...)    strings equal (shows both on failure)
 *   contains(a, b, fmt, ...)  b occurs in a
 *   tap_diag(fmt, ...)        a "# ..." line in the test log
 *   tap_timing()              wall-clock assertions wanted? Only when
 *                             STAGEHAND_TEST_TIMING=1: a loaded CI machine,
 *                             valgrind or sanitizers make them flaky, so by
 *                             default the figure is printed and not judged
 *   tap_done()                the plan line; returns the exit status
 *                             (0 pass, 1 a test failed; 77 is a whole skip)
 *   tap_rmtree(dir)           remove a test's scratch tree (rm -rf, no shell)
 */
#ifndef STAGEHAND_TAP_H
#define STAGEHAND_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

static int tap__n, tap__failed;

/* Report one test; returns cond so callers can add diagnostics on failure. */
static bool tap_ok(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3), unused));
static bool tap_ok(bool cond, const char *fmt, ...)
{
	va_list ap;

	tap__n++;
	if (!cond)
		tap__failed++;
	printf("%sok %d - ", cond ? "" : "not ", tap__n);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	return cond;
}

/* cond is evaluated before the message's arguments (which may show its results). */
#define ok(cond, ...) do { \
	bool tap_ok_ = (cond) ? true : false; \
	if (!tap_ok(tap_ok_, __VA_ARGS__)) \
		printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
} while (0)

#define is_str(a, b, ...) do { \
	const char *tap_a_ = (a), *tap_b_ = (b); \
	bool tap_c_ = tap_a_ && tap_b_ && strcmp(tap_a_, tap_b_) == 0; \
	ok(tap_c_, __VA_ARGS__); \
	if (!tap_c_) \
		printf("#   got '%s', expected '%s'\n", tap_a_ ? tap_a_ : "(null)", \
		       tap_b_ ? tap_b_ : "(null)"); \
} while (0)

#define contains(a, b, ...) do { \
	const char *tap_a_ = (a), *tap_b_ = (b); \
	bool tap_c_ = tap_a_ && tap_b_ && strstr(tap_a_, tap_b_) != NULL; \
	ok(tap_c_, __VA_ARGS__); \
	if (!tap_c_) \
		printf("#   '%s' does not contain '%s'\n", tap_a_ ? tap_a_ : "(null)", \
		       tap_b_ ? tap_b_ : "(null)"); \
} while (0)

/* A diagnostic line ("# ..."), shown by the driver in the test log. */
static void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2), unused));
static void tap_diag(const char *fmt, ...)
{
	va_list ap;

	printf("# ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

/* Are wall-clock assertions asked for (STAGEHAND_TEST_TIMING=1)? */
static bool tap_timing(void) __attribute__((unused));
static bool tap_timing(void)
{
	const char *v = getenv("STAGEHAND_TEST_TIMING");

#if defined(__SANITIZE_ADDRESS__)
	return false;	/* sanitizer builds are several times slower */
#endif
	return v && strcmp(v, "1") == 0;
}

/* Print the plan line and return the exit status. */
static int tap_done(void) __attribute__((unused));
static int tap_done(void)
{
	printf("1..%d\n", tap__n);
	return tap__failed ? 1 : 0;
}

/* rm -rf dir (a mkdtemp path of the test's own), run without a shell. */
static void tap_rmtree(const char *dir) __attribute__((unused));
static void tap_rmtree(const char *dir)
{
	pid_t pid = fork();

	if (pid == 0) {
		execlp("rm", "rm", "-rf", dir, (char *)NULL);
		_exit(127);
	}
	if (pid > 0)
		waitpid(pid, NULL, 0);
}

#endif /* STAGEHAND_TAP_H */
