#!/usr/bin/env bats
# An archive skipped because of when=success (the job failed) is visible:
# in 'stagehand status JOB' with its reason, in the job's status text
# (AdminComment; the user's own --comment is left as it was), and in the label, which leaves 'pending' for the
# documented 'skipped' that 'tags --verify' and the policy exports know.

load helpers
load ../faults/faults

setup() { faults_setup; }
teardown() { faults_teardown; }

@test "when=success and the job exits 1: status, comment and label say 'skipped' and why" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#SBATCH --comment=my-own-note
#DATA archive=results when=success
echo partial > results/a.txt
exit 1
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" FAILED 60
	wait_for 60 label_is "$WD/results" skipped
	[ -z "$(find "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j" -type f 2>/dev/null | head -1)" ]
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$j"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output =~ "skipped: line 4 archive=results: when=success and the job ended FAILED (exit 1)" ]]
	c=$(squeue -h -t all -j "$j" -o %k)
	echo "comment: $c"
	[[ $c == "my-own-note" ]]
	c=$(job_status "$j")
	echo "status: $c"
	[[ $c == "archive of results (line 4) skipped: when=success and the job ended FAILED (exit 1)" ]]
	# The label is one stagehandd can explain, and the exports hold it back.
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" tags --verify "$WD/results"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output =~ skipped\ +$j\ +$(id -u shtest)\ +ok ]]
	[[ $output =~ "0 problem(s)" ]]
	# A pending label would now be reported stale; a hand-made 'skipped' elsewhere is not explained.
	install -d -o shtest -g shtest "$WD/forged"
	runuser -u shtest -- setfattr -n user.stagehand.policy -v skipped "$WD/forged"
	runuser -u shtest -- setfattr -n user.stagehand.job -v "$j" "$WD/forged"
	runuser -u shtest -- setfattr -n user.stagehand.owner -v "$(id -u shtest)" "$WD/forged"
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" tags --verify "$WD/forged"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ $output =~ "1 problem(s)" ]]
	run "$STAGEHAND" policy export --format=gpfs --namespace=user
	[[ $output =~ "IN ('exempt','pending','skipped','purge')" ]]
	run "$STAGEHAND" policy export --format=dmf --namespace=user
	[[ $output =~ "labelled hold exempt,pending,skipped,purge" ]]
	run "$STAGEHAND" policy export --format=robinhood --namespace=user
	[[ $output =~ "xattr.user.stagehand.policy == \"skipped\"" ]]
}

@test "when=success and the job succeeds: archived as before, no note" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results when=success
echo fine > results/a.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	wait_for 60 label_is "$WD/results" archived
	[ "$(cat "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results/a.txt")" = fine ]
	[ "$(api_get "/v1/jobs/$j" | jq '.skipped | length')" = 0 ]
}
