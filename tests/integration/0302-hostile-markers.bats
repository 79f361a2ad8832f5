#!/usr/bin/env bats
# A user's plan cannot speak for stagehand, and an administrator's hold
# outlives stagehand's watch (issue 47, finding 2). The job's record in
# AdminComment is "[SITE] [stagehand:status=…] [stagehand:hold=…] stagehand:v1:PLAN";
# only what comes before the plan is stagehand's, so a #DATA path that spells
# a marker ("stagehand:hold=pending") must never make stagehandd release or
# raise the priority of a job (a root priority update every
# SlurmWatchInterval), and stagehandd releases only a job held the way
# job_submit.lua holds it (JobHeldUser), never an admin's JobHeldAdmin.
# Hold mode only: a bb bed has no hold of stagehand's.
#
# Budget: about 30 s of bed time (a few SlurmWatchInterval=2 periods).

load helpers

setup() {
	daemon_setup
	[[ ${STAGEHAND_TESTBED_SUBMIT_MODE:-hold} == hold ]] ||
		skip "stagehand holds jobs only in hold mode"
	LOG=$STAGEHAND_TESTBED_LOGDIR/stagehandd.log
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

# Watch periods to sit through: SlurmWatchInterval is 2 s on the bed.
WATCH_WAIT=8

# JOB: "STATE REASON PRIORITY" as squeue shows them.
state_reason_prio() {
	squeue -h -j "$1" -o '%T %r %Q'
}

# A user's script whose #DATA paths spell every marker and the plan prefix.
hostile_script() {
	write_user_script shtest "$1" <<'EOS'
#!/bin/bash
#DATA exempt=tmp/stagehand:hold=pending
#DATA exempt="x/stagehand:status=y stagehand:hold=pending"
#DATA exempt=z/stagehand:v1:stagehand:hold=pending
#DATA exempt=w/stagehand:hold=released
true
EOS
}

@test "a #DATA path spelling the hold marker never gets a user's held job released" {
	hostile_script "$WD/job.sh"
	# The user holds it: without a stage-in, stagehand records no hold of its own.
	submit -d "$WD" "$WD/job.sh" --hold
	ac=$(job_field "$JOB" AdminComment)
	echo "AdminComment: $ac"
	[[ $ac == "stagehand:v1:"* ]]
	[[ $ac == *"stagehand:hold=pending"* ]]
	before=$(state_reason_prio "$JOB")
	[[ $before == "PENDING JobHeldUser 0" ]]
	sleep "$WATCH_WAIT"
	after=$(state_reason_prio "$JOB")
	echo "before: $before; after $WATCH_WAIT s: $after"
	[ "$after" = "$before" ]
	run grep -E "job $JOB: (inputs staged|stage-in request|released)" "$LOG"
	[ "$status" -eq 1 ]
	# The user's own release still works (the Lua sees no stage-in pending).
	run run_as_user shtest scontrol release "$JOB"
	[ "$status" -eq 0 ]
	wait_job_state "$JOB" COMPLETED 60
}

@test "a #DATA path spelling the hold marker never raises a waiting job's priority" {
	hostile_script "$WD/job.sh"
	# Pending but not held: eligible only in an hour.
	submit -d "$WD" "$WD/job.sh" --begin=now+1hour
	before=$(state_reason_prio "$JOB")
	[[ $before == "PENDING BeginTime "* ]]
	sleep "$WATCH_WAIT"
	after=$(state_reason_prio "$JOB")
	echo "before: $before; after $WATCH_WAIT s: $after"
	[ "$after" = "$before" ]
	run grep -E "job $JOB: (inputs staged|stage-in request|released)" "$LOG"
	[ "$status" -eq 1 ]
}

@test "an admin's scontrol hold on a job waiting for its stage-in survives the watch" {
	install -d -o shtest "$WD/in"
	runuser -u shtest -- sh -c "echo data > '$WD/in/input.dat'"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#DATA stage_in=$WD/in/input.dat
cat $WD/in/input.dat > $WD/result
EOF
	submit -d "$WD" "$WD/job.sh"
	# At once, before stagehandd's look at the job table: staging then
	# takes at least one more tick, so stagehand cannot have released it.
	scontrol hold "$JOB"
	[ "$(state_reason_prio "$JOB")" = "PENDING JobHeldAdmin 0" ]
	wait_for 30 grep -q "job $JOB: inputs staged but not released: it is held by an administrator" "$LOG"
	sleep "$WATCH_WAIT"
	[ "$(state_reason_prio "$JOB")" = "PENDING JobHeldAdmin 0" ]
	# Said once, not every tick.
	[ "$(grep -c "job $JOB: inputs staged but not released" "$LOG")" -eq 1 ]
	[[ $(job_status "$JOB") == *"inputs staged, not released: it is held by an administrator (JobHeldAdmin)"* ]]
	# The record still says stagehand's hold is pending; the admin's release starts it.
	[[ $(job_field "$JOB" AdminComment) == *"stagehand:hold=pending stagehand:v1:"* ]]
	scontrol release "$JOB"
	wait_job_state "$JOB" COMPLETED 60
	[ "$(cat "$WD/result")" = data ]
}

@test "the normal hold and release still work" {
	install -d -o shtest "$WD/in"
	runuser -u shtest -- sh -c "echo fine > '$WD/in/input.dat'"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#DATA stage_in=$WD/in/input.dat
cat $WD/in/input.dat > $WD/result
EOF
	submit -d "$WD" "$WD/job.sh"
	[ "$(state_reason_prio "$JOB")" = "PENDING JobHeldUser 0" ]
	wait_job_state "$JOB" COMPLETED 60
	grep -q "job $JOB: inputs staged .*: released" "$LOG"
	run grep "job $JOB: inputs staged but not released" "$LOG"
	[ "$status" -eq 1 ]
	[ "$(cat "$WD/result")" = fine ]
}
