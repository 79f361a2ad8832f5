#!/bin/sh
# lua-lookup.sh - where job_submit.lua and burst_buffer.lua find the
# stagehand module (TAP). lua/Makefile.am's install is run into a scratch
# pkgdatadir; then each wrapper is copied alone next to a "slurm.conf
# directory" and loaded under Lua with a stub slurm table, as slurmctld
# loads it: it must take the module from the installed pkgdatadir, prefer
# one beside itself, and, when neither is complete, fail naming both places
# and why. A wrapper from the source tree (the placeholder left in it) looks
# beside itself only. Needs STAGEHAND_LUA, STAGEHAND_SRCDIR and
# STAGEHAND_BUILDDIR (tests/Makefile.am sets them).
lua=${STAGEHAND_LUA:-lua5.1}
src=${STAGEHAND_SRCDIR:-..}
build=${STAGEHAND_BUILDDIR:-..}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/stagehand-lua-lookup.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
n=0 bad=0
ok() { n=$((n + 1)); echo "ok $n - $1"; }
notok() { n=$((n + 1)); bad=1; echo "not ok $n - $1"; shift; for l in "$@"; do echo "# $l"; done; }

echo "1..7"
share=$tmp/share
if ! env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C "$build/lua" install pkgdatadir="$share" >"$tmp/install.log" 2>&1; then
	notok "make install of lua/ into $share" "$(cat "$tmp/install.log")"
	exit 1
fi
ok "make install of lua/ into a scratch pkgdatadir"

# load DIR/FILE: run the wrapper as slurmctld would; its log lines and
# error on stdout.
load() {
	STAGEHAND_CONF=/dev/null "$lua" -e '
		local function log(...) print(string.format(...)) end
		slurm = { SUCCESS = 0, ERROR = -1, log_info = log, log_debug = log,
			log_error = log, log_user = log, log_verbose = log }' -e "
		local ok, err = pcall(dofile, '$1')
		if not ok then print('LOAD ERROR: ' .. tostring(err)) os.exit(1) end" 2>&1
}

for w in job_submit.lua burst_buffer.lua; do
	mkdir -p "$tmp/slurm-$w"
	cp "$share/$w" "$tmp/slurm-$w/$w"
	out=$(load "$tmp/slurm-$w/$w")
	if echo "$out" | grep -qF "loaded from $share/"; then
		ok "$w alone next to slurm.conf loads the module from the installed pkgdatadir"
	else
		notok "$w alone next to slurm.conf loads the module from the installed pkgdatadir" "$out"
	fi
done

# All four modules beside the wrapper: that copy wins.
d=$tmp/slurm-beside
mkdir -p "$d"
cp "$share/job_submit.lua" "$share/stagehand.lua" "$share/stagehand_dsl.lua" "$share/stagehand_bb.lua" "$share/stagehand_conf.lua" "$d/"
out=$(load "$d/job_submit.lua")
if echo "$out" | grep -qF "loaded from $d/"; then
	ok "a complete module beside job_submit.lua is the one loaded"
else
	notok "a complete module beside job_submit.lua is the one loaded" "$out"
fi

# Neither place complete: one error naming both, with the reason for each.
rm -f "$share/stagehand_dsl.lua"
out=$(load "$tmp/slurm-job_submit.lua/job_submit.lua")
if echo "$out" | grep -q "LOAD ERROR: .*cannot find the stagehand module for $tmp/slurm-job_submit.lua/job_submit.lua: tried $tmp/slurm-job_submit.lua/ (.*No such file or directory) and $share/ (.*stagehand_dsl.lua: No such file or directory)"; then
	ok "with the module in neither place, the error names both and why each failed"
else
	notok "with the module in neither place, the error names both and why each failed" "$out"
fi

# The source tree's wrapper keeps the placeholder: beside itself only.
mkdir -p "$tmp/slurm-src"
cp "$src/lua/job_submit.lua" "$tmp/slurm-src/"
out=$(load "$tmp/slurm-src/job_submit.lua")
if echo "$out" | grep -q "LOAD ERROR: .*tried $tmp/slurm-src/ ([^)]*); install" && ! echo "$out" | grep -q "pkgdatadir@"; then
	ok "a source tree's job_submit.lua looks beside itself only"
else
	notok "a source tree's job_submit.lua looks beside itself only" "$out"
fi

# And the source tree's own copy loads (the test bed links it).
out=$(load "$src/lua/job_submit.lua")
if echo "$out" | grep -qF "loaded from $src/lua/"; then
	ok "the source tree's job_submit.lua loads the module beside it"
else
	notok "the source tree's job_submit.lua loads the module beside it" "$out"
fi
exit $bad
