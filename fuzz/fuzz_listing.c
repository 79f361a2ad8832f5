/*
 * fuzz_listing.c - libFuzzer target for the S3 and WebDAV listing parser
 * (daemon/engine/xfer_url_xml.c, expat): the documents come from remote servers.
 *
 * Byte 0 picks the dialect (bit 0: WebDAV, else S3); the rest is the
 * document. Promises checked: an accepted listing has names that are
 * NUL-terminated, non-empty and shorter than URLX_NAME_MAX, sizes of -1
 * or more, and a NUL-terminated token; a rejected one is empty.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "xfer_url_xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct urlx_listing l;
	char err[512];

	if (size == 0)
		return 0;
	if (urlx_parse(data[0] & 1 ? URLX_DAV : URLX_S3, (const char *)data + 1, size - 1, &l,
		       err, sizeof(err)) < 0) {
		if (l.n || !err[0])
			abort();
		urlx_free(&l);
		return 0;
	}
	for (size_t i = 0; i < l.n; i++) {
		size_t n = strnlen(l.items[i].name, URLX_NAME_MAX);

		if (n == 0 || n >= URLX_NAME_MAX || l.items[i].size < -1)
			abort();
	}
	if (strnlen(l.token, URLX_TOKEN_MAX) >= URLX_TOKEN_MAX)
		abort();
	urlx_free(&l);
	return 0;
}
