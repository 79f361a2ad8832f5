#!/bin/bash
# tests/valgrind/daemon-cli.sh - stagehandd and the stagehand CLI under
# valgrind memcheck (make check-valgrind-daemon; root).
#
# Starts stagehandd (SlurmWatch=no, private socket, database and config in a
# temporary directory) under valgrind, exercises it with the CLI as the test
# users shtest and shtest2 (health, submit with --wait, status, status of a
# request and a job, cancel, retry, another user's request, job-end with a
# plan as root, a duplicate job-end, garbage on the socket), then SIGTERM.
# Every CLI run is itself under valgrind. Passes when every valgrind log has
# 0 errors and 0 bytes definitely or indirectly lost; prints a line per run.
#
# Env: STAGEHANDD, STAGEHAND (binaries; default: the build tree's, through
# libtool), VALGRIND (default valgrind), KEEP=1 keeps the work directory.
set -u
build=${STAGEHAND_BUILD_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}
daemon=${STAGEHANDD:-$build/daemon/stagehandd}
cli=${STAGEHAND:-$build/cli/stagehand}
vg=${VALGRIND:-valgrind}
libtool=$build/libtool
A=shtest B=shtest2

die() { echo "daemon-cli.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "daemon-cli.sh: skipped: needs root (the daemon runs as root)"; exit 77; }
command -v "$vg" >/dev/null || die "valgrind not found: install it (scripts/install-deps)"
[ -x "$daemon" ] && [ -x "$cli" ] || die "build the daemon and the CLI first (make)"
for u in $A $B; do id "$u" >/dev/null 2>&1 || useradd -m -s /bin/bash "$u"; done

work=$(mktemp -d /var/tmp/sh-vg-XXXXXX)
chmod 755 "$work"
cleanup() {
	[ -n "${dpid:-}" ] && kill -0 "$dpid" 2>/dev/null && kill -KILL "$dpid"
	[ "${KEEP:-0}" = 1 ] && echo "work directory kept: $work" || rm -rf "$work"
}
trap cleanup EXIT

vgrun() {  # vgrun LOGNAME CMD...: exec CMD under memcheck (call in a subshell), log in $work/vg/
	local name=$1
	shift
	local lt=()
	[ -x "$libtool" ] && lt=("$libtool" --mode=execute)
	exec "${lt[@]}" "$vg" --log-file="$work/vg/$name.%p.log" --leak-check=full \
		--show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
		--track-fds=no --num-callers=30 "$@"
}
mkdir -p "$work/vg" "$work/scratch" "$work/src"
chmod 1777 "$work/vg"	# the CLI runs as the test users write their logs here too
cat > "$work/stagehand.conf" <<CONF
SocketPath=$work/sock
StateDB=$work/stagehand.db
PidFile=$work/pid
LogLevel=debug
Workers=2
RetryBackoff=1
MaxRetries=1
DrainTimeout=10
ScratchRoots=$work/scratch
SlurmWatch=no
CONF

# Source data: A's tree, and a private one of B's.
for u in $A $B; do
	install -d -o $u -g $u -m 0755 "$work/scratch/$u" "$work/src/$u"
	for i in 1 2 3; do head -c $((i * 40000)) /dev/urandom > "$work/src/$u/f$i"; done
	chown -R $u:$u "$work/src/$u"
done
chmod 700 "$work/src/$B"

(vgrun stagehandd "$daemon" -F -c "$work/stagehand.conf") > "$work/daemon.out" 2>&1 &
dpid=$!
for _ in $(seq 1 300); do [ -S "$work/sock" ] && break; sleep 0.1; done
[ -S "$work/sock" ] || { cat "$work/daemon.out"; die "stagehandd did not create its socket"; }

fail=0
n=0
as() {  # as USER NAME ARGS...: the CLI as USER under valgrind; output in $work/NAME.out
	local user=$1 name=$2
	shift 2
	n=$((n + 1))
	if [ "$user" = root ]; then
		(vgrun "cli-$name" "$cli" --socket "$work/sock" "$@") > "$work/$name.out" 2>&1
	else
		setpriv --reuid="$user" --regid="$user" --init-groups -- \
			env -i PATH=/usr/bin:/bin HOME=/ \
			"$(command -v "$vg")" --log-file="$work/vg/cli-$name.%p.log" --leak-check=full \
			--show-leak-kinds=definite,indirect --errors-for-leak-kinds=definite,indirect \
			--num-callers=30 "$(_real "$cli")" --socket "$work/sock" "$@" \
			> "$work/$name.out" 2>&1
	fi
}
_real() {  # the ELF behind a libtool wrapper (a user cannot run the wrapper's relink)
	local d b
	d=$(dirname "$1") b=$(basename "$1")
	if [ -x "$d/.libs/$b" ]; then echo "$d/.libs/$b"; elif [ -x "$d/.libs/lt-$b" ]; then echo "$d/.libs/lt-$b"; else echo "$1"; fi
}
expect() {  # expect RC NAME: the last run of NAME exited RC
	if [ "$1" != "$2" ]; then
		echo "FAIL: $3 exited $2, expected $1:"; sed 's/^/  /' "$work/$3.out"; fail=1
	fi
}

as $A health health; expect 0 $? health
as $A submit1 submit --stage-in "$work/src/$A" "$work/scratch/$A/in" --job 5001 --wait; expect 0 $? submit1
as $A status status; expect 0 $? status
as $A status-job status 5001 --json; expect 0 $? status-job
as $A status-req status r1 --items; expect 0 $? status-req
as $B status-other status r1; rc=$?; [ $rc -ne 0 ] || { echo "FAIL: $B saw $A's request"; fail=1; }
as $A submit2 submit --stage-in "$work/src/$B" "$work/scratch/$A/stolen" --wait; rc=$?
[ $rc -ne 0 ] || { echo "FAIL: $A copied $B's private tree"; fail=1; }
as $A retry retry r2; expect 0 $? retry
as $A cancel cancel r2; expect 0 $? cancel
as $B cancel-other cancel r1; rc=$?; [ $rc -ne 0 ] || { echo "FAIL: $B cancelled $A's request"; fail=1; }
printf '{"version":1,"actions":[{"line":2,"action":"stage_out","path":"out","to":"%s"}]}\n' \
	"$work/scratch/$A/out-%j" > "$work/plan.json"
install -d -o $A -g $A "$work/run" "$work/run/out"
head -c 10000 /dev/urandom > "$work/run/out/result"; chown $A:$A "$work/run/out/result"
as root job-end job-end 5001 --state COMPLETED --exit-code 0 --uid "$(id -u $A)" --user $A \
	--work-dir "$work/run" --plan "$work/plan.json"; expect 0 $? job-end
as root job-end-dup job-end 5001 --state COMPLETED --uid "$(id -u $A)"; expect 0 $? job-end-dup
as $A job-end-user job-end 5002 --state COMPLETED --uid "$(id -u $A)"; rc=$?
[ $rc -ne 0 ] || { echo "FAIL: a user sent a job-end event"; fail=1; }
timeout 10 python3 -c 'import socket,sys
for junk in (b"GARBAGE\r\n\r\n\x00\xff", b"POST /v1/requests HTTP/1.1\r\nContent-Length: 5\r\n\r\n[1,2", b"\x16\x03\x01"):
    s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.sendall(junk); s.settimeout(3)
    try: s.recv(4096)
    except OSError: pass
    s.close()' "$work/sock" || { echo "FAIL: garbage on the socket"; fail=1; }
as $A wait-out status 5001 --watch --interval 1 --json > /dev/null; expect 0 $? wait-out
[ -f "$work/scratch/$A/out-5001/result" ] || { echo "FAIL: job-end stage_out did not copy"; fail=1; }
as $A health2 health; expect 0 $? health2

kill -TERM "$dpid"
wait "$dpid"; drc=$?
dpid=
[ $drc -eq 0 ] || { echo "FAIL: stagehandd exited $drc after SIGTERM"; tail -20 "$work/daemon.out"; fail=1; }

# Every valgrind log: 0 errors, nothing definitely or indirectly lost.
# Worker processes are forks of the daemon: only the forking thread lives on
# in them, so whatever the API thread had allocated at that instant is
# unreachable there and shows as "lost". For workers only memory errors
# count (invalid reads and writes, uninitialised values, bad frees).
logs=0
main=$(grep -l "Command: .*stagehandd" "$work"/vg/stagehandd.*.log 2>/dev/null | while read -r f; do
	ppid=$(sed -n 's/.*Parent PID: \([0-9]*\).*/\1/p' "$f"); \
	grep -q "^==$ppid==" "$work"/vg/stagehandd.*.log 2>/dev/null || echo "$f"; done | head -n 1)
for f in "$work"/vg/*.log; do
	logs=$((logs + 1))
	name=$(basename "$f" .log)
	errs=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p' "$f" | tail -n 1)
	def=$(sed -n 's/.*definitely lost: \([0-9,]*\) bytes.*/\1/p' "$f" | tail -n 1 | tr -d ,)
	ind=$(sed -n 's/.*indirectly lost: \([0-9,]*\) bytes.*/\1/p' "$f" | tail -n 1 | tr -d ,)
	case $name in stagehandd.*)
		if [ "$f" != "$main" ]; then
			errs=$(grep -cE "Invalid (read|write|free)|uninitialised|Conditional jump|Syscall param|Mismatched free|overlap" "$f")
			echo "valgrind $name (worker): $errs memory errors (leaks of a fork not counted: $((def + ind)) B)"
			[ "$errs" = 0 ] || { fail=1; KEEP=1; sed -n '/Invalid\|uninitialised\|Conditional/,/^==[0-9]*== $/p' "$f" | head -40; }
			continue
		fi
		name="$name (daemon)";;
	esac
	echo "valgrind $name: ${errs:-?} errors, definitely lost ${def:-0} B, indirectly lost ${ind:-0} B"
	if [ "${errs:-1}" != 0 ] || [ "${def:-0}" != 0 ] || [ "${ind:-0}" != 0 ]; then
		fail=1
		sed -n '/Invalid\|uninitialised\|definitely lost in\|indirectly lost in/,/^==[0-9]*== $/p' "$f" | head -60
		KEEP=1
	fi
done
echo "daemon-cli.sh: $n CLI runs, $logs valgrind logs (daemon, its workers, every CLI run)"
[ $fail = 0 ] && echo "daemon-cli.sh: all clean" || echo "daemon-cli.sh: FAILED"
exit $fail
