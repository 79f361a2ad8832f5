--[[
tap.lua - the TAP output the Lua tests share (test-module.lua,
test-submit.lua, test-bb.lua): ok(cond, name, detail), is(got, expected,
name) and done(), which prints the plan and a summary and exits non-zero
when a test failed.
]]
local T = { n = 0, failed = 0 }

function T.ok(cond, name, detail)
	T.n = T.n + 1
	print(string.format("%s %d - %s", cond and "ok" or "not ok", T.n, name))
	if not cond then
		T.failed = T.failed + 1
		if detail then print("#   " .. tostring(detail):gsub("\n", "\n#   ")) end
	end
end

function T.is(got, exp, name)
	T.ok(got == exp, name, string.format("expected %s, got %s", tostring(exp), tostring(got)))
end

function T.done()
	print("1.." .. T.n)
	if T.failed > 0 then
		print(string.format("# %d of %d tests failed (%s)", T.failed, T.n, _VERSION))
		os.exit(1)
	end
	print(string.format("# all %d tests passed (%s)", T.n, _VERSION))
	os.exit(0)
end

return T
