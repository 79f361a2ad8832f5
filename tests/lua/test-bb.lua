--[[
test-bb.lua - lua/burst_buffer.lua's hooks as each Slurm release calls
them, against a stand-in CLI (fake-bb-cli): every hook Slurm 24.05 and later
require exists; on 22.05 (no slurm.SLURM_BB_BUSY) data_in and data_out wait
for the verified result; on 24.05+ they return at once and the test hooks
answer BUSY until the daemon says the stage is verified; an error reaches
Slurm with the daemon's message; setup and teardown ride out a daemon
restart (--wait). Prints TAP.

  FAKE_BB_DIR=DIR STAGEHAND_CLI=.../fake-bb-cli lua test-bb.lua --lua-dir PATH/lua
]]
local here = (arg[0]:match("^(.*)/[^/]*$") or ".")
package.path = here .. "/?.lua;" .. package.path
local stub = require("stub_slurm")

local lua_dir = here .. "/../../lua"
local i = 1
while arg[i] do
	if arg[i] == "--lua-dir" then lua_dir = arg[i + 1] end
	i = i + 2
end
local dir = assert(os.getenv("FAKE_BB_DIR"), "FAKE_BB_DIR not set")

local T = require("tap")
local ok, is = T.ok, T.is
local function write(path, text)
	local f = assert(io.open(path, "w"))
	f:write(text)
	f:close()
end
local function answer(text) write(dir .. "/answer", text .. "\n") end
-- The arguments of the calls since the last look, one string each.
local function calls()
	local f = io.open(dir .. "/calls", "r")
	local out = {}
	if f then
		for l in f:lines() do out[#out + 1] = l end
		f:close()
	end
	write(dir .. "/calls", "")
	return out
end

-- Load burst_buffer.lua as slurmctld does, with a slurm table of release `rel`.
local REQUIRED = { "slurm_bb_job_process", "slurm_bb_pools", "slurm_bb_job_teardown",
	"slurm_bb_setup", "slurm_bb_data_in", "slurm_bb_test_data_in", "slurm_bb_real_size",
	"slurm_bb_paths", "slurm_bb_pre_run", "slurm_bb_post_run", "slurm_bb_data_out",
	"slurm_bb_test_data_out", "slurm_bb_get_status" }
local function load_hooks(rel)
	slurm = {}
	for k, v in pairs(stub.slurm) do slurm[k] = v end
	if rel >= 24.05 then slurm.SLURM_BB_BUSY = "BUSY" end
	for _, f in ipairs(REQUIRED) do _G[f] = nil end
	local conf = os.tmpname()
	write(conf, "SubmitMode=bb\nSocketPath=" .. dir .. "/sock\n")
	local chunk = assert(loadfile(lua_dir .. "/burst_buffer.lua"))
	chunk()
	os.remove(conf)
	calls()
end

for _, rel in ipairs({ 22.05, 24.11 }) do
	load_hooks(rel)
	for _, f in ipairs(REQUIRED) do
		ok(type(_G[f]) == "function", string.format("%.2f: %s is defined", rel, f))
	end
end

-- 22.05: data_in waits for the verified result, no test hooks are called.
load_hooks(22.05)
answer("stagehand-bb: ok: inputs staged for job 7")
is(slurm_bb_data_in("7", "/x/script"), slurm.SUCCESS, "22.05: data_in ok when staged")
local c = calls()
ok(#c == 1 and c[1]:find("^bb data%-in 7 %-%-wait %d+$"), "22.05: data_in waits (--wait)", c[1])
answer("stagehand-bb: error: stage-in failed: /archive/x: No such file or directory")
local rc, msg = slurm_bb_data_out("7", "/x/script")
is(rc, slurm.ERROR, "22.05: data_out error is an error")
ok(msg and msg:find("No such file", 1, true), "22.05: the daemon's message reaches Slurm", msg)
ok(calls()[1]:find("^bb data%-out 7 %-%-wait %d+$"), "22.05: data_out waits (--wait)")

-- 24.11: data_in returns at once, test_data_in polls.
load_hooks(24.11)
answer("stagehand-bb: busy: data-in: under way for job 8")
rc, msg = slurm_bb_data_in("8", "/x/script", "1000", "1000", {})
is(rc, slurm.SUCCESS, "24.11: data_in returns success while the stage is under way")
is(msg, nil, "24.11: data_in's success carries no message")
ok(calls()[1] == "bb data-in 8 --poll", "24.11: data_in asks once (--poll)")
rc, msg = slurm_bb_test_data_in("8", "/x/script", "1000", "1000", {})
is(rc, slurm.SUCCESS, "24.11: test_data_in busy: SUCCESS")
is(msg, "BUSY", "24.11: test_data_in busy: slurm.SLURM_BB_BUSY")
ok(calls()[1] == "bb data-in 8 --poll", "24.11: test_data_in asks once (--poll)")
answer("stagehand-bb: ok: inputs staged for job 8")
rc, msg = slurm_bb_test_data_in("8", "/x/script", "1000", "1000", {})
is(rc, slurm.SUCCESS, "24.11: test_data_in staged: SUCCESS")
ok(msg ~= "BUSY", "24.11: test_data_in staged: not BUSY", msg)
-- Slurm 24.11 fails a hook whose second value is not a string: none at all.
is(select("#", slurm_bb_test_data_in("8", "/x/script", "1000", "1000", {})), 1,
	"24.11: test_data_in staged: one value (no nil second value)")
is(select("#", slurm_bb_data_in("8", "/x/script", "1000", "1000", {})), 1,
	"24.11: data_in staged: one value")
answer("stagehand-bb: error: stage-in failed: /archive/x: Permission denied (EACCES)")
rc, msg = slurm_bb_test_data_in("8", "/x/script", "1000", "1000", {})
is(rc, slurm.ERROR, "24.11: test_data_in failed: ERROR (Slurm holds the job)")
ok(msg and msg:find("Permission denied", 1, true), "24.11: test_data_in failed: the daemon's message", msg)
answer("stagehand-bb: busy: data-out: under way for job 8")
calls()
is(slurm_bb_data_out("8", "/x/script", "1000", "1000", {}), slurm.SUCCESS, "24.11: data_out returns at once")
rc, msg = slurm_bb_test_data_out("8", "/x/script", "1000", "1000", {})
is(msg, "BUSY", "24.11: test_data_out busy: BUSY")
ok(calls()[2] == "bb data-out 8 --poll", "24.11: test_data_out asks once (--poll)")
answer("stagehand-bb: error: stagehand: archive of results failed")
rc, msg = slurm_bb_data_out("8", "/x/script", "1000", "1000", {})
is(rc, slurm.ERROR, "24.11: data_out reports a failure already known")
-- Garbage from the CLI is an error with what it printed, never BUSY forever.
answer("Segmentation fault")
rc, msg = slurm_bb_test_data_in("8", "/x/script", "1000", "1000", {})
is(rc, slurm.ERROR, "24.11: an answer without a stagehand-bb line is an error")
ok(msg and msg:find("Segmentation fault", 1, true), "... that shows what the CLI printed", msg)

-- setup and teardown ride out a daemon restart; a bad job id never runs the CLI.
answer("stagehand-bb: ok: setup: 9")
calls()
is(slurm_bb_setup("9", "1000", "1000", "(null)", "0", "/x/script", {}), slurm.SUCCESS, "setup ok")
ok(calls()[1]:find("^bb setup 9 %-%-wait %d+$"), "setup keeps asking a restarting daemon (--wait)")
answer("stagehand-bb: ok: teardown: 9")
is(slurm_bb_job_teardown("9", "/x/script", "true", "1000", "1000", {}), slurm.SUCCESS, "teardown ok")
ok(calls()[1]:find("^bb teardown 9 %-%-hurry %-%-wait %d+$"), "teardown passes hurry and --wait")
rc, msg = slurm_bb_test_data_in("9; rm -rf /", "/x/script")
is(rc, slurm.ERROR, "a job id that is not a number is refused")
is(#calls(), 0, "... without running the CLI")

T.done()
