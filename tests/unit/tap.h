/*
 * tap.h - a minimal Test Anything Protocol writer for the C unit tests
 * (read by automake's tap-driver.sh). Header-only: each test program
 * includes it once.
 */
#ifndef STAGEHAND_TAP_H
#define STAGEHAND_TAP_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>

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
}

/* Print the plan line and return the exit status. */
static int tap_done(void) __attribute__((unused));
static int tap_done(void)
{
	printf("1..%d\n", tap__n);
	return tap__failed ? 1 : 0;
}

#endif /* STAGEHAND_TAP_H */
