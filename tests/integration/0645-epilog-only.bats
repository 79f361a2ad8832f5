#!/usr/bin/env bats
# Epilog-only mode on the real test bed ('scripts/testbed up --nodes 3
# --epilog-only', or 'make integration-epilog'), as an ordinary user: no
# SPANK plugin on the nodes; slurmd runs Epilog= (scripts/stagehand-epilog,
# through the bed's node wrapper that names the daemon, the spool and the
# CLI) as root on each node of a job after it ends, and that is the only
# thing that tells the daemon. What such a site gets and what it does not
# (docs/admin-guide.md, "Epilog-only sites"):
#   * the end reaches the daemon from the job's node and the archive is made
#     as the owner, with the plan slurmctld recorded (the epilog sends none);
#     nothing labels or makes directories at job start;
#   * with the daemon down the event waits in the node's spool and the next
#     epilog on that node delivers it;
#   * the job cannot steer its epilog: its environment never reaches it, and
#     a job name that reads like scontrol's fields is not taken for them.
# Skipped on a bed with the plugin (expected-skips, "[hold] ").

bats_require_minimum_version 1.5.0

load helpers

setup() {
	testbed_require
	epilog_mode || skip "needs an epilog-only bed ('scripts/testbed up --epilog-only'; 'make integration-epilog')"
	STAGEHAND=${STAGEHAND_BUILD_DIR:-$BATS_TEST_DIRNAME/../..}/cli/stagehand
	LOG=$STAGEHAND_TESTBED_LOGDIR/stagehandd.log
	WD=$(user_workdir)
	JOBS=()
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

label_is() {
	[[ "$(getfattr --only-values -n user.stagehand.policy "$1" 2>/dev/null)" == "$2" ]]
}

unlabelled() {
	run getfattr -n user.stagehand.policy "$1"
	[ "$status" -ne 0 ]
}

# The address slurmctld has for node $1 (where its epilog's requests come from).
node_addr() {
	scontrol show node "$1" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p'
}

# JobState of job $1 from its own line of 'scontrol show job' (job_state
# takes the first "JobState=", which a job's name can hold).
line_state() {
	scontrol show job "$1" | sed -n 's/^   JobState=\([A-Z_]*\) .*/\1/p'
}

# The job's requests of action $2, as its owner's 'stagehand status --json' lists them.
requests_of() {
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$1" --json |
		jq -c --arg a "$2" '[.requests[] | select(.action == $a)]'
}

@test "epilog-only: the epilog, run by slurmd as root on the job's node, reports the end; the owner's archive follows" {
	run grep -E '^(optional|required) .*stagehand\.so' "$STAGEHAND_TESTBED_DIR/etc/plugstack.conf"
	[ "$status" -ne 0 ]
	grep -q '^Epilog=' "$SLURM_CONF"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
#DATA exempt=results/tmp
mkdir -p results/tmp
getfattr -n user.stagehand.policy results >/dev/null 2>&1; echo \$? > label-rc
echo "\${STAGEHAND_INPUT_DIR-unset}" > input-dir
echo data > results/a.txt; echo t > results/tmp/t.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	addr=$(node_addr "$(job_node "$j")")
	[[ -n $addr ]]
	# The end came as root, over TCP, from the node that ran the job: with no
	# plugin that is its epilog. The plan came from slurmctld's record.
	wait_for 30 grep -q "job $j: end event (COMPLETED) from uid 0 (TCP from $addr)" "$LOG"
	wait_for 30 grep -q "job $j: plan taken from slurmctld's record" "$LOG"
	wait_for 60 label_is "$WD/results" archived
	loc=$(getfattr --only-values -n user.stagehand.location "$WD/results")
	[ "$loc" = "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results" ]
	cmp "$WD/results/a.txt" "$loc/a.txt"
	[ "$(stat -c %U:%G "$loc/a.txt")" = "shtest:$(id -gn shtest)" ]
	# The exempt= directory inside it was left out of the copy.
	[ ! -e "$loc/tmp" ]
	# Never the Slurm watch's stand-in for a missing event.
	run ! grep -q "job $j: ended .* with no event from its node" "$LOG"
	# One archive request, run as the owner's uid and group.
	reqs=$(requests_of "$j" archive)
	[ "$(jq -r --argjson u "$(id -u shtest)" --argjson g "$(id -g shtest)" \
		'length == 1 and all(.uid == $u and .gid == $g)' <<<"$reqs")" = true ]
	# What only the plugin does did not happen: no label while the job ran,
	# no STAGEHAND_INPUT_DIR in it, no exempt label.
	[ "$(cat "$WD/label-rc")" -ne 0 ]
	[ "$(cat "$WD/input-dir")" = unset ]
	unlabelled "$WD/results/tmp"
}

@test "epilog-only: daemon down at job end: the epilog spools the event on the node; the next epilog there delivers it" {
	node=${STAGEHAND_TESTBED_NODES%% *}
	spool=$(node_spool "$node")
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
mkdir -p results; echo x > results/x.txt
EOF
	write_user_script shtest "$WD/plain.sh" <<EOF
#!/bin/bash
#SBATCH --output=/dev/null
true
EOF
	"$TESTBED" restart stagehandd >/dev/null
	pid=$(cat "$STAGEHAND_TESTBED_DIR/run/stagehandd.pid")
	kill -TERM "$pid"
	wait_for 30 test ! -d "/proc/$pid"
	submit -d "$WD" "$WD/job.sh" -w "$node"
	first=$j
	# The job did not wait for the daemon; its epilog left the event on the node.
	wait_job_state "$first" COMPLETED 60
	wait_for 30 test -f "$spool/job-$first.json"
	[ "$(stat -c %U:%a "$spool/job-$first.json")" = root:600 ]
	[ "$(jq -r '.job_id, .event.source, .event.state, .event.user' "$spool/job-$first.json" | tr '\n' ' ')" = \
		"$first epilog COMPLETED shtest " ]
	"$TESTBED" up >/dev/null
	# Still there: only an epilog (or an admin) delivers a node's spool.
	[ -f "$spool/job-$first.json" ]
	# A job without a plan on that node: its epilog drains the spool.
	submit -d "$WD" "$WD/plain.sh" -w "$node"
	wait_job_state "$j" COMPLETED 60
	wait_for 30 test ! -e "$spool/job-$first.json"
	[ ! -e "$spool/bad-job-$first.json" ]
	wait_for 60 label_is "$WD/results" archived
	cmp "$WD/results/x.txt" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$first/results/x.txt"
	[ "$(requests_of "$first" archive | jq length)" -eq 1 ]
}

@test "epilog-only: a hostile job cannot steer its epilog (its environment, a name posing as scontrol's fields)" {
	write_user_script shtest "$WD/evil-cli" <<EOF
#!/bin/sh
touch "$WD/evil-cli-ran"
EOF
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=ok when=success
#DATA archive=all
mkdir -p ok all; echo a > ok/a; echo b > all/b
export STAGEHAND_SERVER=$STAGEHAND_TESTBED_SVC_ADDR:1 STAGEHAND_SPOOL=$WD/evil-spool
export STAGEHAND_CLI=$WD/evil-cli SLURM_JOB_ID=1 SLURM_JOB_UID=0 SLURM_JOB_GID=0
exit 3
EOF
	# What the user sets at submit goes into the job's environment; the
	# job's name is the first field of 'scontrol show job' (its first line).
	submit -d "$WD" "$WD/job.sh" -J "x UserId=root(0) GroupId=root(0) JobState=COMPLETED ExitCode=0:0" \
		--export="ALL,STAGEHAND_SERVER=$STAGEHAND_TESTBED_SVC_ADDR:1,STAGEHAND_SPOOL=$WD/evil-spool,STAGEHAND_CLI=$WD/evil-cli,SLURM_JOB_UID=0,SLURM_JOB_GID=0,SLURM_JOB_WORK_DIR=/root"
	[[ "$(scontrol show job "$j" | head -n 1)" == *" JobName=x UserId=root(0) GroupId=root(0) "* ]]
	wait_for 90 eval '[ "$(line_state "$j")" = FAILED ]'
	addr=$(node_addr "$(job_node "$j")")
	wait_for 30 grep -q "job $j: end event (FAILED) from uid 0 (TCP from $addr)" "$LOG"
	wait_for 60 label_is "$WD/all" archived
	# Archived as the owner with the owner's group, from the job's own directory.
	[ "$(stat -c %U:%G "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/all/b")" = "shtest:$(id -gn shtest)" ]
	reqs=$(requests_of "$j" archive)
	[ "$(jq -r --argjson u "$(id -u shtest)" --argjson g "$(id -g shtest)" --arg src "$WD/all" \
		'length == 1 and all(.uid == $u and .gid == $g and .source == $src)' <<<"$reqs")" = true ]
	# It failed (exit 3), whatever its name says: when=success was skipped.
	wait_for 30 label_is "$WD/ok" skipped
	[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/ok" ]
	# Nothing the job set was used.
	[ ! -e "$WD/evil-cli-ran" ]
	[ ! -e "$WD/evil-spool" ]
}
