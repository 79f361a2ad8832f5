--[[
run-vectors.lua - run every tests/vectors/*.json through the Lua parser in
lua/job_submit.lua and print TAP.

  lua run-vectors.lua [--script PATH/job_submit.lua] VECTOR_DIR

Comparison as docs/directives.md "Test vectors" says: expect.actions
exactly (each action field by field, through the plan's JSON so the encoder
is checked too); warnings and errors in order, same length, by line and
code, and by token and message_contains where the vector gives them.
A vector's config names only what it changes; the rest is the documented
default (not the site's SITE table).
]]
local here = (arg[0]:match("^(.*)/[^/]*$") or ".")
package.path = here .. "/?.lua;" .. package.path
local json = require("testjson")
local stub = require("stub_slurm")

local script_path = here .. "/../../lua/job_submit.lua"
local dir
local i = 1
while arg[i] do
	if arg[i] == "--script" then
		script_path = arg[i + 1]
		i = i + 2
	else
		dir = arg[i]
		i = i + 1
	end
end
if not dir then
	io.stderr:write("usage: run-vectors.lua [--script job_submit.lua] VECTOR_DIR\n")
	os.exit(2)
end

slurm = stub.slurm
local chunk, lerr = loadfile(script_path)
if not chunk then
	print("1..1")
	print("not ok 1 - load " .. script_path .. ": " .. tostring(lerr))
	os.exit(1)
end
chunk()
local sh = stagehand

local DEFAULTS = {
	allowed_schemes = { "https", "s3", "ftp", "ftps", "sftp", "file" },
	stage_in_roots = {},
	max_directives = 64, max_line = 4096, max_path = 4095,
}

local function readfile(p)
	local f = assert(io.open(p, "rb"))
	local s = f:read("*a")
	f:close()
	return s
end

local function list_vectors(d)
	local p = io.popen('ls -1 "' .. d .. '" 2>/dev/null')
	local files = {}
	for name in p:lines() do
		if name:match("%.json$") then files[#files + 1] = name end
	end
	p:close()
	table.sort(files)
	return files
end

local function show(v)
	if v == nil or v == json.null then return "null" end
	if type(v) == "string" then return string.format("%q", v) end
	return tostring(v)
end

local function same(a, b)
	if a == json.null then a = nil end
	if b == json.null then b = nil end
	return a == b
end

local function compare_actions(exp, got, diffs)
	if #exp ~= #got then
		diffs[#diffs + 1] = string.format("actions: expected %d, got %d", #exp, #got)
	end
	for k = 1, math.max(#exp, #got) do
		local e, g = exp[k] or {}, got[k] or {}
		local keys = {}
		for key in pairs(e) do keys[key] = true end
		for key in pairs(g) do keys[key] = true end
		for key in pairs(keys) do
			if not same(e[key], g[key]) or (e[key] == nil) ~= (g[key] == nil) then
				diffs[#diffs + 1] = string.format("actions[%d].%s: expected %s, got %s",
					k, key, show(e[key]), show(g[key]))
			end
		end
	end
end

-- expect.after ({line, jobs}) against the plan JSON's "after" (absent: none).
local function compare_after(exp, got, diffs)
	local function text(a)
		if a == nil or a == json.null then return "none" end
		local jobs = {}
		for i, j in ipairs(a.jobs or {}) do jobs[i] = show(j) end
		return string.format("line %s jobs [%s]", show(a.line), table.concat(jobs, ","))
	end
	if text(exp) ~= text(got) then
		diffs[#diffs + 1] = string.format("after: expected %s, got %s", text(exp), text(got))
	end
end

local function compare_diags(what, exp, got, diffs)
	exp = exp or {}
	if #exp ~= #got then
		diffs[#diffs + 1] = string.format("%s: expected %d, got %d", what, #exp, #got)
	end
	for k = 1, math.max(#exp, #got) do
		local e, g = exp[k], got[k]
		if not e then
			diffs[#diffs + 1] = string.format("%s[%d]: unexpected line %d %s %s (%s)", what, k,
				g.line, g.code, show(g.token), g.message)
		elseif not g then
			diffs[#diffs + 1] = string.format("%s[%d]: missing line %s %s", what, k,
				show(e.line), show(e.code))
		else
			if e.line ~= g.line or e.code ~= g.code then
				diffs[#diffs + 1] = string.format("%s[%d]: expected line %s %s, got line %d %s (%s)",
					what, k, show(e.line), show(e.code), g.line, g.code, g.message)
			end
			if e.token ~= nil and e.token ~= g.token then
				diffs[#diffs + 1] = string.format("%s[%d]: token expected %s, got %s", what, k,
					show(e.token), show(g.token))
			end
			if e.message_contains ~= nil and not string.find(g.message, e.message_contains, 1, true) then
				diffs[#diffs + 1] = string.format("%s[%d]: message %s does not contain %s", what, k,
					show(g.message), show(e.message_contains))
			end
		end
	end
end

local files = list_vectors(dir)
print("1.." .. #files)
if #files == 0 then
	print("# no vectors in " .. dir)
	os.exit(1)
end
local failed = 0
for n, name in ipairs(files) do
	local diffs = {}
	local ok, perr = pcall(function()
		local v = json.decode(readfile(dir .. "/" .. name))
		local cfg = {}
		for k, d in pairs(DEFAULTS) do cfg[k] = d end
		if type(v.config) == "table" then
			for k, c in pairs(v.config) do cfg[k] = c end
		end
		local script = v.script
		if v.script_b64 then script = json.base64_decode(v.script_b64) end
		assert(type(script) == "string", "vector has neither script nor script_b64")
		local res = sh.parse(script, cfg)
		local plan = json.decode(sh.plan_json(res.actions, res.after))
		if plan.version ~= 1 then diffs[#diffs + 1] = "plan version is not 1" end
		compare_actions(v.expect.actions or {}, plan.actions, diffs)
		local ec, gc = v.expect.capacity, res.capacity
		if (ec == nil) ~= (gc == nil) or (ec and (ec.line ~= gc.line or ec.size ~= gc.size or
				(ec.pool ~= json.null and ec.pool or nil) ~= gc.pool)) then
			diffs[#diffs + 1] = string.format("capacity: expected %s, got %s",
				ec and string.format("line %s size %s pool %s", ec.line, ec.size, tostring(ec.pool)) or "none",
				gc and string.format("line %s size %s pool %s", gc.line, gc.size, tostring(gc.pool)) or "none")
		end
		compare_after(v.expect.after, plan.after, diffs)
		compare_diags("warnings", v.expect.warnings, res.warnings, diffs)
		compare_diags("errors", v.expect.errors, res.errors, diffs)
	end)
	if not ok then diffs[#diffs + 1] = "raised: " .. tostring(perr) end
	if #diffs == 0 then
		print(string.format("ok %d - %s", n, name))
	else
		failed = failed + 1
		print(string.format("not ok %d - %s", n, name))
		for _, d in ipairs(diffs) do print("#   " .. d) end
	end
end
if failed > 0 then
	print(string.format("# %d of %d vectors failed (%s)", failed, #files, _VERSION))
	os.exit(1)
end
print(string.format("# all %d vectors passed (%s)", #files, _VERSION))
