#!/usr/bin/env bats
# Integration tests of the stagehand.so SPANK plugin on the real single-node
# test bed: real sbatch jobs as the ordinary user shtest.
#
# Needs root and a test bed whose plugstack.conf loads the plugin, e.g.
#   TB=/var/tmp/stagehand-testbed
#   STAGEHAND_SPANK_ARGS="socket=$TB/run/stagehandd.sock spool=$TB/stagehand-spool scratch=$TB/scratch" \
#       scripts/testbed up
# The tests read socket= (or server=, on a multi-node bed), spool= and
# on_error= from that line. They stop the test bed's own daemon and start a
# small fake one there (python3; on the UNIX socket, or on the TCP address
# in the bed's service namespace) to check what the plugin sends; if a daemon
# that is not the test bed's answers, the tests that need canned answers are
# skipped. With "required" and on_error=fail the job failure cases are
# checked too.

load helpers

TB=${STAGEHAND_TESTBED_DIR:-/var/tmp/stagehand-testbed}
export SLURM_CONF=$TB/etc/slurm.conf
TUSER=shtest

setup() {
	[[ $(id -u) -eq 0 ]] || skip "needs root"
	command -v sbatch >/dev/null || skip "no sbatch"
	command -v jq >/dev/null || skip "no jq"
	[[ -r $SLURM_CONF ]] || skip "no test bed at $TB (scripts/testbed up)"
	scontrol ping 2>/dev/null | grep -q UP || skip "test bed slurmctld is not up"
	local line
	line=$(grep -E '^(optional|required)[[:space:]].*stagehand\.so' "$TB/etc/plugstack.conf" 2>/dev/null | head -n1)
	[[ -n $line ]] || skip "the test bed does not load stagehand.so (STAGEHAND_TESTBED_SPANK=1 scripts/testbed up)"
	REQUIRED=0
	[[ $line == required* ]] && REQUIRED=1
	SOCK=/run/stagehand/stagehandd.sock SPOOL=/var/spool/stagehand ONERR=fail SCRATCH=/scratch
	SERVER=
	local w
	for w in $line; do
		case $w in
		socket=*) SOCK=${w#socket=} ;;
		server=*) SERVER=${w#server=} ;;
		spool=*) SPOOL=${w#spool=} ;;
		on_error=*) ONERR=${w#on_error=} ;;
		scratch=*) SCRATCH=${w#scratch=} ;;
		esac
	done
	testbed_env
	NODE_OPT=
	if [[ $STAGEHAND_TESTBED_MODE == multi ]]; then
		NODE_OPT=--nodelist=$STAGEHAND_TESTBED_NODE
		SPOOL=$(node_spool "$STAGEHAND_TESTBED_NODE")
	fi
	# The job's directory: a temporary one of its own, never in the user's
	# real home (the test users are shared by every test run on the host).
	WD=$(mktemp -d "/var/tmp/sh-0500-$BATS_TEST_NUMBER.XXXXXX")
	chown "$TUSER:" "$WD"
	chmod 0755 "$WD"
	FAKE_PID=
	PAUSED_REAL=0
}

# The test bed's own stagehandd, if it serves $SOCK, is stopped for the tests
# that need a fake daemon (or none) there, and started again in teardown.
pause_real_daemon() {
	local pid
	if [[ -n $SERVER ]]; then
		[[ $SERVER == "${STAGEHAND_SERVER:-}" ]] || return 0
	else
		[[ $SOCK == "$TB/run/stagehandd.sock" ]] || return 0
	fi
	pid=$(cat "$TB/run/stagehandd.pid" 2>/dev/null) || return 0
	[[ -n $pid && -d /proc/$pid && "$(cat "/proc/$pid/comm" 2>/dev/null)" == stagehandd ]] || return 0
	kill -TERM "$pid"
	for _ in $(seq 1 100); do [[ -d /proc/$pid ]] || break; sleep 0.2; done
	rm -f "$SOCK"
	PAUSED_REAL=1
}

teardown() {
	if [[ -n ${FAKE_PID:-} ]]; then
		kill "$FAKE_PID" 2>/dev/null || true
		wait "$FAKE_PID" 2>/dev/null || true
		[[ -n $SERVER ]] || rm -f "$SOCK"
	fi
	[[ -n ${WD:-} && -d $WD ]] && rm -rf "$WD"
	if [[ ${PAUSED_REAL:-0} == 1 ]]; then
		"${STAGEHAND_SRC_DIR:-$BATS_TEST_DIRNAME/../..}/scripts/testbed" up >/dev/null 2>&1 ||
			echo "could not restart the test bed's stagehandd" >&2
	fi
	return 0
}

# A daemon (real or fake) answers on the socket (or the TCP address)?
daemon_answers() {
	if [[ -n $SERVER ]]; then
		curl -s -o /dev/null --max-time 2 "http://$SERVER/v1/health"
	else
		curl -s -o /dev/null --max-time 2 --unix-socket "$SOCK" http://localhost/v1/health
	fi
}

# Start a fake stagehandd on $SOCK answering every request with status $1
# and body $2; requests are logged to $BATS_TEST_TMPDIR/requests.
start_fake() {
	pause_real_daemon
	daemon_answers && skip "a daemon that is not the test bed's answers on ${SERVER:-$SOCK}"
	if [[ -z $SERVER ]]; then
		[[ -d $(dirname "$SOCK") ]] || skip "no directory for $SOCK"
		rm -f "$SOCK"
	fi
	python3 - "${SERVER:-$SOCK}" "$1" "$2" "$BATS_TEST_TMPDIR/requests" <<'PY' &
import os, socket, sys
path, status, body, log = sys.argv[1], int(sys.argv[2]), sys.argv[3].encode(), sys.argv[4]
if path.startswith("/"):
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    os.chmod(path, 0o777)
else:
    # HOST:PORT in the bed's service namespace; the MUNGE header is ignored.
    host, _, port = path.rpartition(":")
    s = socket.socket(socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, int(port)))
s.listen(16)
while True:
    c, _ = s.accept()
    data = b""
    while b"\r\n\r\n" not in data:
        d = c.recv(65536)
        if not d:
            break
        data += d
    head, _, rest = data.partition(b"\r\n\r\n")
    n = 0
    for l in head.split(b"\r\n"):
        if l.lower().startswith(b"content-length:"):
            n = int(l.split(b":")[1])
    while len(rest) < n:
        d = c.recv(65536)
        if not d:
            break
        rest += d
    with open(log, "ab") as f:
        f.write(head.split(b"\r\n")[0] + b"\n" + rest + b"\n")
    c.sendall(b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
              % (status, len(body), body))
    c.close()
PY
	FAKE_PID=$!
	local i
	for ((i = 0; i < 50; i++)); do
		if [[ -n $SERVER ]]; then
			daemon_answers && return 0
		else
			[[ -S $SOCK ]] && return 0
		fi
		sleep 0.1
	done
	echo "fake daemon did not start on ${SERVER:-$SOCK}" >&2
	return 1
}

# write_job NAME: the script body comes on stdin.
write_job() {
	cat >"$WD/$1"
	chown "$TUSER:" "$WD/$1"
}

# sub NAME: submit $WD/NAME as $TUSER from $WD (helpers' submit); sets JOB.
# On a multi-node bed every job runs on the first node, whose spool the
# tests read (a job's end event is spooled on its own node).
sub() {
	submit -u "$TUSER" -d "$WD" "$WD/$1" -o "out-%j.txt" ${NODE_OPT:+"$NODE_OPT"}
}

# wait_job: until $JOB left the queue (max 60 s); sets STATE and EXIT.
wait_job() {
	local i st
	for ((i = 0; i < 120; i++)); do
		st=$(squeue -h -j "$JOB" -o '%T %r' 2>/dev/null || true)
		[[ -z $st ]] && break
		if [[ $st == PENDING*Held* ]]; then
			scontrol release "$JOB" 2>/dev/null || true
		fi
		sleep 0.5
	done
	STATE=$(scontrol show job "$JOB" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
	EXIT=$(scontrol show job "$JOB" 2>/dev/null | sed -n 's/.*ExitCode=\([0-9:]*\).*/\1/p')
	OUT=$(cat "$WD/out-$JOB.txt" 2>/dev/null || true)
}

@test "a job without #DATA is untouched" {
	write_job plain.sh <<'S'
#!/bin/bash
#SBATCH -J plain
env | grep '^STAGEHAND_' || echo "no stagehand variables"
ls -A
S
	sub plain.sh
	wait_job
	[ "$STATE" = COMPLETED ]
	[[ $OUT == *"no stagehand variables"* ]]
	[[ $OUT != *stagehand:* ]]
	# nothing but the script and its output in the working directory
	[ "$(ls -A "$WD" | sort | tr '\n' ' ')" = "out-$JOB.txt plain.sh " ]
	[ ! -e "$SPOOL/job-$JOB.json" ]
}

@test "exempt= and archive= directories are made, owned by the user, labelled; STAGEHAND_* exported" {
	write_job dirs.sh <<'S'
#!/bin/bash
#SBATCH -J dirs
#DATA exempt=tmp
#DATA archive=results/%j when=success
#DATA exempt="scratch space/a"
env | grep '^STAGEHAND_' | sort
echo "cwd=$PWD"
S
	sub dirs.sh
	wait_job
	[ "$STATE" = COMPLETED ]
	for d in tmp "results/$JOB" "scratch space/a"; do
		[ -d "$WD/$d" ]
		[ "$(stat -c %U "$WD/$d")" = "$TUSER" ]
		[ "$(getfattr --only-values -n user.stagehand.job "$WD/$d")" = "$JOB" ]
		[ "$(getfattr --only-values -n user.stagehand.owner "$WD/$d")" = "$(id -u $TUSER)" ]
	done
	[ "$(getfattr --only-values -n user.stagehand.policy "$WD/tmp")" = exempt ]
	[ "$(getfattr --only-values -n user.stagehand.policy "$WD/scratch space/a")" = exempt ]
	# pending while the job ran; once it ended the daemon (if running) moves
	# it on to archive/archived.
	[[ "$(getfattr --only-values -n user.stagehand.policy "$WD/results/$JOB")" =~ ^(pending|archive|archived)$ ]]
	[[ $OUT == *"STAGEHAND_JOB_ID=$JOB"* ]]
	[[ $OUT == *"STAGEHAND_ARCHIVE_DIRS=$WD/results/$JOB"$'\n'* ]]
	[[ $OUT == *"STAGEHAND_EXEMPT_DIRS=$WD/tmp:$WD/scratch space/a"$'\n'* ]]
	[[ $OUT == *"STAGEHAND_INPUT_DIR=$SCRATCH/$TUSER/$JOB/input"* ]]
	[[ $OUT == *"cwd=$WD"* ]]
}

@test "with no daemon the job-end event is spooled, well-formed, root-only" {
	pause_real_daemon
	daemon_answers && skip "a daemon that is not the test bed's answers on ${SERVER:-$SOCK}"
	write_job fail.sh <<'S'
#!/bin/bash
#DATA archive=out_%j
exit 3
S
	sub fail.sh
	wait_job
	[ "$STATE" = FAILED ]
	f=$SPOOL/job-$JOB.json
	[ -f "$f" ]
	[ "$(stat -c '%U %a' "$f")" = "root 600" ]
	[ "$(stat -c '%U %a' "$SPOOL")" = "root 700" ]
	run jq -e --argjson j "$JOB" --arg wd "$WD" --argjson uid "$(id -u $TUSER)" '
		.version == 1 and .job_id == $j and
		.event.state == "FAILED" and .event.exit_code == 3 and
		.event.uid == $uid and .event.user == "shtest" and .event.work_dir == $wd and
		.event.plan.version == 1 and
		.event.plan.actions[0].action == "archive" and
		.event.plan.actions[0].path == ("out_" + ($j | tostring))' "$f"
	[ "$status" -eq 0 ]
	# the user is not bothered with the daemon being down
	[[ $OUT != *stagehand* ]]
	rm -f "$f"
}

@test "spooled events are delivered at a later job end, then the new one" {
	pause_real_daemon
	daemon_answers && skip "a daemon that is not the test bed's answers on ${SERVER:-$SOCK}"
	write_job a.sh <<'S'
#!/bin/bash
#DATA exempt=t
true
S
	sub a.sh
	wait_job
	first=$JOB
	[ -f "$SPOOL/job-$first.json" ]
	start_fake 202 '{"accepted":true}'
	sub a.sh
	wait_job
	second=$JOB
	[ "$STATE" = COMPLETED ]
	[ ! -e "$SPOOL/job-$first.json" ]
	[ ! -e "$SPOOL/job-$second.json" ]
	grep -q "^POST /v1/jobs/$first/end HTTP/1.1\$" "$BATS_TEST_TMPDIR/requests"
	grep -q "^POST /v1/jobs/$second/end HTTP/1.1\$" "$BATS_TEST_TMPDIR/requests"
	# the earlier event went first
	[ "$(grep -n "/v1/jobs/$first/end" "$BATS_TEST_TMPDIR/requests" | cut -d: -f1)" -lt \
	  "$(grep -n "/v1/jobs/$second/end" "$BATS_TEST_TMPDIR/requests" | cut -d: -f1)" ]
	grep -q "\"state\":\"COMPLETED\"" "$BATS_TEST_TMPDIR/requests"
}

@test "a symlinked directory is refused and nothing is made through it" {
	target=$(runuser -u "$TUSER" -- mktemp -d)
	runuser -u "$TUSER" -- ln -s "$target" "$WD/out"
	write_job link.sh <<'S'
#!/bin/bash
#DATA archive=out/x
echo "script ran"
S
	sub link.sh
	wait_job
	[[ $OUT == *"'out' in 'out/x' is a symbolic link"* ]]
	[ ! -e "$target/x" ]
	if [[ $REQUIRED == 1 && $ONERR == fail ]]; then
		[ "$STATE" = FAILED ]
		[[ $OUT != *"script ran"* ]]
	fi
	rm -rf "$target"
}

@test "stage-in not ready: the user is told, and with required+fail the job does not run" {
	start_fake 200 '{"job_id":1,"stage_in":{"state":"staging","error":null},"requests":[]}'
	write_job in.sh <<'S'
#!/bin/bash
#DATA stage_in=/etc/hostname
echo "script ran"
S
	sub in.sh
	wait_job
	[[ $OUT == *"stagehand: job $JOB: stage-in not complete (state staging)"* ]]
	grep -q "^GET /v1/jobs/$JOB HTTP/1.1\$" "$BATS_TEST_TMPDIR/requests"
	if [[ $REQUIRED == 1 && $ONERR == fail ]]; then
		[ "$STATE" = FAILED ]
		[[ $OUT != *"script ran"* ]]
	else
		[[ $OUT == *"script ran"* ]]
	fi
}

@test "stage-in ready: the job runs quietly" {
	start_fake 200 '{"job_id":1,"stage_in":{"state":"ready","error":null},"requests":[]}'
	write_job ready.sh <<'S'
#!/bin/bash
#DATA stage_in=/etc/hostname
echo "script ran"
S
	sub ready.sh
	wait_job
	[ "$STATE" = COMPLETED ]
	[[ $OUT == *"script ran"* ]]
	[[ $OUT != *stagehand* ]]
	grep -q "^POST /v1/jobs/$JOB/end HTTP/1.1\$" "$BATS_TEST_TMPDIR/requests"
}
