--[[
submit-hostile-lua.lua - time the shipped Lua hooks on the adversarial
scripts of submit-hostile-shapes.lua, under a stub `slurm` table whose
log_user costs what Slurm's does: job_submit/lua appends every call to one
growing message (xstrfmtcat of the whole message each time).

  LUA submit-hostile-lua.lua --lua-dir DIR [--reps N] [--sizes B,B]
      [--shapes a,b] [--limit-ms MS] [--bb]
      prints one line per shape and size:
      RESULT <interp> submit|bb <shape> <bytes> <median ms> <min ms> <max ms> <log_user calls> <user bytes>
  LUA submit-hostile-lua.lua --write DIR [--sizes ...] [--shapes ...]
      writes each script as DIR/<shape>-<bytes>.sh (for the C timer)
  LUA submit-hostile-lua.lua --quick --lua-dir DIR [--budget-ms MS]
      the regression form for 'make check': a few shapes at 4 MB, one run
      each, exit 1 if any takes over MS (default 200) of CPU

Times are CPU seconds of this process (os.clock) around one
slurm_job_submit (or slurm_bb_job_process with --bb) call, the script
already in memory (bb: in a file, as Slurm passes it). A call still running
at --limit-ms (default 10000) is stopped by a debug hook and reported at
that time, so an old quadratic parser does not stall the run.
]]
local HERE = (debug.getinfo(1, "S").source or ""):match("^@(.*/)") or "./"
local SH = dofile(HERE .. "submit-hostile-shapes.lua")

local args = { reps = 5, sizes = "419430,4194304", limit = 10000, budget = 200 }
local i = 1
while i <= #arg do
	local a = arg[i]
	if a == "--lua-dir" then args.dir = arg[i + 1]; i = i + 1
	elseif a == "--reps" then args.reps = tonumber(arg[i + 1]); i = i + 1
	elseif a == "--sizes" then args.sizes = arg[i + 1]; i = i + 1
	elseif a == "--shapes" then args.shapes = arg[i + 1]; i = i + 1
	elseif a == "--limit-ms" then args.limit = tonumber(arg[i + 1]); i = i + 1
	elseif a == "--budget-ms" then args.budget = tonumber(arg[i + 1]); i = i + 1
	elseif a == "--write" then args.write = arg[i + 1]; i = i + 1
	elseif a == "--quick" then args.quick = true
	elseif a == "--bb" then args.bb = true
	else io.stderr:write("submit-hostile-lua: unknown argument '", a, "'\n"); os.exit(2) end
	i = i + 1
end

local function list(s)
	local t = {}
	for x in s:gmatch("[^,]+") do t[#t + 1] = x end
	return t
end

local sizes = {}
for _, s in ipairs(list(args.sizes)) do sizes[#sizes + 1] = tonumber(s) end
local wanted
if args.shapes then
	wanted = {}
	for _, s in ipairs(list(args.shapes)) do wanted[s] = true end
end
if args.quick then
	args.limit = args.budget * 4
	wanted = { ["near-miss"] = true, ["after-command"] = true, ["max-directives"] = true,
		["data-comments"] = true, plain = true }
	sizes = { 4194304 }
end
local shapes = {}
for _, s in ipairs(SH.SHAPES) do
	if not wanted or wanted[s[1]] then shapes[#shapes + 1] = s end
end

if args.write then
	for _, s in ipairs(shapes) do
		for _, size in ipairs(sizes) do
			local f = assert(io.open(string.format("%s/%s-%d.sh", args.write, s[1], size), "wb"))
			f:write(s[2](size))
			f:close()
		end
	end
	os.exit(0)
end

assert(args.dir, "--lua-dir DIR is needed")

-- The stub: log_user appends to one message, as job_submit/lua does.
local user_msg, user_calls = nil, 0
local function fmtcall(fmt, ...) return string.format(fmt, ...) end
slurm = {
	SUCCESS = 0, ERROR = -1, FAILURE = -1, NO_VAL = 4294967294, INFINITE = 4294967295,
	log_user = function(fmt, ...)
		local m = fmtcall(fmt, ...)
		user_calls = user_calls + 1
		if user_msg then user_msg = user_msg .. "\n" .. m else user_msg = m end
	end,
	log_info = function() end, log_verbose = function() end, log_debug = function() end,
	log_error = function() end,
}

local submit_ok = loadfile(args.dir .. "/job_submit.lua")
assert(submit_ok, "cannot load job_submit.lua from " .. args.dir)
submit_ok()
local job_submit = slurm_job_submit
if args.bb then
	assert(loadfile(args.dir .. "/burst_buffer.lua"))()
end
local bb_job_process = slurm_bb_job_process

-- One timed call; returns ms of CPU. The hook stops a call past the limit.
local function timed(f, ...)
	collectgarbage("collect")
	local t0 = os.clock()
	local deadline = t0 + args.limit / 1000
	debug.sethook(function()
		if os.clock() > deadline then
			debug.sethook()
			error("over the time limit", 0)
		end
	end, "", 100000)
	pcall(f, ...)
	debug.sethook()
	return (os.clock() - t0) * 1000
end

local function median(t)
	table.sort(t)
	local n = #t
	if n % 2 == 1 then return t[(n + 1) / 2] end
	return (t[n / 2] + t[n / 2 + 1]) / 2
end

local interp = _VERSION:gsub("Lua ", "lua")
local failed = 0
for _, s in ipairs(shapes) do
	for _, size in ipairs(sizes) do
		local script = s[2](size)
		local path
		if args.bb then
			path = os.tmpname()
			local f = assert(io.open(path, "wb"))
			f:write(script)
			f:close()
		end
		local times, calls, bytes = {}, 0, 0
		local reps = args.quick and 1 or args.reps
		for _ = 1, reps do
			user_msg, user_calls = nil, 0
			local ms
			if args.bb then
				ms = timed(bb_job_process, path)
			else
				ms = timed(job_submit, { script = script, priority = slurm.NO_VAL }, {}, 1000)
			end
			times[#times + 1] = ms
			calls, bytes = user_calls, user_msg and #user_msg or 0
		end
		if path then os.remove(path) end
		table.sort(times)
		local med = median(times)
		print(string.format("RESULT %s %s %s %d %.3f %.3f %.3f %d %d", interp, args.bb and "bb" or "submit",
			s[1], #script, med, times[1], times[#times], calls, bytes))
		if args.quick and med > args.budget then
			failed = failed + 1
			print(string.format("# FAIL %s: %s of %d bytes took %.0f ms of CPU, over the %d ms budget",
				interp, s[1], #script, med, args.budget))
		end
		io.stdout:flush()
	end
end
if args.quick then
	if failed > 0 then os.exit(1) end
	print(string.format("# %s: every quick shape at 4 MB under %d ms", interp, args.budget))
end
