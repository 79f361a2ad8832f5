/* grow.c - see grow.h. */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "grow.h"

/* *n doubled, or -1 when that does not fit a size_t. */
static int _twice(size_t *n)
{
	if (*n > SIZE_MAX / 2)
		return -1;
	*n *= 2;
	return 0;
}

int grow_array(void **v, size_t *cap, size_t need, size_t size, size_t first)
{
	size_t nc = *cap ? *cap : first;
	void *p;

	if (need <= *cap)
		return 0;
	if (size == 0 || first == 0 || (*cap && _twice(&nc) < 0))
		goto overflow;
	while (nc < need)
		if (_twice(&nc) < 0)
			goto overflow;
	if (nc > SIZE_MAX / size)
		goto overflow;
	p = realloc(*v, nc * size);
	if (!p) {
		errno = ENOMEM;
		return -1;
	}
	*v = p;
	*cap = nc;
	return 0;
overflow:
	errno = EOVERFLOW;
	return -1;
}
