--[[
conf-keys.lua - every stagehand.conf key is written once, in
lua/stagehand_conf.lua; the C parser (common/conf_keys_tab.h) and
slurmctld's module (lua/stagehand.lua) read that table, and this test holds
the places people read to it (TAP):

  * stagehand.conf(5) (docs/man/stagehand.conf.5.in): one entry per key,
    no entry for a key the table lacks, and each entry's "Default:" is the
    table's default;
  * the sample config (etc/stagehand.conf): each key once, commented out,
    with the table's default, and no other key;
  * docs/admin-submit.md's table of the keys slurmctld's module reads:
    exactly the table's "lua" keys, with their defaults;
  * the Lua module has a reader for the kind of each key it reads, reads
    every default without complaint, and reads each of its keys as
    stagehandd does: the same values taken, the same messages for the
    others, the same result (PROBES: what tests/unit/conf_probe, stagehandd's
    parser, made of the lines "--probes" prints).

A failure names the key and the file to fix.

  lua conf-keys.lua SRCDIR --probes     lines for conf_probe
  lua conf-keys.lua SRCDIR [PROBES]     the checks (TAP)
]]
local src = assert(arg[1], "usage: lua conf-keys.lua SRCDIR [--probes | PROBES]")
local TABLE = "lua/stagehand_conf.lua"
local keys = assert(loadfile(src .. "/" .. TABLE))()

-- Values tried on every key the Lua module reads, and each one's limits.
local function probes()
	local l = {}
	local generic = { "", "0", "1", "-1", "+5", "abc", "1e3", "0x10", "none", "/abs",
		"/abs/dir/", "rel", "/a/../b", "/a/..b", "/", "1K", "1M", "8G", "1G/s", "10MB", "10kb",
		"8192T", "8193T", "9007199254740992", "9007199254740993", "https, S3", "https,9p",
		"0,64030", "4294967294", "4294967295", "0, x", "hold", "bb", "BB", "copy",
		"/" .. string.rep("y", 106), "/" .. string.rep("y", 107), "/tmp/x.sock" }
	for _, k in ipairs(keys) do
		if k.lua then
			local vals = {}
			for _, v in ipairs(generic) do vals[#vals + 1] = v end
			for _, n in ipairs({ k.min, k.max }) do
				vals[#vals + 1] = string.format("%.0f", n - 1)
				vals[#vals + 1] = string.format("%.0f", n)
				vals[#vals + 1] = string.format("%.0f", n + 1)
			end
			if k.default then vals[#vals + 1] = k.default end
			for _, v in ipairs(vals) do l[#l + 1] = k[1] .. "=" .. v end
		end
	end
	return l
end
if arg[2] == "--probes" then
	print(table.concat(probes(), "\n"))
	os.exit(0)
end

local n, fails = 0, 0
local function ok(cond, desc, why)
	n = n + 1
	if cond then
		print("ok " .. n .. " - " .. desc)
	else
		fails = fails + 1
		print("not ok " .. n .. " - " .. desc)
		if why then print("# " .. why) end
	end
end

local function lines_of(rel)
	local t = {}
	for l in io.lines(src .. "/" .. rel) do t[#t + 1] = l end
	return t
end

local byname = {}
for _, k in ipairs(keys) do byname[k[1]] = k end

-- What a document may say for an unset default (nil) or an empty list ("").
local UNSET = { none = true, empty = true, off = true, unset = true }
local function same_default(k, said)
	if k.default == nil or k.default == "" then return UNSET[string.lower(said)] == true end
	return said == k.default
end
local function want(k)
	if k.default == nil then return "none (unset)" end
	if k.default == "" then return "empty" end
	return k.default
end

-- stagehand.conf(5) ----------------------------------------------------------
do
	local MAN = "docs/man/stagehand.conf.5.in"
	local lines = lines_of(MAN)
	-- troff to text: font escapes, \- and quotes out, a leading macro out
	local function plain(s)
		s = s:gsub("\\f[BIRP]", ""):gsub("\\%-", "-"):gsub("\\&", ""):gsub('"', "")
		return (s:gsub("^%.[A-Z][A-Z]?%s*", ""))
	end
	-- an entry: the tag line after .TP (or .TQ) in KEYS, then its text
	local entries, cur, inkeys = {}, nil, false
	for i, l in ipairs(lines) do
		if l:find("^%.SH") then inkeys = l:find("^%.SH KEYS") ~= nil; cur = nil end
		if inkeys then
			local prev = lines[i - 1] or ""
			if prev == ".TP" or prev == ".TQ" then
				cur = { keys = {}, text = {}, line = i }
				entries[#entries + 1] = cur
				for key in l:gmatch("([A-Z][A-Za-z0-9]+)=") do cur.keys[#cur.keys + 1] = key end
			elseif l:find("^%.SS") or l:find("^%.PP") then
				cur = nil
			elseif cur and l ~= ".TP" and l ~= ".TQ" then
				cur.text[#cur.text + 1] = plain(l)
			end
		end
	end
	local summary = 0
	for _, l in ipairs(lines) do
		if l == "@CONF_KEY_SUMMARY@" then summary = summary + 1 end
	end
	ok(summary == 1, MAN .. ": one @CONF_KEY_SUMMARY@ line (the key summary, made from " .. TABLE .. ")",
		"found " .. summary)
	local entry_of = {}
	for _, e in ipairs(entries) do
		if #e.keys ~= 1 then
			ok(false, MAN .. ":" .. e.line .. ": one key per entry",
				"the tag names " .. (#e.keys == 0 and "no Key=" or table.concat(e.keys, ", ")))
		else
			local key = e.keys[1]
			if entry_of[key] then
				ok(false, MAN .. ":" .. e.line .. ": " .. key .. " documented once",
					"it already has an entry at line " .. entry_of[key].line)
			end
			entry_of[key] = e
			ok(byname[key] ~= nil, "stagehand.conf(5) documents " .. key .. ", a key of " .. TABLE,
				MAN .. ":" .. e.line .. ": no key " .. key .. " in " .. TABLE ..
				": remove the entry, or add the key to the table")
		end
	end
	for _, k in ipairs(keys) do
		local e = entry_of[k[1]]
		ok(e ~= nil, "stagehand.conf(5) has an entry for " .. k[1],
			MAN .. ": no .TP entry for " .. k[1] .. " (in " .. TABLE .. "): document it")
		if e then
			local said = table.concat(e.text, " "):match("Default:%s*(%S+)")
			said = said and said:gsub("[%.,;:%)]+$", "")
			ok(said and same_default(k, said), "stagehand.conf(5): " .. k[1] .. "'s default",
				MAN .. ":" .. e.line .. ": " .. k[1] .. " says 'Default: " .. tostring(said) ..
				"', " .. TABLE .. " says " .. want(k))
		end
	end
end

-- etc/stagehand.conf -------------------------------------------------------
do
	local SAMPLE = "etc/stagehand.conf"
	local seen = {}
	for i, l in ipairs(lines_of(SAMPLE)) do
		local hash, key, val = l:match("^(#?)([A-Z][A-Za-z0-9]*)%s*=(.-)%s*$")
		if key then
			local where = SAMPLE .. ":" .. i .. ": "
			ok(hash == "#", where .. key .. " is commented out",
				where .. "the sample sets " .. key .. "; it shows defaults only, as #" .. key .. "=")
			ok(byname[key] ~= nil, where .. key .. " is a key of " .. TABLE,
				where .. "no key " .. key .. " in " .. TABLE .. ": remove it, or add the key")
			ok(not seen[key], where .. key .. " shown once",
				where .. key .. " is also on line " .. tostring(seen[key]))
			seen[key] = seen[key] or i
			local k = byname[key]
			if k then
				local d = k.default or ""
				ok(val == d, where .. key .. " shows the default",
					where .. "#" .. key .. "=" .. val .. ", but " .. TABLE .. " says " .. want(k) ..
					" (write #" .. key .. "=" .. d .. ")")
			end
		end
	end
	for _, k in ipairs(keys) do
		ok(seen[k[1]] ~= nil, "the sample config shows " .. k[1],
			SAMPLE .. ": no #" .. k[1] .. "=" .. (k.default or "") .. " line: add it, with a comment")
	end
end

-- docs/admin-submit.md: the keys slurmctld's module reads --------------------
do
	local DOC = "docs/admin-submit.md"
	local rows = {}
	for i, l in ipairs(lines_of(DOC)) do
		local key, def = l:match("^| `([A-Z][A-Za-z0-9]*)` | ([^|]-) |")
		if key then rows[key] = { line = i, def = def:gsub("`", "") } end
	end
	for key, r in pairs(rows) do
		local k = byname[key]
		ok(k and k.lua, DOC .. ":" .. r.line .. ": " .. key .. " is a key the Lua module reads",
			DOC .. ":" .. r.line .. ": " .. TABLE .. " gives " .. key .. " no lua name")
		if k and k.lua then
			local said = r.def:match("^(%S+)")
			ok(said and same_default(k, said), DOC .. ": " .. key .. "'s default",
				DOC .. ":" .. r.line .. ": says " .. r.def .. ", " .. TABLE .. " says " .. want(k))
		end
	end
	for _, k in ipairs(keys) do
		if k.lua then
			ok(rows[k[1]] ~= nil, DOC .. " lists " .. k[1] .. ", which the Lua module reads",
				DOC .. ": no row for " .. k[1] .. " in the table of site settings")
		end
	end
end

-- the Lua module reads each of its keys, and every default -------------------
do
	local errors = {}
	slurm = { log_error = function(_, m) errors[#errors + 1] = m end,
		log_info = function() end, log_debug = function() end }
	local m = assert(loadfile(src .. "/lua/stagehand.lua"))("/nonexistent/stagehand.conf")
	for _, k in ipairs(keys) do
		if k.lua then
			ok(m.CONF_READERS[k[2]] ~= nil, "stagehand.lua reads " .. k[1] .. " (a " .. k[2] .. ")",
				"lua/stagehand.lua has no reader for the kind " .. k[2] .. ": add one, as conf_keys.c has")
		end
	end
	ok(#errors == 0, "stagehand.lua reads every default of " .. TABLE, errors[1])

	-- each probe line as stagehandd read it
	local C = {}
	if arg[2] then
		for l in io.lines(arg[2]) do
			local line, res = l:match("^(.-)\t(.*)$")
			if line then C[line] = res end
		end
	end
	ok(arg[2] ~= nil, "stagehandd's reading of the probe lines given (conf_probe)")
	local tmp = os.tmpname()
	local function text(v)
		if type(v) == "table" then
			local t = {}
			for i, x in ipairs(v) do t[i] = type(x) == "number" and string.format("%.0f", x) or x end
			return table.concat(t, ",")
		end
		if type(v) == "number" then return string.format("%.0f", v) end
		return tostring(v)
	end
	local bad, count = {}, 0
	for _, line in ipairs(arg[2] and probes() or {}) do
		local f = assert(io.open(tmp, "w"))
		f:write(line, "\n")
		f:close()
		errors = {}
		local mod = assert(loadfile(src .. "/lua/stagehand.lua"))(tmp)
		local key = line:match("^([^=]*)=")
		local lua
		if errors[1] then
			lua = "ERR " .. errors[1]:gsub("^stagehand: [^\n]-:1: ", ""):gsub("; the default stays$", "")
		else
			local k = byname[key]
			local v = mod.site_config()[key]
			if k[2] == "enum" or k[2] == "word" or k[2] == "bool" then
				lua = "OK"  -- C keeps the word's constant, Lua the word
			else
				lua = "OK " .. text(v)
			end
		end
		local c = C[line] or "(no answer from conf_probe)"
		if byname[key][2] == "uids" and c:match("^OK ") then
			-- stagehandd keeps the uids as written ("+5"), Lua as numbers
			local t = {}
			for u in c:sub(4):gmatch("[^,]+") do t[#t + 1] = string.format("%.0f", tonumber(u)) end
			c = "OK " .. table.concat(t, ",")
		end
		if lua == "OK" then c = c:match("^OK") and "OK" or c end
		count = count + 1
		if c ~= lua then bad[#bad + 1] = line .. "\n#   stagehandd: " .. c .. "\n#   stagehand.lua: " .. lua end
	end
	os.remove(tmp)
	ok(#bad == 0, "stagehand.lua reads " .. count .. " lines of its keys as stagehandd does",
		#bad .. " differ:\n# " .. table.concat(bad, "\n# "))
	slurm = nil
end

print("1.." .. n)
os.exit(fails == 0 and 0 or 1)
