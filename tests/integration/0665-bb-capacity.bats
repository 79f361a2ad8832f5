#!/usr/bin/env bats
# 0665-bb-capacity.bats - burst-buffer mode: a job's size and the pools' room.
#   * a stage-in larger than the job's '#DATA capacity=' is refused before a
#     byte is copied; Slurm holds the job with a message (SystemComment)
#     that names the job, the line, the declared and the needed bytes and
#     what to do;
#   * a job that fits runs, and once it is over its status (AdminComment)
#     says its inputs were staged, never "waiting" (Slurm takes no update
#     of an ended job), and 'stagehand status' says the archive is done;
#   * each pool's free space is what the file system has (stagehandd's
#     pools.json, read by slurm_bb_pools): with a PoolCapacity larger than
#     the disk, Slurm's pool has only the disk's free space.
# Skipped on a hold-mode bed (tests/integration/expected-skips).

bats_require_minimum_version 1.5.0

load helpers

setup() {
	bb_setup pool
	POOLS=$(dirname "$STAGEHAND_SOCKET")/pools.json
	CONF_SAVED=
}

teardown() {
	cancel_jobs "${JOBS[@]}"
	if [[ -n $CONF_SAVED ]]; then
		cp "$CONF_SAVED" "$STAGEHAND_TESTBED_CONF"
		rm -f "$CONF_SAVED"
		"$STAGEHAND_SRC_DIR/scripts/testbed" restart stagehandd >/dev/null
	fi
}

state_reason() {
	squeue -h -t all -j "$1" -o '%T %r' 2>/dev/null
}

sh_status() {
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND_BUILD_DIR/cli/stagehand" status "$1"
}

@test "bb: capacity: a stage-in larger than capacity= is refused before copying, with job, line, bytes and what to do" {
	head -c 3145728 /dev/urandom >"$WD/big.dat"
	chown shtest: "$WD/big.dat"
	write_user_script shtest "$WD/big.sh" <<EOS
#!/bin/bash
#SBATCH --output=/dev/null
#DATA capacity=1M
#DATA stage_in=$WD/big.dat
echo ran > $WD/big-ran
EOS
	submit -d "$WD" "$WD/big.sh"
	J=$j
	# data_in fails: Slurm holds the job with the hook's message in
	# SystemComment (its Reason, until the hold's JobHeldAdmin replaces it).
	wait_for 90 eval '[[ "$(job_field "$J" SystemComment)" == *"does not fit"* ]]'
	# (the whole record: the message holds "capacity=", which looks like a field)
	reason=$(scontrol -o show job "$J")
	reason=${reason#*SystemComment=}
	echo "$reason"
	[[ $reason == *"job $J: stage_in of $WD/big.dat (line 4) does not fit the job's burst buffer"* ]]
	[[ $reason == *"its inputs hold 3145728 bytes"* ]]
	[[ $reason == *"the job declared 1048576 bytes"* ]]
	[[ $reason == *"Raise capacity= to at least 3145728"* ]]
	[ "$(job_state "$J")" = PENDING ]
	[ ! -e "$WD/big-ran" ]
	# Nothing was copied: the source was counted, as the owner, first.
	[ -z "$(find "$STAGEHAND_TESTBED_SCRATCH/shtest/$J" -type f 2>/dev/null)" ]
	run sh_status "$J"
	echo "$output"
	[[ $output == *"stage-in failed"* ]]
	[[ $output == *"declared 1048576 bytes"* ]]
}

@test "bb: capacity: a job that fits runs; afterwards its status says staged, not waiting" {
	head -c 1048576 /dev/urandom >"$WD/small.dat"
	chown shtest: "$WD/small.dat"
	write_user_script shtest "$WD/small.sh" <<EOS
#!/bin/bash
#SBATCH --output=/dev/null
#DATA capacity=2M
#DATA stage_in=$WD/small.dat
#DATA archive=results
mkdir -p results
cp "\$STAGEHAND_INPUT_DIR/small.dat" results/
EOS
	submit -d "$WD" "$WD/small.sh"
	J=$j
	wait_job_state "$J" COMPLETED 120
	cmp "$WD/small.dat" "$WD/results/small.dat"
	# Slurm takes no update of an ended job: the status written when the
	# inputs were staged is the last, and it must not say "waiting".
	ac=$(job_field "$J" AdminComment)
	echo "$ac"
	ac=${ac%%stagehand:v1:*}	# the status, not the plan (its paths are the test's name)
	[[ $ac == *"stagehand:status=1 input staged (1048576 bytes) before the job started"* ]]
	[[ $ac != *waiting* ]]
	[[ $ac != *staging* ]]
	run sh_status "$J"
	echo "$output"
	# (its own lines; the paths hold the test's name)
	grep "^job $J: stage-in ready" <<<"$output"
	[[ $output =~ archive\ +done ]]
	run ! grep "^job .*waiting" <<<"$output"
}

@test "bb: pools: free space comes from the file system when PoolCapacity is larger than the disk" {
	# The daemon's view now: the pool holds PoolCapacity or less.
	wait_for 15 test -s "$POOLS"
	cat "$POOLS"
	python3 - "$POOLS" "$STAGEHAND_TESTBED_SCRATCH" "$STAGEHAND_TESTBED_POOL_CAPACITY" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = [x for x in d["pools"] if x["id"] == sys.argv[2]][0]
assert p["quantity"] == int(sys.argv[3]), p
assert 0 <= p["free"] <= p["quantity"], p
PY
	# PoolCapacity 1024T, far more than the disk: free is the disk's free space.
	CONF_SAVED=$(mktemp)
	cp "$STAGEHAND_TESTBED_CONF" "$CONF_SAVED"
	sed -i 's/^PoolCapacity=.*/PoolCapacity=1024T/' "$STAGEHAND_TESTBED_CONF"
	grep -q '^PoolCapacity=1024T' "$STAGEHAND_TESTBED_CONF"
	"$STAGEHAND_SRC_DIR/scripts/testbed" restart stagehandd
	wait_for 20 grep -q '"quantity":1125899906842624' "$POOLS"
	cat "$POOLS"
	avail=$(df -B1 --output=avail "$STAGEHAND_TESTBED_SCRATCH" | tail -1)
	python3 - "$POOLS" "$STAGEHAND_TESTBED_SCRATCH" "$avail" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
p = [x for x in d["pools"] if x["id"] == sys.argv[2]][0]
avail = int(sys.argv[3])
assert p["free"] < p["quantity"], p
# what df says now, give or take what others wrote in between (1 GiB)
assert abs(p["free"] - avail) < 2**30, (p["free"], avail)
PY
	# slurmctld asks every 30 s: its pool then has the disk's free space only.
	wait_for 75 eval 'scontrol show burst | grep -q "PoolName.*TotalSpace=1PiB"'
	scontrol show burst
	line=$(scontrol show burst | grep "PoolName\[0\]")
	[[ $line != *"FreeSpace=1PiB"* ]]
}
