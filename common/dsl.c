/*
 * dsl.c - reading #DATA directives out of a batch script (docs/directives.md).
 *
 * Owns: splitting the script into lines, finding the leading comment block,
 * reading tokens and checking one directive line in the documented order,
 * and the plan-wide duplicate/conflict checks. The rules for a single value
 * are in dsl_rules.c, shared with dsl_plan_from_json().
 *
 * Must never: touch the filesystem, the network or the environment; abort;
 * read past the given length (scripts may hold NUL bytes); cost more than a
 * few passes over the script, whatever it holds. Lines that are not
 * directives cost one memchr() and a few byte compares, only the first
 * DSL_SCAN_LINES lines are read one by one, and the diagnostics are capped
 * (dsl.h): a 4 MB script of any shape parses in a few milliseconds.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "dsl.h"
#include "dsl_int.h"
#include "grow.h"

/* Bytes of a long line kept in a line-level token. */
#define DSL__TOKEN_CUT 64

void dsl_config_init(struct dsl_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->max_directives = DSL_DEFAULT_MAX_DIRECTIVES;
	cfg->max_line = DSL_DEFAULT_MAX_LINE;
	cfg->max_path = DSL_DEFAULT_MAX_PATH;
}

const char *dsl_action_name(enum dsl_action a)
{
	if ((unsigned)a <= DSL_STAGE_OUT)
		return dsl__key_names[a];
	return "unknown";
}

/* One token of a directive line. */
struct _tok {
	const char *raw;     /* token as written */
	size_t rawlen;
	const char *key;
	size_t keylen;
	size_t voff, vlen;   /* value, unquoted, in the scratch buffer */
};

/* Parser state for one dsl_parse() call. */
struct _parser {
	struct dsl__rules rules;
	struct dsl_plan *plan;
	size_t capdirs, capwarn, caperr;
	struct _tok *toks;
	size_t ntoks, captoks;
	char *scratch;       /* unquoted values of the current line */
	size_t scratchlen, capscratch;
	/* diagnostics past DSL_SHOWN_DIAGS: how many, and the line of the first */
	size_t wmore, emore;
	int wmore_line, emore_line;
	size_t *bucket;      /* per path hash: 1 + the latest directive's index, 0: none */
	size_t *chain;       /* per directive: 1 + the index of the previous one in its bucket */
	size_t capchain;
	size_t dbytes;       /* bytes of the directive lines read so far */
	bool stopped;        /* a limit was reached: no more directives are read */
	bool oom;
};

/* True (and the diagnostic counted) when its list is full. */
static bool _full(struct _parser *ps, bool warning, int line)
{
	size_t *more = warning ? &ps->wmore : &ps->emore;
	int *first = warning ? &ps->wmore_line : &ps->emore_line;

	if ((warning ? ps->plan->nwarnings : ps->plan->nerrors) < DSL_SHOWN_DIAGS)
		return false;
	if ((*more)++ == 0)
		*first = line;
	return true;
}

/* Add a diagnostic; takes ownership of msg (may be NULL: out of memory). */
static void _diag(struct _parser *ps, bool warning, int line, const char *code,
		  const char *tok, size_t toklen, char *msg)
{
	struct dsl_plan *pl = ps->plan;
	struct dsl_diag **arr = warning ? &pl->warnings : &pl->errors;
	size_t *n = warning ? &pl->nwarnings : &pl->nerrors;
	size_t *cap = warning ? &ps->capwarn : &ps->caperr;
	struct dsl_diag *d;
	char *t;

	if (_full(ps, warning, line)) {
		free(msg);
		return;
	}
	t = dsl__strndup(tok, toklen);
	if (!msg || !t || grow_array((void **)arr, cap, *n + 1, sizeof(**arr), 8) < 0) {
		free(msg);
		free(t);
		ps->oom = true;
		return;
	}
	d = &(*arr)[(*n)++];
	memset(d, 0, sizeof(*d));
	d->line = line;
	snprintf(d->code, sizeof(d->code), "%s", code);
	d->token = t;
	d->message = msg;
}

/* A line's text made safe for a token (docs: "shown safely"). New string. */
static char *_line_text(const char *line, size_t ll, size_t max_line)
{
	size_t n = ll > max_line ? DSL__TOKEN_CUT : ll;
	bool cut = ll > max_line;
	char *t;
	size_t i;

	if (n > ll)
		n = ll;
	t = malloc(n + 4);
	if (!t)
		return NULL;
	memcpy(t, line, n);
	if (memchr(t, '\0', n) || !dsl__utf8_valid(t, n))
		for (i = 0; i < n; i++)
			if ((unsigned char)t[i] < 0x20 || (unsigned char)t[i] > 0x7e)
				t[i] = '?';
	if (cut) {
		memcpy(t + n, "...", 3);
		n += 3;
	}
	t[n] = '\0';
	return t;
}

static void _line_diag(struct _parser *ps, bool warning, int lineno, const char *code,
		       const char *line, size_t ll, char *msg)
{
	char *t;

	if (_full(ps, warning, lineno)) {
		free(msg);
		return;
	}
	t = _line_text(line, ll, ps->rules.max_line);
	if (!t) {
		free(msg);
		ps->oom = true;
		return;
	}
	_diag(ps, warning, lineno, code, t, strlen(t), msg);
	free(t);
}

static inline bool _blank(char c)
{
	return c == ' ' || c == '\t';
}

/* "#data x=y", "# DATA x=y", "  #DATA x=y": a comment that looks like a directive. */
static bool _looks_misspelt(const char *line, size_t ll)
{
	size_t i = 0;

	while (i < ll && _blank(line[i]))
		i++;
	if (i >= ll || line[i] != '#')
		return false;
	i++;
	while (i < ll && _blank(line[i]))
		i++;
	if (ll - i < 5 || strncasecmp(line + i, "data", 4) || !_blank(line[i + 4]))
		return false;
	return memchr(line + i + 5, '=', ll - i - 5) != NULL;
}

static bool _scratch_put(struct _parser *ps, char c)
{
	if (grow_array((void **)&ps->scratch, &ps->capscratch, ps->scratchlen + 1, 1, 8) < 0)
		return false;
	ps->scratch[ps->scratchlen++] = c;
	return true;
}

/* End of the token starting at i: the next blank or the end of the line. */
static size_t _tok_end(const char *line, size_t ll, size_t i)
{
	while (i < ll && !_blank(line[i]))
		i++;
	return i;
}

/*
 * Read the tokens of a directive line (after "#DATA"). Returns 0, or 1 after
 * reporting the first bad token.
 *
 * Long on purpose: the tokenizer is one state machine over
 * the line (key, '=', quoted or bare value); its states share the position
 * and the error report.
 */
static int _lex(struct _parser *ps, int lineno, const char *line, size_t ll)
{
	size_t i = 5;

	ps->ntoks = 0;
	ps->scratchlen = 0;
	/* values point into scratch, so it must exist even when all are empty */
	if (grow_array((void **)&ps->scratch, &ps->capscratch, ll + 1, 1, 8) < 0) {
		ps->oom = true;
		return 1;
	}
	for (;;) {
		size_t start, eq;
		bool quote_in_key = false;
		struct _tok *t;

		while (i < ll && _blank(line[i]))
			i++;
		if (i >= ll || line[i] == '#')
			return 0;
		start = i;
		while (i < ll && line[i] != '=' && !_blank(line[i])) {
			if (line[i] == '"')
				quote_in_key = true;
			i++;
		}
		if (i >= ll || line[i] != '=' || quote_in_key || i == start) {
			size_t e = _tok_end(line, ll, start);
			const char *why = i >= ll || line[i] != '=' ? ""
					: quote_in_key ? " (a quote may only open right after '=')"
					: " (the key is missing)";

			_diag(ps, false, lineno, "bad_syntax", line + start, e - start,
			      dsl__strf("expected key=value, got '%.*s'%s", (int)(e - start),
					line + start, why));
			return 1;
		}
		eq = i++;
		if (grow_array((void **)&ps->toks, &ps->captoks, ps->ntoks + 1, sizeof(*ps->toks),
			       8) < 0) {
			ps->oom = true;
			return 1;
		}
		t = &ps->toks[ps->ntoks];
		t->raw = line + start;
		t->key = line + start;
		t->keylen = eq - start;
		t->voff = ps->scratchlen;
		if (i < ll && line[i] == '"') {
			bool closed = false;

			i++;
			while (i < ll) {
				char c = line[i];

				if (c == '\\' && i + 1 < ll && (line[i + 1] == '"' || line[i + 1] == '\\')) {
					c = line[i + 1];
					i += 2;
				} else if (c == '"') {
					closed = true;
					i++;
					break;
				} else {
					i++;
				}
				if (!_scratch_put(ps, c)) {
					ps->oom = true;
					return 1;
				}
			}
			if (!closed) {
				_diag(ps, false, lineno, "unterminated_quote", line + start, ll - start,
				      dsl__strf("unterminated quote in '%.*s': close it with \"",
						(int)(ll - start), line + start));
				return 1;
			}
			if (i < ll && !_blank(line[i])) {
				size_t e = _tok_end(line, ll, start);

				_diag(ps, false, lineno, "bad_syntax", line + start, e - start,
				      dsl__strf("a closing quote must be followed by a space: '%.*s'",
						(int)(e - start), line + start));
				return 1;
			}
		} else {
			for (; i < ll && !_blank(line[i]); i++) {
				if (line[i] == '"') {
					size_t e = _tok_end(line, ll, start);

					_diag(ps, false, lineno, "bad_syntax", line + start, e - start,
					      dsl__strf("a quote may only open right after '=': '%.*s'",
							(int)(e - start), line + start));
					return 1;
				}
				if (!_scratch_put(ps, line[i])) {
					ps->oom = true;
					return 1;
				}
			}
		}
		t->rawlen = (size_t)(line + i - t->raw);
		t->vlen = ps->scratchlen - t->voff;
		ps->ntoks++;
	}
}

static int _key_id(const char *k, size_t n)
{
	int i;

	for (i = 0; i < DSL__NKEYS; i++)
		if (strlen(dsl__key_names[i]) == n && !memcmp(dsl__key_names[i], k, n))
			return i;
	return -1;
}

/* Optimal string alignment distance of a (lower-cased) and b; both short. */
static size_t _osa(const char *a, size_t la, const char *b, size_t lb)
{
	size_t d[16][16];
	size_t i, j;

	for (i = 0; i <= la; i++)
		d[i][0] = i;
	for (j = 0; j <= lb; j++)
		d[0][j] = j;
	for (i = 1; i <= la; i++) {
		for (j = 1; j <= lb; j++) {
			char ca = a[i - 1];
			size_t cost, v;

			if (ca >= 'A' && ca <= 'Z')
				ca = (char)(ca - 'A' + 'a');
			cost = ca == b[j - 1] ? 0 : 1;
			v = d[i - 1][j] + 1;
			if (d[i][j - 1] + 1 < v)
				v = d[i][j - 1] + 1;
			if (d[i - 1][j - 1] + cost < v)
				v = d[i - 1][j - 1] + cost;
			if (i > 1 && j > 1) {
				char pa = a[i - 2];

				if (pa >= 'A' && pa <= 'Z')
					pa = (char)(pa - 'A' + 'a');
				if (ca == b[j - 2] && pa == b[j - 1] && d[i - 2][j - 2] + 1 < v)
					v = d[i - 2][j - 2] + 1;
			}
			d[i][j] = v;
		}
	}
	return d[la][lb];
}

/* The key closest to an unknown key, within distance 2, or NULL. */
static const char *_suggest(const char *k, size_t n)
{
	const char *best = NULL;
	size_t bestd = 3;
	int i;

	if (n > 13)
		return NULL;
	for (i = 0; i < DSL__NKEYS; i++) {
		size_t d = _osa(k, n, dsl__key_names[i], strlen(dsl__key_names[i]));

		if (d < bestd) {
			bestd = d;
			best = dsl__key_names[i];
		}
	}
	return best;
}

static bool _option_allowed(int action, int key)
{
	switch (action) {
	case DSL__K_STAGE_IN:
	case DSL__K_STAGE_OUT:
		return key == DSL__K_TO;
	case DSL__K_ARCHIVE:
		return key == DSL__K_TO || key == DSL__K_WHEN || key == DSL__K_KEEP;
	default:
		return false;
	}
}

static const char *_options_text(int action)
{
	switch (action) {
	case DSL__K_STAGE_IN:
	case DSL__K_STAGE_OUT:
		return "its options: to";
	case DSL__K_ARCHIVE:
		return "its options: to, when, keep";
	default:
		return "it has no options";
	}
}

/* Report an error for token t. */
static void _tok_err(struct _parser *ps, int lineno, const struct _tok *t, const char *code,
		     char *msg)
{
	_diag(ps, false, lineno, code, t->raw, t->rawlen, msg);
}

/*
 * Check the tokens of one line and build its directive; 0 ok, 1 error reported.
 *
 * Long on purpose: one check per key of a directive, in the
 * grammar's order (docs/directives.md), each with its own diagnostic code.
 */
static int _check_tokens(struct _parser *ps, int lineno, struct dsl_directive *d)
{
	unsigned seen = 0;
	int action = -1;
	size_t k;

	memset(d, 0, sizeof(*d));
	d->line = lineno;
	d->keep = true;
	d->when = DSL_WHEN_ALWAYS;
	for (k = 0; k < ps->ntoks; k++) {
		const struct _tok *t = &ps->toks[k];
		const char *v = ps->scratch + t->voff;
		int key = _key_id(t->key, t->keylen);
		struct dsl__fail f = { .msg = NULL };
		enum dsl__role role;
		char *out = NULL;
		int rc;

		if (key < 0) {
			const char *s = _suggest(t->key, t->keylen);

			if (s)
				_tok_err(ps, lineno, t, "unknown_key",
					 dsl__strf("unknown key '%.*s' \xe2\x80\x94 did you mean '%s'?",
						   (int)t->keylen, t->key, s));
			else
				_tok_err(ps, lineno, t, "unknown_key",
					 dsl__strf("unknown key '%.*s' (keys: stage_in, archive, exempt, "
						   "stage_out, to, when, keep, capacity, pool, after)", (int)t->keylen, t->key));
			return 1;
		}
		if (t->vlen == 0) {
			_tok_err(ps, lineno, t, "missing_value",
				 key == DSL__K_WHEN ? dsl__strf("'when' needs a value: always or success")
				 : key == DSL__K_KEEP ? dsl__strf("'keep' needs a value: yes or no")
				 : key == DSL__K_STAGE_IN ? dsl__strf("'stage_in' needs a value, e.g. stage_in=/archive/data.tar")
				 : key == DSL__K_TO ? dsl__strf("'to' needs a value, e.g. to=/project/results")
				 : dsl__strf("'%s' needs a value, e.g. %s=results/",
					     dsl__key_names[key], dsl__key_names[key]));
			return 1;
		}
		if (seen & (1u << key)) {
			_tok_err(ps, lineno, t, "duplicate_key",
				 dsl__strf("'%s' given twice on this line", dsl__key_names[key]));
			return 1;
		}
		seen |= 1u << key;
		if (k == 0) {
			if (key >= DSL__K_TO) {  /* capacity= first is _capacity_line's */
				_tok_err(ps, lineno, t, "no_action",
					 dsl__strf("a directive starts with an action (stage_in, archive, "
						   "exempt, stage_out), not '%s'", dsl__key_names[key]));
				return 1;
			}
			action = key;
		} else {
			if (key < DSL__K_TO || key == DSL__K_CAPACITY || key == DSL__K_AFTER) {
				_tok_err(ps, lineno, t, "multiple_actions",
					 dsl__strf("one action per line: put '%s' on its own #DATA line",
						   dsl__key_names[key]));
				return 1;
			}
			if (!_option_allowed(action, key)) {
				_tok_err(ps, lineno, t, "option_not_allowed",
					 dsl__strf("'%s' is not an option of %s (%s)", dsl__key_names[key],
						   dsl__key_names[action], _options_text(action)));
				return 1;
			}
		}
		if (key == DSL__K_WHEN || key == DSL__K_KEEP) {
			bool is_when = key == DSL__K_WHEN;

			if (dsl__find_control(v, t->vlen) >= 0) {
				_tok_err(ps, lineno, t, "control_char",
					 dsl__strf("control character in value of '%s': remove it",
						   dsl__key_names[key]));
				return 1;
			}
			if (is_when && t->vlen == 6 && !memcmp(v, "always", 6))
				d->when = DSL_WHEN_ALWAYS;
			else if (is_when && t->vlen == 7 && !memcmp(v, "success", 7))
				d->when = DSL_WHEN_SUCCESS;
			else if (!is_when && t->vlen == 3 && !memcmp(v, "yes", 3))
				d->keep = true;
			else if (!is_when && t->vlen == 2 && !memcmp(v, "no", 2))
				d->keep = false;
			else {
				_tok_err(ps, lineno, t, "bad_value",
					 is_when ? dsl__strf("when must be 'always' or 'success', not '%.*s'",
							     (int)t->vlen, v)
					 : dsl__strf("keep must be 'yes' or 'no', not '%.*s'",
						     (int)t->vlen, v));
				return 1;
			}
			continue;
		}
		if (k == 0)
			role = action == DSL__K_STAGE_IN ? DSL__ROLE_SOURCE : DSL__ROLE_DIR;
		else
			role = action == DSL__K_STAGE_IN ? DSL__ROLE_DIR : DSL__ROLE_DEST;
		rc = dsl__check_path_value(&ps->rules, role, dsl__key_names[key], v, t->vlen, &out, &f);
		if (rc < 0) {
			free(f.msg);
			ps->oom = true;
			return 1;
		}
		if (rc > 0) {
			_tok_err(ps, lineno, t, f.code, f.msg);
			return 1;
		}
		if (k == 0)
			d->path = out;
		else
			d->to = out;
	}
	if (action == DSL__K_STAGE_OUT && !(seen & (1u << DSL__K_TO))) {
		_tok_err(ps, lineno, &ps->toks[0], "missing_option",
			 dsl__strf("stage_out needs to=DEST, e.g. #DATA stage_out=%.*s to=/project/results",
				   (int)ps->toks[0].vlen, ps->scratch + ps->toks[0].voff));
		return 1;
	}
	d->action = (enum dsl_action)action;
	return 0;
}

static void _dir_free(struct dsl_directive *d)
{
	free(d->path);
	free(d->to);
	d->path = d->to = NULL;
}

/*
 * capacity=SIZE: decimal digits and an optional K, M, G or T (powers of
 * 1024, as Slurm's burst_buffer reads them), 1 to DSL_MAX_CAPACITY bytes.
 * Returns 0 with *out set, 1 when v is not such a size.
 */
static int _size_value(const char *v, size_t n, unsigned long long *out)
{
	unsigned long long x = 0, mult = 1;
	size_t i, digits = n;

	if (n > 0 && strchr("KMGT", v[n - 1])) {
		digits = n - 1;
		for (const char *u = "KMGT"; *u; u++) {
			mult *= 1024;
			if (*u == v[n - 1])
				break;
		}
	}
	if (digits == 0 || digits > 15)
		return 1;
	for (i = 0; i < digits; i++) {
		if (v[i] < '0' || v[i] > '9')
			return 1;
		x = x * 10 + (unsigned long long)(v[i] - '0');
	}
	if (x == 0 || x > DSL_MAX_CAPACITY / mult)
		return 1;
	*out = x * mult;
	return 0;
}

/*
 * pool=NAME: what Slurm's burst_buffer reads as a pool name (it ends at a
 * space and is never unquoted), so letters, digits and / . _ - only.
 */
static bool _pool_value(const char *v, size_t n)
{
	size_t i;

	if (n == 0 || n > 255)
		return false;
	for (i = 0; i < n; i++)
		if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= 'A' && v[i] <= 'Z') ||
		      (v[i] >= '0' && v[i] <= '9') || strchr("/._-", v[i])))
			return false;
	return true;
}

/* '#DATA capacity=SIZE [pool=NAME]' (lexed): record it in the plan. */
static void _capacity_line(struct _parser *ps, int lineno)
{
	struct dsl_plan *pl = ps->plan;
	unsigned long long size = 0;
	const char *pool = NULL;
	size_t poollen = 0, k;

	/* Slurm reads these values unquoted: a quoted one is not what it accounts. */
	for (k = 0; k < ps->ntoks; k++) {
		const struct _tok *t = &ps->toks[k];

		if (t->rawlen != t->keylen + 1 + t->vlen) {
			_tok_err(ps, lineno, t, "bad_value",
				 dsl__strf("write '%.*s' without quotes: Slurm reads capacity and pool as written",
					   (int)t->keylen, t->key));
			return;
		}
	}
	for (k = 0; k < ps->ntoks; k++) {
		const struct _tok *t = &ps->toks[k];
		const char *v = ps->scratch + t->voff;
		int key = _key_id(t->key, t->keylen);

		if (k == 0) {
			if (t->vlen == 0) {
				_tok_err(ps, lineno, t, "missing_value",
					 dsl__strf("'capacity' needs a value, e.g. capacity=20G"));
				return;
			}
			if (_size_value(v, t->vlen, &size)) {
				_tok_err(ps, lineno, t, "bad_value",
					 dsl__strf("capacity must be a size in bytes with an optional K, M, G "
						   "or T (powers of 1024), e.g. capacity=20G, not '%.*s'",
						   (int)t->vlen, v));
				return;
			}
			continue;
		}
		if (key != DSL__K_POOL) {
			_tok_err(ps, lineno, t, key < 0 ? "unknown_key" : "option_not_allowed",
				 dsl__strf("'%.*s' is not an option of capacity (its options: pool)",
					   (int)t->keylen, t->key));
			return;
		}
		if (pool) {
			_tok_err(ps, lineno, t, "duplicate_key",
				 dsl__strf("'pool' given twice on this line"));
			return;
		}
		if (!_pool_value(v, t->vlen)) {
			_tok_err(ps, lineno, t, "bad_value",
				 dsl__strf("pool must be a pool name (letters, digits, / . _ -), not '%.*s'",
					   (int)t->vlen, v));
			return;
		}
		pool = v;
		poollen = t->vlen;
	}
	if (pl->cap_line) {
		_tok_err(ps, lineno, &ps->toks[0], "duplicate_capacity",
			 dsl__strf("capacity already given on line %d: a job has one size; "
				   "keep one capacity line", pl->cap_line));
		return;
	}
	if (pool && !(pl->cap_pool = dsl__strndup(pool, poollen))) {
		ps->oom = true;
		return;
	}
	pl->cap_line = lineno;
	pl->cap_size = size;
}

/* '#DATA after=J[:J...]' (lexed): record the jobs in the plan. */
static void _after_line(struct _parser *ps, int lineno)
{
	struct dsl_plan *pl = ps->plan;
	const struct _tok *t = &ps->toks[0];
	struct dsl__fail f = { .msg = NULL };
	struct dsl_after *list;
	size_t n;
	int rc;

	if (t->vlen == 0) {
		_tok_err(ps, lineno, t, "missing_value",
			 dsl__strf("'after' needs a value, e.g. after=1234, or after=1234:1240 for "
				   "several jobs"));
		return;
	}
	rc = dsl__check_after_value(ps->scratch + t->voff, t->vlen, &list, &n, &f);
	if (rc < 0) {
		free(f.msg);
		ps->oom = true;
		return;
	}
	if (rc > 0) {
		_tok_err(ps, lineno, t, f.code, f.msg);
		return;
	}
	if (ps->ntoks > 1) {
		const struct _tok *o = &ps->toks[1];
		int key = _key_id(o->key, o->keylen);

		_tok_err(ps, lineno, o, key < 0 ? "unknown_key" : "option_not_allowed",
			 dsl__strf("'%.*s' is not an option of after (it has none: name several "
				   "jobs as after=J1:J2)", (int)o->keylen, o->key));
		free(list);
		return;
	}
	if (pl->after_line) {
		free(list);
		_tok_err(ps, lineno, t, "duplicate_after",
			 dsl__strf("after already given on line %d: list every job on one line, "
				   "after=J1:J2", pl->after_line));
		return;
	}
	pl->after_line = lineno;
	pl->after = list;
	pl->nafter = n;
}

/*
 * Earlier directives by path, in a chained hash: a new directive is compared
 * with those of its own path only (dsl__clash walks every earlier one, which
 * made a site's MaxDirectives=4096 cost the square of that).
 */
#define DSL__PATH_BUCKETS 1024

static size_t _path_bucket(const char *p)
{
	uint32_t h = 2166136261u;

	for (; *p; p++)
		h = (h ^ (unsigned char)*p) * 16777619u;
	return h & (DSL__PATH_BUCKETS - 1);
}

/* As dsl__clash (0, 1 duplicate, 2 conflict, *other set), by d's path only. */
static int _clash(const struct _parser *ps, const struct dsl_directive *d, size_t *other)
{
	const struct dsl_plan *pl = ps->plan;
	size_t i, dup = SIZE_MAX, con = SIZE_MAX;

	if (!ps->bucket)
		return 0;
	/* the chain runs from the latest to the earliest: the last hit is the first */
	for (i = ps->bucket[_path_bucket(d->path)]; i; i = ps->chain[i - 1]) {
		const struct dsl_directive *o = &pl->dirs[i - 1];

		if (strcmp(o->path, d->path))
			continue;
		if (o->action == d->action)
			dup = i - 1;
		else if (d->action != DSL_STAGE_IN && o->action != DSL_STAGE_IN &&
			 (o->action == DSL_EXEMPT) != (d->action == DSL_EXEMPT))
			con = i - 1;
	}
	if (dup != SIZE_MAX) {
		*other = dup;
		return 1;
	}
	if (con != SIZE_MAX) {
		*other = con;
		return 2;
	}
	return 0;
}

/* Index the plan's last directive by its path; false when out of memory. */
static bool _path_add(struct _parser *ps)
{
	size_t n = ps->plan->ndirs, b;

	if (!ps->bucket && !(ps->bucket = calloc(DSL__PATH_BUCKETS, sizeof(*ps->bucket))))
		return false;
	if (grow_array((void **)&ps->chain, &ps->capchain, n, sizeof(*ps->chain), 8) < 0)
		return false;
	b = _path_bucket(ps->plan->dirs[n - 1].path);
	ps->chain[n - 1] = ps->bucket[b];
	ps->bucket[b] = n;
	return true;
}

/* One directive line in the leading block that is within the limit. */
static void _directive(struct _parser *ps, int lineno, const char *line, size_t ll)
{
	struct dsl_plan *pl = ps->plan;
	struct dsl_directive d;
	size_t other;
	int clash;

	if (ll > ps->rules.max_line) {
		_line_diag(ps, false, lineno, "line_too_long", line, ll,
			   dsl__strf("#DATA line is %zu bytes; the limit is %zu: split it or shorten the paths",
				     ll, ps->rules.max_line));
		return;
	}
	ps->dbytes += ll;
	if (ps->dbytes > DSL_MAX_DIRECTIVE_BYTES) {
		ps->stopped = true;
		_line_diag(ps, false, lineno, "too_much_directive_text", line, ll,
			   dsl__strf("the #DATA lines up to this one add up to more than %d bytes, the "
				     "limit: shorten or merge them (this line and the ones after it are "
				     "not read)", DSL_MAX_DIRECTIVE_BYTES));
		return;
	}
	if (memchr(line, '\0', ll)) {
		_line_diag(ps, false, lineno, "nul_byte", line, ll,
			   dsl__strf("NUL byte in #DATA line: remove it"));
		return;
	}
	if (!dsl__utf8_valid(line, ll)) {
		_line_diag(ps, false, lineno, "bad_utf8", line, ll,
			   dsl__strf("invalid UTF-8 in #DATA line: save the script as UTF-8"));
		return;
	}
	if (_lex(ps, lineno, line, ll))
		return;
	if (ps->ntoks == 0) {
		_line_diag(ps, false, lineno, "empty_directive", line, ll,
			   dsl__strf("empty #DATA directive: write e.g. '#DATA archive=results/'"));
		return;
	}
	if (_key_id(ps->toks[0].key, ps->toks[0].keylen) == DSL__K_CAPACITY) {
		_capacity_line(ps, lineno);
		return;
	}
	if (_key_id(ps->toks[0].key, ps->toks[0].keylen) == DSL__K_AFTER) {
		_after_line(ps, lineno);
		return;
	}
	if (_check_tokens(ps, lineno, &d)) {
		_dir_free(&d);
		return;
	}
	clash = _clash(ps, &d, &other);
	if (clash == 1) {
		_diag(ps, true, lineno, "duplicate_directive", ps->toks[0].raw, ps->toks[0].rawlen,
		      dsl__strf("%s of '%s' already declared on line %d: this one is ignored",
				dsl_action_name(d.action), d.path, pl->dirs[other].line));
		_dir_free(&d);
		return;
	}
	if (clash == 2) {
		_tok_err(ps, lineno, &ps->toks[0], "conflict", dsl__conflict_msg(&pl->dirs[other], &d));
		_dir_free(&d);
		return;
	}
	if (grow_array((void **)&pl->dirs, &ps->capdirs, pl->ndirs + 1, sizeof(*pl->dirs), 8) < 0) {
		_dir_free(&d);
		ps->oom = true;
		return;
	}
	pl->dirs[pl->ndirs++] = d;
	if (!_path_add(ps))
		ps->oom = true;
}

/* Length of a stage_in to= without its trailing '/'. */
static size_t _to_len(const char *to)
{
	size_t n = strlen(to);

	return n > 1 && to[n - 1] == '/' ? n - 1 : n;
}

/* Give d's to= its trailing '/' (it names a directory). false when out of memory. */
static bool _to_dir(struct dsl_directive *d)
{
	size_t n = strlen(d->to);
	char *t;

	if (d->to[n - 1] == '/')
		return true;
	t = realloc(d->to, n + 2);
	if (!t)
		return false;
	t[n] = '/';
	t[n + 1] = '\0';
	d->to = t;
	return true;
}

/*
 * Several stage_in lines with the same to= put their inputs in one
 * directory: that to= names a directory, as if written with a trailing '/'
 * (docs/directives.md, "Where stage_in puts its input").
 */
static bool _shared_to_dirs(struct dsl_plan *pl)
{
	for (size_t i = 0; i < pl->ndirs; i++) {
		struct dsl_directive *a = &pl->dirs[i];

		if (a->action != DSL_STAGE_IN || !a->to)
			continue;
		for (size_t k = i + 1; k < pl->ndirs; k++) {
			struct dsl_directive *b = &pl->dirs[k];
			size_t n = _to_len(a->to);

			if (b->action != DSL_STAGE_IN || !b->to || _to_len(b->to) != n ||
			    memcmp(a->to, b->to, n) != 0)
				continue;
			if (!_to_dir(a) || !_to_dir(b))
				return false;
		}
	}
	return true;
}

/*
 * Past the lines read (from scan_end, where line DSL_SCAN_LINES + 1 starts):
 * one search, one warning at most, whatever follows.
 */
static void _past_scan_limit(struct _parser *ps, const char *script, size_t len, size_t scan_end)
{
	const char *p = memmem(script + scan_end - 1, len - scan_end + 1, "\n#DATA", 6);
	const char *line, *nl;
	size_t ll;

	if (!p || _full(ps, true, DSL_SCAN_LINES + 1))
		return;
	line = p + 1;
	nl = memchr(line, '\n', (size_t)(script + len - line));
	ll = nl ? (size_t)(nl - line) : (size_t)(script + len - line);
	if (ll > 0 && line[ll - 1] == '\r')
		ll--;
	_line_diag(ps, true, DSL_SCAN_LINES + 1, "past_scan_limit", line, ll,
		   dsl__strf("a line past line %d starts with '#DATA' (shown); #DATA lines are read "
			     "only in the first %d lines of a script: move it up, next to the #SBATCH lines",
			     DSL_SCAN_LINES, DSL_SCAN_LINES));
}

/* The closing "and N more" diagnostic of a full list (not counted itself). */
static void _more(struct _parser *ps, bool warning)
{
	size_t n = warning ? ps->wmore : ps->emore;
	int line = warning ? ps->wmore_line : ps->emore_line;
	struct dsl_plan *pl = ps->plan;
	struct dsl_diag **arr = warning ? &pl->warnings : &pl->errors;
	size_t *cnt = warning ? &pl->nwarnings : &pl->nerrors;
	size_t *cap = warning ? &ps->capwarn : &ps->caperr;
	struct dsl_diag *d;
	char *msg, *t;

	if (n == 0)
		return;
	msg = dsl__strf("and %zu more %s%s (from line %d on) not shown: fix the ones above, then "
			"run 'stagehand check' on the script again", n, warning ? "warning" : "error",
			n == 1 ? "" : "s", line);
	t = dsl__strndup("", 0);
	if (!msg || !t || grow_array((void **)arr, cap, *cnt + 1, sizeof(**arr), 8) < 0) {
		free(msg);
		free(t);
		ps->oom = true;
		return;
	}
	d = &(*arr)[(*cnt)++];
	memset(d, 0, sizeof(*d));
	d->line = line;
	snprintf(d->code, sizeof(d->code), "%s", warning ? "more_warnings" : "more_errors");
	d->token = t;
	d->message = msg;
}

/* A script with errors has no plan: drop its directives, capacity and after=. */
static void _plan_drop(struct dsl_plan *pl)
{
	size_t i;

	for (i = 0; i < pl->ndirs; i++)
		_dir_free(&pl->dirs[i]);
	free(pl->dirs);
	pl->dirs = NULL;
	pl->ndirs = 0;
	free(pl->cap_pool);
	pl->cap_pool = NULL;
	pl->cap_line = 0;
	pl->cap_size = 0;
	free(pl->after);
	pl->after = NULL;
	pl->nafter = 0;
	pl->after_line = 0;
}

struct dsl_plan *dsl_parse(const char *script, size_t len, const struct dsl_config *cfg)
{
	struct _parser ps;
	size_t pos = 0, ndirlines = 0, scan_end = 0;
	int lineno = 0, first_cmd = 0;
	bool in_block = true;

	memset(&ps, 0, sizeof(ps));
	ps.plan = calloc(1, sizeof(*ps.plan));
	if (!ps.plan)
		return NULL;
	if (dsl__rules_init(&ps.rules, cfg)) {
		free(ps.plan);
		return NULL;
	}
	if (!script)
		len = 0;
	while (pos < len && !ps.oom) {
		const char *line = script + pos;
		const char *nl = memchr(line, '\n', len - pos);
		size_t ll = nl ? (size_t)(nl - line) : len - pos;
		bool is_dir;

		if (lineno >= DSL_SCAN_LINES) {
			scan_end = pos;
			break;
		}
		pos += ll + (nl ? 1 : 0);
		if (ll > 0 && line[ll - 1] == '\r')
			ll--;
		lineno++;
		is_dir = ll >= 5 && line[0] == '#' && !memcmp(line, "#DATA", 5) &&
			 (ll == 5 || _blank(line[5]));
		if (!in_block) {
			if (is_dir)
				_line_diag(&ps, true, lineno, "after_command", line, ll,
					   dsl__strf("#DATA after the first command (line %d) is ignored, "
						     "as sbatch ignores a late #SBATCH: move it above that line",
						     first_cmd));
			continue;
		}
		if (is_dir) {
			if (ps.stopped)
				continue;
			if (++ndirlines > ps.rules.max_directives) {
				_line_diag(&ps, false, lineno, "too_many_directives", line, ll,
					   dsl__strf("more than %zu #DATA directives; the limit is %zu",
						     ps.rules.max_directives, ps.rules.max_directives));
				ps.stopped = true;
				continue;
			}
			_directive(&ps, lineno, line, ll);
			continue;
		}
		{
			size_t i = 0;

			while (i < ll && _blank(line[i]))
				i++;
			if (i == ll)
				continue;
			if (line[i] == '#') {
				if (_looks_misspelt(line, ll))
					_line_diag(&ps, true, lineno, "case_mismatch", line, ll,
						   dsl__strf("this looks like a #DATA directive but is ignored: "
							     "write '#DATA' in capitals at the start of the line"));
				continue;
			}
			in_block = false;
			first_cmd = lineno;
		}
	}
	if (scan_end && !ps.oom)
		_past_scan_limit(&ps, script, len, scan_end);
	ps.plan->warning_count = ps.plan->nwarnings + ps.wmore;
	ps.plan->error_count = ps.plan->nerrors + ps.emore;
	if (!ps.oom) {
		_more(&ps, true);
		_more(&ps, false);
	}
	if (!ps.oom && !_shared_to_dirs(ps.plan))
		ps.oom = true;
	free(ps.toks);
	free(ps.scratch);
	free(ps.bucket);
	free(ps.chain);
	dsl__rules_free(&ps.rules);
	if (ps.oom) {
		dsl_plan_free(ps.plan);
		return NULL;
	}
	if (ps.plan->nerrors)
		_plan_drop(ps.plan);
	return ps.plan;
}

static void _diags_free(struct dsl_diag *d, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		free(d[i].token);
		free(d[i].message);
	}
	free(d);
}

void dsl_plan_free(struct dsl_plan *plan)
{
	size_t i;

	if (!plan)
		return;
	for (i = 0; i < plan->ndirs; i++)
		_dir_free(&plan->dirs[i]);
	free(plan->dirs);
	free(plan->cap_pool);
	free(plan->after);
	_diags_free(plan->warnings, plan->nwarnings);
	_diags_free(plan->errors, plan->nerrors);
	free(plan);
}
