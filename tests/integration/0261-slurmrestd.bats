#!/usr/bin/env bats
# Jobs submitted through slurmrestd, the REST API that web portals use
# (docs/user-guide.md, "Submitting through slurmrestd"), on the bed in hold
# mode: Debian's slurmrestd, started here as shtest with rest_auth/local on
# a UNIX socket in the bed's run directory (no TCP port), so what it submits
# is shtest's. A good job is held, staged, released and archived as with
# sbatch; a bad #DATA line is refused, and the test pins down what the REST
# client is told and where the line's message goes instead.

bats_require_minimum_version 1.5.0

load helpers

# The REST API version of each Slurm release tried here.
restd_api() {
	case $(sinfo --version | awk '{ print $2 }') in
	22.05.*) echo v0.0.38 ;;
	*) return 1 ;;
	esac
}

setup_file() {
	testbed_require
	command -v slurmrestd >/dev/null ||
		skip "slurmrestd is not installed (scripts/install-deps installs Debian's)"
	API=$(restd_api) || skip "slurmrestd of Slurm $(sinfo --version) not tried yet"
	RESTD_DIR=$STAGEHAND_TESTBED_DIR/run/restd-shtest
	RESTD_SOCK=$RESTD_DIR/sock
	RESTD_LOG=$STAGEHAND_TESTBED_LOGDIR/slurmrestd-shtest.log
	install -d -o shtest -g shtest -m 0700 "$RESTD_DIR"
	rm -f "$RESTD_SOCK"
	: >"$RESTD_LOG"
	# setpriv execs: $! is slurmrestd itself (runuser would stay its parent)
	setpriv --reuid=shtest --regid=shtest --init-groups env SLURM_CONF="$SLURM_CONF" \
		slurmrestd -a rest_auth/local -s "openapi/$API" "unix:$RESTD_SOCK" \
		</dev/null >>"$RESTD_LOG" 2>&1 3>&- &
	echo $! >"$RESTD_DIR/pid"
	wait_for 20 test -S "$RESTD_SOCK"
	export API RESTD_DIR RESTD_SOCK RESTD_LOG
}

teardown_file() {
	[[ -n ${RESTD_DIR:-} && -f $RESTD_DIR/pid ]] || return 0
	kill "$(cat "$RESTD_DIR/pid")" 2>/dev/null || true
	rm -f "$RESTD_DIR/pid"
}

setup() {
	daemon_setup spank
	[[ ${STAGEHAND_TESTBED_SUBMIT_MODE:-hold} == hold ]] ||
		skip "hold-mode test: the bed runs in ${STAGEHAND_TESTBED_SUBMIT_MODE} mode"
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

# rest_submit SCRIPT_FILE OUT: POST SCRIPT_FILE's text as a job of shtest
# run in $WD, the response into OUT.
rest_submit() {
	jq -n --rawfile s "$1" --arg wd "$WD" '{script: $s, job: {name: "rest",
		current_working_directory: $wd, standard_output: ($wd + "/out-%j.txt"),
		environment: {PATH: "/usr/bin:/bin"}}}' >"$WD/req.json"
	chown shtest:shtest "$WD/req.json"
	runuser -u shtest -- curl -sS --max-time 30 --unix-socket "$RESTD_SOCK" \
		-H 'Content-Type: application/json' --data-binary @"$WD/req.json" \
		"http://localhost/slurm/$API/job/submit" >"$2"
}

@test "slurmrestd: a good job is held, staged, released and archived as with sbatch" {
	install -d -o shtest -g shtest "$WD/src"
	echo "input via REST $RANDOM" >"$WD/src/in.txt"
	chown shtest:shtest "$WD/src/in.txt"
	cat >"$WD/job.sh" <<EOF
#!/bin/bash
#DATA stage_in=$WD/src/in.txt
#DATA archive=res
mkdir -p res
cp "\$STAGEHAND_INPUT_DIR/in.txt" res/
EOF
	rest_submit "$WD/job.sh" "$WD/resp.json"
	cat "$WD/resp.json" >&2
	j=$(jq -r '.job_id' "$WD/resp.json")
	# 22.05's slurmrestd lists the hold as an error (2042, "Job is in held
	# state, pending scheduler release") beside the job id; later releases
	# make it a warning. docs/user-guide.md tells portals: a job_id means
	# the job was submitted.
	[ "$(jq -c '[.errors[].error_code]' "$WD/resp.json")" = "[2042]" ]
	[[ $j =~ ^[0-9]+$ ]]
	JOBS+=("$j")
	# The note sbatch prints reaches the REST client too.
	[[ "$(jq -r '.job_submit_user_msg' "$WD/resp.json")" == *"held until its stage_in inputs are staged"* ]]
	[[ "$(job_field "$j" UserId)" == "shtest("* ]]
	[[ "$(job_field "$j" AdminComment)" == *"stagehand:hold="* ]]
	wait_job_state "$j" COMPLETED 90
	[[ "$(job_field "$j" AdminComment)" == *"stagehand:hold=released"* ]]
	[[ "$(job_status "$j")" =~ "inputs staged (1 files" ]]
	wait_for 60 test -f "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/res/in.txt"
	cmp "$WD/src/in.txt" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/res/in.txt"
}

@test "slurmrestd: a bad #DATA line is refused; the client gets Slurm's error text, the line's message is in slurmrestd's log and 'stagehand check'" {
	cat >"$WD/bad.sh" <<EOF
#!/bin/bash
#DATA archive=res
#DATA archive=res2 bogus=1
echo never
EOF
	chown shtest:shtest "$WD/bad.sh"
	before=$(squeue -h -u shtest -o %i | wc -l)
	rest_submit "$WD/bad.sh" "$WD/resp.json"
	cat "$WD/resp.json" >&2
	# Refused: no job id, no new job.
	[ "$(jq -r '.job_id // "none"' "$WD/resp.json")" = none ]
	[ "$(squeue -h -u shtest -o %i | wc -l)" = "$before" ]
	# What Slurm 22.05 hands the REST client: the return code's text only
	# (job_submit/lua's message is not part of a failed submit's response).
	[ "$(jq -r '.errors[0].error' "$WD/resp.json")" = "Unspecified error" ]
	# The message with the line goes to slurmrestd's own log...
	wait_for 10 grep -q "stagehand: line 3: unknown key 'bogus'" "$RESTD_LOG"
	# ...and 'stagehand check', where docs/user-guide.md sends portal users,
	# names the same line.
	run run_as_user shtest "$STAGEHAND" check "$WD/bad.sh"
	[ "$status" -ne 0 ]
	[[ $output == *"bad.sh:3: error: unknown key 'bogus'"* ]]
}
