#!/bin/sh
# cli-check.sh - 'stagehand check' on the shipped examples, and the option
# handling of health and resume (TAP).
# Needs STAGEHAND_BIN (the built cli/stagehand) and STAGEHAND_EXAMPLES
# (the examples/ folder); tests/Makefile.am sets both.

bin=${STAGEHAND_BIN:-../cli/stagehand}
ex=${STAGEHAND_EXAMPLES:-../examples}
tmp=${TMPDIR:-/tmp}/stagehand-check-test.$$
mkdir "$tmp" || exit 1
trap 'rm -rf "$tmp"' EXIT

n=0
fails=0
ok() {  # ok COND-STATUS DESCRIPTION
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		fails=$((fails + 1))
		sed 's/^/# /' "$tmp/out" 2>/dev/null
	fi
}

count=0
for s in "$ex"/*.sh; do
	[ -f "$s" ] || continue
	count=$((count + 1))
	"$bin" check "$s" > "$tmp/out" 2>&1
	rc=$?
	grep -q "directives\{0,1\} OK" "$tmp/out"
	ok $((rc + $?)) "valid example $(basename "$s"): exit 0 and a summary"
done
[ "$count" -ge 3 ]
ok $? "at least 3 valid examples found in $ex ($count)"

"$bin" check "$ex"/*.sh > "$tmp/out" 2>&1
ok $? "all valid examples in one run: exit 0"

"$bin" check "$ex/bad/typo.sh" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ]
ok $? "bad/typo.sh: exit 1 (got $rc)"
grep -q "typo.sh:4: error: unknown key 'archvie'.*did you mean 'archive'?.*\[unknown_key\]" "$tmp/out"
ok $? "bad/typo.sh: line 4 and 'did you mean' in the diagnostic"

"$bin" check "$ex/bad/typo.sh" "$ex"/*.sh > "$tmp/out" 2>&1
ok $(( $? == 1 ? 0 : 1 )) "one bad script among good ones: exit 1"

"$bin" check --json "$ex/bad/typo.sh" > "$tmp/out" 2>&1
rc=$?
grep -q '"code": "unknown_key"' "$tmp/out" && grep -q '"ok": false' "$tmp/out" && [ $rc -eq 1 ]
ok $? "--json: errors as JSON, exit 1"

"$bin" check --json "$ex"/*.sh > "$tmp/out" 2>&1
rc=$?
grep -q '"ok": true' "$tmp/out" && grep -q '"actions"' "$tmp/out" && [ $rc -eq 0 ]
ok $? "--json: valid plans, exit 0"

"$bin" check "$tmp/does-not-exist.sh" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 2 ] && grep -q "does-not-exist.sh: cannot open: No such file or directory" "$tmp/out"
ok $? "unreadable script: exit 2, names the file and the reason"

"$bin" check > "$tmp/out" 2>&1
ok $(( $? == 2 ? 0 : 1 )) "no script: usage error, exit 2"

"$bin" check --bogus "$ex/bad/typo.sh" > "$tmp/out" 2>&1
ok $(( $? == 2 ? 0 : 1 )) "unknown option: exit 2"

"$bin" check --help > "$tmp/out" 2>&1
rc=$?
grep -q "usage: stagehand check" "$tmp/out" && [ $rc -eq 0 ]
ok $? "--help: usage, exit 0"

printf '#!/bin/bash\n#DATA archive=out\necho\n#DATA exempt=tmp\n' | "$bin" check - > "$tmp/out" 2>&1
rc=$?
grep -q "<stdin>:4: warning: .*\[after_command\]" "$tmp/out" && grep -q "<stdin>: 1 directive OK" "$tmp/out" && [ $rc -eq 0 ]
ok $? "stdin: warning printed, still valid, exit 0"

printf '#DATA exempt=x\n' | "$bin" check --quiet - > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 0 ] && [ ! -s "$tmp/out" ]
ok $? "--quiet: nothing printed for a valid script"

# --config: the site's limits, schemes and stage_in roots from stagehand.conf.
printf 'AllowedSchemes=s3\nStageInRoots=/project\nMaxDirectives=2\n' > "$tmp/site.conf"
printf '#!/bin/bash\n#DATA stage_in=https://h/a\n#DATA stage_in=/etc/hosts\n#DATA archive=out\n' > "$tmp/site.sh"
"$bin" check "$tmp/site.sh" > "$tmp/out" 2>&1
ok $? "without --config the built-in defaults accept it"
"$bin" check --config="$tmp/site.conf" "$tmp/site.sh" > "$tmp/out" 2>&1
rc=$?
grep -q "site.sh:2: error: .*\[url_not_allowed\]" "$tmp/out" &&
	grep -q "site.sh:3: error: .*(/project).*\[path_not_allowed\]" "$tmp/out" &&
	grep -q "site.sh:4: error: .*limit is 2 \[too_many_directives\]" "$tmp/out" && [ $rc -eq 1 ]
ok $? "--config=FILE: AllowedSchemes, StageInRoots and MaxDirectives apply, exit 1"
STAGEHAND_CONF="$tmp/site.conf" "$bin" check --config "$tmp/site.sh" > "$tmp/out" 2>&1
ok $(( $? == 1 ? 0 : 1 )) "--config alone reads STAGEHAND_CONF"
printf 'MaxDirectives=lots\n' > "$tmp/bad.conf"
"$bin" check --config="$tmp/bad.conf" "$tmp/site.sh" > "$tmp/out" 2>&1
rc=$?
grep -q "bad.conf:1: error: MaxDirectives must be an integer" "$tmp/out" && [ $rc -eq 2 ]
ok $? "--config with a bad line: FILE:LINE, exit 2"

# after=: accepted in hold mode with what it waits for; refused in bb mode,
# pointing at Slurm's own dependency (as job_submit.lua does).
printf '#!/bin/bash\n#DATA after=4711:4712_3\n#DATA stage_in=/a/b\n' > "$tmp/after.sh"
"$bin" check --config=/dev/null "$tmp/after.sh" > "$tmp/out" 2>&1
rc=$?
grep -q "after.sh: 2 directives OK" "$tmp/out" &&
	grep -q "line 2: wait for the archives of jobs 4711, 4712_3 (held until they are verified; stage_in starts then)" "$tmp/out" && [ $rc -eq 0 ]
ok $? "after= in hold mode: valid, says which archives the job waits for"
printf 'SubmitMode=bb\n' > "$tmp/bb.conf"
"$bin" check --config="$tmp/bb.conf" "$tmp/after.sh" > "$tmp/out" 2>&1
rc=$?
grep -q "after.sh:2: error: after= waits for archives in hold mode only.*--dependency=afterburstbuffer:4711:4712_3 instead \[after_in_bb_mode\]" "$tmp/out" && [ $rc -eq 1 ]
ok $? "after= in bb mode: an error naming afterburstbuffer, exit 1"
grep -q "after.sh: 1 error, 0 warnings: the job would be rejected" "$tmp/out"
ok $? "after= in bb mode: the summary counts the error"

# A heterogeneous job (#SBATCH hetjob) with #DATA: fine in hold mode, refused
# in bb mode at the first #DATA line, as job_submit.lua refuses it.
printf '#!/bin/bash\n#SBATCH -n1\n#DATA archive=res\n#SBATCH hetjob\n#SBATCH -n1\nsrun true\n' > "$tmp/het.sh"
"$bin" check --config=/dev/null "$tmp/het.sh" > "$tmp/out" 2>&1
ok $? "hetjob in hold mode: valid"
"$bin" check --config="$tmp/bb.conf" "$tmp/het.sh" > "$tmp/out" 2>&1
rc=$?
grep -q "het.sh:3: error: #DATA in a heterogeneous job is not supported in burst-buffer mode: .*--dependency=afterburstbuffer:JOBID.* \[hetjob_in_bb_mode\]" "$tmp/out" && [ $rc -eq 1 ]
ok $? "hetjob in bb mode: an error at the first #DATA line, exit 1"
printf '#!/bin/bash\n#DATA archive=res\nsrun true\n#SBATCH hetjob\n' > "$tmp/late.sh"
"$bin" check --config="$tmp/bb.conf" "$tmp/late.sh" > "$tmp/out" 2>&1
ok $? "an '#SBATCH hetjob' after the first command is not sbatch's: valid in bb mode"

# capacity=: in bb mode, refused as job_submit.lua refuses it when the site's
# pools (PoolCapacity, ScratchRoots) cannot take it.
printf 'SubmitMode=bb\nPoolCapacity=1G\nScratchRoots=/scratch,/fast\n' > "$tmp/pools.conf"
printf 'SubmitMode=bb\nScratchRoots=/scratch\n' > "$tmp/nopools.conf"
cap_case() {  # cap_case CONF CAPACITY-LINE WANT-RC WANT-TEXT DESCRIPTION
	printf '#!/bin/bash\n#DATA %s\n#DATA stage_in=/a/b\n' "$2" > "$tmp/cap.sh"
	"$bin" check --config="$1" "$tmp/cap.sh" > "$tmp/out" 2>&1
	cap_rc=$?
	grep -qF -- "$4" "$tmp/out" && [ $cap_rc -eq "$3" ]
	ok $? "$5"
}
cap_case "$tmp/pools.conf" "capacity=2G" 1 "cap.sh:2: error: capacity=2147483648 bytes is more than a whole pool (1073741824 bytes): the job could never be set up [capacity_over_pool]" \
	"capacity= over PoolCapacity: refused, exit 1"
cap_case "$tmp/pools.conf" "capacity=1M pool=/nope" 1 "cap.sh:2: error: pool=/nope is not a pool of this site (pools: /scratch, /fast) [unknown_pool]" \
	"pool= not one of the site's pools: refused with the pools, exit 1"
cap_case "$tmp/nopools.conf" "capacity=1M" 1 "cap.sh:2: error: this site has no burst-buffer pools (PoolCapacity is not set in stagehand.conf): remove the capacity line [no_pools]" \
	"capacity= on a bb site without pools: refused, exit 1"
cap_case "$tmp/pools.conf" "capacity=1M pool=/fast" 0 "line 2: capacity 1048576 bytes in pool /fast" \
	"capacity= within a named pool: valid, exit 0"
cap_case /dev/null "capacity=2G" 0 "(ignored: SubmitMode=hold)" \
	"capacity= in hold mode: ignored, exit 0"
printf '#!/bin/bash\n#DATA after=4711,4712\n' | "$bin" check --config=/dev/null - > "$tmp/out" 2>&1
rc=$?
grep -q "<stdin>:2: error: separate job ids with ':'.*\[bad_value\]" "$tmp/out" && [ $rc -eq 1 ]
ok $? "after= with a comma: the error says to use ':', exit 1"

# health and resume take --json and the common options only (client_json_opts):
# help and usage errors are answered before any daemon is asked.
for cmd in health resume; do
	"$bin" $cmd --help > "$tmp/out" 2> "$tmp/err"
	rc=$?
	grep -q "^usage: stagehand $cmd \[--json\]" "$tmp/out" && grep -q "^  --socket PATH" "$tmp/out" &&
		[ ! -s "$tmp/err" ] && [ $rc -eq 0 ]
	ok $? "$cmd --help: usage and the daemon options on stdout, exit 0"
	"$bin" $cmd --bogus > "$tmp/out" 2>&1
	rc=$?
	grep -q "$cmd: bad option '--bogus'.*see 'stagehand $cmd --help'" "$tmp/out" && [ $rc -eq 2 ]
	ok $? "$cmd --bogus: names the option, exit 2"
done
"$bin" resume now > "$tmp/out" 2>&1
rc=$?
grep -q "resume: unexpected argument 'now'" "$tmp/out" && [ $rc -eq 2 ]
ok $? "resume with an operand: exit 2"

# doctor --role: the four role names (docs/install.md runs each), a usage
# error for any other that lists them, and no role without a value.
"$bin" doctor --help > "$tmp/out" 2>&1
rc=$?
grep -q "^usage: stagehand doctor \[--role ROLE\]" "$tmp/out" &&
	(for r in controller daemon node login; do grep -q "^ *$r  " "$tmp/out" || exit 1; done) && [ $rc -eq 0 ]
ok $? "doctor --help: --role and the four roles, exit 0"
"$bin" doctor --role compute > "$tmp/out" 2>&1
rc=$?
grep -q "doctor: unknown role 'compute' (valid roles: controller, daemon, node, login)" "$tmp/out" &&
	[ $rc -eq 2 ]
ok $? "doctor --role compute: the valid roles, exit 2"
"$bin" doctor --role > "$tmp/out" 2>&1
ok $(( $? == 2 ? 0 : 1 )) "doctor --role without a value: exit 2"

echo "1..$n"
[ $fails -eq 0 ]
