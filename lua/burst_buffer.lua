--[[
burst_buffer.lua - stagehand's hooks for Slurm's burst_buffer/lua plugin
(BurstBufferType=burst_buffer/lua, Directive=DATA in burst_buffer.conf,
SubmitMode=bb in stagehand.conf), as shipped: a thin wrapper around
stagehand.lua. Copy (or link) it next to slurm.conf; it finds
stagehand.lua and its modules as job_submit.lua does (beside itself, else
where the package installed them: docs/install.md); keep JobSubmitPlugins=lua with job_submit.lua too, which records
each job's plan.

One script for every Slurm release from 22.05 on. Which hook runs where,
what each release passes and what changed in 24.05 (the required test_data_in
and test_data_out hooks, polled every PollInterval):
docs/burst-buffer-slurm.md. Since 23.02 most hooks also get uid, gid and a
read-only job_info table after the arguments below; stagehand does not need
them (the daemon takes the job's identity from slurmctld), so they are
left in "...".
]]
-- The stagehand module (stagehand.lua and the modules it loads from its own
-- directory): beside this script when all of them are there, else where
-- "make install" (or the stagehand-slurm package) put them: lua/Makefile.am
-- writes that directory into the installed copy (a source tree keeps the
-- placeholder, and looks beside the script only). job_submit.lua has the same
-- lines: they find the module, so they cannot live in it.
local here = (debug.getinfo(1, "S").source or ""):match("^@(.*/)") or "./"
local function _stagehand_dir()
	local tried = {}
	for _, d in ipairs({ here, "@pkgdatadir@/" }) do
		if not d:find("@pkgdata", 1, true) then
			local missing
			for _, m in ipairs({ "stagehand.lua", "stagehand_dsl.lua", "stagehand_bb.lua", "stagehand_conf.lua" }) do
				local f, e = io.open(d .. m, "r")
				if f then f:close() elseif not missing then missing = e end
			end
			if not missing then return d end
			tried[#tried + 1] = d .. " (" .. missing .. ")"
		end
	end
	error("stagehand: cannot find the stagehand module for " .. here .. "burst_buffer.lua: tried " ..
		table.concat(tried, " and ") .. "; install the stagehand-slurm package (or make install), " ..
		"or put stagehand.lua, stagehand_dsl.lua, stagehand_bb.lua and stagehand_conf.lua beside it", 0)
end
local stagehand = dofile(_stagehand_dir() .. "stagehand.lua")
local function ok() return slurm.SUCCESS end

-- In slurmctld, locks held: read the script, answer at once.
function slurm_bb_job_process(job_script, ...)
	return stagehand.bb_job_process(job_script)
end

-- In slurmctld, at start and every 30 s: each scratch root is a pool; its
-- free space comes from the state stagehandd publishes (one small file).
function slurm_bb_pools()
	return stagehand.bb_pools()
end

function slurm_bb_paths(job_id, job_script, path_file, ...)
	return ok()
end

function slurm_bb_real_size(job_id, ...)
	return ok()
end

function slurm_bb_get_status(...)
	return slurm.SUCCESS, "stagehand"
end

-- In slurmscriptd, asynchronously: hand the work to stagehandd.
function slurm_bb_setup(job_id, uid, gid, pool, bb_size, job_script, ...)
	return stagehand.bb_setup(job_id, pool, bb_size)
end

-- Up to 23.11: waits for the verified stage-in. 24.05 and later: checks
-- the daemon has it and returns; slurm_bb_test_data_in is polled.
function slurm_bb_data_in(job_id, job_script, ...)
	return stagehand.bb_data_in(job_id)
end

-- 24.05 and later, every PollInterval: BUSY until the inputs are verified.
function slurm_bb_test_data_in(job_id, job_script, ...)
	return stagehand.bb_test_data_in(job_id)
end

function slurm_bb_pre_run(job_id, job_script, ...)
	return ok()
end

function slurm_bb_post_run(job_id, job_script, ...)
	return ok()
end

-- As data_in, for the archives and stage-outs after the job.
function slurm_bb_data_out(job_id, job_script, ...)
	return stagehand.bb_data_out(job_id)
end

function slurm_bb_test_data_out(job_id, job_script, ...)
	return stagehand.bb_test_data_out(job_id)
end

function slurm_bb_job_teardown(job_id, job_script, hurry, ...)
	return stagehand.bb_teardown(job_id, job_script, hurry)
end
