#!/usr/bin/env bats
# 0305-submit-hostile.bats - one user's hostile batch script must not stall
# slurmctld (issue 47, finding 1): a real sbatch of ~4 MB scripts built to
# make the #DATA parser slow (near-miss lines, #DATA after a command, far
# too many directives) costs at most 3x a plain script of the same size,
# another user's squeue answers within 1 s and their sbatch within 2 s all
# along, and the user sees a capped warning list ending in "and N more".
#
# Jobs are submitted with --hold and cancelled: only the submission is
# under test. tests/bench/submit-hostile measures the parsers alone.

bats_require_minimum_version 1.5.0

load helpers

# Bytes of each script: under Slurm's default max_script_size (4 MB).
SIZE=4000000

setup_file() {
	testbed_require
	grep -q '^JobSubmitPlugins=lua' "$SLURM_CONF" ||
		skip "test bed runs without JobSubmitPlugins=lua"
	id shtest2 >/dev/null 2>&1 || skip "user shtest2 missing"
}

setup() {
	JOBS=()
	WD=$(user_workdir)
}

teardown() {
	local j
	for j in "${JOBS[@]}"; do scancel "$j" 2>/dev/null || true; done
	touch "$WD/stop"
	[[ -z ${WATCH_PID:-} ]] || wait "$WATCH_PID" 2>/dev/null || true
	[[ -z ${WATCH2_PID:-} ]] || wait "$WATCH2_PID" 2>/dev/null || true
	[[ ! -e $WD/sbatch2.jobs ]] || xargs -r scancel <"$WD/sbatch2.jobs" 2>/dev/null || true
	rm -rf "$WD" "${WD2:-}"
}

# mk NAME UNIT [TAIL]: $WD/NAME.sh, a header with one valid directive, then
# the line UNIT repeated up to SIZE bytes, then TAIL.
mk() {
	local name=$1 unit=$2 tail=${3:-} head n
	head=$'#!/bin/bash\n#SBATCH --time=1\n#DATA exempt=tmp/\n'
	n=$(((SIZE - ${#head} - ${#tail}) / (${#unit} + 1)))
	{
		printf '%s' "$head"
		yes -- "$unit" | head -n "$n"
		printf '%s' "$tail"
	} >"$WD/$name.sh"
	chown "$TESTBED_USER": "$WD/$name.sh"
}

# sub NAME: sbatch --hold NAME.sh as the test user (at most 60 s); sets
# MS (wall time in ms), RC, OUT and ERR.
sub() {
	local t0 t1 errf
	errf=$(mktemp)
	t0=$(date +%s%N)
	RC=0
	OUT=$(cd "$WD" && timeout 60 runuser -u "$TESTBED_USER" -- env SLURM_CONF="$SLURM_CONF" \
		sbatch --parsable --hold "$WD/$1.sh" 2>"$errf") || RC=$?
	t1=$(date +%s%N)
	ERR=$(cat "$errf")
	rm -f "$errf"
	MS=$(((t1 - t0) / 1000000))
	[[ ${OUT%%;*} =~ ^[0-9]+$ ]] && JOBS+=("${OUT%%;*}")
	echo "# sbatch $1: ${MS} ms, exit $RC" >&3
}

# Another user's squeue, every 0.05 s, each timed (ms, exit) into
# $WD/squeue.ms; and the same user's sbatch of a small held job every 0.3 s
# into $WD/sbatch2.ms (job ids into $WD/sbatch2.jobs). squeue takes
# slurmctld's read locks, which a slow job_submit (under a read lock in
# 22.05) does not block; a submission waits behind it, as every user's did
# in issue 47.
watch_other_user() {
	: >"$WD/squeue.ms"
	: >"$WD/sbatch2.ms"
	: >"$WD/sbatch2.jobs"
	WD2=$(user_workdir shtest2)
	printf '#!/bin/bash\n#SBATCH --time=1\n#DATA exempt=tmp/\ntrue\n' >"$WD2/small.sh"
	chown shtest2: "$WD2/small.sh"
	(
		while [[ ! -e $WD/stop ]]; do
			t0=$(date +%s%N)
			timeout 10 runuser -u shtest2 -- env SLURM_CONF="$SLURM_CONF" squeue -h >/dev/null 2>&1
			echo "$((($(date +%s%N) - t0) / 1000000)) $?" >>"$WD/squeue.ms"
			sleep 0.05
		done
	) &
	WATCH_PID=$!
	(
		while [[ ! -e $WD/stop ]]; do
			t0=$(date +%s%N)
			echo "$t0" >"$WD/sbatch2.inflight"
			(cd "$WD2" && timeout -k 1 15 runuser -u shtest2 -- env SLURM_CONF="$SLURM_CONF" \
				sbatch --parsable --hold "$WD2/small.sh" >"$WD/sbatch2.out" 2>/dev/null)
			rc=$?
			rm -f "$WD/sbatch2.inflight"
			echo "$((($(date +%s%N) - t0) / 1000000)) $rc" >>"$WD/sbatch2.ms"
			cut -d';' -f1 "$WD/sbatch2.out" >>"$WD/sbatch2.jobs"
			sleep 0.3
		done
	) &
	WATCH2_PID=$!
}

# After the watchers: an sbatch of shtest2 still waiting counts, with the
# time it has waited so far.
other_user_inflight() {
	local t0
	t0=$(cat "$WD/sbatch2.inflight" 2>/dev/null) || return 0
	echo "$((($(date +%s%N) - t0) / 1000000)) inflight" >>"$WD/sbatch2.ms"
}

@test "hostile 4 MB scripts: sbatch at most 3x a plain one, another user's squeue within 1 s" {
	mk plain 'true # a plain command line of about the same length'
	mk nearmiss '#data ' $'true x=1\n'
	mk aftercmd '#DATA' ''
	# the command that ends the leading block goes before the #DATA lines
	sed -i '4i true' "$WD/aftercmd.sh"
	# valid directives, each its own path, far past MaxDirectives (64)
	{
		printf '#!/bin/bash\n#SBATCH --time=1\n#DATA exempt=tmp/\n'
		seq 1 $((SIZE / 20)) | sed 's|^|#DATA exempt=tmp/d|' | head -c $((SIZE - 60)) | sed '$d'
	} >"$WD/manydirs.sh"
	chown "$TESTBED_USER": "$WD/manydirs.sh"
	watch_other_user
	local plain=() ms
	for _ in 1 2 3; do
		sub plain
		[ "$RC" -eq 0 ]
		plain+=("$MS")
	done
	plain_ms=$(printf '%s\n' "${plain[@]}" | sort -n | sed -n 2p)
	# 3x the plain median, with half a second for a loaded machine: the old
	# parser took 17 s to minutes here (sbatch timed out after 10 s)
	bound=$((3 * plain_ms + 500))
	echo "# plain sbatch median ${plain_ms} ms (${plain[*]}), bound ${bound} ms" >&3

	# all three first, while shtest2's squeue runs; the checks after
	sub nearmiss
	near_rc=$RC near_ms=$MS
	sub aftercmd
	after_rc=$RC after_ms=$MS after_err=$ERR
	sub manydirs
	many_rc=$RC many_ms=$MS many_err=$ERR

	touch "$WD/stop"
	wait "$WATCH_PID" || true
	sleep 1
	other_user_inflight
	wait "$WATCH2_PID" || true
	WATCH_PID= WATCH2_PID=
	n=$(wc -l <"$WD/squeue.ms")
	worst=$(sort -n "$WD/squeue.ms" | tail -n 1)
	n2=$(wc -l <"$WD/sbatch2.ms")
	worst2=$(sort -n "$WD/sbatch2.ms" | tail -n 1)
	echo "# shtest2 sbatch times: $(tr "\n" " " <"$WD/sbatch2.ms")" >&3
	echo "# shtest2 meanwhile: $n squeue, slowest ${worst% *} ms; $n2 sbatch, slowest ${worst2% *} ms" >&3
	[ "$n" -ge 3 ]
	[ "$n2" -ge 1 ]
	# every squeue answered (exit 0), each within 1 s
	run ! grep -v ' 0$' "$WD/squeue.ms"
	[ "${worst% *}" -lt 1000 ]
	# every small sbatch of shtest2 accepted, each within 2 s
	run ! grep -v ' 0$' "$WD/sbatch2.ms"
	[ "${worst2% *}" -lt 2000 ]

	[ "$near_rc" -eq 0 ]
	[ "$near_ms" -le "$bound" ]
	[ "$after_rc" -eq 0 ]
	[ "$after_ms" -le "$bound" ]
	echo "$many_err" | sed 's/^/# /' >&3
	[ "$many_rc" -ne 0 ]
	[[ $many_err == *"line 67: more than 64 #DATA directives; the limit is 64"* ]]
	[ "$many_ms" -le "$bound" ]

	# the user saw the first 20 warnings, then one line with the rest: the
	# #DATA lines 5-10000 less the 20 shown, and one for those past line
	# 10000, where the parsers stop reading line by line
	echo "$after_err" | head -n 3 | sed 's/^/# /' >&3
	echo "$after_err" | tail -n 1 | sed 's/^/# /' >&3
	[ "$(grep -c 'warning: #DATA after the first command line is ignored' <<<"$after_err")" -eq 20 ]
	grep -Fq 'line 25: warning: and 9977 more warnings (from line 25 on) not shown' <<<"$after_err"
	[ "$(wc -c <<<"$after_err")" -lt 10240 ]
}
