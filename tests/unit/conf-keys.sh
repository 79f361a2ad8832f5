#!/bin/sh
# conf-keys.sh - stagehand.conf(5), the sample config and the Lua module
# agree with the one table of stagehand.conf keys (lua/stagehand_conf.lua);
# conf-keys.lua says what it checks (TAP). Needs STAGEHAND_LUA (configure's
# Lua) and STAGEHAND_SRCDIR; tests/Makefile.am sets both.
exec "${STAGEHAND_LUA:-lua5.1}" "${STAGEHAND_SRCDIR:-..}/tests/unit/conf-keys.lua" \
	"${STAGEHAND_SRCDIR:-..}"
