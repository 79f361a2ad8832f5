#!/usr/bin/env bats
# A fast subset of tests/faults (make check-faults has the full runs): a few
# SIGKILLs during a stage-in, the state database filling up, a short symlink
# race, and the hostile paths that matter most. About a minute on the test bed.

bats_require_minimum_version 1.5.0

load helpers
load ../faults/faults

setup() {
	faults_setup
	H2=$(getent passwd shtest2 | cut -d: -f6)
	P2=$H2/quick-$BATS_TEST_NUMBER-$$
	install -d -o shtest2 -g shtest2 -m 0700 "$P2"
	SECRET_MARK="shtest2-quick-$RANDOM$RANDOM"
	printf '%s\n' "$SECRET_MARK" >"$P2/secret.txt"
	chown shtest2:shtest2 "$P2/secret.txt"
	chmod 0600 "$P2/secret.txt"
}

teardown() {
	faults_teardown
	[ "$(cat "$P2/secret.txt")" = "$SECRET_MARK" ]
	rm -rf "$P2"
}

leaked() {
	grep -rlsF "$SECRET_MARK" "$WD" "$STAGEHAND_TESTBED_SCRATCH/shtest" "$STAGEHAND_TESTBED_ARCHIVE" | grep -q .
}

@test "three SIGKILLs during a capped stage-in of a mixed tree: the job gets every file intact" {
	printf 'BandwidthCap=8M\n' >"$BATS_TEST_TMPDIR/daemon.conf"
	daemon_conf "$BATS_TEST_TMPDIR/daemon.conf"
	make_tree shtest "$WD/tree" 150 2 4
	manifest "$WD/tree" >"$BATS_TEST_TMPDIR/want"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/tree to=in
true
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_for 60 comment_matches "$j" "staging"
	for k in 1 2 3; do
		sleep 1
		[ "$(job_state "$j")" = PENDING ] || break
		daemon_kill9
		daemon_start
	done
	wait_job_state "$j" COMPLETED 120
	manifest "$WD/in" | diff - "$BATS_TEST_TMPDIR/want"
	[ -z "$(find "$WD/in" -name '.*.stagehand-*')" ]
}

@test "state database full: new requests get a clear 500, the daemon stays up, queued work completes when space returns" {
	DBDIR=$STAGEHAND_TESTBED_DIR/quick-db-$$
	tmpfs_mount "$DBDIR" 2m 0700
	printf 'StateDB=%s/stagehand.db\nBandwidthCap=5M\nWorkers=1\n' "$DBDIR" >"$BATS_TEST_TMPDIR/daemon.conf"
	daemon_conf "$BATS_TEST_TMPDIR/daemon.conf"
	pid=$(daemon_pid)
	user_file shtest "$WD/src/a.dat" 6
	install -d -o shtest -g shtest "$WD/dst"
	api -u shtest POST /v1/requests "{\"action\":\"stage_in\",\"source\":\"$WD/src/a.dat\",\"dest\":\"$WD/dst/a.dat\"}"
	echo "$API_STATUS $API_BODY"	# (shown if the next line fails)
	[ "$API_STATUS" = 201 ]
	id=$(jq -r .id <<<"$API_BODY")
	dd if=/dev/zero of="$DBDIR/filler" bs=64k status=none 2>/dev/null || true
	api -u shtest POST /v1/requests "{\"action\":\"stage_in\",\"source\":\"$WD/src/a.dat\",\"dest\":\"$WD/dst/b.dat\"}"
	[ "$API_STATUS" = 500 ]
	[[ $API_BODY =~ "full" ]]
	sleep 3
	[ "$(daemon_pid)" = "$pid" ]
	rm -f "$DBDIR/filler"
	wait_for 60 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' http://x/v1/requests/$id | jq -e '.state == \"done\"' >/dev/null"
	cmp "$WD/src/a.dat" "$WD/dst/a.dat"
	[ "$(daemon_pid)" = "$pid" ]
}

@test "symlink swapped in during transfers (2,000+ attempts): shtest2's secret is never copied" {
	install -d -o shtest -g shtest "$WD/tree" "$WD/tree/d" "$WD/out"
	runuser -u shtest -- bash -c "cd '$WD/tree' && for i in \$(seq 1 30); do echo a\$i > a\$i; echo d\$i > d/f\$i; done; echo file > f"
	runuser -u shtest -- python3 - "$WD/tree" "$P2" "$WD/.attempts" <<'PY' &
import os, signal, sys
t, p2, out = sys.argv[1:]
n = 0
def count():
    open(out + ".new", "w").write("%d\n" % n); os.rename(out + ".new", out)
def bye(*_):
    count(); sys.exit(0)
signal.signal(signal.SIGTERM, bye)
while True:
    for name, target in (("d", p2), ("f", p2 + "/secret.txt")):
        p = os.path.join(t, name)
        try:
            os.rename(p, p + ".real"); os.symlink(target, p); os.unlink(p); os.rename(p + ".real", p)
        except OSError:
            pass
    n += 1
    if n % 100 == 0:
        count()
PY
	apid=$!
	# Transfers go on until the attacker has made 2,000 swaps during them
	# (at least 3 transfers, at most 60): how fast either side runs on this
	# machine decides how many transfers that takes, not whether it happens.
	attempts=0
	for ((k = 1; k <= 60; k++)); do
		api -u shtest POST /v1/requests "{\"action\":\"stage_in\",\"source\":\"$WD/tree\",\"dest\":\"$WD/out/$k\"}"
		[ "$API_STATUS" = 201 ]
		id=$(jq -r .id <<<"$API_BODY")
		wait_for 60 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' http://x/v1/requests/$id | jq -e '.state | test(\"done|failed_final\")' >/dev/null"
		attempts=$(cat "$WD/.attempts" 2>/dev/null || echo 0)
		((k < 3 || attempts < 2000)) || break
	done
	kill -TERM "$apid"
	wait "$apid" || true
	attempts=$(cat "$WD/.attempts")
	echo "attempts: $attempts in $k transfers"
	((attempts >= 2000))
	run ! leaked
	[ "$(ls -A "$P2")" = secret.txt ]
}

@test "hostile #DATA: '..' refused by sbatch; /etc/shadow and shtest2's file held with 'Permission denied'; tree symlinks copied as links" {
	write_user_script shtest "$WD/a.sh" <<EOF
#!/bin/bash
#DATA archive=../../shtest2/stolen
true
EOF
	run bash -c "cd '$WD' && runuser -u shtest -- env SLURM_CONF='$SLURM_CONF' sbatch '$WD/a.sh' 2>&1"
	[ "$status" -ne 0 ]
	[[ $output =~ "line 2" ]]
	install -d -o shtest -g shtest "$WD/tree"
	runuser -u shtest -- bash -c "cd '$WD/tree' && echo ok > real.txt && ln -s /etc/shadow shadow && ln -s '$P2/secret.txt' secret && mkfifo fifo"
	write_user_script shtest "$WD/tree.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/tree to=in
true
EOF
	submit -d "$WD" "$WD/tree.sh"
	jt=$j
	ids=()
	for src in /etc/shadow "$P2/secret.txt"; do
		write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#DATA stage_in=$src
true
EOF
		submit -d "$WD" "$WD/job.sh"
		ids+=("$j")
	done
	for j in "${ids[@]}"; do
		wait_for 60 comment_matches "$j" "stage-in failed.*Permission denied"
		[ "$(job_state "$j")" = PENDING ]
	done
	wait_job_state "$jt" COMPLETED 60
	[ -L "$WD/in/shadow" ] && [ -L "$WD/in/secret" ] && [ ! -e "$WD/in/fifo" ]
	[ "$(cat "$WD/in/real.txt")" = ok ]
	run ! leaked
}
