/*
 * grow.h - the one growable array of the tree: room for more elements in an
 * array the caller owns, capacity doubled, sizes checked for overflow.
 *
 * The array is three things the caller keeps together: the pointer (NULL
 * before the first element), its capacity in elements, and how many are in
 * use. grow_array only ever reallocates the pointer and raises the
 * capacity; the elements, the count and the final free() stay the
 * caller's.
 *
 * Must never: leave *v or *cap changed when it fails, or allocate a size
 * that wrapped around SIZE_MAX.
 */
#ifndef STAGEHAND_GROW_H
#define STAGEHAND_GROW_H

#include <stddef.h>

/*
 * Room for need elements of size bytes in *v (capacity *cap elements):
 * nothing to do when need <= *cap; else *v is reallocated to *cap doubled
 * (first when *cap is 0) and doubled again until it holds need, and *cap
 * says the new capacity. *v stays the caller's, to free() once.
 * Returns 0, or -1 with errno ENOMEM (no memory) or EOVERFLOW (the size in
 * bytes does not fit a size_t, or size or first is 0), *v and *cap as
 * they were.
 */
int grow_array(void **v, size_t *cap, size_t need, size_t size, size_t first);

#endif
