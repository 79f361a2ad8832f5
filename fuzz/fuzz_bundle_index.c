/*
 * fuzz_bundle_index.c - libFuzzer target for the bundle index decoder
 * (common/bundle.c), which 'stagehand restore' and the daemon's resume run
 * on index files anyone with write access to an archive may have edited.
 *
 * The input is index text. Promises checked: an index that is accepted has
 * only safe relative paths, sorted and unique; every member lies inside a
 * bundle it lists; and every accepted entry, written again by the writer,
 * decodes to the same fields (the writer and the decoder agree).
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void _round_trip(const struct bundle_line *e)
{
	struct bundle_line back;
	char err[512], *line = bundle_entry_line(e);

	if (!line)
		abort();	/* an accepted entry must be writable */
	if (bundle_line_decode(line, strlen(line) - 1, &back, err, sizeof(err)) < 0)
		abort();
	if (back.type != BUNDLE_L_ENTRY || back.kind != e->kind || strcmp(back.path, e->path) ||
	    back.num != e->num || back.offset != e->offset || back.mode != e->mode ||
	    back.mtime_ns != e->mtime_ns ||
	    (e->kind == BUNDLE_K_FILE && (back.size != e->size || strcmp(back.cks, e->cks))) ||
	    (e->kind == BUNDLE_K_LINK && strcmp(back.target, e->target)))
		abort();
	bundle_line_clear(&back);
	free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct bundle_index idx;
	char err[512];
	long line;

	if (bundle_index_decode((const char *)data, size, &idx, &line, err, sizeof(err)) < 0) {
		if (idx.nents || idx.nbundles || !err[0])
			abort();	/* a rejection leaves nothing behind and says why */
		return 0;
	}
	for (size_t i = 0; i < idx.nents; i++) {
		const struct bundle_line *e = &idx.ents[i];

		if (bundle_unsafe_name(e->path) || (i && strcmp(idx.ents[i - 1].path, e->path) >= 0))
			abort();
		if (e->num) {
			int b = bundle_index_find(&idx, e->num);

			if (b < 0 || e->offset > idx.bundles[b].size ||
			    (e->kind == BUNDLE_K_FILE && e->size > idx.bundles[b].size - e->offset))
				abort();
		}
		_round_trip(e);
	}
	bundle_index_free(&idx);
	return 0;
}
