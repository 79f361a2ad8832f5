#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=0-99
#SBATCH --time=01:00:00
#
# A parameter sweep: every array task stages in its own parameter file
# (%a is the task index) and archives its output under the array's master
# job id (%A), so all 100 tasks land in one archive directory.
#DATA stage_in=/project/sweep/params/%a.json to=input
#DATA archive=out/%a to=/archive/sweep/%A when=success
#DATA exempt=checkpoints

./simulate --params input/"$SLURM_ARRAY_TASK_ID".json --out out/"$SLURM_ARRAY_TASK_ID" \
	--checkpoint-dir checkpoints
