#!/bin/sh
# conf-keys.sh - stagehand.conf(5), the sample config and the Lua module
# agree with the one table of stagehand.conf keys (lua/stagehand_conf.lua),
# and the Lua module reads its keys as stagehandd does; conf-keys.lua says
# what it checks (TAP). Needs STAGEHAND_LUA (configure's Lua),
# STAGEHAND_SRCDIR and STAGEHAND_CONF_PROBE (tests/unit/conf_probe);
# tests/Makefile.am sets them.
lua=${STAGEHAND_LUA:-lua5.1}
src=${STAGEHAND_SRCDIR:-..}
probe=${STAGEHAND_CONF_PROBE:-./unit/conf_probe}
out=${TMPDIR:-/tmp}/stagehand-conf-keys.$$
trap 'rm -f "$out"' EXIT
"$lua" "$src/tests/unit/conf-keys.lua" "$src" --probes | "$probe" > "$out" || {
	echo "1..1"
	echo "not ok 1 - $probe reads the probe lines (exit status $?)"
	exit 1
}
"$lua" "$src/tests/unit/conf-keys.lua" "$src" "$out"
