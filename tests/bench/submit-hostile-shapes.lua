--[[
submit-hostile-shapes.lua - the adversarial batch scripts of the submit-cost
benchmark (tests/bench/submit-hostile) and the time-fuzzer
(fuzz/fuzz_dsl_time.lua), as generators: SHAPES[i] = { name, gen, what },
gen(size) returns a script of at most size bytes (4 MB, Slurm's default
max_script_size, is the largest that matters). "plain" is the script each
shape is compared with: a normal header and a body of commands.

Each shape aims at one place in the #DATA parsers (lua/stagehand_dsl.lua,
common/dsl.c) where work could grow faster than the script. Plain Lua
5.1-5.4, no libraries.
]]
local rep, floor, char = string.rep, math.floor, string.char

-- One valid directive up front: job_submit parses only scripts holding "#DATA".
local HEAD = "#!/bin/bash\n#SBATCH --job-name=hostile\n#SBATCH --time=10\n#DATA archive=results/\n"

-- head, then unit repeated to fill size, then tail.
local function fill(head, unit, size, tail)
	tail = tail or ""
	local n = floor((size - #head - #tail) / #unit)
	if n < 0 then n = 0 end
	return head .. rep(unit, n) .. tail
end

-- 64 directives (the default MaxDirectives) made by mk(i), then a body.
local function directives(mk, size)
	local t = { HEAD }
	for i = 1, 64 do t[#t + 1] = mk(i) end
	local head = table.concat(t)
	return fill(head, "srun ./step --input data.bin\n", size)
end

local function long_path(i, unit, bytes)
	return "#DATA archive=d" .. i .. "/" .. rep(unit, floor(bytes / #unit)) .. "\n"
end

local SHAPES = {
	{ "plain", function(size)
		return fill(HEAD .. "#DATA exempt=tmp/\n",
			"srun ./step --input data.bin --output out.bin\n", size)
	end, "a normal header and a body of commands" },
	{ "near-miss", function(size)
		return fill(HEAD, "#data \n", size, "echo x=1\n")
	end, "'#data ' lines without '=' and one '=' at the end (issue 47, shape a)" },
	{ "near-miss-eq", function(size)
		return fill(HEAD, "#data archive=x\n", size)
	end, "'#data archive=x' lines: a warning each" },
	{ "near-miss-space", function(size)
		return fill(HEAD, "# DATA x\n", size, "echo x=1\n")
	end, "'# DATA x' lines" },
	{ "near-miss-indented", function(size)
		return fill(HEAD, "   #DATA archive=x\n", size)
	end, "indented '#DATA' lines" },
	{ "after-command", function(size)
		return fill(HEAD .. "echo start\n", "#DATA\n", size)
	end, "'#DATA' lines after a command (issue 47, shape b)" },
	{ "after-command-valid", function(size)
		return fill(HEAD .. "#DATA archive=out/\necho start\n", "#DATA archive=results/\n", size)
	end, "valid directives after a command" },
	{ "max-directives", function(size)
		local n, lines, len = 0, {}, #HEAD
		while true do
			n = n + 1
			local l = "#DATA exempt=tmp/d" .. n .. "\n"
			if len + #l > size then break end
			lines[#lines + 1] = l
			len = len + #l
		end
		return HEAD .. table.concat(lines)
	end, "valid directives only, far past MaxDirectives" },
	{ "bad-keys", function(size)
		return fill(HEAD, "#DATA archvie=results/\n", size)
	end, "an unknown key on every line" },
	{ "duplicates", function(size)
		return fill(HEAD, "#DATA archive=out\n", size)
	end, "the same directive on every line" },
	{ "long-values", function(size)
		return directives(function(i) return long_path(i, "abcdefgh/", 4000) end, size)
	end, "64 directives of 4 KB paths" },
	{ "deep-paths", function(size)
		return directives(function(i) return long_path(i, "a/", 4000) end, size)
	end, "64 directives of 2,000 path components" },
	{ "expansions", function(size)
		return directives(function(i) return long_path(i, "%a%u%j%x%A%%", 4000) end, size)
	end, "64 directives of %a/%u/%j patterns" },
	{ "utf8-values", function(size)
		return directives(function(i) return long_path(i, "\195\169", 4000) end, size)
	end, "64 directives of 2-byte UTF-8 characters" },
	{ "bad-utf8", function(size)
		return fill(HEAD, "#DATA archive=\255\254x\n#data \192\175=x\n", size)
	end, "invalid UTF-8 in directives and near-misses" },
	{ "nul-bytes", function(size)
		return fill(HEAD, "#DATA archive=\0x\n#\0\0DATA\n", size)
	end, "NUL bytes in directives and comments" },
	{ "crlf", function(size)
		return fill(HEAD:gsub("\n", "\r\n") .. "echo start\r\n", "#data archive=x\r\n#DATA x\r\n", size)
	end, "CRLF near-misses, then CRLF '#DATA' after a command" },
	{ "one-line", function(size)
		return "#DATA archive=" .. rep("a", size - 15) .. "\n"
	end, "one directive line of the whole size" },
	{ "one-line-near-miss", function(size)
		return "#DATA exempt=t\n#data " .. rep("a", size - 22) .. "\n"
	end, "one '#data ' line of the whole size, no '='" },
	{ "one-line-comment", function(size)
		return HEAD .. "#" .. rep("data", floor((size - #HEAD - 2) / 4)) .. "\n"
	end, "one comment line full of 'data'" },
	{ "short-comments", function(size)
		return fill("#DATA archive=first\n", "#\n", size, "#DATA archive=late\n")
	end, "two-byte comment lines, then a directive" },
	{ "data-comments", function(size)
		return fill(HEAD, "#data\n", size)
	end, "'#data' comment lines (each needs a look)" },
	{ "blank-lines", function(size)
		return fill(HEAD, " \n", size, "#DATA archive=late\n")
	end, "lines of one blank, then a directive" },
	{ "quoted-escapes", function(size)
		return directives(function(i)
			return '#DATA archive="d' .. i .. "/" .. rep('\\\\\\"', 1000) .. '"\n'
		end, size)
	end, "64 directives of quoted values full of escapes" },
	{ "long-block", function(size)
		return fill(HEAD, "#SBATCH --comment=" .. rep("y", 200) .. "\n", size, "#DATA archive=late\n")
	end, "a long #SBATCH block, then a directive" },
}

return { SHAPES = SHAPES, HEAD = HEAD, fill = fill }
