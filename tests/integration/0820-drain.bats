#!/usr/bin/env bats
# Maintenance (docs/admin-guide.md, "Maintenance: drain and resume"), on the
# real test bed with real jobs of shtest: an admin drains stagehandd while a
# stage-in is held in flight. The transfer under way finishes and its job
# runs; a job submitted during the drain is accepted and held, its status
# saying why, and its stage-in stays queued, also across a restart of the
# daemon; 'stagehand resume' runs it and the job starts. /v1/health,
# /metrics and 'stagehand doctor' show the drain; users can neither drain
# nor resume.

bats_require_minimum_version 1.5.0

load helpers
load ../faults/faults

setup() {
	faults_setup
	STALLER=
	BG_PID=
	SH=("$STAGEHAND" --socket "$STAGEHAND_SOCKET")
	"${SH[@]}" resume >/dev/null
}

teardown() {
	[[ -z ${STALLER:-} ]] || kill "$STALLER" 2>/dev/null || true
	[[ -z ${BG_PID:-} ]] || kill "$BG_PID" 2>/dev/null || true
	# Never leave the bed drained for the next test.
	"${SH[@]}" resume >/dev/null 2>&1 || true
	faults_teardown
}

# si_state JOB: the state of JOB's stage_in request ("" while it has none).
si_state() {
	job_requests "$1" | jq -r 'select(.action == "stage_in") | .state'
}

# metric NAME: the value of one series of /metrics.
metric() {
	curl -sf --max-time 10 --unix-socket "$STAGEHAND_SOCKET" http://x/metrics |
		awk -v m="$1" '$1 == m { print $2 }'
}

# doctor_drain: the doctor's "drain" row as JSON, as on this host.
doctor_drain() {
	run "$STAGEHAND" doctor --json --config "$STAGEHAND_TESTBED_CONF" --slurm-conf "$SLURM_CONF"
	echo "$output" | jq -c '.checks[] | select(.check == "drain")'
}

@test "drain with a stage-in in flight: it finishes and its job runs; a new job waits held, across a daemon restart; resume stages it and the job runs" {
	# Counts below are exact: nothing of an earlier test may still run.
	wait_for 120 eval '[ "$(api_get /v1/health | jq ".queue.running + .queue.verifying")" = 0 ]'
	install -d -o shtest -g shtest "$WD/a" "$WD/b"
	runuser -u shtest -- bash -c "cd '$WD/a' && for i in 1 2 3; do echo a\$i > f\$i; done && echo b > '$WD/b/g'"
	# The first stage-in is held in flight on purpose, not by its size: its
	# worker (the daemon's child, as shtest) stalls in its first open of the
	# source until released.
	stall_worker_open "$WD/a"
	write_user_script shtest "$WD/one.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/a to=in-a
cat in-a/f1 > got-a
EOF
	write_user_script shtest "$WD/two.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/b to=in-b
cat in-b/g > got-b
EOF
	submit -d "$WD" "$WD/one.sh"
	j1=$j
	read -r -t 60 worker <&"${STALL[0]}"
	[[ $worker =~ ^[0-9]+$ ]]
	wait_for 30 eval '[ "$(si_state "$j1")" = running ]'

	# Users may neither drain nor resume.
	run run_as_user shtest "${SH[@]}" drain --reason mine
	[ "$status" -eq 1 ]
	[[ $output == *"drain is for admins"* ]]
	run run_as_user shtest "${SH[@]}" resume
	[ "$status" -eq 1 ]
	[[ $output == *"resume is for admins"* ]]
	[ "$(metric stagehand_drained)" = 0 ]

	run "${SH[@]}" drain --reason "scratch firmware update"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "stagehandd drained" ]
	[[ ${lines[1]} == "drained since "*" by uid 0: scratch firmware update: no new transfers start (1 still running)"* ]]

	# A job submitted now is accepted and held, its status says why, and
	# its stage-in is queued but not started, though a worker is free.
	submit -d "$WD" "$WD/two.sh"
	j2=$j
	wait_for 60 comment_matches "$j2" "drained for maintenance \\(scratch firmware update\\)"
	[ "$(si_state "$j2")" = queued ]
	# A user's own request is accepted too, and queued.
	run run_as_user shtest "${SH[@]}" submit --stage-in "$WD/b/g" "$WD/c"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output =~ ^submitted\ request\ r([0-9]+)\ \(queued\)$ ]]
	r3=${BASH_REMATCH[1]}
	sleep 3	# fifteen turns of the main loop, with a worker free
	[ "$(si_state "$j2")" = queued ]
	[ "$(api_get "/v1/requests/$r3" | jq -r .state)" = queued ]
	[ "$(job_state "$j2")" = PENDING ]

	# --wait gives up while the first transfer is still held in its open.
	run "${SH[@]}" drain --wait --timeout 2
	echo "$output"
	[ "$status" -eq 1 ]
	[[ $output == *"stagehandd was drained already"* ]]
	[[ $output == *"1 transfer still running after 2 s (the daemon stays drained)"* ]]

	# What an admin watches: health, /metrics, doctor.
	api GET /v1/health
	echo "$API_BODY" | jq -e '.status == "ok" and .drain.drained == true and .drain.reason == "scratch firmware update" and .drain.by == 0 and .drain.running == 1' >/dev/null
	[ "$(metric stagehand_drained)" = 1 ]
	[ "$(metric stagehand_drained_since_seconds)" = "$(echo "$API_BODY" | jq .drain.since)" ]
	[ "$(metric 'stagehand_requests{state="running"}')" -ge 1 ]
	row=$(doctor_drain)
	echo "$row"
	echo "$row" | jq -e '.status == "warn" and (.message | test("drained since .* by uid 0: scratch firmware update")) and (.hint | test("stagehand resume"))' >/dev/null

	# The admin waits for the running transfer; it is let through and finishes.
	"${SH[@]}" drain --wait --timeout 120 >"$BATS_TEST_TMPDIR/wait.out" 2>&1 &
	BG_PID=$!
	kill "$STALLER"
	wait "$STALLER" || true
	STALLER=
	wait "$BG_PID" || { cat "$BATS_TEST_TMPDIR/wait.out"; false; }
	BG_PID=
	grep -qx "no transfer running: ready for maintenance" "$BATS_TEST_TMPDIR/wait.out"
	[ "$(si_state "$j1")" = done ]
	# Its job is released and runs with its inputs.
	wait_job_state "$j1" COMPLETED 90
	[ "$(cat "$WD/got-a")" = a1 ]

	# The drain outlives a restart of the daemon.
	daemon_start
	api GET /v1/health
	echo "$API_BODY" | jq -e '.drain.drained == true and .drain.reason == "scratch firmware update"' >/dev/null
	grep -q "drained since .* by uid 0: scratch firmware update: no transfer starts until 'stagehand resume'" \
		"$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"
	sleep 3
	[ "$(si_state "$j2")" = queued ]
	[ "$(api_get "/v1/requests/$r3" | jq -r .state)" = queued ]
	[ "$(job_state "$j2")" = PENDING ]
	comment_matches "$j2" "drained for maintenance"

	# Resume: the queued stage-in runs, the job starts with its input.
	run "${SH[@]}" resume
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output == "stagehandd resumed: "*" queued request"*" may start" ]]
	wait_job_state "$j2" COMPLETED 90
	[ "$(cat "$WD/got-b")" = b ]
	wait_for 30 eval '[ "$(api_get "/v1/requests/$r3" | jq -r .state)" = done ]'
	[ "$(cat "$WD/c")" = b ]
	[ "$(metric stagehand_drained)" = 0 ]
	[ "$(metric stagehand_drained_since_seconds)" = 0 ]
	doctor_drain | jq -e '.status == "ok"' >/dev/null
	run "${SH[@]}" resume
	[ "$status" -eq 0 ]
	[ "$output" = "stagehandd was not drained" ]
}
