#!/usr/bin/env bats
# stagehandd killed with SIGKILL at random points while it stages a job's
# mixed input tree (many small files, a few large ones, subdirectories) and
# while it archives the job's outputs. After each kill it is started again;
# at the end every file must be there with the right checksum, nothing may
# be reported done that is not, and the job must have run and been archived.
#
# Each kill point is classified just before the kill, with the daemon and its
# workers frozen (SIGSTOP to the daemon's process group):
#   write   a worker had a temporary destination file open (mid-file copy)
#   read    a worker was inside a transfer but writing nothing (walk, verify)
#   between no worker was running (between requests, or before/after them)
# Figures go to the report file (see faults.bash).
#
# STAGEHAND_KILLS_PER_PHASE (default 12) kills in each of the two phases.

load ../integration/helpers
load faults

setup() {
	faults_setup
	# Slow enough that kills land inside transfers: 8 MiB/s for all workers.
	printf 'BandwidthCap=8M\n' >"$BATS_TEST_TMPDIR/daemon.conf"
	daemon_conf "$BATS_TEST_TMPDIR/daemon.conf"
}

teardown() {
	faults_teardown
}

# classify PID: what the frozen daemon PID and its workers were doing.
classify() {
	local pid=$1 c kind=between f workers=
	# Workers are the daemon's children, or its worker spawner's.
	for c in $(pgrep -P "$pid"); do
		if [ "$(cat "/proc/$c/comm" 2>/dev/null)" = stagehand-spawn ]; then
			workers="$workers $(pgrep -P "$c")"
		else
			workers="$workers $c"
		fi
	done
	for c in $workers; do
		kind=read
		for f in /proc/"$c"/fd/*; do
			if [[ "$(readlink "$f" 2>/dev/null)" == *.stagehand-* ]]; then
				echo write
				return 0
			fi
		done
	done
	echo "$kind"
}

# kill_phase NAME DONE_CMD: up to $KILLS kills at random moments until
# DONE_CMD succeeds; counts in the globals.
kill_phase() {
	local name=$1 done_cmd=$2 n=0 pid kind ms
	while ((n < KILLS)); do
		ms=$((300 + RANDOM % 3700))
		sleep "$((ms / 1000)).$(printf '%03d' $((ms % 1000)))"
		eval "$done_cmd" && break
		pid=$(daemon_pid) || { daemon_start; continue; }
		kill -STOP -- "-$pid" 2>/dev/null || kill -STOP "$pid"
		kind=$(classify "$pid")
		kill -KILL "$pid"
		kill -CONT -- "-$pid" 2>/dev/null || true
		wait_for 20 test ! -d "/proc/$pid"
		n=$((n + 1))
		case $kind in
		write) K_WRITE=$((K_WRITE + 1)) ;;
		read) K_READ=$((K_READ + 1)) ;;
		*) K_BETWEEN=$((K_BETWEEN + 1)) ;;
		esac
		echo "# $name kill $n after ${ms} ms: $kind" >&3
		daemon_start
	done
	eval "PH_$name=$n"
}

stage_in_done() {
	[[ "$(job_state "$j")" != PENDING ]]
}

archive_done() {
	label_is "$WD/results" archived
}

# check_requests JOB: every item reported done exists at its destination with
# the checksum of its source; echoes the number of done file items.
check_done_items() {
	local job=$1 id src dest n=0 rel
	for id in $(job_requests "$job" | jq -r '.id'); do
		local r
		r=$(api_get "/v1/requests/$id?items=1")
		src=$(jq -r .source <<<"$r")
		dest=$(jq -r .dest <<<"$r")
		[ "$(jq -r .state <<<"$r")" = done ]
		while IFS= read -r rel; do
			[[ -f $dest/$rel ]] || { echo "request $id: item $rel reported done but $dest/$rel is missing" >&2; return 1; }
			cmp -s "$src/$rel" "$dest/$rel" || { echo "request $id: item $rel reported done but differs" >&2; return 1; }
			n=$((n + 1))
		done < <(jq -r '.items[] | select(.type == "file" and .state == "done") | .relpath' <<<"$r")
	done
	echo "$n"
}

@test "SIGKILL at random points during stage-in and archive of a mixed tree: nothing lost, corrupted or falsely done" {
	KILLS=${STAGEHAND_KILLS_PER_PHASE:-12}
	K_WRITE=0 K_READ=0 K_BETWEEN=0
	make_tree shtest "$WD/tree" 1200 3 12
	manifest "$WD/tree" >"$BATS_TEST_TMPDIR/want"
	nfiles=$(wc -l <"$BATS_TEST_TMPDIR/want")
	bytes=$(du -sb "$WD/tree" | cut -f1)
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/tree to=in
#DATA archive=results
cp -a in/. results/
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_for 60 comment_matches "$j" "staging"

	kill_phase stagein stage_in_done
	wait_job_state "$j" COMPLETED 300
	# The job saw exactly the source tree.
	manifest "$WD/in" | diff - "$BATS_TEST_TMPDIR/want"
	[ -z "$(find "$WD/in" -name '.*.stagehand-*')" ]

	wait_for 60 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' 'http://x/v1/requests?job=$j&all=1' |
		jq -e '[.requests[] | select(.action == \"archive\")] | length > 0' >/dev/null"
	kill_phase archive archive_done
	wait_for 300 archive_done
	loc=$(getfattr --only-values -n user.stagehand.location "$WD/results")
	manifest "$loc" | diff - "$BATS_TEST_TMPDIR/want"
	[ -z "$(find "$loc" -name '.*.stagehand-*')" ]
	[ "$(stat -c %U "$loc/sub0/big-0.bin")" = shtest ]

	# Every request of the job is done and every item it calls done is right.
	done_items=$(check_done_items "$j")
	[ "$done_items" -eq $((2 * nfiles)) ]
	[[ "$(job_field "$j" AdminComment)" =~ "stagehand:hold=released" ]]

	total=$((PH_stagein + PH_archive))
	report "kill -9: $total kills ($PH_stagein in stage-in, $PH_archive in archive): $K_WRITE mid-file write, $K_READ in a transfer between files (walk/verify), $K_BETWEEN between transfers; tree $nfiles files, $bytes bytes; 0 lost, 0 corrupted, 0 done-but-missing ($done_items done file items checked)"
	[ "$total" -ge 20 ] || [ "$KILLS" -lt 10 ]
}
