#!/usr/bin/env bats
# Kinds of batch job other than one plain script (docs/user-guide.md, "Kinds
# of job"), submitted with sbatch as shtest on the bed in hold mode:
#   * a heterogeneous job: #DATA is the leader's (the one script), staged
#     once before any component starts, archived once under the leader's id;
#   * sbatch --wrap: no script of the user's, so no #DATA: it runs untouched;
#   * --export=NONE: the job has none of the submitter's environment; the
#     plugin and the daemon need none of it;
#   * --chdir: relative #DATA paths are the job's working directory's.

bats_require_minimum_version 1.5.0

load helpers

setup() {
	daemon_setup spank
	[[ ${STAGEHAND_TESTBED_SUBMIT_MODE:-hold} == hold ]] ||
		skip "hold-mode test: the bed runs in ${STAGEHAND_TESTBED_SUBMIT_MODE} mode"
}

teardown() {
	[[ -z ${STALLER:-} ]] || kill "$STALLER" 2>/dev/null || true
	cancel_jobs "${JOBS[@]}"
}

# A file of text owned by shtest.
user_text() {
	install -d -o shtest -g shtest "$(dirname "$1")"
	printf '%s\n' "$2" >"$1"
	chown shtest:shtest "$1"
}

# het_states LEADER: "OFFSET STATE" of every component of the hetjob.
het_states() {
	scontrol -o show job "$1" 2>/dev/null |
		sed -n 's/^JobId=[0-9]* HetJobId=[0-9]* HetJobOffset=\([0-9]*\) .* JobState=\([A-Z_]*\) .*/\1 \2/p' |
		sort -n
}

# Slurm gives each component of a hetjob nodes of its own.
need_two_nodes() {
	local nodes
	read -r -a nodes <<<"${STAGEHAND_TESTBED_NODES:-}"
	[[ ${#nodes[@]} -ge 2 ]] || skip "one-node test bed: a hetjob's components need a node each"
}

@test "hetjob: the leader's #DATA staged once before any component starts, archived once under the leader's id" {
	need_two_nodes
	user_text "$WD/src/in.txt" "input of the hetjob $RANDOM"
	stall_worker_open "$WD/src/in.txt"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#SBATCH -n1
#DATA stage_in=$WD/src/in.txt
#DATA archive=res
#SBATCH hetjob
#SBATCH -n1
mkdir -p res
cp "\$STAGEHAND_INPUT_DIR/in.txt" res/
srun --het-group=1 bash -c 'cat "\$STAGEHAND_INPUT_DIR/in.txt"' > res/group1.txt
echo "\$SLURM_JOB_ID_HET_GROUP_0 \$SLURM_JOB_ID_HET_GROUP_1" > res/ids.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	lead=$j
	second=$((lead + 1))
	# job_submit saw the script once, on the leader: one record, one hold.
	[[ "$(job_field "$lead" AdminComment)" == *"stagehand:hold=pending"* ]]
	[[ "$(job_field "$second" AdminComment)" != *stagehand* ]]
	[ "$(job_field "$second" HetJobId)" = "$lead" ]
	# The input is held in flight: no component may start meanwhile.
	read -r -t 60 worker <&"${STALL[0]}"
	[[ $worker =~ ^[0-9]+$ ]]
	sleep 3 # several scheduler passes (sched_interval=2, bf_interval=1)
	[ "$(het_states "$lead" | tr '\n' ' ')" = "0 PENDING 1 PENDING " ]
	kill "$STALLER"
	STALLER=
	wait_job_state "$lead" COMPLETED 90
	wait_job_state "$second" COMPLETED 30
	[[ "$(job_status "$lead")" =~ "inputs staged (1 files" ]]
	arch=$STAGEHAND_TESTBED_ARCHIVE/shtest/$lead/res
	wait_for 60 test -f "$arch/ids.txt"
	cmp "$WD/src/in.txt" "$arch/in.txt"
	[ "$(cat "$arch/ids.txt")" = "$lead $second" ]
	cmp "$WD/src/in.txt" "$arch/group1.txt" # the inputs, read in the other component's step
	# Staged once and archived once: nothing under the second component's id.
	[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest/$second" ]
	[ ! -e "$STAGEHAND_TESTBED_SCRATCH/shtest/$second/input" ]
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$lead" >"$WD/status.txt"
	[ "$(awk -v j="$lead" '$2 == j && $3 == "stage_in"' "$WD/status.txt" | wc -l)" = 1 ]
	[ "$(awk -v j="$lead" '$2 == j && $3 == "archive"' "$WD/status.txt" | wc -l)" = 1 ]
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$second"
	[[ $output == *"knows nothing about job $second"* ]]
}

@test "sbatch --wrap: no script, no #DATA: the job runs untouched and leaves no record" {
	submit -d "$WD" --output="$WD/out-%j.txt" --wrap="echo wrapped > $WD/wrapped.txt"
	wait_job_state "$j" COMPLETED 60
	[ "$(cat "$WD/wrapped.txt")" = wrapped ]
	[[ "$(job_field "$j" AdminComment)" != *stagehand* ]]
	[ "$(job_field "$j" Priority)" != 0 ]
	run ! grep -q "job $j\\b.*error" "$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"
}

@test "--export=NONE: the plugin and the daemon need none of the submitter's environment" {
	user_text "$WD/src/in.txt" "input for export=NONE $RANDOM"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/in.txt
#DATA archive=res/
mkdir -p res
cp "\$STAGEHAND_INPUT_DIR/in.txt" res/
echo "home=\${HOME:-unset} path=\${PATH:-unset}" > res/env.txt
echo "archive=\$STAGEHAND_ARCHIVE_DIRS" >> res/env.txt
echo "mark=\${JOBKINDS_MARK:-unset}" >> res/env.txt
EOF
	JOBKINDS_MARK=from-sbatch submit -d "$WD" "$WD/job.sh" --export=NONE
	wait_job_state "$j" COMPLETED 90
	[[ "$(job_status "$j")" =~ "inputs staged (1 files" ]]
	wait_for 60 test -f "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/res/env.txt"
	cmp "$WD/src/in.txt" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/res/in.txt"
	grep -qx "archive=$WD/res" "$WD/res/env.txt"
	grep -qx "mark=unset" "$WD/res/env.txt" # sbatch's environment did not reach the job
}

@test "--chdir: relative #DATA paths resolve against the job's working directory, not where sbatch ran" {
	user_text "$WD/src/in.txt" "input for chdir $RANDOM"
	install -d -o shtest -g shtest "$WD/submit" "$WD/run"
	write_user_script shtest "$WD/submit/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/in.txt to=in/
#DATA archive=results/
mkdir -p results
cp in/in.txt results/
pwd > results/pwd.txt
EOF
	submit -d "$WD/submit" "$WD/submit/job.sh" --chdir="$WD/run"
	wait_job_state "$j" COMPLETED 90
	[ "$(cat "$WD/run/results/pwd.txt")" = "$WD/run" ]
	cmp "$WD/src/in.txt" "$WD/run/in/in.txt"
	wait_for 60 test -f "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results/pwd.txt"
	cmp "$WD/src/in.txt" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results/in.txt"
	# Nothing was staged into, or archived from, the directory sbatch ran in.
	[ ! -e "$WD/submit/in" ]
	[ ! -e "$WD/submit/results" ]
}
