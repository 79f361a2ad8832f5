--[[
job_submit.lua - stagehand's submit hook for Slurm's job_submit/lua plugin
(JobSubmitPlugins=lua), as shipped: a thin wrapper around stagehand.lua.

Put this file, stagehand.lua, stagehand_dsl.lua, stagehand_bb.lua and
stagehand_conf.lua next to slurm.conf. A
site with a job_submit.lua of its own keeps its script instead and adds the
load line and the two calls below to it (docs/admin-submit.md).

The global `stagehand` is the module, for tools and tests; slurmctld only
calls the two slurm_job_* functions.
]]
local here = (debug.getinfo(1, "S").source or ""):match("^@(.*/)") or "./"
stagehand = dofile(here .. "stagehand.lua")

function slurm_job_submit(job_desc, part_list, submit_uid)
	return stagehand.job_submit(job_desc, part_list, submit_uid)
end

function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
	return stagehand.job_modify(job_desc, job_rec, part_list, modify_uid)
end
