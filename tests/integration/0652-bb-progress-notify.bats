#!/usr/bin/env bats
# 0652-bb-progress-notify.bats - burst-buffer mode (scripts/testbed up
# --mode=bb): what the user and the site hear while Slurm's hooks drive
# the transfers.
#   * during data_in (PENDING) the job's AdminComment
#     shows the stage-in's progress as in hold mode ("staging N/M files
#     (P%, DONE of TOTAL)"), the stage-in held in flight on purpose;
#   * NotifyCommand hears of every kind of transfer (stage_in, archive,
#     stage_out) with every outcome (done, failed, cancelled), each exactly
#     once, with the job's id: cancelled is a job scancelled during data_in,
#     and 'scancel --hurry' during data_out (its archive and stage-out held
#     back on purpose by YieldMode=pause behind a running job).
# During data_out the job has ended: Slurm refuses any update of its record
# (ESLURM_JOB_FINISHED), so there is no AdminComment progress to check
# there; 'stagehand status J' has it (docs/burst-buffer-slurm.md).
# Skipped on a hold-mode bed (tests/integration/expected-skips).

bats_require_minimum_version 1.5.0

load helpers

setup() {
	bb_setup
	REC=$BATS_TEST_TMPDIR/rec
	install -d -m 0755 "$REC"
	LOCKED=
	# The site's program: one line per call, and what it was given.
	cat >"$BATS_TEST_TMPDIR/record" <<EOF
#!/bin/bash
echo "\$STAGEHAND_REQUEST_ID \$STAGEHAND_JOB_ID \$STAGEHAND_EVENT \$STAGEHAND_STATE" >>$REC/calls
env | sort >$REC/notice-\$STAGEHAND_REQUEST_ID
EOF
	chmod 0755 "$BATS_TEST_TMPDIR/record"
}

teardown() {
	local j
	[[ -z ${STALLER:-} ]] || kill "$STALLER" 2>/dev/null || true
	for j in "${JOBS[@]}"; do scancel --hurry "$j" 2>/dev/null || true; done
	cancel_jobs "${JOBS[@]}"
	[[ -z ${LOCKED:-} ]] || rm -rf "$LOCKED"
	conf_restore "$BATS_TEST_TMPDIR"
}

# notify_conf [LINE...]: NotifyCommand records to $REC, with these stagehand.conf lines too.
notify_conf() {
	conf_extend "$BATS_TEST_TMPDIR" 0652-bb-progress-notify \
		"NotifyCommand=$BATS_TEST_TMPDIR/record" "NotifyTimeout=10s" "$@"
}

# job_requests JOB: the daemon's requests of JOB (JSON array).
job_requests() {
	curl -sf --max-time 5 --unix-socket "$STAGEHAND_SOCKET" "http://x/v1/requests?job=$1&all=1" | jq -c '.requests'
}

# req JOB ACTION FIELD: FIELD of JOB's ACTION request.
req() {
	job_requests "$1" | jq -r --arg a "$2" "map(select(.action == \$a)) | .[0].$3"
}

# state_reason JOB: "STATE REASON" as squeue shows them.
state_reason() {
	squeue -h -t all -j "$1" -o '%T %r' 2>/dev/null
}

# calls_for JOB...: how many announcements name these jobs (a notice of an
# earlier test's job may come while this test runs).
calls_for() {
	local j n=0
	for j in "$@"; do
		n=$((n + $(awk -v j="$j" '$2 == j' "$REC/calls" | wc -l)))
	done
	echo "$n"
}

# announced JOB ACTION STATE: JOB's ACTION request was announced as STATE,
# exactly once, and nothing else was announced for it.
announced() {
	local r
	r=$(req "$1" "$2" id)
	[[ $r =~ ^[0-9]+$ ]] || { echo "job $1 has no $2 request" >&2; return 1; }
	wait_for 30 grep -qs "^$r " "$REC/calls" || { echo "request $r ($2 of job $1) was never announced" >&2; return 1; }
	grep "^$r " "$REC/calls"
	[ "$(grep -c "^$r " "$REC/calls")" -eq 1 ] || { echo "request $r announced more than once" >&2; return 1; }
	[ "$(grep "^$r " "$REC/calls")" = "$r $1 $2 $3" ]
	grep -qx "STAGEHAND_USER=shtest" "$REC/notice-$r"
}

@test "bb: progress during data_in in AdminComment; NotifyCommand: stage_in, archive and stage_out done, each once" {
	local worker
	notify_conf
	install -d -o shtest -g shtest "$WD/src"
	runuser -u shtest -- bash -c "cd '$WD/src' && for i in 1 2 3; do head -c 200000 /dev/urandom > f\$i; done"
	# The stage-in is held in flight on purpose: its worker (the daemon's
	# child, as shtest) stalls in its open of one of the three files.
	stall_worker_open "$WD/src/f2"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src
#DATA archive=results
#DATA stage_out=out to=$WD/back
mkdir -p results out
cp "\$STAGEHAND_INPUT_DIR/src/f1" results/
echo done > out/o.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	J=$j
	read -r -t 60 worker <&"${STALL[0]}"
	[[ $worker =~ ^[0-9]+$ ]]
	# PENDING: 22.05 says reason None while its data_in hook waits, 24.05
	# and later BurstBufferStageIn.
	state_reason "$J"
	[[ "$(state_reason "$J")" == PENDING* ]]
	# The daemon's next look at the job writes the progress (SlurmWatchInterval).
	wait_for 30 eval '[[ "$(job_status "$J")" =~ ^"staging "[0-2]"/3 files ("[0-9]+"%, ".*" of ".*")" ]]'
	job_status "$J"
	[[ "$(state_reason "$J")" == PENDING* ]]
	# Nothing is announced while it runs.
	[ ! -e "$REC/calls" ] || [ "$(calls_for "$J")" -eq 0 ]
	kill "$STALLER"
	wait "$STALLER" || true
	STALLER=
	wait_job_state "$J" COMPLETED 180
	job_status "$J"
	[[ "$(job_status "$J")" == "1 input staged ("*" bytes) before the job started; archives and stage-outs run after it (stagehand status $J)" ]]
	announced "$J" stage_in done
	announced "$J" archive done
	announced "$J" stage_out done
	[ "$(cat "$WD/back/o.txt")" = done ]
	r=$(req "$J" stage_in id)
	grep -qx "STAGEHAND_FILES=3" "$REC/notice-$r"
	sleep 3	# three NotifyCommand polls: still once each
	cat "$REC/calls"
	[ "$(calls_for "$J")" -eq 3 ]
}

@test "bb: NotifyCommand: a failed stage_in, a failed archive and a failed stage_out, each once" {
	notify_conf
	# A source shtest cannot read: the stage-in fails for good.
	install -d -m 0700 "$WD/private"
	echo secret >"$WD/private/key.dat"
	write_user_script shtest "$WD/in.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/private/key.dat
echo ran > $WD/in-ran
EOF
	submit -d "$WD" "$WD/in.sh"
	JI=$j
	# Under ArchiveRoot, but a file: no directory can be made below it.
	LOCKED=$STAGEHAND_TESTBED_ARCHIVE/notadir-$$
	echo x >"$LOCKED"
	write_user_script shtest "$WD/out.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results to=$LOCKED/a
#DATA stage_out=out to=$LOCKED/b
mkdir -p results out
echo r > results/r.txt
echo o > out/o.txt
EOF
	submit -d "$WD" "$WD/out.sh"
	JO=$j
	wait_for 90 eval '[ "$(req "$JI" stage_in state)" = failed_final ]'
	announced "$JI" stage_in failed
	grep -q "^STAGEHAND_ERROR=.*Permission denied" "$REC/notice-$(req "$JI" stage_in id)"
	[ ! -e "$WD/in-ran" ]
	wait_for 120 eval '[ "$(req "$JO" archive state)" = failed_final ] && [ "$(req "$JO" stage_out state)" = failed_final ]'
	announced "$JO" archive failed
	announced "$JO" stage_out failed
	sleep 3
	cat "$REC/calls"
	[ "$(calls_for "$JI" "$JO")" -eq 3 ]
}

@test "bb: NotifyCommand: a job scancelled during data_in, and 'scancel --hurry' during data_out: cancelled, each once" {
	local worker
	# After-job transfers wait while a job runs on their file system: the
	# blocker holds JO's archive and stage-out in data_out for the test.
	notify_conf YieldToJobs=yes YieldMode=pause
	install -d -o shtest -g shtest "$WD/src"
	runuser -u shtest -- bash -c "echo in > '$WD/src/f1'"
	stall_worker_open "$WD/src/f1"
	write_user_script shtest "$WD/in.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src
echo ran > $WD/in-ran
EOF
	submit -d "$WD" "$WD/in.sh"
	JI=$j
	read -r -t 60 worker <&"${STALL[0]}"
	[[ $worker =~ ^[0-9]+$ ]]
	[[ "$(state_reason "$JI")" == PENDING* ]]
	scancel "$JI"
	wait_for 60 eval '[ "$(req "$JI" stage_in state)" = cancelled ]'
	kill "$STALLER"
	wait "$STALLER" || true
	STALLER=
	announced "$JI" stage_in cancelled
	write_user_script shtest "$WD/blocker.sh" <<EOF
#!/bin/bash
#SBATCH --output=/dev/null
sleep 300
EOF
	submit -d "$WD" "$WD/blocker.sh"
	blocker=$j
	wait_job_state "$blocker" RUNNING 60
	write_user_script shtest "$WD/out.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
#DATA stage_out=out to=$WD/back
mkdir -p results out
echo r > results/r.txt
echo o > out/o.txt
EOF
	submit -d "$WD" "$WD/out.sh"
	JO=$j
	wait_for 90 eval '[[ "$(state_reason "$JO")" == STAGE_OUT* ]]'
	# Paused, queued or in a worker that waits (YieldMode=pause): not done.
	wait_for 30 eval '[[ "$(req "$JO" archive state)" =~ ^(queued|running)$ && "$(req "$JO" stage_out state)" =~ ^(queued|running)$ ]]'
	sleep 2
	[[ "$(state_reason "$JO")" == STAGE_OUT* ]]
	# Its last status (Slurm takes none after the job) says where to look.
	job_status "$JO"
	[ "$(job_status "$JO")" = "no inputs to stage; archives and stage-outs run after the job (stagehand status $JO)" ]
	# An admin ends the stage-out: what is left of it is cancelled.
	scancel --hurry "$JO"
	wait_job_state "$JO" COMPLETED 60
	wait_for 30 eval '[ "$(req "$JO" archive state)" = cancelled ] && [ "$(req "$JO" stage_out state)" = cancelled ]'
	announced "$JO" archive cancelled
	announced "$JO" stage_out cancelled
	grep -q "^STAGEHAND_ERROR=.*scancel --hurry" "$REC/notice-$(req "$JO" archive id)"
	[ ! -e "$WD/back/o.txt" ]
	sleep 3
	cat "$REC/calls"
	[ "$(calls_for "$JI" "$JO")" -eq 3 ]
}
