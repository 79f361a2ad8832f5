#!/usr/bin/env bats
# The whole life of a job on the real test bed, as an ordinary user:
# job_submit.lua holds it, stagehandd stages its inputs and releases it, the
# SPANK plugin labels its directories, and after it ends the daemon archives
# its outputs. Needs 'scripts/testbed up' with the Lua hook, the SPANK
# plugin and stagehandd (all built in this tree).
#
# The same file runs on a burst-buffer bed ('make integration-bb'): Slurm's
# burst_buffer/lua hooks stage the inputs and there is no hold. What is the
# same in both modes is asserted in both; what belongs to the hold is
# asserted in hold mode only (bb_mode below), and where bb mode differs its
# own behaviour is asserted instead:
#   * happy path: "hold=released" in AdminComment is the hold's marker; in
#     bb mode the job is never held and the record has no hold marker;
#   * missing source, fixed and retried: Slurm 22.05 does not call data_in
#     again after it failed (docs/burst-buffer-slurm.md), so in bb mode the
#     job stays held by Slurm with stagehand's message in SystemComment, and
#     the user's way out is a new job: the retry part is hold mode only;
#   * daemon down at job end: skipped in bb mode; the daemon is also down at
#     submit there, and Slurm's setup hook waits for it (0650's "a job set up
#     while stagehandd is down" checks that instead);
#   * slurmctld restarted while a job waits: skipped in bb mode; it checks
#     the hold marker in slurmctld's saved state and a retry that releases
#     the hold, neither of which exists in bb mode.
#
# And on an epilog-only bed ('make integration-epilog': no SPANK plugin, the
# nodes' Epilog= reports each job's end), where nothing makes or labels the
# directories at job start and no STAGEHAND_* variable reaches the job: the
# job scripts carry what such a site's users write instead
# (without_plugin_lines), the labels of a running job are asserted absent,
# and the happy path, which checks the plugin's work, is skipped
# (0645-epilog-only.bats has the epilog-only job's life).

load helpers

setup() {
	daemon_setup spank
	STALLER=
}

teardown() {
	[[ -z ${STALLER:-} ]] || kill "$STALLER" 2>/dev/null || true
	cancel_jobs "${JOBS[@]}"
}

# True on a burst-buffer bed (scripts/testbed up --mode=bb).
bb_mode() {
	[[ ${STAGEHAND_TESTBED_SUBMIT_MODE:-hold} == bb ]]
}

# comment JOB: stagehandd's status text for the job (in its AdminComment).
comment() {
	job_status "$1"
}

comment_matches() {
	[[ "$(comment "$1")" =~ $2 ]]
}

# label DIR: the stagehand policy label.
label() {
	getfattr --only-values -n user.stagehand.policy "$1" 2>/dev/null
}

label_is() {
	[[ "$(label "$1")" == "$2" ]]
}

# A file of N MiB owned by user U at path P.
user_file() {
	local u=$1 p=$2 mib=$3
	install -d -o "$u" -g "$(id -gn "$u")" "$(dirname "$p")"
	runuser -u "$u" -- dd if=/dev/urandom of="$p" bs=1M count="$mib" status=none
}

@test "happy path: held, staged as the owner, released, labelled, archived after the end" {
	skip_epilog_only "the SPANK plugin's labels and STAGEHAND_INPUT_DIR at job start (0645 has the epilog-only happy path)"
	user_file shtest "$WD/proj/ref.db" 8
	want=$(sha256sum <"$WD/proj/ref.db" | cut -d' ' -f1)
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --job-name=happy
#SBATCH --comment="the user's own note"
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/proj/ref.db
#DATA exempt=tmp
#DATA archive=results
sha256sum "\$STAGEHAND_INPUT_DIR/ref.db" | cut -d' ' -f1 > input.sha
getfattr --only-values -n user.stagehand.policy results > label-while-running
mkdir -p results/sub; echo data > results/sub/a.txt; echo scratch > tmp/t.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	if bb_mode; then
		# Not held: Slurm's hooks staged it; the record has no hold marker.
		[[ ! "$(job_field "$j" AdminComment)" =~ "stagehand:hold=" ]]
		[[ "$(job_field "$j" AdminComment)" =~ "stagehand:v1:" ]]
	else
		# It was held at submit and released by the daemon (as root) once staged.
		[[ "$(job_field "$j" AdminComment)" =~ "stagehand:hold=released" ]]
	fi
	[ "$(cat "$WD/input.sha")" = "$want" ]
	# The input landed in the job's scratch input dir, owned by the user.
	[ "$(stat -c %U "$STAGEHAND_TESTBED_SCRATCH/shtest/$j/input/ref.db")" = shtest ]
	# While the job ran its archive dir was 'pending'; the exempt dir is 'exempt'.
	[ "$(cat "$WD/label-while-running")" = pending ]
	label_is "$WD/tmp" exempt
	[ "$(getfattr --only-values -n user.stagehand.job "$WD/results")" = "$j" ]
	# After the end: archived, verified copy at the recorded location.
	wait_for 60 label_is "$WD/results" archived
	loc=$(getfattr --only-values -n user.stagehand.location "$WD/results")
	[ "$loc" = "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results" ]
	cmp "$WD/results/sub/a.txt" "$loc/sub/a.txt"
	[ "$(stat -c %U "$loc/sub/a.txt")" = shtest ]
	# The exempt dir was never copied.
	[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/tmp" ]
	# The job's status tells what happened; the user's own comment is untouched.
	[[ "$(job_status "$j")" =~ input(s)?\ staged ]]
	[ "$(job_field "$j" Comment)" = "the user's own note" ]
}

@test "missing stage-in source: job stays held with the reason; fixed and retried, it runs" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/later/input.dat
$(without_plugin_lines)
cmp "\$STAGEHAND_INPUT_DIR/input.dat" "$WD/later/input.dat" && echo same > result
EOF
	submit -d "$WD" "$WD/job.sh" --comment=mine
	wait_for 60 comment_matches "$j" "stage-in failed"
	[ "$(job_field "$j" Comment)" = mine ]
	[[ "$(comment "$j")" =~ "No such file" ]]
	if bb_mode; then
		# Slurm holds it (JobHeldAdmin) with data_in's message in SystemComment.
		wait_for 30 eval '[[ "$(job_field "$j" SystemComment)" =~ "stagehand retry $j" ]]'
		[[ "$(job_field "$j" SystemComment)" =~ "No such file" ]]
	else
		[[ "$(comment "$j")" =~ "stagehand retry $j" ]]
	fi
	[ "$(job_state "$j")" = PENDING ]
	# The user cannot release it by hand.
	run run_as_user shtest scontrol release "$j"
	[ "$status" -ne 0 ]
	[ "$(job_state "$j")" = PENDING ]
	# bb mode: Slurm does not call data_in again; the user resubmits.
	bb_mode && return 0
	# Fix the source, retry as the user: it is staged, released and runs.
	user_file shtest "$WD/later/input.dat" 1
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" retry "$j"
	echo "$output"
	[ "$status" -eq 0 ]
	wait_job_state "$j" COMPLETED 90
	[ "$(cat "$WD/result")" = same ]
}

@test "when=success: a failing job's outputs are not archived; exempt dirs never are" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results when=success
#DATA archive=logs
#DATA exempt=tmp
$(without_plugin_lines results logs tmp)
echo r > results/r.txt; echo l > logs/l.txt; echo t > tmp/t.txt
exit 3
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" FAILED 60
	wait_for 60 label_is "$WD/logs" archived
	[ -f "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/logs/l.txt" ]
	sleep 2
	[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results" ]
	[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/tmp" ]
	if epilog_mode; then
		# Nothing labels exempt= directories without the plugin.
		run getfattr -n user.stagehand.policy "$WD/tmp"
		[ "$status" -ne 0 ]
	else
		label_is "$WD/tmp" exempt
	fi
	[ "$(cat "$WD/tmp/t.txt")" = t ]
}

@test "daemon down at job end: the event is spooled, and the archive happens once it is back" {
	bb_mode && skip "hold mode only: in bb mode Slurm's setup hook needs the daemon at submit (0600 header)"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
$(without_plugin_lines results)
echo x > results/x.txt
EOF
	"$TESTBED" restart stagehandd >/dev/null
	pid=$(cat "$STAGEHAND_TESTBED_DIR/run/stagehandd.pid")
	kill -TERM "$pid"
	wait_for 30 test ! -d "/proc/$pid"
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	# The job did not wait for the missing daemon; its event is on disk.
	# (in the spool of the node that ran it)
	spool=$(node_spool "$(job_node "$j")")
	wait_for 10 bash -c "ls '$spool' | grep -q ."
	if epilog_mode; then
		# (unlabelled: without the plugin nothing marks it 'pending')
		run getfattr -n user.stagehand.policy "$WD/results"
		[ "$status" -ne 0 ]
	else
		label_is "$WD/results" pending
	fi
	"$TESTBED" up >/dev/null
	wait_for 60 label_is "$WD/results" archived
	[ -f "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results/x.txt" ]
}

@test "daemon killed with SIGKILL during stage-in: after restart the job starts with verified inputs" {
	user_file shtest "$WD/big/a.bin" 16
	user_file shtest "$WD/big/b.bin" 16
	want=$(cat "$WD"/big/*.bin | sha256sum | cut -d' ' -f1)
	# The stage-in is held in flight on purpose, not by its size: the worker
	# stalls in its open of b.bin (a.bin may be copied already), so the
	# daemon dies mid-transfer on any machine.
	stall_worker_open "$WD/big/b.bin"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/big to=in
cat in/*.bin | sha256sum | cut -d' ' -f1 > got.sha
EOF
	# Stage into the job's working dir (to=in): it lies under ScratchRoots.
	submit -d "$WD" "$WD/job.sh"
	read -r -t 60 worker <&"${STALL[0]}"
	[[ $worker =~ ^[0-9]+$ ]]
	[ "$(stat -c %U "/proc/$worker")" = shtest ]
	wait_for 60 comment_matches "$j" "staging"
	pid=$(cat "$STAGEHAND_TESTBED_DIR/run/stagehandd.pid")
	kill -KILL "$pid"
	wait_for 10 eval '[[ ! -e /proc/$pid ]]'
	[ "$(job_state "$j")" = PENDING ]
	# Let the open through: the worker went with the daemon (parent-death
	# signal) and copies nothing more.
	kill "$STALLER"
	wait "$STALLER" || true
	STALLER=
	wait_for 10 eval '[[ ! -e /proc/$worker ]]'
	[ ! -e "$WD/in/b.bin" ]
	"$TESTBED" up >/dev/null
	wait_job_state "$j" COMPLETED 180
	[ "$(cat "$WD/got.sha")" = "$want" ]
}

@test "a second user cannot stage the first user's private file" {
	user_file shtest "$WD/secret/key.dat" 1
	chmod 0700 "$WD/secret"
	WD2=$(user_workdir shtest2)
	write_user_script shtest2 "$WD2/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD2/out-%j.txt
#DATA stage_in=$WD/secret/key.dat
echo ran > ran.txt
EOF
	submit -u shtest2 -d "$WD2" "$WD2/job.sh"
	wait_for 60 comment_matches "$j" "stage-in failed"
	[[ "$(comment "$j")" =~ "Permission denied" ]]
	[ "$(job_state "$j")" = PENDING ]
	[ ! -e "$STAGEHAND_TESTBED_SCRATCH/shtest2/$j/input/key.dat" ]
	[ ! -e "$WD2/ran.txt" ]
}

# requests_all JOB STATE: the job has requests, and every one is in STATE.
requests_all() {
	curl -sf --max-time 5 --unix-socket "$STAGEHAND_SOCKET" "http://x/v1/requests?job=$1&all=1" |
		jq -e --arg st "$2" '.requests | length > 0 and all(.state == $st)' >/dev/null
}

@test "scancel of a held job cancels its transfers" {
	install -d -o shtest -g shtest "$WD/many"
	runuser -u shtest -- bash -c "cd '$WD/many' && for i in \$(seq 1 20); do echo \$i > f\$i; done"
	# The transfer is held in flight on purpose, not by its size: the daemon's
	# worker (its child, dropped to shtest) stalls in its first open of the
	# source until released, so scancel meets a running transfer on any machine.
	stall_worker_open "$WD/many"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#DATA stage_in=$WD/many to=in
echo ran > ran.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	read -r -t 60 worker <&"${STALL[0]}"
	[[ $worker =~ ^[0-9]+$ ]]
	[ "$(stat -c %U "/proc/$worker")" = shtest ]
	wait_for 60 comment_matches "$j" "staging"
	wait_for 30 requests_all "$j" running
	# The held process is the request's transfer worker, by the daemon's word.
	rid=$(curl -sf --unix-socket "$STAGEHAND_SOCKET" "http://x/v1/requests?job=$j&all=1" | jq -r '.requests[0].id')
	wait_for 10 grep -q "request $rid: worker $worker started" "$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"
	scancel "$j"
	# The daemon notices and cancels the job's request, while its worker is
	# still held in the source's open.
	wait_for 30 requests_all "$j" cancelled
	[ -e "/proc/$worker" ]
	# Let it through: the worker stops, and the request stays cancelled.
	kill "$STALLER"
	wait "$STALLER" || true
	STALLER=
	wait_for 30 eval '[[ ! -e /proc/$worker ]]'
	requests_all "$j" cancelled
	[ ! -e "$WD/ran.txt" ]
}

@test "slurmctld restarted while a job waits for its inputs: staged and released afterwards" {
	bb_mode && skip "hold mode only: the hold marker and a releasing retry do not exist in bb mode (0600 header)"
	write_user_script shtest "$WD/job.sh" <<EOF2
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/input.dat
$(without_plugin_lines)
cmp "\$STAGEHAND_INPUT_DIR/input.dat" "$WD/src/input.dat" && echo same > result
EOF2
	submit -d "$WD" "$WD/job.sh"
	wait_for 60 comment_matches "$j" "stage-in failed"
	"$TESTBED" restart slurmctld >/dev/null
	# The hold and the plan live in slurmctld's saved state.
	[ "$(job_state "$j")" = PENDING ]
	[[ "$(job_field "$j" AdminComment)" =~ "stagehand:hold=pending" ]]
	user_file shtest "$WD/src/input.dat" 2
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" retry "$j"
	[ "$status" -eq 0 ]
	wait_job_state "$j" COMPLETED 120
	[ "$(cat "$WD/result")" = same ]
}
