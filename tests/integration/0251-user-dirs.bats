#!/usr/bin/env bats
# Who makes ArchiveRoot/USER and ScratchRoots/USER (docs/admin-guide.md,
# "Archive and scratch roots"): with root-owned 0755 roots, as an admin
# creates them first, stagehandd makes USER's directory (owner USER, mode
# 0700) and nothing else; it refuses a USER entry that is a symlink or not
# the user's; with CreateUserDirs=no a transfer that cannot make its
# directory names the first mkdir that failed, its errno, and the owner and
# mode of the directory it tried to make it in. --check-config warns about
# roots users cannot reach. Real jobs, sbatch as shtest.

load helpers
load ../faults/faults

setup() {
	faults_setup
	ROOTS=$STAGEHAND_TESTBED_DIR/roots-$BATS_TEST_NUMBER-$$
	install -d -m 0755 "$ROOTS" "$ROOTS/archive" "$ROOTS/scratch"
}

teardown() {
	faults_teardown
	rm -rf "$ROOTS"
}

# conf LINES...: run the daemon with these stagehand.conf lines.
conf() {
	printf '%s\n' "$@" >"$BATS_TEST_TMPDIR/daemon.conf"
	daemon_conf "$BATS_TEST_TMPDIR/daemon.conf"
}

@test "a root-owned 0755 ArchiveRoot: the daemon makes ARCHIVE/shtest (shtest, 0700) and the archive succeeds" {
	conf "ArchiveRoot=$ROOTS/archive"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
echo data > results/a.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	wait_for 60 label_is "$WD/results" archived
	[ "$(stat -c '%U %a' "$ROOTS/archive/shtest")" = "shtest 700" ]
	[ "$(cat "$ROOTS/archive/shtest/$j/results/a.txt")" = data ]
	# Nothing else was made as root.
	[ "$(find "$ROOTS" -user root | sort | tr '\n' ' ')" = "$ROOTS $ROOTS/archive $ROOTS/scratch " ]
}

@test "ARCHIVE/shtest planted as a symlink: refused with its name, nothing written where it points" {
	conf "ArchiveRoot=$ROOTS/archive"
	install -d -o shtest -m 0700 "$ROOTS/elsewhere"
	ln -s "$ROOTS/elsewhere" "$ROOTS/archive/shtest"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
echo data > results/a.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	wait_for 60 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' 'http://x/v1/requests?job=$j&all=1' |
		jq -e '.requests[] | select(.action == \"archive\" and .state == \"failed_final\")' >/dev/null"
	err=$(job_requests "$j" | jq -r 'select(.action == "archive") | .error')
	echo "$err"
	[[ $err == "$ROOTS/archive/shtest is a symbolic link owned by uid 0, not a directory of uid $(id -u shtest): not used; the admin must remove or fix it" ]]
	[ -z "$(ls -A "$ROOTS/elsewhere")" ]
}

@test "ScratchRoots: SCRATCH/shtest made for a stage-in without to=; a root-owned one is refused and says so" {
	user_file shtest "$WD/src/in.dat" 1
	conf "ScratchRoots=$ROOTS/scratch,$STAGEHAND_TESTBED_SCRATCH" "ArchiveRoot=$STAGEHAND_TESTBED_ARCHIVE"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/in.dat
true
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	[ "$(stat -c '%U %a' "$ROOTS/scratch/shtest")" = "shtest 700" ]
	cmp "$WD/src/in.dat" "$ROOTS/scratch/shtest/$j/input/in.dat"
	# A SCRATCH/USER the user cannot write: said exactly, before anything is tried.
	rm -rf "$ROOTS/scratch/shtest"
	install -d -m 0755 "$ROOTS/scratch/shtest"
	submit -d "$WD" "$WD/job.sh"
	wait_for 60 comment_matches "$j" "stage-in failed"
	echo "$(comment "$j")"
	[[ "$(comment "$j")" =~ "$ROOTS/scratch/shtest is a directory owned by uid 0, not a directory of uid $(id -u shtest)" ]]
}

@test "CreateUserDirs=no: nothing is made, and the failure names the first mkdir, its errno, owner and mode" {
	user_file shtest "$WD/src/in.dat" 1
	install -d -m 0755 "$ROOTS/scratch/shtest"
	conf "ScratchRoots=$ROOTS/scratch,$STAGEHAND_TESTBED_SCRATCH" "ArchiveRoot=$ROOTS/archive" "CreateUserDirs=no"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/in.dat
true
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_for 60 comment_matches "$j" "stage-in failed"
	echo "$(comment "$j")"
	[[ "$(comment "$j")" =~ "mkdir $ROOTS/scratch/shtest/$j: Permission denied ($ROOTS/scratch/shtest: owner root, mode 0755; you are uid $(id -u shtest))" ]]
	[ ! -e "$ROOTS/archive/shtest" ]
	# --check-config tells the admin before users find out.
	printf '%s\n' "ScratchRoots=$ROOTS/scratch" "ArchiveRoot=$ROOTS/archive" "CreateUserDirs=no" \
		"SlurmWatch=no" >"$BATS_TEST_TMPDIR/check.conf"
	chmod 0700 "$ROOTS/scratch"
	run "$STAGEHAND_BUILD_DIR/daemon/stagehandd" --check-config -c "$BATS_TEST_TMPDIR/check.conf"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output =~ "warning: ScratchRoots $ROOTS/scratch has mode 0700: users cannot reach it" ]]
	[[ $output =~ "warning: ArchiveRoot $ROOTS/archive has mode 0755 and CreateUserDirs=no" ]]
	[[ $output =~ "configuration OK" ]]
}
