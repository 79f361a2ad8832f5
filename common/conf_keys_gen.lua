--[[
conf_keys_gen.lua - turn the stagehand.conf key table (lua/stagehand_conf.lua)
into C for conf_keys.c, or into the key summary of stagehand.conf(5):

  lua conf_keys_gen.lua TABLE > conf_keys_tab.h
  lua conf_keys_gen.lua TABLE --man > conf-keys.man

Why Lua: the table is Lua data because slurmctld's module reads it as it
is, at load time, and configure already requires a Lua interpreter (for the
Lua tests), so generating the C from it adds no build dependency; an awk or
sed reader of the same file would be a second parser of it to keep right.

Checks what the C compiler cannot: known kinds, enum choices, limits in
range, unique names (case-insensitively). The C compiler then checks each
field exists and has the width its kind writes (_Static_assert below).
]]
local path = assert(arg[1], "usage: lua conf_keys_gen.lua lua/stagehand_conf.lua")
local keys = assert(loadfile(path))()

if arg[2] == "--man" then
	-- One tagged paragraph per key: "Key=default", then its one-line doc.
	local function troff(t) return (t:gsub("\\", "\\e"):gsub("%-", "\\-")) end
	local out = {}
	for _, k in ipairs(keys) do
		local d = k.default
		out[#out + 1] = ".TP"
		if d == nil or d == "" then
			out[#out + 1] = ".BR " .. k[1] .. "= \" (" .. (d and "empty" or "unset") .. ")\""
		else
			out[#out + 1] = ".BI " .. k[1] .. "= \"" .. troff(d) .. "\""
		end
		out[#out + 1] = troff(k.doc) .. "."
	end
	io.write(table.concat(out, "\n"), "\n")
	return
end

local KINDS = {
	int = "CK_INT", bool = "CK_ENUM", enum = "CK_ENUM", word = "CK_WORD",
	duration = "CK_DURATION", size = "CK_SIZE", path = "CK_PATH", sockpath = "CK_SOCKPATH",
	roots = "CK_ROOTS", names = "CK_NAMES", schemes = "CK_SCHEMES", uids = "CK_UIDS",
	hostport = "CK_HOSTPORT", server = "CK_SERVER", url = "CK_URL", region = "CK_REGION",
	argv = "CK_ARGV", partition = "CK_PARTITION", s3prefix = "CK_S3PREFIX", nets = "CK_NETS",
}
-- What each kind stores: "int" (int-sized), "u64" (uint64_t or size_t), "ptr".
local STORES = {
	int = "int", bool = "int", enum = "int", duration = "int", size = "u64",
}

local function die(fmt, ...)
	io.stderr:write(path .. ": " .. string.format(fmt, ...) .. "\n")
	os.exit(1)
end

local function cstr(s)
	if s == nil then return "NULL" end
	return '"' .. tostring(s):gsub('[\\"]', "\\%0"):gsub("\n", "\\n") .. '"'
end

local function num(n)
	if n ~= math.floor(n) or n < 0 or n > 2 ^ 63 then die("limit %s is not a whole number", n) end
	return string.format("%.0fULL", n)
end

local out = {}
local function w(fmt, ...) out[#out + 1] = string.format(fmt, ...) end

w("/* conf_keys_tab.h - generated from lua/stagehand_conf.lua by common/conf_keys_gen.lua")
w("   at build time: edit the table, not this file. Included by conf_keys.c only. */")
w("#define _FIELD_SIZE(f) sizeof(((struct conf *)0)->f)")
local seen = {}
for i, k in ipairs(keys) do
	local name, kind = k[1], k[2]
	if type(name) ~= "string" or not name:find("^%u%w+$") then die("entry %d: bad name", i) end
	if seen[name:lower()] then die("%s: listed twice", name) end
	seen[name:lower()] = true
	if not KINDS[kind] then die("%s: unknown kind '%s'", name, tostring(kind)) end
	if type(k.field) ~= "string" or not k.field:find("^[%l_][%w_]*$") then
		die("%s: no struct conf field", name)
	end
	if type(k.doc) ~= "string" or k.doc == "" or k.doc:find("\n") then die("%s: no one-line doc", name) end
	if (kind == "int" or kind == "duration") and not (k.min and k.max) then
		die("%s: a %s needs min and max", name, kind)
	end
	local store = STORES[kind] or "ptr"
	if store == "int" then
		w("_Static_assert(_FIELD_SIZE(%s) == sizeof(int), \"%s: %s is not int-sized\");",
			k.field, name, k.field)
	elseif store == "u64" then
		w("_Static_assert(_FIELD_SIZE(%s) == sizeof(uint64_t) || _FIELD_SIZE(%s) == sizeof(uint32_t), "
			.. "\"%s: %s is not a size\");", k.field, k.field, name, k.field)
	else
		w("_Static_assert(_FIELD_SIZE(%s) == sizeof(void *), \"%s: %s is not a pointer\");",
			k.field, name, k.field)
	end
	if kind == "bool" then
		k.choices = { { "yes", "1" }, { "no", "0" } }
	end
	if kind == "enum" or kind == "word" or kind == "bool" then
		if type(k.choices) ~= "table" or #k.choices < 2 then die("%s: no choices", name) end
		local items = {}
		for _, c in ipairs(k.choices) do
			items[#items + 1] = string.format("{ %s, %s, %d }", cstr(c[1]),
				kind == "word" and "0" or assert(c[2], name .. ": choice without a value"),
				c.alias and 1 or 0)
		end
		w("static const struct conf__choice _ch_%s[] = { %s, { NULL, 0, 0 } };", name,
			table.concat(items, ", "))
	elseif k.choices then
		die("%s: choices for a %s", name, kind)
	end
end

w("static const struct conf__key _keys[] = {")
for _, k in ipairs(keys) do
	local name, kind = k[1], k[2]
	local f = {
		".name = " .. cstr(name),
		".kind = " .. KINDS[kind],
		".off = offsetof(struct conf, " .. k.field .. ")",
		".size = _FIELD_SIZE(" .. k.field .. ")",
	}
	if k.port then
		f[#f + 1] = ".off2 = offsetof(struct conf, " .. k.port .. ")"
	end
	if k.min then f[#f + 1] = ".min = " .. num(k.min) end
	f[#f + 1] = ".max = " .. (k.max and num(k.max) or "UINT64_MAX")
	if k.default then f[#f + 1] = ".def = " .. cstr(k.default) end
	if k.off then f[#f + 1] = ".off_word = " .. cstr(k.off) end
	if k.offval then f[#f + 1] = string.format(".off_value = %d", k.offval) end
	if k.must then f[#f + 1] = ".must = " .. cstr(k.must) end
	if k.lua then f[#f + 1] = ".lua = 1" end
	if k.choices then f[#f + 1] = ".choices = _ch_" .. name end
	w("\t{ %s },", table.concat(f, ", "))
end
w("};")
w("#undef _FIELD_SIZE")
io.write(table.concat(out, "\n"), "\n")
