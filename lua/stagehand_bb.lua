--[[
stagehand_bb.lua - the burst-buffer hooks of stagehand.lua (SubmitMode=bb,
BurstBufferType=burst_buffer/lua with Directive=DATA in burst_buffer.conf).
Loaded by stagehand.lua with the module table and its settings; adds
M.bb_job_process, M.bb_setup, ... for burst_buffer.lua to call.

What Slurm 22.05 really does with these hooks is in
docs/burst-buffer-slurm.md. In short:
  * job_process, paths and pools run inside slurmctld with its locks held:
    they only read the job's script (slurmctld wrote it), or for pools the
    small pools.json stagehandd publishes beside its socket, or return at
    once;
  * setup, data_in, pre_run, post_run, data_out and teardown run in
    slurmscriptd, asynchronously: they hand the work to stagehandd through
    `stagehand bb CALL JOB` (the CLI over the daemon's UNIX socket). setup
    and teardown return as soon as the daemon has the job (setup passes the
    size Slurm reserved, which the stage-in must fit).
  * Up to 23.11, data_in and data_out wait for the daemon's verified
    result, as those releases expect. From 24.05 on (the slurm table has
    SLURM_BB_BUSY), data_in and data_out only check that the daemon has the
    stage and return; slurmctld then polls test_data_in / test_data_out
    every PollInterval, which ask once and answer BUSY until the transfers
    are verified. One script serves both: the release is read from the
    slurm table when a hook runs.
  * A daemon that is restarting must not fail a job: setup and teardown
    keep asking it for DAEMON_WAIT seconds, and a poll that cannot reach it
    answers BUSY (StageInTimeout / StageOutTimeout bound that).
The CLI is $STAGEHAND_CLI in slurmctld's environment, else `stagehand` on
its PATH. The job's plan comes from the record job_submit (stagehand.lua)
put in admin_comment: a bb site runs JobSubmitPlugins=lua too.

Must never: raise a Lua error into slurmctld (every hook is under pcall),
run a program from job_process, paths or pools, or put text from the job
into a command line (only the numeric job id goes there).
]]
local M, SITE = ...

local format, tostring, tonumber, type, pcall = string.format, tostring, tonumber, type, pcall

local CLI = os.getenv("STAGEHAND_CLI") or "stagehand"
-- How long data_in / data_out wait for the daemon at most (up to 23.11);
-- Slurm's StageInTimeout / StageOutTimeout (burst_buffer.conf) cut them off
-- first.
local WAIT_SECONDS = 7 * 86400
-- How long setup and teardown keep asking a daemon that does not answer (a
-- restart): under Slurm's OtherTimeout (burst_buffer.conf, default 300 s).
local DAEMON_WAIT = 240
-- Largest script job_process reads (the #DATA block is at its top).
local MAX_SCRIPT = 4 * 1024 * 1024
local READ_CHUNK = 65536

local function _ok() return M.rc("SUCCESS", 0) end
local function _err() return M.rc("ERROR", -1) end

local function _shell_quote(s)
	return "'" .. tostring(s):gsub("'", "'\\''") .. "'"
end

-- Run `stagehand bb CALL JOB`; the last line says ok, busy (--poll) or
-- error (Lua 5.1's popen cannot give the exit status). Returns the hook's
-- answer; a busy answer is slurm.SUCCESS with "busy" as a third value.
local function _client(call, job_id, extra)
	local id = tonumber(job_id)
	if not id or id < 1 or id ~= math.floor(id) or id > 4294967295 then
		return _err(), "stagehand: " .. call .. ": not a job id: " .. tostring(job_id)
	end
	local cmd = format("%s bb %s %d%s 2>&1", _shell_quote(CLI), call, id, extra or "")
	local p, perr = io.popen(cmd)
	if not p then
		return _err(), format("stagehand: cannot run %s: %s", CLI, tostring(perr))
	end
	local out = p:read("*a") or ""
	p:close()
	local last
	for line in out:gmatch("[^\n]+") do
		if line:find("^stagehand%-bb: ") then last = line end
	end
	if last and last:find("^stagehand%-bb: ok: ") then
		M.log("log_verbose", "stagehand: job %d: bb %s: %s", id, call, (last:gsub("^stagehand%-bb: ok: ", "")))
		return _ok()
	end
	if last and last:find("^stagehand%-bb: busy: ") then
		local msg = last:gsub("^stagehand%-bb: busy: ", "")
		M.log("log_debug", "stagehand: job %d: bb %s: %s", id, call, msg)
		return _ok(), msg, "busy"
	end
	local msg = last and last:gsub("^stagehand%-bb: error: ", "") or
		format("%s bb %s %d gave no answer (%s)", CLI, call, id, out:sub(1, 300))
	M.log("log_error", "stagehand: job %d: bb %s failed: %s", id, call, msg)
	return _err(), msg
end

-- Lua 5.1 has unpack, 5.2+ table.unpack.
local _unpack = table.unpack or unpack

local function _guard(name, f)
	return function(...)
		local r = { n = 0 }
		local function keep(...)
			r = { n = select("#", ...), ... }
		end
		keep(pcall(f, ...))
		if r[1] then return _unpack(r, 2, r.n) end
		M.log("log_error", "stagehand: internal error in %s: %s", name, tostring(r[2]))
		return _err(), "stagehand: internal error in " .. name .. " (see the slurmctld log)"
	end
end

-- job_process(script path): check the #DATA lines at submit, in slurmctld.
function M.bb_job_process(job_script)
	if type(job_script) ~= "string" then return _ok() end
	local f = io.open(job_script, "rb")
	if not f then return _ok() end   -- no script (salloc): nothing to check
	-- In chunks: Lua 5.1 reads one f:read(n) through a buffer that copies
	-- itself over and over (n log n), 4 ms for a 4 MB script.
	local parts, got = {}, 0
	while got < MAX_SCRIPT do
		local chunk = f:read(math.min(READ_CHUNK, MAX_SCRIPT - got))
		if not chunk then break end
		parts[#parts + 1] = chunk
		got = got + #chunk
	end
	f:close()
	local text = table.concat(parts)
	if not text:find("#DATA", 1, true) then return _ok() end
	local res = M.parse(text, nil)
	if #res.errors == 0 then return _ok() end
	local e = res.errors[1]
	return _err(), format("stagehand: line %d: %s (%d #DATA error%s; see 'stagehand check')",
		e.line, e.message, res.error_count, res.error_count == 1 and "" or "s")
end

-- The pool state stagehandd publishes beside its socket (daemon/core/pool.c):
-- {"pools":[{"id":ROOT,"quantity":Q,"free":F,"granularity":1}],"updated":T}.
-- Older than POOL_STATE_MAX_AGE seconds (the daemon is down) = not there.
local POOL_STATE_MAX_AGE = 120
local POOL_STATE_MAX = 65536

-- { [root] = free bytes } from the daemon's file, or {} (and why) when it
-- cannot be used. Only numbers are taken from it, each for a known pool.
local function _pool_free(names)
	local dir = SITE.socket_path:match("^(.*)/[^/]*$")
	if not dir or dir == "" then return {}, "SocketPath has no directory" end
	local path = dir .. "/pools.json"
	local f = io.open(path, "rb")
	if not f then return {}, path .. " not readable" end
	local text = f:read(POOL_STATE_MAX) or ""
	f:close()
	local updated = tonumber(text:match('"updated"%s*:%s*(%d+)'))
	if not updated or os.time() - updated > POOL_STATE_MAX_AGE then
		return {}, path .. " is stale or has no time (is stagehandd running?)"
	end
	local out, known = {}, {}
	for _, r in ipairs(names) do known[r] = true end
	-- Each pool object is flat: {"id":"...","quantity":N,"granularity":1,"free":N}
	for obj in text:gmatch("{[^{}]*}") do
		local id = obj:match('"id"%s*:%s*"([^"\\]*)"')
		local fr = tonumber(obj:match('"free"%s*:%s*(%d+)'))
		if id and known[id] and fr then out[id] = fr end
	end
	return out
end

-- pools(): in slurmctld, at once (docs/admin-guide.md, "Pools"): each
-- scratch root a pool of PoolCapacity bytes, granularity one byte, whose
-- free space is what stagehandd last saw: min(PoolCapacity, the file
-- system's free space + what staged inputs hold). One small file read, no
-- program, no socket.
local _pool_warned
function M.bb_pools()
	local names = M.bb_pool_names()
	if #names == 0 then return _ok() end
	local frees, why = _pool_free(names)
	if why and not _pool_warned then
		M.log("log_info", "stagehand: pools: %s; their free space is PoolCapacity", why)
		_pool_warned = true
	elseif not why then
		_pool_warned = nil
	end
	local out = {}
	for i, r in ipairs(names) do
		local q, fr = SITE.pool_capacity, frees[r]
		if fr then
			if fr > q then fr = q end
			out[i] = format('{"id":"%s","quantity":%.0f,"free":%.0f,"granularity":1}', r, q, fr)
		else
			out[i] = format('{"id":"%s","quantity":%.0f,"granularity":1}', r, q)
		end
	end
	return _ok(), '{"pools":[' .. table.concat(out, ",") .. ']}'
end

-- setup(job, uid, gid, pool, bb_size, script): Slurm's reservation goes to
-- the daemon, which holds the stage-in to it. pool is "(null)" and bb_size 0
-- for a job without capacity=; a pool name is one of ours (Slurm checked it
-- against slurm_bb_pools), and is checked here again before it is quoted.
local function _setup_args(pool, bb_size)
	local n = tonumber(bb_size)
	if type(pool) ~= "string" or pool == "(null)" or not n or n < 1 or n ~= math.floor(n) or
		pool:find("[^A-Za-z0-9/._-]") then
		return ""
	end
	return format(" --size %.0f --pool %s", n, _shell_quote(pool))
end

function M.bb_setup(job_id, pool, bb_size)
	return _client("setup", job_id, _setup_args(pool, bb_size) .. " --wait " .. DAEMON_WAIT)
end

-- Does this Slurm poll test_data_in / test_data_out (24.05 and later)?
-- Those releases put SLURM_BB_BUSY in the slurm table; 22.05 and 23.x
-- do not, and never call the test hooks.
function M.bb_polled()
	return type(slurm) == "table" and slurm.SLURM_BB_BUSY ~= nil
end

-- data_in / data_out: up to 23.11, wait for the verified result. From
-- 24.05 on, only check that the daemon has the stage under way (or done)
-- and return; a daemon that does not answer is fine here, test_* asks
-- again. A failure already known is reported at once.
local function _start(call, job_id)
	if not M.bb_polled() then
		return _client(call, job_id, " --wait " .. WAIT_SECONDS)
	end
	local rc, msg, busy = _client(call, job_id, " --poll")
	-- (Slurm 24.11 fails a hook whose second value is nil, not a string.)
	if busy or msg == nil then return rc end
	return rc, msg
end

-- test_data_in / test_data_out: ask once; BUSY keeps the job where it is
-- and Slurm asks again after PollInterval.
local function _test(call, job_id)
	local rc, msg, busy = _client(call, job_id, " --poll")
	if busy then
		return rc, slurm.SLURM_BB_BUSY or "BUSY"
	end
	if msg == nil then return rc end
	return rc, msg
end

function M.bb_data_in(job_id) return _start("data-in", job_id) end
function M.bb_data_out(job_id) return _start("data-out", job_id) end
function M.bb_test_data_in(job_id) return _test("data-in", job_id) end
function M.bb_test_data_out(job_id) return _test("data-out", job_id) end
function M.bb_teardown(job_id, job_script, hurry)
	return _client("teardown", job_id, ((hurry == true or hurry == "true") and " --hurry" or "") ..
		" --wait " .. DAEMON_WAIT)
end

M.bb_job_process = _guard("slurm_bb_job_process", M.bb_job_process)
M.bb_pools = _guard("slurm_bb_pools", M.bb_pools)
M.bb_setup = _guard("slurm_bb_setup", M.bb_setup)
M.bb_data_in = _guard("slurm_bb_data_in", M.bb_data_in)
M.bb_data_out = _guard("slurm_bb_data_out", M.bb_data_out)
M.bb_test_data_in = _guard("slurm_bb_test_data_in", M.bb_test_data_in)
M.bb_test_data_out = _guard("slurm_bb_test_data_out", M.bb_test_data_out)
M.bb_teardown = _guard("slurm_bb_job_teardown", M.bb_teardown)
