#!/usr/bin/env bats
# Jobs that end more than once or not by their own hand, on the real test
# bed as an ordinary user: 'scontrol requeue' (only the final run is
# archived, once), a time limit (TIMEOUT, not CANCELLED; when=success
# skipped), preemption (PREEMPTED, on a bed reconfigured with two
# partitions) and a node lost mid-job (its slurmd killed: NODE_FAIL, the job
# requeued, archived once after the final run). Needs 'scripts/testbed up'
# with the Lua hook, the SPANK plugin and stagehandd, in hold or burst-buffer
# mode (make integration-bb runs it too: a lost node's job passes through
# data_out there), or an epilog-only bed (--epilog-only): the jobs make their
# directories themselves, and every check holds when the nodes' Epilog=
# reports the ends.

load helpers

setup() {
	testbed_require
	STAGEHAND=${STAGEHAND_BUILD_DIR:-$BATS_TEST_DIRNAME/../..}/cli/stagehand
	WD=$(user_workdir)
	JOBS=()
	NODE_DOWN=""
}

teardown() {
	cancel_jobs "${JOBS[@]}"
	# A node this test lost comes back for the tests that follow.
	if [[ -n ${NODE_DOWN:-} ]]; then
		"$TESTBED" up >/dev/null 2>&1
		wait_for 180 node_back "$NODE_DOWN"
	fi
}

status_as() {
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" \
		${STAGEHAND_SERVER:+STAGEHAND_SERVER="$STAGEHAND_SERVER"} "$STAGEHAND" status "$@"
}

# The job's after-job requests in the user's status: "ACTION STATE SOURCE -> DEST" lines.
after_job_requests() {
	status_as --all | awk -v j="$1" '$2 == j && $3 != "stage_in"'
}

comment_has() {
	[[ "$(job_status "$1")" == *"$2"* ]]
}

archived_file() {
	[[ -f $1 ]] && [[ $(getfattr --only-values -n user.stagehand.policy "$2" 2>/dev/null) == archived ]]
}

# A job that writes a line per run into out/runs.txt and sleeps through its
# first run (SLURM_RESTART_COUNT is unset there).
requeue_script() {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/slurm-%j.out
#SBATCH --open-mode=append
#DATA archive=out
mkdir -p out
echo "run \${SLURM_RESTART_COUNT:-0} on \$(hostname)" >> out/runs.txt
if [ "\${SLURM_RESTART_COUNT:-0}" = 0 ]; then sleep 600; fi
EOF
}

@test "scontrol requeue: the first run is not archived; the final run is, once; status says so" {
	requeue_script
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" RUNNING 60
	wait_for 30 test -s "$WD/out/runs.txt"
	scontrol requeue "$j"
	wait_for 30 comment_has "$j" "requeued"
	wait_for 30 eval '[ "$(job_state "$j")" = PENDING ]' 
	# Nothing was archived for the interrupted run.
	sleep 3
	[ -z "$(after_job_requests "$j")" ]
	[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j" ]
	# A requeued job waits ~2 minutes before it may start again: start it now.
	scontrol update jobid="$j" StartTime=now
	wait_job_state "$j" COMPLETED 90
	wait_for 60 archived_file "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/out/runs.txt" "$WD/out"
	# The archive holds both runs' lines (taken once, after the final run).
	[ "$(grep -c '^run ' "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/out/runs.txt")" -eq 2 ]
	[ "$(after_job_requests "$j" | wc -l)" -eq 1 ]
	out=$(status_as "$j")
	[[ $out == *"job $j: requeued 1 time (last: run 1 "*"); only the final run is archived"* ]]
	[[ $out == *"job $j: ended COMPLETED (exit 0)"* ]]
}

@test "TIMEOUT is reported as TIMEOUT: when=success outputs skipped, when=always archived" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --time=1
#SBATCH --output=$WD/slurm-%j.out
#DATA archive=ok when=success
#DATA archive=all
mkdir -p ok all; echo a > ok/a; echo b > all/b
sleep 600
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" RUNNING 60
	wait_for 30 test -s "$WD/all/b"
	# Its limit lowered to 0 once its outputs are written: slurmctld's next
	# time-limit check (every 30 s) ends it TIMEOUT, as the end of its
	# minute would, without waiting the minute out.
	scontrol update jobid="$j" TimeLimit=0
	wait_job_state "$j" TIMEOUT 150
	wait_for 60 archived_file "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/all/b" "$WD/all"
	out=$(status_as "$j")
	[[ $out == *"job $j: ended TIMEOUT"* ]]
	[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/ok" ]
	# One archive (all/); ok/ gets only its 'skipped' label, by a label request.
	[ "$(after_job_requests "$j" | awk '$3 == "archive"' | wc -l)" -eq 1 ]
	[ "$(after_job_requests "$j" | awk '$3 != "archive" && $3 != "label"' | wc -l)" -eq 0 ]
	wait_for 30 eval '[[ $(getfattr --only-values -n user.stagehand.policy "$WD/ok" 2>/dev/null) == skipped ]]'
	grep -q "job $j: line 4: archive of ok skipped: when=success and the job ended TIMEOUT" \
		"$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"
}

@test "a node lost mid-job (slurmd, slurmstepd, job killed): NODE_FAIL, requeued, archived once after the final run" {
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]] ||
		skip "one-node test bed: losing its only node would take down the service too"
	requeue_script
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" RUNNING 60
	wait_for 30 test -s "$WD/out/runs.txt"
	node=$(job_node "$j")
	# On an epilog-only bed no start event names the node: only a table read
	# that shows the job running does. Wait for one (the same read gives the
	# yield module the running jobs' directories, counted by this gauge); the
	# job runs until its node is lost, so the wait cannot be outrun.
	wait_for 60 eval '(( $(metric stagehand_yield_busy_filesystems) >= 1 ))'
	# Held (priority 0) it is not started again until its node is back.
	scontrol hold "$j"
	# The whole node goes at once (slurmd, the job's slurmstepd, the job
	# itself), as a node that loses power: nothing of run 1 is left for the
	# node to clean up when it comes back.
	NODE_DOWN=$node
	killed=$(lose_node "$node")
	((killed >= 3))
	# slurmctld would give up on the node after SlurmdTimeout (60 s on the
	# bed); declared down now, it takes the same path: the job is killed as
	# NODE_FAIL and requeued (batch jobs are requeued after a node failure).
	# stagehandd names the node from the job's start event even when no
	# table it read showed the job RUNNING.
	declare_node_lost "$node"
	wait_for 60 eval '[[ "$(job_field "$j" Restarts)" -ge 1 ]]'
	[[ "$(job_state "$j")" =~ ^(PENDING|REQUEUED)$ ]]
	wait_for 30 eval '[[ "$(job_status "$j")" == *"NODE_FAIL"* ]]'
	"$TESTBED" up >/dev/null 2>&1
	wait_for 180 node_back "$node"
	NODE_DOWN=""
	# The final run goes to another node: Slurm's cleanup of run 1 on the
	# node that came back (its TERMINATE_JOB for the same job id, sent when
	# that slurmd registers) would otherwise kill a run started there
	# (seen on 26.05: "WTERMSIG 15" a second after the relaunch).
	scontrol update jobid="$j" ExcNodeList="$node"
	scontrol release "$j"
	scontrol update jobid="$j" StartTime=now
	wait_job_state "$j" COMPLETED 120
	wait_for 60 archived_file "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/out/runs.txt" "$WD/out"
	sleep 3
	# Exactly one archive, holding the final run.
	[ "$(after_job_requests "$j" | wc -l)" -eq 1 ]
	grep -q '^run 1 ' "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/out/runs.txt"
	out=$(status_as "$j")
	[[ $out == *"job $j: requeued 1 time"*"only the final run is archived"* ]]
	[[ $out == *"NODE_FAIL"* ]]
	[[ $out == *"job $j: ended COMPLETED (exit 0)"* ]]
	[ "$(job_node "$j")" != "$node" ]
}

@test "scontrol requeue of an ended job: its inputs stay for the rerun, only the final run is archived, after= waits for it" {
	[[ ${STAGEHAND_TESTBED_SUBMIT_MODE:-hold} == hold ]] ||
		skip "hold mode only: bb mode refuses after= (afterburstbuffer does it there)"
	in=$STAGEHAND_TESTBED_SCRATCH/shtest
	runuser -u shtest -- dd if=/dev/urandom of="$WD/in.dat" bs=64k count=2 status=none
	# Run 1 ends at once; the rerun (SLURM_RESTART_COUNT=1) needs its staged
	# input and is held at a gate the test opens.
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/slurm-%j.out
#SBATCH --open-mode=append
#DATA stage_in=$WD/in.dat
#DATA archive=out
mkdir -p out
cmp "$in/\$SLURM_JOB_ID/input/in.dat" "$WD/in.dat" || exit 7
echo "run \${SLURM_RESTART_COUNT:-0}" >> out/runs.txt
if [ "\${SLURM_RESTART_COUNT:-0}" != 0 ]; then
	while [ ! -e "$WD/gate" ]; do sleep 0.2; done
fi
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	in=$in/$j/input
	wait_for 60 archived_file "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/out/runs.txt" "$WD/out"
	# Run 1's end was processed: its inputs are labelled purge, their removal
	# scheduled (InputRetention, 24 h on the bed).
	purge_state() {
		curl -sf --max-time 5 --unix-socket "$STAGEHAND_SOCKET" "http://x/v1/requests?job=$j&all=1" |
			jq -r '[.requests[] | select(.action == "purge") | .state] | sort | join(",")'
	}
	input_label_is() {
		[ "$(getfattr --only-values -n user.stagehand.policy "$in" 2>/dev/null)" = "$1" ]
	}
	wait_for 30 eval '[ "$(purge_state)" = queued ]'
	wait_for 30 input_label_is purge

	# slurmd revokes run 1's credential when it ends, to the second, and
	# refuses a launch of the same job whose credential is no newer ("Killing
	# non-startable batch job: Job credential revoked", exit 1 at once):
	# Slurm's own requeue delay avoids that, StartTime=now below does not, so
	# the rerun must not start within the second run 1 ended in.
	ended=$(date -d "$(scontrol show job "$j" | sed -n 's/.* EndTime=\([^ ]*\).*/\1/p')" +%s)
	wait_for 10 eval '[ "$(date +%s)" -ge $((ended + 2)) ]'
	scontrol requeue "$j"
	scontrol update jobid="$j" StartTime=now
	wait_job_state "$j" RUNNING 90
	# The rerun is seen: run 1's scheduled removal cancelled, with the reason;
	# the inputs are exempt again and still there.
	wait_for 30 eval '[ "$(purge_state)" = cancelled ]'
	curl -sf --max-time 5 --unix-socket "$STAGEHAND_SOCKET" "http://x/v1/requests?job=$j&all=1" |
		jq -e '[.requests[] | select(.action == "purge")][0].error | test("superseded: job [0-9]+ ran again after its end")'
	wait_for 30 input_label_is exempt
	cmp "$in/in.dat" "$WD/in.dat"
	grep -q "job $j: run 1 ended COMPLETED and was processed; slurmctld requeued the job (run 2)" \
		"$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"

	# A job waiting for J's archive waits for the rerun's, not run 1's (verified already).
	j1=$j
	write_user_script shtest "$WD/consume.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/consume-%j.txt
#DATA after=$j1
grep -c '^run ' "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j1/out/runs.txt" > "$WD/seen.txt"
EOF
	submit -d "$WD" "$WD/consume.sh"
	j2=$j
	wait_for 60 eval '[[ "$(job_status "$j2")" =~ "waiting for job $j1" ]]'
	[ "$(job_state "$j2")" = PENDING ]
	[ "$(job_state "$j1")" = RUNNING ]

	touch "$WD/gate"
	wait_job_state "$j1" COMPLETED 90
	# The final run is archived: both runs' lines; the dependent saw that archive.
	wait_for 60 eval '[ "$(grep -c "^run " "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j1/out/runs.txt")" -eq 2 ]'
	wait_job_state "$j2" COMPLETED 90
	[ "$(cat "$WD/seen.txt")" = 2 ]
	# The final end schedules the inputs' removal again and labels them purge.
	j=$j1
	wait_for 30 eval '[ "$(purge_state)" = "cancelled,queued" ]'
	wait_for 30 input_label_is purge
}
