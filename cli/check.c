/*
 * check.c - 'stagehand check': validate the #DATA directives of batch
 * scripts offline, with the same parser (common/dsl.c) that the submit-time
 * check is held to. Prints compiler-style diagnostics
 * ("job.sh:4: error: ... [code]") or one JSON document (--json).
 *
 * Exit status: 0 every script is valid, 1 some script has errors, 2 usage
 * error or a script could not be read.
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "grow.h"
#include "conf.h"
#include "dsl.h"

/* A batch script larger than this is surely not one (sbatch's own cap is lower). */
#define CHECK_MAX_SCRIPT (64u * 1024 * 1024)

struct check_opts {
	bool json;
	bool quiet;
	const char *config;        /* --config[=FILE], or NULL */
	int submit_mode;           /* CONF_SUBMIT_HOLD or CONF_SUBMIT_BB */
};

static void _usage(FILE *fp)
{
	fprintf(fp,
		"usage: stagehand check [--json] [--quiet] [--config[=FILE]] SCRIPT...\n"
		"\n"
		"Check the #DATA directives of batch scripts without submitting them,\n"
		"by the site's policy in stagehand.conf (AllowedSchemes, StageInRoots,\n"
		"MaxDirectives, MaxDirectiveLine, MaxPathLength; in bb mode its pools:\n"
		"PoolCapacity, ScratchRoots), as sbatch would, and say what the site's\n"
		"SubmitMode (hold or bb) does with the job.\n"
		"SCRIPT '-' reads standard input.\n"
		"\n"
		"  --config[=FILE]  stagehand.conf whose policy applies (without FILE:\n"
		"             env STAGEHAND_CONF, else " CONF_DEFAULT_FILE "; without the\n"
		"             option, the same file when it exists, else the built-in limits)\n"
		"  --json     print one JSON document: {\"files\":[{\"file\",\"ok\",\"plan\",\n"
		"             \"warnings\",\"errors\"}]}\n"
		"  --quiet    print only errors and warnings, no summary for valid scripts\n"
		"  --help     show this help\n"
		"\n"
		"Exit status: 0 all scripts valid, 1 a script has errors, 2 usage error or\n"
		"unreadable script. The grammar is described in stagehand-directives(7).\n");
}

/* Read a whole file (or stdin for "-"). Returns a new buffer, or NULL with err set. */
static char *_slurp(const char *path, size_t *len, char *err, size_t errlen)
{
	FILE *fp = strcmp(path, "-") ? fopen(path, "rb") : stdin;
	char *buf = NULL;
	size_t cap = 0, n = 0;

	if (!fp) {
		snprintf(err, errlen, "cannot open: %s", strerror(errno));
		return NULL;
	}
	for (;;) {
		size_t got;

		if (n == cap) {
			if (cap >= CHECK_MAX_SCRIPT) {
				snprintf(err, errlen, "larger than %u MiB: not a batch script",
					 CHECK_MAX_SCRIPT / (1024 * 1024));
				goto fail;
			}
			if (grow_array((void **)&buf, &cap, n + 1, 1, 16384) < 0) {
				snprintf(err, errlen, "out of memory");
				goto fail;
			}
		}
		got = fread(buf + n, 1, cap - n, fp);
		n += got;
		if (got == 0) {
			if (ferror(fp)) {
				snprintf(err, errlen, "cannot read: %s", strerror(errno));
				goto fail;
			}
			break;
		}
	}
	if (fp != stdin)
		fclose(fp);
	*len = n;
	return buf;
fail:
	if (fp != stdin)
		fclose(fp);
	free(buf);
	return NULL;
}

static const char *_name(const char *path)
{
	return strcmp(path, "-") ? path : "<stdin>";
}

/* Errors and warnings merged in line order (errors first on one line). */
static void _print_diags(const char *file, const struct dsl_plan *p)
{
	size_t ie = 0, iw = 0;

	while (ie < p->nerrors || iw < p->nwarnings) {
		bool err = iw >= p->nwarnings ||
			   (ie < p->nerrors && p->errors[ie].line <= p->warnings[iw].line);
		const struct dsl_diag *d = err ? &p->errors[ie++] : &p->warnings[iw++];

		printf("%s:%d: %s: %s [%s]\n", file, d->line, err ? "error" : "warning",
		       d->message, d->code);
	}
}

static void _print_action(const struct dsl_directive *d)
{
	switch (d->action) {
	case DSL_STAGE_IN:
		printf("  line %d: stage in %s -> %s\n", d->line, d->path,
		       d->to ? d->to : "(job's input directory)");
		break;
	case DSL_ARCHIVE:
		printf("  line %d: archive %s -> %s (after the job %s; scratch copy %s)\n", d->line,
		       d->path, d->to ? d->to : "(site archive)",
		       d->when == DSL_WHEN_SUCCESS ? "succeeds" : "ends",
		       d->keep ? "kept" : "removed once the archive copy is verified");
		break;
	case DSL_EXEMPT:
		printf("  line %d: exempt %s (never archived)\n", d->line, d->path);
		break;
	case DSL_STAGE_OUT:
		printf("  line %d: stage out %s -> %s\n", d->line, d->path, d->to ? d->to : "?");
		break;
	}
}

static void _print_text(const char *file, const struct dsl_plan *p, const struct check_opts *o)
{
	size_t i, ndir;

	_print_diags(file, p);
	if (p->nerrors) {
		/* the counts, those past the 20 shown of each included */
		printf("%s: %zu error%s, %zu warning%s: the job would be rejected\n", file,
		       p->error_count, p->error_count == 1 ? "" : "s",
		       p->warning_count, p->warning_count == 1 ? "" : "s");
		return;
	}
	if (o->quiet)
		return;
	ndir = p->ndirs + (p->after_line ? 1 : 0);
	if (ndir == 0) {
		printf("%s: no #DATA directives%s\n", file,
		       p->nwarnings ? " in effect" : "");
		return;
	}
	printf("%s: %zu directive%s OK%s\n", file, ndir, ndir == 1 ? "" : "s",
	       p->nwarnings ? " (see warnings)" : "");
	if (p->after_line) {
		char buf[24];

		printf("  line %d: wait for the archive%s of job%s", p->after_line,
		       p->nafter == 1 ? "" : "s", p->nafter == 1 ? "" : "s");
		for (i = 0; i < p->nafter; i++)
			printf("%s %s", i ? "," : "", dsl_after_format(&p->after[i], buf, sizeof(buf)));
		printf(" (held until %s verified%s)\n", p->nafter == 1 ? "it is" : "they are",
		       p->ndirs ? "; stage_in starts then" : "");
	}
	for (i = 0; i < p->ndirs; i++)
		_print_action(&p->dirs[i]);
	if (p->cap_line)
		printf("  line %d: capacity %llu bytes in pool %s%s\n", p->cap_line, p->cap_size,
		       p->cap_pool ? p->cap_pool : "(the site's first)",
		       o->submit_mode == CONF_SUBMIT_BB ? "" : " (ignored: SubmitMode=hold)");
	if (o->submit_mode == CONF_SUBMIT_BB)
		printf("  (SubmitMode=bb: inputs are staged when Slurm sets the job up, before it\n"
		       "   starts; after it, the job stays in stage-out until its archives and\n"
		       "   stage-outs are verified: --dependency=afterburstbuffer waits for that)\n");
	else
		printf("  (SubmitMode=hold: a job with stage_in or after= is held until its inputs\n"
		       "   are staged and the archives it waits for are verified; archives and\n"
		       "   stage-outs run after it ends)\n");
}

/* Append one error at line to the plan's, its message from fmt. 0, or -1 out of memory. */
static int _add_error(struct dsl_plan *p, int line, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int _add_error(struct dsl_plan *p, int line, const char *code, const char *fmt, ...)
{
	struct dsl_diag *d, *e;
	va_list ap;
	int n;

	if (!(e = realloc(p->errors, (p->nerrors + 1) * sizeof(*e))))
		return -1;
	p->errors = e;
	d = &e[p->nerrors];
	memset(d, 0, sizeof(*d));
	d->line = line;
	snprintf(d->code, sizeof(d->code), "%s", code);
	d->token = strdup("");
	va_start(ap, fmt);
	n = vasprintf(&d->message, fmt, ap);
	va_end(ap);
	if (n < 0)
		d->message = NULL;
	if (!d->token || !d->message) {
		free(d->token);
		free(d->message);
		return -1;
	}
	p->nerrors++;
	p->error_count++;
	return 0;
}

/* A scratch root a pool= value can name: letters, digits and / . _ - (the grammar's rule). */
static bool _pool_name(const char *root)
{
	return root[strspn(root, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/._-")] == '\0';
}

/*
 * The site's burst-buffer pools, as lua/stagehand.lua's _pools: with
 * SubmitMode=bb and PoolCapacity set, each scratch root whose name a pool=
 * value can spell (letters, digits and / . _ -). Writes them, ", "-joined,
 * into list and returns how many.
 */
static int _pools(const struct conf *c, char *list, size_t listlen)
{
	size_t used = 0;
	int n = 0;

	list[0] = '\0';
	if (!c || c->submit_mode != CONF_SUBMIT_BB || !c->pool_capacity)
		return 0;
	for (char **r = c->scratch_roots; r && *r; r++) {
		int k;

		if (!_pool_name(*r))
			continue;
		k = snprintf(list + used, listlen - used, "%s%s", n ? ", " : "", *r);
		if (k > 0 && (size_t)k < listlen - used)
			used += (size_t)k;
		n++;
	}
	return n;
}

/* p's capacity line against the site's pools (lua/stagehand.lua, _capacity). */
static int _capacity_error(struct dsl_plan *p, const struct conf *c)
{
	char pools[2048];
	int n = _pools(c, pools, sizeof(pools));

	if (!p->cap_line || !c || c->submit_mode != CONF_SUBMIT_BB)
		return 0;
	if (n == 0)
		return _add_error(p, p->cap_line, "no_pools", "this site has no burst-buffer pools "
				  "(PoolCapacity is not set in stagehand.conf): remove the capacity line");
	if (p->cap_size > c->pool_capacity)
		return _add_error(p, p->cap_line, "capacity_over_pool", "capacity=%llu bytes is "
				  "more than a whole pool (%llu bytes): the job could never be set up",
				  p->cap_size, (unsigned long long)c->pool_capacity);
	if (p->cap_pool) {
		for (char **r = c->scratch_roots; r && *r; r++)
			if (_pool_name(*r) && !strcmp(*r, p->cap_pool))
				return 0;
		return _add_error(p, p->cap_line, "unknown_pool",
				  "pool=%s is not a pool of this site (pools: %s)", p->cap_pool, pools);
	}
	return 0;
}

/*
 * Is the script a heterogeneous job's ("#SBATCH hetjob", or the older
 * "packjob", among the #SBATCH lines sbatch reads: those before the first
 * line that is not a comment or blank)? job_submit.lua learns it from
 * Slurm; the components given on sbatch's command line (A : B) are not
 * seen here.
 */
static bool _hetjob_script(const char *s, size_t len)
{
	size_t i = 0;

	while (i < len) {
		size_t e = i, w;

		while (e < len && s[e] != '\n')
			e++;
		if (e > i && s[i] != '#' && strspn(s + i, " \t\r") < e - i)
			return false;	/* the first command: sbatch stops reading */
		if (e - i > 7 && strncmp(s + i, "#SBATCH", 7) == 0) {
			w = i + 7 + strspn(s + i + 7, " \t");
			if ((e - w >= 6 && strncmp(s + w, "hetjob", 6) == 0 &&
			     w + 6 + strspn(s + w + 6, " \t\r") >= e) ||
			    (e - w >= 7 && strncmp(s + w, "packjob", 7) == 0 &&
			     w + 7 + strspn(s + w + 7, " \t\r") >= e))
				return true;
		}
		i = e + 1;
	}
	return false;
}

/*
 * What job_submit.lua refuses beyond the grammar, in its order (the texts
 * are lua/stagehand.lua's): a capacity line the site's pools cannot take,
 * then in burst-buffer mode #DATA in a heterogeneous job (Slurm stages each
 * component on its own) and after=, where Slurm's afterburstbuffer
 * dependency does the same. Only for a plan without grammar errors, as
 * there. Added to the plan's errors. 0, or -1 when out of memory.
 */
static int _site_errors(struct dsl_plan *p, const struct conf *c, int submit_mode, bool het)
{
	char jobs[64 * 24] = "", buf[24];
	size_t used = 0, before = p->nerrors;
	int n;

	if (p->nerrors)
		return 0;
	if (_capacity_error(p, c) < 0)
		return -1;
	if (p->nerrors > before || submit_mode != CONF_SUBMIT_BB)
		return 0;
	if (het && p->ndirs > 0)
		return _add_error(p, p->dirs[0].line, "hetjob_in_bb_mode", "#DATA in a "
				  "heterogeneous job is not supported in burst-buffer mode: Slurm "
				  "stages each component on its own, and the job would never start; "
				  "give the #DATA lines to a job of their own and start the hetjob "
				  "after it (sbatch --dependency=afterburstbuffer:JOBID), or ask your "
				  "site about hold mode");
	if (!p->after_line)
		return 0;
	for (size_t i = 0; i < p->nafter; i++) {
		n = snprintf(jobs + used, sizeof(jobs) - used, "%s%s", i ? ":" : "",
			     dsl_after_format(&p->after[i], buf, sizeof(buf)));
		if (n < 0 || (size_t)n >= sizeof(jobs) - used)
			break;	/* cannot happen: 64 ids of at most 21 bytes */
		used += (size_t)n;
	}
	return _add_error(p, p->after_line, "after_in_bb_mode", "after= waits for archives in hold "
			  "mode only; this site stages through Slurm's burst buffer, which keeps a "
			  "job in stage-out until its archive is verified: use sbatch "
			  "--dependency=afterburstbuffer:%s instead", jobs);
}

/*
 * The site's policy: --config, else $STAGEHAND_CONF, else the default file
 * when it exists (a host without one checks by the documented defaults).
 * Fills cfg from *conf (kept by the caller). 0, or -1 with a message printed.
 */
static int _site_config(struct check_opts *o, struct conf **conf, struct dsl_config *cfg)
{
	const char *path = o->config ? o->config : getenv("STAGEHAND_CONF");
	char err[512];

	dsl_config_init(cfg);
	if (!path || !*path) {
		if (access(CONF_DEFAULT_FILE, R_OK) != 0)
			return 0;
		path = CONF_DEFAULT_FILE;
	}
	if (!(*conf = conf_create()) || conf_parse_file(*conf, path, err, sizeof(err)) < 0) {
		fprintf(stderr, "stagehand check: %s (fix the file, or name another with --config)\n",
			*conf ? err : "out of memory");
		return -1;
	}
	cfg->allowed_schemes = (const char *const *)(*conf)->allowed_schemes;
	cfg->stage_in_roots = (const char *const *)(*conf)->stage_in_roots;
	cfg->max_directives = (size_t)(*conf)->max_directives;
	cfg->max_line = (size_t)(*conf)->max_directive_line;
	cfg->max_path = (size_t)(*conf)->max_path_length;
	o->submit_mode = (*conf)->submit_mode;
	return 0;
}

static json_t *_file_json(const char *file, const struct dsl_plan *p)
{
	json_t *o = json_object();

	if (!o)
		return NULL;
	json_object_set_new(o, "file", json_string(file));
	json_object_set_new(o, "ok", json_boolean(p->nerrors == 0));
	json_object_set_new(o, "plan", p->nerrors ? json_null() : dsl_plan_to_json(p));
	json_object_set_new(o, "warnings", dsl_diags_to_json(p->warnings, p->nwarnings));
	json_object_set_new(o, "errors", dsl_diags_to_json(p->errors, p->nerrors));
	return o;
}

/*
 * The command line: options may come anywhere before "--"; everything else
 * names a script (into scripts, *n of them). 0 go on, 1 help shown, 2 a
 * usage error shown.
 */
static int _check_args(int argc, char **argv, struct check_opts *o, const char **scripts, int *n)
{
	bool dashdash = false;
	int nstdin = 0;

	for (int i = 1; i < argc; i++) {
		if (!dashdash && !strcmp(argv[i], "--")) {
			dashdash = true;
		} else if (dashdash || argv[i][0] != '-' || argv[i][1] == '\0') {
			scripts[(*n)++] = argv[i];
			if (!strcmp(argv[i], "-"))
				nstdin++;
		} else if (!strcmp(argv[i], "--json")) {
			o->json = true;
		} else if (!strcmp(argv[i], "--quiet") || !strcmp(argv[i], "-q")) {
			o->quiet = true;
		} else if (!strcmp(argv[i], "--config")) {
			o->config = getenv("STAGEHAND_CONF");
			if (!o->config || !*o->config)
				o->config = CONF_DEFAULT_FILE;
		} else if (!strncmp(argv[i], "--config=", 9) && argv[i][9]) {
			o->config = argv[i] + 9;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			_usage(stdout);
			return 1;
		} else {
			fprintf(stderr, "stagehand check: unknown option '%s'\n", argv[i]);
			_usage(stderr);
			return 2;
		}
	}
	if (*n == 0) {
		fprintf(stderr, "stagehand check: no script given (use '-' for standard input)\n");
		_usage(stderr);
		return 2;
	}
	if (nstdin > 1) {
		fprintf(stderr, "stagehand check: '-' (standard input) given more than once\n");
		return 2;
	}
	return 0;
}

/* The site's rules a script is checked against (_site_config). */
struct check_site {
	const struct check_opts *o;
	const struct conf *conf;
	const struct dsl_config *cfg;
};

/*
 * One script checked: its report printed, or appended to files (--json).
 * Returns -1 when it could not be read or checked (out of memory), else 0;
 * *any_error set when the script has an error.
 */
static int _check_one(const char *script, const struct check_site *site, json_t *files,
		      bool *any_error)
{
	const char *file = _name(script);
	char err[256];
	size_t len = 0;
	char *buf = _slurp(script, &len, err, sizeof(err));
	struct dsl_plan *p;
	bool het;
	int rc = 0;

	if (!buf) {
		fprintf(stderr, "stagehand check: %s: %s\n", file, err);
		if (files) {
			json_t *fo = json_pack("{s:s,s:b,s:n,s:[],s:[],s:s}", "file", file, "ok", 0,
					       "plan", "warnings", "errors", "read_error", err);

			if (fo)
				json_array_append_new(files, fo);
		}
		return -1;
	}
	p = dsl_parse(buf, len, site->cfg);
	het = _hetjob_script(buf, len);
	free(buf);
	if (!p) {
		fprintf(stderr, "stagehand check: %s: out of memory\n", file);
		return -1;
	}
	if (_site_errors(p, site->conf, site->o->submit_mode, het) < 0) {
		fprintf(stderr, "stagehand check: %s: out of memory\n", file);
		rc = -1;
	}
	if (p->nerrors)
		*any_error = true;
	if (files) {
		json_t *fo = _file_json(file, p);

		if (!fo || json_array_append_new(files, fo)) {
			fprintf(stderr, "stagehand check: out of memory\n");
			rc = -1;
		}
	} else {
		_print_text(file, p, site->o);
	}
	dsl_plan_free(p);
	return rc;
}

/* --json: the files' reports as one document on stdout (files taken). 0 or -1. */
static int _check_print_json(json_t *files, int submit_mode)
{
	json_t *doc = json_pack("{s:o,s:s}", "files", files, "submit_mode",
				submit_mode == CONF_SUBMIT_BB ? "bb" : "hold");
	int rc = 0;

	if (!doc || json_dumpf(doc, stdout, JSON_INDENT(2)) || fputc('\n', stdout) == EOF) {
		fprintf(stderr, "stagehand check: cannot write the JSON result\n");
		rc = -1;
	}
	json_decref(doc);
	return rc;
}

int cmd_check(int argc, char **argv)
{
	struct check_opts o = { false, false, NULL, CONF_SUBMIT_HOLD };
	struct conf *conf = NULL;
	struct dsl_config cfg;
	json_t *files = NULL;
	const char **scripts;
	int nscripts = 0, rc;
	bool io_error = false, any_error = false;

	scripts = calloc((size_t)argc, sizeof(*scripts));
	if (!scripts) {
		fprintf(stderr, "stagehand check: out of memory\n");
		return 2;
	}
	rc = _check_args(argc, argv, &o, scripts, &nscripts);
	if (rc == 0 && _site_config(&o, &conf, &cfg) < 0)
		rc = 2;
	if (rc == 0 && o.json && !(files = json_array())) {
		fprintf(stderr, "stagehand check: out of memory\n");
		rc = 2;
	}
	if (rc) {
		free(scripts);
		conf_destroy(conf);
		return rc == 1 ? 0 : 2;
	}
	for (int i = 0; i < nscripts; i++)
		if (_check_one(scripts[i], &(struct check_site){ &o, conf, &cfg }, files,
			       &any_error) < 0)
			io_error = true;
	if (files && _check_print_json(files, o.submit_mode) < 0)
		io_error = true;
	if (fflush(stdout) == EOF) {
		fprintf(stderr, "stagehand check: cannot write output: %s\n", strerror(errno));
		io_error = true;
	}
	free(scripts);
	conf_destroy(conf);
	return io_error ? 2 : any_error ? 1 : 0;
}
