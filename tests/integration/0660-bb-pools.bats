#!/usr/bin/env bats
# 0660-bb-pools.bats - burst-buffer mode: just in time, within capacity.
# The bed's scratch root is a pool of STAGEHAND_TESTBED_POOL_CAPACITY bytes
# (PoolCapacity); NJOBS jobs each stage an input of just under 1/8 of it
# with '#DATA capacity=' 1/8 (no pool=: job_submit names the scratch root).
#   * staged inputs not yet torn down, measured by this test every 0.5 s
#     (bytes of the files under SCRATCH/shtest/J/input not labelled
#     'purge'), never exceed the pool;
#   * Slurm keeps the jobs that do not fit waiting (BurstBufferResources);
#   * every job's first command finds its input in place and intact;
#   * teardown gives the space back: every job is set up and finishes.
# Skipped on a hold-mode bed (tests/integration/expected-skips).

bats_require_minimum_version 1.5.0

load helpers

NJOBS=16

setup() {
	bb_setup pool
	SAMPLER=""
}

teardown() {
	[[ -z $SAMPLER ]] || kill "$SAMPLER" 2>/dev/null || true
	cancel_jobs "${JOBS[@]}"
}

# live_bytes IDS: bytes of the staged input files of the jobs listed in
# file IDS that are not torn down yet, and how many such jobs there are.
live_bytes() {
	local d j bytes=0 dirs=0 b
	for j in $(cat "$1"); do
		d=$STAGEHAND_TESTBED_SCRATCH/shtest/$j/input
		[[ -d $d ]] || continue
		[[ "$(getfattr --only-values -n user.stagehand.policy "$d" 2>/dev/null)" == purge ]] && continue
		b=$(find "$d" -type f -printf '%s\n' 2>/dev/null | awk '{ s += $1 } END { print s + 0 }')
		bytes=$((bytes + b))
		dirs=$((dirs + 1))
	done
	echo "$bytes $dirs"
}

# sample IDS OUT: every 0.5 s, "bytes jobs waiting-for-pool" until killed.
sample() {
	local ids=$1 out=$2 waiting
	while :; do
		waiting=$(squeue -h -t PD -o '%r' 2>/dev/null | grep -c BurstBufferResources || true)
		echo "$(live_bytes "$ids") $waiting" >>"$out"
		sleep 0.5
	done
}

@test "bb: pools: staged inputs never exceed the pool, waiting jobs are set up as teardown frees space, all finish with their inputs" {
	local pool=$STAGEHAND_TESTBED_POOL_CAPACITY size k
	size=$((pool / 8 - 65536))
	for ((k = 1; k <= NJOBS; k++)); do
		head -c "$size" /dev/urandom >"$WD/in$k.dat"
		write_user_script shtest "$WD/job$k.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-$k.txt
#DATA capacity=$((pool / 8))
#DATA stage_in=$WD/in$k.dat
cmp "\$STAGEHAND_INPUT_DIR/in$k.dat" "$WD/in$k.dat" && echo ok >"$WD/ok$k"
sleep 3
EOF
	done
	chown shtest: "$WD"/in*.dat
	: >"$WD/ids"
	sample "$WD/ids" "$WD/samples" &
	SAMPLER=$!
	for ((k = 1; k <= NJOBS; k++)); do
		submit -d "$WD" "$WD/job$k.sh"
		echo "$j" >>"$WD/ids"
	done
	# Everything finishes: teardown gave the pool's space to the waiting jobs.
	local t0=$SECONDS
	wait_for 150 eval '[ -z "$(squeue -h -j "$(IFS=,; echo "${JOBS[*]}")" 2>/dev/null)" ]'
	kill "$SAMPLER"
	SAMPLER=""
	echo "# all $NJOBS jobs done $((SECONDS - t0)) s after the last submit" >&3
	for ((k = 1; k <= NJOBS; k++)); do
		[ -f "$WD/ok$k" ] || { echo "job $k (${JOBS[k - 1]}) did not find its input:"; cat "$WD/out-$k.txt"; false; }
	done
	for j in "${JOBS[@]}"; do
		[ "$(sacct -n -X -j "$j" -o State 2>/dev/null | tr -d ' ' | head -1)" = COMPLETED ] ||
			[ "$(job_state "$j" 2>/dev/null)" = COMPLETED ] || { scontrol show job "$j"; false; }
	done
	# Within capacity: the peak of the test's own measurement, and Slurm
	# kept jobs waiting for the pool (more were queued than it holds).
	local peak peakdirs maxwait
	peak=$(awk '$1 > m { m = $1 } END { print m + 0 }' "$WD/samples")
	peakdirs=$(awk '$2 > m { m = $2 } END { print m + 0 }' "$WD/samples")
	maxwait=$(awk '$3 > m { m = $3 } END { print m + 0 }' "$WD/samples")
	echo "# $(wc -l <"$WD/samples") samples: peak staged $peak of $pool bytes in $peakdirs jobs; up to $maxwait jobs waited for the pool" >&3
	[ "$peak" -gt 0 ]
	[ "$peak" -le "$pool" ]
	[ "$peakdirs" -le 8 ]
	[ "$maxwait" -ge 1 ]
}
