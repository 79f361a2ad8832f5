--[[
testjson.lua - JSON for the Lua tests (never loaded by slurmctld): Debian's
lua-dkjson behind the two things the tests want. decode(text) raises an
error naming the position instead of returning nil, and JSON null decodes
to json.null (dkjson.null) so that keys with a null value stay visible in
tables.

base64_decode (script_b64 in the vectors) stays here: Debian packages no
base64 module for every Lua the tests run (lua-basexx is built for 5.1 and
5.2 only; lua-socket's mime is a network library for one function).
]]
local dkjson = require("dkjson")

local json = { null = dkjson.null }

function json.decode(text)
	local v, pos, err = dkjson.decode(text, 1, dkjson.null)
	if err then error(string.format("JSON: %s (at %s)", err, tostring(pos)), 0) end
	return v
end

local B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
local B64IDX = {}
for i = 1, 64 do B64IDX[B64:byte(i)] = i - 1 end

function json.base64_decode(s)
	local out, acc, bits = {}, 0, 0
	for i = 1, #s do
		local c = s:byte(i)
		if c == 61 then break end -- '=' ends the data
		local v = B64IDX[c]
		if not v then error("base64: invalid character at " .. i, 0) end
		acc, bits = acc * 64 + v, bits + 6
		if bits >= 8 then
			bits = bits - 8
			local p = 2 ^ bits
			local b = math.floor(acc / p)
			out[#out + 1] = string.char(b)
			acc = acc - b * p
		end
	end
	return table.concat(out)
end

return json
