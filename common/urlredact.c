/* urlredact.c - see urlredact.h. */
#include "config.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "urlredact.h"

/* Where a URL's text ends. */
static int _url_end(char c)
{
	return c == '\0' || isspace((unsigned char)c) || c == '"' || c == '\'' || c == '<' ||
	       c == '>' || c == '`';
}

/*
 * If a URL starts at in[i] (a scheme at a word's start, then "://"), the
 * index just past its "://"; else 0.
 */
static size_t _url_at(const char *in, size_t i)
{
	size_t j = i;

	if (!isalpha((unsigned char)in[i]) || (i > 0 && (isalnum((unsigned char)in[i - 1]) ||
							 in[i - 1] == '+' || in[i - 1] == '-' ||
							 in[i - 1] == '.')))
		return 0;
	while (isalnum((unsigned char)in[j]) || in[j] == '+' || in[j] == '-' || in[j] == '.')
		j++;
	return strncmp(in + j, "://", 3) == 0 ? j + 3 : 0;
}

/* Scan in; call put for each piece of the result. */
static size_t _scan(const char *in, void (*put)(void *, const char *, size_t), void *arg)
{
	size_t i = 0, total = 0;

	while (in[i]) {
		size_t start = i, body = _url_at(in, i), q;

		if (!body) {
			put(arg, in + i, 1);
			total++;
			i++;
			continue;
		}
		for (q = body; !_url_end(in[q]) && in[q] != '?'; q++)
			;
		put(arg, in + start, q - start);
		total += q - start;
		i = q;
		if (in[q] != '?')
			continue;
		put(arg, URL_REDACTED, sizeof(URL_REDACTED) - 1);
		total += sizeof(URL_REDACTED) - 1;
		for (i = q; !_url_end(in[i]) && in[i] != '#'; i++)
			;
		/* A URL ending a clause ("URL: why", "(URL)"): its punctuation is the text's. */
		if (in[i] != '#' && i > q + 1 && strchr(":,;.)", in[i - 1]))
			i--;
		/* the fragment (if any) is copied with the rest of the text */
	}
	return total;
}

struct _buf {
	char *out;
	size_t len, used;
};

static void _put(void *arg, const char *s, size_t n)
{
	struct _buf *b = arg;

	if (b->len == 0)
		return;
	if (b->used + n >= b->len) {
		/* Cut before a piece that does not fit whole: never a part of the redaction. */
		if (s[0] == '?' && n == sizeof(URL_REDACTED) - 1 &&
		    memcmp(s, URL_REDACTED, n) == 0)
			n = 0;
		else
			n = b->len - 1 - b->used;
		b->len = b->used + n + 1;	/* nothing after a cut */
	}
	memcpy(b->out + b->used, s, n);
	b->used += n;
	b->out[b->used] = '\0';
}

size_t url_redact(const char *in, char *out, size_t outlen)
{
	struct _buf b = { out, outlen, 0 };

	if (outlen)
		out[0] = '\0';
	return in ? _scan(in, _put, &b) : 0;
}

static void _count(void *arg, const char *s, size_t n)
{
	(void)arg;
	(void)s;
	(void)n;
}

char *url_redact_dup(const char *in)
{
	size_t n;
	char *s;

	if (!in)
		return NULL;
	n = _scan(in, _count, NULL);
	s = malloc(n + 1);
	if (s)
		url_redact(in, s, n + 1);
	return s;
}

int url_has_query(const char *in)
{
	for (size_t i = 0; in && in[i]; i++) {
		size_t body = _url_at(in, i);

		if (!body)
			continue;
		for (i = body; !_url_end(in[i]); i++)
			if (in[i] == '?')
				return 1;
		if (!in[i])
			break;
	}
	return 0;
}
