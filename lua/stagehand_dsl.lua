--[[
stagehand_dsl.lua - the #DATA grammar (docs/directives.md) in Lua: the
parser and the plan's JSON form. Loaded by stagehand.lua, which passes its
settings table (SITE: allowed_schemes, stage_in_roots, max_*); returns
{ parse = ..., plan_json = ... }. Held to the C parser by tests/vectors/.

Must never: raise a Lua error on any input (the caller still guards with
pcall), read files, run programs or keep state between calls beyond the
compiled settings. Lua 5.1 through 5.4.
]]
local SITE = ...

local find, sub, byte, lower, format, concat =
	string.find, string.sub, string.byte, string.lower, string.format, table.concat
local tostring, type, pairs, ipairs, pcall = tostring, type, pairs, ipairs, pcall


local ACTIONS = { stage_in = true, archive = true, exempt = true, stage_out = true }
local OPTIONS = { to = true, when = true, keep = true }
local KEY_ORDER = { "stage_in", "archive", "exempt", "stage_out", "to", "when", "keep",
	"capacity", "pool", "after" }
-- capacity=SIZE [pool=NAME] is the job's size in its burst-buffer pool, a
-- property of the script, not an action on a path (_capacity_line); so is
-- after=J[:J...], the jobs whose archives this one waits for (_after_line).
local KNOWN = { capacity = true, pool = true, after = true }
for k in pairs(ACTIONS) do KNOWN[k] = true end
for k in pairs(OPTIONS) do KNOWN[k] = true end
-- Largest capacity in bytes: 2^53, which a Lua number holds exactly.
local MAX_CAPACITY = 9007199254740992
local UNIT = { K = 1024, M = 1024 ^ 2, G = 1024 ^ 3, T = 1024 ^ 4 }
local ALLOWED_OPTS = {
	stage_in = { to = true },
	archive = { to = true, when = true, keep = true },
	exempt = {},
	stage_out = { to = true },
}
local OPTS_TEXT = {
	stage_in = "its options: to",
	archive = "its options: to, when, keep",
	exempt = "it takes no options",
	stage_out = "its options: to",
}
local EXAMPLES = {
	stage_in = "stage_in=/archive/proj/input.dat", archive = "archive=results/",
	exempt = "exempt=tmp/", stage_out = "stage_out=logs/", to = "to=/project/lab/out",
	when = "when=success", keep = "keep=no", pool = "pool=NAME",
}
local PATTERN_OK = { j = true, u = true, x = true, A = true, a = true, ["%"] = true }

-- What one parse may cost and say, whatever the script holds (as in
-- common/dsl.h): at most SHOWN_DIAGS warnings and as many errors are kept,
-- then one "and N more" line each; only the first SCAN_LINES lines are read
-- line by line, past them only one search for a line starting with '#DATA'.
-- job_submit runs under slurmctld's job write lock: a 4 MB script of any
-- shape must parse in milliseconds (tests/bench/submit-hostile).
local SHOWN_DIAGS = 20
local SCAN_LINES = 10000
-- The #DATA lines a script may hold, in bytes all together: what is checked
-- byte by byte in Lua stays this small whatever MaxDirectives and
-- MaxDirectiveLine allow (a plan this big is past MaxPlanBytes anyway).
local MAX_DIRECTIVE_BYTES = 65536

-- Normalise a path: collapse '/', drop '.', drop trailing '/'.
-- Returns the normal form, or nil and "path_traversal" / "path_empty".
-- The traversal check wins over emptiness wherever it is in the path.
local function _normalise(p)
	local abs = byte(p, 1) == 47
	local parts, n = {}, 0
	for comp in p:gmatch("[^/]+") do
		if comp == ".." then return nil, "path_traversal" end
		if comp ~= "." then
			n = n + 1
			parts[n] = comp
		end
	end
	if n == 0 then return nil, "path_empty" end
	if abs then return "/" .. concat(parts, "/") end
	return concat(parts, "/")
end

-- Compile a config table (missing fields take SITE's values) into the form
-- the parser uses. Done once per config table.
local function _compile(c)
	c = c or {}
	local function pick(k)
		if c[k] ~= nil then return c[k] end
		return SITE[k]
	end
	local cc = {
		max_directives = tonumber(pick("max_directives")) or 64,
		max_line = tonumber(pick("max_line")) or 4096,
		max_path = tonumber(pick("max_path")) or 4095,
		schemes = {}, scheme_list = {}, roots = {},
	}
	for _, s in ipairs(pick("allowed_schemes") or {}) do
		s = lower(tostring(s))
		cc.schemes[s] = true
		cc.scheme_list[#cc.scheme_list + 1] = s
	end
	local shown = {}
	for _, r in ipairs(pick("stage_in_roots") or {}) do
		r = tostring(r)
		shown[#shown + 1] = r
		-- "" stands for "/" (everything is below it)
		cc.roots[#cc.roots + 1] = _normalise(r) or ""
		if cc.roots[#cc.roots] == "/" then cc.roots[#cc.roots] = "" end
	end
	cc.roots_text = concat(shown, ", ")
	cc.schemes_text = concat(cc.scheme_list, ", ")
	return cc
end

local CFG = _compile(SITE)
local compiled_cache = setmetatable({}, { __mode = "k" })

-- Optimal string alignment distance (Levenshtein plus transposition of
-- neighbours). Keys are short; long input is not worth comparing.
local function _distance(a, b)
	local la, lb = #a, #b
	if la > 40 then return 99 end
	local d0, d1, d2 = nil, {}, {}
	for j = 0, lb do d1[j] = j end
	for i = 1, la do
		d2[0] = i
		local ca = byte(a, i)
		for j = 1, lb do
			local cb = byte(b, j)
			local cost = (ca == cb) and 0 or 1
			local v = d1[j - 1] + cost
			if d1[j] + 1 < v then v = d1[j] + 1 end
			if d2[j - 1] + 1 < v then v = d2[j - 1] + 1 end
			if d0 and i > 1 and j > 1 and ca == byte(b, j - 1) and byte(a, i - 1) == cb
				and d0[j - 2] + 1 < v then
				v = d0[j - 2] + 1
			end
			d2[j] = v
		end
		d0, d1, d2 = d1, d2, (d0 or {})
	end
	return d1[lb]
end

local function _suggest(key)
	key = lower(key)
	local best, bestd = nil, 3
	for _, k in ipairs(KEY_ORDER) do
		local d = _distance(key, k)
		if d < bestd then best, bestd = k, d end
	end
	return best
end

-- Strict UTF-8 check (no overlongs, no surrogates, <= U+10FFFF).
local function _valid_utf8(s)
	if not find(s, "[\128-\255]") then return true end
	local i, n = 1, #s
	while i <= n do
		local c = byte(s, i)
		if c < 0x80 then
			i = i + 1
		else
			local need, lo, hi
			if c >= 0xC2 and c <= 0xDF then need, lo, hi = 1, 0x80, 0xBF
			elseif c == 0xE0 then need, lo, hi = 2, 0xA0, 0xBF
			elseif c == 0xED then need, lo, hi = 2, 0x80, 0x9F
			elseif c >= 0xE1 and c <= 0xEF then need, lo, hi = 2, 0x80, 0xBF
			elseif c == 0xF0 then need, lo, hi = 3, 0x90, 0xBF
			elseif c >= 0xF1 and c <= 0xF3 then need, lo, hi = 3, 0x80, 0xBF
			elseif c == 0xF4 then need, lo, hi = 3, 0x80, 0x8F
			else return false end
			if i + need > n then return false end
			local c2 = byte(s, i + 1)
			if c2 < lo or c2 > hi then return false end
			for k = 2, need do
				local ck = byte(s, i + k)
				if ck < 0x80 or ck > 0xBF then return false end
			end
			i = i + need + 1
		end
	end
	return true
end

local function _check_patterns(v)
	local i = find(v, "%", 1, true)
	while i do
		local nc = sub(v, i + 1, i + 1)
		if not PATTERN_OK[nc] then
			if nc == "" then
				return "a '%' at the end of a path is not a pattern: write '%%' for a literal %"
			end
			return format("unknown pattern '%%%s' (known: %%j %%u %%x %%A %%a %%%%)", nc)
		end
		i = find(v, "%", i + 2, true)
	end
	return nil
end

local function _under_roots(cfg, p)
	if #cfg.roots == 0 then return true end
	for _, r in ipairs(cfg.roots) do
		if r == "" or p == r or sub(p, 1, #r + 1) == r .. "/" then return true end
	end
	return false
end

local function _outside_roots(cfg, p)
	return format("'%s' is outside the allowed stage-in roots (%s): ask your administrator which roots are allowed",
		p, cfg.roots_text)
end

local function _empty_msg(v)
	if byte(v, 1) == 47 then
		return format("'%s' is the root directory: name a subdirectory", v)
	end
	return format("'%s' names the working directory itself: name a subdirectory", v)
end

-- Check one path or URL value (control characters and length are checked
-- by the caller). kind: "src" (stage_in source), "dir" (a directory: the
-- values of archive/exempt/stage_out, stage_in's to=), "dest" (to= of
-- archive/stage_out: path or URL). Returns the kept value, or nil, code, msg.
local function _check_value(cfg, v, kind, what)
	local sep = find(v, "://", 1, true)
	if sep then
		if kind == "dir" then
			return nil, "url_not_allowed",
				format("%s needs a directory (relative to the job's working directory, or absolute), not a URL: '%s'", what, v)
		end
		local scheme = sub(v, 1, sep - 1)
		local ls = lower(scheme)
		if not find(scheme, "^[A-Za-z][A-Za-z0-9+.-]*$") or not cfg.schemes[ls] then
			return nil, "url_not_allowed",
				format("URL scheme '%s' is not allowed here (allowed: %s)", scheme,
					cfg.schemes_text ~= "" and cfg.schemes_text or "none")
		end
		if sep + 3 > #v then
			return nil, "path_empty", format("'%s' names nothing after '://': write the full URL", v)
		end
		if ls == "file" then
			local fp = sub(v, sep + 3)
			if byte(fp, 1) ~= 47 then
				return nil, "path_not_absolute",
					format("a file:// URL needs an absolute path, e.g. file:///data/x, not '%s'", v)
			end
			local np, code = _normalise(fp)
			if not np then
				if code == "path_traversal" then
					return nil, code, format("'..' is not allowed in paths: '%s'", v)
				end
				return nil, code, format("'%s' names the root directory: name a file or directory below it", v)
			end
			if kind == "src" and not _under_roots(cfg, np) then
				return nil, "path_not_allowed", _outside_roots(cfg, np)
			end
		end
		return ls .. sub(v, sep)
	end
	local c1 = byte(v, 1)
	-- the first character of the normalised path counts: './~x' is '~x'
	local fc, i, n = c1, 1, #v
	if c1 ~= 47 then
		while i <= n do
			local b = byte(v, i)
			if b == 47 or (b == 46 and (i == n or byte(v, i + 1) == 47)) then
				i = i + 1
			else
				break
			end
		end
		fc = byte(v, i)
	end
	if fc == 126 or fc == 36 then
		return nil, "bad_path",
			format("no shell expansion in #DATA: write the full path instead of '%s'", v)
	end
	if kind == "src" and c1 ~= 47 then
		return nil, "path_not_absolute",
			format("stage_in source must be an absolute path or a URL, not '%s'", v)
	end
	local np, code = _normalise(v)
	if code == "path_traversal" then
		return nil, code, format("'..' is not allowed in paths: '%s'", v)
	end
	local perr = _check_patterns(v)
	if perr then return nil, "bad_pattern", perr end
	if not np then return nil, code, _empty_msg(v) end
	if kind == "src" and not _under_roots(cfg, np) then
		return nil, "path_not_allowed", _outside_roots(cfg, np)
	end
	return np
end

-- Read the tokens after "#DATA". Returns a list of
-- { key, value, raw } or nil, code, token, message for the first bad token.
local function _tokenize(line)
	local len = #line
	local toks, nt, i = {}, 0, 6
	while true do
		i = find(line, "[^ \t]", i)
		if not i or byte(line, i) == 35 then break end
		local ts = i
		local stop = find(line, '[= \t"]', i)
		local sb = stop and byte(line, stop)
		if sb ~= 61 or stop == ts then
			local te = (find(line, "[ \t]", ts) or len + 1) - 1
			local tok = sub(line, ts, te)
			if sb == 34 then
				return nil, "bad_syntax", tok,
					format("a quote may only open a value, right after '=': '%s'", tok)
			end
			if sb == 61 then
				return nil, "bad_syntax", tok, format("expected key=value, got '%s' (the key is missing)", tok)
			end
			return nil, "bad_syntax", tok, format("expected key=value, got '%s'", tok)
		end
		local key = sub(line, ts, stop - 1)
		local value, te
		if byte(line, stop + 1) == 34 then
			-- quoted value: \" and \\ are escapes, other backslashes stay
			local buf, nb, j = {}, 0, stop + 2
			while true do
				local q = find(line, '[\\"]', j)
				if not q then
					local tok = sub(line, ts)
					return nil, "unterminated_quote", tok,
						format("unterminated quote in '%s': close it with \"", tok)
				end
				nb = nb + 1
				buf[nb] = sub(line, j, q - 1)
				if byte(line, q) == 92 then
					local nc = byte(line, q + 1)
					if nc == 34 or nc == 92 then
						nb = nb + 1
						buf[nb] = sub(line, q + 1, q + 1)
						j = q + 2
					else
						nb = nb + 1
						buf[nb] = "\\"
						j = q + 1
					end
				else
					te = q
					break
				end
			end
			value = concat(buf)
			local after = byte(line, te + 1)
			if after and after ~= 32 and after ~= 9 then
				local e2 = (find(line, "[ \t]", te + 1) or len + 1) - 1
				local tok = sub(line, ts, e2)
				return nil, "bad_syntax", tok,
					format("a closing quote must be followed by a space or the end of the line: '%s'", tok)
			end
		else
			te = (find(line, "[ \t]", stop + 1) or len + 1) - 1
			value = sub(line, stop + 1, te)
			if find(value, '"', 1, true) then
				local tok = sub(line, ts, te)
				return nil, "bad_syntax", tok,
					format("a quote may only open a value, right after '=': '%s'", tok)
			end
		end
		nt = nt + 1
		toks[nt] = { key = key, value = value, raw = sub(line, ts, te) }
		i = te + 1
	end
	return toks
end

-- '#DATA capacity=SIZE [pool=NAME]': SIZE is 1-15 digits and an optional
-- K, M, G or T (powers of 1024, as Slurm's burst_buffer reads them), at most
-- MAX_CAPACITY bytes; NAME is what Slurm reads as a pool name (it ends at a
-- space and is never unquoted). Returns { capacity = bytes, pool = NAME or
-- nil, token }, or nil, code, token, message.
local function _capacity_line(toks)
	local raw, v = toks[1].raw, toks[1].value
	if v == "" then
		return nil, "missing_value", raw, "'capacity' needs a value, e.g. capacity=20G"
	end
	-- Slurm reads these values unquoted: a quoted one would not be the size
	-- or the pool Slurm accounts.
	for _, tk in ipairs(toks) do
		if tk.raw ~= tk.key .. "=" .. tk.value then
			return nil, "bad_value", tk.raw,
				format("write '%s' without quotes: Slurm reads capacity and pool as written", tk.key)
		end
	end
	local digits, unit = v:match("^(%d+)([KMGT]?)$")
	local n = digits and #digits <= 15 and tonumber(digits)
	local mult = UNIT[unit] or 1
	if not n or n == 0 or n > MAX_CAPACITY / mult then
		return nil, "bad_value", raw,
			format("capacity must be a size in bytes with an optional K, M, G or T (powers of 1024), e.g. capacity=20G, not '%s'", v)
	end
	local d = { capacity = n * mult, token = raw }
	for t = 2, #toks do
		local tk = toks[t]
		if tk.key ~= "pool" then
			return nil, KNOWN[tk.key] and "option_not_allowed" or "unknown_key", tk.raw,
				format("'%s' is not an option of capacity (its options: pool)", tk.key)
		end
		if d.pool then
			return nil, "duplicate_key", tk.raw, "'pool' given twice on this line"
		end
		if #tk.value == 0 or #tk.value > 255 or tk.value:find("[^A-Za-z0-9/._-]") then
			return nil, "bad_value", tk.raw,
				format("pool must be a pool name (letters, digits, / . _ -), not '%s'", tk.value)
		end
		d.pool = tk.value
	end
	return d
end

-- Jobs one after= line may name, and the largest job id or task index
-- (below Slurm's NO_VAL); as in common/dsl.h.
local MAX_AFTER = 64
local MAX_JOB_ID = 4294967293

-- One "J" or "J_K" (no sign, no leading zero, J at least 1): the job id and
-- the task index (-1: none), or nil.
local function _after_job(s)
	local j, t = s:match("^(%d+)_(%d+)$")
	if not j then j = s:match("^(%d+)$") end
	if not j then return nil end
	local function num(d)
		if #d > 10 or (#d > 1 and byte(d, 1) == 48) then return nil end
		local n = tonumber(d)
		if n > MAX_JOB_ID then return nil end
		return n
	end
	local jn, tn = num(j), -1
	if t then tn = num(t) end
	if not jn or jn == 0 or not tn then return nil end
	return jn, tn
end

-- '#DATA after=J[:J...]': the jobs whose after-job transfers must be
-- verified before this job may start. Returns { after = { "J", "J_K", ... },
-- token }, or nil, code, token, message.
local function _after_line(toks)
	local raw, v = toks[1].raw, toks[1].value
	if v == "" then
		return nil, "missing_value", raw,
			"'after' needs a value, e.g. after=1234, or after=1234:1240 for several jobs"
	end
	if find(v, "[\1-\8\10-\31\127]") then
		return nil, "control_char", raw, "control character in value of 'after': remove it"
	end
	if find(v, ",", 1, true) then
		return nil, "bad_value", raw,
			format("separate job ids with ':' (as in sbatch --dependency=afterok:J1:J2), not ',': '%s'", v)
	end
	local list, seen, from = {}, {}, 1
	while true do
		local c = find(v, ":", from, true)
		local item = sub(v, from, (c or #v + 1) - 1)
		if item == "" then
			return nil, "bad_value", raw,
				format("empty job id in '%s': write after=J, or after=J1:J2 for several jobs", v)
		end
		local jn, tn = _after_job(item)
		if not jn then
			return nil, "bad_value", raw,
				format("'%s' is not a job id: after= takes job ids such as 1234, or 1234_7 for one task of an array (for other dependencies use sbatch --dependency)", item)
		end
		local norm = tn >= 0 and format("%d_%d", jn, tn) or format("%d", jn)
		if not seen[norm] and #list <= MAX_AFTER then
			seen[norm] = true
			list[#list + 1] = norm
		end
		if not c then break end
		from = c + 1
	end
	if #list > MAX_AFTER then
		return nil, "bad_value", raw,
			format("after= names more than %d jobs; the limit is %d: wait for fewer (or for a job that waits for the others)", MAX_AFTER, MAX_AFTER)
	end
	if #toks > 1 then
		local tk = toks[2]
		return nil, KNOWN[tk.key] and "option_not_allowed" or "unknown_key", tk.raw,
			format("'%s' is not an option of after (it has none: name several jobs as after=J1:J2)", tk.key)
	end
	return { after = list, token = raw }
end

-- Check one directive line (its text without line end). Returns the
-- directive, or nil, code, token, message. quiet: the message will not be
-- shown (the error list is full): spare the key suggestion.
local function _parse_directive(cfg, line, quiet)
	local toks, code, tok, msg = _tokenize(line)
	if not toks then return nil, code, tok, msg end
	if #toks == 0 then
		return nil, "empty_directive", line,
			"empty #DATA directive: write e.g. '#DATA archive=results/'"
	end
	if toks[1].key == "capacity" then return _capacity_line(toks) end
	if toks[1].key == "after" then return _after_line(toks) end
	local d, seen = nil, {}
	for t, tk in ipairs(toks) do
		local key, value, raw = tk.key, tk.value, tk.raw
		if not KNOWN[key] then
			local s = not quiet and _suggest(key)
			if s then
				return nil, "unknown_key", raw,
					format("unknown key '%s' \226\128\148 did you mean '%s'?", key, s)
			end
			return nil, "unknown_key", raw,
				format("unknown key '%s' (known keys: %s)", key, concat(KEY_ORDER, ", "))
		end
		if value == "" then
			return nil, "missing_value", raw,
				format("'%s' needs a value, e.g. %s", key, EXAMPLES[key])
		end
		if seen[key] then
			return nil, "duplicate_key", raw, format("'%s' given twice on this line", key)
		end
		seen[key] = true
		if t == 1 then
			if not ACTIONS[key] then
				return nil, "no_action", raw,
					format("a directive starts with an action (stage_in, archive, exempt, stage_out), not '%s'", key)
			end
			d = { action = key, token = raw }
		else
			if ACTIONS[key] or key == "capacity" or key == "after" then
				return nil, "multiple_actions", raw,
					format("one action per line: put '%s' on its own #DATA line", key)
			end
			if not ALLOWED_OPTS[d.action][key] then
				return nil, "option_not_allowed", raw,
					format("'%s' is not an option of %s (%s)", key, d.action, OPTS_TEXT[d.action])
			end
		end
		if find(value, "[\1-\8\10-\31\127]") then
			return nil, "control_char", raw,
				"control character in value: remove it (a tab is allowed only inside quotes)"
		end
		if key == "when" then
			if value ~= "always" and value ~= "success" then
				return nil, "bad_value", raw,
					format("when must be 'always' or 'success', not '%s'", value)
			end
			d.when = value
		elseif key == "keep" then
			if value ~= "yes" and value ~= "no" then
				return nil, "bad_value", raw, format("keep must be 'yes' or 'no', not '%s'", value)
			end
			d.keep = (value == "yes")
		else
			if #value > cfg.max_path then
				return nil, "path_too_long", raw,
					format("path is %d bytes; the limit is %d", #value, cfg.max_path)
			end
			local kind
			if key == "stage_in" then kind = "src"
			elseif key == "to" then
				kind = (d.action == "stage_in") and "dir" or "dest"
			else kind = "dir" end
			local nv, c2, m2 = _check_value(cfg, value, kind, key)
			if not nv then return nil, c2, raw, m2 end
			-- stage_in's to= keeps one trailing '/': a directory to put the input in
			if key == "to" and kind == "dir" and byte(value, -1) == 47 then nv = nv .. "/" end
			if key == "to" then d.to = nv else d.path = nv end
		end
	end
	if d.action == "stage_out" and not d.to then
		return nil, "missing_option", d.token,
			"stage_out needs to=DEST, e.g. stage_out=logs/ to=/project/lab/logs"
	end
	if d.action == "archive" then
		if d.when == nil then d.when = "always" end
		if d.keep == nil then d.keep = true end
	end
	return d
end

local function _count_lines(s, from, to)
	-- number of LF in s[from, to]
	local n, p = 0, find(s, "\n", from, true)
	while p and p <= to do
		n = n + 1
		p = find(s, "\n", p + 1, true)
	end
	return n
end

local CONFLICT_WORD = { exempt = "exempt", archive = "archived", stage_out = "staged out" }

--[[
Parse a batch script. cfg: nil for SITE's settings, or a table with any of
allowed_schemes, stage_in_roots, max_directives, max_line, max_path.
Returns { actions = {...}, warnings = {...}, errors = {...} } where each
action is { line, action, path, to, when, keep } and each diagnostic is
{ line, code, token, message }. actions is empty when there are errors.
At most SHOWN_DIAGS warnings and errors are kept, each list then ending in
one "more_warnings" / "more_errors" line ("and N more ..."); warning_count
and error_count are the full counts.
res.capacity is { line, size (bytes), pool (or nil) } when the script has a
valid capacity line and no errors.
res.after is { line, jobs = { "J", "J_K", ... } } when the script has a valid
after= line and no errors.
]]
local function parse(script, cfg)
	local res = { actions = {}, warnings = {}, errors = {}, warning_count = 0, error_count = 0 }
	if type(script) ~= "string" then return res end
	local C = CFG
	if type(cfg) == "table" then
		C = compiled_cache[cfg]
		if not C then
			C = _compile(cfg)
			compiled_cache[cfg] = C
		end
	end
	local actions, warnings, errors = res.actions, res.warnings, res.errors
	local ndirs, dbytes, stopped = 0, 0, false
	-- diagnostics past SHOWN_DIAGS: how many, and the line of the first
	local wmore, wmore_line, emore, emore_line = 0, 0, 0, 0

	local function err(line, code, token, message)
		if #errors >= SHOWN_DIAGS then
			if emore == 0 then emore_line = line end
			emore = emore + 1
			return
		end
		errors[#errors + 1] = { line = line, code = code, token = token or "", message = message }
	end
	local function warn(line, code, token, message)
		warnings[#warnings + 1] = { line = line, code = code, token = token or "", message = message }
	end
	-- True (and the warning counted) when the list is full: callers ask
	-- before they build a warning's text, so a full list costs nothing more.
	local function warn_full(line)
		if #warnings < SHOWN_DIAGS then return false end
		if wmore == 0 then wmore_line = line end
		wmore = wmore + 1
		return true
	end

	-- A line's text as a token: cut when over max_line, then, if it holds a
	-- NUL byte or is not valid UTF-8, every byte outside 0x20-0x7e as '?'.
	local function shown(line)
		if #line > C.max_line then line = sub(line, 1, 64) .. "..." end
		if find(line, "\0", 1, true) or not _valid_utf8(line) then
			line = line:gsub("[^\32-\126]", "?")
		end
		return line
	end

	-- Earlier actions by path (each path has at most one of each action):
	-- duplicates and conflicts are found without walking every action.
	local by_path = {}

	local function directive(line, n)
		if stopped then return end
		ndirs = ndirs + 1
		if ndirs > C.max_directives then
			stopped = true
			return err(n, "too_many_directives", shown(line),
				format("more than %d #DATA directives; the limit is %d: merge or remove some",
					C.max_directives, C.max_directives))
		end
		if #line > C.max_line then
			return err(n, "line_too_long", shown(line),
				format("#DATA line is %d bytes; the limit is %d", #line, C.max_line))
		end
		dbytes = dbytes + #line
		if dbytes > MAX_DIRECTIVE_BYTES then
			stopped = true
			return err(n, "too_much_directive_text", shown(line),
				format("the #DATA lines up to this one add up to more than %d bytes, the limit: shorten or merge them (this line and the ones after it are not read)",
					MAX_DIRECTIVE_BYTES))
		end
		if find(line, "\0", 1, true) then
			return err(n, "nul_byte", shown(line), "NUL byte in #DATA line: remove it")
		end
		if not _valid_utf8(line) then
			return err(n, "bad_utf8", shown(line),
				"invalid UTF-8 in #DATA line: save the script as UTF-8")
		end
		local d, code, tok, msg = _parse_directive(C, line, #errors >= SHOWN_DIAGS)
		if not d then
			if code == "empty_directive" then tok = shown(tok) end
			return err(n, code, tok, msg)
		end
		d.line = n
		if d.after then
			if res.after then
				return err(n, "duplicate_after", d.token,
					format("after already given on line %d: list every job on one line, after=J1:J2",
						res.after.line))
			end
			res.after = { line = n, jobs = d.after }
			return
		end
		if d.capacity then
			if res.capacity then
				return err(n, "duplicate_capacity", d.token,
					format("capacity already given on line %d: a job has one size; keep one capacity line",
						res.capacity.line))
			end
			res.capacity = { line = n, size = d.capacity, pool = d.pool }
			return
		end
		local same = by_path[d.path]
		if same then
			for _, o in ipairs(same) do
				if o.action == d.action then
					if warn_full(n) then return end
					return warn(n, "duplicate_directive", d.token,
						format("%s=%s repeats line %d: this line is ignored", d.action, d.path, o.line))
				end
			end
			if CONFLICT_WORD[d.action] then
				for _, o in ipairs(same) do
					if CONFLICT_WORD[o.action] and (o.action == "exempt" or d.action == "exempt") then
						return err(n, "conflict", d.token,
							format("'%s' is %s (line %d) and %s here: choose one",
								d.path, CONFLICT_WORD[o.action], o.line, CONFLICT_WORD[d.action]))
					end
				end
			end
		else
			same = {}
			by_path[d.path] = same
		end
		same[#same + 1] = d
		actions[#actions + 1] = d
	end

	-- Line n (script[pos, e]) looks like a directive written with another
	-- case or spacing ('#data', '# DATA', an indented '#DATA'): pat matches
	-- its start, and an '=' after that, on the same line, makes it a
	-- near-miss worth a warning. Only the line is searched: a search to
	-- the end of the script made many such lines cost the square of their
	-- number.
	local function near_miss(pat, pos, e, n)
		local _, k = find(script, pat, pos)
		if k and k < e and find(sub(script, k + 1, e), "=", 1, true) then
			if warn_full(n) then return end
			warn(n, "case_mismatch", shown(sub(script, pos, e)),
				"this looks like a #DATA directive but is not one (write '#DATA' in capitals at the start of the line): ignored")
		end
	end

	local len = #script
	local pos, n = 1, 0
	local cmd_at = nil
	local scan_end = nil -- where line SCAN_LINES + 1 starts, once the loop got there
	-- A '#' line that does not contain "data" in any case is neither a
	-- directive nor a near-miss: runs of them are skipped by the fast loop
	-- below, which only looks for the next newline. next_data is where the
	-- next "data" (any case) may start, at or after pos (false: none left);
	-- it is looked up in a lower-cased window of the script, so a long
	-- script is not lower-cased whole.
	local next_data
	local win, w_start, w_end -- the lower-cased window, script[w_start, w_end]
	while pos <= len do
		if byte(script, pos) == 35 then
			if next_data ~= false and (next_data == nil or next_data < pos) then
				if not win or pos + 3 > w_end then
					w_start, w_end = pos, pos + 4095
					win = lower(sub(script, w_start, w_end))
				end
				local k = find(win, "data", pos - w_start + 1, true)
				if k then
					next_data = w_start + k - 1
				elseif w_end >= len then
					next_data = false
				else
					next_data = w_end - 2 -- one may straddle the window's end
				end
			end
			local limit = next_data or len + 1
			local nl = find(script, "\n", pos, true)
			while nl and nl < limit and byte(script, nl + 1) == 35 and n < SCAN_LINES do
				n = n + 1
				pos = nl + 1
				nl = find(script, "\n", pos, true)
			end
		end
		if n >= SCAN_LINES then
			scan_end = pos
			break
		end
		n = n + 1
		local nl = find(script, "\n", pos, true)
		local e = (nl or len + 1) - 1
		if e >= pos and byte(script, e) == 13 then e = e - 1 end
		local b = byte(script, pos)
		if pos > e then
			-- empty line: blank
		elseif b == 35 then
			local b2 = byte(script, pos + 1)
			if b2 ~= 68 and b2 ~= 100 and b2 ~= 32 and b2 ~= 9 then
				-- "#SBATCH", "#!": an ordinary comment, nothing to check
			elseif b2 == 68 and sub(script, pos, pos + 4) == "#DATA" and
				(pos + 5 > e or byte(script, pos + 5) == 32 or byte(script, pos + 5) == 9) then
				directive(sub(script, pos, e), n)
			else
				near_miss("^#[ \t]*[Dd][Aa][Tt][Aa][ \t]", pos, e, n)
			end
		elseif b == 32 or b == 9 then
			local _, k = find(script, "^[ \t]*", pos)
			if k >= e then
				-- blank
			elseif byte(script, k + 1) == 35 then
				near_miss("^[ \t]*#[ \t]*[Dd][Aa][Tt][Aa][ \t]", pos, e, n)
			else
				cmd_at = pos
				break
			end
		else
			cmd_at = pos
			break
		end
		if not nl then break end
		pos = nl + 1
	end

	local p = cmd_at and find(script, "\n#DATA", cmd_at, true)
	if p then
		-- Where the lines read end: the start of line SCAN_LINES + 1 (only
		-- looked for when a line after the command starts with '#DATA').
		local q, ln = cmd_at, n
		while ln < SCAN_LINES do
			local nl = find(script, "\n", q, true)
			if not nl then break end
			ln = ln + 1
			q = nl + 1
		end
		if ln >= SCAN_LINES and q <= len then scan_end = q end
		-- After the first command line only column-1 #DATA lines matter:
		-- jump between them instead of walking every line.
		local stop = scan_end or len + 1
		local counted_to, line_no = cmd_at, n
		while p and p < stop do
			local ls = p + 1
			local c = byte(script, ls + 5)
			local ok = (c == nil or c == 32 or c == 9 or c == 10)
			if c == 13 then
				local c2 = byte(script, ls + 6)
				ok = (c2 == nil or c2 == 10)
			end
			if ok then
				line_no = line_no + _count_lines(script, counted_to, p)
				counted_to = p + 1
				if not warn_full(line_no) then
					local le = (find(script, "\n", ls, true) or len + 1) - 1
					if byte(script, le) == 13 then le = le - 1 end
					warn(line_no, "after_command", shown(sub(script, ls, le)),
						"#DATA after the first command line is ignored: move it up, next to the #SBATCH lines")
				end
			end
			p = find(script, "\n#DATA", ls, true)
		end
	end

	if scan_end then
		-- Past the lines read: one search, one warning at most.
		local p = find(script, "\n#DATA", scan_end - 1, true)
		if p and not warn_full(SCAN_LINES + 1) then
			local le = (find(script, "\n", p + 1, true) or len + 1) - 1
			if byte(script, le) == 13 then le = le - 1 end
			warn(SCAN_LINES + 1, "past_scan_limit", shown(sub(script, p + 1, le)),
				format("a line past line %d starts with '#DATA' (shown); #DATA lines are read only in the first %d lines of a script: move it up, next to the #SBATCH lines",
					SCAN_LINES, SCAN_LINES))
		end
	end

	-- how many there were, the ones not shown included
	res.warning_count, res.error_count = #warnings + wmore, #errors + emore
	if wmore > 0 then
		warnings[#warnings + 1] = { line = wmore_line, code = "more_warnings", token = "",
			message = format("and %d more warning%s (from line %d on) not shown: fix the ones above, then run 'stagehand check' on the script again",
				wmore, wmore == 1 and "" or "s", wmore_line) }
	end
	if emore > 0 then
		errors[#errors + 1] = { line = emore_line, code = "more_errors", token = "",
			message = format("and %d more error%s (from line %d on) not shown: fix the ones above, then run 'stagehand check' on the script again",
				emore, emore == 1 and "" or "s", emore_line) }
	end

	if #errors > 0 then
		res.actions = {}
		res.capacity = nil
		res.after = nil
	else
		-- Several stage_in lines with one to= share a directory: it gets its
		-- trailing '/' (docs/directives.md, "Where stage_in puts its input").
		local seen = {}
		for _, a in ipairs(res.actions) do
			if a.action == "stage_in" and a.to then
				local k = (byte(a.to, -1) == 47 and #a.to > 1) and sub(a.to, 1, -2) or a.to
				local first = seen[k]
				if first then
					if byte(first.to, -1) ~= 47 then first.to = first.to .. "/" end
					if byte(a.to, -1) ~= 47 then a.to = a.to .. "/" end
				else
					seen[k] = a
				end
			end
		end
	end
	return res
end

------------------------------------------------------------------------------
-- JSON (compact, the shape of docs/directives.md "The plan")
------------------------------------------------------------------------------
local JSON_ESC = { ['"'] = '\\"', ["\\"] = "\\\\", ["\n"] = "\\n", ["\r"] = "\\r", ["\t"] = "\\t",
	["\b"] = "\\b", ["\f"] = "\\f" }
local function _json_str(s)
	if s == nil then return "null" end
	return '"' .. s:gsub('[%c"\\]', function(c)
		return JSON_ESC[c] or format("\\u%04x", byte(c))
	end) .. '"'
end

-- actions: parse()'s; after: parse()'s res.after ({ line, jobs }) or nil.
local function plan_json(actions, after)
	local out = { '{"version":1,"actions":[' }
	for i, a in ipairs(actions) do
		local s = '{"line":' .. format("%d", a.line) .. ',"action":' .. _json_str(a.action) ..
			',"path":' .. _json_str(a.path)
		if a.action ~= "exempt" then s = s .. ',"to":' .. _json_str(a.to) end
		if a.action == "archive" then
			s = s .. ',"when":' .. _json_str(a.when) .. ',"keep":' .. (a.keep and "true" or "false")
		end
		out[#out + 1] = (i > 1 and "," or "") .. s .. "}"
	end
	out[#out + 1] = "]"
	if after then
		local jobs = {}
		for i, j in ipairs(after.jobs) do jobs[i] = _json_str(j) end
		out[#out + 1] = ',"after":{"line":' .. format("%d", after.line) .. ',"jobs":[' ..
			concat(jobs, ",") .. "]}"
	end
	out[#out + 1] = "}"
	return concat(out)
end


return { parse = parse, plan_json = plan_json }
