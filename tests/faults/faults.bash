# Helpers for the fault-injection and hostile-path tests (tests/faults/*.bats
# and tests/integration/07xx-*.bats). They run as root against the test bed
# of scripts/testbed, with the real slurmctld, slurmd and stagehandd, and
# submit jobs as the ordinary users shtest and shtest2.
#
#   load ../integration/helpers   (first)
#   load ../faults/faults         (or "load faults" from tests/faults)
#
# Functions:
#   faults_setup                testbed_require + the daemon, plugin and Lua hook are there;
#                               sets STAGEHAND (CLI), WD (a fresh work dir of shtest), JOBS=()
#   faults_teardown             cancel the test's jobs; undo daemon config and mounts it changed
#   (submit ARGS, from ../integration/helpers: submit_as_user, remember the job; sets $j)
#   comment JOB                 the job's Comment (squeue -o %k)
#   comment_matches JOB RE
#   label DIR / label_is DIR V  user.stagehand.policy of DIR
#   user_file U PATH MIB        PATH of MIB MiB of random data owned by U
#   make_tree U DIR NSMALL NBIG BIGMIB
#                               a mixed tree: NSMALL files of 1-64 KiB in 8 subdirectories
#                               and NBIG files of BIGMIB MiB, owned by U
#   manifest DIR                "sha256  ./relpath" of every regular file, sorted
#   api [-u USER] METHOD PATH [JSON]
#                               the daemon's API over its UNIX socket, as USER (default root);
#                               sets $API_BODY and $API_STATUS (the HTTP status)
#   api_get PATH                GET PATH as root, print the body (for $(...))
#   daemon_pid                  pid of the test bed's stagehandd (fails if none)
#   daemon_stop / daemon_start  SIGTERM and wait / start it again (scripts/testbed restart)
#   daemon_kill9                SIGKILL, wait until it is gone
#   daemon_conf FILE            run the daemon with FILE's Key=value lines replacing the
#                               generated ones (STAGEHAND_TESTBED_DAEMON_CONF); undone by
#                               faults_teardown (or daemon_conf_reset)
#   tmpfs_mount DIR SIZE [MODE] a tmpfs of SIZE at DIR (created); unmounted by faults_teardown
#   job_requests JOB            every request of JOB as JSON lines (id state action error ...)
#   report LINE                 append LINE to the figures file and show it (fd 3)
#
# Figures (kill points, race attempts, ...) go to $STAGEHAND_FAULTS_REPORT
# (default $STAGEHAND_TESTBED_DIR/faults-report.txt), read by docs/reliability.md's author.

faults_setup() {
	testbed_require || return 1
	daemon_require || return 1
	spank_require || return 1
	grep -q '^JobSubmitPlugins=lua' "$SLURM_CONF" || {
		echo "the test bed runs without job_submit.lua: run 'STAGEHAND_TESTBED_LUA=1 scripts/testbed up'" >&2
		return 1
	}
	command -v jq >/dev/null || { echo "jq is needed" >&2; return 1; }
	STAGEHAND=$STAGEHAND_BUILD_DIR/cli/stagehand
	STAGEHAND_FAULTS_REPORT=${STAGEHAND_FAULTS_REPORT:-$STAGEHAND_TESTBED_DIR/faults-report.txt}
	WD=$(user_workdir) || return 1
	JOBS=()
	_FAULTS_MOUNTS=()
	_FAULTS_CONF=0
}

faults_teardown() {
	local m
	cancel_jobs "${JOBS[@]}"
	if ((${_FAULTS_CONF:-0})); then
		daemon_conf_reset
	fi
	# A killed or stopped daemon is brought back for the next test.
	daemon_pid >/dev/null 2>&1 || daemon_start >/dev/null 2>&1 || true
	for m in "${_FAULTS_MOUNTS[@]}"; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done
	return 0
}

comment() {
	job_status "$1"
}

comment_matches() {
	[[ "$(comment "$1")" =~ $2 ]]
}

label() {
	getfattr --only-values -n user.stagehand.policy "$1" 2>/dev/null
}

label_is() {
	[[ "$(label "$1")" == "$2" ]]
}

user_file() {
	local u=$1 p=$2 mib=$3
	install -d -o "$u" -g "$(id -gn "$u")" "$(dirname "$p")"
	runuser -u "$u" -- dd if=/dev/urandom of="$p" bs=1M count="$mib" status=none
}

make_tree() {
	local u=$1 dir=$2 nsmall=$3 nbig=$4 bigmib=$5
	runuser -u "$u" -- python3 - "$dir" "$nsmall" "$nbig" "$bigmib" <<'PY'
import os, random, sys
d, ns, nb, mib = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
rnd = random.Random(20261121)
for i in range(8):
    os.makedirs(os.path.join(d, "sub%d" % i, "deep"), exist_ok=True)
for i in range(ns):
    sub = os.path.join(d, "sub%d" % (i % 8), "deep" if i % 3 == 0 else "")
    with open(os.path.join(sub, "small-%04d.dat" % i), "wb") as f:
        f.write(os.urandom(rnd.randint(1, 64) * 1024))
for i in range(nb):
    with open(os.path.join(d, "sub%d" % i, "big-%d.bin" % i), "wb") as f:
        for _ in range(mib):
            f.write(os.urandom(1 << 20))
PY
}

manifest() {
	(cd "$1" && find . -type f -print0 | sort -z | xargs -0 -r sha256sum)
}

api() {
	local user=root
	if [[ $1 == -u ]]; then
		user=$2
		shift 2
	fi
	local method=$1 path=$2 body=${3:-} out code
	local args=(-s --max-time 20 --unix-socket "$STAGEHAND_SOCKET" -X "$method" -w '\n%{http_code}')
	[[ -n $body ]] && args+=(-H 'Content-Type: application/json' --data-binary "$body")
	if [[ $user == root ]]; then
		out=$(curl "${args[@]}" "http://stagehand$path") || true
	else
		out=$(runuser -u "$user" -- curl "${args[@]}" "http://stagehand$path") || true
	fi
	API_STATUS=${out##*$'\n'}
	API_BODY=${out%$'\n'*}
}

api_get() {
	api GET "$1"
	printf '%s\n' "$API_BODY"
}

daemon_pid() {
	local pid
	pid=$(cat "$STAGEHAND_TESTBED_DIR/run/stagehandd.pid" 2>/dev/null) || return 1
	[[ -n $pid && -d /proc/$pid && "$(cat "/proc/$pid/comm" 2>/dev/null)" == stagehandd ]] || return 1
	[[ "$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null)" != Z ]] || return 1
	echo "$pid"
}

daemon_stop() {
	local pid
	pid=$(daemon_pid) || return 0
	kill -TERM "$pid"
	wait_for 40 test ! -d "/proc/$pid"
}

daemon_kill9() {
	local pid
	pid=$(daemon_pid) || return 0
	kill -KILL "$pid"
	wait_for 20 test ! -d "/proc/$pid"
}

daemon_start() {
	"$TESTBED" restart stagehandd >/dev/null
}

daemon_conf() {
	STAGEHAND_TESTBED_DAEMON_CONF=$1 "$TESTBED" up >/dev/null || return 1
	_FAULTS_CONF=1
}

daemon_conf_reset() {
	STAGEHAND_TESTBED_DAEMON_CONF= "$TESTBED" up >/dev/null
	_FAULTS_CONF=0
}

tmpfs_mount() {
	local dir=$1 size=$2 mode=${3:-1777}
	install -d "$dir"
	mount -t tmpfs -o "size=$size,mode=$mode" tmpfs "$dir" || return 1
	_FAULTS_MOUNTS+=("$dir")
}

job_requests() {
	api_get "/v1/requests?job=$1&all=1" | jq -c '.requests[]'
}

report() {
	install -d "$(dirname "$STAGEHAND_FAULTS_REPORT")"
	printf '%s %s: %s\n' "$(date -u +%FT%TZ)" "${BATS_TEST_FILENAME##*/}" "$*" >>"$STAGEHAND_FAULTS_REPORT"
	printf '# %s\n' "$*" >&3
}
