#!/usr/bin/env bats
# 0668-bb-stage-in-lead.bats - burst-buffer mode, YieldMode=adaptive: a
# stage-in whose job is far from its expected start is paced like an
# archive (YieldStageInLead); once the job comes near, it runs at full speed.
#   * Slurm stages a job in as soon as the scheduler has a start estimate
#     for it: here the job waits behind a job that holds every node for 30
#     minutes, so its estimate is about 30 minutes ahead;
#   * the daemon's log names the request, the job and the estimate when it
#     paces the stage-in;
#   * when the blocker is cancelled the estimate becomes "now": the same
#     request goes on at full speed, the job runs and finds its input intact.
# Skipped on a hold-mode bed (tests/integration/expected-skips).

bats_require_minimum_version 1.5.0

load helpers

setup() {
	bb_setup
	LOG=$STAGEHAND_TESTBED_LOGDIR/stagehandd.log
	CONF=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	cp -p "$CONF" "$BATS_TEST_TMPDIR/stagehand.conf.orig"
	# A slow enough copy to see it paced, then switched (32 MiB at 4 MiB/s).
	printf '%s\n' YieldToJobs=yes YieldMode=adaptive YieldStageInLead=10m BandwidthCap=4M >>"$CONF"
	reload_daemon
}

teardown() {
	local j
	for j in "${JOBS[@]}"; do scancel --hurry "$j" 2>/dev/null || true; done
	cancel_jobs "${JOBS[@]}"
	cp -p "$BATS_TEST_TMPDIR/stagehand.conf.orig" "$CONF"
	reload_daemon || true
}

@test "bb: a stage-in for a job far from its start is paced; at full speed once the job comes near" {
	local nodes blocker J since line rid eta
	nodes=$(sinfo -h -p "$(sinfo -h -o %P | tr -d '*' | head -n1)" -o %D | head -n1)
	since=$(wc -l <"$LOG")
	write_user_script shtest "$WD/blocker.sh" <<EOS
#!/bin/bash
#SBATCH --output=/dev/null
sleep 1800
EOS
	submit -d "$WD" "$WD/blocker.sh" -N "$nodes" --exclusive --time=30
	blocker=$j
	wait_job_state "$blocker" RUNNING 60
	head -c 33554432 /dev/urandom >"$WD/lead.dat"
	chown shtest: "$WD/lead.dat"
	write_user_script shtest "$WD/lead.sh" <<EOS
#!/bin/bash
#SBATCH --output=/dev/null
#DATA stage_in=$WD/lead.dat
cmp "\$STAGEHAND_INPUT_DIR/lead.dat" $WD/lead.dat && echo same > $WD/lead-ran
EOS
	submit -d "$WD" "$WD/lead.sh" -N "$nodes" --exclusive --time=5
	J=$j
	# Slurm calls setup once the scheduler has an estimate; the daemon paces
	# the copy and says why.
	wait_for 90 eval 'tail -n +$((since + 1)) "$LOG" | grep -q "stage_in paced by the adaptive scavenger: job $J is expected to start in"'
	line=$(tail -n +$((since + 1)) "$LOG" | grep "stage_in paced by the adaptive scavenger: job $J is expected" | head -n1)
	echo "$line"
	rid=$(sed -n 's/.*request \([0-9]*\): stage_in paced.*/\1/p' <<<"$line")
	eta=$(sed -n 's/.*expected to start in \([0-9]*\) s.*/\1/p' <<<"$line")
	[[ $rid =~ ^[0-9]+$ ]]
	# About 30 minutes ahead (the blocker's time limit), more than the lead.
	((eta > 600 && eta <= 1800))
	[ "$(job_state "$J")" = PENDING ]
	# The blocker goes: the job's estimate is now, the same request runs at
	# full speed, and the job runs with its input whole.
	scancel "$blocker"
	wait_for 60 eval 'tail -n +$((since + 1)) "$LOG" | grep -q "request $rid: job $J is expected to start within YieldStageInLead"'
	wait_job_state "$J" COMPLETED 120
	[ "$(cat "$WD/lead-ran")" = same ]
}
