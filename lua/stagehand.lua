--[[
stagehand.lua - stagehand's #DATA grammar and its Slurm hooks, as one module.

Loaded once by slurmctld through a thin wrapper: the shipped job_submit.lua
(JobSubmitPlugins=lua) and burst_buffer.lua (BurstBufferType=burst_buffer/lua),
or a site's own job_submit.lua, which adds one line and one call per hook:

  local stagehand = dofile("/etc/slurm/stagehand.lua")
  function slurm_job_submit(desc, parts, uid)
          -- ... the site's own checks ...
          return stagehand.job_submit(desc, parts, uid)
  end
  function slurm_job_modify(desc, rec, parts, uid)
          return stagehand.job_modify(desc, rec, parts, uid)
  end

The module (docs/admin-submit.md):
  * parses #DATA lines by the grammar in docs/directives.md (the same rules as
    the C parser, held to the same tests/vectors/);
  * job_submit: returns at once for a script without "#DATA"; rejects a bad
    script with one "stagehand: line N: ..." message per error (sbatch prints
    them); records the normalised plan in admin_comment ("stagehand:v1:" +
    compact JSON) for stagehandd; in hold mode (SubmitMode=hold) holds a job
    with stage_in or after= (priority 0) and refuses a user's release in
    job_modify; refuses after= in bb mode (afterburstbuffer is Slurm's own);
  * the burst-buffer hooks (SubmitMode=bb: M.bb_setup, M.bb_data_in, ...)
    come from stagehand_bb.lua, loaded from the same directory.

Site settings come from stagehand.conf, read once when the module is loaded
(slurmctld reloads the scripts when their mtime changes): the file named by
the loader's argument (loadfile(PATH)(CONF)), else $STAGEHAND_CONF, else
/etc/stagehand/stagehand.conf. A missing file means the documented defaults;
a bad value is logged with FILE:LINE and its default kept.

Must never: raise a Lua error into slurmctld, read files or run programs
while a job is submitted (the configuration is read at load time only),
touch the network or load C modules. job_submit runs synchronously in
slurmctld with the job write lock held, so it must return quickly. Lua 5.1
(what Debian's Slurm links) through 5.4: no goto, no //, no bit operators,
no utf8 library.
]]

local M = {}

-- The package version; tests/lua checks it against configure's PACKAGE_VERSION.
M.VERSION = "0.1.0"

------------------------------------------------------------------------------
-- Site configuration: defaults (docs/directives.md), overridden by
-- stagehand.conf. Internal names; site_config() shows the stagehand.conf keys.
------------------------------------------------------------------------------
local SITE = {
	-- URL schemes a #DATA line may use (lower case). http is off: clear text.
	allowed_schemes = { "https", "s3", "ftp", "ftps", "sftp", "file" },
	-- Absolute directories stage_in sources must lie under; {} = anywhere.
	stage_in_roots = {},
	-- Limits (docs/directives.md "Characters and limits").
	max_directives = 64,   -- #DATA directives per script
	max_line = 4096,       -- bytes in one #DATA line
	max_path = 4095,       -- bytes in one path or URL
	-- "hold": job_submit holds jobs with stage_in until stagehandd has staged
	-- their inputs. "bb": Slurm's burst_buffer/lua stages them; no hold.
	submit_mode = "hold",
	hold_stage_in = true,
	-- Largest admin_comment record this script writes ("stagehand:v1:" + JSON).
	max_plan_bytes = 16384,
	-- uids whose job modifications are never refused (root; add SlurmUser's uid).
	trusted_uids = { 0 },
	-- Scratch roots (each one a burst-buffer pool in bb mode).
	scratch_roots = {},
	-- Bytes each scratch root offers staged inputs as a burst-buffer pool
	-- (bb mode); nil = no pools: Slurm sets every job up at once.
	pool_capacity = nil,
	-- stagehandd's socket; its directory holds the pool state the daemon
	-- publishes (pools.json), which slurm_bb_pools reads.
	socket_path = "/run/stagehand/stagehandd.sock",
}

-- stagehand.conf key -> { internal name, kind }. Keys are case-insensitive.
local CONF_KEYS = {
	AllowedSchemes = { "allowed_schemes", "schemes" },
	StageInRoots = { "stage_in_roots", "paths" },
	ScratchRoots = { "scratch_roots", "paths" },
	MaxDirectives = { "max_directives", "count" },
	MaxDirectiveLine = { "max_line", "count" },
	MaxPathLength = { "max_path", "count" },
	MaxPlanBytes = { "max_plan_bytes", "count" },
	SubmitMode = { "submit_mode", "mode" },
	TrustedUids = { "trusted_uids", "uids" },
	PoolCapacity = { "pool_capacity", "size" },
	SocketPath = { "socket_path", "path" },
}
local CONF_LOWER = {}
for k, v in pairs(CONF_KEYS) do CONF_LOWER[string.lower(k)] = { k, v[1], v[2] } end

local DEFAULT_CONF = "/etc/stagehand/stagehand.conf"

local function _conf_list(v)
	local out = {}
	for item in v:gmatch("[^,]+") do
		item = item:gsub("^%s+", ""):gsub("%s+$", "")
		if item ~= "" then out[#out + 1] = item end
	end
	return out
end

-- One value by its kind; nil and a reason when it is bad.
local function _conf_value(kind, v)
	if kind == "schemes" then
		local l = _conf_list(string.lower(v))
		for _, s in ipairs(l) do
			if not s:find("^[a-z][a-z0-9+.-]*$") then
				return nil, "'" .. s .. "' is not a URL scheme"
			end
		end
		return l
	elseif kind == "paths" then
		local l = _conf_list(v)
		for _, p in ipairs(l) do
			if p:sub(1, 1) ~= "/" then return nil, "'" .. p .. "' is not an absolute path" end
		end
		return l
	elseif kind == "count" then
		local n = tonumber(v)
		if not n or n < 1 or n ~= math.floor(n) then
			return nil, "'" .. v .. "' is not a positive whole number"
		end
		return n
	elseif kind == "size" then
		-- as stagehandd reads sizes: digits, K, M, G or T (powers of 1024), a B
		local digits, unit = v:match("^(%d+)([KMGTkmgt]?)[Bb]?$")
		unit = unit and unit:upper()
		local n = digits and #digits <= 15 and tonumber(digits)
		local mult = ({ K = 1024, M = 1024 ^ 2, G = 1024 ^ 3, T = 1024 ^ 4 })[unit] or 1
		if not n or n == 0 or n > 2 ^ 53 / mult then
			return nil, "'" .. v .. "' is not a size (e.g. 500G)"
		end
		return n * mult
	elseif kind == "path" then
		if v:sub(1, 1) ~= "/" then return nil, "'" .. v .. "' is not an absolute path" end
		return v
	elseif kind == "mode" then
		local m = string.lower(v)
		if m ~= "hold" and m ~= "bb" then return nil, "'" .. v .. "' is neither hold nor bb" end
		return m
	elseif kind == "uids" then
		local l = {}
		for _, u in ipairs(_conf_list(v)) do
			local n = tonumber(u)
			if not n or n < 0 or n ~= math.floor(n) then
				return nil, "'" .. u .. "' is not a numeric uid"
			end
			l[#l + 1] = n
		end
		return l
	end
end

local function _load_log(level, fmt, ...)
	if type(slurm) == "table" and type(slurm[level]) == "function" then
		slurm[level]("%s", string.format(fmt, ...))
	end
end

-- Read stagehand.conf into SITE. Unknown keys belong to stagehandd: skipped.
-- Returns the path read, or nil when it could not be opened (defaults stay).
local function _read_conf(path)
	local f, oerr = io.open(path, "r")
	if not f then
		_load_log("log_info", "stagehand: %s not readable (%s): site defaults apply", path,
			tostring(oerr))
		return nil
	end
	local n = 0
	for line in f:lines() do
		n = n + 1
		line = line:gsub("#.*$", ""):gsub("^%s+", ""):gsub("%s+$", "")
		local k, v = line:match("^([%w_]+)%s*=%s*(.-)$")
		local known = k and CONF_LOWER[string.lower(k)]
		if line ~= "" and not k then
			_load_log("log_error", "stagehand: %s:%d: not Key=Value: ignored", path, n)
		elseif known then
			local val, why = _conf_value(known[3], v)
			if val == nil then
				_load_log("log_error", "stagehand: %s:%d: %s: %s; the default stays", path, n,
					known[1], why)
			else
				SITE[known[2]] = val
			end
		end
	end
	f:close()
	SITE.hold_stage_in = SITE.submit_mode == "hold"
	return path
end

local conf_arg = ...
if type(conf_arg) ~= "string" or conf_arg == "" then
	conf_arg = os.getenv("STAGEHAND_CONF") or DEFAULT_CONF
end
local CONF_READ = _read_conf(conf_arg)

--[[
The effective settings, keyed by stagehand.conf key names (a new table; the
caller may keep or change it): AllowedSchemes, StageInRoots, ScratchRoots
(lists), MaxDirectives, MaxDirectiveLine, MaxPathLength, MaxPlanBytes
(numbers), SubmitMode ("hold" or "bb"), TrustedUids (list of numbers),
PoolCapacity (bytes, or nil when unset), SocketPath, and
ConfigFile: the file they were read from, or false when none could be read.
]]
function M.site_config()
	local out = {}
	for key, spec in pairs(CONF_KEYS) do
		local v = SITE[spec[1]]
		if type(v) == "table" then
			local c = {}
			for i, x in ipairs(v) do c[i] = x end
			v = c
		end
		out[key] = v
	end
	out.ConfigFile = CONF_READ or false
	return out
end

------------------------------------------------------------------------------
-- Internals
------------------------------------------------------------------------------
local find, sub, format = string.find, string.sub, string.format
local tostring, type, ipairs, pcall = tostring, type, ipairs, pcall

local RECORD_PREFIX = "stagehand:v1:"

-- Return codes. 22.05's Lua table registers only a few ESLURM_* names, so
-- missing ones fall back to their numeric values from slurm_errno.h.
local function _rc(name, num)
	if type(slurm) == "table" and type(slurm[name]) == "number" then
		return slurm[name]
	end
	return num
end

-- The grammar lives beside this file (the module's directory: where the
-- site put stagehand.lua, normally next to slurm.conf).
local HERE = (debug.getinfo(1, "S").source or ""):match("^@(.*/)") or "./"
M.DIR = HERE
local DSL = assert(loadfile(HERE .. "stagehand_dsl.lua"))(SITE)
local parse, plan_json = DSL.parse, DSL.plan_json

------------------------------------------------------------------------------
-- Slurm entry points
------------------------------------------------------------------------------
local function _log(fn, fmt, ...)
	if type(slurm) == "table" and type(slurm[fn]) == "function" then
		slurm[fn]("%s", format(fmt, ...))
	end
end

local function _user(msg)
	_log("log_user", "%s", msg)
end

local function _has_stage_in(actions)
	for _, a in ipairs(actions) do
		if a.action == "stage_in" then return true end
	end
	return false
end

--[[
The record in admin_comment (users cannot change admin_comment):

  [SITE TEXT " "] ["stagehand:status=" STATUS " "]
  ["stagehand:hold=pending " | "stagehand:hold=released "]
  "stagehand:v1:" PLAN-JSON

PLAN-JSON is exactly docs/directives.md "The plan" and runs to the end, so a
reader takes everything after the first "stagehand:v1:". The hold marker
exists only for jobs held for stage-in or after=: "pending" until a trusted uid
(stagehandd as root) releases the job, then "released". STATUS is
stagehandd's progress or failure text for the job (squeue -O admin_comment,
scontrol show job); it lives here so that the job's comment stays the
user's own. Text an admin put there before submission is kept in front.
]]
local HOLD_MARK = "stagehand:hold="
local STATUS_MARK = "stagehand:status="

-- Split admin_comment into site text, hold state (or nil), the plan JSON
-- (nil when there is no record) and stagehandd's status text (or nil).
local function _split_record(ac)
	if type(ac) ~= "string" or ac == "" then return "", nil, nil, nil end
	local head, plan = ac, nil
	local p = find(ac, RECORD_PREFIX, 1, true)
	if p then
		head, plan = sub(ac, 1, p - 1), sub(ac, p + #RECORD_PREFIX)
	end
	local hold = nil
	local q, _, word = find(head, "stagehand:hold=(%a*)%s*$")
	if q then
		hold = word
		head = sub(head, 1, q - 1)
	end
	local status = nil
	local st = find(head, STATUS_MARK, 1, true)
	if st then
		status = (sub(head, st + #STATUS_MARK):gsub("%s+$", ""))
		head = sub(head, 1, st - 1)
	end
	return (head:gsub("%s+$", "")), hold, plan, status
end

local function _join_record(site, hold, plan, status)
	local r = RECORD_PREFIX .. plan
	if hold then r = HOLD_MARK .. hold .. " " .. r end
	if status and status ~= "" then r = STATUS_MARK .. status .. " " .. r end
	if site ~= "" then r = site .. " " .. r end
	return r
end

-- "pending", "released" (held for stage-in, then released), "none" (a
-- record without a hold), or nil (no record).
local function _record_state(ac)
	local _, hold, plan = _split_record(ac)
	if not plan then return nil end
	return hold or "none"
end

-- True while the job waits for stagehandd to stage its inputs and release it.
local function _stage_in_pending(ac)
	return _record_state(ac) == "pending"
end

--[[
Pools (SubmitMode=bb with PoolCapacity set): each scratch root is a Slurm
burst-buffer pool named by its path, of PoolCapacity bytes. A job takes
pool space only through a "#DATA capacity=SIZE pool=NAME" line, which
Slurm's burst_buffer/lua reads from the script itself and which must name
the pool on the same line; so a capacity line without pool= gets the first
scratch root's here, written into the script (Slurm reads the script after
job_submit). Returns nil, or what is wrong with the line.
]]
local function _pools()
	local out = {}
	if SITE.submit_mode ~= "bb" or not SITE.pool_capacity then return out end
	for _, r in ipairs(SITE.scratch_roots) do
		-- a pool= value is letters, digits and / . _ - (the grammar's rule)
		if not r:find("[^A-Za-z0-9/._-]") then out[#out + 1] = r end
	end
	return out
end
M.bb_pool_names = _pools

local function _capacity(job_desc, cap)
	if SITE.submit_mode ~= "bb" then
		_user(format("stagehand: line %d: warning: capacity= is used only in burst-buffer mode; this site holds jobs for stage-in instead: ignored", cap.line))
		return nil
	end
	local pools = _pools()
	if #pools == 0 then
		return "this site has no burst-buffer pools (PoolCapacity is not set in stagehand.conf): remove the capacity line"
	end
	if cap.size > SITE.pool_capacity then
		return format("capacity=%d bytes is more than a whole pool (%d bytes): the job could never be set up", cap.size, SITE.pool_capacity)
	end
	if cap.pool then
		for _, p in ipairs(pools) do
			if p == cap.pool then return nil end
		end
		return format("pool=%s is not a pool of this site (pools: %s)", cap.pool, table.concat(pools, ", "))
	end
	local script, n, from = job_desc.script, 1, 1
	while n < cap.line do
		from = find(script, "\n", from, true) + 1
		n = n + 1
	end
	local _, e = find(script, "^#DATA[ \t]+capacity=[^ \t\r\n]*", from)
	if not e then return "internal error: capacity line not found (see the slurmctld log)" end
	job_desc.script = sub(script, 1, e) .. " pool=" .. pools[1] .. sub(script, e + 1)
	return nil
end

local function _submit(job_desc, submit_uid)
	if job_desc == nil then return _rc("SUCCESS", 0) end
	local script = job_desc.script
	if type(script) ~= "string" or not find(script, "#DATA", 1, true) then
		return _rc("SUCCESS", 0)
	end
	local res = parse(script, nil)
	local suffix = " (fix the #DATA line; see 'stagehand check')"
	for _, w in ipairs(res.warnings) do
		_user(format("stagehand: line %d: warning: %s", w.line, w.message))
	end
	if #res.errors > 0 then
		for _, e in ipairs(res.errors) do
			_user(format("stagehand: line %d: %s%s", e.line, e.message, suffix))
		end
		_user(format("stagehand: job not submitted: %d #DATA error%s", #res.errors,
			#res.errors == 1 and "" or "s"))
		_log("log_info", "stagehand: rejected a job of uid %s: %d #DATA error(s), first line %d (%s)",
			tostring(submit_uid), #res.errors, res.errors[1].line, res.errors[1].code)
		return _rc("ERROR", -1)
	end
	if res.capacity then
		local msg = _capacity(job_desc, res.capacity)
		if msg then
			_user(format("stagehand: line %d: %s", res.capacity.line, msg))
			_log("log_info", "stagehand: rejected a job of uid %s: line %d: %s",
				tostring(submit_uid), res.capacity.line, msg)
			return _rc("ERROR", -1)
		end
	elseif SITE.submit_mode == "bb" and SITE.pool_capacity and _has_stage_in(res.actions) then
		_user("stagehand: warning: no '#DATA capacity=SIZE' line: this job's inputs are staged at once, outside the scratch pools; give the size of its inputs to be staged just in time")
	end
	local after = res.after
	if after and SITE.submit_mode == "bb" then
		-- Slurm keeps a bb job in stage-out until its archive is verified:
		-- its own dependency waits for that, so there is no second way.
		local msg = format("after= waits for archives in hold mode only; this site stages through Slurm's burst buffer, which keeps a job in stage-out until its archive is verified: use sbatch --dependency=afterburstbuffer:%s instead",
			table.concat(after.jobs, ":"))
		_user(format("stagehand: line %d: %s", after.line, msg))
		_log("log_info", "stagehand: rejected a job of uid %s: line %d: after= in bb mode",
			tostring(submit_uid), after.line)
		return _rc("ERROR", -1)
	end
	if #res.actions == 0 and not after then
		return _rc("SUCCESS", 0)
	end
	local held = SITE.hold_stage_in and (_has_stage_in(res.actions) or after ~= nil)
	local record = _join_record("", held and "pending" or nil, plan_json(res.actions, after))
	if #record > SITE.max_plan_bytes then
		_user(format("stagehand: the #DATA plan is %d bytes; this site's limit is %d: use fewer or shorter directives",
			#record, SITE.max_plan_bytes))
		_log("log_info", "stagehand: rejected a job of uid %s: plan of %d bytes over the limit %d",
			tostring(submit_uid), #record, SITE.max_plan_bytes)
		return _rc("ERROR", -1)
	end
	local site = _split_record(job_desc.admin_comment)
	if site ~= "" then record = site .. " " .. record end
	job_desc.admin_comment = record
	if held then
		job_desc.priority = 0
		if after then
			_user(format("stagehand: job held until the archive%s of job%s %s %s verified%s (squeue shows it pending, reason JobHeldUser; 'stagehand status' says what it waits for); it is released automatically",
				#after.jobs == 1 and "" or "s", #after.jobs == 1 and "" or "s",
				table.concat(after.jobs, ", "), #after.jobs == 1 and "is" or "are",
				_has_stage_in(res.actions) and ", then until its stage_in inputs are staged" or ""))
		else
			_user("stagehand: job held until its stage_in inputs are staged (squeue shows it pending, reason JobHeldUser); it is released automatically")
		end
	end
	_log("log_debug", "stagehand: uid %s: %d #DATA action(s)%s", tostring(submit_uid),
		#res.actions, held and ", held for stage-in" or "")
	return _rc("SUCCESS", 0)
end

local function _is_trusted(uid)
	uid = tonumber(uid)
	if uid == nil then return false end
	for _, t in ipairs(SITE.trusted_uids) do
		if tonumber(t) == uid then return true end
	end
	return false
end

local HELD_RC = 2042 -- ESLURM_JOB_HELD: "Job is in held state, pending scheduler release"

local function _modify(job_desc, job_rec, modify_uid)
	local prio = job_desc.priority
	local no_val = (type(slurm) == "table" and tonumber(slurm.NO_VAL)) or 4294967294
	if prio == nil or prio == no_val or prio == 0 then
		-- no priority change, or a further hold: harmless
		return _rc("SUCCESS", 0)
	end
	local ac = job_rec.admin_comment
	if not _stage_in_pending(ac) then return _rc("SUCCESS", 0) end
	if _is_trusted(modify_uid) then
		-- stagehandd (or an admin) releases the job: record it, so that a
		-- later hold/release by the user is no longer refused
		if job_desc.admin_comment == nil then
			local site, _, plan, status = _split_record(ac)
			job_desc.admin_comment = _join_record(site, "released", plan, status)
		end
		_log("log_info", "stagehand: job %s released by uid %s",
			tostring(job_rec.job_id), tostring(modify_uid))
		return _rc("SUCCESS", 0)
	end
	_log("log_info", "stagehand: refused release/priority change of job %s by uid %s: stage-in pending",
		tostring(job_rec.job_id), tostring(modify_uid))
	local _, _, plan = _split_record(ac)
	if plan and find(plan, '"after":', 1, true) then
		_user("stagehand: this job is held until the archives it waits for (#DATA after=) are verified and its inputs staged; it is released automatically (see 'stagehand status')")
	else
		_user("stagehand: this job is held until its inputs are staged; it is released automatically (see 'stagehand status')")
	end
	return _rc("ESLURM_JOB_HELD", HELD_RC)
end

function M.job_submit(job_desc, part_list, submit_uid)
	local ok, rc = pcall(_submit, job_desc, submit_uid)
	if ok then return rc end
	_log("log_error", "stagehand: internal error in slurm_job_submit (uid %s): %s",
		tostring(submit_uid), tostring(rc))
	-- Fail closed for #DATA scripts (their data would not be staged or
	-- archived as asked); fail open for every other job, and when even the
	-- script cannot be read.
	local ok2, has = pcall(function()
		return type(job_desc.script) == "string" and find(job_desc.script, "#DATA", 1, true) ~= nil
	end)
	if not (ok2 and has) then return _rc("SUCCESS", 0) end
	pcall(_user, "stagehand: internal error while checking the #DATA lines; the job was not submitted. Please tell your administrator (details in the slurmctld log)")
	return _rc("ESLURM_INTERNAL", 2090)
end

function M.job_modify(job_desc, job_rec, part_list, modify_uid)
	local ok, rc = pcall(_modify, job_desc, job_rec, modify_uid)
	if ok then return rc end
	_log("log_error", "stagehand: internal error in slurm_job_modify (uid %s): %s",
		tostring(modify_uid), tostring(rc))
	-- Fail closed only for a release of a job we hold for stage-in.
	local ok2, pending = pcall(function() return _stage_in_pending(job_rec.admin_comment) end)
	if ok2 and not pending then return _rc("SUCCESS", 0) end
	local ok3, trusted = pcall(_is_trusted, modify_uid)
	if ok3 and trusted then return _rc("SUCCESS", 0) end
	return _rc("ESLURM_JOB_HELD", HELD_RC)
end

-- The parser and the record's helpers, for tests, tools and the bb hooks.
M.RECORD_PREFIX = RECORD_PREFIX
M.site = SITE          -- the live settings (internal names); site_config() copies them
M.parse = parse
M.plan_json = plan_json
M.stage_in_pending = _stage_in_pending
M.record_state = _record_state
M.split_record = _split_record
M.log = _log
M.rc = _rc

-- The burst-buffer hooks (burst_buffer.lua calls them).
assert(loadfile(HERE .. "stagehand_bb.lua"))(M, SITE)

_log("log_info", "stagehand: stagehand.lua %s loaded from %s (mode %s, config %s, schemes: %s)",
	M.VERSION, HERE, SITE.submit_mode, tostring(CONF_READ or "defaults"),
	table.concat(SITE.allowed_schemes, ", "))

return M
