/*
 * dsl_expand.c - Slurm filename patterns in plan paths (docs/directives.md,
 * "Paths"): %j %u %x %A %a %%.
 *
 * Owns: turning a checked, unexpanded plan path into the path for one job,
 * and checking the result again, because a job or user name is user text:
 * '/' in it becomes '_' and a result with a '..' component, a control
 * character or nothing left is refused. URLs are returned unchanged (they
 * are not pattern-expanded; '%' in a URL is percent-encoding).
 *
 * Must never: write more than outlen bytes; return a path it has not
 * re-checked.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl.h"
#include "dsl_int.h"
#include "grow.h"
#include "log.h"

struct _buf {
	char *p;
	size_t len, cap;
};

static int _put(struct _buf *b, const char *s, size_t n, bool slash_to_underscore)
{
	size_t i;

	if (grow_array((void **)&b->p, &b->cap, b->len + n + 1, 1, 64) < 0)
		return -1;
	for (i = 0; i < n; i++)
		b->p[b->len++] = slash_to_underscore && s[i] == '/' ? '_' : s[i];
	b->p[b->len] = '\0';
	return 0;
}

/*
 * Long on purpose: the expansion and then every check of its
 * result (URL left alone, control characters, '..', normalisation, room)
 * in one place, so that no caller gets an unchecked path.
 */
int dsl_expand(const char *tmpl, const struct dsl_expand_ctx *ctx,
	       char *out, size_t outlen, char *err, size_t errlen)
{
	struct _buf b = { NULL, 0, 0 };
	size_t n, i;
	char num[32];
	char *norm = NULL;
	int rc = -1;

	if (err && errlen)
		err[0] = '\0';
	if (!tmpl || !ctx || !out || outlen == 0)
		return log_errf(err, errlen, "dsl_expand: missing argument");
	n = strlen(tmpl);
	if (dsl__is_url(tmpl, n)) {
		if (n + 1 > outlen)
			return log_errf(err, errlen, "'%s' is %zu bytes; the buffer holds %zu", tmpl, n,
				     outlen - 1);
		memcpy(out, tmpl, n + 1);
		return 0;
	}
	for (i = 0; i < n; i++) {
		const char *s = tmpl + i;
		size_t sl = 1;
		bool sub = false;
		int k = 0;

		if (tmpl[i] == '%') {
			if (i + 1 >= n) {
				log_errf(err, errlen, "a lone '%%' at the end of '%s'", tmpl);
				goto out;
			}
			switch (tmpl[++i]) {
			case 'j':
				k = snprintf(num, sizeof(num), "%lu", ctx->job_id);
				break;
			case 'A':
				k = snprintf(num, sizeof(num), "%lu",
					     ctx->array_job_id ? ctx->array_job_id : ctx->job_id);
				break;
			case 'a':
				k = snprintf(num, sizeof(num), "%ld",
					     ctx->array_task_id >= 0 ? ctx->array_task_id : 0L);
				break;
			case 'u':
				s = ctx->user ? ctx->user : "";
				sl = strlen(s);
				sub = true;
				break;
			case 'x':
				s = ctx->job_name ? ctx->job_name : "";
				sl = strlen(s);
				sub = true;
				break;
			case '%':
				s = "%";
				break;
			default:
				log_errf(err, errlen, "unknown pattern '%%%c' in '%s' (known: %%j %%u %%x %%A %%a %%%%)",
				      tmpl[i], tmpl);
				goto out;
			}
			if (k < 0 || (size_t)k >= sizeof(num)) {
				log_errf(err, errlen, "cannot format a job number in '%s'", tmpl);
				goto out;
			}
			if (k > 0) {
				s = num;
				sl = (size_t)k;
			}
		}
		if (_put(&b, s, sl, sub)) {
			log_errf(err, errlen, "out of memory expanding '%s'", tmpl);
			goto out;
		}
	}
	if (!b.p && _put(&b, "", 0, false)) {
		log_errf(err, errlen, "out of memory expanding '%s'", tmpl);
		goto out;
	}
	if (dsl__find_control(b.p, b.len) >= 0) {
		log_errf(err, errlen, "'%s' expands to a path with a control character (from the job "
		      "or user name)", tmpl);
		goto out;
	}
	if (dsl__has_dotdot(b.p, b.len)) {
		log_errf(err, errlen, "'%s' expands to '%s', which has a '..' component", tmpl, b.p);
		goto out;
	}
	norm = dsl__normalise(b.p, b.len);
	if (!norm) {
		log_errf(err, errlen, "out of memory expanding '%s'", tmpl);
		goto out;
	}
	if (norm[0] == '\0' || !strcmp(norm, "/")) {
		log_errf(err, errlen, "'%s' expands to '%s', which names no directory", tmpl, b.p);
		goto out;
	}
	n = strlen(norm);
	if (n + 1 > outlen) {
		log_errf(err, errlen, "'%s' expands to %zu bytes; the limit is %zu", tmpl, n, outlen - 1);
		goto out;
	}
	memcpy(out, norm, n + 1);
	rc = 0;
out:
	free(norm);
	free(b.p);
	return rc;
}
