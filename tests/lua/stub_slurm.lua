--[[
stub_slurm.lua - the parts of the `slurm` table that Slurm 22.05's
job_submit/lua plugin gives a script, for tests. Messages are recorded in
stub.user, stub.info, stub.errors, stub.debug instead of being logged;
stub.reset() clears them. The return codes are the values of 22.05's
slurm_errno.h. Like the real table, it has only the ESLURM_* names 22.05
registers (not ESLURM_JOB_HELD or ESLURM_INTERNAL).
]]
local stub = { user = {}, info = {}, errors = {}, debug = {} }

local function recorder(list)
	return function(fmt, ...)
		-- the real functions run string.format(fmt, ...): a stray % in a
		-- message passed as fmt would raise here as it would in slurmctld
		list[#list + 1] = string.format(fmt, ...)
	end
end

function stub.reset()
	for _, k in ipairs({ "user", "info", "errors", "debug" }) do
		local t = stub[k]
		for i = #t, 1, -1 do t[i] = nil end
	end
end

stub.slurm = {
	SUCCESS = 0,
	ERROR = -1,
	FAILURE = -1,
	ESLURM_ACCESS_DENIED = 2002,
	ESLURM_ACCOUNTING_POLICY = 2050,
	ESLURM_INVALID_ACCOUNT = 2045,
	ESLURM_INVALID_LICENSES = 2048,
	ESLURM_INVALID_NODE_COUNT = 2006,
	ESLURM_INVALID_TIME_LIMIT = 2051,
	ESLURM_JOB_MISSING_SIZE_SPECIFICATION = 2008,
	ESLURM_MISSING_TIME_LIMIT = 8000,
	NO_VAL = 4294967294,
	INFINITE = 4294967295,
	log_user = recorder(stub.user),
	log_info = recorder(stub.info),
	log_verbose = recorder(stub.debug),
	log_debug = recorder(stub.debug),
	log_error = recorder(stub.errors),
}

return stub
