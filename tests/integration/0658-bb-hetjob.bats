#!/usr/bin/env bats
# A heterogeneous job in burst-buffer mode (docs/user-guide.md, "Other kinds
# of job"): Slurm runs the burst-buffer stages of each component on its own,
# and the components other than the leader have no plan (the script, and so
# #DATA, is the leader's): their data-in was refused and the job stayed
# pending for ever, or started when the leader's stage-in won the race. So
# job_submit.lua refuses #DATA in a hetjob in bb mode; hold mode handles it
# (0260).

bats_require_minimum_version 1.5.0

load helpers

setup() {
	bb_setup
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

@test "bb: a hetjob with #DATA is refused at submission, naming the line, why and what to do instead" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#SBATCH -n1
#DATA archive=res
#SBATCH hetjob
#SBATCH -n1
mkdir -p res
EOF
	try_submit -d "$WD" "$WD/job.sh"
	[ "$status" -ne 0 ]
	[[ $stderr == *"stagehand: line 4: #DATA in a heterogeneous job is not supported in burst-buffer mode: Slurm stages each component on its own"* ]]
	[[ $stderr == *"--dependency=afterburstbuffer:JOBID"* ]]
	[ -z "$(squeue -h -u shtest -n job.sh -o %i)" ]
	# The same components without #DATA are none of stagehand's business.
	write_user_script shtest "$WD/plain.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#SBATCH -n1
#SBATCH hetjob
#SBATCH -n1
true
EOF
	try_submit -d "$WD" "$WD/plain.sh"
	[ "$status" -eq 0 ]
	[ "$(job_field "$JOB" HetJobOffset)" = 0 ]
	scancel "$JOB"
	# A plain job with #DATA still goes through.
	write_user_script shtest "$WD/one.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=res
mkdir -p res
EOF
	try_submit -d "$WD" "$WD/one.sh"
	[ "$status" -eq 0 ]
	wait_job_state "$JOB" COMPLETED 60
}
