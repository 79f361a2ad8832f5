/*
 * fuzz_plan_json.c - libFuzzer target for dsl_plan_from_json (common/dsl_json.c).
 *
 * The daemon reads plans back from Slurm's job record and from the job-end
 * event, so any JSON text may arrive. The input is JSON text; the first
 * byte picks the config as in fuzz_dsl.c. A plan that is accepted must
 * serialise again and be accepted again unchanged (idempotence).
 */
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsl.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const roots[] = { "/archive", NULL };
	struct dsl_config cfg;
	struct dsl_plan *p, *q;
	json_t *j, *k;
	char err[512];

	if (size == 0)
		return 0;
	dsl_config_init(&cfg);
	if (data[0] & 1) {
		cfg.max_directives = 3;
		cfg.max_path = 32;
	}
	if (data[0] & 2)
		cfg.stage_in_roots = roots;
	j = json_loadb((const char *)data + 1, size - 1, 0, NULL);
	if (!j)
		return 0;
	err[0] = '\0';
	p = dsl_plan_from_json(j, &cfg, err, sizeof(err));
	json_decref(j);
	if (!p) {
		if (!err[0]) {
			fprintf(stderr, "fuzz_plan_json: refused without a message\n");
			abort();
		}
		return 0;
	}
	k = dsl_plan_to_json(p);
	if (!k)
		abort();
	q = dsl_plan_from_json(k, &cfg, err, sizeof(err));
	if (!q || q->ndirs != p->ndirs) {
		fprintf(stderr, "fuzz_plan_json: an accepted plan is refused after a round "
			"trip: %s\n", q ? "count differs" : err);
		abort();
	}
	dsl_plan_free(q);
	json_decref(k);
	dsl_plan_free(p);
	return 0;
}
