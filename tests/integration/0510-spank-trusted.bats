#!/usr/bin/env bats
# Unforgeable labels end to end on the real test bed: the SPANK plugin with
# xattr_ns=trusted and stagehandd with XattrNamespace=trusted. Jobs run as
# the ordinary user shtest; labels are read as root.
#
# setup_file switches the test bed to trusted mode (plugstack.conf argument
# xattr_ns=trusted, STAGEHAND_TESTBED_XATTR_NS=trusted for the daemon;
# slurmd and stagehandd restart) and teardown_file switches it back with
# the caller's own settings. Needs the SPANK plugin and the daemon built in
# the tree the test bed runs.

bats_require_minimum_version 1.5.0

load helpers

# The plugstack.conf line with the stagehand plugin, if any.
_plugstack_line() {
	grep -E '^(optional|required)[[:space:]].*stagehand\.so' \
		"$STAGEHAND_TESTBED_DIR/etc/plugstack.conf" 2>/dev/null | head -n1
}

setup_file() {
	testbed_require
	[[ -x $STAGEHAND_BUILD_DIR/daemon/stagehandd ]] ||
		_tb_fail "stagehandd is not built in $STAGEHAND_BUILD_DIR" || return 1
	local line mode so rest w args=()
	line=$(_plugstack_line)
	[[ -n $line ]] || _tb_fail "the test bed does not load stagehand.so: build it and run 'scripts/testbed up'" || return 1
	# Keep the caller's socket/spool/scratch; only the namespace changes.
	read -r mode so rest <<<"$line"
	for w in $rest; do
		[[ $w == xattr_ns=* ]] || args+=("$w")
	done
	args+=(xattr_ns=trusted)
	STAGEHAND_SPANK_ARGS="${args[*]}" STAGEHAND_TESTBED_XATTR_NS=trusted \
		"$TESTBED" up >"$BATS_FILE_TMPDIR/up.log" 2>&1 ||
		_tb_fail "scripts/testbed up (trusted mode) failed: $(tail -n 20 "$BATS_FILE_TMPDIR/up.log")" || return 1
	[[ $(_plugstack_line) == *xattr_ns=trusted* ]] ||
		_tb_fail "plugstack.conf was not switched to xattr_ns=trusted (edited by hand?): $(_plugstack_line)" || return 1
	grep -qx 'XattrNamespace=trusted' "$STAGEHAND_TESTBED_DIR/etc/stagehand.conf" ||
		_tb_fail "stagehand.conf was not switched to XattrNamespace=trusted (edited by hand?)" || return 1
}

teardown_file() {
	# Back to the caller's settings (their STAGEHAND_SPANK_ARGS and
	# STAGEHAND_TESTBED_XATTR_NS, or none).
	"$TESTBED" up >"$BATS_FILE_TMPDIR/down.log" 2>&1 ||
		echo "could not restore the test bed: $(tail -n 20 "$BATS_FILE_TMPDIR/down.log")" >&2
}

setup() {
	testbed_env
	STAGEHAND=$STAGEHAND_BUILD_DIR/cli/stagehand
	WD=$(user_workdir)
	JOBS=()
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

# tlabel DIR [NAME]: trusted.stagehand.NAME (default policy), read as root.
tlabel() {
	getfattr --only-values -n "trusted.stagehand.${2:-policy}" "$1" 2>/dev/null
}

tlabel_is() {
	[[ "$(tlabel "$1")" == "$2" ]]
}

# Every stagehand label in the user. namespace below $1 (none expected).
user_labels() {
	getfattr -R -P -d -m '^user\.stagehand\.' "$1" 2>/dev/null
}

# submit_umask MASK SCRIPT: sbatch as shtest from $WD with SLURM_UMASK=MASK
# (what the job's processes get); sets $j.
submit_umask() {
	j=$(cd "$WD" && run_as_user shtest env SLURM_UMASK="$1" sbatch --parsable "$2") || return 1
	j=${j%%;*}
	JOBS+=("$j")
}

@test "trusted labels: exempt/pending at start, archived at the end, none in user." {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA exempt=tmp
#DATA archive=results/run
echo data > results/run/a.txt
echo scratch > tmp/t.txt
touch started
for i in \$(seq 1 300); do [ -e go ] && break; sleep 0.1; done
# What the owner can do with trusted labels: nothing.
if setfattr -n trusted.stagehand.policy -v exempt results/run 2>/dev/null; then echo set; else echo refused; fi > user-set
getfattr -d -m - results/run > user-get 2>&1
EOF
	submit_umask 0027 "$WD/job.sh"
	wait_for 30 test -e "$WD/started"
	# While the job runs: trusted labels, written before its script started.
	[ "$(tlabel "$WD/tmp")" = exempt ]
	[ "$(tlabel "$WD/results/run")" = pending ]
	[ "$(tlabel "$WD/results/run" job)" = "$j" ]
	[ "$(tlabel "$WD/results/run" owner)" = "$(id -u shtest)" ]
	# Not on the parent that was created along the way.
	[ -z "$(tlabel "$WD/results")" ]
	# Created by the owner, with the job's umask.
	[ "$(stat -c '%U %G %a' "$WD/results/run")" = "shtest shtest 750" ]
	[ "$(stat -c '%U %a' "$WD/results")" = "shtest 750" ]
	# An engine can rely on them: root sees valid labels through the daemon.
	run "$STAGEHAND" tags --verify --namespace trusted. --socket "$STAGEHAND_SOCKET" "$WD"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output == *"2 label(s) checked, 0 problem(s)"* ]]
	touch "$WD/go"
	wait_job_state "$j" COMPLETED 60
	# The owner could neither set nor read them.
	[ "$(cat "$WD/user-set")" = refused ]
	cat "$WD/user-get"
	run ! grep -q stagehand "$WD/user-get"
	# After the end the daemon archives and flips the same namespace.
	wait_for 40 tlabel_is "$WD/results/run" archived
	loc=$(tlabel "$WD/results/run" location)
	[ "$loc" = "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results/run" ]
	cmp "$WD/results/run/a.txt" "$loc/a.txt"
	[ "$(tlabel "$WD/tmp")" = exempt ]
	# No user.stagehand.* anywhere: in the job tree or on the archive copy.
	[ -z "$(user_labels "$WD")" ]
	[ -z "$(user_labels "$loc")" ]
	run "$STAGEHAND" tags --verify --namespace trusted. --socket "$STAGEHAND_SOCKET" "$WD"
	echo "$output"
	[ "$status" -eq 0 ]
	# Nor can the owner forge one by hand afterwards.
	run run_as_user shtest setfattr -n trusted.stagehand.policy -v exempt "$WD/results/run"
	[ "$status" -ne 0 ]
	[ "$(tlabel "$WD/results/run")" = archived ]
}

@test "trusted labels: links to /etc or to another user's directory are refused, nothing is labelled" {
	other=$(user_workdir shtest2)
	ln -s /etc "$WD/sys"
	ln -s "$other" "$WD/theirs"
	install -d -o shtest2 -g shtest2 -m 0777 "$WD/shared"
	chown -h shtest: "$WD/sys" "$WD/theirs"
	for d in sys theirs shared; do
		write_user_script shtest "$WD/$d.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-$d.txt
#DATA exempt=$d
echo ran
EOF
	done
	local jobs=() d
	for d in sys theirs shared; do
		submit_umask 0022 "$WD/$d.sh"
		jobs+=("$j")
	done
	for j in "${jobs[@]}"; do
		wait_job_state "$j" 'COMPLETED|FAILED' 60
	done
	grep -q "#DATA line 3: $WD/sys: 'sys' in 'sys' is a symbolic link" "$WD/out-sys.txt"
	grep -q "#DATA line 3: $WD/theirs: 'theirs' in 'theirs' is a symbolic link" "$WD/out-theirs.txt"
	grep -q "#DATA line 3: $WD/shared: the directory is owned by uid $(id -u shtest2), not by the job owner" "$WD/out-shared.txt"
	[ -z "$(getfattr -d -m '^trusted\.stagehand\.' /etc 2>/dev/null)" ]
	[ -z "$(getfattr -R -P -d -m 'stagehand\.' "$other" 2>/dev/null)" ]
	[ -z "$(getfattr -P -d -m 'stagehand\.' "$WD/shared" 2>/dev/null)" ]
}

@test "trusted labels: a job that swaps its archive dir for a link gets no label put on the target" {
	other=$(user_workdir shtest2)
	chmod 0755 "$other"     # readable: the owner's worker can open it
	runuser -u shtest2 -- sh -c "echo theirs > '$other/f'"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
rmdir results && ln -s $other results
EOF
	submit_umask 0022 "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	# The daemon handles the end event: its worker refuses to open the link
	# (no symlink is followed below the scratch root or work dir) ...
	wait_for 30 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' 'http://x/v1/requests?job=$j&all=1' |
		jq -e '.requests[] | select(.state == \"failed_final\") | .error |
			test(\"#DATA line 3: .results. in .* is a symbolic link\")' >/dev/null"
	# ... and root wrote nothing on shtest2's directory.
	[ -z "$(getfattr -R -P -d -m 'stagehand\.' "$other" 2>/dev/null)" ]
	[ "$(cat "$other/f")" = theirs ]
}
