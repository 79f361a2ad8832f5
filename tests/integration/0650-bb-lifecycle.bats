#!/usr/bin/env bats
# 0650-bb-lifecycle.bats - burst-buffer mode (scripts/testbed up --mode=bb):
# a #DATA job through Slurm's burst_buffer/lua hooks and stagehandd.
#   * stage-in happens before the job starts (BurstBufferStageIn), as the owner;
#   * the job stays in STAGE_OUT until its archive is verified, and a
#     dependent with --dependency=afterburstbuffer starts only after that;
#   * --mail-type=STAGE_OUT mails (the bed's MailProg records its calls);
#   * a failed archive shows in scontrol show job (state STAGE_OUT, reason)
#     and in 'stagehand status';
#   * the user's own --comment is never touched; staged inputs are labelled
#     'purge' at teardown;
#   * a stagehandd restart while Slurm sets a job up does not fail it: the
#     hook asks again until the daemon is back.
# Skipped on a hold-mode bed (tests/integration/expected-skips).

bats_require_minimum_version 1.5.0

load helpers

setup() {
	bb_setup
	MAIL=$STAGEHAND_TESTBED_LOGDIR/mail.log
}

teardown() {
	local j pid
	[[ -z ${STALLER:-} ]] || kill "$STALLER" 2>/dev/null || true
	for j in "${JOBS[@]}"; do scancel --hurry "$j" 2>/dev/null || true; done
	cancel_jobs "${JOBS[@]}"
	# A test that stopped the daemon and failed before starting it again.
	pid=$(cat "$STAGEHAND_TESTBED_DIR/run/stagehandd.pid" 2>/dev/null) || pid=""
	[[ -n $pid && -d /proc/$pid ]] || "$TESTBED" restart stagehandd >/dev/null || true
	if [[ -f $BATS_TEST_TMPDIR/stagehand.conf.orig ]]; then
		cp -p "$BATS_TEST_TMPDIR/stagehand.conf.orig" "$STAGEHAND_TESTBED_DIR/etc/stagehand.conf"
		reload_daemon || true
	fi
}

# yield_pause: after-job transfers wait while a job runs on their file system
# (YieldMode=pause; the default, adaptive, would archive alongside it).
yield_pause() {
	local conf=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	cp -p "$conf" "$BATS_TEST_TMPDIR/stagehand.conf.orig"
	printf '%s\n' YieldToJobs=yes YieldMode=pause >>"$conf"
	reload_daemon
}

# sh_status JOB: 'stagehand status JOB' as the job's owner.
sh_status() {
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND_BUILD_DIR/cli/stagehand" status "$1"
}

# state_reason JOB: "STATE REASON" as squeue shows them.
state_reason() {
	squeue -h -t all -j "$1" -o '%T %r' 2>/dev/null
}

# A job that stages one input, copies it into results/ and archives that.
write_archive_job() {
	head -c 3000000 /dev/urandom >"$WD/in.dat"
	chown shtest: "$WD/in.dat"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --comment=my-own-note
#SBATCH --mail-type=STAGE_OUT
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/in.dat
#DATA archive=results
mkdir -p results
cp "\$STAGEHAND_INPUT_DIR/in.dat" results/
EOF
}

@test "bb: staged before start, STAGE_OUT until the archive is verified, afterburstbuffer dependent after, mail, comment kept" {
	write_archive_job
	# A running job on the same scratch makes the archive yield (YieldToJobs,
	# YieldMode=pause): it holds J in stage-out for as long as the test wants.
	yield_pause
	write_user_script shtest "$WD/blocker.sh" <<EOF
#!/bin/bash
#SBATCH --output=/dev/null
sleep 300
EOF
	submit -d "$WD" "$WD/blocker.sh"
	blocker=$j
	wait_job_state "$blocker" RUNNING 60
	submit -d "$WD" "$WD/job.sh"
	J=$j
	submit -d "$WD" --dependency=afterburstbuffer:"$J" --wrap "date +%s.%N > $WD/dep-started"
	D=$j
	# Stage-in first: the input is in place before the job's first command.
	wait_for 90 eval '[[ "$(state_reason "$J")" == STAGE_OUT* ]]'
	[ "$(cmp "$WD/in.dat" "$WD/results/in.dat" && echo same)" = same ]
	[ "$(stat -c %U "$STAGEHAND_TESTBED_SCRATCH/shtest/$J/input/in.dat")" = shtest ]
	# Stage-out waits for the archive, which yields to the running blocker.
	sleep 6
	state_reason "$J"
	[[ "$(state_reason "$J")" == "STAGE_OUT burst_buffer/lua: Stage-out in progress" ]]
	[[ "$(state_reason "$D")" == "PENDING Dependency" ]]
	[ ! -e "$WD/dep-started" ]
	run sh_status "$J"
	echo "$output"
	[[ $output =~ archive\ +(queued|running) ]]
	# The blocker ends: the archive runs, is verified, and only then the job
	# completes and the dependent starts.
	scancel "$blocker"
	wait_job_state "$J" COMPLETED 120
	wait_job_state "$D" COMPLETED 120
	run sh_status "$J"
	echo "$output"
	[[ $output =~ archive\ +done ]]
	cmp "$WD/in.dat" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$J/results/in.dat"
	# The archive's last write came before the dependent's first command.
	[ "$(stat -c %Y "$STAGEHAND_TESTBED_ARCHIVE/shtest/$J/results/in.dat")" -le "$(cut -d. -f1 "$WD/dep-started")" ]
	# --mail-type=STAGE_OUT: one mail about J's stage-out.
	wait_for 30 grep -q "Job_id=$J .*StageOut" "$MAIL"
	grep "Job_id=$J " "$MAIL"
	# The user's comment is the user's; stagehand's word is in AdminComment.
	[ "$(job_field "$J" Comment)" = my-own-note ]
	[[ "$(job_field "$J" AdminComment)" =~ stagehand:status= ]]
	# Teardown labelled the staged inputs for the site's purge.
	wait_for 30 eval '[ "$(getfattr --only-values -n user.stagehand.policy "$STAGEHAND_TESTBED_SCRATCH/shtest/$J/input" 2>/dev/null)" = purge ]'
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND_BUILD_DIR/cli/stagehand" tags --verify "$STAGEHAND_TESTBED_SCRATCH/shtest/$J/input"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output =~ "0 problem(s)" ]]
}

@test "bb: a failed archive keeps the job in STAGE_OUT with the reason; stagehand status says failed" {
	write_user_script shtest "$WD/fail.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#SBATCH --comment=keep-me
#DATA archive=results
mkdir -p results; echo data > results/a
chmod 000 results
EOF
	submit -d "$WD" "$WD/fail.sh"
	J=$j
	submit -d "$WD" --dependency=afterburstbuffer:"$J" --wrap "touch $WD/dep-started"
	D=$j
	# 24.05 and later report it from the polled hook, slurm_bb_test_data_out;
	# 26.05 words it "JobHeldAdmin: slurm_bb_test_data_out failed: ...".
	wait_for 120 eval '[[ "$(state_reason "$J")" =~ ^"STAGE_OUT burst_buffer/lua: "("JobHeldAdmin: ")?"slurm_bb_"(test_)?"data_out"(" failed")?": stagehand: archive of".*failed ]]'
	scontrol show job "$J" | grep -E 'JobState|Reason|Comment'
	reason=$(squeue -h -t all -j "$J" -o %r)
	[[ $reason =~ "stagehand retry $J" ]]
	[[ $reason =~ "scancel --hurry $J" ]]
	[ "$(job_field "$J" Comment)" = keep-me ]
	run sh_status "$J"
	echo "$output"
	[[ $output =~ archive\ +failed ]]
	# Slurm does not call data_out again: the dependent waits.
	sleep 3
	[[ "$(state_reason "$D")" == "PENDING Dependency" ]]
	[ ! -e "$WD/dep-started" ]
	# An admin ends it (docs/burst-buffer-slurm.md): then the dependent runs.
	scancel --hurry "$J"
	wait_job_state "$J" COMPLETED 60
}

@test "bb: a job set up while stagehandd is down waits for it and runs once it is back (not held)" {
	local pid
	write_archive_job
	pid=$(cat "$STAGEHAND_TESTBED_DIR/run/stagehandd.pid")
	kill -TERM "$pid"
	wait_for 40 test ! -d "/proc/$pid"
	submit -d "$WD" "$WD/job.sh"
	J=$j
	# Slurm has called setup, and the hook is asking the stopped daemon again
	# and again: the job is still pending, not held.
	wait_for 60 pgrep -f "bb setup $J "
	sleep 3
	[[ "$(state_reason "$J")" == PENDING* ]]
	[[ "$(state_reason "$J")" != *Held* ]]
	"$TESTBED" restart stagehandd >/dev/null
	wait_job_state "$J" COMPLETED 180
	cmp "$WD/in.dat" "$WD/results/in.dat"
	wait_for 60 test -f "$STAGEHAND_TESTBED_ARCHIVE/shtest/$J/results/in.dat"
	cmp "$WD/in.dat" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$J/results/in.dat"
}

# job_requests JOB: the daemon's requests of JOB (JSON array).
job_requests() {
	curl -sf --max-time 5 --unix-socket "$STAGEHAND_SOCKET" "http://x/v1/requests?job=$1&all=1" | jq -c '.requests'
}

@test "bb: slurmctld restarted during a stage-in: the stage-in goes on and nothing is copied twice" {
	local worker rid
	install -d -o shtest -g shtest "$WD/src"
	runuser -u shtest -- bash -c "cd '$WD/src' && for i in \$(seq 1 20); do echo \$i > f\$i; done"
	# The stage-in is held in flight on purpose: its worker (the daemon's
	# child, as shtest) stalls in its first open of the source.
	stall_worker_open "$WD/src"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src
ls "\$STAGEHAND_INPUT_DIR/src" | wc -l > $WD/seen
EOF
	submit -d "$WD" "$WD/job.sh"
	J=$j
	read -r -t 60 worker <&"${STALL[0]}"
	[[ $worker =~ ^[0-9]+$ ]]
	rid=$(job_requests "$J" | jq -r '.[0].id')
	[ "$(job_requests "$J" | jq -r '.[0].state')" = running ]
	# slurmctld goes down and comes back while the stage-in is in flight:
	# Slurm sets the job up again and asks data_in (or test_data_in) anew.
	"$TESTBED" restart slurmctld >/dev/null
	sleep 5
	[[ "$(state_reason "$J")" == PENDING* ]]
	kill "$STALLER"
	wait "$STALLER" || true
	STALLER=
	wait_job_state "$J" COMPLETED 180
	[ "$(cat "$WD/seen")" = 20 ]
	# One stage-in request, done once: the restart cost no second copy.
	job_requests "$J" | jq -e --argjson r "$rid" 'map(select(.action == "stage_in")) | length == 1 and .[0].id == $r and .[0].state == "done"' >/dev/null
	[ "$(grep -c "request $rid: worker [0-9]* started" "$STAGEHAND_TESTBED_LOGDIR/stagehandd.log")" -eq 1 ]
}

@test "bb: a bad #DATA line is refused at submit, with its line number" {
	write_user_script shtest "$WD/bad.sh" <<EOF
#!/bin/bash
#DATA stage_in=$WD/x to=../escape
true
EOF
	try_submit -d "$WD" "$WD/bad.sh"
	echo "stderr: $stderr"
	[ "$status" -ne 0 ]
	[[ "$stderr" =~ "line 2:" ]]
}
