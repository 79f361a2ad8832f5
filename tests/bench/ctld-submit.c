/*
 * ctld-submit.c - submit N held batch jobs as the calling user through
 * libslurm, for tests/bench/ctld-bench: 20,000 sbatch processes would take
 * far longer than the measurement. Each job is what "sbatch --hold
 * --wrap=true" makes. Prints the job ids, one a line.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "slurm_compat.h"

int main(int argc, char **argv)
{
	char *env[] = { "PATH=/usr/bin:/bin", NULL };
	long n = argc > 1 ? strtol(argv[1], NULL, 10) : 0;

	if (n <= 0) {
		fprintf(stderr, "usage: ctld-submit N\n");
		return 2;
	}
	slurm_init(NULL);
	for (long i = 0; i < n; i++) {
		submit_response_msg_t *resp = NULL;
		job_desc_msg_t jd;

		slurm_init_job_desc_msg(&jd);
		jd.name = "ctld-bench";
		jd.script = "#!/bin/sh\ntrue\n";
		jd.work_dir = "/tmp";
		jd.std_out = "/dev/null";
		jd.environment = env;
		jd.env_size = 1;
		jd.user_id = getuid();
		jd.group_id = getgid();
		jd.min_nodes = 1;
		jd.priority = 0;	/* held by its user, as sbatch --hold */
		if (slurm_submit_batch_job(&jd, &resp) != SLURM_SUCCESS) {
			fprintf(stderr, "ctld-submit: job %ld of %ld: %s\n", i + 1, n,
				slurm_strerror(slurm_errno_now()));
			return 1;
		}
		printf("%u\n", slurm_compat_submitted_id(resp));
		slurm_free_submit_response_response_msg(resp);
	}
	slurm_fini();
	return 0;
}
