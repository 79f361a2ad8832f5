--[[
probe.lua - a burst_buffer.lua that records every call Slurm makes to it.

Used by tests/bb/verify-slurm-bb to check, on the Slurm this machine runs,
what the burst_buffer/lua plugin really does: which hooks it calls, in what
order, with which arguments, in which process, and how the job looks
meanwhile. Every call appends one line "EPOCH HOOK ARG | ARG ..." to
@CTL@/calls.log and logs through slurm.log_info (so slurmctld's log shows
whether it ran in slurmctld or in slurmscriptd). Control files in @CTL@:
fail_data_in / fail_data_out make that hook fail with a message.
]]
local CTL = "@CTL@"

local function show(v)
  if type(v) ~= "table" then return tostring(v) end
  local t = {}
  for k, x in pairs(v) do t[#t + 1] = tostring(k) .. "=" .. tostring(x) end
  table.sort(t)
  return "{" .. table.concat(t, ",") .. "}"
end

local function rec(name, ...)
  local parts = {}
  for i = 1, select("#", ...) do parts[#parts + 1] = show(select(i, ...)) end
  local line = string.format("%d %s %s", os.time(), name, table.concat(parts, " | "))
  local f = io.open(CTL .. "/calls.log", "a")
  if f then f:write(line, "\n"); f:close() end
  slurm.log_info("bbprobe: %s", line)
end

local function flag(name)
  local f = io.open(CTL .. "/" .. name, "r")
  if f then f:close(); return true end
  return false
end

function slurm_bb_job_process(...)
  rec("job_process", ...)
  return slurm.SUCCESS
end

function slurm_bb_pools()
  rec("pools")
  return slurm.SUCCESS, '{"pools":[{"id":"scratch","quantity":1000,"granularity":1}]}'
end

function slurm_bb_setup(...)
  rec("setup", ...)
  return slurm.SUCCESS
end

function slurm_bb_data_in(job_id, ...)
  rec("data_in", job_id, ...)
  os.execute("sleep 2")
  rec("data_in_done", job_id)
  if flag("fail_data_in") then
    return slurm.ERROR, "bbprobe: stage_in failed on purpose"
  end
  return slurm.SUCCESS
end

function slurm_bb_real_size(...)
  rec("real_size", ...)
  return slurm.SUCCESS
end

function slurm_bb_paths(...)
  rec("paths", ...)
  return slurm.SUCCESS
end

function slurm_bb_pre_run(...)
  rec("pre_run", ...)
  return slurm.SUCCESS
end

function slurm_bb_post_run(...)
  rec("post_run", ...)
  return slurm.SUCCESS
end

function slurm_bb_data_out(job_id, ...)
  rec("data_out", job_id, ...)
  os.execute("sleep 2")
  rec("data_out_done", job_id)
  if flag("fail_data_out") then
    return slurm.ERROR, "bbprobe: archive failed on purpose"
  end
  return slurm.SUCCESS
end

function slurm_bb_job_teardown(...)
  rec("teardown", ...)
  return slurm.SUCCESS
end

function slurm_bb_get_status(...)
  rec("get_status", ...)
  return slurm.SUCCESS, "bbprobe"
end
