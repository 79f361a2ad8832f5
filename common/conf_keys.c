/*
 * conf_keys.c - the stagehand.conf keys: the table generated from
 * lua/stagehand_conf.lua (conf_keys_tab.h), one handler per kind of value
 * (integers, sizes, durations, paths, lists, addresses...) that the table's
 * rows name, and the value syntaxes they share. conf.c owns the file,
 * defaults (from the table), validation across keys and teardown.
 *
 * Must never: name a key (that is the table's job; messages take the key's
 * name from its row).
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/un.h>

#include "conf.h"
#include "conf_int.h"
#include "log.h"
#include "outbound.h"

static void _free_list(char **l)
{
	if (!l)
		return;
	for (char **p = l; *p; p++)
		free(*p);
	free(l);
}

/* Split a comma list into a new NULL-terminated array; empty items dropped. */
static char **_split(const char *val, int lower)
{
	size_t n = 1, k = 0;
	char **l;
	const char *p = val;

	for (const char *q = val; *q; q++)
		if (*q == ',')
			n++;
	l = calloc(n + 1, sizeof(*l));
	if (!l)
		return NULL;
	while (*p) {
		const char *e = strchr(p, ',');
		size_t len = e ? (size_t)(e - p) : strlen(p);
		const char *s = p;

		while (len && isspace((unsigned char)*s)) {
			s++;
			len--;
		}
		while (len && isspace((unsigned char)s[len - 1]))
			len--;
		if (len) {
			l[k] = strndup(s, len);
			if (!l[k]) {
				_free_list(l);
				return NULL;
			}
			if (lower)
				for (char *t = l[k]; *t; t++)
					*t = (char)tolower((unsigned char)*t);
			k++;
		}
		if (!e)
			break;
		p = e + 1;
	}
	return l;
}

static int _set_str(char **dst, const char *val, char *why, size_t whylen)
{
	char *s = strdup(val);

	if (!s)
		return log_errf(why, whylen, "out of memory");
	free(*dst);
	*dst = s;
	return 0;
}

static int _check_abs(const char *val, const char *what, char *why, size_t whylen)
{
	if (val[0] != '/')
		return log_errf(why, whylen, "%s must be an absolute path, not '%s'", what, val);
	if (strlen(val) >= PATH_MAX)
		return log_errf(why, whylen, "%s is longer than %d bytes", what, PATH_MAX - 1);
	for (const char *p = val; *p; p++)
		if (p[0] == '.' && p[1] == '.' && (p == val || p[-1] == '/') &&
		    (p[2] == '/' || p[2] == '\0'))
			return log_errf(why, whylen, "%s must not contain '..': '%s'", what, val);
	return 0;
}

static int _set_path(char **dst, const char *val, const char *what, char *why, size_t whylen)
{
	if (_check_abs(val, what, why, whylen) < 0)
		return -1;
	return _set_str(dst, val, why, whylen);
}

static int _set_roots(char ***dst, const char *val, const char *what, char *why, size_t whylen)
{
	char **l = _split(val, 0);

	if (!l)
		return log_errf(why, whylen, "out of memory");
	for (char **p = l; *p; p++) {
		size_t n = strlen(*p);

		if (_check_abs(*p, what, why, whylen) < 0) {
			_free_list(l);
			return -1;
		}
		while (n > 1 && (*p)[n - 1] == '/')
			(*p)[--n] = '\0';
	}
	_free_list(*dst);
	*dst = l;
	return 0;
}

static int _parse_int(const char *val, long lo, long hi, long *out)
{
	char *end;
	long v;

	errno = 0;
	v = strtol(val, &end, 10);
	if (errno || end == val || *end || v < lo || v > hi)
		return -1;
	*out = v;
	return 0;
}

int conf_parse_bytes(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	uint64_t mult = 1;

	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno)
		return -1;
	switch (toupper((unsigned char)*end)) {
	case 'K': mult = 1ULL << 10; end++; break;
	case 'M': mult = 1ULL << 20; end++; break;
	case 'G': mult = 1ULL << 30; end++; break;
	case 'T': mult = 1ULL << 40; end++; break;
	default: break;
	}
	if (toupper((unsigned char)*end) == 'B')
		end++;
	if (strcasecmp(end, "/s") == 0)
		end += 2;
	if (*end)
		return -1;
	if (v && mult > UINT64_MAX / v)
		return -1;
	*out = (uint64_t)v * mult;
	return 0;
}

int conf_parse_seconds(const char *s, long *out)
{
	char *end;
	long v, mult = 1;

	if (!isdigit((unsigned char)*s))
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno)
		return -1;
	switch (tolower((unsigned char)*end)) {
	case 's': end++; break;
	case 'm': mult = 60; end++; break;
	case 'h': mult = 3600; end++; break;
	case 'd': mult = 86400; end++; break;
	default: break;
	}
	if (*end || v > LONG_MAX / mult)
		return -1;
	*out = v * mult;
	return 0;
}

/* ---- the field a row names ---- */

static void *_field(struct conf *c, const struct conf__key *k)
{
	return (char *)c + k->off;
}

static void _store_int(struct conf *c, const struct conf__key *k, long v)
{
	int i = (int)v;

	memcpy(_field(c, k), &i, sizeof(i));
}

static void _store_u64(struct conf *c, const struct conf__key *k, uint64_t v)
{
	if (k->size == sizeof(uint64_t)) {
		memcpy(_field(c, k), &v, sizeof(v));
	} else {
		uint32_t u = (uint32_t)v;	/* the table's limits keep it in range */

		memcpy(_field(c, k), &u, sizeof(u));
	}
}

static char **_str_field(struct conf *c, const struct conf__key *k)
{
	return (char **)_field(c, k);
}

static char ***_list_field(struct conf *c, const struct conf__key *k)
{
	return (char ***)_field(c, k);
}

static void _set_list(struct conf *c, const struct conf__key *k, char **l)
{
	_free_list(*_list_field(c, k));
	*_list_field(c, k) = l;
}

/* off_word given: unset the pointer field; 1 when it was the word. */
static int _is_off(struct conf *c, const struct conf__key *k, const char *v)
{
	if (!k->off_word || strcasecmp(v, k->off_word) != 0)
		return 0;
	free(*_str_field(c, k));
	*_str_field(c, k) = NULL;
	return 1;
}

static int _must(const struct conf__key *k, const char *v, char *w, size_t wl)
{
	return log_errf(w, wl, "%s must be %s, not '%s'", k->name, k->must, v);
}

/* ---- one handler per kind ---- */

static int _k_int(struct conf *c, const struct conf__key *k, const char *v, char *w, size_t wl)
{
	long n;

	if (_parse_int(v, (long)k->min, (long)k->max, &n) < 0)
		return log_errf(w, wl, "%s must be an integer from %ld to %ld, not '%s'",
			     k->name, (long)k->min, (long)k->max, v);
	_store_int(c, k, n);
	return 0;
}

/* "'a', 'b' or 'c'" from the choices that are not aliases. */
static void _choices_text(const struct conf__key *k, char *out, size_t len)
{
	size_t n = 0, i = 0, o = 0;

	for (const struct conf__choice *ch = k->choices; ch->word; ch++)
		n += !ch->alias;
	out[0] = '\0';
	for (const struct conf__choice *ch = k->choices; ch->word && o < len; ch++) {
		if (ch->alias)
			continue;
		i++;
		o += (size_t)snprintf(out + o, len - o, "%s'%s'", i == 1 ? "" :
				      i == n ? " or " : ", ", ch->word);
	}
}

static const struct conf__choice *_choice(const struct conf__key *k, const char *v, char *w,
					  size_t wl)
{
	char list[256];

	for (const struct conf__choice *ch = k->choices; ch->word; ch++)
		if (strcasecmp(v, ch->word) == 0)
			return ch;
	if (k->must) {
		_must(k, v, w, wl);
	} else {
		_choices_text(k, list, sizeof(list));
		log_errf(w, wl, "%s must be %s, not '%s'", k->name, list, v);
	}
	return NULL;
}

static int _k_enum(struct conf *c, const struct conf__key *k, const char *v, char *w, size_t wl)
{
	const struct conf__choice *ch = _choice(k, v, w, wl);

	if (!ch)
		return -1;
	_store_int(c, k, ch->value);
	return 0;
}

/* One of the choices, kept as a lower-case string. */
static int _k_word(struct conf *c, const struct conf__key *k, const char *v, char *w, size_t wl)
{
	if (!_choice(k, v, w, wl) || _set_str(_str_field(c, k), v, w, wl) < 0)
		return -1;
	for (char *p = *_str_field(c, k); *p; p++)
		*p = (char)tolower((unsigned char)*p);
	return 0;
}

static int _k_duration(struct conf *c, const struct conf__key *k, const char *v, char *w,
		       size_t wl)
{
	long s;

	if (k->off_word && strcasecmp(v, k->off_word) == 0) {
		_store_int(c, k, k->off_value);
		return 0;
	}
	if (conf_parse_seconds(v, &s) < 0 || (uint64_t)s < k->min || (uint64_t)s > k->max)
		return _must(k, v, w, wl);
	_store_int(c, k, s);
	return 0;
}

/* A size Lua reads too takes no "/s": stagehand.lua reads sizes, not rates. */
static int _k_size(struct conf *c, const struct conf__key *k, const char *v, char *w, size_t wl)
{
	uint64_t b;

	if ((k->lua && strchr(v, '/')) || conf_parse_bytes(v, &b) < 0 || b < k->min || b > k->max)
		return _must(k, v, w, wl);
	_store_u64(c, k, b);
	return 0;
}

static int _k_path(struct conf *c, const struct conf__key *k, const char *v, char *w, size_t wl)
{
	if (_is_off(c, k, v))
		return 0;
	return _set_path(_str_field(c, k), v, k->name, w, wl);
}

static int _k_sockpath(struct conf *c, const struct conf__key *k, const char *v, char *w,
		       size_t wl)
{
	size_t max = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;

	if (k->max < max)
		max = (size_t)k->max;
	if (strlen(v) > max)
		return log_errf(w, wl, "%s is longer than %zu bytes (a UNIX socket limit)",
			     k->name, max);
	return _k_path(c, k, v, w, wl);
}

static int _k_roots(struct conf *c, const struct conf__key *k, const char *v, char *w, size_t wl)
{
	char what[64];

	snprintf(what, sizeof(what), "%s entry", k->name);
	return _set_roots(_list_field(c, k), v, what, w, wl);
}

static int _k_names(struct conf *c, const struct conf__key *k, const char *v, char *w, size_t wl)
{
	char **l = _split(v, 0);

	if (!l)
		return log_errf(w, wl, "out of memory");
	for (char **p = l; *p; p++)
		for (const char *q = *p; *q; q++)
			if (isspace((unsigned char)*q) || *q == ':' || *q == '/') {
				log_errf(w, wl, "%s: '%s' is not a valid name", k->name, *p);
				_free_list(l);
				return -1;
			}
	_set_list(c, k, l);
	return 0;
}

static int _k_schemes(struct conf *c, const struct conf__key *k, const char *v, char *w,
		      size_t wl)
{
	char **l = _split(v, 1);

	if (!l)
		return log_errf(w, wl, "out of memory");
	for (char **p = l; *p; p++) {
		int ok = isalpha((unsigned char)(*p)[0]);

		for (const char *q = *p; ok && *q; q++)
			ok = isalnum((unsigned char)*q) || *q == '+' || *q == '-' || *q == '.';
		if (!ok) {
			log_errf(w, wl, "%s: '%s' is not a URL scheme (letters, digits, + - .)",
				 k->name, *p);
			_free_list(l);
			return -1;
		}
	}
	_set_list(c, k, l);
	return 0;
}

static int _k_uids(struct conf *c, const struct conf__key *k, const char *v, char *w, size_t wl)
{
	char **l = _split(v, 0);

	if (!l)
		return log_errf(w, wl, "out of memory");
	for (char **p = l; *p; p++) {
		long u;

		if (_parse_int(*p, 0, 4294967294L, &u) < 0) {
			log_errf(w, wl, "%s: '%s' is not a numeric uid", k->name, *p);
			_free_list(l);
			return -1;
		}
	}
	_set_list(c, k, l);
	return 0;
}

/* HOST:PORT, [V6]:PORT, or off/none: the host in the field, the port in off2. */
static int _k_hostport(struct conf *c, const struct conf__key *k, const char *v, char *w,
		       size_t wl)
{
	const char *colon = strrchr(v, ':');
	unsigned short p;
	long port;
	char *host;

	if (strcasecmp(v, "off") == 0 || strcasecmp(v, "none") == 0) {
		free(*_str_field(c, k));
		*_str_field(c, k) = NULL;
		return 0;
	}
	if (!colon || colon == v || _parse_int(colon + 1, 1, 65535, &port) < 0)
		return _must(k, v, w, wl);
	if (v[0] == '[' && colon[-1] == ']')
		host = strndup(v + 1, (size_t)(colon - v) - 2);
	else
		host = strndup(v, (size_t)(colon - v));
	if (!host)
		return log_errf(w, wl, "out of memory");
	free(*_str_field(c, k));
	*_str_field(c, k) = host;
	p = (unsigned short)port;
	memcpy((char *)c + k->off2, &p, sizeof(p));
	return 0;
}

/* Server=HOST:PORT: read by clients only (dclient.c checks the syntax
 * again when it uses it); the daemon keeps it so one file serves both. */
static int _k_server(struct conf *c, const struct conf__key *k, const char *v, char *w,
		     size_t wl)
{
	const char *colon = strrchr(v, ':');
	long port;

	if (!colon || colon == v || _parse_int(colon + 1, 1, 65535, &port) < 0 ||
	    strpbrk(v, "/ \t") != NULL ||
	    (v[0] != '[' && memchr(v, ':', (size_t)(colon - v)) != NULL) ||
	    (v[0] == '[' && colon[-1] != ']'))
		return log_errf(w, wl, "%s must be HOST:PORT (e.g. mover1:7780 or "
			     "[fd00::5]:7780), not '%s'", k->name, v);
	return _set_str(_str_field(c, k), v, w, wl);
}

static int _k_url(struct conf *c, const struct conf__key *k, const char *v, char *w, size_t wl)
{
	size_t n = strlen(v);
	char *s;

	if (strncasecmp(v, "https://", 8) != 0 && strncasecmp(v, "http://", 7) != 0)
		return log_errf(w, wl, "%s must be an http:// or https:// URL, not '%s'", k->name, v);
	for (const char *p = v; *p; p++)
		if (isspace((unsigned char)*p) || *p == '@')
			return log_errf(w, wl, "%s must not contain spaces or credentials ('@')",
				     k->name);
	if (_set_str(_str_field(c, k), v, w, wl) < 0)
		return -1;
	s = *_str_field(c, k);
	while (n > 8 && s[n - 1] == '/')
		s[--n] = '\0';
	return 0;
}

static int _k_region(struct conf *c, const struct conf__key *k, const char *v, char *w,
		     size_t wl)
{
	if (!*v || strlen(v) > 64)
		return log_errf(w, wl, "%s must be a region name such as us-east-1", k->name);
	for (const char *p = v; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '-' && *p != '_')
			return log_errf(w, wl, "%s '%s': only letters, digits, '-' and '_'",
				     k->name, v);
	return _set_str(_str_field(c, k), v, w, wl);
}

/* /abs/program [ARG...]: split on blanks, no quoting, no shell. */
static int _k_argv(struct conf *c, const struct conf__key *k, const char *v, char *w, size_t wl)
{
	char *copy, *save = NULL, **l, what[96];
	size_t n = 0;

	if (_is_off(c, k, v))
		return 0;
	copy = strdup(v);
	if (!copy || !(l = calloc(strlen(v) / 2 + 2, sizeof(*l)))) {
		free(copy);
		return log_errf(w, wl, "out of memory");
	}
	for (char *t = strtok_r(copy, " \t", &save); t; t = strtok_r(NULL, " \t", &save))
		if (!(l[n++] = strdup(t))) {
			_free_list(l);
			free(copy);
			return log_errf(w, wl, "out of memory");
		}
	free(copy);
	snprintf(what, sizeof(what), "%s's program", k->name);
	if (n == 0 || _check_abs(l[0], what, w, wl) < 0) {
		_free_list(l);
		return n ? -1 : log_errf(w, wl, "%s needs a program (an absolute path)", k->name);
	}
	_set_list(c, k, l);
	return 0;
}

static int _k_partition(struct conf *c, const struct conf__key *k, const char *v, char *w,
			size_t wl)
{
	if (_is_off(c, k, v))
		return 0;
	for (const char *p = v; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '_' && *p != '-' && *p != '.')
			return _must(k, v, w, wl);
	return _set_str(_str_field(c, k), v, w, wl);
}

/*
 * s3://BUCKET/PREFIX/ with %u in the prefix: the site's S3 keys sign only
 * below it, one prefix per user (xfer_url.c checks the normalised key).
 */
static int _k_s3prefix(struct conf *c, const struct conf__key *k, const char *v, char *w,
		       size_t wl)
{
	const char *b = v + 5, *slash, *u;

	if (_is_off(c, k, v))
		return 0;
	if (strncmp(v, "s3://", 5) != 0 || !(slash = strchr(b, '/')) || slash == b)
		return log_errf(w, wl, "%s must be s3://BUCKET/PREFIX/ with %%u for the user's "
				"name (e.g. s3://archive/%%u/), or none; not '%s'", k->name, v);
	for (const char *p = b; p < slash; p++)
		if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '-' &&
		    *p != '.')
			return log_errf(w, wl, "%s: '%.*s' is not an S3 bucket name (lower-case "
					"letters, digits, '-', '.')", k->name, (int)(slash - b), b);
	u = strstr(slash, "%u");
	if (!u)
		return log_errf(w, wl, "%s must hold %%u (the user's name), so that each user "
				"has a prefix of their own: '%s'", k->name, v);
	if (v[strlen(v) - 1] != '/')
		return log_errf(w, wl, "%s must end in '/' (a prefix is a folder, not the "
				"start of a name): '%s'", k->name, v);
	for (const char *p = slash; *p; p++) {
		if (*p == '?' || *p == '#' || isspace((unsigned char)*p) || (unsigned char)*p < 0x20 ||
		    (*p == '%' && p[1] != 'u'))
			return log_errf(w, wl, "%s: no '?', '#', blanks or '%%' but %%u: '%s'",
					k->name, v);
		if (p[0] == '/' && (p[1] == '/' || (p[1] == '.' && (p[2] == '/' || p[2] == '\0' ||
					(p[2] == '.' && (p[3] == '/' || p[3] == '\0'))))))
			return log_errf(w, wl, "%s: no empty, '.' or '..' component: '%s'",
					k->name, v);
	}
	return _set_str(_str_field(c, k), v, w, wl);
}

/* Networks (ADDR or ADDR/BITS, IPv4 or IPv6), checked once here. */
static int _k_nets(struct conf *c, const struct conf__key *k, const char *v, char *w, size_t wl)
{
	char **l = _split(v, 1);
	char why[256];

	if (!l)
		return log_errf(w, wl, "out of memory");
	for (char **p = l; *p; p++) {
		struct outbound_net n;

		if (outbound_parse_net(*p, &n, why, sizeof(why)) < 0) {
			log_errf(w, wl, "%s: %s", k->name, why);
			_free_list(l);
			return -1;
		}
	}
	_set_list(c, k, l);
	return 0;
}

typedef int (*_kind_fn)(struct conf *, const struct conf__key *, const char *, char *, size_t);

static const _kind_fn _kinds[CK_NKINDS] = {
	[CK_INT] = _k_int, [CK_ENUM] = _k_enum, [CK_WORD] = _k_word,
	[CK_DURATION] = _k_duration, [CK_SIZE] = _k_size, [CK_PATH] = _k_path,
	[CK_SOCKPATH] = _k_sockpath, [CK_ROOTS] = _k_roots, [CK_NAMES] = _k_names,
	[CK_SCHEMES] = _k_schemes, [CK_UIDS] = _k_uids, [CK_HOSTPORT] = _k_hostport,
	[CK_SERVER] = _k_server, [CK_URL] = _k_url, [CK_REGION] = _k_region,
	[CK_ARGV] = _k_argv, [CK_PARTITION] = _k_partition, [CK_S3PREFIX] = _k_s3prefix,
	[CK_NETS] = _k_nets,
};

/* ---- the table (lua/stagehand_conf.lua, through conf_keys_gen.lua) ---- */

#include "conf_keys_tab.h"

#define NKEYS (sizeof(_keys) / sizeof(_keys[0]))
_Static_assert(NKEYS <= sizeof(((struct conf *)0)->key_line) / sizeof(int),
	       "conf.key_line is too small");

/* ---- what conf.c uses (conf_int.h) ---- */

const struct conf__key *const conf__keys = _keys;
const size_t conf__nkeys = NKEYS;

int conf__set(struct conf *c, const struct conf__key *k, const char *val, char *why,
	      size_t whylen)
{
	return _kinds[k->kind](c, k, val, why, whylen);
}

void conf__clear(struct conf *c, const struct conf__key *k)
{
	switch (k->kind) {
	case CK_INT: case CK_ENUM: case CK_DURATION: case CK_SIZE:
		return;
	case CK_ROOTS: case CK_NAMES: case CK_SCHEMES: case CK_UIDS: case CK_ARGV: case CK_NETS:
		_set_list(c, k, NULL);
		return;
	default:
		free(*_str_field(c, k));
		*_str_field(c, k) = NULL;
		return;
	}
}

int conf__set_str(char **dst, const char *val, char *why, size_t whylen)
{
	return _set_str(dst, val, why, whylen);
}
