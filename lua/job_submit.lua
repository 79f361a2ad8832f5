--[[
job_submit.lua - stagehand's submit hook for Slurm's job_submit/lua plugin
(JobSubmitPlugins=lua), as shipped: a thin wrapper around stagehand.lua.

Copy (or link) this file next to slurm.conf. It loads stagehand.lua and
the modules that loads (stagehand_dsl.lua, stagehand_bb.lua,
stagehand_conf.lua) from beside itself when all are there, else from the
directory the package installed them in (docs/install.md). A
site with a job_submit.lua of its own keeps its script instead and adds the
load line and the two calls below to it (docs/admin-submit.md).

The global `stagehand` is the module, for tools and tests; slurmctld only
calls the two slurm_job_* functions.
]]
-- The stagehand module (stagehand.lua and the modules it loads from its own
-- directory): beside this script when all of them are there, else where
-- "make install" (or the stagehand-slurm package) put them: lua/Makefile.am
-- writes that directory into the installed copy (a source tree keeps the
-- placeholder, and looks beside the script only). burst_buffer.lua has the same
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
	error("stagehand: cannot find the stagehand module for " .. here .. "job_submit.lua: tried " ..
		table.concat(tried, " and ") .. "; install the stagehand-slurm package (or make install), " ..
		"or put stagehand.lua, stagehand_dsl.lua, stagehand_bb.lua and stagehand_conf.lua beside it", 0)
end
stagehand = dofile(_stagehand_dir() .. "stagehand.lua")

function slurm_job_submit(job_desc, part_list, submit_uid)
	return stagehand.job_submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return stagehand.job_modify(job_desc, job_rec, part_list, modify_uid)
end
