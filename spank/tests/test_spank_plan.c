/* Unit tests: the expanded job plan (jobplan.c, over common/dsl.c). */
#include "config.h"

#include <stdlib.h>

#include "jobplan.h"
#include "tests/tap.h"

static int build(const char *script, struct jobplan **jp, char *err, size_t errlen)
{
	struct dsl_expand_ctx ctx = { .job_id = 77, .user = "shtest",
				      .job_name = "my/job", .array_job_id = 0,
				      .array_task_id = -1 };
	err[0] = '\0';
	return jobplan_build(script, strlen(script), NULL, &ctx, "/home/shtest/w", jp,
			     err, errlen);
}

int main(void)
{
	struct jobplan *jp = NULL;
	char err[1024];

	ok(!jobplan_has_directives("#!/bin/bash\n#SBATCH -N1\necho hi\n", 32),
	   "no #DATA: fast path");
	ok(jobplan_has_directives("#!/bin/bash\n#DATA exempt=tmp\n", 29), "#DATA found");
	ok(jobplan_has_directives("#DATA exempt=tmp", 16), "#DATA on line 1");
	ok(!jobplan_has_directives("#!/bin/bash\necho '#DATA'\n", 25),
	   "#DATA not at line start");
	const char nul[] = "#!/bin/bash\0\n#DATA exempt=x\n";
	ok(jobplan_has_directives(nul, sizeof(nul) - 1), "NUL bytes do not stop the scan");

	ok(build("#!/bin/bash\necho hi\n", &jp, err, sizeof(err)) == 0 && jp == NULL,
	   "script without directives: no plan");

	ok(build("#!/bin/bash\n#DATA exempt=tmp\n#DATA archive=results/%j when=success\n"
		 "#DATA exempt=/scratch/%u/x_%x\n#DATA stage_in=/archive/in.dat\n"
		 "#DATA stage_out=logs to=/project/%u/%j\necho\n", &jp, err,
		 sizeof(err)) == 0 && jp != NULL, "plan built (%s)", err);
	if (jp == NULL)
		return tap_done();
	ok(jp->ndirs == 3, "three directories to make (%zu)", jp->ndirs);
	is_str(jp->dirs[0].abs, "/home/shtest/w/tmp", "relative exempt joined");
	is_str(jp->dirs[0].policy, "exempt", "exempt policy");
	ok(jp->dirs[0].line == 2, "line kept");
	is_str(jp->dirs[1].abs, "/home/shtest/w/results/77", "%%j expanded");
	is_str(jp->dirs[1].policy, "pending", "archive dir is pending");
	is_str(jp->dirs[2].abs, "/scratch/shtest/x_my_job", "%%u, %%x expanded, '/' -> '_'");
	is_str(jp->archive_env, "/home/shtest/w/results/77", "STAGEHAND_ARCHIVE_DIRS");
	is_str(jp->exempt_env, "/home/shtest/w/tmp:/scratch/shtest/x_my_job",
	       "STAGEHAND_EXEMPT_DIRS colon-separated");
	ok(jp->has_stage_in, "stage-in noticed");
	json_t *acts = json_object_get(jp->plan, "actions");
	ok(json_array_size(acts) == 5, "plan JSON has every action");
	is_str(json_string_value(json_object_get(json_array_get(acts, 1), "path")),
	       "results/77", "plan JSON path expanded");
	is_str(json_string_value(json_object_get(json_array_get(acts, 4), "to")),
	       "/project/shtest/77", "plan JSON to= expanded");
	is_str(json_string_value(json_object_get(json_array_get(acts, 1), "when")),
	       "success", "options kept");
	jobplan_free(jp);
	jp = NULL;

	ok(build("#!/bin/bash\n#DATA archvie=out\n", &jp, err, sizeof(err)) < 0 &&
	   jp == NULL, "bad directive: error");
	contains(err, "line 2", "error names the line");

	ok(build("#!/bin/bash\n#DATA exempt=a:b\n", &jp, err, sizeof(err)) < 0,
	   "':' in a directory refused (cannot be listed)");
	contains(err, "':'", "message explains");

	ok(build("#!/bin/bash\necho\n#DATA exempt=late\n", &jp, err, sizeof(err)) == 0 &&
	   jp == NULL, "only ignored directives: no plan");

	struct dsl_expand_ctx ctx = { .job_id = 5, .user = "u", .job_name = NULL,
				      .array_job_id = 4, .array_task_id = 1 };
	const char *s = "#DATA archive=out_%A_%a\n";
	ok(jobplan_build(s, strlen(s), NULL, &ctx, "/w/", &jp, err, sizeof(err)) == 0 &&
	   jp != NULL, "array job plan");
	if (jp)
		is_str(jp->dirs[0].abs, "/w/out_4_1", "%%A and %%a expanded, no '//'");
	jobplan_free(jp);
	ok(jobplan_build(s, strlen(s), NULL, &ctx, NULL, &jp, err, sizeof(err)) < 0,
	   "unknown working directory refused");
	return tap_done();
}
