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
  * the Lua module has a reader for the kind of each key it reads, and
    reads every default without complaint.

A failure names the key and the file to fix.

  lua conf-keys.lua SRCDIR
]]
local src = assert(arg[1], "usage: lua conf-keys.lua SRCDIR")
local TABLE = "lua/stagehand_conf.lua"
local keys = assert(loadfile(src .. "/" .. TABLE))()

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
	slurm = nil
end

print("1.." .. n)
os.exit(fails == 0 and 0 or 1)
