#!/usr/bin/env bats
# 0300-submit.bats - lua/job_submit.lua inside the test bed's slurmctld:
# what an ordinary user (shtest) sees from sbatch, squeue and scontrol.
#
# Needs root and a test bed that is up with the Lua hook on
# (scripts/testbed up; JobSubmitPlugins=lua, job_submit.lua linked into the
# test bed's etc/). Submits as shtest; never starts or stops Slurm.

bats_require_minimum_version 1.5.0

load helpers

TB_DIR=${STAGEHAND_TESTBED_DIR:-/var/tmp/stagehand-testbed}
export SLURM_CONF=$TB_DIR/etc/slurm.conf
TUSER=${STAGEHAND_TEST_USER:-shtest}

setup_file() {
	[[ $(id -u) == 0 ]] || skip "integration tests run as root"
	scontrol ping 2>/dev/null | grep -q 'is UP' ||
		skip "test bed not up (scripts/testbed up)"
	grep -q '^JobSubmitPlugins=lua' "$SLURM_CONF" ||
		skip "test bed runs without JobSubmitPlugins=lua"
	[[ -r $TB_DIR/etc/job_submit.lua ]] ||
		skip "no job_submit.lua in $TB_DIR/etc"
	id "$TUSER" >/dev/null 2>&1 || skip "user $TUSER missing"
}

setup() {
	WD=$(mktemp -d "$TB_DIR/scratch/0300.XXXXXX")
	chown "$TUSER": "$WD"
	JOBS=()
}

teardown() {
	local j
	for j in "${JOBS[@]}"; do scancel "$j" 2>/dev/null || true; done
	rm -rf "$WD"
}

# write_job NAME LINE... : a batch script in $WD whose lines 1-2 are
# "#!/bin/bash" and "#SBATCH --time=1", then the given lines (line 3 on),
# then a command writing "ran" to NAME.ran.
write_job() {
	local name=$1
	shift
	{
		printf '#!/bin/bash\n#SBATCH --time=1\n'
		local l
		for l in "$@"; do printf '%s\n' "$l"; done
		printf 'echo ran > %s/%s.ran\n' "$WD" "$name"
	} >"$WD/$name.sh"
	chown "$TUSER": "$WD/$name.sh"
}

# as_user CMD... : run a Slurm command as the test user.
as_user() {
	runuser -u "$TUSER" -- env SLURM_CONF="$SLURM_CONF" "$@"
}

# sub NAME : sbatch $WD/NAME.sh as the test user (helpers' try_submit);
# sets $output/$stderr/$status, and $JOB on success.
sub() {
	try_submit -u "$TUSER" -d "$WD" "$WD/$1.sh" -o "$WD/$1.out"
}

# job_field ID NAME : one Key=Value field of scontrol show job.
job_field() {
	scontrol show job "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1
}

# admin_comment ID : the whole AdminComment (it may contain spaces).
admin_comment() {
	scontrol show job "$1" | sed -n 's/^ *AdminComment=//p' | head -n1 | sed 's/ $//'
}

wait_state() {
	local id=$1 want=$2 i st=""
	for ((i = 0; i < 120; i++)); do
		st=$(job_field "$id" JobState)
		[[ $st == "$want" ]] && return 0
		sleep 0.5
	done
	echo "job $id is '$st', expected $want" >&2
	scontrol show job "$id" >&2 || true
	return 1
}

@test "a script without #DATA runs untouched" {
	write_job plain '#SBATCH --job-name=plain'
	sub plain
	[ "$status" -eq 0 ]
	[ -z "$stderr" ]
	wait_state "$JOB" COMPLETED
	grep -qx ran "$WD/plain.ran"
	[ -z "$(admin_comment "$JOB")" ]
}

@test "#DATA without stage_in: accepted, not held, plan in AdminComment" {
	write_job nostage '#DATA archive=results/ when=success' '#DATA exempt=./tmp//'
	sub nostage
	[ "$status" -eq 0 ]
	ac=$(admin_comment "$JOB")
	echo "AdminComment: $ac"
	[[ $ac == 'stagehand:v1:{"version":1,"actions":[{"line":3,"action":"archive","path":"results","to":null,"when":"success","keep":true},{"line":4,"action":"exempt","path":"tmp"}]}' ]]
	[ "$(job_field "$JOB" Reason)" != JobHeldUser ]
	wait_state "$JOB" COMPLETED
}

@test "stage_in: held (PENDING, JobHeldUser, Priority=0) with the hold marked pending" {
	write_job held '#DATA stage_in=/archive/proj/ref.fa to=inputs'
	sub held
	[ "$status" -eq 0 ]
	echo "sbatch stderr: $stderr"
	[[ $stderr == *"held until its stage_in inputs are staged"* ]]
	[ "$(squeue -h -j "$JOB" -o '%T|%r')" = "PENDING|JobHeldUser" ]
	[ "$(job_field "$JOB" Priority)" = 0 ]
	ac=$(admin_comment "$JOB")
	echo "AdminComment: $ac"
	# stagehandd may already have put its status text in front (its watch
	# looks every 2 s): the record after it is the hook's, unchanged.
	[[ $ac =~ ^(stagehand:status=.*\ )?stagehand:hold=pending\ (stagehand:v1:.*)$ ]]
	[ "${BASH_REMATCH[2]}" = 'stagehand:v1:{"version":1,"actions":[{"line":3,"action":"stage_in","path":"/archive/proj/ref.fa","to":"inputs"}]}' ]
	sleep 3
	[ "$(job_field "$JOB" JobState)" = PENDING ]
}

@test "the user cannot release a stage-in hold, nor raise its priority" {
	write_job norelease '#DATA stage_in=/archive/proj/ref.fa'
	sub norelease
	[ "$status" -eq 0 ]
	run as_user scontrol release "$JOB"
	echo "scontrol release as $TUSER: status $status: $output"
	[ "$status" -ne 0 ]
	[[ $output == *"held state"* ]]
	run as_user scontrol update JobId="$JOB" Priority=100
	echo "scontrol update as $TUSER: status $status: $output"
	[ "$status" -ne 0 ]
	[ "$(squeue -h -j "$JOB" -o '%T|%r')" = "PENDING|JobHeldUser" ]
	# other changes still work, and the user may cancel
	run as_user scontrol update JobId="$JOB" TimeLimit=2
	[ "$status" -eq 0 ]
	run as_user scancel "$JOB"
	[ "$status" -eq 0 ]
}

@test "root release starts the job and marks the hold released" {
	write_job rootrel '#DATA stage_in=/archive/proj/ref.fa'
	sub rootrel
	[ "$status" -eq 0 ]
	[ "$(job_field "$JOB" Priority)" = 0 ]
	scontrol release "$JOB"
	ac=$(admin_comment "$JOB")
	echo "AdminComment: $ac"
	[[ $ac == 'stagehand:hold=released stagehand:v1:'* ]]
	wait_state "$JOB" COMPLETED
	grep -qx ran "$WD/rootrel.ran"
}

@test "warnings are shown and the job is still accepted" {
	write_job warn '#data archive=x' '#DATA exempt=tmp'
	sub warn
	echo "stderr: $stderr"
	[ "$status" -eq 0 ]
	[[ $stderr == *"stagehand: line 3: warning:"* ]]
	[[ $(admin_comment "$JOB") == 'stagehand:v1:{"version":1,"actions":[{"line":4,"action":"exempt","path":"tmp"}]}' ]]
}

# expect_reject NAME LINE TEXT DIRECTIVE... : sbatch fails; stderr names
# the line and carries TEXT.
expect_reject() {
	local name=$1 line=$2 text=$3
	shift 3
	write_job "$name" "$@"
	sub "$name"
	echo "status $status, stderr:"
	echo "$stderr"
	[ "$status" -ne 0 ]
	[[ $stderr == *"stagehand: line $line: "*"$text"* ]]
	[[ $stderr == *"(fix the #DATA line; see 'stagehand check')"* ]]
	[[ $stderr == *"job not submitted"* ]]
	[ ! -e "$WD/$name.ran" ]
}

@test "rejected: unknown key, with a suggestion" {
	expect_reject unknown 3 "unknown key 'archvie'"$' \xe2\x80\x94 '"did you mean 'archive'?" '#DATA archvie=out'
}

@test "rejected: syntax (token without =, unterminated quote)" {
	expect_reject syntax 3 "expected key=value, got 'results/'" '#DATA results/'
	expect_reject quote 4 "unterminated quote" '#SBATCH -n 1' '#DATA archive="my results'
}

@test "rejected: options (bad value, missing to=, option of another action)" {
	expect_reject badvalue 3 "when must be 'always' or 'success', not 'sucess'" '#DATA archive=out when=sucess'
	expect_reject missingto 3 "stage_out needs to=DEST" '#DATA stage_out=logs'
	expect_reject notallowed 3 "'keep' is not an option of stage_in" '#DATA stage_in=/a/b keep=no'
}

@test "rejected: paths (traversal, shell expansion, relative source, pattern)" {
	expect_reject traversal 3 "'..' is not allowed in paths" '#DATA archive=out/../../etc'
	expect_reject tilde 3 "no shell expansion" '#DATA archive=~/x'
	expect_reject relsrc 3 "must be an absolute path or a URL" '#DATA stage_in=data/in.txt'
	expect_reject pattern 3 "unknown pattern '%q'" '#DATA archive=out_%q'
}

@test "rejected: URL scheme not allowed" {
	expect_reject http 3 "URL scheme 'http' is not allowed" '#DATA stage_in=http://example.org/a'
}

@test "rejected: conflict between exempt and archive" {
	expect_reject conflict 4 "'out' is exempt (line 3) and archived here" '#DATA exempt=out' '#DATA archive=out/'
}

@test "rejected: limits (line too long)" {
	expect_reject long 3 "#DATA line is 5007 bytes; the limit is 4096" "#DATA archive=$(printf 'x%.0s' {1..4993})"
}

@test "every bad line is reported in one submission" {
	write_job multi '#DATA archvie=a' '#DATA exempt=tmp' '#DATA stage_out=x'
	sub multi
	[ "$status" -ne 0 ]
	[[ $stderr == *"stagehand: line 3: "* ]]
	[[ $stderr == *"stagehand: line 5: "* ]]
	[[ $stderr != *"stagehand: line 4: "* ]]
	[[ $stderr == *"2 #DATA errors"* ]]
}
