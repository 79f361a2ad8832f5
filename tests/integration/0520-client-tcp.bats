#!/usr/bin/env bats
# The SPANK plugin, the CLI and the epilog reaching stagehandd over TCP with
# MUNGE, on the real test bed, as a compute node without the daemon's UNIX
# socket would; who may send job events; and what happens when the daemon
# is down at job start and job end.
#
# setup_file makes a network namespace (a second "node", no Slurm in it)
# joined to this host by a veth pair: this host 198.18.52.1, the namespace
# 198.18.52.2 (a benchmarking range, never routed). It switches the test bed
# to: stagehandd with ListenAddress=198.18.52.1:PORT, the plugin with
# server=198.18.52.1:PORT instead of socket= (required, so a failing
# task_init fails the job). teardown_file restores the caller's settings and
# removes the namespace. PORT is $STAGEHAND_TEST_TCP_PORT (default 19819).
#
# On this one-node bed the node's NodeAddr is 127.0.0.1 and the plugin's
# connections come from 198.18.52.1: both are this host's addresses, which
# is what the daemon's "this host" rule accepts (docs/security.md).

load helpers

NS=shcl520
VH=shcl520h
VN=shcl520n
HOST_IP=198.18.52.1
NS_IP=198.18.52.2
PORT=${STAGEHAND_TEST_TCP_PORT:-19819}
SRV=$HOST_IP:$PORT

_plugstack_line() {
	grep -E '^(optional|required)[[:space:]].*stagehand\.so' \
		"$STAGEHAND_TESTBED_DIR/etc/plugstack.conf" 2>/dev/null | head -n1
}

_netns_down() {
	ip netns del "$NS" 2>/dev/null || true
	ip link del "$VH" 2>/dev/null || true
}

setup_file() {
	testbed_require
	[[ -x $STAGEHAND_BUILD_DIR/daemon/stagehandd && -x $STAGEHAND_BUILD_DIR/cli/stagehand ]] ||
		_tb_fail "stagehandd and stagehand are not built in $STAGEHAND_BUILD_DIR" || return 1
	munge -n </dev/null >/dev/null 2>&1 || _tb_fail "munged is not running here" || return 1
	local line mode so rest w args=()
	line=$(_plugstack_line)
	[[ -n $line ]] || _tb_fail "the test bed does not load stagehand.so: build it and run 'scripts/testbed up'" || return 1
	_netns_down
	ip netns add "$NS" &&
		ip link add "$VH" type veth peer name "$VN" &&
		ip link set "$VN" netns "$NS" &&
		ip addr add "$HOST_IP/30" dev "$VH" && ip link set "$VH" up &&
		ip -n "$NS" addr add "$NS_IP/30" dev "$VN" && ip -n "$NS" link set "$VN" up &&
		ip -n "$NS" link set lo up ||
		_tb_fail "cannot create network namespace $NS with a veth pair ($HOST_IP <-> $NS_IP)" || return 1
	# Keep the caller's spool/scratch/...; the daemon is found by server= only.
	read -r mode so rest <<<"$line"
	for w in $rest; do
		[[ $w == socket=* || $w == server=* || $w == on_error=* ]] || args+=("$w")
	done
	args+=("server=$SRV" on_error=fail)
	printf 'ListenAddress=%s\n' "$SRV" >"$BATS_FILE_TMPDIR/daemon.conf"
	STAGEHAND_SPANK_ARGS="${args[*]}" STAGEHAND_TESTBED_SPANK_MODE=required \
		STAGEHAND_TESTBED_DAEMON_CONF=$BATS_FILE_TMPDIR/daemon.conf \
		"$TESTBED" up >"$BATS_FILE_TMPDIR/up.log" 2>&1 ||
		_tb_fail "scripts/testbed up (TCP mode) failed: $(tail -n 20 "$BATS_FILE_TMPDIR/up.log")" || return 1
	[[ $(_plugstack_line) == required*server=$SRV* ]] ||
		_tb_fail "plugstack.conf was not switched to server=$SRV (edited by hand?): $(_plugstack_line)" || return 1
	grep -qx "ListenAddress=$SRV" "$STAGEHAND_TESTBED_DIR/etc/stagehand.conf" ||
		_tb_fail "stagehand.conf has no ListenAddress=$SRV" || return 1
}

teardown_file() {
	"$TESTBED" up >"$BATS_FILE_TMPDIR/down.log" 2>&1 ||
		echo "could not restore the test bed: $(tail -n 20 "$BATS_FILE_TMPDIR/down.log")" >&2
	_netns_down
}

setup() {
	testbed_env
	STAGEHAND=$STAGEHAND_BUILD_DIR/cli/stagehand
	LOG=$STAGEHAND_TESTBED_LOGDIR/stagehandd.log
	SLURMD_LOG=$STAGEHAND_TESTBED_LOGDIR/slurmd.log
	SPOOL=$STAGEHAND_TESTBED_SPOOL
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
	echo "$pid"
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

submit() {
	j=$(submit_as_user "$@") || return 1
	JOBS+=("$j")
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

# A trivial job with a plan; its end drains the node's spool.
next_job() {
	write_user_script shtest "$WD/next.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/next-%j.txt
#DATA exempt=scratchpad
true
EOF
	submit -d "$WD" "$WD/next.sh"
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
	[ "$(cat "$WD/input.sha")" = "$want" ]
	run cat "$WD/out-$j.txt"
	[[ $output != *stagehand* ]]
	grep -q "job $j: started on .*TCP from $HOST_IP" "$LOG"
	grep -q "job $j: end event (COMPLETED) from uid 0 (TCP from $HOST_IP)" "$LOG"
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
	wait_for 30 grep -q "job $j: end event (COMPLETED) from uid 0 (TCP" "$LOG"
	# A user, even the job's owner, cannot send one, over TCP or the socket.
	run run_as_user shtest "$STAGEHAND" --server "$SRV" job-end "$j" --state FAILED
	[ "$status" -eq 1 ]
	[[ $output == *"job-end events come from slurmstepd or the epilog, which run as root; uid $(id -u shtest) cannot send them"* ]]
	run run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" job-end "$j" --state FAILED
	[ "$status" -eq 1 ]
	[[ $output == *"cannot send them"* ]]
	# Root on another node (the namespace): refused, with the reason.
	run ip netns exec "$NS" "$STAGEHAND" --server "$SRV" job-end "$j" --state FAILED
	[ "$status" -eq 1 ]
	[[ $output == *"job $j: job-end event (TCP from $NS_IP) refused: job $j runs on $STAGEHAND_TESTBED_NODE, not on the sending node"* ]]
	grep -q "job $j: job-end event from root (TCP from $NS_IP) refused" "$LOG"
	run ip netns exec "$NS" "$STAGEHAND" --server "$SRV" job-end 4000000001 --state FAILED
	[ "$status" -eq 1 ]
	[[ $output == *"slurmctld does not know job 4000000001"* ]]
	# Root on the job's node (this host): taken; it is a repeat, so nothing changes.
	run "$STAGEHAND" --server "$SRV" job-end "$j" --state FAILED
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
	rm -f "$SPOOL/job-$j.json"
	scontrol update JobId="$j" StartTime=now
	wait_job_state "$j" COMPLETED 120
	[ "$(cat "$WD/input.sha")" = "$want" ]
	grep -q "job $j: stagehandd did not answer (.*); the job was released by slurmctld and its 1 input is on disk: starting" "$SLURMD_LOG"
	# The end event waits in the node's spool, in the documented format.
	[ -f "$SPOOL/job-$j.json" ]
	[ "$(jq -r '.version, .job_id, .event.state, .event.source' "$SPOOL/job-$j.json" | tr '\n' ' ')" = "1 $j COMPLETED spank " ]
	# The daemon comes back; the next job end on the node delivers it.
	daemon_start
	first=$j
	next_job
	wait_for 30 eval "[[ ! -e $SPOOL/job-$first.json ]]"
	[ ! -e "$SPOOL/bad-job-$first.json" ]
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
	wait_for 30 grep -q "job $j: started on .*TCP from $HOST_IP" "$LOG"
	daemon_stop
	rm -f "$SPOOL/job-$j.json"
	touch "$WD/go"
	wait_job_state "$j" COMPLETED 90
	[ -f "$SPOOL/job-$j.json" ]
	daemon_start
	first=$j
	next_job
	wait_for 30 eval "[[ ! -e $SPOOL/job-$first.json ]]"
	[ ! -e "$SPOOL/bad-job-$first.json" ]
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
	ep=$BATS_TEST_TMPDIR/spool
	epilog() {
		env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin SLURM_CONF="$SLURM_CONF" \
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
	submit -d "$WD" "$WD/plain.sh"
	wait_job_state "$j" COMPLETED 90
	run epilog "$j"
	[ "$status" -eq 0 ]
	[[ $output == *"delivered 1 spooled job-end event(s), set aside 0, 0 left"* ]]
	[ -z "$(ls -A "$ep")" ]
	# The daemon got it (a repeat of the plugin's event, so it changed nothing).
	run "$STAGEHAND" --server "$SRV" status "$first" --json
	[ "$(jq -r .end.state <<<"$output")" = FAILED ]
}
