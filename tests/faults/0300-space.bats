#!/usr/bin/env bats
# Running out of room and losing the source: a full destination filesystem
# for stage-in and for archive, a source removed mid-transfer, and the
# daemon's state database on a full filesystem. Small tmpfs mounts stand in
# for the full filesystems (unmounted at teardown).

bats_require_minimum_version 1.5.0

load ../integration/helpers
load faults

setup() {
	faults_setup
}

teardown() {
	faults_teardown
}

# no_final_file DIR NAME: NAME is not in DIR (a partial copy is never put in place).
no_final_file() {
	[ ! -e "$1/$2" ]
}

@test "stage-in destination full: fails with 'No space' in status and Comment, nothing done; retried after space is freed, it runs" {
	FULL=$STAGEHAND_TESTBED_SCRATCH/full-$BATS_TEST_NUMBER-$$
	tmpfs_mount "$FULL" 8m
	user_file shtest "$WD/src/input.dat" 16
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/input.dat to=$FULL/%j/input.dat
cmp $FULL/\$SLURM_JOB_ID/input.dat $WD/src/input.dat && echo same > result
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_for 60 comment_matches "$j" "stage-in failed"
	c=$(comment "$j")
	echo "comment: $c"
	[[ $c =~ "No space left on device" ]]
	[[ $c =~ "stagehand retry $j" ]]
	[ "$(job_state "$j")" = PENDING ]
	r=$(job_requests "$j")
	[ "$(jq -r .state <<<"$r")" = failed_final ]
	[[ "$(jq -r .error <<<"$r")" =~ "No space left on device" ]]
	[ "$(jq -r .files_done <<<"$r")" = 0 ]
	id=$(jq -r .id <<<"$r")
	[ "$(api_get "/v1/requests/$id?items=1" | jq '[.items[] | select(.state == "done")] | length')" = 0 ]
	# No partial file under the final name, and no temporary file left behind.
	no_final_file "$FULL/$j" input.dat
	[ -z "$(find "$FULL" -name '.*.stagehand-*')" ]
	# The user sees it with the CLI too.
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$j"
	echo "$output"
	[[ $output =~ "No space left on device" ]]
	report "ENOSPC stage-in: status '$(jq -r .error <<<"$r")'; comment '$c'"
	# Room again: retry, staged, released, run.
	mount -o remount,size=64m "$FULL"
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" retry "$j"
	[ "$status" -eq 0 ]
	wait_job_state "$j" COMPLETED 120
	[ "$(cat "$WD/result")" = same ]
}

@test "archive destination full: the archive fails with 'No space', the source stays labelled; retried after space is freed, archived" {
	FULL=$STAGEHAND_TESTBED_ARCHIVE/full-$BATS_TEST_NUMBER-$$
	tmpfs_mount "$FULL" 4m
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results to=$FULL/%j
head -c 1048576 /dev/urandom > results/small.bin
head -c 10485760 /dev/urandom > results/large.bin
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	wait_for 90 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' 'http://x/v1/requests?job=$j&all=1' |
		jq -e '.requests[] | select(.action == \"archive\" and .state == \"failed_final\")' >/dev/null"
	r=$(job_requests "$j")
	echo "$r"
	[[ "$(jq -r .error <<<"$r")" =~ "No space left on device" ]]
	id=$(jq -r .id <<<"$r")
	# Whatever is reported done is really there; the large file is not.
	items=$(api_get "/v1/requests/$id?items=1")
	while IFS= read -r rel; do
		cmp "$WD/results/$rel" "$FULL/$j/$rel"
	done < <(jq -r '.items[] | select(.state == "done") | .relpath' <<<"$items")
	[ "$(jq -r '.items[] | select(.relpath == "large.bin") | .state' <<<"$items")" = failed ]
	no_final_file "$FULL/$j" large.bin
	[ -z "$(find "$FULL" -name '.*.stagehand-*')" ]
	# Not labelled archived, and the source is untouched.
	run ! label_is "$WD/results" archived
	[ -f "$WD/results/large.bin" ]
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$j"
	echo "$output"
	[[ $output =~ "No space left on device" ]]
	report "ENOSPC archive: status '$(jq -r .error <<<"$r")'"
	mount -o remount,size=64m "$FULL"
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" retry "$j"
	echo "$output"
	[ "$status" -eq 0 ]
	wait_for 60 label_is "$WD/results" archived
	cmp "$WD/results/large.bin" "$FULL/$j/large.bin"
	cmp "$WD/results/small.bin" "$FULL/$j/small.bin"
}

@test "source removed during a stage-in: the request fails with the missing path, nothing of it is done; restored and retried, it runs" {
	printf 'BandwidthCap=10M\n' >"$BATS_TEST_TMPDIR/daemon.conf"
	daemon_conf "$BATS_TEST_TMPDIR/daemon.conf"
	make_tree shtest "$WD/tree" 200 2 8
	manifest "$WD/tree" >"$BATS_TEST_TMPDIR/want"
	cp -a "$WD/tree" "$BATS_TEST_TMPDIR/tree.orig"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/tree to=in
echo ran > ran.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_for 60 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' 'http://x/v1/requests?job=$j&all=1' |
		jq -e '.requests[0] | .state == \"running\" and .files_done > 5' >/dev/null"
	# (A rename would not do: the worker holds the tree open and copies it whole.)
	runuser -u shtest -- rm -rf "$WD/tree"
	wait_for 90 comment_matches "$j" "stage-in failed"
	c=$(comment "$j")
	echo "comment: $c"
	[[ $c =~ "No such file" || $c =~ "changed" ]]
	[ "$(job_state "$j")" = PENDING ]
	[ ! -e "$WD/ran.txt" ]
	r=$(job_requests "$j")
	[ "$(jq -r .state <<<"$r")" = failed_final ]
	report "source removed mid-transfer: status '$(jq -r .error <<<"$r")'"
	# Everything in the destination came from the source, whole.
	(cd "$WD/in" && find . -type f ! -name '.*.stagehand-*' -print0 | sort -z | xargs -0 -r sha256sum) |
		while read -r sum rel; do grep -qxF "$sum  $rel" "$BATS_TEST_TMPDIR/want"; done
	cp -a "$BATS_TEST_TMPDIR/tree.orig" "$WD/tree"
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" retry "$j"
	[ "$status" -eq 0 ]
	wait_job_state "$j" COMPLETED 180
	manifest "$WD/in" | diff - "$BATS_TEST_TMPDIR/want"
}

@test "files of the source tree deleted during a stage-in: never reported done, the job stays held" {
	printf 'BandwidthCap=10M\n' >"$BATS_TEST_TMPDIR/daemon.conf"
	daemon_conf "$BATS_TEST_TMPDIR/daemon.conf"
	make_tree shtest "$WD/tree" 300 2 8
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/tree to=in
echo ran > ran.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_for 60 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' 'http://x/v1/requests?job=$j&all=1' |
		jq -e '.requests[0] | .state == \"running\" and .files_done > 5' >/dev/null"
	runuser -u shtest -- find "$WD/tree" -name 'small-*' -delete
	wait_for 90 comment_matches "$j" "stage-in failed"
	[ "$(job_state "$j")" = PENDING ]
	[ ! -e "$WD/ran.txt" ]
	id=$(job_requests "$j" | jq -r .id)
	items=$(api_get "/v1/requests/$id?items=1")
	# Every item reported done is in the destination.
	while IFS= read -r rel; do
		[ -f "$WD/in/$rel" ]
	done < <(jq -r '.items[] | select(.state == "done" and .type == "file") | .relpath' <<<"$items")
	report "source files deleted mid-transfer: '$(jq -r .error <<<"$items")'"
}

@test "state database on a full filesystem: requests are refused cleanly, the daemon stays up, queued work survives and runs when space returns" {
	DBDIR=$STAGEHAND_TESTBED_DIR/faults-db-$$
	tmpfs_mount "$DBDIR" 2m 0700
	printf 'StateDB=%s/stagehand.db\nBandwidthCap=5M\nWorkers=1\n' "$DBDIR" >"$BATS_TEST_TMPDIR/daemon.conf"
	daemon_conf "$BATS_TEST_TMPDIR/daemon.conf"
	pid=$(daemon_pid)
	user_file shtest "$WD/src/a.dat" 10
	user_file shtest "$WD/src/b.dat" 1
	install -d -o shtest -g shtest "$WD/dst"
	# One long transfer running, one queued behind it (Workers=1).
	body() { printf '{"action":"stage_in","source":"%s","dest":"%s"}' "$1" "$2"; }
	api -u shtest POST /v1/requests "$(body "$WD/src/a.dat" "$WD/dst/a.dat")"; r1=$API_BODY
	[ "$API_STATUS" = 201 ]
	api -u shtest POST /v1/requests "$(body "$WD/src/b.dat" "$WD/dst/b.dat")"; r2=$API_BODY
	[ "$API_STATUS" = 201 ]
	id1=$(jq -r .id <<<"$r1")
	id2=$(jq -r .id <<<"$r2")
	# Fill the database's filesystem.
	dd if=/dev/zero of="$DBDIR/filler" bs=64k status=none 2>/dev/null || true
	[ "$(df --output=avail -B1 "$DBDIR" | tail -n1)" -lt 65536 ]
	refused=0 other=0 codes=""
	for k in $(seq 1 20); do
		api -u shtest POST /v1/requests "$(body "$WD/src/b.dat" "$WD/dst/b$k.dat")"; out=$API_BODY
		codes+=" $API_STATUS"
		if [[ $API_STATUS == 5* ]]; then
			refused=$((refused + 1))
			# The refusal says what happened.
			jq -e '.error | test("full|space|disk|database"; "i")' <<<"$out" >/dev/null || { echo "unclear error: $out"; false; }
		elif [[ $API_STATUS == 201 ]]; then
			other=$((other + 1))
		else
			echo "unexpected status $API_STATUS: $out"
			false
		fi
		api GET /v1/health
		[ "$API_STATUS" = 200 ]
	done
	echo "statuses:$codes"
	# The daemon is still the same process: no crash, no restart loop.
	[ "$(daemon_pid)" = "$pid" ]
	[ "$refused" -gt 0 ]
	sleep 5
	[ "$(daemon_pid)" = "$pid" ]
	# Space returns: the queued work finishes, new requests are taken again.
	rm -f "$DBDIR/filler"
	wait_for 90 bash -c "[ \"\$(curl -sf --unix-socket '$STAGEHAND_SOCKET' http://x/v1/requests/$id2 | jq -r .state)\" = done ]"
	[ "$(api_get "/v1/requests/$id1" | jq -r .state)" = done ]
	cmp "$WD/src/a.dat" "$WD/dst/a.dat"
	cmp "$WD/src/b.dat" "$WD/dst/b.dat"
	api -u shtest POST /v1/requests "$(body "$WD/src/b.dat" "$WD/dst/c.dat")"; r3=$API_BODY
	[ "$API_STATUS" = 201 ]
	[ "$(daemon_pid)" = "$pid" ]
	report "StateDB full: $refused of 20 new requests refused (statuses:$codes), $other accepted; daemon pid unchanged; 2/2 queued requests done after space returned"
}
