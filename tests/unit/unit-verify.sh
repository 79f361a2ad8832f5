#!/bin/sh
# unit-verify.sh - the shipped systemd unit passes systemd-analyze verify (TAP).
# systemd-analyze checks that ExecStart= and friends point at executables, so
# the built unit (etc/stagehandd.service, installed paths) is verified as a
# copy whose daemon paths point at this build's stagehandd.
# --man=no: the man pages of Documentation= exist only once installed.
# Needs STAGEHAND_UNIT (the built unit) and STAGEHAND_DAEMON_BIN; skips (77)
# without systemd-analyze.

unit=${STAGEHAND_UNIT:-../etc/stagehandd.service}
daemon=${STAGEHAND_DAEMON_BIN:-../daemon/stagehandd}
command -v systemd-analyze >/dev/null 2>&1 || { echo "1..0 # SKIP no systemd-analyze"; exit 77; }
tmp=${TMPDIR:-/tmp}/stagehand-unit-verify.$$
mkdir "$tmp" || exit 1
trap 'rm -rf "$tmp"' EXIT

echo "1..3"
sbin=$(sed -n 's|^ExecStart=\(.*\)/stagehandd .*|\1|p' "$unit")
sed "s|$sbin/stagehandd|$daemon|g" "$unit" >"$tmp/stagehandd.service"
if systemd-analyze verify --man=no "$tmp/stagehandd.service" >"$tmp/out" 2>&1 && ! [ -s "$tmp/out" ]; then
	echo "ok 1 - systemd-analyze verify: no complaints"
else
	echo "not ok 1 - systemd-analyze verify complained"
	sed 's/^/# /' "$tmp/out"
fi
if grep -qx 'Type=notify' "$unit" && grep -qE '^WatchdogSec=[1-9]' "$unit"; then
	echo "ok 2 - Type=notify with a watchdog"
else
	echo "not ok 2 - Type=notify with a watchdog"
fi
if grep -qE '^NotifyAccess=main$' "$unit"; then
	echo "ok 3 - only the main process may notify (workers cannot)"
else
	echo "not ok 3 - NotifyAccess=main"
fi
