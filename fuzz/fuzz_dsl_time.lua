--[[
fuzz_dsl_time.lua - a time-fuzzer for the Lua #DATA parser and job_submit,
beside the libFuzzer targets (make fuzz runs it after them, in each Lua
found). libFuzzer finds crashes in the C parser; this finds scripts that
are slow in the Lua one, where slurmctld runs it under its job write lock.

  LUA fuzz/fuzz_dsl_time.lua --lua-dir DIR [--seconds 60] [--seed N]
      [--budget-ms 50] [--max-bytes 4194304] [--out DIR]

Each round builds a random script out of the hostile shapes'
ingredients (tests/bench/submit-hostile-shapes.lua: near-miss lines in
every spelling, #DATA before and after a command, long values, escapes,
patterns, CRLF, NUL and invalid UTF-8, blank and comment runs; up to
--max-bytes, sizes spread over every order of magnitude), passes it to
slurm_job_submit under a stub slurm table whose log_user grows one message
as Slurm's does, and checks:
  * the call takes under --budget-ms of CPU (a slow one is timed twice more
    and flagged only if the fastest of the three is still over: a loaded
    machine does not make a false alarm; a call at ten times the budget is
    stopped there by a debug hook);
  * at most 21 warnings and 21 errors come back from parse (20 + "and N
    more"), and what log_user got stays under 10 KB;
  * parse never raises.
A flagged script is written to OUT/crashes/fuzz_dsl_time-SEED-ROUND.sh (OUT:
--out, default fuzz/out) and the run exits 1; reproduce with --replay FILE.
]]
local HERE = (debug.getinfo(1, "S").source or ""):match("^@(.*/)") or "./"

local args = { seconds = 60, budget = 50, max = 4194304, out = HERE .. "out", seed = os.time() }
local i = 1
while i <= #arg do
	local a, v = arg[i], arg[i + 1]
	if a == "--lua-dir" then args.dir = v
	elseif a == "--seconds" then args.seconds = tonumber(v)
	elseif a == "--seed" then args.seed = tonumber(v)
	elseif a == "--budget-ms" then args.budget = tonumber(v)
	elseif a == "--max-bytes" then args.max = tonumber(v)
	elseif a == "--out" then args.out = v
	elseif a == "--replay" then args.replay = v
	else io.stderr:write("fuzz_dsl_time: unknown argument '", a, "'\n"); os.exit(2) end
	i = i + 2
end
assert(args.dir, "--lua-dir DIR (where job_submit.lua is) is needed")

local user_msg, user_calls = nil, 0
slurm = {
	SUCCESS = 0, ERROR = -1, FAILURE = -1, NO_VAL = 4294967294, INFINITE = 4294967295,
	log_user = function(fmt, ...)
		local m = string.format(fmt, ...)
		user_calls = user_calls + 1
		if user_msg then user_msg = user_msg .. "\n" .. m else user_msg = m end
	end,
	log_info = function() end, log_verbose = function() end, log_debug = function() end,
	log_error = function() end,
}
assert(loadfile(args.dir .. "/job_submit.lua"))()
local parse = stagehand.parse

local rep, char, random = string.rep, string.char, math.random

-- Ingredients: each returns one or more lines (with their line ends).
local function word(n)
	local t = {}
	for k = 1, n do t[k] = char(random(97, 122)) end
	return table.concat(t)
end
local KEYS = { "stage_in", "archive", "exempt", "stage_out", "to", "when", "keep", "capacity",
	"pool", "after", "archvie", "x", "" }
local function value()
	local r = random(12)
	if r == 1 then return rep("a/", random(1, 2000)) end
	if r == 2 then return rep("%a%u%j", random(1, 700)) end
	if r == 3 then return '"' .. rep('\\"\\\\', random(1, 1000)) .. '"' end
	if r == 4 then return rep("\195\169", random(1, 2000)) end
	if r == 5 then return "\255\254" .. word(random(0, 20)) end
	if r == 6 then return "x\0y" end
	if r == 7 then return "/archive/" .. word(random(1, 30)) end
	if r == 8 then return "s3://b/" .. word(random(1, 30)) end
	if r == 9 then return "../" .. word(3) end
	if r == 10 then return rep("z", random(1, 5000)) end
	return word(random(1, 12)) .. "/"
end
local function directive()
	local t = { "#DATA" }
	for _ = 1, random(0, 4) do t[#t + 1] = KEYS[random(#KEYS)] .. "=" .. value() end
	return table.concat(t, rep(" ", random(1, 3)))
end
local PIECES = {
	directive,
	function() return "#data " .. (random(2) == 1 and "archive=x" or word(random(0, 40))) end,
	function() return "# DATA " .. word(random(0, 10)) end,
	function() return rep(" ", random(1, 8)) .. "#DATA archive=" .. word(4) end,
	function() return "\t#  dAtA\tx=" .. word(3) end,
	function() return "#SBATCH --" .. word(random(1, 200)) end,
	function() return "#" end,
	function() return "" end,
	function() return rep(" ", random(1, 4)) end,
	function() return "echo " .. word(random(1, 60)) end,
	function() return "#DATA" end,
	function() return "#DATAX" .. word(3) end,
	function() return "#" .. rep("data", random(1, 1000)) end,
	function() return "#\0\0DATA" end,
	function() return "#data \192\175=x" end,
}
local ENDS = { "\n", "\n", "\n", "\r\n", "\r\r\n" }

-- A random script of about size bytes: a run of one or a few pieces
-- repeated (what makes a script big), with random pieces mixed in.
local function script(size)
	local out, len = { "#!/bin/bash\n#DATA archive=out/\n" }, 0
	local unit = {}
	for k = 1, random(1, 3) do unit[k] = PIECES[random(#PIECES)]() .. ENDS[random(#ENDS)] end
	unit = table.concat(unit)
	while len < size do
		local piece
		if random(8) == 1 then
			piece = PIECES[random(#PIECES)]() .. ENDS[random(#ENDS)]
		else
			local n = math.max(1, math.floor(random() * (size - len) / #unit))
			piece = rep(unit, math.min(n, random(1, 1 + math.floor(size / #unit / 4))))
		end
		out[#out + 1] = piece
		len = len + #piece
	end
	return table.concat(out):sub(1, size)
end

local function cpu_ms(s)
	user_msg, user_calls = nil, 0
	collectgarbage("collect")
	local t0 = os.clock()
	-- a call ten times over the budget is stopped there: it is flagged
	-- either way, and an old quadratic parser would take minutes
	local deadline = t0 + args.budget * 10 / 1000
	debug.sethook(function()
		if os.clock() > deadline then
			debug.sethook()
			error("over the time limit", 0)
		end
	end, "", 100000)
	pcall(slurm_job_submit, { script = s, priority = slurm.NO_VAL }, {}, 1000)
	debug.sethook()
	return (os.clock() - t0) * 1000
end

local function check(s)
	local why
	local ms = cpu_ms(s)
	if ms > args.budget then
		ms = math.min(ms, cpu_ms(s), cpu_ms(s))
		if ms > args.budget then why = string.format("%.1f ms of CPU, over %d ms", ms, args.budget) end
	end
	if user_msg and #user_msg > 10240 then
		why = (why and why .. "; " or "") .. string.format("log_user got %d bytes", #user_msg)
	end
	local ok, res = pcall(parse, s, nil)
	if not ok then
		why = (why and why .. "; " or "") .. "parse raised: " .. tostring(res)
	elseif #res.warnings > 21 or #res.errors > 21 then
		why = (why and why .. "; " or "") ..
			string.format("%d warnings, %d errors kept (cap 20 + 1)", #res.warnings, #res.errors)
	end
	return why, ms
end

if args.replay then
	local f = assert(io.open(args.replay, "rb"))
	local s = f:read("*a")
	f:close()
	local why, ms = check(s)
	print(string.format("fuzz_dsl_time (%s): %s: %d bytes, %.1f ms: %s", _VERSION, args.replay, #s, ms,
		why or "within bounds"))
	os.exit(why and 1 or 0)
end

math.randomseed(args.seed)
local t_end = os.time() + args.seconds
local rounds, flagged, worst, worst_size = 0, 0, 0, 0
while os.time() < t_end do
	rounds = rounds + 1
	-- sizes spread over every order of magnitude, up to max
	local size = math.floor(math.exp(random() * math.log(args.max)))
	local s = script(size)
	local why, ms = check(s)
	if ms > worst then worst, worst_size = ms, #s end
	if why then
		flagged = flagged + 1
		os.execute("mkdir -p '" .. args.out .. "/crashes'")
		local path = string.format("%s/crashes/fuzz_dsl_time-%d-%d.sh", args.out, args.seed, rounds)
		local f = io.open(path, "wb")
		if f then f:write(s); f:close() end
		print(string.format("fuzz_dsl_time (%s): round %d, %d bytes: %s; input %s (replay: %s %s --lua-dir %s --replay %s)",
			_VERSION, rounds, #s, why, path, arg[-1] or "lua", arg[0], args.dir, path))
	end
end
print(string.format("fuzz_dsl_time (%s): %d scripts in %d s (seed %d), %d over bounds; slowest %.1f ms (%d bytes)",
	_VERSION, rounds, args.seconds, args.seed, flagged, worst, worst_size))
os.exit(flagged > 0 and 1 or 0)
