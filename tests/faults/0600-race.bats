#!/usr/bin/env bats
# Symlink swapped in during a transfer: while the daemon copies shtest's tree
# again and again, shtest runs a tight loop that replaces a directory and a
# file of the source tree, and a directory of the destination, with symlinks
# to shtest2's private directory and to /etc/shadow, and back. Nothing of
# shtest2's or root's may be read or written, whoever wins the race.
#
# STAGEHAND_RACE_ATTEMPTS (default 10000): minimum swap iterations.
# STAGEHAND_RACE_TRANSFERS (default 20): minimum transfers under attack.

bats_require_minimum_version 1.5.0

load ../integration/helpers
load faults

setup() {
	faults_setup
	H2=$(getent passwd shtest2 | cut -d: -f6)
	P2=$H2/race-$$
	install -d -o shtest2 -g shtest2 -m 0700 "$P2"
	SECRET_MARK="shtest2-race-secret-$RANDOM$RANDOM"
	printf '%s\n' "$SECRET_MARK" >"$P2/secret.txt"
	chown shtest2:shtest2 "$P2/secret.txt"
	chmod 0600 "$P2/secret.txt"
	SECRET_SUM=$(sha256sum <"$P2/secret.txt")
	SHADOW_SUM=$(sha256sum </etc/shadow)
	ATTACK_PID=
}

teardown() {
	[[ -n $ATTACK_PID ]] && kill "$ATTACK_PID" 2>/dev/null
	faults_teardown
	rm -rf "$P2"
}

@test "symlink swapped in and out during transfers (>= 10,000 attempts): nothing outside the user's rights is read or written" {
	MIN_ATTEMPTS=${STAGEHAND_RACE_ATTEMPTS:-10000}
	MIN_XFERS=${STAGEHAND_RACE_TRANSFERS:-20}
	install -d -o shtest -g shtest "$WD/tree" "$WD/tree/d" "$WD/out"
	runuser -u shtest -- bash -c "cd '$WD/tree' && for i in \$(seq 1 60); do echo a\$i > a\$i; echo d\$i > d/f\$i; done; echo file > f"
	# The attacker: swap tree/d, tree/f and out/N/d with symlinks and back, as fast as it can.
	runuser -u shtest -- python3 - "$WD" "$P2" "$WD/.attempts" <<'PY' &
import os, signal, sys
wd, p2, out = sys.argv[1:]
n = 0
def bye(*_):
    open(out, "w").write("%d\n" % n)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
t = os.path.join(wd, "tree")
while True:
    for name, target in (("d", p2), ("f", "/etc/shadow"), ("f", p2 + "/secret.txt")):
        p = os.path.join(t, name)
        try:
            os.rename(p, p + ".real")
            os.symlink(target, p)
            os.unlink(p)
            os.rename(p + ".real", p)
        except OSError:
            pass
    # The destination side: whatever out/*/d exists, swap it for a link to p2.
    for sub in os.listdir(os.path.join(wd, "out"))[-2:]:
        p = os.path.join(wd, "out", sub, "d")
        try:
            os.rename(p, p + ".real")
            os.symlink(p2, p)
            os.unlink(p)
            os.rename(p + ".real", p)
        except OSError:
            pass
    n += 1
    if n % 1000 == 0:
        open(out, "w").write("%d\n" % n)
PY
	ATTACK_PID=$!
	xfers=0 ok=0 failed=0 saw_link=0
	body() { printf '{"action":"stage_in","source":"%s","dest":"%s"}' "$WD/tree" "$WD/out/$1"; }
	start=$(date +%s)
	while :; do
		attempts=$(cat "$WD/.attempts" 2>/dev/null || echo 0)
		((xfers >= MIN_XFERS && attempts >= MIN_ATTEMPTS)) && break
		(($(date +%s) - start < 600)) || { echo "race ran 600s: $xfers transfers, $attempts attempts"; false; }
		api -u shtest POST /v1/requests "$(body "$xfers")"
		[ "$API_STATUS" = 201 ]
		id=$(jq -r .id <<<"$API_BODY")
		wait_for 60 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' http://x/v1/requests/$id |
			jq -e '.state | test(\"done|failed_final\")' >/dev/null"
		st=$(api_get "/v1/requests/$id?items=1")
		case $(jq -r .state <<<"$st") in
		done) ok=$((ok + 1)) ;;
		*) failed=$((failed + 1)) ;;
		esac
		jq -e '.items[] | select(.type == "symlink")' <<<"$st" >/dev/null && saw_link=$((saw_link + 1))
		xfers=$((xfers + 1))
	done
	# One real job's stage-in under the same attack.
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/job-%j.txt
#DATA stage_in=$WD/tree to=out/job
true
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_for 120 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' 'http://x/v1/requests?job=$j&all=1' |
		jq -e '.requests[0].state | test(\"done|failed_final\")' >/dev/null"
	kill -TERM "$ATTACK_PID"
	wait "$ATTACK_PID" || true
	ATTACK_PID=
	attempts=$(cat "$WD/.attempts")
	# Never read: no copy of the secret or of /etc/shadow anywhere shtest can read.
	# (grep's output, not its status: as shtest it meets unreadable directories,
	# and exits 2 for them even when it finds the marker elsewhere.)
	found=$(runuser -u shtest -- grep -rlsF "$SECRET_MARK" "$WD" "$STAGEHAND_TESTBED_SCRATCH/shtest" "$STAGEHAND_TESTBED_ARCHIVE" || true)
	printf '%s\n' "$found"
	[ -z "$found" ]
	run ! grep -rqsE '^root:' "$WD/out"
	# Every regular file in the copies is one of the tree's own.
	find "$WD/out" -type f ! -name '.*.stagehand-*' -print0 | xargs -0 -r cat | sort -u >"$BATS_TEST_TMPDIR/seen"
	(cd "$WD/tree" && find . -type f -print0 | xargs -0 cat; find "$WD/tree" -name '*.real' -type f -print0 | xargs -0 -r cat) | sort -u >"$BATS_TEST_TMPDIR/allowed"
	comm -23 "$BATS_TEST_TMPDIR/seen" "$BATS_TEST_TMPDIR/allowed" | tee "$BATS_TEST_TMPDIR/extra"
	[ ! -s "$BATS_TEST_TMPDIR/extra" ]
	# Never written: the targets are unchanged and nothing new appeared in shtest2's directory.
	[ "$(sha256sum <"$P2/secret.txt")" = "$SECRET_SUM" ]
	[ "$(sha256sum </etc/shadow)" = "$SHADOW_SUM" ]
	[ "$(ls -A "$P2")" = secret.txt ]
	[ "$(stat -c %U "$P2/secret.txt")" = shtest2 ]
	report "symlink race: $attempts swap iterations (each: tree/d, tree/f twice, 2 destination dirs), $xfers API transfers + 1 job stage-in under attack ($ok done, $failed failed with a reason, $saw_link copied a swapped-in link as a link); 0 bytes of the targets read, 0 writes outside shtest's tree"
	((attempts >= MIN_ATTEMPTS))
}
