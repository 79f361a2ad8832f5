--[[
test-module.lua - lua/stagehand.lua as a module a site adopts: settings
read from stagehand.conf at load time, site_config() keyed by stagehand.conf
key names, VERSION equal to the package version, and a site's own
job_submit.lua (one load line, one call per hook) that does other work too.
Prints TAP.

  lua test-module.lua --lua-dir PATH/lua --version PACKAGE_VERSION
]]
local here = (arg[0]:match("^(.*)/[^/]*$") or ".")
package.path = here .. "/?.lua;" .. package.path
local stub = require("stub_slurm")

local lua_dir, version = here .. "/../../lua", nil
local i = 1
while arg[i] do
	if arg[i] == "--lua-dir" then lua_dir = arg[i + 1] end
	if arg[i] == "--version" then version = arg[i + 1] end
	i = i + 2
end
slurm = stub.slurm
local S = slurm

local T = require("tap")
local ok, is = T.ok, T.is

local tmp = os.tmpname()
local function write(path, text)
	local f = assert(io.open(path, "w"))
	f:write(text)
	f:close()
end
local function load_module(conf)
	stub.reset()
	return assert(loadfile(lua_dir .. "/stagehand.lua"))(conf)
end

-- VERSION ---------------------------------------------------------------
do
	local m = load_module("/nonexistent/stagehand.conf")
	ok(version ~= nil, "test run with --version (configure's PACKAGE_VERSION)")
	is(m.VERSION, version, "stagehand.VERSION is the package version")
	local c = m.site_config()
	is(c.ConfigFile, false, "missing file: ConfigFile false")
	is(c.SubmitMode, "hold", "missing file: SubmitMode hold")
	is(table.concat(c.AllowedSchemes, ","), "https,s3,ftp,ftps,sftp,file", "missing file: default schemes")
	is(c.MaxDirectives, 64, "missing file: MaxDirectives 64")
	is(c.MaxDirectiveLine, 4096, "missing file: MaxDirectiveLine 4096")
	is(c.MaxPathLength, 4095, "missing file: MaxPathLength 4095")
	is(c.MaxPlanBytes, 16384, "missing file: MaxPlanBytes 16384")
	is(table.concat(c.TrustedUids, ","), "0", "missing file: TrustedUids 0")
	ok(stub.info[1] and stub.info[1]:find("/nonexistent/stagehand.conf not readable", 1, true),
		"missing file is logged", stub.info[1])
end

-- settings from stagehand.conf -------------------------------------------
do
	write(tmp, table.concat({
		"# a site's file: daemon keys are skipped",
		"SocketPath=/run/stagehand/stagehandd.sock",
		"allowedschemes = https, S3   # case-insensitive keys, lower-cased schemes",
		"StageInRoots=/project,/archive",
		"ScratchRoots=/scratch",
		"MaxDirectives=3",
		"MaxPlanBytes=not-a-number",
		"SubmitMode=bb",
		"TrustedUids=0,64030",
		"", }, "\n"))
	local m = load_module(tmp)
	local c = m.site_config()
	is(c.ConfigFile, tmp, "ConfigFile names the file read")
	is(table.concat(c.AllowedSchemes, ","), "https,s3", "AllowedSchemes read")
	is(table.concat(c.StageInRoots, ","), "/project,/archive", "StageInRoots read")
	is(table.concat(c.ScratchRoots, ","), "/scratch", "ScratchRoots read")
	is(c.MaxDirectives, 3, "MaxDirectives read")
	is(c.MaxPlanBytes, 16384, "bad MaxPlanBytes keeps its default")
	ok(stub.errors[1] and stub.errors[1]:find(tmp .. ":7: MaxPlanBytes", 1, true),
		"bad value logged with FILE:LINE", stub.errors[1])
	is(c.SubmitMode, "bb", "SubmitMode read")
	is(table.concat(c.TrustedUids, ","), "0,64030", "TrustedUids read")
	c.MaxDirectives = 99
	is(m.site_config().MaxDirectives, 3, "site_config() returns a copy")
	-- the settings are the parser's
	local r = m.parse("#!/bin/bash\n#DATA stage_in=ftp://x/a\n")
	is(r.errors[1] and r.errors[1].code, "url_not_allowed", "conf schemes reach the parser")
	r = m.parse("#!/bin/bash\n#DATA stage_in=/home/u/a\n")
	is(r.errors[1] and r.errors[1].code, "path_not_allowed", "conf StageInRoots reach the parser")
	r = m.parse("#!/bin/bash\n#DATA exempt=a\n#DATA exempt=b\n#DATA exempt=c\n#DATA exempt=d\n")
	is(r.errors[1] and r.errors[1].code, "too_many_directives", "conf MaxDirectives reaches the parser")
	-- bb mode: a stage_in job is recorded, not held
	local d = { script = "#!/bin/bash\n#DATA stage_in=/project/in.dat\n", priority = S.NO_VAL }
	is(m.job_submit(d, {}, 1000), S.SUCCESS, "bb mode: stage_in job accepted")
	is(d.priority, S.NO_VAL, "bb mode: not held")
	is(m.record_state(d.admin_comment), "none", "bb mode: plan recorded without a hold")
	-- bb mode: after= is refused, pointing at Slurm's own dependency
	stub.reset()
	local a = { script = "#!/bin/bash\n#DATA after=4711:4712_3\n#DATA archive=out\n", priority = S.NO_VAL }
	is(m.job_submit(a, {}, 1000), S.ERROR, "bb mode: after= refused")
	ok(table.concat(stub.user, "\n"):find("line 2: after= waits for archives in hold mode only", 1, true)
		and table.concat(stub.user, "\n"):find("--dependency=afterburstbuffer:4711:4712_3", 1, true),
		"bb mode: the refusal names the line and the dependency to use", table.concat(stub.user, "\n"))
end

-- pools (bb mode, PoolCapacity) ------------------------------------------
do
	write(tmp, "SubmitMode=bb\nScratchRoots=/scratch/a, /scratch/b\nPoolCapacity=8G\n")
	local m = load_module(tmp)
	is(m.site_config().PoolCapacity, 8 * 1024 ^ 3, "PoolCapacity read in bytes")
	local rc, json = m.bb_pools()
	is(rc, S.SUCCESS, "bb_pools succeeds")
	is(json, '{"pools":[{"id":"/scratch/a","quantity":8589934592,"granularity":1},' ..
		'{"id":"/scratch/b","quantity":8589934592,"granularity":1}]}', "each scratch root is a pool")
	local d = { script = "#!/bin/bash\r\n#DATA stage_in=/p/in.dat\r\n#DATA capacity=1G\r\necho\r\n",
		priority = S.NO_VAL }
	is(m.job_submit(d, {}, 1000), S.SUCCESS, "capacity without pool accepted")
	is(d.script, "#!/bin/bash\r\n#DATA stage_in=/p/in.dat\r\n#DATA capacity=1G pool=/scratch/a\r\necho\r\n",
		"capacity gets the first pool on its own line (Slurm needs pool= there)")
	local e = { script = "#!/bin/bash\n#DATA capacity=1G pool=/scratch/b\n", priority = S.NO_VAL }
	local before = e.script
	is(m.job_submit(e, {}, 1000), S.SUCCESS, "capacity with a known pool accepted")
	is(e.script, before, "script with pool= left as written")
	is(m.job_submit({ script = "#!/bin/bash\n#DATA capacity=1G pool=/elsewhere\n" }, {}, 1000), S.ERROR,
		"unknown pool refused")
	is(m.job_submit({ script = "#!/bin/bash\n#DATA capacity=9G\n" }, {}, 1000), S.ERROR,
		"capacity over a whole pool refused")
	-- free space from the state stagehandd publishes beside its socket
	local sdir = os.tmpname()
	os.remove(sdir)
	os.execute("mkdir " .. sdir)
	write(tmp, "SubmitMode=bb\nScratchRoots=/scratch/a, /scratch/b\nPoolCapacity=8G\n" ..
		"SocketPath=" .. sdir .. "/stagehandd.sock\n")
	m = load_module(tmp)
	write(sdir .. "/pools.json", string.format('{"pools":[{"id":"/scratch/a","quantity":8589934592,' ..
		'"granularity":1,"free":1000},{"id":"/scratch/b","quantity":1,"granularity":1,' ..
		'"free":99999999999999},{"id":"/elsewhere","free":5}],"updated":%d}\n', os.time()))
	rc, json = m.bb_pools()
	is(json, '{"pools":[{"id":"/scratch/a","quantity":8589934592,"free":1000,"granularity":1},' ..
		'{"id":"/scratch/b","quantity":8589934592,"free":8589934592,"granularity":1}]}',
		"free space from the daemon's pools.json, at most PoolCapacity, known pools only")
	write(sdir .. "/pools.json", string.format('{"pools":[{"id":"/scratch/a","free":1000}],"updated":%d}\n',
		os.time() - 600))
	rc, json = m.bb_pools()
	is(json, '{"pools":[{"id":"/scratch/a","quantity":8589934592,"granularity":1},' ..
		'{"id":"/scratch/b","quantity":8589934592,"granularity":1}]}', "stale pools.json: PoolCapacity only")
	os.remove(sdir .. "/pools.json")
	rc, json = m.bb_pools()
	is(rc, S.SUCCESS, "no pools.json: bb_pools still succeeds")
	os.remove(sdir)
	write(tmp, "SubmitMode=bb\nScratchRoots=/scratch/a\n")
	m = load_module(tmp)
	is(select("#", m.bb_pools()), 1, "no PoolCapacity: no pools")
	is(m.job_submit({ script = "#!/bin/bash\n#DATA capacity=1G\n" }, {}, 1000), S.ERROR,
		"capacity without pools refused")
	write(tmp, "SubmitMode=hold\nScratchRoots=/scratch/a\nPoolCapacity=8G\n")
	m = load_module(tmp)
	local h = { script = "#!/bin/bash\n#DATA capacity=1G\n" }
	is(m.job_submit(h, {}, 1000), S.SUCCESS, "hold mode: capacity ignored with a warning")
	is(h.script, "#!/bin/bash\n#DATA capacity=1G\n", "hold mode: script unchanged")
end

-- STAGEHAND_CONF is not read when the loader names a file -----------------
do
	write(tmp, "SubmitMode=bb\n")
	local m = load_module(tmp)
	is(m.site_config().SubmitMode, "bb", "loader's argument names the file")
end
os.remove(tmp)

-- required as a module: require passes the module's name, not a file ----
do
	write(tmp, "SubmitMode=bb\n")
	local function q(x) return "'" .. x:gsub("'", "'\\''") .. "'" end
	local code = table.concat({
		"package.path = " .. string.format("%q", lua_dir .. "/?.lua;") .. " .. package.path",
		"local function nop() end",
		"slurm = { SUCCESS = 0, ERROR = -1, log_info = nop, log_debug = nop,",
		"  log_verbose = nop, log_error = nop, log_user = nop }",
		"local c = require('stagehand').site_config()",
		"io.write(tostring(c.SubmitMode), ' ', tostring(c.ConfigFile))" }, "\n")
	local p = io.popen("STAGEHAND_CONF=" .. q(tmp) .. " " .. q(arg[-1] or "lua") .. " -e " ..
		q(code) .. " 2>&1")
	local got = p:read("*a")
	p:close()
	is(got, "bb " .. tmp, "require('stagehand') reads STAGEHAND_CONF, not a file named after the module")
end
os.remove(tmp)

-- a site's own job_submit.lua --------------------------------------------
do
	local site = os.tmpname()
	write(site, table.concat({
		"local stagehand = loadfile(" .. string.format("%q", lua_dir .. "/stagehand.lua") ..
			")('/nonexistent/stagehand.conf')",
		"function slurm_job_submit(desc, parts, uid)",
		"  if desc.partition == nil then desc.partition = 'batch' end",
		"  return stagehand.job_submit(desc, parts, uid)",
		"end",
		"function slurm_job_modify(desc, rec, parts, uid)",
		"  return stagehand.job_modify(desc, rec, parts, uid)",
		"end", "" }, "\n"))
	stub.reset()
	dofile(site)
	os.remove(site)
	local d = { script = "#!/bin/bash\n#DATA stage_in=/p/in.dat\n", priority = S.NO_VAL }
	is(slurm_job_submit(d, {}, 1000), S.SUCCESS, "site script: #DATA job accepted")
	is(d.partition, "batch", "site script: its own default partition set")
	is(d.priority, 0, "site script: stage_in job held (hold mode)")
	local bad = { script = "#!/bin/bash\n#DATA archvie=x\n", priority = S.NO_VAL }
	is(slurm_job_submit(bad, {}, 1000), S.ERROR, "site script: bad #DATA rejected")
	is(slurm_job_modify({ priority = S.INFINITE }, { job_id = 5, admin_comment = d.admin_comment }, {}, 1000),
		2042, "site script: user release refused")
	ok(stagehand == nil, "site script: the module adds no global")
end

T.done()
