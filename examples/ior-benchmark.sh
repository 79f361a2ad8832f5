#!/bin/bash
#SBATCH --job-name=ior-easy
#SBATCH --nodes=4
#SBATCH --ntasks-per-node=8
#SBATCH --time=00:30:00
#
# IOR "easy" write/read phases. The test files are throwaway: exempt them so
# the HSM policy never migrates them while IOR hammers the file system. Keep
# the result summaries: archive them once the job succeeded and copy them to
# the project space under the job id.
#DATA exempt=ior-scratch/
#DATA archive=ior-results/ when=success
#DATA stage_out=ior-results to=/project/bench/ior/%j

set -euo pipefail
module load ior
mkdir -p ior-scratch ior-results
srun ior -a POSIX -F -w -r -C -e -t 1m -b 4g -o ior-scratch/testfile \
	-O summaryFile=ior-results/summary-"$SLURM_JOB_ID".json -O summaryFormat=JSON
