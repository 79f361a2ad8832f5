#!/usr/bin/env bats
# A real Robinhood 3 against 'stagehand policy export --format=robinhood'
# (the POSIX variant, the default; docs/policy-engines.md, "Robinhood 3"):
# real jobs on the test bed label a tree (archive=, exempt=, a failed
# when=success archive, a stage_in whose inputs become 'purge', and an
# archive= job held running on purpose so its directory stays 'pending');
# Robinhood loads the export as it is, scans the tree into a private MariaDB
# and dry-runs the export's two policies. Each label's files must be chosen
# by exactly the policy the docs' table says. Then the held job ends, its
# label flips pending -> archive after the scan, and the next run picks it up
# with no new scan, because the export sets recheck_ignored_entries (the same
# rules with it off do not).
#
# Runs only where Robinhood 3 (robinhood, rbh-report: in PATH or
# /opt/robinhood/sbin) and MariaDB (mariadbd, mariadb-install-db) are
# installed; skips otherwise (tests/integration/expected-skips). Robinhood
# runs only with --dry-run: its purge policy would remove files.

load helpers
bats_require_minimum_version 1.5.0

setup_file() {
	RBH_BIN=
	for d in $(type -P robinhood | xargs -r dirname) /opt/robinhood/sbin /usr/local/sbin; do
		if [[ -x $d/robinhood && -x $d/rbh-report ]]; then
			RBH_BIN=$d
			break
		fi
	done
	export RBH_BIN
}

setup() {
	[[ -n $RBH_BIN ]] ||
		skip "Robinhood 3 is not installed (no robinhood and rbh-report in PATH, /opt/robinhood/sbin or /usr/local/sbin)"
	type -P mariadbd >/dev/null && type -P mariadb-install-db >/dev/null ||
		skip "Robinhood 3 is installed but MariaDB is not (mariadbd, mariadb-install-db)"
	"$RBH_BIN/robinhood" --version | grep -qE 'Version: +3\.' ||
		skip "Robinhood 3 is not installed ($RBH_BIN/robinhood is not a 3.x)"
	daemon_setup spank
	skip_epilog_only "the exempt= and pending labels are the SPANK plugin's"
	SHCONF=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	cp -p "$SHCONF" "$BATS_TEST_TMPDIR/stagehand.conf.orig"
	# A private MariaDB on a socket only (no TCP), for this test alone.
	DB=$(mktemp -d /tmp/sh-rbh-db.XXXXXX)
	mariadb-install-db --no-defaults --user=root --datadir="$DB/data" \
		--auth-root-authentication-method=normal --skip-test-db >"$DB/install.log" 2>&1 ||
		{ cat "$DB/install.log"; return 1; }
	mariadbd --no-defaults --user=root --datadir="$DB/data" --socket="$DB/sock" \
		--skip-networking --pid-file="$DB/pid" --log-error="$DB/err" >/dev/null 2>&1 3>&- &
	wait_for 30 eval 'mariadb --no-defaults -S "$DB/sock" -uroot -e "SELECT 1" >/dev/null 2>&1' ||
		{ cat "$DB/err"; return 1; }
	mariadb --no-defaults -S "$DB/sock" -uroot -e "CREATE DATABASE rbh;
		CREATE USER 'rbh'@'localhost' IDENTIFIED BY 'rbh-test';
		GRANT ALL ON rbh.* TO 'rbh'@'localhost';"
	printf 'rbh-test\n' >"$DB/pw"
	chmod 600 "$DB/pw"
}

teardown() {
	[[ -z ${GO:-} ]] || touch "$GO" 2>/dev/null || true
	cancel_jobs "${JOBS[@]}"
	if [[ -n ${DB:-} ]]; then
		[[ ! -f $DB/pid ]] || kill "$(cat "$DB/pid")" 2>/dev/null || true
		wait_for 30 eval '! [[ -S $DB/sock ]]' || true
		rm -rf "$DB"
	fi
	if [[ -f $BATS_TEST_TMPDIR/stagehand.conf.orig ]]; then
		cp -p "$BATS_TEST_TMPDIR/stagehand.conf.orig" "$SHCONF"
		reload_daemon || true
	fi
}

label() {
	getfattr --only-values -n user.stagehand.policy "$1" 2>/dev/null
}

label_is() {
	[[ "$(label "$1")" == "$2" ]]
}

# rbh_conf ROOT INCLUDE: a Robinhood configuration for ROOT that includes
# INCLUDE as it is (nothing else: no lhsm.inc, no site policy).
rbh_conf() {
	cat >"$DB/rbh.conf" <<EOF
General { fs_path = "$1"; fs_type = $(stat -f -c %T "$1" | sed 's,/.*,,;s,ext2,ext4,'); check_mounted = no; }
Log {
    log_file = "$DB/rbh.log";
    report_file = "$DB/report.log";
    alert_file = "$DB/alert.log";
    debug_level = EVENT;
}
ListManager {
    MySQL { server = "localhost"; db = "rbh"; user = "rbh"; password_file = "$DB/pw"; socket = "$DB/sock"; }
}
%include "$2"
EOF
}

# rbh ARGS...: robinhood with the test's configuration; fails on an error line.
rbh() {
	: >"$DB/rbh.log"
	"$RBH_BIN/robinhood" -f "$DB/rbh.conf" --once "$@" || { cat "$DB/rbh.log"; return 1; }
	if grep -E '\| (Error|ERROR)|[Ss]yntax error|unknown (parameter|block)' "$DB/rbh.log"; then
		cat "$DB/rbh.log"
		return 1
	fi
}

# picked POLICY: the paths POLICY's dry run would act on, one per line.
picked() {
	rbh --run="$1" --target=all --dry-run || return 1
	sed -n 's/.*(dry-run) Executing policy action on: [^ ]* (\(.*\))$/\1/p' "$DB/rbh.log" | sort
}

@test "robinhood: real Robinhood 3, POSIX export: each label to its policy, a flip picked up" {
	# Labels are written by the daemon at job end in ArchiveMode=label (an
	# engine archives); InputRetention=never keeps the purge-labelled inputs.
	sed -e '/^ArchiveMode=/d' -e '/^InputRetention=/d' "$BATS_TEST_TMPDIR/stagehand.conf.orig" >"$SHCONF"
	printf 'ArchiveMode=label\nInputRetention=never\n' >>"$SHCONF"
	reload_daemon
	install -d -o shtest -g "$(id -gn shtest)" "$WD/proj" "$WD/plain"
	runuser -u shtest -- sh -c "echo in > '$WD/proj/a.dat'; echo site > '$WD/plain/p.txt'"

	# archive= and exempt=, with an exempt file untouched for 40 days.
	write_user_script shtest "$WD/a.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results
#DATA exempt=tmp
echo r > results/r.txt
echo t > tmp/new.txt
echo o > tmp/old.txt
touch -d '40 days ago' tmp/old.txt
EOF
	# when=success and the job fails: skipped.
	write_user_script shtest "$WD/b.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=failed when=success
echo f > failed/f.txt
exit 1
EOF
	# a stage_in: the job's input directory is labelled purge at its end.
	write_user_script shtest "$WD/c.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/proj/a.dat
cmp "\$STAGEHAND_INPUT_DIR/a.dat" "$WD/proj/a.dat" || exit 1
echo made > "\$STAGEHAND_INPUT_DIR/made.txt"
EOF
	# archive= held running until the test creates $WD/go: 'pending'.
	GO=$WD/go
	write_user_script shtest "$WD/d.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=later
echo l > later/l.txt
until [ -e "$GO" ]; do sleep 0.2; done
EOF
	submit -d "$WD" "$WD/a.sh"; ja=$j
	submit -d "$WD" "$WD/b.sh"; jb=$j
	submit -d "$WD" "$WD/c.sh"; jc=$j
	submit -d "$WD" "$WD/d.sh"; jd=$j
	wait_job_state "$ja" COMPLETED 90
	wait_job_state "$jb" FAILED 90
	wait_job_state "$jc" COMPLETED 90
	wait_job_state "$jd" RUNNING 90
	in=$STAGEHAND_TESTBED_SCRATCH/shtest/$jc/input
	wait_for 60 label_is "$WD/results" archive
	wait_for 60 label_is "$WD/failed" skipped
	wait_for 60 label_is "$in" purge
	wait_for 60 test -e "$WD/later/l.txt"
	label_is "$WD/tmp" exempt
	label_is "$WD/later" pending
	[ -f "$in/a.dat" ] && [ -f "$in/made.txt" ]

	# The export, from the tree the jobs labelled; Robinhood loads it as it is.
	root=$STAGEHAND_TESTBED_SCRATCH/shtest
	run --separate-stderr "$STAGEHAND" policy export --format=robinhood --namespace=user. \
		--paths-from="$root"
	echo "$output" >"$DB/stagehand.inc"
	echo "$stderr"
	# Other tests' leftovers under $root may hold names the syntax cannot carry.
	[ "$status" -eq 0 ] || [[ $stderr =~ "left out" && $status -eq 1 ]]
	rbh_conf "$root" "$DB/stagehand.inc"
	rbh --scan
	grep -q 'Full scan of .* completed' "$DB/rbh.log"
	"$RBH_BIN/rbh-report" -f "$DB/rbh.conf" --class-info | tee "$DB/classes"
	grep -q stagehand_exempt "$DB/classes"
	grep -q stagehand_hold "$DB/classes"
	grep -q stagehand_purge "$DB/classes"

	picked stagehand_archive >"$DB/archive.list"
	picked stagehand_purge >"$DB/purge.list"
	# A POSIX Robinhood reads lhsm_* blocks without a word and never runs them.
	run ! grep -q lhsm "$DB/stagehand.inc"
	# (what Robinhood chose, for docs/policy-engines.md's table)
	for f in "$WD"/*/* "$in"/*; do
		[[ -f $f ]] || continue
		printf '%-9s %-9s %s\n' "$(label "${f%/*}" || true)" \
			"$( (grep -qx "$f" "$DB/archive.list" && echo archive) ||
				(grep -qx "$f" "$DB/purge.list" && echo purge) || echo none)" "${f#"$root"/*/}"
	done
	# archive: the archive policy, only
	grep -qx "$WD/results/r.txt" "$DB/archive.list"
	run ! grep -qx "$WD/results/r.txt" "$DB/purge.list"
	# purge (the job's inputs, and what it made there): the purge policy, only
	grep -qx "$in/a.dat" "$DB/purge.list"
	grep -qx "$in/made.txt" "$DB/purge.list"
	run ! grep -q "^$in/" "$DB/archive.list"
	# exempt: never archived; purged by its own rule once 30 days old
	grep -qx "$WD/tmp/old.txt" "$DB/purge.list"
	run ! grep -qx "$WD/tmp/new.txt" "$DB/purge.list"
	run ! grep -q "^$WD/tmp/" "$DB/archive.list"
	# skipped and pending: neither
	run ! grep -q "^$WD/failed/\|^$WD/later/" "$DB/archive.list" "$DB/purge.list"
	# unlabelled data is the site's: neither
	run ! grep -q "^$WD/plain/\|^$WD/proj/" "$DB/archive.list" "$DB/purge.list"

	# The flip: the held job ends after the scan, the daemon labels 'later'
	# archive; the export is regenerated (as before each run), no new scan.
	touch "$GO"
	wait_job_state "$jd" COMPLETED 90
	wait_for 60 label_is "$WD/later" archive
	"$STAGEHAND" policy export --format=robinhood --namespace=user. --paths-from="$root" \
		>"$DB/stagehand.inc" || true
	# The same rules without recheck_ignored_entries: Robinhood matches the
	# class it stored at the scan (stagehand_hold) and leaves 'later' out.
	sed 's/recheck_ignored_entries = yes;/recheck_ignored_entries = no;/' "$DB/stagehand.inc" \
		>"$DB/norecheck.inc"
	rbh_conf "$root" "$DB/norecheck.inc"
	picked stagehand_archive >"$DB/archive-norecheck.list"
	run ! grep -qx "$WD/later/l.txt" "$DB/archive-norecheck.list"
	# As exported: picked up at once.
	rbh_conf "$root" "$DB/stagehand.inc"
	picked stagehand_archive >"$DB/archive2.list"
	grep -qx "$WD/later/l.txt" "$DB/archive2.list"
	echo "after the flip, later/l.txt: archive with recheck_ignored_entries, none without"

	# For real (no --dry-run), with the site's archiver given by --archive-cmd:
	# Robinhood runs it once per file of the archive directories, and only those.
	printf '#!/bin/sh\nprintf "%%s\\n" "$1" >>"%s/archived.list"\n' "$DB" >"$DB/site-archive"
	chmod 755 "$DB/site-archive"
	"$STAGEHAND" policy export --format=robinhood --namespace=user. --paths-from="$root" \
		--archive-cmd="$DB/site-archive" >"$DB/stagehand.inc" || true
	rbh --run=stagehand_archive --target=all
	sort "$DB/archived.list" | grep "^$WD/" >"$DB/archived.mine"
	printf '%s\n' "$WD/later/l.txt" "$WD/results/r.txt" | diff - "$DB/archived.mine"
	grep -qx "$WD/results/r.txt" "$DB/archive2.list"
}
