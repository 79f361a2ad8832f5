/*
 * tap.h - minimal TAP output for the daemon's unit tests. The exit status
 * is what automake's simple test driver reads: 0 pass, 1 fail, 77 skip.
 */
#ifndef STAGEHAND_TEST_TAP_H
#define STAGEHAND_TEST_TAP_H

#include <stdio.h>

static int tap_n, tap_failed;

#define ok(cond, ...) do { \
	int _c = (cond); \
	tap_n++; \
	printf("%sok %d - ", _c ? "" : "not ", tap_n); \
	printf(__VA_ARGS__); \
	printf("\n"); \
	if (!_c) { \
		tap_failed++; \
		printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
	} \
} while (0)

#define tap_done() (printf("1..%d\n", tap_n), tap_failed ? 1 : 0)

#endif
