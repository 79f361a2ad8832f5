/*
 * test_urlredact.c - common/urlredact.c: the query of every URL in a text
 * becomes "?<redacted>", whatever surrounds it, and nothing else changes.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "tests/tap.h"
#include "urlredact.h"

static const struct {
	const char *in, *out;
} _cases[] = {
	{ "https://h/p?X-Amz-Signature=secret", "https://h/p?<redacted>" },
	{ "s3://b/k?acl", "s3://b/k?<redacted>" },
	{ "https://h/p?a=1#frag", "https://h/p?<redacted>#frag" },
	{ "https://h/p", "https://h/p" },
	{ "https://h/p?", "https://h/p?<redacted>" },
	{ "stage_in https://h/a?sig=secret to /s/x failed: HTTP 403",
	  "stage_in https://h/a?<redacted> to /s/x failed: HTTP 403" },
	{ "'https://h/a?sig=secret'", "'https://h/a?<redacted>'" },
	{ "\"https://h/a?sig=secret\",\"x\"", "\"https://h/a?<redacted>\",\"x\"" },
	{ "two: http://a/?s=1 and ftp://b/c?t=2.", "two: http://a/?<redacted> and ftp://b/c?<redacted>." },
	{ "a local file?yes /scratch/x?y", "a local file?yes /scratch/x?y" },
	{ "HTTPS://H/P?Sig=secret", "HTTPS://H/P?<redacted>" },
	{ "x=https://h/a?sig=secret\tnext", "x=https://h/a?<redacted>\tnext" },
	{ "https://h/a?sig=secret\nnext line", "https://h/a?<redacted>\nnext line" },
	{ "xhttps://h/a?sig=1", "xhttps://h/a?<redacted>" },	/* any scheme */
	{ "://h/a?sig=1", "://h/a?sig=1" },
	{ "cannot stat https://h/a?sig=1: HTTP 403", "cannot stat https://h/a?<redacted>: HTTP 403" },
	{ "(see https://h/a?sig=1)", "(see https://h/a?<redacted>)" },
	{ "https://h/a?:", "https://h/a?<redacted>:" },
	{ "https://h/a?", "https://h/a?<redacted>" },
	{ "", "" },
};

int main(void)
{
	char out[256], small[20];
	char *d;
	size_t need;

	for (size_t i = 0; i < sizeof(_cases) / sizeof(_cases[0]); i++) {
		need = url_redact(_cases[i].in, out, sizeof(out));
		is_str(out, _cases[i].out, "redact '%s'", _cases[i].in);
		ok(need == strlen(_cases[i].out), "... length %zu", need);
		d = url_redact_dup(_cases[i].in);
		is_str(d, _cases[i].out, "... the same by url_redact_dup");
		free(d);
	}
	ok(url_has_query("see https://h/a?x=1") == 1, "url_has_query: yes");
	ok(url_has_query("see https://h/a#x?y") == 1, "url_has_query: a '?' after '#' counts");
	ok(url_has_query("see https://h/a /x?y") == 0, "url_has_query: a '?' outside a URL");
	ok(url_has_query(NULL) == 0, "url_has_query: NULL");

	/* Cut short: never a piece of the secret, never half the marker. */
	need = url_redact("https://hh/p?sig=secretsecret", small, sizeof(small));
	ok(need == strlen("https://hh/p?<redacted>"), "cut: the length needed (%zu)", need);
	ok(strstr(small, "secret") == NULL && strlen(small) < sizeof(small),
	   "cut: no secret in '%s'", small);
	is_str(small, "https://hh/p", "cut before the marker");
	url_redact("https://h/p?sig=s", out, 0);
	ok(1, "outlen 0 writes nothing");
	/* The whole query is dropped even when it is long. */
	{
		char in[200], *r;

		snprintf(in, sizeof(in), "https://h/p?%0150d", 7);
		r = url_redact_dup(in);
		is_str(r, "https://h/p?<redacted>", "a long query");
		free(r);
	}
	return tap_done();
}
