#!/usr/bin/env bats
# A job's staged inputs after the job (docs/admin-guide.md, "Staged inputs
# after the job"): the scratch input directory is labelled 'purge' at the
# end (hold mode) or teardown (bb mode), and InputRetention after that
# stagehandd removes, as the owner, exactly the files it staged that are
# still there unchanged. Real jobs on the test bed, as an ordinary user; the
# same file runs on a burst-buffer bed ('make integration-bb'), where
# teardown is what schedules the removal.
#
# Each test sets InputRetention in the bed's stagehand.conf (SIGHUP) and
# restores the file afterwards.

load helpers

setup() {
	daemon_setup
	SHCONF=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	ROOTDIR=
	cp -p "$SHCONF" "$BATS_TEST_TMPDIR/stagehand.conf.orig"
}

teardown() {
	[[ -z ${STALLER:-} ]] || kill "$STALLER" 2>/dev/null || true
	cancel_jobs "${JOBS[@]}"
	[[ -z $ROOTDIR ]] || rm -rf "$ROOTDIR"
	if [[ -f $BATS_TEST_TMPDIR/stagehand.conf.orig ]]; then
		cp -p "$BATS_TEST_TMPDIR/stagehand.conf.orig" "$SHCONF"
		reload_daemon || true
	fi
}

# retention VALUE: InputRetention=VALUE for the daemon from now on.
retention() {
	cp -p "$BATS_TEST_TMPDIR/stagehand.conf.orig" "$SHCONF"
	printf 'InputRetention=%s\n' "$1" >>"$SHCONF"
	reload_daemon
}

label() {
	getfattr --only-values -n user.stagehand.policy "$1" 2>/dev/null
}

label_is() {
	[[ "$(label "$1")" == "$2" ]]
}

# status JOB: 'stagehand status JOB' as the owner.
status_of() {
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$1"
}

status_says() {
	[[ "$(status_of "$1")" =~ $2 ]]
}

# Inputs: a file, a tree (set/sub/b.dat) and a file the job moves out.
inputs() {
	install -d -o shtest -g "$(id -gn shtest)" "$WD/proj" "$WD/proj/set" "$WD/proj/set/sub"
	for f in a.dat m.dat set/sub/b.dat; do
		runuser -u shtest -- dd if=/dev/urandom of="$WD/proj/$f" bs=64k count=4 status=none
	done
}

job_script() {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/proj/a.dat
#DATA stage_in=$WD/proj/set
#DATA stage_in=$WD/proj/m.dat
cmp "\$STAGEHAND_INPUT_DIR/a.dat" "$WD/proj/a.dat" || exit 1
mv "\$STAGEHAND_INPUT_DIR/m.dat" "$WD/kept-m.dat"
echo mine > "\$STAGEHAND_INPUT_DIR/mine.txt"
$1
EOF
}

@test "InputRetention=0: the staged inputs go at the end; what the job moved out or made stays" {
	retention 0
	inputs
	job_script ""
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	in=$STAGEHAND_TESTBED_SCRATCH/shtest/$j/input
	# The removal is over when the daemon says so; only then is every staged
	# file surely gone (it removes them one after another).
	wait_for 60 status_says "$j" "inputs: removed"
	[ ! -e "$in/a.dat" ]
	[ ! -e "$in/set" ]
	# The job's own file and the one it moved out are not stagehand's to remove.
	[ "$(cat "$in/mine.txt")" = mine ]
	cmp "$WD/kept-m.dat" "$WD/proj/m.dat"
	# The directory stays for what the job left in it, labelled purge.
	label_is "$in" purge
	# The sources are never touched.
	[ -f "$WD/proj/a.dat" ] && [ -f "$WD/proj/set/sub/b.dat" ]
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" tags --verify "$in"
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(metric 'stagehand_input_cleanups{state="done"}')" -ge 1 ]
	[ "$(metric stagehand_input_cleanup_bytes_freed_total)" -ge $((2 * 256 * 1024)) ]
}

@test "InputRetention=never: the inputs are labelled purge and kept" {
	retention never
	inputs
	job_script ""
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	in=$STAGEHAND_TESTBED_SCRATCH/shtest/$j/input
	wait_for 60 label_is "$in" purge
	sleep 5
	cmp "$in/a.dat" "$WD/proj/a.dat"
	[ -f "$in/set/sub/b.dat" ]
	run status_of "$j"
	[[ ! "$output" =~ "inputs:" ]]
}

@test "InputRetention=25s: the inputs stay until it has passed, then go; status says when" {
	retention 25s
	inputs
	job_script ""
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	in=$STAGEHAND_TESTBED_SCRATCH/shtest/$j/input
	wait_for 30 label_is "$in" purge
	wait_for 30 status_says "$j" "will be removed after"
	# When: InputRetention after the daemon processed the job's end, which
	# is after slurmctld's EndTime (a slow daemon only makes it later).
	local when due end purge started LOG=$STAGEHAND_TESTBED_DIR/log/stagehandd.log
	when=$(status_of "$j" | sed -n 's/.* will be removed after \([0-9-]* [0-9:]*\) .*/\1/p')
	due=$(date -d "$when" +%s)
	end=$(date -d "$(job_field "$j" EndTime)" +%s)
	echo "job $j ended at $end; removal due at $due ($when)"
	((due - end >= 25 && due - end <= 60))
	# Until then the inputs are there (looked at while it is surely before).
	if (($(date +%s) < due - 2)); then
		[ -f "$in/a.dat" ]
		[ -f "$in/set/sub/b.dat" ]
	fi
	wait_for 90 status_says "$j" "inputs: removed"
	[ ! -e "$in/a.dat" ]
	[ ! -e "$in/set" ]
	[ -f "$in/mine.txt" ]
	# The removal's worker did not start before it was due (the daemon's log,
	# whole seconds): not early, however this machine's speed spaced the looks.
	purge=$(sed -n "s/.* request \([0-9]*\): purge of .* for job $j, after InputRetention.*/\1/p" "$LOG" | tail -n1)
	[[ $purge =~ ^[0-9]+$ ]]
	started=$(sed -n "s/^\([0-9T:-]*\) .*request $purge: worker [0-9]* started as uid.*/\1/p" "$LOG" | head -n1)
	[ -n "$started" ]
	echo "purge request $purge's worker started at $started"
	(($(date -d "$started" +%s) >= due))
}

@test "a removal scheduled for later survives a daemon restart (kill -9): still queued, still announced" {
	retention 1h
	inputs
	job_script ""
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	in=$STAGEHAND_TESTBED_SCRATCH/shtest/$j/input
	wait_for 30 status_says "$j" "will be removed after"
	purge_state() {
		curl -sf --max-time 5 --unix-socket "$STAGEHAND_SOCKET" "http://x/v1/requests?job=$j&all=1" |
			jq -r '[.requests[] | select(.action == "purge") | .state] | join(",")'
	}
	[ "$(purge_state)" = queued ]
	pid=$(cat "$STAGEHAND_TESTBED_DIR/run/stagehandd.pid")
	kill -KILL "$pid"
	wait_for 30 test ! -d "/proc/$pid"
	"$TESTBED" up >/dev/null
	# An hour's retention: nothing can have come due; the schedule is kept.
	[ "$(purge_state)" = queued ]
	status_says "$j" "will be removed after"
	[ -f "$in/a.dat" ]
}

@test "stagehandd killed during the removal: after its restart the removal still happens" {
	retention 0
	inputs
	# The job waits for go, so that the removal's worker can be held before it starts.
	job_script "while [ ! -e $WD/go ]; do sleep 0.2; done"
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" RUNNING 90
	in=$STAGEHAND_TESTBED_SCRATCH/shtest/$j/input
	# The removal (a worker as shtest) is held in its open of set/sub/, the
	# directory of set/sub/b.dat (the resolver opens it in one call; set/ is
	# only crossed): the daemon is killed while b.dat is surely still there.
	stall_worker_open "$in/set/sub"
	run_as_user shtest touch "$WD/go"
	wait_job_state "$j" COMPLETED 90
	read -r -t 90 held <&"${STALL[0]}"
	[[ $held =~ ^[0-9]+$ ]]
	pid=$(cat "$STAGEHAND_TESTBED_DIR/run/stagehandd.pid")
	kill -KILL "$pid"
	wait_for 30 test ! -d "/proc/$pid"
	[ -f "$in/set/sub/b.dat" ]
	kill "$STALLER"
	STALLER=
	"$TESTBED" up >/dev/null
	wait_for 90 status_says "$j" "inputs: removed"
	[ ! -e "$in/set" ]
	[ ! -e "$in/a.dat" ]
	[ -f "$in/mine.txt" ]
}

@test "a symlink the user plants in input/ is never followed: root's and the user's files elsewhere stay" {
	retention 0
	inputs
	# Root's copy of the staged tree, same size and mtime, where the link points.
	ROOTDIR=$(mktemp -d "$STAGEHAND_TESTBED_SCRATCH/rootowned.XXXXXX")
	chmod 0755 "$ROOTDIR"
	mkdir -p "$ROOTDIR/sub"
	cp -p "$WD/proj/set/sub/b.dat" "$ROOTDIR/sub/b.dat"
	chmod 0666 "$ROOTDIR/sub/b.dat"
	chmod 0777 "$ROOTDIR/sub"
	# The job swaps the staged tree for a link to root's, and a.dat for a
	# link to a copy of its own elsewhere.
	job_script "mv \"\$STAGEHAND_INPUT_DIR/set\" \"$WD/set-moved\"
ln -s \"$ROOTDIR\" \"\$STAGEHAND_INPUT_DIR/set\"
cp -p \"\$STAGEHAND_INPUT_DIR/a.dat\" \"$WD/a-copy.dat\"
rm \"\$STAGEHAND_INPUT_DIR/a.dat\"
ln -s \"$WD/a-copy.dat\" \"\$STAGEHAND_INPUT_DIR/a.dat\""
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	in=$STAGEHAND_TESTBED_SCRATCH/shtest/$j/input
	wait_for 60 status_says "$j" "inputs: removed"
	cmp "$ROOTDIR/sub/b.dat" "$WD/proj/set/sub/b.dat"
	cmp "$WD/a-copy.dat" "$WD/proj/a.dat"
	[ -L "$in/set" ] && [ -L "$in/a.dat" ]
	[ -f "$WD/set-moved/sub/b.dat" ]
	grep -q "not followed" "$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"
}
