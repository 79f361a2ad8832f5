#!/usr/bin/env bats
# 0301-site-script.bats - a site's own job_submit.lua that adopts stagehand
# with one load line and one call per hook (docs/admin-submit.md), inside
# the test bed's real slurmctld: the site's own work (a default partition)
# and stagehand's (#DATA checks, plan record, stage-in hold) both happen.
#
# Replaces the bed's job_submit.lua link with the site script for the
# duration of the file and puts the link back at the end.

bats_require_minimum_version 1.5.0

load helpers

SITE_PART=sitedefault

setup_file() {
	testbed_require
	grep -q '^JobSubmitPlugins=lua' "$SLURM_CONF" ||
		skip "test bed runs without JobSubmitPlugins=lua"
	ETC=$(dirname "$SLURM_CONF")
	[[ -L $ETC/job_submit.lua && -e $ETC/stagehand.lua ]] ||
		skip "no job_submit.lua/stagehand.lua links in $ETC"
	export ETC
	readlink "$ETC/job_submit.lua" >"$BATS_FILE_TMPDIR/link"
	scontrol create partitionname=$SITE_PART nodes=ALL maxtime=infinite state=up
	{
		echo '-- A site job_submit.lua: its own policy, plus stagehand.'
		echo "local stagehand = dofile(\"$ETC/stagehand.lua\")"
		echo ''
		echo 'function slurm_job_submit(job_desc, part_list, submit_uid)'
		echo '	if job_desc.partition == nil then'
		echo "		job_desc.partition = \"$SITE_PART\""
		echo '	end'
		echo '	return stagehand.job_submit(job_desc, part_list, submit_uid)'
		echo 'end'
		echo ''
		echo 'function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)'
		echo '	return stagehand.job_modify(job_desc, job_rec, part_list, modify_uid)'
		echo 'end'
	} >"$BATS_FILE_TMPDIR/site.lua"
	install -m 0644 "$BATS_FILE_TMPDIR/site.lua" "$ETC/job_submit.lua.new"
	mv -f "$ETC/job_submit.lua.new" "$ETC/job_submit.lua"
}

teardown_file() {
	if [[ -n ${ETC:-} && -f $BATS_FILE_TMPDIR/link ]]; then
		ln -sfn "$(cat "$BATS_FILE_TMPDIR/link")" "$ETC/job_submit.lua"
		# slurmctld reloads the script when its mtime changes; the link's
		# target is older than the site script it replaces.
		touch "$(readlink -f "$ETC/job_submit.lua")"
	fi
	scontrol delete partitionname=$SITE_PART 2>/dev/null || true
}

setup() {
	WD=$(user_workdir)
	JOBS=()
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

@test "site script: its default partition and the stage-in hold on one job" {
	echo in >"$WD/in.dat"
	chown "$TESTBED_USER": "$WD/in.dat"
	write_user_script "$TESTBED_USER" "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --time=1
#DATA stage_in=$WD/in.dat
cat "\$STAGEHAND_INPUT_DIR/in.dat" > $WD/seen
EOF
	# slurmctld notices the changed script by its mtime, at the next submit.
	try_submit -d "$WD" "$WD/job.sh" -o "$WD/out"
	echo "stderr: $stderr"
	[ "$status" -eq 0 ]
	[[ "$(job_field "$JOB" Partition)" == "$SITE_PART" ]]
	[[ "$(job_field "$JOB" AdminComment)" =~ stagehand:v1: ]]
	wait_job_state "$JOB" COMPLETED 90
	[[ "$(cat "$WD/seen")" == in ]]
}

@test "site script: a bad #DATA line is still refused with its line number" {
	write_user_script "$TESTBED_USER" "$WD/bad.sh" <<EOF
#!/bin/bash
#DATA archvie=results/
true
EOF
	try_submit -d "$WD" "$WD/bad.sh"
	echo "stderr: $stderr"
	[ "$status" -ne 0 ]
	[[ "$stderr" =~ "line 2: unknown key 'archvie'" ]]
	[[ "$stderr" =~ "did you mean 'archive'" ]]
}
