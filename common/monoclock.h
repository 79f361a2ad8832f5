/*
 * monoclock.h - the one monotonic clock of the tree: time since an
 * arbitrary start that never jumps (CLOCK_MONOTONIC), for intervals,
 * deadlines, rates and cache ages only. A time that is shown, stored or
 * compared with another host's is the wall clock (time(2)), never this.
 *
 * Inline, so that the SPANK plugin, the CLI, the mover and the daemon use
 * it without linking anything new. CLOCK_MONOTONIC cannot fail on Linux
 * with a valid pointer: its result is not checked.
 */
#ifndef STAGEHAND_MONOCLOCK_H
#define STAGEHAND_MONOCLOCK_H

#include <stdint.h>
#include <time.h>

static inline int64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int64_t mono_ms(void)
{
	return mono_ns() / 1000000;
}

/* Seconds, with the fraction: for rates and durations printed with %.2f. */
static inline double mono_s(void)
{
	return (double)mono_ns() / 1e9;
}

#endif /* STAGEHAND_MONOCLOCK_H */
