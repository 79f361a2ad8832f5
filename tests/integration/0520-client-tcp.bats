#!/usr/bin/env bats
# The SPANK plugin, the CLI and the epilog reaching stagehandd over TCP with
# MUNGE, on the real test bed, as a compute node without the daemon's UNIX
# socket does; who may send job events; and what happens when the daemon is
# down at job start and job end.
#
# It runs on the multi-node bed only (scripts/testbed up --nodes N, tests in
# its service namespace): the plugin speaks TCP (server=) from each node's
# own namespace, where the daemon's socket does not exist, and "another
# node" is another compute node. setup_file makes the plugin required with
# on_error=fail (so a failing task_init fails the job); teardown_file
# restores the bed. On the one-node bed every test is skipped: a second node
# would need an address outside the namespaces the bed makes.

load helpers


_plugstack_line() {
	grep -E '^(optional|required)[[:space:]].*stagehand\.so' \
		"$STAGEHAND_TESTBED_DIR/etc/plugstack.conf" 2>/dev/null | head -n1
}

multi() {
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]]
}

setup_file() {
	testbed_require
	[[ -x $STAGEHAND_BUILD_DIR/daemon/stagehandd && -x $STAGEHAND_BUILD_DIR/cli/stagehand ]] ||
		_tb_fail "stagehandd and stagehand are not built in $STAGEHAND_BUILD_DIR" || return 1
	munge -n </dev/null >/dev/null 2>&1 || _tb_fail "munged is not running here" || return 1
	local line mode so rest w args=()
	line=$(_plugstack_line)
	[[ -n $line ]] || _tb_fail "the test bed does not load stagehand.so: build it and run 'scripts/testbed up'" || return 1
	read -r mode so rest <<<"$line"
	multi || skip "needs the multi-node bed (scripts/testbed up --nodes 3): compute nodes in their own namespaces"
	[[ $line == *server=* ]] || _tb_fail "multi-node bed without server= in plugstack.conf: $line" || return 1
	for w in $rest; do
		[[ $w == on_error=* ]] || args+=("$w")
	done
	args+=(on_error=fail)
	STAGEHAND_SPANK_ARGS="${args[*]}" STAGEHAND_TESTBED_SPANK_MODE=required \
		"$TESTBED" up >"$BATS_FILE_TMPDIR/up.log" 2>&1 ||
		_tb_fail "scripts/testbed up (required) failed: $(tail -n 20 "$BATS_FILE_TMPDIR/up.log")" || return 1
	[[ $(_plugstack_line) == required*on_error=fail* ]] ||
		_tb_fail "plugstack.conf was not switched to required, on_error=fail: $(_plugstack_line)" || return 1
}

teardown_file() {
	multi || return 0
	"$TESTBED" up >"$BATS_FILE_TMPDIR/down.log" 2>&1 ||
		echo "could not restore the test bed: $(tail -n 20 "$BATS_FILE_TMPDIR/down.log")" >&2
}

setup() {
	testbed_env
	STAGEHAND=$STAGEHAND_BUILD_DIR/cli/stagehand
	LOG=$STAGEHAND_TESTBED_LOGDIR/stagehandd.log
	SRV=$STAGEHAND_SERVER
	WD=$(user_workdir)
	JOBS=()
	# The daemon must answer on TCP (an earlier test may have stopped it).
	_daemon_pid >/dev/null || daemon_start
}

teardown() {
	cancel_jobs "${JOBS[@]}"
	_daemon_pid >/dev/null || daemon_start
}

_daemon_pid() {
	local pid
	pid=$(cat "$STAGEHAND_TESTBED_DIR/run/stagehandd.pid" 2>/dev/null) || return 1
	[[ -n $pid && "$(cat "/proc/$pid/comm" 2>/dev/null)" == stagehandd ]] || return 1
	[[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
	echo "$pid"
}

# Where job events from NODE come from, as the daemon sees it.
node_from() {
	scontrol show node "$1" | sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p'
}

# Run CMD as root on "another node" than NODE; its address goes to $OTHER_IP
# (set before calling, since "run" runs this in a subshell).
other_node() {
	local node=$1
	shift
	on_node "$(other_of "$node")" "$@"
}

other_of() {
	local n
	for n in $STAGEHAND_TESTBED_NODES; do
		[[ $n == "$1" ]] || { echo "$n"; return 0; }
	done
	return 1
}

# slurmd's log on NODE.
slurmd_log() {
	echo "$STAGEHAND_TESTBED_LOGDIR/slurmd-$1.log"
}

daemon_stop() {
	local pid
	pid=$(_daemon_pid) || return 0
	kill -TERM "$pid"
	wait_for 60 eval "[[ ! -d /proc/$pid ]]"
}

daemon_start() {
	"$TESTBED" restart stagehandd >/dev/null 2>&1 || _tb_fail "cannot start stagehandd again" || return 1
	wait_for 30 "$STAGEHAND" --server "$SRV" health >/dev/null
}

user_file() {
	local u=$1 p=$2 mib=$3
	install -d -o "$u" -g "$(id -gn "$u")" "$(dirname "$p")"
	runuser -u "$u" -- dd if=/dev/urandom of="$p" bs=1M count="$mib" status=none
}

label_is() {
	[[ "$(getfattr --only-values -n user.stagehand.policy "$1" 2>/dev/null)" == "$2" ]]
}

released() {
	[[ "$(job_field "$1" AdminComment)" =~ stagehand:hold=released ]]
}

# A trivial job with a plan on node $1; its end drains the node's spool.
next_job() {
	write_user_script shtest "$WD/next.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/next-%j.txt
#DATA exempt=scratchpad
true
EOF
	submit -d "$WD" "$WD/next.sh" -w "$1"
	wait_job_state "$j" COMPLETED 90
}

@test "over TCP+MUNGE: stage-in confirmed, job-start and job-end events taken, outputs archived" {
	user_file shtest "$WD/in/ref.db" 2
	want=$(sha256sum <"$WD/in/ref.db" | cut -d' ' -f1)
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/in/ref.db
#DATA archive=results
sha256sum "\$STAGEHAND_INPUT_DIR/ref.db" | cut -d' ' -f1 > input.sha
mkdir -p results; echo data > results/a.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 120
	from=$(node_from "$(job_node "$j")")
	[ "$(cat "$WD/input.sha")" = "$want" ]
	run cat "$WD/out-$j.txt"
	[[ $output != *stagehand* ]]
	grep -q "job $j: started on .*TCP from $from" "$LOG"
	grep -q "job $j: end event (COMPLETED) from uid 0 (TCP from $from)" "$LOG"
	wait_for 60 label_is "$WD/results" archived
	cmp "$WD/results/a.txt" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results/a.txt"
	# The user's status call went over TCP too.
	run run_as_user shtest "$STAGEHAND" --server "$SRV" status "$j"
	[ "$status" -eq 0 ]
	[[ $output == "job $j: stage-in ready"* ]]
}

@test "job events over TCP: root on the job's node yes, a user never, root on another node never" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA exempt=tmp
true
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	node=$(job_node "$j")
	wait_for 30 grep -q "job $j: end event (COMPLETED) from uid 0 (TCP" "$LOG"
	other_ip=$(node_from "$(other_of "$node")")
	# A user, even the job's owner, cannot send one, over TCP or the socket.
	run run_as_user shtest "$STAGEHAND" --server "$SRV" job-end "$j" --state FAILED
	[ "$status" -eq 1 ]
	[[ $output == *"job-end events come from slurmstepd or the epilog, which run as root: users cannot send them (this is uid $(id -u shtest))"* ]]
	run run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" job-end "$j" --state FAILED
	[ "$status" -eq 1 ]
	[[ $output == *"users cannot send them"* ]]
	# Root on another node (the namespace): refused, with the reason.
	run other_node "$node" "$STAGEHAND" --server "$SRV" job-end "$j" --state FAILED
	[ "$status" -eq 1 ]
	[[ $output == *"job $j: job-end event (TCP from $other_ip) refused: job $j runs on $node, not on the sending node"* ]]
	grep -q "job $j: job-end event from root (TCP from $other_ip) refused" "$LOG"
	run other_node "$node" "$STAGEHAND" --server "$SRV" job-end 4000000001 --state FAILED
	[ "$status" -eq 1 ]
	[[ $output == *"slurmctld does not know job 4000000001"* ]]
	# Root on the job's node: taken; it is a repeat, so nothing changes.
	run on_node "$node" "$STAGEHAND" --server "$SRV" job-end "$j" --state FAILED
	[ "$status" -eq 0 ]
	[[ $output == "job $j: end already recorded; nothing changed" ]]
	# Nothing the refused senders said was recorded.
	run "$STAGEHAND" --server "$SRV" status "$j" --json
	[ "$status" -eq 0 ]
	[ "$(jq -r .end.state <<<"$output")" = COMPLETED ]
}

@test "daemon down at job start: the job runs on its staged inputs; its events arrive later" {
	user_file shtest "$WD/in/ref.db" 1
	want=$(sha256sum <"$WD/in/ref.db" | cut -d' ' -f1)
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/in/ref.db
#DATA archive=results
sha256sum "\$STAGEHAND_INPUT_DIR/ref.db" | cut -d' ' -f1 > input.sha
mkdir -p results; echo late > results/a.txt
EOF
	# A begin time keeps it waiting once released: the daemon goes away first.
	submit -d "$WD" "$WD/job.sh" --begin=now+600
	wait_for 90 released "$j"
	daemon_stop
	scontrol update JobId="$j" StartTime=now
	wait_job_state "$j" COMPLETED 120
	node=$(job_node "$j")
	spool=$(node_spool "$node")
	[ "$(cat "$WD/input.sha")" = "$want" ]
	grep -q "job $j: stagehandd did not answer (.*); the job was released by slurmctld and its 1 input is on disk: starting" "$(slurmd_log "$node")"
	# The end event waits in the node's spool, in the documented format.
	[ -f "$spool/job-$j.json" ]
	[ "$(jq -r '.version, .job_id, .event.state, .event.source' "$spool/job-$j.json" | tr '\n' ' ')" = "1 $j COMPLETED spank " ]
	# The daemon comes back; the next job end on the node delivers it.
	daemon_start
	first=$j
	next_job "$node"
	wait_for 30 eval "[[ ! -e $spool/job-$first.json ]]"
	[ ! -e "$spool/bad-job-$first.json" ]
	wait_for 90 label_is "$WD/results" archived
	cmp "$WD/results/a.txt" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$first/results/a.txt"
}

@test "daemon down and an input really missing: the job fails and names the input" {
	user_file shtest "$WD/in/ref.db" 1
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/in/ref.db
echo "script ran"
EOF
	submit -d "$WD" "$WD/job.sh" --begin=now+600
	wait_for 90 released "$j"
	daemon_stop
	rm -f "$STAGEHAND_TESTBED_SCRATCH/shtest/$j/input/ref.db"
	scontrol update JobId="$j" StartTime=now
	st=$(wait_job_state "$j" "FAILED|COMPLETED" 120)
	[ "$st" = FAILED ]
	run cat "$WD/out-$j.txt"
	[[ $output != *"script ran"* ]]
	[[ $output == *"stage-in cannot be confirmed: stagehandd did not answer"* ]]
	[[ $output == *"input $WD/in/ref.db is not at $STAGEHAND_TESTBED_SCRATCH/shtest/$j/input/ref.db (No such file or directory)"* ]]
}

@test "daemon down only at job end: the event is spooled and delivered at the next job end" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
mkdir -p results; echo "end" > results/a.txt
while [[ ! -e go ]]; do sleep 0.2; done
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" RUNNING 90
	node=$(job_node "$j")
	spool=$(node_spool "$node")
	wait_for 30 grep -q "job $j: started on .*TCP from $(node_from "$node")" "$LOG"
	daemon_stop
	touch "$WD/go"
	wait_job_state "$j" COMPLETED 90
	[ -f "$spool/job-$j.json" ]
	daemon_start
	first=$j
	next_job "$node"
	wait_for 30 eval "[[ ! -e $spool/job-$first.json ]]"
	[ ! -e "$spool/bad-job-$first.json" ]
	wait_for 90 label_is "$WD/results" archived
	cmp "$WD/results/a.txt" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$first/results/a.txt"
}

@test "epilog: stagehand job-end --spool over TCP; spooled while the daemon is down, drained after" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA exempt=tmp
exit 3
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" FAILED 90
	node=$(job_node "$j")
	# Where the node sees the same files as this test (the bed's state dir).
	ep=$STAGEHAND_TESTBED_DIR/t0520-epilog-spool
	rm -rf "$ep"
	epilog() {
		on_node "$node" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SLURM_CONF="$SLURM_CONF" \
			SLURM_JOB_ID="$1" SLURM_JOB_UID="$(id -u shtest)" SLURM_JOB_USER=shtest \
			STAGEHAND_SERVER="$SRV" STAGEHAND_SPOOL="$ep" STAGEHAND_CLI="$STAGEHAND" \
			"$STAGEHAND_SRC_DIR/scripts/stagehand-epilog"
	}
	daemon_stop
	run epilog "$j"
	[ "$status" -eq 0 ]
	[[ $output == *"job $j: job-end event spooled in $ep/job-$j.json"* ]]
	[ "$(jq -r '.event.state, .event.exit_code, .event.source, .event.user' "$ep/job-$j.json" | tr '\n' ' ')" = "FAILED 3 epilog shtest " ]
	[ "$(stat -c %a "$ep")" = 700 ]
	daemon_start
	first=$j
	# A job without a plan: the epilog only drains the spool.
	write_user_script shtest "$WD/plain.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/plain-%j.txt
true
EOF
	submit -d "$WD" "$WD/plain.sh" -w "$node"
	wait_job_state "$j" COMPLETED 90
	run epilog "$j"
	[ "$status" -eq 0 ]
	[[ $output == *"delivered 1 spooled job-end event(s), set aside 0, 0 left"* ]]
	[ -z "$(ls -A "$ep")" ]
	# The daemon got it (a repeat of the plugin's event, so it changed nothing).
	run "$STAGEHAND" --server "$SRV" status "$first" --json
	[ "$(jq -r .end.state <<<"$output")" = FAILED ]
	rm -rf "$ep"
}
