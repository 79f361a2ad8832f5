#!/usr/bin/env bats
# Components going away at the wrong moment: slurmctld restarted while
# several jobs are held for stage-in (some failed, some mid-transfer), and
# stagehandd down when a job is submitted and when it starts.
# (tests/integration/0600-lifecycle.bats covers one held job across a
# slurmctld restart, the daemon down at job end, and SIGKILL during stage-in.)

bats_require_minimum_version 1.5.0

load ../integration/helpers
load faults

setup() {
	faults_setup
}

teardown() {
	faults_teardown
}

@test "slurmctld restarted while six jobs are held (three failed, three mid-transfer): all staged and released" {
	printf 'BandwidthCap=10M\n' >"$BATS_TEST_TMPDIR/daemon.conf"
	daemon_conf "$BATS_TEST_TMPDIR/daemon.conf"
	local i failed=() busy=()
	for i in 1 2 3; do
		user_file shtest "$WD/big$i/data.bin" 60
		write_user_script shtest "$WD/busy$i.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/big$i to=in$i
cmp in$i/data.bin $WD/big$i/data.bin && echo same > result-busy$i
EOF
		write_user_script shtest "$WD/fail$i.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/later$i/input.dat
cmp "\$STAGEHAND_INPUT_DIR/input.dat" $WD/later$i/input.dat && echo same > result-fail$i
EOF
		submit -d "$WD" "$WD/fail$i.sh"
		failed+=("$j")
		submit -d "$WD" "$WD/busy$i.sh"
		busy+=("$j")
	done
	# Restart once every failed job shows its failure while the last busy
	# job is still being staged.
	ready() {
		local f
		for f in "${failed[@]}"; do
			comment_matches "$f" "stage-in failed" || return 1
		done
		comment_matches "${busy[2]}" "staging"
	}
	wait_for 90 ready
	"$TESTBED" restart slurmctld >/dev/null
	for j in "${failed[@]}" "${busy[@]}"; do
		[[ "$(job_field "$j" AdminComment)" =~ "stagehand:hold=" ]]
	done
	for i in 1 2 3; do
		user_file shtest "$WD/later$i/input.dat" 1
	done
	for j in "${failed[@]}"; do
		run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" retry "$j"
		[ "$status" -eq 0 ]
	done
	for j in "${failed[@]}" "${busy[@]}"; do
		wait_job_state "$j" COMPLETED 240
	done
	for i in 1 2 3; do
		[ "$(cat "$WD/result-busy$i")" = same ]
		[ "$(cat "$WD/result-fail$i")" = same ]
	done
	report "slurmctld restart with 6 held jobs (3 failed stage-in, 3 mid-transfer): 6/6 staged, released, completed"
}

@test "slurmctld restarted twice in a row during staging of several jobs: released once it answers again" {
	printf 'BandwidthCap=20M\n' >"$BATS_TEST_TMPDIR/daemon.conf"
	daemon_conf "$BATS_TEST_TMPDIR/daemon.conf"
	local i ids=()
	for i in 1 2 3 4; do
		user_file shtest "$WD/src$i/data.bin" 20
		write_user_script shtest "$WD/job$i.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src$i to=in$i
cmp in$i/data.bin $WD/src$i/data.bin && echo same > result$i
EOF
		submit -d "$WD" "$WD/job$i.sh"
		ids+=("$j")
	done
	wait_for 60 comment_matches "${ids[0]}" "staging"
	"$TESTBED" restart slurmctld >/dev/null
	sleep 2
	"$TESTBED" restart slurmctld >/dev/null
	for j in "${ids[@]}"; do
		wait_job_state "$j" COMPLETED 240
	done
	for i in 1 2 3 4; do
		[ "$(cat "$WD/result$i")" = same ]
	done
}

@test "daemon down at submit: jobs are accepted and held, then staged, run and archived once it is back" {
	user_file shtest "$WD/src/input.dat" 2
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/input.dat
#DATA archive=results
cmp "\$STAGEHAND_INPUT_DIR/input.dat" $WD/src/input.dat && echo same > results/r.txt
EOF
	daemon_stop
	[ ! -S "$STAGEHAND_SOCKET" ] || run ! curl -sf --max-time 2 --unix-socket "$STAGEHAND_SOCKET" http://x/v1/health
	local ids=() k
	for k in 1 2 3; do
		submit -d "$WD" "$WD/job.sh"
		ids+=("$j")
	done
	sleep 6
	for j in "${ids[@]}"; do
		[ "$(job_state "$j")" = PENDING ]
		[[ "$(job_field "$j" AdminComment)" =~ "stagehand:hold=pending" ]]
	done
	daemon_start
	for j in "${ids[@]}"; do
		wait_job_state "$j" COMPLETED 120
	done
	for j in "${ids[@]}"; do
		wait_for 60 test -f "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results/r.txt"
		[ "$(cat "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results/r.txt")" = same ]
	done
}

@test "daemon down when the job starts and when it ends: the job runs, labels are set, archive follows the restart" {
	user_file shtest "$WD/src/input.dat" 1
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/input.dat
#DATA archive=results
#DATA exempt=tmp
while [ ! -e $WD/go ]; do sleep 0.2; done
getfattr --only-values -n user.stagehand.policy results > label-while-running
cmp "\$STAGEHAND_INPUT_DIR/input.dat" $WD/src/input.dat && echo same > results/r.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	# Released by the daemon; stop it before the job gets to start.
	wait_for 60 bash -c "scontrol -o show job $j | grep -q 'stagehand:hold=released'"
	daemon_stop
	wait_job_state "$j" RUNNING 60
	touch "$WD/go"
	wait_job_state "$j" COMPLETED 60
	[ "$(cat "$WD/label-while-running")" = pending ]
	label_is "$WD/tmp" exempt
	[ "$(cat "$WD/results/r.txt")" = same ]
	# Nothing archived while the daemon was away; the end event waits in the spool.
	[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results" ]
	spool=$(node_spool "$(job_node "$j")")
	wait_for 10 bash -c "ls '$spool' | grep -q ."
	daemon_start
	wait_for 60 label_is "$WD/results" archived
	cmp "$WD/results/r.txt" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results/r.txt"
}

@test "daemon killed with SIGKILL while the job runs, restarted after it ended: archived" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
while [ ! -e $WD/go ]; do sleep 0.2; done
echo x > results/x.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" RUNNING 60
	daemon_kill9
	touch "$WD/go"
	wait_job_state "$j" COMPLETED 60
	daemon_start
	wait_for 60 label_is "$WD/results" archived
	[ "$(cat "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results/x.txt")" = x ]
}

@test "job-end event lost (daemon down, spool wiped): slurmctld's record stands in, and %j in archive= is expanded" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results-%j
echo x > results-\$SLURM_JOB_ID/x.txt
EOF
	daemon_stop
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	# The plugin spooled the end event; lose it.
	spool=$(node_spool "$(job_node "$j")")
	wait_for 10 test -f "$spool/job-$j.json"
	rm -f "$spool/job-$j.json"
	daemon_start
	wait_for 90 label_is "$WD/results-$j" archived
	[ "$(cat "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results-$j/x.txt")" = x ]
	grep -q "job $j: ended COMPLETED (exit 0) with no event from its node" "$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"
}
