# Shared helpers for the integration and fault tests (bats, run as root
# against the Slurm test bed from scripts/testbed, one-node or multi-node; on
# a multi-node bed the tests run in its service namespace: "make integration"
# does that, or "scripts/testbed exec svc bats FILE"). Load with:
#
#   load helpers
#   setup_file() { testbed_require; }
#
# Functions (all fail the test with a message that says what went wrong):
#   testbed_env                 export SLURM_CONF and STAGEHAND_TESTBED_* (from "scripts/testbed env")
#   testbed_require             testbed_env + fail unless slurmctld answers and the nodes are usable
#                               (and, on a multi-node bed, unless this runs in its service namespace)
#   user_workdir [USER]         new empty directory owned by USER under the scratch area; prints it
#   write_user_script USER PATH write stdin to PATH, owned by USER, mode 0755
#   run_as_user USER CMD...     run CMD as USER with SLURM_CONF set (login-like HOME/USER)
#   submit_as_user [-u USER] [-d DIR] SCRIPT [SBATCH_ARGS...]
#                               sbatch SCRIPT as USER (default shtest) from DIR (default the
#                               script's directory); prints the job id
#   submit [SUBMIT_AS_USER ARGS]
#                               submit_as_user; the job id in $j and $JOB, and appended to JOBS
#                               (teardown: cancel_jobs "${JOBS[@]}")
#   try_submit [-u USER] [-d DIR] SCRIPT [SBATCH_ARGS...]
#                               sbatch through bats' "run --separate-stderr": $status, $output,
#                               $stderr as sbatch left them; on success the id in $JOB and JOBS
#                               (the test file needs bats_require_minimum_version 1.5.0)
#   job_field JOB FIELD         one field of "scontrol show job JOB" (e.g. JobState, UserId, Reason)
#   job_state JOB               JobState of JOB
#   job_status JOB              stagehandd's status text for JOB (the "stagehand:status=" part
#                               of its AdminComment; the job's own Comment stays the user's)
#   status_text ADMIN_COMMENT   the same, from an AdminComment value
#   wait_job_state JOB STATES [TIMEOUT]
#                               wait until JobState is one of STATES ("COMPLETED" or
#                               "RUNNING|COMPLETED"); fails at once if the job reaches another
#                               final state; default timeout 60s; prints the state reached
#   wait_for TIMEOUT CMD...     poll CMD every 0.2s until it succeeds
#   cancel_jobs JOB...          scancel, ignoring jobs already gone
#   testbed_logs                print the tail of the slurmctld and slurmd logs (for diagnostics)
#   job_node JOB                the node that runs (ran) JOB's batch script (BatchHost)
#   node_spool NODE             NODE's stagehand spool directory, as seen from here
#   on_node NODE CMD...         run CMD on compute node NODE (its namespaces; one-node: here)
#   stall_worker_open PATH      hold the daemon's transfer worker (stagehandd as shtest) in its
#                               first open of PATH (tests/integration/stall-open) until
#                               'kill "$STALLER"'; the held pid can be read from "${STALL[0]}"
#   stall_mover_open PATH       the same for shtest's first mover process (stagehand-mover)
#   lose_node NODE              SIGKILL everything in a compute node's namespace but its holder
#   node_back NODE              true once NODE is idle again (with wait_for, after testbed up)
#
# Variables after testbed_env: SLURM_CONF, STAGEHAND_TESTBED_DIR, _SCRATCH, _ARCHIVE, _LOGDIR,
# _NODE (first node), _NODES, _MODE (one|multi), _PARTITION, STAGEHAND_SOCKET, and on a
# multi-node bed STAGEHAND_SERVER, _SVC_NETNS, _NODEDIR; TESTBED_USER=shtest,
# TESTBED_USER2=shtest2; STAGEHAND_SRC_DIR (source tree) and STAGEHAND_BUILD_DIR (build tree,
# default the source tree).

: "${STAGEHAND_SRC_DIR:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${STAGEHAND_BUILD_DIR:=$STAGEHAND_SRC_DIR}"
export STAGEHAND_SRC_DIR STAGEHAND_BUILD_DIR
TESTBED=$STAGEHAND_SRC_DIR/scripts/testbed
TESTBED_USER=shtest
TESTBED_USER2=shtest2

# Final job states: once there, a job never changes state again.
_TB_FINAL_STATES='COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED|SPECIAL_EXIT|REVOKED'

_tb_fail() {
	printf '%s\n' "$*" >&2
	return 1
}

testbed_env() {
	local env_out
	env_out=$("$TESTBED" env) || _tb_fail "'$TESTBED env' failed" || return 1
	eval "$env_out"
}

# On a multi-node bed, is this process in the bed's service namespace? Slurm
# commands and the daemon's TCP address work only there: elsewhere the
# bed's private addresses would be sent to this host's own network.
in_service_namespace() {
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]] || return 0
	local ns=/run/netns/$STAGEHAND_TESTBED_SVC_NETNS
	[[ -e $ns && "$(stat -L -c %i "$ns")" == "$(stat -L -c %i /proc/self/ns/net)" ]]
}

testbed_require() {
	testbed_env || return 1
	[[ $(id -u) -eq 0 ]] || _tb_fail "integration tests must run as root (they submit jobs as $TESTBED_USER via runuser)" || return 1
	[[ -r $SLURM_CONF ]] || _tb_fail "no test bed config at $SLURM_CONF: run 'scripts/testbed up' first" || return 1
	in_service_namespace ||
		_tb_fail "the test bed is multi-node: run the tests in its service namespace ('scripts/testbed exec svc bats FILE', or 'make integration')" || return 1
	scontrol ping 2>/dev/null | grep -q 'is UP' ||
		_tb_fail "slurmctld of the test bed ($SLURM_CONF) does not answer: run 'scripts/testbed up' ('scripts/testbed status' tells more)" || return 1
	local st node
	for node in $STAGEHAND_TESTBED_NODES; do
		st=$(sinfo -h -N -n "$node" -o '%T' 2>/dev/null | head -n1)
		case $st in
		# 'planned' (sinfo's '-' suffix): idle, with a pending job planned on it,
		# e.g. a burst-buffer job in stage-in: usable.
		idle | mixed | allocated | completing | planned | idle- | mixed- | allocated-) ;;
		*) _tb_fail "test bed node $node is '${st:-unknown}', not usable: run 'scripts/testbed up'" || return 1 ;;
		esac
	done
}

testbed_logs() {
	local f
	for f in "$STAGEHAND_TESTBED_LOGDIR"/slurmctld.log "$STAGEHAND_TESTBED_LOGDIR"/slurmd*.log; do
		[[ -e $f ]] || continue
		echo "--- tail of $f ---"
		tail -n 30 "$f" 2>/dev/null || true
	done
}

job_node() {
	job_field "$1" BatchHost
}

# metric NAME: the daemon's /metrics value of NAME (no labels), or nothing.
metric() {
	curl -sS --max-time 10 --unix-socket "$STAGEHAND_SOCKET" http://localhost/metrics |
		awk -v m="$1" '$1 == m { print $2 }'
}

# lose_node NODE: the whole compute node goes at once, as when it loses power:
# its slurmd, every slurmstepd and every job process in its UTS namespace are
# killed with SIGKILL. Only the bed's namespace holder stays, so
# "scripts/testbed up" can bring the node back. A slurmstepd left alive
# would report its job's end at once (no node failure), or keep the job's
# cleanup going when the node returns. Prints how many were killed.
lose_node() {
	local node=$1 pid uts p n=0 holder
	pid=$(cat "$STAGEHAND_TESTBED_NODEDIR/$node/slurmd.pid")
	[[ "$(cat "/proc/$pid/comm")" == slurmd ]] || {
		echo "lose_node: $node's slurmd.pid ($pid) is not a slurmd" >&2
		return 1
	}
	holder=$(cat "$STAGEHAND_TESTBED_NODEDIR/$node/holder.pid")
	uts=$(readlink "/proc/$pid/ns/uts")
	local victims=()
	for p in /proc/[0-9]*; do
		p=${p#/proc/}
		[[ $p == "$holder" || $p == "$$" || $p == "$BASHPID" ]] && continue
		[[ $(readlink "/proc/$p/ns/uts" 2>/dev/null) == "$uts" ]] && victims+=("$p")
	done
	kill -KILL "${victims[@]}" 2>/dev/null || true
	n=${#victims[@]}
	echo "$n"
}

# declare_node_lost NODE: after lose_node, tell slurmctld the node is down
# instead of waiting SlurmdTimeout (60 s on the bed) for it to notice. It
# takes the same path as when a node stops answering: the node is set down
# and the jobs on it are killed as NODE_FAIL (requeued where they may be).
declare_node_lost() {
	scontrol update nodename="$1" state=down reason="lost (test)" ||
		_tb_fail "scontrol could not set node $1 down"
}

# node_back NODE: succeeds once NODE is idle again (after "scripts/testbed
# up" restarted its slurmd); use with wait_for.
node_back() {
	scontrol update nodename="$1" state=resume >/dev/null 2>&1 || true
	# scontrol, not sinfo: 26.05's sinfo -n adds an "n/a" line for each
	# partition the node is not in.
	[[ "$(scontrol show node "$1" | sed -n 's/.* State=\([^ ]*\).*/\1/p')" == IDLE ]]
}

node_spool() {
	if [[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]]; then
		echo "$STAGEHAND_TESTBED_NODEDIR/$1/stagehand-spool"
	else
		echo "$STAGEHAND_TESTBED_SPOOL"
	fi
}

on_node() {
	"$TESTBED" exec "$@"
}

# A burst-buffer-only test: skipped unless the bed runs burst_buffer/lua
# ('scripts/testbed up --mode=bb'); with "pool", also unless it has a pool.
# Call it from setup (skip in setup_file fails the whole file in this bats).
# bb_setup [pool]: the common start of a burst-buffer test's setup: the bed
# (in bb mode, with a pool if asked), the user's work directory in WD, no jobs.
bb_setup() {
	testbed_require
	bb_require "$@"
	WD=$(user_workdir)
	JOBS=()
}

# The common start of a hold-mode or either-mode test's setup, like bb_setup:
# the bed, its stagehandd answering, with "spank" also the SPANK plugin in its
# plugstack.conf, the CLI in STAGEHAND, the user's work directory in WD, no
# jobs. daemon_setup [spank]
daemon_setup() {
	testbed_require || return 1
	daemon_require || return 1
	if [[ ${1:-} == spank ]]; then
		# What tells the daemon of a job's end: the plugin, or on an
		# epilog-only bed (scripts/testbed up --epilog-only) Epilog=.
		if epilog_mode; then
			grep -q '^Epilog=' "$SLURM_CONF" ||
				_tb_fail "epilog-only bed without Epilog= in $SLURM_CONF: run 'scripts/testbed up --epilog-only'" ||
				return 1
		else
			spank_require || return 1
		fi
	fi
	STAGEHAND=$STAGEHAND_BUILD_DIR/cli/stagehand
	WD=$(user_workdir) || return 1
	JOBS=()
}

# The bed's stagehandd is running (its socket is there).
daemon_require() {
	[[ -S $STAGEHAND_SOCKET ]] ||
		_tb_fail "stagehandd of the test bed is not running ($STAGEHAND_SOCKET): run 'scripts/testbed up'"
}

# The SPANK plugin is in the bed's plugstack.conf.
spank_require() {
	grep -qE '^(optional|required) .*stagehand\.so' "$STAGEHAND_TESTBED_DIR/etc/plugstack.conf" ||
		_tb_fail "the SPANK plugin is not in the test bed's plugstack.conf: build it and run 'scripts/testbed up'"
}

bb_require() {
	[[ ${STAGEHAND_TESTBED_SUBMIT_MODE:-hold} == bb ]] ||
		skip "burst-buffer tests need 'scripts/testbed up --mode=bb'"
	[[ ${1:-} != pool || -n ${STAGEHAND_TESTBED_POOL_CAPACITY:-} ]] ||
		skip "the bed has no pool (STAGEHAND_TESTBED_POOL_CAPACITY unset: restart it)"
}

user_workdir() {
	local user=${1:-$TESTBED_USER} base dir
	base=$STAGEHAND_TESTBED_SCRATCH/$user
	install -d -o "$user" -g "$(id -gn "$user")" -m 0755 "$base" || return 1
	dir=$(mktemp -d "$base/${BATS_TEST_NAME:-test}.XXXXXX") || return 1
	chown "$user:$(id -gn "$user")" "$dir" || return 1
	echo "$dir"
}

write_user_script() {
	local user=$1 path=$2
	cat >"$path" || return 1
	chown "$user:$(id -gn "$user")" "$path" && chmod 0755 "$path"
}

run_as_user() {
	local user=$1 home
	shift
	home=$(getent passwd "$user" | cut -d: -f6)
	# The test harness's own STAGEHAND_* settings must not leak into jobs
	# (sbatch exports the submitter's environment to the job).
	local unset=() v
	for v in $(compgen -e); do
		[[ $v == STAGEHAND_* ]] && unset+=(-u "$v")
	done
	runuser -u "$user" -- env "${unset[@]}" HOME="$home" USER="$user" LOGNAME="$user" SLURM_CONF="$SLURM_CONF" "$@"
}

# The arguments of submit_as_user and try_submit: [-u USER] [-d DIR] SCRIPT
# [SBATCH_ARGS...]. Sets the caller's sub_user, sub_dir (default: the
# script's folder), sub_script and sub_args (declare them local there).
_submit_args() {
	sub_user=$TESTBED_USER sub_dir=""
	while [[ $# -gt 0 ]]; do
		case $1 in
		-u) sub_user=$2; shift 2 ;;
		-d) sub_dir=$2; shift 2 ;;
		*) break ;;
		esac
	done
	sub_script=$1
	shift
	sub_args=("$@")
	[[ -n $sub_dir ]] || sub_dir=$(dirname "$sub_script")
}

submit_as_user() {
	local sub_user sub_dir sub_script sub_args
	_submit_args "$@"
	local user=$sub_user dir=$sub_dir script=$sub_script
	local out errf rc=0
	# sbatch may print notes on stderr (e.g. "job held until its inputs are
	# staged"); only stdout carries the job id.
	errf=$(mktemp)
	out=$(cd "$dir" && run_as_user "$user" sbatch --parsable "${sub_args[@]}" "$script" 2>"$errf") || rc=$?
	if [[ $rc -ne 0 || ! ${out%%;*} =~ ^[0-9]+$ ]]; then
		_tb_fail "sbatch ${sub_args[*]} $script as $user in $dir failed (exit $rc): $out $(cat "$errf")"
		rm -f "$errf"
		return 1
	fi
	rm -f "$errf"
	echo "${out%%;*}"
}

submit() {
	j=$(submit_as_user "$@") || return 1
	JOB=$j
	JOBS+=("$j")
}

try_submit() {
	local sub_user sub_dir sub_script sub_args
	_submit_args "$@"
	run --separate-stderr run_as_user "$sub_user" sbatch --parsable -D "$sub_dir" \
		"${sub_args[@]}" "$sub_script"
	if [[ $status == 0 ]]; then
		JOB=${output%%;*}
		JOBS+=("$JOB")
	fi
}

status_text() {
	local ac=$1
	[[ $ac == *stagehand:status=* ]] || return 0
	ac=${ac#*stagehand:status=}
	ac=${ac%%stagehand:hold=*}
	ac=${ac%%stagehand:v1:*}
	printf '%s\n' "${ac% }"
}

job_status() {
	local line
	line=$(scontrol -o show job "$1" 2>/dev/null) || return 0
	line=${line//$'\n'/ }
	# The status always sits before the record's hold marker or plan.
	status_text "${line#* AdminComment=}"
}

job_field() {
	local job=$1 field=$2 line
	# In burst-buffer mode the BurstBuffer field holds the script's #DATA
	# lines, newlines included: join them, or "-o" is not one line.
	line=$(scontrol -o show job "$job" 2>&1) || _tb_fail "scontrol show job $job: $line" || return 1
	line=${line//$'\n'/ }
	# Values may contain spaces: a field runs until the next " Key=".
	# AdminComment holds stagehand's record, whose status text and markers
	# look like keys: it runs until scontrol's next field, Comment or StdErr.
	if [[ $field == AdminComment ]]; then
		[[ $line == *" AdminComment="* ]] || return 0
		line=${line#* AdminComment=}
		line=${line%% Comment=*}
		printf '%s\n' "${line%% StdErr=*}"
		return 0
	fi
	awk -v f="$field" '
	{
		n = split($0, t, " "); val = ""; found = 0
		for (i = 1; i <= n; i++) {
			if (found) {
				if (t[i] ~ /^[A-Za-z][A-Za-z0-9_:\/]*=/) break
				val = val " " t[i]
			} else if (index(t[i], f "=") == 1) {
				val = substr(t[i], length(f) + 2); found = 1
			}
		}
		if (!found) exit 1
		print val
	}' <<<"$line" || _tb_fail "job $job has no field $field" || return 1
}

job_state() {
	job_field "$1" JobState
}

wait_job_state() {
	local job=$1 want=$2 timeout=${3:-60} st="" i
	for ((i = 0; i < timeout * 5; i++)); do
		st=$(job_state "$job" 2>/dev/null) || st=""
		if [[ -n $st && $st =~ ^($want)$ ]]; then
			echo "$st"
			return 0
		fi
		if [[ -n $st && $st =~ ^($_TB_FINAL_STATES)$ ]]; then
			break
		fi
		sleep 0.2
	done
	{
		echo "job $job: expected state $want within ${timeout}s, got '${st:-unknown}'"
		scontrol show job "$job" 2>&1 || true
		testbed_logs
	} >&2
	return 1
}

wait_for() {
	local timeout=$1 i
	shift
	for ((i = 0; i < timeout * 5; i++)); do
		"$@" && return 0
		sleep 0.2
	done
	_tb_fail "timed out after ${timeout}s waiting for: $*"
}

# reload_daemon: SIGHUP the bed's stagehandd and wait until its log says the
# configuration was reloaded.
reload_daemon() {
	local log=$STAGEHAND_TESTBED_LOGDIR/stagehandd.log n
	n=$(grep -c 'configuration reloaded' "$log" || true)
	kill -HUP "$(cat "$STAGEHAND_TESTBED_DIR/run/stagehandd.pid")"
	wait_for 20 eval '[[ $(grep -c "configuration reloaded" "$log") -gt $n ]]'
}

# conf_extend DIR WHO LINE...: keep the bed's stagehand.conf as DIR/stagehand.conf.orig,
# append LINEs to it (after a comment naming WHO) and reload the daemon.
# conf_restore DIR puts it back. For a whole file's settings (setup_file /
# teardown_file, DIR=$BATS_FILE_TMPDIR).
conf_extend() {
	local dir=$1 who=$2 conf=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	shift 2
	cp -p "$conf" "$dir/stagehand.conf.orig"
	printf '%s\n' "# $who (restored when it ends)" "$@" >>"$conf"
	reload_daemon
}

conf_restore() {
	[[ -f $1/stagehand.conf.orig ]] || return 0
	cp -p "$1/stagehand.conf.orig" "$STAGEHAND_TESTBED_DIR/etc/stagehand.conf"
	reload_daemon
}

cancel_jobs() {
	local j
	for j in "$@"; do
		[[ -n $j ]] && scancel "$j" 2>/dev/null
	done
	return 0
}

# stall_open PATH COMM USER: hold the first process named COMM, running as
# USER, in its open of PATH (tests/integration/stall-open) until
# 'kill "$STALLER"'; the held pid can be read from "${STALL[0]}". PATH may
# be a file or a directory; any mount namespace (a node's too) sees the mark.
stall_open() {
	local ready
	coproc STALL { exec "$STAGEHAND_SRC_DIR/tests/integration/stall-open" "$1" "$2" "$3"; }
	STALLER=$STALL_PID
	read -r -t 10 ready <&"${STALL[0]}"
	[ "$ready" = ready ] || _tb_fail "stall-open on $1 did not get ready (got '$ready')"
}

stall_worker_open() {
	stall_open "$1" stagehandd shtest
}

# stall_mover_open PATH: hold shtest's first stagehand-mover (a mover job's
# process, on whichever node) in its open of PATH.
stall_mover_open() {
	stall_open "$1" stagehand-mover shtest
}

# An epilog-only bed ('scripts/testbed up --epilog-only'): no SPANK plugin;
# each node's Epilog= runs scripts/stagehand-epilog, the only thing that
# tells the daemon that a job ended (docs/admin-guide.md, "Epilog-only
# sites"). Tests that need the plugin skip there with skip_epilog_only, and
# the skip is listed in expected-skips as "[epilog] ".
#   epilog_mode                 true on such a bed (STAGEHAND_TESTBED_NODE_HOOK=epilog)
#   skip_epilog_only WHY        skip this test there: "epilog-only mode: WHY"
#   without_plugin_lines DIR... the lines a job script has to carry on a site
#                               without the plugin, in place of its work: make
#                               the #DATA directories DIR..., and set
#                               STAGEHAND_INPUT_DIR (and, in an array task,
#                               STAGEHAND_SHARED_INPUT_DIR) to their documented
#                               paths (docs/user-guide.md). Nothing on a plugin bed.
epilog_mode() {
	[[ ${STAGEHAND_TESTBED_NODE_HOOK:-spank} == epilog ]]
}

skip_epilog_only() {
	if epilog_mode; then
		skip "epilog-only mode: $*"
	fi
}

without_plugin_lines() {
	epilog_mode || return 0
	(($# == 0)) || printf 'mkdir -p %s\n' "$*"
	printf 'STAGEHAND_INPUT_DIR=%s/$(id -un)/$SLURM_JOB_ID/input\n' "$STAGEHAND_TESTBED_SCRATCH"
	printf '[ -z "$SLURM_ARRAY_JOB_ID" ] || STAGEHAND_SHARED_INPUT_DIR=%s/$(id -un)/$SLURM_ARRAY_JOB_ID/shared\n' \
		"$STAGEHAND_TESTBED_SCRATCH"
}
