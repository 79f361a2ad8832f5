#!/bin/sh
# unit-security.sh - the shipped systemd unit's exposure score stays at or
# below the ceiling recorded in unit-security.ceiling (TAP).
# systemd-analyze security --offline=yes (systemd 252 and later) scores a
# unit file without a running systemd. Needs STAGEHAND_UNIT (the built
# unit); skips (77) without systemd-analyze or without --offline.

unit=${STAGEHAND_UNIT:-../etc/stagehandd.service}
here=$(dirname "$0")
ceiling_file=${STAGEHAND_UNIT_CEILING:-$here/unit-security.ceiling}
command -v systemd-analyze >/dev/null 2>&1 || { echo "1..0 # SKIP no systemd-analyze"; exit 77; }
tmp=${TMPDIR:-/tmp}/stagehand-unit-security.$$
mkdir "$tmp" || exit 1
trap 'rm -rf "$tmp"' EXIT

# The score is read from the plain-ASCII line:
#   -> Overall exposure level for stagehandd.service: 3.2 OK :-)
LC_ALL=C systemd-analyze security --offline=yes --no-pager "$unit" >"$tmp/out" 2>&1
rc=$?
score=$(sed -n 's/^.*Overall exposure level for [^:]*: \([0-9][0-9.]*\) .*$/\1/p' "$tmp/out")
if [ -z "$score" ]; then
	if grep -q -- '--offline' "$tmp/out" || grep -qi 'unrecognized option' "$tmp/out"; then
		echo "1..0 # SKIP systemd-analyze has no --offline (systemd < 252)"
		exit 77
	fi
	echo "1..1"
	echo "not ok 1 - systemd-analyze security gave no overall score (exit $rc)"
	sed 's/^/# /' "$tmp/out"
	exit 0
fi
ceiling=$(grep -v '^#' "$ceiling_file" | grep -m1 '[0-9]')

echo "1..1"
if awk -v s="$score" -v c="$ceiling" 'BEGIN { exit !(s + 0 <= c + 0) }'; then
	echo "ok 1 - exposure $score, ceiling $ceiling"
else
	echo "not ok 1 - exposure $score is above the ceiling $ceiling ($ceiling_file)"
	echo "# what the unit now allows (each line adds to the score):"
	grep '^- ' "$tmp/out" | sed 's/^/# /'
fi
