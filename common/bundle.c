/* bundle.c - see bundle.h. */
#include "config.h"

#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bundle.h"
#include "grow.h"
#include "tar.h"

void bundle_name(char out[BUNDLE_NAME_SIZE], int num)
{
	snprintf(out, BUNDLE_NAME_SIZE, "bundle-%06d.tar", num);
}

int bundle_name_parse(const char *s)
{
	int num = 0;

	if (strncmp(s, "bundle-", 7) != 0 || strlen(s) != 17 || strcmp(s + 13, ".tar") != 0)
		return 0;
	for (int i = 7; i < 13; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 0;
		num = num * 10 + (s[i] - '0');
	}
	return num;
}

const char *bundle_unsafe_name(const char *p)
{
	size_t n = strlen(p);

	if (n == 0)
		return "empty name";
	if (n >= BUNDLE_PATH_MAX)
		return "name too long";
	if (p[0] == '/')
		return "absolute name";
	for (const char *s = p; *s;) {
		const char *e = strchr(s, '/');
		size_t k = e ? (size_t)(e - s) : strlen(s);

		if (k == 0)
			return "empty path component";
		if ((k == 1 && s[0] == '.') || (k == 2 && s[0] == '.' && s[1] == '.'))
			return "'.' or '..' component (escapes the destination)";
		if (k > NAME_MAX)
			return "path component longer than NAME_MAX";
		if (!e)
			break;
		s = e + 1;
	}
	return NULL;
}

/* ---- writers ---- */

/* Set key to s, or hexkey to the hex of s when s is not UTF-8. 0 or -1. */
static int _set_name(json_t *o, const char *key, const char *hexkey, const char *s)
{
	size_t n = strlen(s);
	json_t *v;
	char *h;

	if (n >= BUNDLE_PATH_MAX)
		return -1;	/* the decoder would reject it */
	v = json_string(s);
	if (v)
		return json_object_set_new(o, key, v);
	h = malloc(2 * n + 1);
	if (!h)
		return -1;
	for (size_t i = 0; i < n; i++)
		snprintf(h + 2 * i, 3, "%02x", (unsigned char)s[i]);
	v = json_string(h);
	free(h);
	return v ? json_object_set_new(o, hexkey, v) : -1;
}

/* The compact text of o plus '\n'; new string or NULL. Releases o. */
static char *_line(json_t *o, int ok)
{
	char *s = ok && o ? json_dumps(o, JSON_COMPACT) : NULL;
	char *line = NULL;
	size_t n;

	if (s) {
		n = strlen(s);
		line = malloc(n + 2);
		if (line) {
			memcpy(line, s, n);
			line[n] = '\n';
			line[n + 1] = '\0';
		}
	}
	free(s);
	json_decref(o);
	return line;
}

char *bundle_header_line(const struct bundle_header *h)
{
	json_t *o = json_object();
	int ok = o != NULL;

	ok = ok && json_object_set_new(o, "stagehand_index", json_integer(1)) == 0;
	ok = ok && json_object_set_new(o, "checksum", json_string(cksum_algo_name(h->algo))) == 0;
	ok = ok && _set_name(o, "source", "source_hex", h->source) == 0;
	ok = ok && _set_name(o, "dest", "dest_hex", h->dest) == 0;
	ok = ok && json_object_set_new(o, "request", json_integer(h->request)) == 0;
	ok = ok && json_object_set_new(o, "job", json_integer(h->job)) == 0;
	ok = ok && json_object_set_new(o, "uid", json_integer((json_int_t)h->uid)) == 0;
	ok = ok && json_object_set_new(o, "created", json_integer(h->created)) == 0;
	return _line(o, ok);
}

char *bundle_bundle_line(int num, int64_t size, const char *cks, int64_t members)
{
	char bn[BUNDLE_NAME_SIZE];
	json_t *o = json_object();
	int ok = o != NULL;

	bundle_name(bn, num);
	ok = ok && json_object_set_new(o, "bundle", json_string(bn)) == 0;
	ok = ok && json_object_set_new(o, "size", json_integer(size)) == 0;
	ok = ok && json_object_set_new(o, "checksum", json_string(cks)) == 0;
	ok = ok && json_object_set_new(o, "members", json_integer(members)) == 0;
	return _line(o, ok);
}

char *bundle_entry_line(const struct bundle_line *e)
{
	json_t *o = json_object();
	int ok = o != NULL;

	ok = ok && _set_name(o, "path", "path_hex", e->path) == 0;
	ok = ok && json_object_set_new(o, "type", json_string(e->kind == BUNDLE_K_FILE ? "file" :
			e->kind == BUNDLE_K_LINK ? "symlink" : "dir")) == 0;
	if (e->kind == BUNDLE_K_LINK)
		ok = ok && _set_name(o, "target", "target_hex", e->target) == 0;
	if (e->num > 0) {
		char bn[BUNDLE_NAME_SIZE];

		bundle_name(bn, e->num);
		ok = ok && json_object_set_new(o, "bundle", json_string(bn)) == 0;
		ok = ok && json_object_set_new(o, "offset", json_integer(e->offset)) == 0;
	}
	if (e->kind == BUNDLE_K_FILE)
		ok = ok && json_object_set_new(o, "size", json_integer(e->size)) == 0;
	ok = ok && json_object_set_new(o, "mode", json_integer(e->mode)) == 0;
	ok = ok && json_object_set_new(o, "mtime_ns", json_integer(e->mtime_ns)) == 0;
	if (e->kind == BUNDLE_K_FILE)
		ok = ok && json_object_set_new(o, "checksum", json_string(e->cks)) == 0;
	return _line(o, ok);
}

/* ---- the decoder ---- */

/* key as a plain string, or hexkey as the hex of its bytes; new string or NULL. */
static char *_get_name(json_t *o, const char *key, const char *hexkey)
{
	const char *s = json_string_value(json_object_get(o, key));
	const char *h = json_string_value(json_object_get(o, hexkey));
	size_t n;
	char *out;

	if (s && h)
		return NULL;	/* both forms: which one is meant? */
	if (s)	/* jansson refuses \u0000 unless asked: no NUL inside */
		return strlen(s) < BUNDLE_PATH_MAX ? strdup(s) : NULL;
	if (!h || (n = strlen(h)) % 2 || n / 2 >= BUNDLE_PATH_MAX)
		return NULL;
	out = malloc(n / 2 + 1);
	for (size_t i = 0; out && i < n / 2; i++) {
		unsigned v = 0;

		for (int k = 0; k < 2; k++) {
			char c = h[2 * i + (size_t)k];
			int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 :
				c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;

			if (d < 0) {
				free(out);
				return NULL;
			}
			v = v << 4 | (unsigned)d;
		}
		if (v == 0) {
			free(out);
			return NULL;
		}
		out[i] = (char)v;
	}
	if (out)
		out[n / 2] = '\0';
	return out;
}

static int _int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out)
{
	json_t *v = json_object_get(o, key);

	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return -1;
	*out = json_integer_value(v);
	return 0;
}

/*
 * "algo:hex": a known algorithm and lower-case hex digits, no more than the
 * algorithm gives (a short one simply never matches what is read back).
 */
static int _cks(json_t *o, char out[CKSUM_HEX_MAX])
{
	const char *s = json_string_value(json_object_get(o, "checksum"));
	size_t n, max;

	if (!s || (n = strlen(s)) >= CKSUM_HEX_MAX)
		return -1;
	if (strncmp(s, "xxh128:", 7) == 0)
		max = 7 + 32;
	else if (strncmp(s, "sha256:", 7) == 0)
		max = 7 + 64;
	else
		return -1;
	if (n <= 7 || n > max || strspn(s + 7, "0123456789abcdef") != n - 7)
		return -1;
	memcpy(out, s, n + 1);
	return 0;
}

static const char *_decode_entry(json_t *o, struct bundle_line *x)
{
	const char *type = json_string_value(json_object_get(o, "type"));
	json_t *bn = json_object_get(o, "bundle");
	const char *why;
	int64_t v;

	x->type = BUNDLE_L_ENTRY;
	x->path = _get_name(o, "path", "path_hex");
	if (!x->path)
		return "entry without a usable path";
	if ((why = bundle_unsafe_name(x->path)) != NULL)
		return why;
	if (!type || (strcmp(type, "file") && strcmp(type, "symlink") && strcmp(type, "dir")))
		return "type is not file, symlink or dir";
	x->kind = !strcmp(type, "file") ? BUNDLE_K_FILE : !strcmp(type, "symlink") ?
		  BUNDLE_K_LINK : BUNDLE_K_DIR;
	if (_int(o, "mode", 0, 07777, &v) < 0)
		return "mode missing or out of range";
	x->mode = (uint32_t)v;
	if (_int(o, "mtime_ns", INT64_MIN, INT64_MAX, &x->mtime_ns) < 0)
		return "mtime_ns missing";
	if (bn) {
		if (x->kind == BUNDLE_K_DIR)
			return "a directory cannot live in a bundle";
		if (!json_is_string(bn) || !(x->num = bundle_name_parse(json_string_value(bn))))
			return "entry names a bundle the index does not list (not bundle-NNNNNN.tar)";
		if (_int(o, "offset", TAR_BLOCK, INT64_MAX, &x->offset) < 0 ||
		    x->offset % TAR_BLOCK)
			return "offset is not on a tar block after a header";
	} else if (json_object_get(o, "offset")) {
		return "offset without a bundle";
	}
	if (x->kind == BUNDLE_K_FILE) {
		if (_int(o, "size", 0, INT64_MAX, &x->size) < 0)
			return "size missing or out of range";
		if (_cks(o, x->cks) < 0)
			return "checksum missing or not algo:hex";
	}
	if (x->kind == BUNDLE_K_LINK) {
		x->target = _get_name(o, "target", "target_hex");
		if (!x->target || !x->target[0])
			return "symlink without a target";
	}
	return NULL;
}

int bundle_line_decode(const char *line, size_t len, struct bundle_line *out, char *err,
		       size_t errlen)
{
	const char *why = NULL;
	json_t *o;
	int64_t v;

	memset(out, 0, sizeof(*out));
	o = json_loadb(line, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_object(o)) {
		why = "not a JSON object";
	} else if (json_object_get(o, "stagehand_index")) {
		const char *algo = json_string_value(json_object_get(o, "checksum"));

		out->type = BUNDLE_L_HEADER;
		if (_int(o, "stagehand_index", 1, 1, &v) < 0)
			why = "not a stagehand index header of version 1";
		else if (!algo || cksum_algo_from_name(algo, &out->algo) < 0)
			why = "header names no known checksum algorithm";
	} else if (json_object_get(o, "path") || json_object_get(o, "path_hex")) {
		why = _decode_entry(o, out);
	} else if (json_object_get(o, "bundle")) {
		const char *bn = json_string_value(json_object_get(o, "bundle"));

		out->type = BUNDLE_L_BUNDLE;
		if (!bn || !(out->num = bundle_name_parse(bn)))
			why = "bundle name is not bundle-NNNNNN.tar";
		else if (_int(o, "size", 0, INT64_MAX, &out->size) < 0)
			why = "bundle size missing or negative";
		else if (_int(o, "members", 0, INT64_MAX, &out->members) < 0)
			why = "bundle members missing or negative";
		else if (_cks(o, out->cks) < 0)
			why = "bundle checksum missing or not algo:hex";
	} else {
		why = "neither a header, a bundle nor an entry";
	}
	json_decref(o);
	if (why) {
		/* Name the entry (printable and bounded: the line is hostile). */
		if (out->path) {
			char shown[301];
			size_t i;

			for (i = 0; out->path[i] && i < sizeof(shown) - 1; i++)
				shown[i] = (unsigned char)out->path[i] < 0x20 ? '?' : out->path[i];
			shown[i] = '\0';
			snprintf(err, errlen, "path '%s': %s", shown, why);
		} else {
			snprintf(err, errlen, "%s", why);
		}
		bundle_line_clear(out);
		return -1;
	}
	return 0;
}

void bundle_line_clear(struct bundle_line *l)
{
	free(l->path);
	free(l->target);
	memset(l, 0, sizeof(*l));
}

/* ---- the whole index ---- */

int bundle_index_find(const struct bundle_index *idx, int num)
{
	for (size_t i = 0; i < idx->nbundles; i++)
		if (idx->bundles[i].num == num)
			return (int)i;
	return -1;
}

static int _cmp_path(const void *a, const void *b)
{
	return strcmp(((const struct bundle_line *)a)->path, ((const struct bundle_line *)b)->path);
}

/* Append l to *v (n, cap); 0 or -1. l is moved. */
static int _append(struct bundle_line **v, size_t *n, size_t *cap, long **lines, long lineno,
		   struct bundle_line *l)
{
	/* lines, when kept, is v's twin: both grow to the same capacity. */
	size_t nc = *cap, lc = *cap;

	if (grow_array((void **)v, &nc, *n + 1, sizeof(**v), 64) < 0 ||
	    (lines && grow_array((void **)lines, &lc, *n + 1, sizeof(**lines), 64) < 0))
		return -1;
	*cap = nc;
	if (lines)
		(*lines)[*n] = lineno;
	(*v)[(*n)++] = *l;
	memset(l, 0, sizeof(*l));
	return 0;
}

/* The checks of one decoded line against what came before it; NULL or why. */
static const char *_check_line(struct bundle_index *idx, const struct bundle_line *l, long lineno)
{
	int bi;

	if (lineno == 1)
		return l->type == BUNDLE_L_HEADER ? NULL :
		       "the first line is not a stagehand index header (version 1)";
	if (l->type == BUNDLE_L_HEADER)
		return "a second header";
	if (l->type == BUNDLE_L_BUNDLE)
		return bundle_index_find(idx, l->num) >= 0 ? "bundle listed twice" : NULL;
	if (!l->num)
		return NULL;
	bi = bundle_index_find(idx, l->num);
	if (bi < 0)
		return "entry names a bundle the index does not list (before it)";
	/* offset - TAR_BLOCK is the member's header; offset + size must not pass the end. */
	if (l->offset > idx->bundles[bi].size ||
	    (l->kind == BUNDLE_K_FILE && l->size > idx->bundles[bi].size - l->offset))
		return "member runs past the end of its bundle";
	return NULL;
}

int bundle_index_decode(const char *text, size_t len, struct bundle_index *out, long *badline,
			char *err, size_t errlen)
{
	size_t capb = 0, cape = 0;
	long lineno = 0;
	char why[256] = "";

	memset(out, 0, sizeof(*out));
	*badline = 0;
	if (memchr(text, '\0', len)) {
		snprintf(err, errlen, "the index holds a NUL byte");
		return -1;
	}
	for (size_t at = 0; at < len && !why[0];) {
		const char *s = text + at, *nl = memchr(s, '\n', len - at);
		size_t n = nl ? (size_t)(nl - s) : len - at;
		struct bundle_line l;
		const char *bad;

		at += n + (nl ? 1 : 0);
		lineno++;
		if (n == 0)
			continue;
		if (bundle_line_decode(s, n, &l, why, sizeof(why)) < 0)
			break;
		bad = _check_line(out, &l, lineno);
		if (bad)
			snprintf(why, sizeof(why), "%s", bad);
		else if (l.type == BUNDLE_L_HEADER)
			out->algo = l.algo;
		else if ((l.type == BUNDLE_L_BUNDLE &&
			  _append(&out->bundles, &out->nbundles, &capb, NULL, 0, &l) < 0) ||
			 (l.type == BUNDLE_L_ENTRY &&
			  _append(&out->ents, &out->nents, &cape, &out->ent_lines, lineno, &l) < 0))
			snprintf(why, sizeof(why), "out of memory");
		bundle_line_clear(&l);
	}
	if (!why[0] && lineno == 0)
		snprintf(why, sizeof(why), "the index is empty");
	if (!why[0] && out->nents > 1) {
		/* Sort entries and their line numbers together: pair them first. */
		for (size_t i = 0; i < out->nents; i++)
			out->ents[i].members = out->ent_lines[i];
		qsort(out->ents, out->nents, sizeof(out->ents[0]), _cmp_path);
		for (size_t i = 0; i < out->nents; i++) {
			out->ent_lines[i] = (long)out->ents[i].members;
			out->ents[i].members = 0;
		}
		for (size_t i = 1; i < out->nents && !why[0]; i++)
			if (strcmp(out->ents[i - 1].path, out->ents[i].path) == 0) {
				lineno = out->ent_lines[i];
				snprintf(why, sizeof(why), "the same path is listed twice");
			}
	}
	if (why[0]) {
		*badline = lineno;
		snprintf(err, errlen, "%s", why);
		bundle_index_free(out);
		return -1;
	}
	return 0;
}

void bundle_index_free(struct bundle_index *idx)
{
	for (size_t i = 0; i < idx->nbundles; i++)
		bundle_line_clear(&idx->bundles[i]);
	for (size_t i = 0; i < idx->nents; i++)
		bundle_line_clear(&idx->ents[i]);
	free(idx->bundles);
	free(idx->ents);
	free(idx->ent_lines);
	memset(idx, 0, sizeof(*idx));
}
