--[[
test-submit.lua - behaviour of slurm_job_submit and slurm_job_modify in
lua/job_submit.lua under a stub `slurm` table. Prints TAP.

  lua test-submit.lua [--script PATH/job_submit.lua]
]]
local here = (arg[0]:match("^(.*)/[^/]*$") or ".")
package.path = here .. "/?.lua;" .. package.path
local json = require("testjson")
local stub = require("stub_slurm")

local script_path = here .. "/../../lua/job_submit.lua"
if arg[1] == "--script" then script_path = arg[2] end

local before = {}
for k in pairs(_G) do before[k] = true end
slurm = stub.slurm
dofile(script_path)
local S = slurm

local T = require("tap")
local ok, is = T.ok, T.is

local PREFIX = "stagehand:v1:"
local HELD = 2042

-- A job_desc like the plugin's: unset fields are nil, priority NO_VAL.
local function desc(script, extra)
	local d = { script = script, priority = S.NO_VAL }
	for k, v in pairs(extra or {}) do d[k] = v end
	return d
end
local function copy(t)
	local c = {}
	for k, v in pairs(t) do c[k] = v end
	return c
end
local function user_text()
	return table.concat(stub.user, "\n")
end

local HEAD = "#!/bin/bash\n#SBATCH -n 1\n"

-- globals ---------------------------------------------------------------
do
	local added = {}
	for k in pairs(_G) do
		if not before[k] and k ~= "slurm" then added[#added + 1] = k end
	end
	table.sort(added)
	is(table.concat(added, ","), "slurm_job_modify,slurm_job_submit,stagehand",
		"the script defines only slurm_job_submit, slurm_job_modify and stagehand")
end

-- a hetjob's leader in hold mode (component 0: the script is its) -------
do
	stub.reset()
	local d = desc(HEAD .. "#DATA stage_in=/data/in.txt\n#SBATCH hetjob\n#SBATCH -n 1\nsrun true\n",
		{ het_job_offset = 0 })
	is(slurm_job_submit(d, {}, 1000), S.SUCCESS, "hold mode: a hetjob's leader with #DATA is accepted")
	is(d.priority, 0, "hold mode: the leader is held (Slurm starts no component before it)")
	local o = desc(nil, { het_job_offset = 1 })
	is(slurm_job_submit(o, {}, 1000), S.SUCCESS, "another component (no script) is accepted untouched")
	ok(o.admin_comment == nil and o.priority == S.NO_VAL, "... with no record and no hold")
end

-- no #DATA --------------------------------------------------------------
do
	stub.reset()
	local d = desc(HEAD .. "# data is in /scratch\n#data archive=x\nsrun hostname\n")
	local orig = copy(d)
	is(slurm_job_submit(d, {}, 1000), S.SUCCESS, "script without #DATA is accepted")
	local same = true
	for k, v in pairs(orig) do if d[k] ~= v then same = false end end
	for k in pairs(d) do if orig[k] == nil then same = false end end
	ok(same, "script without #DATA: job_desc untouched")
	is(#stub.user, 0, "script without #DATA: nothing said to the user")
	stub.reset()
	is(slurm_job_submit(desc(nil), {}, 1000), S.SUCCESS, "no script (salloc/srun) is accepted")
	is(slurm_job_submit(desc(42), {}, 1000), S.SUCCESS, "non-string script is accepted")
end

-- rejection -------------------------------------------------------------
do
	stub.reset()
	local script = HEAD .. "#DATA archive=results/\n#DATA archvie=out\n#DATA exempt=../x\nsrun ./a\n"
	local d = desc(script, { admin_comment = "site note" })
	local rc = slurm_job_submit(d, {}, 1000)
	is(rc, S.ERROR, "bad script rejected with slurm.ERROR")
	local u = user_text()
	ok(u:find("stagehand: line 4: unknown key 'archvie' \226\128\148 did you mean 'archive'?", 1, true),
		"line 4 error says what and suggests the key", u)
	ok(u:find("stagehand: line 5: '..' is not allowed in paths", 1, true), "line 5 error reported too", u)
	ok(u:find("(fix the #DATA line; see 'stagehand check')", 1, true), "error says what to do", u)
	local per_line = 0
	for _, l in ipairs(stub.user) do
		if l:find("^stagehand: line %d+: ") then per_line = per_line + 1 end
	end
	is(per_line, 2, "one log_user line per error")
	local all_prefixed = true
	for _, l in ipairs(stub.user) do
		if not l:find("^stagehand: ") then all_prefixed = false end
	end
	ok(all_prefixed, "every user message starts with 'stagehand: '", u)
	is(d.admin_comment, "site note", "rejected job: admin_comment untouched")
	is(d.priority, S.NO_VAL, "rejected job: priority untouched")
	ok(#stub.info >= 1 and stub.info[#stub.info]:find("^stagehand: rejected"), "rejection logged to slurmctld",
		stub.info[#stub.info])
end

-- accepted without stage_in ---------------------------------------------
do
	stub.reset()
	local d = desc(HEAD .. "#DATA archive=results/ when=success\n#DATA exempt=tmp//\nsrun ./a\n")
	is(slurm_job_submit(d, {}, 1000), S.SUCCESS, "valid directives accepted")
	is(d.priority, S.NO_VAL, "no stage_in: not held")
	local ac = d.admin_comment or ""
	is(ac:sub(1, #PREFIX + 1), PREFIX .. "{", "admin_comment is stagehand:v1: followed by the plan")
	local okj, plan = pcall(json.decode, ac:sub(#PREFIX + 1))
	ok(okj and plan.version == 1 and #plan.actions == 2, "admin_comment holds the plan as JSON", ac)
	if okj then
		local a1, a2 = plan.actions[1], plan.actions[2]
		ok(a1.line == 3 and a1.action == "archive" and a1.path == "results" and a1.to == json.null
			and a1.when == "success" and a1.keep == true, "archive action recorded with defaults")
		ok(a2.line == 4 and a2.action == "exempt" and a2.path == "tmp" and a2.to == nil,
			"exempt action normalised, no 'to'")
	end
	is(stagehand.record_state(ac), "none", "record state none")
	is(#stub.user, 0, "clean script: nothing said to the user")
end

-- accepted with stage_in: held -----------------------------------------
local held_comment
do
	stub.reset()
	local d = desc(HEAD .. "#DATA stage_in=/archive/ref.fa to=inputs\n#DATA archive=out\nsrun ./a\n")
	is(slurm_job_submit(d, {}, 1000), S.SUCCESS, "stage_in script accepted")
	is(d.priority, 0, "stage_in: held with priority 0")
	is(stagehand.record_state(d.admin_comment), "pending", "record state pending")
	ok(d.admin_comment:find("^stagehand:hold=pending stagehand:v1:{"), "hold marker before the plan",
		d.admin_comment)
	local okj, plan = pcall(json.decode, d.admin_comment:sub(#"stagehand:hold=pending stagehand:v1:" + 1))
	ok(okj and plan.actions[1].action == "stage_in" and plan.actions[1].to == "inputs",
		"text after stagehand:v1: is exactly the plan JSON", plan)
	ok(stagehand.stage_in_pending(d.admin_comment), "stage_in_pending() sees it")
	ok(user_text():find("held until its stage_in inputs are staged", 1, true), "user told why it is held",
		user_text())
	held_comment = d.admin_comment
end

-- after=: held until the named jobs' archives are verified ---------------
do
	stub.reset()
	local d = desc(HEAD .. "#DATA after=4711:4712_3\nsrun ./post\n")
	is(slurm_job_submit(d, {}, 1000), S.SUCCESS, "after-only script accepted")
	is(d.priority, 0, "after=: held with priority 0 although it has no stage_in")
	is(stagehand.record_state(d.admin_comment), "pending", "after=: record state pending")
	local okj, plan = pcall(json.decode, d.admin_comment:sub(#"stagehand:hold=pending stagehand:v1:" + 1))
	ok(okj and #plan.actions == 0 and plan.after and plan.after.line == 3 and
		plan.after.jobs[1] == "4711" and plan.after.jobs[2] == "4712_3",
		"after=: the plan records the jobs as written", d.admin_comment)
	ok(user_text():find("held until the archives of jobs 4711, 4712_3 are verified", 1, true),
		"after=: the user is told what the job waits for", user_text())
	-- the user cannot release it, and is told why
	stub.reset()
	is(slurm_job_modify({ priority = S.INFINITE }, { job_id = 30, admin_comment = d.admin_comment }, {}, 1000),
		HELD, "after=: a user release is refused")
	ok(user_text():find("archives it waits for (#DATA after=)", 1, true), "after=: refusal says why",
		user_text())
	local rel = { priority = S.INFINITE }
	is(slurm_job_modify(rel, { job_id = 30, admin_comment = d.admin_comment }, {}, 0), S.SUCCESS,
		"after=: stagehandd (root) releases it")
	is(stagehand.record_state(rel.admin_comment), "released", "after=: release recorded")
	-- with stage_in: both are waited for, the stage-in after the archives
	stub.reset()
	local e = desc(HEAD .. "#DATA after=4711\n#DATA stage_in=/archive/u/4711/results\n")
	is(slurm_job_submit(e, {}, 1000), S.SUCCESS, "after= with stage_in accepted")
	is(e.priority, 0, "after= with stage_in: held")
	ok(user_text():find("archive of job 4711 is verified, then until its stage_in inputs are staged", 1, true),
		"after= with stage_in: the user is told the order", user_text())
	-- a bad job id is refused at submit, with the line
	stub.reset()
	is(slurm_job_submit(desc(HEAD .. "#DATA after=afterok:4711\n"), {}, 1000), S.ERROR,
		"after= with a dependency type refused")
	ok(user_text():find("stagehand: line 3: 'afterok' is not a job id", 1, true),
		"after= refusal names the line and the value", user_text())
end

-- hold disabled ---------------------------------------------------------
do
	stub.reset()
	stagehand.site.hold_stage_in = false
	local d = desc(HEAD .. "#DATA stage_in=/archive/ref.fa\n")
	is(slurm_job_submit(d, {}, 1000), S.SUCCESS, "hold off: accepted")
	is(d.priority, S.NO_VAL, "hold off: not held")
	is(stagehand.record_state(d.admin_comment), "none", "hold off: no hold marker")
	stagehand.site.hold_stage_in = true
end

-- warnings --------------------------------------------------------------
do
	stub.reset()
	local d = desc(HEAD .. "#Data archive=x\n#DATA exempt=tmp\nsrun ./a\n#DATA archive=late\n")
	is(slurm_job_submit(d, {}, 1000), S.SUCCESS, "warnings do not reject")
	local u = user_text()
	ok(u:find("stagehand: line 3: warning:", 1, true) and u:find("stagehand: line 6: warning:", 1, true),
		"each warning shown with its line", u)
	ok(d.admin_comment and d.admin_comment:find('"path":"tmp"', 1, true)
		and not d.admin_comment:find("late", 1, true), "ignored lines are not in the plan")
	stub.reset()
	d = desc(HEAD .. "#DATA archive=late_only\n", {})
	d.script = "#!/bin/bash\nsrun ./a\n#DATA archive=x\n"
	is(slurm_job_submit(d, {}, 1000), S.SUCCESS, "only ignored directives: accepted")
	is(d.admin_comment, nil, "only ignored directives: no record")
end

-- admin_comment already set ---------------------------------------------
do
	stub.reset()
	local d = desc(HEAD .. "#DATA exempt=tmp\n", { admin_comment = "billing=A12  " })
	slurm_job_submit(d, {}, 0)
	ok(d.admin_comment:find("^billing=A12 stagehand:v1:{"), "site text kept before the record",
		d.admin_comment)
	d = desc(HEAD .. "#DATA exempt=tmp\n",
		{ admin_comment = "x stagehand:hold=pending stagehand:v1:{\"version\":1,\"actions\":[]}" })
	slurm_job_submit(d, {}, 0)
	ok(d.admin_comment:find("^x stagehand:v1:{") and
		select(2, d.admin_comment:gsub("stagehand:v1:", "")) == 1, "an older record is replaced",
		d.admin_comment)
end

-- plan size limit -------------------------------------------------------
do
	stub.reset()
	local saved = stagehand.site.max_plan_bytes
	stagehand.site.max_plan_bytes = 120
	local d = desc(HEAD .. "#DATA archive=a_long_directory_name_one\n#DATA archive=a_long_directory_name_two\n")
	is(slurm_job_submit(d, {}, 1000), S.ERROR, "plan over max_plan_bytes rejected")
	ok(user_text():find("this site's limit is 120", 1, true), "size error names the limit", user_text())
	is(d.admin_comment, nil, "oversized plan not recorded")
	stagehand.site.max_plan_bytes = saved
end

-- slurm_job_modify ------------------------------------------------------
do
	local rec = { job_id = 17, admin_comment = held_comment, priority = 0 }
	stub.reset()
	is(slurm_job_modify({ priority = S.INFINITE }, rec, {}, 1000), HELD,
		"user release of a held stage-in job refused with ESLURM_JOB_HELD")
	ok(stub.info[1] and stub.info[1]:find("job 17 by uid 1000", 1, true), "refusal logged", stub.info[1])
	is(slurm_job_modify({ priority = 5000 }, rec, {}, 1000), HELD, "user priority= refused too")
	local rel = { priority = S.INFINITE }
	is(slurm_job_modify(rel, rec, {}, 0), S.SUCCESS, "root release allowed")
	is(stagehand.record_state(rel.admin_comment), "released", "root release marks the record released")
	is(select(3, stagehand.split_record(rel.admin_comment)), select(3, stagehand.split_record(held_comment)),
		"root release keeps the plan as it was")
	is(slurm_job_modify({ priority = S.INFINITE }, { job_id = 17, admin_comment = rel.admin_comment }, {}, 1000),
		S.SUCCESS, "after the release a user hold/release is allowed again")
	local rel2 = { priority = S.INFINITE, admin_comment = "set by admin" }
	slurm_job_modify(rel2, rec, {}, 0)
	is(rel2.admin_comment, "set by admin", "an admin_comment given in the same update is left alone")
	local sitec = { job_id = 21, admin_comment = "note " .. held_comment }
	local rel3 = { priority = S.INFINITE }
	slurm_job_modify(rel3, sitec, {}, 0)
	ok(rel3.admin_comment and rel3.admin_comment:find("^note stagehand:hold=released stagehand:v1:{"),
		"release keeps site text", rel3.admin_comment)
	is(slurm_job_modify({ priority = S.NO_VAL, time_limit = 10 }, rec, {}, 1000), S.SUCCESS,
		"user change without priority allowed")
	is(slurm_job_modify({ priority = 0 }, rec, {}, 1000), S.SUCCESS, "user hold (priority 0) allowed")
	table.insert(stagehand.site.trusted_uids, 64030)
	is(slurm_job_modify({ priority = S.INFINITE }, rec, {}, 64030), S.SUCCESS, "trusted uid (SlurmUser) allowed")
	table.remove(stagehand.site.trusted_uids)
	is(slurm_job_modify({ priority = S.INFINITE }, { job_id = 19 }, {}, 1000), S.SUCCESS,
		"job without a record: allowed")
	-- stagehandd's status text sits between site text and the hold marker
	local withst = "note stagehand:status=staging 1/2 files (50%) stagehand:hold=pending " ..
		PREFIX .. '{"version":1,"actions":[]}'
	local site4, hold4, plan4, st4 = stagehand.split_record(withst)
	is(site4, "note", "status: site text split off")
	is(hold4, "pending", "status: hold marker still read")
	is(plan4, '{"version":1,"actions":[]}', "status: plan still read")
	is(st4, "staging 1/2 files (50%)", "status: text read")
	local rel4 = { priority = S.INFINITE }
	slurm_job_modify(rel4, { job_id = 22, admin_comment = withst }, {}, 0)
	is(rel4.admin_comment, "note stagehand:status=staging 1/2 files (50%) stagehand:hold=released " ..
		PREFIX .. '{"version":1,"actions":[]}', "release keeps site text and status")
	-- a user path that spells a pending record must not make a job look held
	stub.reset()
	local d = desc(HEAD .. '#DATA exempt="stagehand:hold=pending stagehand:v1:x"\n')
	slurm_job_submit(d, {}, 1000)
	is(stagehand.record_state(d.admin_comment), "none", "user text cannot forge the record state")
	is(slurm_job_modify({ priority = S.INFINITE }, { job_id = 20, admin_comment = d.admin_comment }, {}, 1000),
		S.SUCCESS, "forged text in a path does not block modify")
end

-- tokens of line-level diagnostics are shown safely ------------------------
do
	local long = "#DATA archive=" .. string.rep("y", 5000)
	local r = stagehand.parse("#!/bin/bash\nsrun x\n" .. long .. "\n")
	is(r.warnings[1] and r.warnings[1].token, long:sub(1, 64) .. "...", "after_command token of a long line is cut")
	r = stagehand.parse("#!/bin/bash\n#data archive=\255\t\n#DATA exempt=\226\128\148\n")
	is(r.warnings[1] and r.warnings[1].token, "#data archive=??", "invalid UTF-8 in a warning token shown as ?")
	is(r.errors[1], nil, "valid UTF-8 in a value is accepted")
	r = stagehand.parse("#!/bin/bash\n#DATA archive=x when=" .. string.rep("z", 5000) .. "\n", { max_line = 10000 })
	is(r.errors[1] and r.errors[1].code, "bad_value", "a long when= value is bad_value, not path_too_long")
end

-- garbage never raises --------------------------------------------------
do
	local function never_raises(name, f)
		local okc, res = pcall(f)
		ok(okc and type(res) == "number", name .. " returns a code without raising", res)
	end
	never_raises("submit(nil)", function() return slurm_job_submit(nil, nil, nil) end)
	never_raises("modify(nil)", function() return slurm_job_modify(nil, nil, nil, nil) end)
	never_raises("modify with nil job_rec", function()
		return slurm_job_modify({ priority = S.INFINITE }, nil, nil, 1000)
	end)
	local huge = HEAD .. "#DATA archive=" .. string.rep("x", 100000) .. "\n" .. string.rep("echo hello\n", 200000)
	never_raises("huge script", function() return slurm_job_submit(desc(huge), {}, 1000) end)
	local bin = {}
	math.randomseed(7)
	for i = 1, 4000 do bin[i] = string.char(math.random(0, 255)) end
	local binary = "#DATA " .. table.concat(bin) .. "\n#DATA archive=\0\255\n" .. table.concat(bin)
	never_raises("binary script", function() return slurm_job_submit(desc(binary), {}, 1000) end)
	never_raises("percent signs in messages", function()
		return slurm_job_submit(desc(HEAD .. "#DATA %s%d%n=%s\n#DATA archive=%q%\n"), {}, 1000)
	end)
	-- an internal failure: fail closed for #DATA scripts ...
	stub.reset()
	local broken = setmetatable({}, {
		__index = function(_, k) if k == "script" then return HEAD .. "#DATA exempt=tmp\n" end end,
		__newindex = function() error("field not writable") end,
	})
	is(slurm_job_submit(broken, {}, 1000), 2090, "internal error with #DATA: rejected (ESLURM_INTERNAL)")
	ok(stub.errors[1] and stub.errors[1]:find("^stagehand: internal error"), "internal error logged",
		stub.errors[1])
	ok(user_text():find("tell your administrator", 1, true), "user asked to contact the admin", user_text())
	-- ... and open for the others
	local unreadable = setmetatable({}, { __index = function() error("boom") end })
	is(slurm_job_submit(unreadable, {}, 1000), S.SUCCESS, "unreadable job_desc: accepted (fail open)")
	-- random mutations of a valid script
	local base = HEAD .. '#DATA stage_in=https://x.org/a to="in put"\n#DATA archive=out when=success keep=no\n'
		.. "#DATA stage_out=logs to=/p/%j\n#DATA exempt=./tmp/\nsrun ./a\n"
	stub.reset()
	local raised = 0
	local pieces = { "\0", "\"", "\\", "=", " ", "\t", "#", "%", "..", "/", "://", "\r", "\n", "\255", "\226\128", "~" }
	for _ = 1, 3000 do
		local s = base
		for _ = 1, math.random(1, 6) do
			local p = math.random(1, #s)
			s = s:sub(1, p - 1) .. pieces[math.random(#pieces)] .. s:sub(p + math.random(0, 2))
		end
		local okp, res = pcall(stagehand.parse, s)
		if not okp or type(res) ~= "table" then raised = raised + 1 end
		local okc, rc = pcall(slurm_job_submit, desc(s), {}, 1000)
		if not okc or type(rc) ~= "number" then raised = raised + 1 end
	end
	is(raised, 0, "3000 mutated scripts: parser and submit never raise")
	is(#stub.errors, 0, "mutated scripts: no internal errors logged")
end

-- long leading blocks: directives and near-misses at every offset -------
-- The parser skips runs of '#' lines without "data" in a lower-cased
-- window of the script; put directives and near-misses across window
-- boundaries and check each is found on its own line, against a per-line
-- reference.
do
	math.randomseed(7)
	local fillers = { "#SBATCH --comment=abcdefghijklmnopqrstuvwxyz0123456789", "# plain note",
		"#!", "#", "#SBATCH -n 1", "#da", "#ta", "# DAT A" }
	local mism = 0
	local first
	for trial = 1, 200 do
		local lines, want_act, want_warn = {}, {}, {}
		local nlines = math.random(100, 600)
		for i = 1, nlines do
			local r = math.random()
			local l
			if r < 0.01 then
				l = "#DATA exempt=d" .. i .. "/"
				want_act[#want_act + 1] = i .. ":exempt:d" .. i
			elseif r < 0.02 then
				l = "# Data exempt=n" .. i .. "/"
				want_warn[#want_warn + 1] = i .. ":case_mismatch"
			elseif r < 0.03 then
				l = "#xDATAx " .. string.rep("y", math.random(0, 40))
			else
				l = fillers[math.random(#fillers)] .. string.rep("z", math.random(0, 90))
			end
			lines[i] = l
		end
		local res = stagehand.parse(table.concat(lines, "\n") .. "\necho done\n")
		local got_act, got_warn = {}, {}
		for _, a in ipairs(res.actions) do got_act[#got_act + 1] = a.line .. ":" .. a.action .. ":" .. a.path:gsub("/$", "") end
		for _, w in ipairs(res.warnings) do got_warn[#got_warn + 1] = w.line .. ":" .. w.code end
		local ga, wa = table.concat(got_act, " "), table.concat(want_act, " ")
		local gw, ww = table.concat(got_warn, " "), table.concat(want_warn, " ")
		if ga ~= wa or gw ~= ww or #res.errors > 0 then
			mism = mism + 1
			first = first or string.format("trial %d: actions %s / %s; warnings %s / %s", trial, ga, wa, gw, ww)
		end
	end
	ok(mism == 0, "200 long leading blocks: every directive and near-miss found on its line", first)
end

-- what the user is told is bounded (issue 47) --------------------------
do
	-- 30 errors, each message carrying a 1,000-byte key: 20 are shown, each
	-- cut at 512 bytes, the text capped near 8 KB, the count kept whole
	stub.reset()
	local lines = { HEAD }
	for i = 1, 30 do lines[#lines + 1] = "#DATA " .. string.rep("k", 1000) .. i .. "=x\n" end
	local rc = slurm_job_submit(desc(table.concat(lines) .. "srun ./a\n"), {}, 1000)
	is(rc, S.ERROR, "30 bad lines: rejected")
	local total, longest = 0, 0
	for _, l in ipairs(stub.user) do
		total = total + #l + 1
		if #l > longest then longest = #l end
	end
	ok(longest <= 512, "each log_user line is at most 512 bytes", longest)
	ok(total <= 8192 + 400, "all log_user text together stays near 8 KB", total)
	ok(#stub.user <= 24, "a few log_user calls, not one per error", #stub.user)
	local u = user_text()
	ok(u:find("more lines? left out %(this message is capped at 8192 bytes%)"),
		"the lines the cap left out are counted in one line", u)
	ok(stub.user[#stub.user] == "stagehand: job not submitted: 30 #DATA errors",
		"the closing line counts every error, those not shown included", stub.user[#stub.user])

	-- 700 #DATA lines after a command: 20 warnings and one "and N more"
	stub.reset()
	local body = HEAD .. "#DATA archive=out\nsrun ./a\n" .. string.rep("#DATA exempt=x\n", 700)
	rc = slurm_job_submit(desc(body), {}, 1000)
	is(rc, S.SUCCESS, "700 late #DATA lines: accepted")
	is(#stub.user, 21, "20 warnings and one more line")
	ok(stub.user[21] == "stagehand: line 25: warning: and 680 more warnings (from line 25 on) not shown: fix the ones above, then run 'stagehand check' on the script again",
		"the last line says how many more and from where", stub.user[21])
end

T.done()
