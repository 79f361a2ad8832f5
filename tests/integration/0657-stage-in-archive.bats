#!/usr/bin/env bats
# A later job stages in an earlier job's archive (docs/user-guide.md,
# "Chaining jobs on archives"): '#DATA stage_in=' of an archive copy
# stagehand made, or of a file or directory inside it, gives the job the
# archived files, whether the copy is plain or bundled (ArchiveBundle=yes:
# tar bundles and an index), each checked against the checksum recorded when
# it was archived. A damaged copy holds the job with the file named; another
# user's archive is refused by the kernel, since the daemon reads it as the
# job's owner. Real jobs submitted with sbatch as shtest (and shtest2), in
# hold mode and in burst-buffer mode (scripts/testbed up --mode=bb).

bats_require_minimum_version 1.5.0

load helpers

setup() {
	daemon_setup
	SHCONF=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	cp -p "$SHCONF" "$BATS_TEST_TMPDIR/stagehand.conf.orig"
	BUNDLED=
}

teardown() {
	cancel_jobs "${JOBS[@]}"
	if [[ -n $BUNDLED ]]; then
		cp -p "$BATS_TEST_TMPDIR/stagehand.conf.orig" "$SHCONF"
		reload_daemon || true
	fi
}

# bundling: from now on the daemon bundles every small file of an archive.
bundling() {
	BUNDLED=1
	cp -p "$BATS_TEST_TMPDIR/stagehand.conf.orig" "$SHCONF"
	printf 'ArchiveBundle=yes\nBundleMinFiles=1\nBundleFileMax=64K\n' >>"$SHCONF"
	reload_daemon
}

# J's archive done and verified, by the daemon's word.
archive_done() {
	curl -sf --max-time 5 --unix-socket "$STAGEHAND_SOCKET" "http://x/v1/requests?job=$1&all=1" |
		jq -e '[.requests[] | select(.action == "archive")] | length > 0 and all(.state == "done")' >/dev/null
}

# produce: a job (as shtest) that archives results/ holding a.txt,
# sub/b.txt and sub/file.dat; waits for its archive. Sets j1 and ARCH.
produce() {
	write_user_script shtest "$WD/produce.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/produce-%j.txt
#DATA archive=results
mkdir -p results/sub
echo "alpha \$SLURM_JOB_ID" > results/a.txt
echo "beta \$SLURM_JOB_ID" > results/sub/b.txt
seq 1 2000 > results/sub/file.dat
EOF
	submit -d "$WD" "$WD/produce.sh"
	j1=$j
	wait_job_state "$j1" COMPLETED 60
	wait_for 60 archive_done "$j1"
	ARCH=$STAGEHAND_TESTBED_ARCHIVE/shtest/$j1/results
}

# consume: a job (as shtest) staging the whole archive into prev/, sub/ into
# part/ and sub/file.dat as one.dat; its script checks what it got.
consume() {
	write_user_script shtest "$WD/consume.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/consume-%j.txt
#DATA stage_in=$ARCH to=prev/
#DATA stage_in=$ARCH/sub to=part
#DATA stage_in=$ARCH/sub/file.dat to=one.dat
set -e
[ "\$(cat prev/results/a.txt)" = "alpha $j1" ]
[ "\$(cat prev/results/sub/b.txt)" = "beta $j1" ]
cmp prev/results/sub/file.dat <(seq 1 2000)
[ "\$(cat part/b.txt)" = "beta $j1" ]
cmp part/file.dat <(seq 1 2000)
cmp one.dat <(seq 1 2000)
find prev part -name '*.tar' -o -name 'index.jsonl' -o -name .stagehand-bundles > leftovers
echo ok > checked
EOF
	submit -d "$WD" "$WD/consume.sh"
	j2=$j
}

# The user's own 'stagehand status JOB'.
user_status() {
	run_as_user "${2:-shtest}" env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$1"
}

comment_matches() {
	[[ "$(job_status "$1")" =~ $2 ]]
}

@test "plain archive: a later job stages it in, as a tree, a subdirectory and one file" {
	produce
	[ ! -e "$ARCH/.stagehand-bundles" ]
	consume
	wait_job_state "$j2" COMPLETED 90
	[ "$(cat "$WD/checked")" = ok ]
	[ ! -s "$WD/leftovers" ]
	[ "$(stat -c %U "$WD/one.dat")" = shtest ]
}

@test "bundled archive: the job gets the files, not the bundles; a subdirectory and a bundled file alone" {
	bundling
	produce
	# The archive copy really is bundles and an index: no file.dat of its own.
	[ -f "$ARCH/.stagehand-bundles/index.jsonl" ]
	[ ! -e "$ARCH/sub/file.dat" ]
	consume
	wait_job_state "$j2" COMPLETED 90
	[ "$(cat "$WD/checked")" = ok ]
	[ ! -s "$WD/leftovers" ]
	[ "$(stat -c %U "$WD/prev/results/sub/file.dat")" = shtest ]
}

# held_with_mismatch FILE: job 2 stays held, and the user sees which file of which
# job differed and how, in squeue/scontrol and in 'stagehand status'.
held_with_mismatch() {
	local file=$1
	wait_for 60 comment_matches "$j2" "stage-in failed" || { scontrol show job "$j2"; false; }
	[ "$(job_state "$j2")" = PENDING ]
	if [[ ${STAGEHAND_TESTBED_SUBMIT_MODE:-hold} == bb ]]; then
		# Slurm holds it with data_in's message in SystemComment.
		wait_for 30 eval '[[ "$(job_field "$j2" SystemComment)" =~ "$file: checksum mismatch" ]]'
	else
		[[ "$(job_field "$j2" Reason)" =~ JobHeld ]]
	fi
	st=$(job_status "$j2")
	echo "$st"
	[[ $st =~ "job $j2: stage-in from the archive" ]]
	[[ $st =~ "$file: checksum mismatch" ]]
	[[ $st =~ "recorded when it was archived" ]]
	[[ $st =~ "Repair or replace the archive copy" ]]
	run user_status "$j2"
	echo "$output"
	[[ $output =~ "$file: checksum mismatch" ]]
	[ ! -e "$WD/checked" ]
}

@test "a damaged bundle member fails the stage-in, naming the file, the job and what differed" {
	bundling
	produce
	# Flip one byte of sub/b.txt inside its bundle: the tar stays readable.
	read -r bundle offset < <(jq -r 'select(.path == "sub/b.txt") | "\(.bundle) \(.offset)"' \
		"$ARCH/.stagehand-bundles/index.jsonl")
	[[ $offset =~ ^[0-9]+$ ]]
	printf 'B' | dd of="$ARCH/.stagehand-bundles/$bundle" bs=1 seek="$offset" conv=notrunc status=none
	consume
	held_with_mismatch sub/b.txt
}

@test "a changed file of a plain archive fails the stage-in against the archive-time checksum" {
	produce
	# Same size, other bytes: a fresh copy of it would verify; its record does not.
	printf 'B' | dd of="$ARCH/sub/b.txt" bs=1 seek=0 conv=notrunc status=none
	consume
	held_with_mismatch sub/b.txt
}

@test "another user's archive: a permission error, not the data" {
	produce
	WD2=$(user_workdir "$TESTBED_USER2")
	write_user_script "$TESTBED_USER2" "$WD2/steal.sh" <<EOF
#!/bin/bash
#DATA stage_in=$ARCH to=stolen/
ls -R stolen > got
EOF
	try_submit -u "$TESTBED_USER2" -d "$WD2" "$WD2/steal.sh" --output="$WD2/out-%j.txt"
	if [[ $status -ne 0 ]]; then
		# Refused at submit: the message says why; nothing was staged.
		[[ $stderr =~ (ermission|not yours|other user) ]]
	else
		j3=$JOB
		wait_for 60 comment_matches "$j3" "stage-in failed"
		[[ "$(job_status "$j3")" =~ "Permission denied" ]]
		[ "$(job_state "$j3")" = PENDING ]
		[ ! -e "$WD2/stolen" ]
		[ ! -e "$WD2/got" ]
	fi
}
