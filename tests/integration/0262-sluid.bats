#!/usr/bin/env bats
# Slurm's SLUID (25.11 and later: a unique id of each run of a job,
# SLURM_JOB_SLUID, scontrol's SLUID=) on the bed in hold mode: the end
# event carries it, stagehandd records it and 'stagehand status JOB' shows
# it; an end event with a SLUID the job had before (a late report of an
# earlier run) is refused with 409 and changes nothing, a new one is the
# job's next run. On older releases jobs have no SLUID: the first test sees
# none, the second sends its own. In scripts/test-slurm-release's list, so
# it runs on 26.05.

bats_require_minimum_version 1.5.0

load helpers

setup() {
	daemon_setup spank
	[[ ${STAGEHAND_TESTBED_SUBMIT_MODE:-hold} == hold ]] ||
		skip "hold-mode test: the bed runs in ${STAGEHAND_TESTBED_SUBMIT_MODE} mode"
	skip_epilog_only "the SPANK plugin sends the SLUID (Epilog= sends it through 'stagehand job-end')"
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

# True on a Slurm with SLUIDs (25.11 and later).
has_sluid() {
	local v major minor
	v=$(sinfo --version | awk '{ print $2 }')
	major=${v%%.*} minor=${v#*.}
	minor=${minor%%.*}
	((10#$major > 25 || (10#$major == 25 && 10#$minor >= 11)))
}

# A finished #DATA job whose archive is verified; its id in j.
archived_job() {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=res
mkdir -p res
echo "\${SLURM_JOB_SLUID:-none}" > res/sluid.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	wait_for 60 test -f "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/res/sluid.txt"
}

job_sluid_line() {
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$1" |
		sed -n "s/^job $1: SLUID \([^ ]*\) .*/\1/p"
}

@test "sluid: the run's SLUID is recorded from its end event and shown by 'stagehand status' (none before 25.11)" {
	archived_job
	slurm_sluid=$(scontrol -d show job "$j" | sed -n 's/^ *SLUID=\([^ ]*\).*/\1/p')
	if has_sluid; then
		[[ $slurm_sluid =~ ^s[0-9A-Z]+$ ]]
		[ "$(cat "$WD/res/sluid.txt")" = "$slurm_sluid" ]
		[ "$(job_sluid_line "$j")" = "$slurm_sluid" ]
	else
		[ -z "$slurm_sluid" ]
		[ -z "$(job_sluid_line "$j")" ]
	fi
}

# job_end_lines JOB: what 'stagehand status JOB' says of the job's end and
# run (not its requests, whose cleanup may move on meanwhile).
job_end_lines() {
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$1" |
		grep -E "^job $1: (ended|SLUID) "
}

# post_end JOB SLUID: an end event of JOB's run SLUID, as the plugin sends
# it (root, on the daemon's socket); the HTTP code in $output, the answer
# in $WD/resp.json.
post_end() {
	run curl -sS --max-time 10 --unix-socket "$STAGEHAND_SOCKET" -o "$WD/resp.json" \
		-w '%{http_code}' -H 'Content-Type: application/json' \
		--data "{\"state\":\"COMPLETED\",\"exit_code\":0,\"uid\":1001,\"sluid\":\"$2\",\"plan\":null}" \
		"http://localhost/v1/jobs/$1/end"
}

@test "sluid: a new SLUID for the job id is its current run; an earlier run's is refused (409) and changes nothing" {
	archived_job
	# A run after the real one (a requeue), then another: each becomes current.
	post_end "$j" s0000000000RUNA
	[[ $output == 20? ]]
	[ "$(job_sluid_line "$j")" = s0000000000RUNA ]
	post_end "$j" s0000000000RUNB
	[[ $output == 20? ]]
	[ "$(job_sluid_line "$j")" = s0000000000RUNB ]
	grep -q "job $j: end event of SLUID s0000000000RUNB, a run after s0000000000RUNA" \
		"$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"
	before=$(job_end_lines "$j")
	[[ $before == *"job $j: SLUID s0000000000RUNB "*"job $j: ended COMPLETED (exit 0)"* ]]
	# A late report of run A: refused, nothing changes.
	post_end "$j" s0000000000RUNA
	[ "$output" = 409 ]
	grep -q "this end event is of SLUID s0000000000RUNA, an earlier run whose end stagehandd already took; the job's current run is SLUID s0000000000RUNB" "$WD/resp.json"
	grep -q "job $j: end event of SLUID s0000000000RUNA ignored" "$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"
	[ "$(job_end_lines "$j")" = "$before" ]
	# The current run's again is a repeat: accepted.
	post_end "$j" s0000000000RUNB
	[[ $output == 20? ]]
	# Not a SLUID: refused as a bad event (400), saying what is wrong.
	post_end "$j" 's-bad/'
	[ "$output" = 400 ]
	grep -q "'sluid' must be Slurm's SLUID" "$WD/resp.json"
}
