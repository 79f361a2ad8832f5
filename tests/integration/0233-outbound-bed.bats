#!/usr/bin/env bats
# On the real test bed, with its stock stagehand.conf (no OutboundAllow): a
# #DATA stage_in from a pre-signed URL on a loopback address. The outbound
# deny list is on by default, so nothing is fetched and the job stays held;
# its status text (AdminComment, which other users may read), `stagehand
# status` and the daemon's log say why, with the URL's query shown as
# "?<redacted>" (docs/admin-guide.md, "Outbound policy", "Secrets in URLs";
# 0232-daemon-outbound.py has the rest of both against a daemon of its own).
# In burst-buffer mode ('make integration-bb') Slurm's SystemComment, which
# carries the daemon's answer to data_in, shows no query either. The plan
# record in AdminComment (and the script Slurm keeps) still hold the #DATA
# line as written: that is why users are told to keep keys in key files
# (docs/user-guide.md).

bats_require_minimum_version 1.5.0

load helpers

setup() {
	daemon_setup spank
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

SECRET=sekrit-0233-Signature

@test "pre-signed URL to 127.0.0.1: refused by the default outbound policy; status, stagehand status and the log show no query" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=https://127.0.0.1:9/in.dat?X-Amz-Signature=$SECRET to=in.dat
$(without_plugin_lines)
true
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_for 60 eval '[[ "$(job_status "$j")" == *"stage-in failed"* ]]'
	st=$(job_status "$j")
	echo "status: $st"
	[[ $st == *"not allowed by the site's outbound policy"* ]]
	[[ $st == *"in.dat?<redacted>"* ]]
	[[ $st != *"$SECRET"* ]]
	[ "$(job_state "$j")" = PENDING ]
	if [[ ${STAGEHAND_TESTBED_SUBMIT_MODE:-hold} == bb ]]; then
		# Slurm holds it with data_in's answer in SystemComment.
		wait_for 30 eval '[[ "$(job_field "$j" SystemComment)" == *"stage-in failed"* ]]'
		sc=$(job_field "$j" SystemComment)
		echo "SystemComment: $sc"
		[[ $sc == *"in.dat?<redacted>"* ]]
		[[ $sc != *"$SECRET"* ]]
	fi
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$j"
	echo "$output"
	[[ $output == *"?<redacted>"* ]]
	[[ $output != *"$SECRET"* ]]
	grep -qF "outbound policy: connection to 127.0.0.1 refused (loopback (127.0.0.0/8)), at https://127.0.0.1:9/in.dat?<redacted>" \
		"$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"
	run ! grep -qF "$SECRET" "$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"
}
