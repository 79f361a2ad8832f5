#!/usr/bin/env bats
# The Slurm test bed itself: daemons up, the node usable, real jobs run as an
# ordinary user with the right identity, holds and releases work. Every later
# integration test builds on these facts.

load helpers

setup_file() {
	testbed_require
}

setup() {
	testbed_env
	JOBS=()
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

@test "test bed: slurmctld answers on the private config and port" {
	run scontrol ping
	[ "$status" -eq 0 ]
	[[ $output == *"is UP"* ]]
	run scontrol show config
	[ "$status" -eq 0 ]
	[[ $output =~ ClusterName[[:space:]]+=[[:space:]]stagehand-test ]]
	[[ $output =~ SlurmctldPort[[:space:]]+=[[:space:]]${STAGEHAND_TESTBED_CTLD_PORT:-16817} ]]
	[[ $output =~ SlurmUser[[:space:]]+=[[:space:]]root ]]
	[[ $output =~ PlugStackConfig[[:space:]]+=[[:space:]]$STAGEHAND_TESTBED_DIR/etc/plugstack.conf ]]
}

@test "test bed: status reports slurmctld and every slurmd running" {
	run "$TESTBED" status
	[ "$status" -eq 0 ]
	[[ $output =~ slurmctld:\ +running ]]
	local node
	if [[ $STAGEHAND_TESTBED_MODE == multi ]]; then
		for node in $STAGEHAND_TESTBED_NODES; do
			[[ $output =~ slurmd\ $node:\ +running ]]
		done
	else
		[[ $output =~ slurmd:\ +running ]]
	fi
	[[ $output =~ munged:\ +ok ]]
}

@test "test bed: env prints an evaluable SLURM_CONF and sticky scratch/archive dirs exist" {
	run "$TESTBED" env
	[ "$status" -eq 0 ]
	[[ $output == *"export SLURM_CONF="* ]]
	( unset SLURM_CONF; eval "$output"; [ "$SLURM_CONF" = "$STAGEHAND_TESTBED_DIR/etc/slurm.conf" ] )
	[ "$(stat -c %a "$STAGEHAND_TESTBED_SCRATCH")" = 1777 ]
	[ "$(stat -c %a "$STAGEHAND_TESTBED_ARCHIVE")" = 1777 ]
	id -u "$TESTBED_USER"
	id -u "$TESTBED_USER2"
}

@test "test bed: sinfo shows every node idle in the default partition debug" {
	local nodes=($STAGEHAND_TESTBED_NODES)
	# Jobs of an earlier test may still be finishing.
	# (-p debug: a multi-node bed also has the transfer partition xfer.)
	wait_for 60 bash -c '[ "$(sinfo -h -p debug -o "%P %a %D %T")" = "debug* up '"${#nodes[@]}"' idle" ]'
	run sinfo -h -N -p debug -o '%N'
	[ "$status" -eq 0 ]
	[ "$(sort <<<"$output" | tr '\n' ' ')" = "$(printf '%s\n' "${nodes[@]}" | sort | tr '\n' ' ')" ]
}

@test "test bed: a job submitted by shtest runs as shtest and completes" {
	local dir job
	dir=$(user_workdir)
	write_user_script "$TESTBED_USER" "$dir/hello.sh" <<'EOF'
#!/bin/bash
#SBATCH --job-name=tb-hello
#SBATCH --output=hello-%j.out
echo "hello from job $SLURM_JOB_ID"
echo "user=$(id -un) uid=$(id -u)"
echo "cwd=$PWD"
EOF
	job=$(submit_as_user "$dir/hello.sh")
	JOBS+=("$job")
	[ "$(job_field "$job" UserId)" = "$TESTBED_USER($(id -u "$TESTBED_USER"))" ]
	[ "$(job_field "$job" JobName)" = tb-hello ]
	wait_job_state "$job" COMPLETED 60
	[ "$(job_field "$job" ExitCode)" = 0:0 ]
	local out=$dir/hello-$job.out
	[ -f "$out" ]
	[ "$(stat -c %U "$out")" = "$TESTBED_USER" ]
	run cat "$out"
	[ "${lines[0]}" = "hello from job $job" ]
	[ "${lines[1]}" = "user=$TESTBED_USER uid=$(id -u "$TESTBED_USER")" ]
	[ "${lines[2]}" = "cwd=$dir" ]
}

@test "test bed: a failing job ends FAILED with its exit code" {
	local dir job
	dir=$(user_workdir)
	write_user_script "$TESTBED_USER" "$dir/fail.sh" <<'EOF'
#!/bin/bash
#SBATCH --output=fail-%j.out
exit 3
EOF
	job=$(submit_as_user "$dir/fail.sh")
	JOBS+=("$job")
	wait_job_state "$job" FAILED 60
	[ "$(job_field "$job" ExitCode)" = 3:0 ]
}

@test "test bed: a user hold keeps the job pending until the user releases it" {
	local dir job
	dir=$(user_workdir)
	write_user_script "$TESTBED_USER" "$dir/held.sh" <<'EOF'
#!/bin/bash
#SBATCH --output=held-%j.out
echo released
EOF
	job=$(submit_as_user "$dir/held.sh" --hold)
	JOBS+=("$job")
	sleep 3 # several scheduler passes: a held job must not start
	[ "$(job_state "$job")" = PENDING ]
	[ "$(job_field "$job" Reason)" = JobHeldUser ]
	[ "$(job_field "$job" Priority)" = 0 ]
	run_as_user "$TESTBED_USER" scontrol release "$job"
	wait_job_state "$job" COMPLETED 30
	[ "$(cat "$dir/held-$job.out")" = released ]
}

@test "test bed: an admin hold cannot be released by the user, only by root" {
	local dir job
	dir=$(user_workdir)
	write_user_script "$TESTBED_USER" "$dir/admin.sh" <<'EOF'
#!/bin/bash
#SBATCH --output=admin-%j.out
echo ran
EOF
	# Submitted held so it cannot start before root's hold lands.
	job=$(submit_as_user "$dir/admin.sh" --hold)
	JOBS+=("$job")
	scontrol hold "$job"
	[ "$(job_field "$job" Reason)" = JobHeldAdmin ]
	run run_as_user "$TESTBED_USER" scontrol release "$job"
	[ "$status" -ne 0 ]
	sleep 2
	[ "$(job_state "$job")" = PENDING ]
	scontrol release "$job"
	wait_job_state "$job" COMPLETED 30
	[ "$(cat "$dir/admin-$job.out")" = ran ]
}

@test "test bed: another user cannot cancel or release shtest's job" {
	local dir job
	dir=$(user_workdir)
	write_user_script "$TESTBED_USER" "$dir/mine.sh" <<'EOF'
#!/bin/bash
#SBATCH --output=mine-%j.out
echo mine
EOF
	job=$(submit_as_user "$dir/mine.sh" --hold)
	JOBS+=("$job")
	run run_as_user "$TESTBED_USER2" scancel "$job"
	[ "$status" -ne 0 ]
	[[ $output == *"ccess"*"denied"* || $output == *"ermission"* ]]
	run run_as_user "$TESTBED_USER2" scontrol release "$job"
	[ "$status" -ne 0 ]
	[ "$(job_state "$job")" = PENDING ]
	[ "$(job_field "$job" Reason)" = JobHeldUser ]
}
