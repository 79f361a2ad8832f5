#!/usr/bin/env bats
# A job's start makes after-job transfers on its file system yield at once:
# the SPANK plugin sends a job-start event before the job's tasks run, so a
# running archive stops writing before the job's first command, not at the
# daemon's next look at slurmctld (every 2 s). Needs 'scripts/testbed up'
# with the SPANK plugin and stagehandd built in this tree. The test slows the
# test bed's daemon down (BandwidthCap=20M, reloaded with SIGHUP) while it
# runs and restores its configuration afterwards.

load helpers

setup() {
	daemon_setup spank
	SHCONF=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	PIDF=$STAGEHAND_TESTBED_DIR/run/stagehandd.pid
	LOG=$STAGEHAND_TESTBED_DIR/log/stagehandd.log
	SAMPLER=
	cp -p "$SHCONF" "$BATS_TEST_TMPDIR/stagehand.conf.orig"
	printf 'BandwidthCap=20M\nYieldToJobs=yes\nYieldMode=pause\nYieldBandwidth=0\nYieldMaxDelay=10m\n' >>"$SHCONF"
	reload_daemon
}

teardown() {
	[[ -z $SAMPLER ]] || kill "$SAMPLER" 2>/dev/null || true
	cancel_jobs "${JOBS[@]}"
	if [[ -f $BATS_TEST_TMPDIR/stagehand.conf.orig ]]; then
		cp -p "$BATS_TEST_TMPDIR/stagehand.conf.orig" "$SHCONF"
		reload_daemon || true
	fi
}

# api [curl args] PATH: the daemon's API as root; prints the body.
api() {
	curl -sS --max-time 10 --unix-socket "$STAGEHAND_SOCKET" "${@:1:$#-1}" "http://localhost${!#}"
}

# request_done ID
request_done() {
	api "/v1/requests/$1" | grep -q '"state": *"done"'
}

# dest_bytes DIR: bytes of the files under DIR.
dest_bytes() {
	find "$1" -type f -printf '%s\n' 2>/dev/null | awk '{s += $1} END {print s + 0}'
}

@test "a job's start pauses a running archive on its file system before its first command; it completes after the job" {
	local src=$WD/big dest=$STAGEHAND_TESTBED_ARCHIVE/yield-start-$$ k rid t0 samples j from
	local total=$((24 * 10 * 1048576))
	install -d -o "$TESTBED_USER" "$src"
	for k in $(seq 1 24); do
		runuser -u "$TESTBED_USER" -- dd if=/dev/urandom of="$src/f$k" bs=1M count=10 status=none
	done
	# 240 MiB at 20 MiB/s: at least 12 s (the cap bounds it from above on any
	# machine), for a job submitted once the archive moves.
	rid=$(runuser -u "$TESTBED_USER" -- curl -sS --max-time 10 --unix-socket "$STAGEHAND_SOCKET" \
		-X POST -H 'Content-Type: application/json' \
		--data "{\"action\":\"archive\",\"source\":\"$src\",\"dest\":\"$dest\"}" \
		http://localhost/v1/requests | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
	[[ $rid =~ ^[0-9]+$ ]]
	samples=$BATS_TEST_TMPDIR/samples
	# Each sample: the time before the measurement, the bytes, the time after.
	(while :; do tb=$(date +%s.%N); b=$(dest_bytes "$dest"); echo "$tb $b $(date +%s.%N)"; sleep 0.05; done) >"$samples" &
	SAMPLER=$!
	wait_for 20 bash -c "[[ \$(tail -n1 '$samples' | cut -d' ' -f2) -gt 0 ]]"
	write_user_script "$TESTBED_USER" "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
date +%s.%N > $WD/t0
sleep 4
EOF
	j=$(submit_as_user -d "$WD" "$WD/job.sh")
	JOBS+=("$j")
	wait_job_state "$j" COMPLETED 60
	t0=$(cat "$WD/t0")
	# The archive was still moving when the job started (not done already).
	awk -v t0="$t0" -v total="$total" '$3 < t0 { b = $2 } END { exit !(b > 0 && b < total) }' "$samples"
	# The daemon held the archive before it answered the start event (it
	# says so), so from the job's first command to its end (it sleeps 4 s)
	# not a byte may be written: no growth between two samples measured
	# wholly inside that window. A daemon too busy to settle within its
	# bound answers first; then the hold must have come within 1 s.
	grep -q "job $j: started on" "$LOG"
	if grep "job $j: started on" "$LOG" | grep -q "settled before the answer"; then
		from=0
	else
		from=1.0
		echo "job $j's start event was answered before it settled" >&3
	fi
	run awk -v t0="$t0" -v from="$from" '$1 >= t0 + from && $3 <= t0 + 4 {
			if (prev != "" && $2 != prev) bad = bad " " prev "->" $2; prev = $2; n++ }
		END { print n " samples, growth:" bad; exit !(n >= 5 && bad == "") }' "$samples"
	echo "samples from t0+$from s to the job's end: $output"
	[ "$status" -eq 0 ]
	# How soon the writes stopped around the job's start (for the record).
	awk -v t0="$t0" '{ if (prev != "" && $2 > prev) last = $3; prev = $2 }
		$1 > t0 + 3.8 { exit } END { printf "last byte written %.3f s after the job'"'"'s first command\n", last - t0 }' "$samples" >&3 || true
	# The job ended: the archive goes on and completes.
	wait_for 90 request_done "$rid"
	[ "$(dest_bytes "$dest")" -ge "$total" ]
	# ... and the daemon no longer holds the job's file system.
	wait_for 10 bash -c "curl -sS --unix-socket '$STAGEHAND_SOCKET' http://localhost/v1/health | grep -q '\"started_jobs\": *0'"
}
