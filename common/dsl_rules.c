/*
 * dsl_rules.c - the rules for one #DATA value (docs/directives.md, "Paths",
 * "URLs", "Characters and limits"), shared by the script parser and the plan
 * reader so both apply exactly the same checks.
 *
 * Must never: touch the filesystem or the environment; read past a length
 * it is given.
 */
#include "config.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl_int.h"

const char *const dsl__key_names[DSL__NKEYS] = {
	"stage_in", "archive", "exempt", "stage_out", "to", "when", "keep",
	"capacity", "pool", "after",
};

static const char *const _default_schemes[] = {
	"https", "s3", "ftp", "ftps", "sftp", "file", NULL,
};

char *dsl__strndup(const char *s, size_t n)
{
	char *p = malloc(n + 1);

	if (!p)
		return NULL;
	if (n)
		memcpy(p, s, n);
	p[n] = '\0';
	return p;
}

static char *_vstrf(const char *fmt, va_list ap)
{
	va_list ap2;
	int n;
	char *p;

	va_copy(ap2, ap);
	n = vsnprintf(NULL, 0, fmt, ap2);
	va_end(ap2);
	if (n < 0)
		return NULL;
	p = malloc((size_t)n + 1);
	if (!p)
		return NULL;
	if (vsnprintf(p, (size_t)n + 1, fmt, ap) != n) {
		free(p);
		return NULL;
	}
	return p;
}

char *dsl__strf(const char *fmt, ...)
{
	va_list ap;
	char *p;

	va_start(ap, fmt);
	p = _vstrf(fmt, ap);
	va_end(ap);
	return p;
}

int dsl__fail_set(struct dsl__fail *f, const char *code, const char *fmt, ...)
{
	va_list ap;

	/* codes are literals from this library, all shorter than the field */
	snprintf(f->code, sizeof(f->code), "%s", code);
	va_start(ap, fmt);
	f->msg = _vstrf(fmt, ap);
	va_end(ap);
	return f->msg ? 1 : -1;
}

long dsl__find_control(const char *v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		unsigned char c = (unsigned char)v[i];

		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return (long)i;
	}
	return -1;
}

bool dsl__utf8_valid(const char *s, size_t n)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t i = 0;

	while (i < n) {
		unsigned char c = p[i];
		size_t need;
		uint32_t cp, min;

		if (c < 0x80) {
			i++;
			continue;
		}
		if (c >= 0xc2 && c <= 0xdf) {
			need = 1; cp = c & 0x1f; min = 0x80;
		} else if (c >= 0xe0 && c <= 0xef) {
			need = 2; cp = c & 0x0f; min = 0x800;
		} else if (c >= 0xf0 && c <= 0xf4) {
			need = 3; cp = c & 0x07; min = 0x10000;
		} else {
			return false; /* continuation byte, 0xc0/0xc1 or 0xf5.. */
		}
		if (n - i - 1 < need)
			return false;
		for (size_t k = 1; k <= need; k++) {
			if ((p[i + k] & 0xc0) != 0x80)
				return false;
			cp = (cp << 6) | (p[i + k] & 0x3f);
		}
		if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return false;
		i += need + 1;
	}
	return true;
}

bool dsl__is_url(const char *v, size_t n)
{
	size_t i;

	for (i = 0; i + 3 <= n; i++)
		if (v[i] == ':' && v[i + 1] == '/' && v[i + 2] == '/')
			return true;
	return false;
}

bool dsl__has_dotdot(const char *v, size_t n)
{
	size_t i = 0;

	while (i < n) {
		size_t s = i;

		while (i < n && v[i] != '/')
			i++;
		if (i - s == 2 && v[s] == '.' && v[s + 1] == '.')
			return true;
		i++;
	}
	return false;
}

char *dsl__normalise(const char *v, size_t n)
{
	char *out = malloc(n + 2);
	size_t o = 0, i = 0;
	bool abs = n > 0 && v[0] == '/';

	if (!out)
		return NULL;
	if (abs)
		out[o++] = '/';
	while (i < n) {
		size_t s = i, len;

		while (i < n && v[i] != '/')
			i++;
		len = i - s;
		i++;
		if (len == 0 || (len == 1 && v[s] == '.'))
			continue;
		if (o > 0 && out[o - 1] != '/')
			out[o++] = '/';
		memcpy(out + o, v + s, len);
		o += len;
	}
	out[o] = '\0';
	return out;
}

int dsl__rules_init(struct dsl__rules *r, const struct dsl_config *cfg)
{
	struct dsl_config def;
	size_t n = 0, i;

	if (!cfg) {
		dsl_config_init(&def);
		cfg = &def;
	}
	memset(r, 0, sizeof(*r));
	r->schemes = cfg->allowed_schemes ? cfg->allowed_schemes : _default_schemes;
	r->max_directives = cfg->max_directives ? cfg->max_directives : DSL_DEFAULT_MAX_DIRECTIVES;
	r->max_line = cfg->max_line ? cfg->max_line : DSL_DEFAULT_MAX_LINE;
	r->max_path = cfg->max_path ? cfg->max_path : DSL_DEFAULT_MAX_PATH;
	if (cfg->stage_in_roots)
		while (cfg->stage_in_roots[n])
			n++;
	if (n == 0)
		return 0;
	r->roots = calloc(n, sizeof(*r->roots));
	if (!r->roots)
		return -1;
	for (i = 0; i < n; i++) {
		r->roots[i] = dsl__normalise(cfg->stage_in_roots[i], strlen(cfg->stage_in_roots[i]));
		if (!r->roots[i]) {
			r->nroots = i;
			dsl__rules_free(r);
			return -1;
		}
	}
	r->nroots = n;
	return 0;
}

void dsl__rules_free(struct dsl__rules *r)
{
	size_t i;

	for (i = 0; i < r->nroots; i++)
		free(r->roots[i]);
	free(r->roots);
	r->roots = NULL;
	r->nroots = 0;
}

/* A comma-separated list of the strings in a NULL-terminated array (new string). */
static char *_join(const char *const *list, size_t count)
{
	size_t len = 1, i;
	char *s, *p;

	for (i = 0; i < count && list[i]; i++)
		len += strlen(list[i]) + 2;
	s = malloc(len);
	if (!s)
		return NULL;
	p = s;
	for (i = 0; i < count && list[i]; i++) {
		size_t l = strlen(list[i]);

		if (i) {
			memcpy(p, ", ", 2);
			p += 2;
		}
		memcpy(p, list[i], l);
		p += l;
	}
	*p = '\0';
	return s;
}

static bool _under_root(const struct dsl__rules *r, const char *norm)
{
	size_t i;

	if (r->nroots == 0)
		return true;
	for (i = 0; i < r->nroots; i++) {
		const char *root = r->roots[i];
		size_t rl = strlen(root);

		if (rl == 1 && root[0] == '/')
			return norm[0] == '/';
		if (rl && !strncmp(norm, root, rl) && (norm[rl] == '\0' || norm[rl] == '/'))
			return true;
	}
	return false;
}

static int _fail_roots(const struct dsl__rules *r, const char *norm, struct dsl__fail *f)
{
	char *list = _join((const char *const *)r->roots, r->nroots);
	int rc;

	if (!list)
		return -1;
	rc = dsl__fail_set(f, "path_not_allowed",
			   "'%s' is outside the allowed stage-in roots (%s): stage from one of them",
			   norm, list);
	free(list);
	return rc;
}

/* The '%' rules: only %j %u %x %A %a %% are known. */
static int _check_patterns(const char *v, size_t n, struct dsl__fail *f)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (v[i] != '%')
			continue;
		if (i + 1 >= n)
			return dsl__fail_set(f, "bad_pattern",
					     "a lone '%%' at the end of '%.*s': write %%%% for a literal %%",
					     (int)n, v);
		switch (v[i + 1]) {
		case 'j': case 'u': case 'x': case 'A': case 'a': case '%':
			i++;
			break;
		default: {
			/* show the whole UTF-8 character after '%' */
			size_t cl = 1;

			while (i + 1 + cl < n && ((unsigned char)v[i + 1 + cl] & 0xc0) == 0x80)
				cl++;
			return dsl__fail_set(f, "bad_pattern",
					     "unknown pattern '%%%.*s' (known: %%j %%u %%x %%A %%a %%%%)",
					     (int)cl, v + i + 1);
		}
		}
	}
	return 0;
}

/* A path (not a URL): bad_path, path_not_absolute, path_traversal, bad_pattern, path_empty, roots. */
static int _check_path(const struct dsl__rules *r, enum dsl__role role, const char *v, size_t n,
		       char **out, struct dsl__fail *f)
{
	char *norm;
	int rc;

	/* the first character of the normalised path counts too: './~x' is '~x' */
	size_t i = 0;

	while (v[0] != '/' && i < n && (v[i] == '/' || (v[i] == '.' && (i + 1 == n || v[i + 1] == '/'))))
		i++;
	if (i < n && (v[i] == '~' || v[i] == '$'))
		return dsl__fail_set(f, "bad_path",
				     "no shell expansion in #DATA: write the full path instead of '%.*s'",
				     (int)n, v);
	if (role == DSL__ROLE_SOURCE && v[0] != '/')
		return dsl__fail_set(f, "path_not_absolute",
				     "stage_in source must be an absolute path or a URL, not '%.*s'",
				     (int)n, v);
	if (dsl__has_dotdot(v, n))
		return dsl__fail_set(f, "path_traversal",
				     "'..' is not allowed in paths: '%.*s'", (int)n, v);
	rc = _check_patterns(v, n, f);
	if (rc)
		return rc;
	norm = dsl__normalise(v, n);
	if (!norm)
		return -1;
	if (norm[0] == '\0' || !strcmp(norm, "/")) {
		free(norm);
		if (v[0] == '/')
			return dsl__fail_set(f, "path_empty",
					     "'%.*s' names the root directory: name a subdirectory",
					     (int)n, v);
		return dsl__fail_set(f, "path_empty",
				     "'%.*s' names the working directory itself: name a subdirectory",
				     (int)n, v);
	}
	if (role == DSL__ROLE_SOURCE && !_under_root(r, norm)) {
		rc = _fail_roots(r, norm, f);
		free(norm);
		return rc;
	}
	*out = norm;
	return 0;
}

static bool _scheme_char(char c, bool first)
{
	if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
		return true;
	if (first)
		return false;
	return (c >= '0' && c <= '9') || c == '+' || c == '.' || c == '-';
}

static int _check_url(const struct dsl__rules *r, enum dsl__role role, const char *key,
		      const char *v, size_t n, char **out, struct dsl__fail *f)
{
	size_t sl = 0, i;
	const char *rest;
	size_t rl;
	char *url, *norm, *list;
	bool ok = false;
	int rc;

	while (sl + 3 <= n && !(v[sl] == ':' && v[sl + 1] == '/' && v[sl + 2] == '/'))
		sl++;
	if (role == DSL__ROLE_DIR)
		return dsl__fail_set(f, "url_not_allowed",
				     "'%s' needs a directory here, not a URL ('%.*s')", key, (int)n, v);
	for (i = 0; i < sl; i++)
		if (!_scheme_char(v[i], i == 0))
			break;
	if (sl == 0 || i < sl)
		return dsl__fail_set(f, "url_not_allowed",
				     "'%.*s' is not a valid URL scheme in '%.*s'",
				     (int)sl, v, (int)n, v);
	url = dsl__strndup(v, n);
	if (!url)
		return -1;
	for (i = 0; i < sl; i++)
		if (url[i] >= 'A' && url[i] <= 'Z')
			url[i] = (char)(url[i] - 'A' + 'a');
	for (i = 0; r->schemes[i]; i++)
		if (strlen(r->schemes[i]) == sl && !memcmp(r->schemes[i], url, sl))
			ok = true;
	if (!ok) {
		if (!r->schemes[0]) {
			rc = dsl__fail_set(f, "url_not_allowed",
					   "URL scheme '%.*s' is not allowed here (this site allows no URLs)",
					   (int)sl, url);
		} else if (!(list = _join(r->schemes, SIZE_MAX))) {
			rc = -1;
		} else {
			rc = dsl__fail_set(f, "url_not_allowed",
					   "URL scheme '%.*s' is not allowed here (allowed: %s)",
					   (int)sl, url, list);
			free(list);
		}
		free(url);
		return rc;
	}
	rest = v + sl + 3;
	rl = n - sl - 3;
	if (rl == 0) {
		free(url);
		return dsl__fail_set(f, "path_empty", "URL '%.*s' names nothing", (int)n, v);
	}
	if (sl == 4 && !memcmp(url, "file", 4)) {
		rc = 0;
		if (rest[0] != '/')
			rc = dsl__fail_set(f, "path_not_absolute",
					   "a file:// URL needs an absolute path, e.g. file:///data/x, not '%.*s'",
					   (int)n, v);
		else if (dsl__has_dotdot(rest, rl))
			rc = dsl__fail_set(f, "path_traversal",
					   "'..' is not allowed in paths: '%.*s'", (int)n, v);
		if (rc) {
			free(url);
			return rc;
		}
		norm = dsl__normalise(rest, rl);
		if (!norm) {
			free(url);
			return -1;
		}
		if (!strcmp(norm, "/"))
			rc = dsl__fail_set(f, "path_empty",
					   "'%.*s' names the root directory: name a subdirectory",
					   (int)n, v);
		else if (role == DSL__ROLE_SOURCE && !_under_root(r, norm))
			rc = _fail_roots(r, norm, f);
		free(norm);
		if (rc) {
			free(url);
			return rc;
		}
	}
	*out = url;
	return 0;
}

int dsl__check_path_value(const struct dsl__rules *r, enum dsl__role role, const char *key,
			  const char *v, size_t n, char **out, struct dsl__fail *f)
{
	long c;
	int rc;

	*out = NULL;
	if (n == 0)
		return dsl__fail_set(f, "missing_value", "'%s' needs a value", key);
	c = dsl__find_control(v, n);
	if (c >= 0)
		return dsl__fail_set(f, "control_char",
				     "control character in value (byte 0x%02x at offset %ld): remove it",
				     (unsigned)(unsigned char)v[c], c);
	if (n > r->max_path)
		return dsl__fail_set(f, "path_too_long", "path is %zu bytes; the limit is %zu",
				     n, r->max_path);
	if (dsl__is_url(v, n))
		return _check_url(r, role, key, v, n, out, f);
	rc = _check_path(r, role, v, n, out, f);
	/* stage_in's to= keeps one trailing '/': it means "a directory to put the
	   input in" (docs/directives.md, "Where stage_in puts its input"). */
	if (rc == 0 && role == DSL__ROLE_DIR && !strcmp(key, "to") && v[n - 1] == '/') {
		size_t ol = strlen(*out);
		char *o2 = realloc(*out, ol + 2);

		if (!o2) {
			free(*out);
			*out = NULL;
			return -1;
		}
		o2[ol] = '/';
		o2[ol + 1] = '\0';
		*out = o2;
	}
	return rc;
}

char *dsl_after_format(const struct dsl_after *a, char *out, size_t outlen)
{
	/* at most 10 + 1 + 10 digits: never cut with outlen >= 24 */
	if (a->task_id >= 0)
		snprintf(out, outlen, "%lu_%ld", a->job_id, a->task_id);
	else
		snprintf(out, outlen, "%lu", a->job_id);
	return out;
}

/* Decimal digits of n bytes, no leading zero (but "0"), at most DSL_MAX_JOB_ID. */
static int _read_number(const char *s, size_t n, unsigned long *out)
{
	unsigned long long x = 0;

	if (n == 0 || n > 10 || (n > 1 && s[0] == '0'))
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		x = x * 10 + (unsigned)(s[i] - '0');
	}
	if (x > DSL_MAX_JOB_ID)
		return -1;
	*out = (unsigned long)x;
	return 0;
}

int dsl_after_read(const char *s, size_t n, struct dsl_after *a)
{
	const char *u = memchr(s, '_', n);
	unsigned long job, task;

	if (_read_number(s, u ? (size_t)(u - s) : n, &job) < 0 || job == 0)
		return -1;
	a->job_id = job;
	a->task_id = -1;
	if (!u)
		return 0;
	if (_read_number(u + 1, n - (size_t)(u + 1 - s), &task) < 0)
		return -1;
	a->task_id = (long)task;
	return 0;
}

int dsl__check_after_value(const char *v, size_t n, struct dsl_after **out, size_t *nout,
			   struct dsl__fail *f)
{
	struct dsl_after *list = NULL;
	size_t cnt = 0, i = 0;

	*out = NULL;
	*nout = 0;
	if (dsl__find_control(v, n) >= 0)
		return dsl__fail_set(f, "control_char", "control character in value of 'after': remove it");
	if (memchr(v, ',', n))
		return dsl__fail_set(f, "bad_value",
				     "separate job ids with ':' (as in sbatch --dependency=afterok:J1:J2), "
				     "not ',': '%.*s'", (int)n, v);
	for (;;) {
		const char *e = memchr(v + i, ':', n - i);
		size_t l = e ? (size_t)(e - (v + i)) : n - i;
		struct dsl_after a;
		size_t k;

		if (l == 0) {
			free(list);
			return dsl__fail_set(f, "bad_value", "empty job id in '%.*s': write after=J, "
					     "or after=J1:J2 for several jobs", (int)n, v);
		}
		if (dsl_after_read(v + i, l, &a) < 0) {
			free(list);
			return dsl__fail_set(f, "bad_value", "'%.*s' is not a job id: after= takes job "
					     "ids such as 1234, or 1234_7 for one task of an array "
					     "(for other dependencies use sbatch --dependency)",
					     (int)l, v + i);
		}
		for (k = 0; k < cnt; k++)
			if (list[k].job_id == a.job_id && list[k].task_id == a.task_id)
				break;
		if (k == cnt && cnt < DSL_MAX_AFTER + 1) {
			struct dsl_after *nl = realloc(list, (cnt + 1) * sizeof(*list));

			if (!nl) {
				free(list);
				return -1;
			}
			list = nl;
			list[cnt++] = a;
		}
		if (!e)
			break;
		i += l + 1;
	}
	if (cnt > DSL_MAX_AFTER) {
		free(list);
		return dsl__fail_set(f, "bad_value", "after= names more than %d jobs; the limit is %d: "
				     "wait for fewer (or for a job that waits for the others)",
				     DSL_MAX_AFTER, DSL_MAX_AFTER);
	}
	*out = list;
	*nout = cnt;
	return 0;
}

static const char *_done_word(enum dsl_action a)
{
	switch (a) {
	case DSL_ARCHIVE:   return "archived";
	case DSL_EXEMPT:    return "exempt";
	case DSL_STAGE_OUT: return "staged out";
	case DSL_STAGE_IN:  return "staged in";
	}
	return "?";
}

int dsl__clash(const struct dsl_directive *dirs, size_t n, const struct dsl_directive *d,
	       size_t *other)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (dirs[i].action == d->action && !strcmp(dirs[i].path, d->path)) {
			*other = i;
			return 1;
		}
	}
	if (d->action == DSL_STAGE_IN)
		return 0;
	for (i = 0; i < n; i++) {
		bool a_ex = dirs[i].action == DSL_EXEMPT, b_ex = d->action == DSL_EXEMPT;

		if (dirs[i].action == DSL_STAGE_IN || a_ex == b_ex)
			continue;
		if (!strcmp(dirs[i].path, d->path)) {
			*other = i;
			return 2;
		}
	}
	return 0;
}

char *dsl__conflict_msg(const struct dsl_directive *earlier, const struct dsl_directive *d)
{
	return dsl__strf("'%s' is %s (line %d) and %s here: choose one",
			 d->path, _done_word(earlier->action), earlier->line, _done_word(d->action));
}
