#!/usr/bin/env bats
# Preemption on the real test bed: the bed is reconfigured (for this file
# only, through STAGEHAND_TESTBED_EXTRA_CONF) with two partitions on every
# node, a low-priority one whose jobs are cancelled when a high-priority job
# needs the node (PreemptType=preempt/partition_prio, PreemptMode=CANCEL).
# A preempted job is reported as PREEMPTED (not CANCELLED): when=success
# outputs are not archived, when=always outputs are, once. teardown_file
# restores the bed's usual configuration.

load helpers

setup_file() {
	testbed_require
	PREEMPT_CONF=$BATS_FILE_TMPDIR/preempt.conf
	cat >"$PREEMPT_CONF" <<'EOF'
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
PartitionName=lowprio Nodes=ALL PriorityTier=1 PreemptMode=CANCEL
PartitionName=highprio Nodes=ALL PriorityTier=2 PreemptMode=OFF
EOF
	chmod 0644 "$PREEMPT_CONF"
	STAGEHAND_TESTBED_EXTRA_CONF=$PREEMPT_CONF "$TESTBED" up >"$BATS_FILE_TMPDIR/up.log" 2>&1 || {
		cat "$BATS_FILE_TMPDIR/up.log" >&2
		return 1
	}
	testbed_require
}

teardown_file() {
	"$TESTBED" up >/dev/null 2>&1 || true
}

setup() {
	testbed_env
	STAGEHAND=${STAGEHAND_BUILD_DIR:-$BATS_TEST_DIRNAME/../..}/cli/stagehand
	WD=$(user_workdir)
	JOBS=()
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

archived() {
	[[ $(getfattr --only-values -n user.stagehand.policy "$1" 2>/dev/null) == archived ]]
}

@test "preemption: the preempted job is reported PREEMPTED; when=success skipped, when=always archived once" {
	sinfo -h -p lowprio -o %P | grep -q lowprio
	node=$STAGEHAND_TESTBED_NODE
	write_user_script shtest "$WD/low.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/low-%j.out
#DATA archive=ok when=success
#DATA archive=all
mkdir -p ok all; echo a > ok/a; echo b > all/b
sleep 600
EOF
	write_user_script shtest "$WD/high.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/high-%j.out
echo high
EOF
	submit -d "$WD" "$WD/low.sh" -p lowprio --exclusive -w "$node"
	low=$j
	wait_job_state "$low" RUNNING 60
	wait_for 30 test -f "$WD/all/b"
	submit -d "$WD" "$WD/high.sh" -p highprio --exclusive -w "$node"
	high=$j
	wait_job_state "$low" PREEMPTED 90
	wait_job_state "$high" COMPLETED 90
	wait_for 60 archived "$WD/all"
	out=$(run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$low")
	echo "$out"
	[[ $out == *"job $low: ended PREEMPTED"* ]]
	[ "$(grep -c ' archive ' <<<"$out")" -eq 1 ]
	[ -f "$STAGEHAND_TESTBED_ARCHIVE/shtest/$low/all/b" ]
	[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest/$low/ok" ]
}
