#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --array=0-99%10
#SBATCH --time=01:00:00
#
# A parameter sweep. sbatch holds the array; stagehandd splits it into its
# tasks, stages each task's own parameter file (%a is the task index) before
# that task runs and releases the tasks one by one (at most 10 run at once).
# The model has no %a: it is staged once for the whole array, into
# $STAGEHAND_SHARED_INPUT_DIR. Each task's output goes to the archive on its
# own, under the array's job id (%A) and its index (%a).
#DATA stage_in=/project/sweep/params/%a.json to=input/%a.json
#DATA stage_in=/project/sweep/model.bin
#DATA archive=out/%a to=/archive/sweep/%A/%a when=success
#DATA exempt=checkpoints/%a

./simulate --model "$STAGEHAND_SHARED_INPUT_DIR"/model.bin \
	--params input/"$SLURM_ARRAY_TASK_ID".json --out out/"$SLURM_ARRAY_TASK_ID" \
	--checkpoint-dir checkpoints/"$SLURM_ARRAY_TASK_ID"
