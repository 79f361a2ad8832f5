#!/usr/bin/env bats
# 0669-bb-watch-cost.bats - burst-buffer mode: what stagehandd's Slurm watch
# asks slurmctld. Slurm's hooks say which jobs to stage and the SPANK plugin
# when jobs start and end, so between two reads of the whole job table
# (SlurmWatchFullInterval) the watch asks only for the jobs it is staging,
# one REQUEST_JOB_INFO_SINGLE each: its cost follows the jobs stagehand
# stages, not the length of slurmctld's queue.
# Skipped on a hold-mode bed (tests/integration/expected-skips).

bats_require_minimum_version 1.5.0

load helpers

setup() {
	bb_setup
	CONF=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	cp -p "$CONF" "$BATS_TEST_TMPDIR/stagehand.conf.orig"
}

teardown() {
	cancel_jobs "${JOBS[@]}"
	cp -p "$BATS_TEST_TMPDIR/stagehand.conf.orig" "$CONF"
	"$STAGEHAND_SRC_DIR/scripts/testbed" restart stagehandd >/dev/null
}

# rpc_count TYPE: sdiag's count of that RPC type since the last 'sdiag -r'.
rpc_count() {
	sdiag | awk -v t="$1" '$1 == t && $2 ~ /^\(/ { for (i = 1; i <= NF; i++) if ($i ~ /^count:/) {
		sub("count:", "", $i); print $i; exit } }' | grep . || echo 0
}

@test "bb: between whole-table reads the watch asks slurmctld only for the jobs it stages" {
	# One look a second, a whole table once an hour: the restart's first look
	# is the only whole table in this test.
	printf '%s\n' SlurmWatchInterval=1 SlurmWatchFullInterval=1h BandwidthCap=1M >>"$CONF"
	sdiag -r >/dev/null
	"$STAGEHAND_SRC_DIR/scripts/testbed" restart stagehandd >/dev/null
	# That first whole table, seen by slurmctld, before the counts start.
	wait_for 30 eval '[ "$(rpc_count REQUEST_JOB_INFO)" -ge 1 ]'
	head -c 8388608 /dev/urandom >"$WD/watched.dat"
	chown shtest: "$WD/watched.dat"
	write_user_script shtest "$WD/watched.sh" <<EOS
#!/bin/bash
#SBATCH --output=/dev/null
#DATA stage_in=$WD/watched.dat
cmp "\$STAGEHAND_INPUT_DIR/watched.dat" $WD/watched.dat && echo same > $WD/watched-ran
EOS
	sdiag -r >/dev/null
	submit -d "$WD" "$WD/watched.sh"
	J=$j
	# 8 MiB at 1 MiB/s: about 8 s of staging, each second asked for alone.
	wait_job_state "$J" COMPLETED 90
	[ "$(cat "$WD/watched-ran")" = same ]
	full=$(rpc_count REQUEST_JOB_INFO)
	single=$(rpc_count REQUEST_JOB_INFO_SINGLE)
	echo "REQUEST_JOB_INFO $full, REQUEST_JOB_INFO_SINGLE $single"
	[ "$full" -eq 0 ]
	# The job while it was staged (about one a second), and this test's own
	# scontrol calls.
	[ "$single" -ge 5 ]
}
