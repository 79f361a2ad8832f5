/*
 * fuzz_tar_read.c - libFuzzer target for the tar reader (common/tar_read.c,
 * libarchive's tar format handler behind our checks). The input is an
 * archive image.
 *
 * Promises checked: every member returned has a non-empty name and a link
 * target of at most TAR_NAME_MAX bytes, and its data lies inside the
 * image; reading stops (end or error) within as many steps as the image
 * has 512-byte blocks, plus one.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tar_reader r;
	struct tar_entry *e;
	char err[512];
	size_t steps = 0;
	int rc;

	if (tar_reader_init_mem(&r, data, size, err, sizeof(err)) < 0)
		return 0;
	while ((rc = tar_reader_next(&r, &e, err, sizeof(err))) == 1) {
		size_t n = strlen(e->path);

		if (n == 0 || n > TAR_NAME_MAX || strlen(e->linkname) > TAR_NAME_MAX ||
		    e->data_offset > size || e->size > size - e->data_offset)
			abort();
		if (++steps > size / TAR_BLOCK + 1)
			abort();
	}
	if (rc < 0 && !err[0])
		abort();
	tar_reader_free(&r);
	return 0;
}
