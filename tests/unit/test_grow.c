/*
 * test_grow.c - common/grow.c, the one growable array: growth from empty,
 * doubling, a need larger than twice the capacity, nothing done when the
 * room is there, and the sizes that would overflow refused with EOVERFLOW,
 * the array and its capacity left as they were.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "grow.h"
#include "tests/tap.h"

static void _grows(void)
{
	int *v = NULL;
	size_t cap = 0, n;
	int *before;

	ok(grow_array((void **)&v, &cap, 1, sizeof(*v), 4) == 0 && v && cap == 4,
	   "from empty: the first capacity (cap %zu)", cap);
	for (n = 0; n < 4; n++)
		v[n] = (int)n;
	before = v;
	ok(grow_array((void **)&v, &cap, 4, sizeof(*v), 4) == 0 && v == before && cap == 4,
	   "room enough: nothing reallocated");
	ok(grow_array((void **)&v, &cap, 5, sizeof(*v), 4) == 0 && cap == 8,
	   "one more: capacity doubled (cap %zu)", cap);
	ok(v[0] == 0 && v[3] == 3, "the elements kept");
	ok(grow_array((void **)&v, &cap, 100, sizeof(*v), 4) == 0 && cap == 128,
	   "a need past twice: doubled until it holds (cap %zu)", cap);
	v[99] = 99;
	free(v);
}

static void _overflow(void)
{
	char *v = NULL, *kept;
	size_t cap = 0;

	ok(grow_array((void **)&v, &cap, 16, 1, 16) == 0, "a byte buffer of 16");
	kept = v;
	errno = 0;
	ok(grow_array((void **)&v, &cap, SIZE_MAX / 2 + 2, 1, 16) == -1 && errno == EOVERFLOW,
	   "a need past SIZE_MAX / 2: the doubling would wrap, EOVERFLOW");
	ok(v == kept && cap == 16, "the array and its capacity as they were");
	errno = 0;
	ok(grow_array((void **)&v, &cap, SIZE_MAX / 8, 16, 16) == -1 && errno == EOVERFLOW,
	   "elements times their size past SIZE_MAX: EOVERFLOW");
	ok(v == kept && cap == 16, "still as they were");
	errno = 0;
	ok(grow_array((void **)&v, &cap, 17, 0, 16) == -1 && errno == EOVERFLOW,
	   "an element of size 0 refused");
	free(v);
	v = NULL;
	cap = 0;
	errno = 0;
	ok(grow_array((void **)&v, &cap, 1, 1, 0) == -1 && errno == EOVERFLOW && !v && cap == 0,
	   "a first capacity of 0 refused");
}

int main(void)
{
	_grows();
	_overflow();
	return tap_done();
}
