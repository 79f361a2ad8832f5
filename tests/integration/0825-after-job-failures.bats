#!/usr/bin/env bats
# Failures nobody sees in the job's record (docs/user-guide.md, "When
# something fails"), on the real test bed with real jobs of shtest and
# shtest2: NotifyCommand hears of a failed stage-in (a source the user
# cannot read), of a held job's stage-in cancelled with the job, and of a
# failed stage-out after the job has ended, each with
# its kind in STAGEHAND_EVENT and the same arguments as for archives; and
# 'stagehand status' without an id lists what needs the user's attention
# (unfinished transfers and failed ones), never another user's, while an
# admin sees everyone's.

bats_require_minimum_version 1.5.0

load helpers
load ../faults/faults

setup() {
	faults_setup
	REC=$BATS_TEST_TMPDIR/rec
	install -d -m 0755 "$REC"
	LOCKED=
	# The site's program: writes what it was given.
	cat >"$BATS_TEST_TMPDIR/record" <<EOF
#!/bin/bash
f=$REC/notice-\$STAGEHAND_REQUEST_ID
{ printf 'argv'; printf ' [%s]' "\$@"; echo; env | sort; } >"\$f.tmp"
mv "\$f.tmp" "\$f"
EOF
	chmod 0755 "$BATS_TEST_TMPDIR/record"
}

teardown() {
	[[ -z ${STALLER:-} ]] || kill "$STALLER" 2>/dev/null || true
	[[ -z ${LOCKED:-} ]] || rm -rf "$LOCKED"
	faults_teardown
}

# conf LINES...: run the bed's daemon with these stagehand.conf lines.
conf() {
	printf '%s\n' "$@" >"$BATS_TEST_TMPDIR/daemon.conf"
	daemon_conf "$BATS_TEST_TMPDIR/daemon.conf"
}

# req JOB ACTION FIELD: FIELD of JOB's ACTION request.
req() {
	job_requests "$1" | jq -r --arg a "$2" "select(.action == \$a) | .$3"
}

# private_job USER WD SOURCE: a job of USER whose input is SOURCE; sets $j.
private_job() {
	write_user_script "$1" "$2/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$2/out-%j.txt
#DATA stage_in=$3
echo ran > ran.txt
EOF
	submit -u "$1" -d "$2" "$2/job.sh"
}

# status_as USER ARGS...: 'stagehand status ARGS' as USER.
status_as() {
	local u=$1
	shift
	run_as_user "$u" "$STAGEHAND" --socket "$STAGEHAND_SOCKET" status "$@"
}

@test "NotifyCommand: a failed stage-in (a source the user cannot read) and a failed stage-out after the job are announced with their kind" {
	WD2=$(user_workdir shtest2)
	user_file shtest2 "$WD2/private/key.dat" 1
	chmod 0700 "$WD2/private"
	# Under ArchiveRoot, but a file: no directory can be made below it.
	LOCKED=$STAGEHAND_TESTBED_ARCHIVE/notadir-$$
	echo x >"$LOCKED"
	conf "NotifyCommand=$BATS_TEST_TMPDIR/record --site-arg" "NotifyTimeout=10s"
	private_job shtest "$WD" "$WD2/private/key.dat"
	j1=$j
	install -d -o shtest -g shtest "$WD/so"
	write_user_script shtest "$WD/so/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/so/out-%j.txt
#DATA stage_out=out to=$LOCKED/out
mkdir -p out && echo result > out/r.txt
EOF
	submit -d "$WD/so" "$WD/so/job.sh"
	j2=$j
	# The stage-in fails for good; the job stays held, and the site hears of it.
	wait_for 60 comment_matches "$j1" "stage-in failed"
	[ "$(job_state "$j1")" = PENDING ]
	r1=$(req "$j1" stage_in id)
	[ "$(req "$j1" stage_in state)" = failed_final ]
	wait_for 30 test -s "$REC/notice-$r1"
	cat "$REC/notice-$r1"
	[ "$(head -n1 "$REC/notice-$r1")" = "argv [--site-arg] [$j1] [shtest] [failed] [$WD2/private/key.dat] [$(req "$j1" stage_in dest)]" ]
	grep -qx "STAGEHAND_EVENT=stage_in" "$REC/notice-$r1"
	grep -qx "STAGEHAND_STATE=failed" "$REC/notice-$r1"
	grep -qx "STAGEHAND_JOB_ID=$j1" "$REC/notice-$r1"
	grep -qx "STAGEHAND_USER=shtest" "$REC/notice-$r1"
	grep -q "^STAGEHAND_ERROR=.*Permission denied" "$REC/notice-$r1"
	# The stage-out fails after the job has ended: only the site's program can say so.
	wait_job_state "$j2" COMPLETED 90
	wait_for 60 eval '[ "$(req "$j2" stage_out state)" = failed_final ]'
	r2=$(req "$j2" stage_out id)
	wait_for 30 test -s "$REC/notice-$r2"
	cat "$REC/notice-$r2"
	[ "$(head -n1 "$REC/notice-$r2")" = "argv [--site-arg] [$j2] [shtest] [failed] [$(req "$j2" stage_out source)] [$LOCKED/out]" ]
	grep -qx "STAGEHAND_EVENT=stage_out" "$REC/notice-$r2"
	grep -qx "STAGEHAND_STATE=failed" "$REC/notice-$r2"
	grep -q "^STAGEHAND_ERROR=..*" "$REC/notice-$r2"
	# A stage-in that is done is announced too, as done (every kind, every
	# outcome: docs/admin-guide.md, "Notifications").
	r0=$(run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" submit --stage-in "$WD/so/job.sh" "$WD/copy" --wait --json | jq -rs '.[-1] | select(.state == "done") | .id')
	[[ $r0 =~ ^[0-9]+$ ]]
	wait_for 30 test -s "$REC/notice-$r0"
	grep -qx "STAGEHAND_EVENT=stage_in" "$REC/notice-$r0"
	grep -qx "STAGEHAND_STATE=done" "$REC/notice-$r0"
}

@test "NotifyCommand: a held job scancelled while its stage-in runs: the stage-in is announced cancelled, once" {
	local worker r
	conf "NotifyCommand=$BATS_TEST_TMPDIR/record --site-arg" "NotifyTimeout=10s"
	install -d -o shtest -g shtest "$WD/src"
	runuser -u shtest -- bash -c "echo in > '$WD/src/f1'"
	# The stage-in is held in flight on purpose: its worker stalls in its open.
	stall_worker_open "$WD/src/f1"
	private_job shtest "$WD" "$WD/src"
	read -r -t 60 worker <&"${STALL[0]}"
	[[ $worker =~ ^[0-9]+$ ]]
	[ "$(job_field "$j" Reason)" = JobHeldUser ]
	[ "$(req "$j" stage_in state)" = running ]
	scancel "$j"
	wait_for 60 eval '[ "$(req "$j" stage_in state)" = cancelled ]'
	kill "$STALLER"
	wait "$STALLER" || true
	STALLER=
	r=$(req "$j" stage_in id)
	wait_for 30 test -s "$REC/notice-$r"
	cat "$REC/notice-$r"
	[ "$(head -n1 "$REC/notice-$r")" = "argv [--site-arg] [$j] [shtest] [cancelled] [$WD/src] [$(req "$j" stage_in dest)]" ]
	grep -qx "STAGEHAND_EVENT=stage_in" "$REC/notice-$r"
	grep -qx "STAGEHAND_STATE=cancelled" "$REC/notice-$r"
	grep -q "^STAGEHAND_ERROR=job cancelled while held" "$REC/notice-$r"
	[ "$(grep -c "NotifyCommand started for request $r " "$STAGEHAND_TESTBED_LOGDIR/stagehandd.log")" -eq 1 ]
}

@test "status without an id: a user's failed stage-in is listed, another user's never, finished ones only with --all; an admin sees both" {
	WD2=$(user_workdir shtest2)
	user_file shtest2 "$WD2/private/key.dat" 1
	chmod 0700 "$WD2/private"
	user_file shtest "$WD/private/key.dat" 1
	chmod 0700 "$WD/private"
	# Each user's job wants the other's private file: both stage-ins fail.
	private_job shtest "$WD" "$WD2/private/key.dat"
	j1=$j
	private_job shtest2 "$WD2" "$WD/private/key.dat"
	j2=$j
	wait_for 60 comment_matches "$j1" "stage-in failed"
	wait_for 60 comment_matches "$j2" "stage-in failed"
	r1=$(req "$j1" stage_in id)
	r2=$(req "$j2" stage_in id)
	# And one of shtest's that is done.
	r0=$(run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" submit --stage-in "$WD/private/key.dat" "$WD/copy" --wait --json | jq -rs '.[-1] | select(.state == "done") | .id')
	[[ $r0 =~ ^[0-9]+$ ]]

	run status_as shtest
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "Your transfers not finished yet, or failed in the last 7 days:" ]
	list=$output	# each 'run' below sets $output anew
	grep -qE "^r$r1 +$j1 +stage_in +failed_final .*$WD2/private/key.dat -> " <<<"$list"
	grep -q "error: .*Permission denied" <<<"$list"
	grep -q "stagehand retry" <<<"$list"
	run ! grep -qE "^r$r2 " <<<"$list"
	run ! grep -qE "^r$r0 " <<<"$list"
	# The same as JSON, and --days.
	run status_as shtest --json --days 1
	[ "$status" -eq 0 ]
	echo "$output" | jq -e --argjson r1 "$r1" --argjson r2 "$r2" --argjson r0 "$r0" \
		'[.requests[].id] | index($r1) != null and index($r2) == null and index($r0) == null' >/dev/null
	echo "$output" | jq -e --argjson u "$(id -u shtest)" 'all(.requests[]; .uid == $u and .state != "done" and .state != "cancelled")' >/dev/null
	# --all: finished ones too, still only the user's own.
	run status_as shtest --all --json
	echo "$output" | jq -e --argjson r1 "$r1" --argjson r2 "$r2" --argjson r0 "$r0" \
		'[.requests[].id] | index($r1) != null and index($r0) != null and index($r2) == null' >/dev/null
	# Another user's, asked for by name: refused.
	run status_as shtest --user shtest2
	echo "$output"
	[ "$status" -eq 1 ]
	[[ $output == *"you may see only your own requests"* ]]
	# shtest2 sees its own failure, not shtest's.
	run status_as shtest2 --json
	echo "$output" | jq -e --argjson r1 "$r1" --argjson r2 "$r2" \
		'[.requests[].id] | index($r2) != null and index($r1) == null' >/dev/null
	# root (an admin) sees both, with their uids; or one user's with --user.
	run "$STAGEHAND" --socket "$STAGEHAND_SOCKET" status
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "Transfers of every user not finished yet, or failed in the last 7 days:" ]
	grep -qE "^r$r1 +$(id -u shtest) +$j1 +stage_in +failed_final" <<<"$output"
	grep -qE "^r$r2 +$(id -u shtest2) +$j2 +stage_in +failed_final" <<<"$output"
	run "$STAGEHAND" --socket "$STAGEHAND_SOCKET" status --user shtest2 --json
	echo "$output" | jq -e --argjson r1 "$r1" --argjson r2 "$r2" \
		'[.requests[].id] | index($r2) != null and index($r1) == null' >/dev/null
}
