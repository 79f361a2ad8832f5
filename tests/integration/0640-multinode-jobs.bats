#!/usr/bin/env bats
# Jobs that span nodes, on the multi-node test bed (scripts/testbed up
# --nodes 3), as an ordinary user: the SPANK plugin acts in the batch step
# only, so a -N 3 job's directories are made and labelled once, one start
# and one end event reach the daemon, and its outputs are archived once,
# even when every node's epilog reports the end as well. Skipped on the
# one-node bed (expected: tests/integration/expected-skips). On an
# epilog-only bed the first test (the plugin's work) is skipped; in the
# second every node's real Epilog= reports the end too.

load helpers

setup_file() {
	testbed_require
}

setup() {
	testbed_env
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]] ||
		skip "one-node test bed (STAGEHAND_TESTBED_NODES='${STAGEHAND_TESTBED_NODES:-}'; scripts/testbed up --nodes 3 for these)"
	NODES=($STAGEHAND_TESTBED_NODES)
	((${#NODES[@]} >= 3)) || skip "one-node test bed: only ${#NODES[@]} compute nodes (need 3)"
	STAGEHAND=${STAGEHAND_BUILD_DIR:-$BATS_TEST_DIRNAME/../..}/cli/stagehand
	LOG=$STAGEHAND_TESTBED_LOGDIR/stagehandd.log
	WD=$(user_workdir)
	JOBS=()
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

label() {
	getfattr --only-values -n "user.stagehand.$2" "$1" 2>/dev/null
}

archived() {
	[[ "$(label "$1" policy)" == archived ]]
}

@test "multi-node: sbatch -N 3: dirs made and labelled once, one start and one end event, archived once" {
	skip_epilog_only "the SPANK plugin's directories, labels and start event in the batch step"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH -N 3
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
#DATA exempt=tmp
echo "label while running: \$(getfattr --only-values -n user.stagehand.policy results)"
srun bash -c 'echo "\$(hostname)" > results/part-\$SLURM_PROCID.txt; echo t > tmp/\$(hostname)'
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 120
	[ "$(job_field "$j" NumNodes)" = 3 ]
	grep -qx "label while running: pending" "$WD/out-$j.txt"
	# Every node wrote into the directories the batch step made.
	[ "$(ls "$WD/results" | wc -l)" -eq 3 ]
	[ "$(cat "$WD"/results/part-*.txt | sort -u | wc -l)" -eq 3 ]
	[ "$(label "$WD/tmp" policy)" = exempt ]
	[ "$(label "$WD/results" job)" = "$j" ]
	wait_for 60 archived "$WD/results"
	loc=$(label "$WD/results" location)
	[ "$loc" = "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results" ]
	diff -r "$WD/results" "$loc"
	# One start event and one end event from the batch node, one archive request.
	[ "$(grep -c "job $j: started on" "$LOG")" -eq 1 ]
	[ "$(grep -c "job $j: end event" "$LOG")" -eq 1 ]
	batch=$(job_node "$j")
	grep -q "job $j: started on $batch" "$LOG"
	reqs=$(run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$j")
	[ "$(grep -c ' archive ' <<<"$reqs")" -eq 1 ]
	[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/tmp" ]
}

@test "multi-node: an end event from every node of a -N 3 job (epilogs) still archives once" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH -N 3
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
$(without_plugin_lines results)
srun bash -c 'echo "\$(hostname)" > results/part-\$SLURM_PROCID.txt'
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 120
	# What Epilog=stagehand-epilog does on each node of the job: report its end.
	for node in "${NODES[@]}"; do
		on_node "$node" "$STAGEHAND" --server "$STAGEHAND_SERVER" job-end "$j" \
			--state COMPLETED --exit-code 0
	done
	wait_for 60 archived "$WD/results"
	sleep 3
	reqs=$(run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$j")
	[ "$(grep -c ' archive ' <<<"$reqs")" -eq 1 ]
	[ "$(grep -c "job $j: end event" "$LOG")" -eq 1 ]
	[ "$(find "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results" -type f | wc -l)" -eq 3 ]
}
