#!/usr/bin/env bats
# '#DATA after=J' in hold mode, on the real test bed as an ordinary user: a
# job waits, held, until job J's archive is verified (docs/directives.md,
# "Waiting for another job's archive"). job_submit.lua holds it at submit;
# stagehandd judges it on each tick from slurmctld's table and its queue,
# stages its inputs once the archive is verified and releases it.
#
# Archives are held in flight on purpose (stall_worker_open: the daemon's
# worker waits in its first open of the archived directory), never by size.
# Burst-buffer mode refuses after= at submit (afterburstbuffer is Slurm's);
# this file is hold mode only.

bats_require_minimum_version 1.5.0

load helpers

setup() {
	testbed_require
	daemon_require
	[[ ${STAGEHAND_TESTBED_SUBMIT_MODE:-hold} == hold ]] ||
		skip "hold mode only: bb mode refuses after= (afterburstbuffer does it there)"
	STAGEHAND=$STAGEHAND_BUILD_DIR/cli/stagehand
	WD=$(user_workdir)
	JOBS=()
	STALLER=
	LOCKED=
}

teardown() {
	[[ -z ${STALLER:-} ]] || kill "$STALLER" 2>/dev/null || true
	cancel_jobs "${JOBS[@]}"
	[[ -z ${LOCKED:-} ]] || rm -rf "$LOCKED"
}

comment_matches() {
	[[ "$(job_status "$1")" =~ $2 ]]
}

# The user's own 'stagehand status JOB'.
user_status() {
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$1"
}

# J's archive of results/ done, by the daemon's word.
archive_done() {
	curl -sf --max-time 5 --unix-socket "$STAGEHAND_SOCKET" "http://x/v1/requests?job=$1&all=1" |
		jq -e '[.requests[] | select(.action == "archive")] | length > 0 and all(.state == "done")' >/dev/null
}

# A job that archives results/ with a.txt in it (to= DEST when given).
producer() {
	local to=${1:+ to=$1}
	write_user_script shtest "$WD/produce.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/produce-%j.txt
#DATA archive=results$to
echo "from \$SLURM_JOB_ID" > results/a.txt
EOF
	submit -d "$WD" "$WD/produce.sh"
	j1=$j
}

@test "after=: held while J's archive is in flight, released once it is verified, and stages it in" {
	install -d -o shtest -g shtest "$WD/results"
	stall_worker_open "$WD/results"
	producer
	wait_job_state "$j1" COMPLETED 60
	arch=$STAGEHAND_TESTBED_ARCHIVE/shtest/$j1/results
	write_user_script shtest "$WD/consume.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/consume-%j.txt
#DATA after=$j1
#DATA stage_in=$arch to=prev/
cat prev/results/a.txt > seen.txt
EOF
	try_submit -d "$WD" "$WD/consume.sh"
	[ "$status" -eq 0 ]
	j2=$JOB
	[[ $stderr =~ "held until the archive of job $j1 is verified, then until its stage_in inputs are staged" ]]
	# The worker archiving job 1 is held in its open of results/.
	read -r -t 60 worker <&"${STALL[0]}"
	[[ $worker =~ ^[0-9]+$ ]]
	wait_for 60 comment_matches "$j2" "waiting for job $j1's archive"
	# Several watch ticks later it still waits: held, not started.
	sleep 6
	[ "$(job_state "$j2")" = PENDING ]
	[[ "$(job_field "$j2" Reason)" =~ JobHeld ]]
	run ! archive_done "$j1"
	[[ "$(job_status "$j2")" =~ "waiting for job $j1's archive" ]]
	# The user sees what it waits for, and cannot release it.
	run user_status "$j2"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output =~ "job $j2: after=$j1: waiting: waiting for job $j1's archive" ]]
	run run_as_user shtest scontrol release "$j2"
	[ "$status" -ne 0 ]
	[ "$(job_state "$j2")" = PENDING ]
	# Let the archive through: verified, then job 2 is staged and runs.
	kill "$STALLER"
	wait "$STALLER" || true
	STALLER=
	wait_job_state "$j2" COMPLETED 90
	archive_done "$j1"
	[ "$(cat "$WD/seen.txt")" = "from $j1" ]
	[[ "$(job_status "$j2")" =~ "archives of after=$j1 verified" ]]
	run user_status "$j2"
	[[ $output =~ "job $j2: after=$j1: every archive verified" ]]
}

@test "after=: J's archive fails, the dependent stays held with J's failure; a retry of J releases it" {
	LOCKED=$STAGEHAND_TESTBED_ARCHIVE/locked-$$
	install -d -o root -g root -m 0755 "$LOCKED"
	producer "$LOCKED/out"
	write_user_script shtest "$WD/consume.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/consume-%j.txt
#DATA after=$j1
cat "$LOCKED/out/a.txt" > seen.txt
EOF
	submit -d "$WD" "$WD/consume.sh"
	j2=$j
	wait_job_state "$j1" COMPLETED 60
	# shtest may not write there: the archive fails for good (MaxRetries=1).
	wait_for 90 comment_matches "$j2" "job $j1's archive failed"
	[[ "$(job_status "$j2")" =~ "Permission denied" ]]
	[[ "$(job_status "$j2")" =~ "stagehand retry $j1" ]]
	sleep 4
	[ "$(job_state "$j2")" = PENDING ]
	run user_status "$j2"
	[[ $output =~ "after=$j1: failed: job $j1's archive failed" ]]
	# Fixed and retried by the user: the dependent is released and reads it.
	chown shtest:shtest "$LOCKED"
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" retry "$j1"
	echo "$output"
	[ "$status" -eq 0 ]
	wait_job_state "$j2" COMPLETED 90
	[ "$(cat "$WD/seen.txt")" = "from $j1" ]
}

@test "after=: the daemon restarted while the dependent waits; released once J's archive is verified" {
	write_user_script shtest "$WD/produce.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/produce-%j.txt
#DATA archive=results
while [ ! -e go ]; do sleep 0.2; done
echo "from \$SLURM_JOB_ID" > results/a.txt
EOF
	submit -d "$WD" "$WD/produce.sh"
	j1=$j
	wait_job_state "$j1" RUNNING 60
	write_user_script shtest "$WD/consume.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/consume-%j.txt
#DATA after=$j1
cat "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j1/results/a.txt" > seen.txt
EOF
	submit -d "$WD" "$WD/consume.sh"
	j2=$j
	wait_for 60 comment_matches "$j2" "waiting for job $j1 \\(RUNNING\\)"
	"$TESTBED" restart stagehandd >/dev/null
	[ "$(job_state "$j2")" = PENDING ]
	# What it waits for survived the restart (the daemon's database).
	run user_status "$j2"
	[[ $output =~ "after=$j1: waiting" ]]
	runuser -u shtest -- touch "$WD/go"
	wait_job_state "$j1" COMPLETED 60
	wait_job_state "$j2" COMPLETED 90
	[ "$(cat "$WD/seen.txt")" = "from $j1" ]
}

@test "after=: another user's job, a job cancelled before it ran and a bad id are refused, with the reason" {
	# shtest2's job: shtest may not wait for it.
	other=$(user_workdir shtest2)
	write_user_script shtest2 "$other/produce.sh" <<EOF
#!/bin/bash
#DATA archive=results
sleep 1
EOF
	submit -u shtest2 -d "$other" "$other/produce.sh"
	jo=$j
	# shtest's own job, cancelled while it waits in the queue (a user hold).
	write_user_script shtest "$WD/never.sh" <<EOF
#!/bin/bash
#DATA archive=results
echo never > results/a.txt
EOF
	submit -d "$WD" "$WD/never.sh" --hold
	jc=$j
	scancel "$jc"
	wait_job_state "$jc" CANCELLED 30
	write_user_script shtest "$WD/steal.sh" <<EOF
#!/bin/bash
#DATA after=$jo
echo ran > ran.txt
EOF
	submit -d "$WD" "$WD/steal.sh"
	js=$j
	write_user_script shtest "$WD/orphan.sh" <<EOF
#!/bin/bash
#DATA after=$jc
echo ran > ran-orphan.txt
EOF
	submit -d "$WD" "$WD/orphan.sh"
	jn=$j
	wait_for 60 comment_matches "$js" "after= refused \\(script line 2\\): job $jo belongs to another user"
	wait_for 60 comment_matches "$jn" "job $jc ended CANCELLED before it ran: its archive will never come"
	sleep 4
	[ "$(job_state "$js")" = PENDING ]
	[ "$(job_state "$jn")" = PENDING ]
	[ ! -e "$WD/ran.txt" ]
	[ ! -e "$WD/ran-orphan.txt" ]
	# A dependency type where a job id belongs: sbatch refuses the script, with the line.
	write_user_script shtest "$WD/bad.sh" <<EOF
#!/bin/bash
#DATA after=afterok:$jo
echo ran
EOF
	try_submit -d "$WD" "$WD/bad.sh"
	[ "$status" -ne 0 ]
	[[ $stderr =~ "stagehand: line 2: 'afterok' is not a job id" ]]
}

@test "a request naming another user's job is refused: it could never count toward that job's archives or its after= dependents" {
	# shtest's job, held by the user so that slurmctld lists it and it never runs.
	write_user_script shtest "$WD/mine.sh" <<EOF2
#!/bin/bash
#DATA archive=results
echo never > results/a.txt
EOF2
	submit -d "$WD" "$WD/mine.sh" --hold
	jm=$j
	other=$(user_workdir shtest2)
	run_as_user shtest2 mkdir -p "$other/x"
	# shtest2 names shtest's job: slurmctld says whose it is, and the daemon refuses.
	run run_as_user shtest2 env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" submit \
		--archive "$other/x" "$STAGEHAND_TESTBED_ARCHIVE/shtest2/x" --job "$jm"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ $output =~ "job $jm is not yours" ]]
	# Nothing was queued on the job.
	[ "$(curl -sf --max-time 5 --unix-socket "$STAGEHAND_SOCKET" "http://x/v1/requests?job=$jm&all=1" |
		jq '.requests | length')" -eq 0 ]
	# A job slurmctld does not list (a future id) is refused too.
	run run_as_user shtest2 env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" submit \
		--archive "$other/x" "$STAGEHAND_TESTBED_ARCHIVE/shtest2/x" --job $((jm + 100000))
	[ "$status" -ne 0 ]
	[[ $output =~ "is not yours" ]]
	# The owner may.
	run_as_user shtest mkdir -p "$WD/y"
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" submit \
		--label "$WD/y" --job "$jm"
	echo "$output"
	[ "$status" -eq 0 ]
}
