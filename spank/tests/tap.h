/*
 * tap.h - a few TAP helpers for the plugin's unit tests (header-only).
 * A test prints "ok N - what" or "not ok N - what" and exits 1 if any
 * check failed, 77 to skip.
 */
#ifndef STAGEHAND_SPANK_TAP_H
#define STAGEHAND_SPANK_TAP_H

#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed;

#define ok(cond, ...) do { \
	int tap_c_ = (cond); \
	printf("%s %d - ", tap_c_ ? "ok" : "not ok", ++tap_n); \
	printf(__VA_ARGS__); \
	printf("\n"); \
	if (!tap_c_) { \
		tap_failed++; \
		printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond); \
	} \
} while (0)

#define is_str(a, b, ...) do { \
	const char *_a = (a), *_b = (b); \
	int _c = _a && _b && strcmp(_a, _b) == 0; \
	ok(_c, __VA_ARGS__); \
	if (!_c) \
		printf("#   got '%s', expected '%s'\n", _a ? _a : "(null)", \
		       _b ? _b : "(null)"); \
} while (0)

#define contains(a, b, ...) do { \
	const char *_a = (a), *_b = (b); \
	int _c = _a && _b && strstr(_a, _b) != NULL; \
	ok(_c, __VA_ARGS__); \
	if (!_c) \
		printf("#   '%s' does not contain '%s'\n", _a ? _a : "(null)", _b); \
} while (0)

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}

#endif
