--[[
run-record-vectors.lua - every tests/vectors/record/*.json through
lua/stagehand.lua's split_record and record_state, the reader slurmctld's
job_submit/lua uses; tests/unit/test_record runs the same files through
common/record.c, so the two readers of admin_comment agree. Prints TAP.

  lua run-record-vectors.lua --lua-dir PATH/lua VECTOR_DIR/record
]]
local here = (arg[0]:match("^(.*)/[^/]*$") or ".")
package.path = here .. "/?.lua;" .. package.path
local json = require("testjson")
local stub = require("stub_slurm")
local T = require("tap")

local lua_dir, dir = here .. "/../../lua", nil
local i = 1
while arg[i] do
	if arg[i] == "--lua-dir" then
		lua_dir = arg[i + 1]
		i = i + 2
	else
		dir = arg[i]
		i = i + 1
	end
end
if not dir then
	io.stderr:write("usage: run-record-vectors.lua [--lua-dir DIR] VECTOR_DIR/record\n")
	os.exit(2)
end

slurm = stub.slurm
local m = assert(loadfile(lua_dir .. "/stagehand.lua"))("/dev/null")

local function readfile(p)
	local f = assert(io.open(p, "rb"))
	local s = f:read("*a")
	f:close()
	return s
end

local function nul(v)
	if v == json.null then return nil end
	return v
end

local files = {}
local p = io.popen('ls -1 "' .. dir .. '" 2>/dev/null')
for name in p:lines() do
	if name:match("%.json$") then files[#files + 1] = name end
end
p:close()
table.sort(files)

T.ok(#files >= 30, "found " .. #files .. " record vectors in " .. dir)
for _, name in ipairs(files) do
	local v = json.decode(readfile(dir .. "/" .. name))
	local ac, e = nul(v.admin_comment), v.expect
	local site, hold, plan, status = m.split_record(ac)
	T.is(site, e.site, name .. ": site text")
	T.is(status, nul(e.status), name .. ": status text")
	T.is(hold, nul(e.hold), name .. ": hold word")
	T.is(plan, nul(e.plan), name .. ": plan")
	T.is(m.record_state(ac), nul(e.state), name .. ": record state")
	T.is(m.stage_in_pending(ac), nul(e.state) == "pending", name .. ": stage-in pending")
end
os.exit(T.done())
