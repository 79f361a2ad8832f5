--[[
json.lua - a small JSON decoder for the Lua tests (never loaded by
slurmctld). Lua 5.1-5.4. decode(text) returns the value or raises an error
naming the byte offset. JSON null decodes to json.null so that keys with a
null value stay visible in tables; base64 decoding for script_b64 is here too.
]]
local json = {}
json.null = setmetatable({}, { __tostring = function() return "null" end })

local byte, sub, char, find = string.byte, string.sub, string.char, string.find
local floor = math.floor

local function utf8_encode(cp)
	if cp < 0x80 then return char(cp) end
	if cp < 0x800 then
		return char(0xC0 + floor(cp / 64), 0x80 + cp % 64)
	end
	if cp < 0x10000 then
		return char(0xE0 + floor(cp / 4096), 0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
	end
	return char(0xF0 + floor(cp / 262144), 0x80 + floor(cp / 4096) % 64,
		0x80 + floor(cp / 64) % 64, 0x80 + cp % 64)
end

local ESC = { ['"'] = '"', ["\\"] = "\\", ["/"] = "/", b = "\b", f = "\f", n = "\n", r = "\r", t = "\t" }

function json.decode(text)
	local pos = 1
	local function fail(what)
		error(string.format("JSON: %s at byte %d", what, pos), 0)
	end
	local function ws()
		pos = find(text, "[^ \t\r\n]", pos) or #text + 1
	end
	local value
	local function str()
		pos = pos + 1
		local out = {}
		while true do
			local q = find(text, '["\\]', pos)
			if not q then fail("unterminated string") end
			out[#out + 1] = sub(text, pos, q - 1)
			if byte(text, q) == 34 then
				pos = q + 1
				return table.concat(out)
			end
			local e = sub(text, q + 1, q + 1)
			if e == "u" then
				local hex = sub(text, q + 2, q + 5)
				if not find(hex, "^%x%x%x%x$") then fail("bad \\u escape") end
				local cp = tonumber(hex, 16)
				pos = q + 6
				if cp >= 0xD800 and cp <= 0xDBFF and sub(text, pos, pos + 1) == "\\u" then
					local lo = tonumber(sub(text, pos + 2, pos + 5), 16)
					if lo and lo >= 0xDC00 and lo <= 0xDFFF then
						cp = 0x10000 + (cp - 0xD800) * 1024 + (lo - 0xDC00)
						pos = pos + 6
					end
				end
				out[#out + 1] = utf8_encode(cp)
			elseif ESC[e] then
				out[#out + 1] = ESC[e]
				pos = q + 2
			else
				fail("bad escape")
			end
		end
	end
	function value()
		ws()
		local c = sub(text, pos, pos)
		if c == "{" then
			pos = pos + 1
			local obj = {}
			ws()
			if sub(text, pos, pos) == "}" then pos = pos + 1 return obj end
			while true do
				ws()
				if sub(text, pos, pos) ~= '"' then fail("expected a key") end
				local k = str()
				ws()
				if sub(text, pos, pos) ~= ":" then fail("expected ':'") end
				pos = pos + 1
				obj[k] = value()
				ws()
				local d = sub(text, pos, pos)
				pos = pos + 1
				if d == "}" then return obj end
				if d ~= "," then fail("expected ',' or '}'") end
			end
		elseif c == "[" then
			pos = pos + 1
			local arr = {}
			ws()
			if sub(text, pos, pos) == "]" then pos = pos + 1 return arr end
			while true do
				arr[#arr + 1] = value()
				ws()
				local d = sub(text, pos, pos)
				pos = pos + 1
				if d == "]" then return arr end
				if d ~= "," then fail("expected ',' or ']'") end
			end
		elseif c == '"' then
			return str()
		elseif sub(text, pos, pos + 3) == "true" then
			pos = pos + 4 return true
		elseif sub(text, pos, pos + 4) == "false" then
			pos = pos + 5 return false
		elseif sub(text, pos, pos + 3) == "null" then
			pos = pos + 4 return json.null
		else
			local s, e = find(text, "^-?%d+%.?%d*[eE]?[-+]?%d*", pos)
			if not s then fail("unexpected character") end
			pos = e + 1
			return tonumber(sub(text, s, e))
		end
	end
	local v = value()
	ws()
	if pos <= #text then fail("trailing text") end
	return v
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64IDX = {}
for i = 1, 64 do B64IDX[byte(B64, i)] = i - 1 end

function json.base64_decode(s)
	s = s:gsub("[^%w%+/=]", "")
	local out, acc, bits = {}, 0, 0
	for i = 1, #s do
		local v = B64IDX[byte(s, i)]
		if v then
			acc = acc * 64 + v
			bits = bits + 6
			if bits >= 8 then
				bits = bits - 8
				local p = 2 ^ bits
				local b = floor(acc / p)
				out[#out + 1] = char(b)
				acc = acc - b * p
			end
		end
	end
	return table.concat(out)
end

return json
