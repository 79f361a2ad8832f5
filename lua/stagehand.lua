--[[
stagehand.lua - stagehand's #DATA grammar and its Slurm hooks, as one module.

Loaded once by slurmctld through a thin wrapper: the shipped job_submit.lua
(JobSubmitPlugins=lua) and burst_buffer.lua (BurstBufferType=burst_buffer/lua),
or a site's own job_submit.lua, which adds one line (a dofile of this
module) and one call per hook, after its own checks: the shipped
job_submit.lua is those lines and nothing else, the example to copy.

The module (docs/admin-submit.md):
  * parses #DATA lines by the grammar in docs/directives.md (the same rules as
    the C parser, held to the same tests/vectors/);
  * job_submit: returns at once for a script without "#DATA"; rejects a bad
    script with one "stagehand: line N: ..." message per error (sbatch prints
    them); records the normalised plan in admin_comment ("stagehand:v1:" +
    compact JSON) for stagehandd; in hold mode (SubmitMode=hold) holds a job
    with stage_in or after= (priority 0) and refuses a user's release in
    job_modify; refuses after= in bb mode (afterburstbuffer is Slurm's own)
    and #DATA in a heterogeneous job there (Slurm stages each component);
  * the burst-buffer hooks (SubmitMode=bb: M.bb_setup, M.bb_data_in, ...)
    come from stagehand_bb.lua, loaded from the same directory.

Site settings come from stagehand.conf, read once when the module is loaded
(slurmctld reloads the scripts when their mtime changes): the file named by
the loader's argument (loadfile(PATH)(CONF)), else $STAGEHAND_CONF, else
/etc/stagehand/stagehand.conf. Which keys it reads, their limits and
defaults come from stagehand_conf.lua, the table of every key that
stagehandd's parser is generated from too, so both read a value alike. A
missing file means the documented defaults; a bad value is logged with
FILE:LINE and stagehandd's message for it, and its default kept.

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
-- Site configuration: the keys of stagehand.conf this module reads, with
-- their kinds, limits and defaults, come from stagehand_conf.lua beside this
-- file: the one table of keys, which stagehandd's C parser is generated from
-- too (entries with a "lua" name are ours). SITE holds them under those
-- internal names; site_config() shows them under the stagehand.conf keys.
------------------------------------------------------------------------------

-- The module's directory (where the site put stagehand.lua, normally next
-- to slurm.conf): the key table, the grammar and the bb hooks live there.
local HERE = (debug.getinfo(1, "S").source or ""):match("^@(.*/)") or "./"

local CONF_TABLE = assert(loadfile(HERE .. "stagehand_conf.lua"))()
local CONF_KEYS = {}   -- the entries this module reads, in table order
local CONF_LOWER = {}  -- lower-case key -> entry
for _, k in ipairs(CONF_TABLE) do
	if k.lua then
		CONF_KEYS[#CONF_KEYS + 1] = k
		CONF_LOWER[string.lower(k[1])] = k
	end
end

local DEFAULT_CONF = "/etc/stagehand/stagehand.conf"
local format_ = string.format

local function _conf_list(v)
	local out = {}
	for item in v:gmatch("[^,]+") do
		item = item:gsub("^%s+", ""):gsub("%s+$", "")
		if item ~= "" then out[#out + 1] = item end
	end
	return out
end

-- A decimal integer as C's strtol reads it (sign allowed), or nil.
local function _conf_int(v)
	local sign, digits = v:match("^%s*([+-]?)(%d+)$")
	if not digits or #digits > 15 then return nil end
	local n = tonumber(digits)
	if sign == "-" then n = 0 - n end
	return n
end

-- An absolute path without a '..' component (C: conf_keys.c, _check_abs).
local function _conf_abs(v, what)
	if v:sub(1, 1) ~= "/" then return nil, what .. " must be an absolute path, not '" .. v .. "'" end
	if #v >= 4096 then return nil, what .. " is longer than 4095 bytes" end
	if ("/" .. v .. "/"):find("/%.%./") then
		return nil, what .. " must not contain '..': '" .. v .. "'"
	end
	return v
end

-- "'a', 'b' or 'c'": the choices a message names (aliases left out).
local function _conf_choices(k)
	local l = {}
	for _, c in ipairs(k.choices) do
		if not c.alias then l[#l + 1] = "'" .. c[1] .. "'" end
	end
	return table.concat(l, ", ", 1, #l - 1) .. " or " .. l[#l]
end

local UNITS = { K = 1024, M = 1024 ^ 2, G = 1024 ^ 3, T = 1024 ^ 4 }
local DURATION_UNITS = { s = 1, m = 60, h = 3600, d = 86400 }

-- One reader per kind of value, as stagehandd reads it (common/conf_keys.c),
-- with its messages: value, or nil and what is wrong.
local READ = {}
function READ.int(k, v)
	local n = _conf_int(v)
	if not n or n < k.min or n > k.max then
		return nil, format_("%s must be an integer from %d to %d, not '%s'", k[1], k.min, k.max, v)
	end
	return n
end
function READ.enum(k, v)
	for _, c in ipairs(k.choices or { { "yes" }, { "no" } }) do
		if string.lower(v) == c[1] then return c[1] end
	end
	return nil, format_("%s must be %s, not '%s'", k[1], k.must or _conf_choices(k), v)
end
READ.word = READ.enum
function READ.bool(k, v)
	local w, why = READ.enum(k, v)
	if w == nil then return nil, why end
	return w == "yes"
end
function READ.duration(k, v)
	if k.off and string.lower(v) == k.off then return k.offval end
	local digits, unit = v:match("^(%d+)([smhdSMHD]?)$")
	local n = digits and #digits <= 15 and tonumber(digits) * (DURATION_UNITS[string.lower(unit)] or 1)
	if not n or n < k.min or n > k.max then
		return nil, format_("%s must be %s, not '%s'", k[1], k.must, v)
	end
	return n
end
-- Sizes, not rates: no "/s" (the C side holds the keys read here to that).
function READ.size(k, v)
	local digits, unit = v:match("^(%d+)([KMGTkmgt]?)[Bb]?$")
	local mult = unit and UNITS[unit:upper()] or 1
	local n = digits and #digits <= 16 and tonumber(digits) * mult
	-- 16 digits may pass 2^53, past which a Lua number is no longer exact
	if n and #digits == 16 and (unit ~= "" or digits > "9007199254740992") then n = nil end
	if not n or n < (k.min or 0) or (k.max and n > k.max) then
		return nil, format_("%s must be %s, not '%s'", k[1], k.must, v)
	end
	return n
end
function READ.path(k, v)
	if k.off and string.lower(v) == string.lower(k.off) then return nil end
	return _conf_abs(v, k[1])
end
function READ.sockpath(k, v)
	local max = math.min(k.max or 107, 107)
	if #v > max then
		return nil, format_("%s is longer than %d bytes (a UNIX socket limit)", k[1], max)
	end
	return READ.path(k, v)
end
function READ.roots(k, v)
	local l = _conf_list(v)
	for i, p in ipairs(l) do
		local ok, why = _conf_abs(p, k[1] .. " entry")
		if not ok then return nil, why end
		while #p > 1 and p:sub(-1) == "/" do p = p:sub(1, -2) end
		l[i] = p
	end
	return l
end
function READ.schemes(k, v)
	local l = _conf_list(string.lower(v))
	for _, s in ipairs(l) do
		if not s:find("^[a-z][a-z0-9+.-]*$") then
			return nil, format_("%s: '%s' is not a URL scheme (letters, digits, + - .)", k[1], s)
		end
	end
	return l
end
function READ.uids(k, v)
	local l = {}
	for _, u in ipairs(_conf_list(v)) do
		local n = _conf_int(u)
		if not n or n < 0 or n > 4294967294 then
			return nil, format_("%s: '%s' is not a numeric uid", k[1], u)
		end
		l[#l + 1] = n
	end
	return l
end
M.CONF_READERS = READ  -- for tests: every key the table gives this module has one

local function _load_log(level, fmt, ...)
	if type(slurm) == "table" and type(slurm[level]) == "function" then
		slurm[level]("%s", string.format(fmt, ...))
	end
end

-- One value of key k: the value (nil = unset), or false and the reason.
local function _conf_value(k, v)
	local read = READ[k[2]]
	if not read then
		return false, "a " .. k[2] .. " value, which this module cannot read"
	end
	local val, why = read(k, v)
	if val == nil and why then return false, why end
	return val
end

-- The documented defaults, read from the table the way a file is read.
local SITE = {}
for _, k in ipairs(CONF_KEYS) do
	if k.default ~= nil then
		local val, why = _conf_value(k, k.default)
		if val == false and why then
			_load_log("log_error", "stagehand: stagehand_conf.lua: %s's default: %s", k[1], why)
		else
			SITE[k.lua] = val
		end
	end
end
SITE.hold_stage_in = SITE.submit_mode == "hold"

-- Read stagehand.conf into SITE. Unknown keys belong to stagehandd: skipped.
-- A bad value is logged with FILE:LINE and keeps its default (stagehandd
-- refuses the same file: its error says what to fix).
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
		local key, v = line:match("^([%w_]+)%s*=%s*(.-)$")
		local k = key and CONF_LOWER[string.lower(key)]
		if line ~= "" and not key then
			_load_log("log_error", "stagehand: %s:%d: not Key=Value: ignored", path, n)
		elseif k then
			local val, why = _conf_value(k, v)
			if val == false and why then
				-- why names the key, as stagehandd's message does
				_load_log("log_error", "stagehand: %s:%d: %s; the default stays", path, n, why)
			else
				SITE[k.lua] = val
			end
		end
	end
	f:close()
	SITE.hold_stage_in = SITE.submit_mode == "hold"
	return path
end

-- The loader's argument names the file (loadfile(...)(PATH)); require
-- passes the module's name instead ("stagehand", and in 5.2+ its path too),
-- which is not a stagehand.conf: a name without a '/' is not taken for one.
local conf_arg = ...
if type(conf_arg) ~= "string" or not conf_arg:find("/", 1, true) then
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
	for _, k in ipairs(CONF_KEYS) do
		local key, v = k[1], SITE[k.lua]
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

-- The grammar lives beside this file (HERE, above).
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

-- What one submission may say to the user. Slurm's job_submit/lua appends
-- every log_user call to one message, copying it whole each time, under
-- the controller's locks: the parser keeps at most 20 warnings and 20
-- errors (then one "and N more" line each), each line is cut at
-- USER_LINE_MAX bytes and all of them at USER_TEXT_MAX, past which one
-- line says how many were left out. The closing line is always said.
local USER_LINE_MAX = 512
local USER_TEXT_MAX = 8192

-- msg cut to max bytes, not inside a UTF-8 sequence, "..." at the end.
local function _cut(msg, max)
	if #msg <= max then return msg end
	local e = max - 3
	while e > 0 and string.byte(msg, e + 1) and string.byte(msg, e + 1) >= 0x80
		and string.byte(msg, e + 1) < 0xC0 do
		e = e - 1
	end
	return sub(msg, 1, e) .. "..."
end

-- A new teller: tell(msg) says msg within the budget above;
-- tell.finish() says how many lines the budget left out, if any.
local function _teller()
	local used, left_out = 0, 0
	local t = {}
	function t.say(msg)
		msg = _cut(msg, USER_LINE_MAX)
		if used + #msg > USER_TEXT_MAX then
			left_out = left_out + 1
			return
		end
		used = used + #msg + 1
		_user(msg)
	end
	function t.finish()
		if left_out > 0 then
			_user(format("stagehand: %d more line%s left out (this message is capped at %d bytes): run 'stagehand check' on the script to see them",
				left_out, left_out == 1 and "" or "s", USER_TEXT_MAX))
		end
	end
	return t
end

-- A heterogeneous job's leader (component 0) carries the one script, and
-- with it the whole job's #DATA. In hold mode that works: the leader is
-- held, and Slurm starts no component before it. In bb mode Slurm runs the
-- burst-buffer stages of each component on its own, and stagehandd has no
-- plan for the others: their data-in is refused and the job never starts.
-- So a hetjob with #DATA is refused there, with the message to return.
local function _het_refusal(job_desc, res)
	if SITE.submit_mode ~= "bb" or #res.actions == 0 then return nil end
	local off = tonumber(job_desc.het_job_offset)
	local no_val = (type(slurm) == "table" and tonumber(slurm.NO_VAL)) or 4294967294
	if off == nil or off >= no_val then return nil end
	return format("stagehand: line %d: #DATA in a heterogeneous job is not supported in burst-buffer mode: Slurm stages each component on its own, and the job would never start; give the #DATA lines to a job of their own and start the hetjob after it (sbatch --dependency=afterburstbuffer:JOBID), or ask your site about hold mode",
		res.actions[1].line)
end

local function _submit(job_desc, submit_uid)
	if job_desc == nil then return _rc("SUCCESS", 0) end
	local script = job_desc.script
	if type(script) ~= "string" or not find(script, "#DATA", 1, true) then
		return _rc("SUCCESS", 0)
	end
	local res = parse(script, nil)
	local suffix = " (fix the #DATA line; see 'stagehand check')"
	local tell = _teller()
	for _, w in ipairs(res.warnings) do
		tell.say(format("stagehand: line %d: warning: %s", w.line, w.message))
	end
	if #res.errors > 0 then
		local nerr = res.error_count
		for _, e in ipairs(res.errors) do
			tell.say(format("stagehand: line %d: %s%s", e.line, e.message,
				e.code == "more_errors" and "" or suffix))
		end
		tell.finish()
		_user(format("stagehand: job not submitted: %d #DATA error%s", nerr,
			nerr == 1 and "" or "s"))
		_log("log_info", "stagehand: rejected a job of uid %s: %d #DATA error(s), first line %d (%s)",
			tostring(submit_uid), nerr, res.errors[1].line, res.errors[1].code)
		return _rc("ERROR", -1)
	end
	tell.finish()
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
	local het_msg = _het_refusal(job_desc, res)
	if het_msg then
		_user(het_msg)
		_log("log_info", "stagehand: rejected a job of uid %s: #DATA in a heterogeneous job in bb mode",
			tostring(submit_uid))
		return _rc("ERROR", -1)
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
