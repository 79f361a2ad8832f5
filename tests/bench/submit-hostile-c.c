/*
 * submit-hostile-c.c - time common/dsl.c's dsl_parse() on script files, for
 * tests/bench/submit-hostile (the C half of the submit-cost benchmark; the
 * parser `stagehand check`, the SPANK plugin and the daemon use).
 *
 *   submit-hostile-c REPS FILE...
 *
 * Each FILE is named SHAPE-BYTES.sh. For each: read it whole, parse it REPS
 * times with the default config and print
 *   RESULT c parse SHAPE BYTES MEDIAN_MS MIN_MS MAX_MS WARNINGS ERRORS
 * (process CPU time around dsl_parse + dsl_plan_free). Exit 1 when a file
 * cannot be read or a parse returns NULL.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsl.h"

static double _cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static int _cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

/* The file's bytes (malloc'd, *len set), or NULL. */
static char *_slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
	    (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
		*len = (size_t)n;
	} else {
		free(buf);
		buf = NULL;
	}
	fclose(f);
	return buf;
}

int main(int argc, char **argv)
{
	int reps = argc > 1 ? atoi(argv[1]) : 0;

	if (argc < 3 || reps < 1 || reps > 1000) {
		fprintf(stderr, "usage: submit-hostile-c REPS FILE...\n");
		return 2;
	}
	for (int i = 2; i < argc; i++) {
		const char *base = strrchr(argv[i], '/') ? strrchr(argv[i], '/') + 1 : argv[i];
		const char *dash = strrchr(base, '-');
		double *t = calloc((size_t)reps, sizeof(*t));
		size_t len = 0, nw = 0, ne = 0;
		char *s = _slurp(argv[i], &len);

		if (!s || !t || !dash) {
			fprintf(stderr, "submit-hostile-c: cannot read %s (or not named SHAPE-BYTES.sh)\n",
				argv[i]);
			return 1;
		}
		for (int r = 0; r < reps; r++) {
			double t0 = _cpu_ms();
			struct dsl_plan *p = dsl_parse(s, len, NULL);

			if (!p) {
				fprintf(stderr, "submit-hostile-c: dsl_parse of %s returned NULL\n", argv[i]);
				return 1;
			}
			nw = p->nwarnings;
			ne = p->nerrors;
			dsl_plan_free(p);
			t[r] = _cpu_ms() - t0;
		}
		qsort(t, (size_t)reps, sizeof(*t), _cmp);
		printf("RESULT c parse %.*s %zu %.3f %.3f %.3f %zu %zu\n", (int)(dash - base), base, len,
		       reps % 2 ? t[reps / 2] : (t[reps / 2 - 1] + t[reps / 2]) / 2, t[0], t[reps - 1],
		       nw, ne);
		fflush(stdout);
		free(s);
		free(t);
	}
	return 0;
}
