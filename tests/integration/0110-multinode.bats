#!/usr/bin/env bats
# The multi-node test bed (scripts/testbed up --nodes N): compute nodes are
# namespaces of their own, with their own hostname, address and slurmd; the
# daemon's UNIX socket is not there, its TCP address is; the host's own
# network namespace has no address of the bed. On the one-node bed these
# tests are skipped (expected: tests/integration/expected-skips).

load helpers

setup_file() {
	testbed_require
}

setup() {
	testbed_env
	[[ $STAGEHAND_TESTBED_MODE == multi ]] || skip "one-node test bed (scripts/testbed up --nodes 3 for these)"
	NODES=($STAGEHAND_TESTBED_NODES)
	JOBS=()
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

@test "multi-node: sbatch -N <all nodes> runs one task per node, each with its own hostname and address" {
	local n=${#NODES[@]} dir out
	dir=$(user_workdir)
	write_user_script "$TESTBED_USER" "$dir/span.sh" <<'EOS'
#!/bin/bash
#SBATCH --output=span-%j.out
echo "batch $(hostname)"
srun bash -c 'echo "task $SLURM_PROCID $(hostname) $(ip -4 -o addr show dev eth0 | awk "{print \$4}") $(id -un)"'
EOS
	submit -d "$dir" "$dir/span.sh" -N "$n"
	wait_job_state "$j" COMPLETED 90
	out=$dir/span-$j.out
	cat "$out"
	[ "$(job_field "$j" NumNodes)" = "$n" ]
	[ "$(grep -c '^task ' "$out")" -eq "$n" ]
	# n distinct hostnames, each a node name, each with that node's address.
	[ "$(awk '/^task /{print $3}' "$out" | sort -u | wc -l)" -eq "$n" ]
	local node addr
	for node in "${NODES[@]}"; do
		addr=$(scontrol show node "$node" | grep -o 'NodeAddr=[^ ]*' | cut -d= -f2)
		grep -qx "task [0-9]* $node $addr/24 $TESTBED_USER" "$out"
	done
	[ "$(grep '^batch ' "$out")" = "batch $(job_node "$j")" ]
}

@test "multi-node: each node has its own hostname, and the daemon's UNIX socket is not visible there" {
	local node
	[ -S "$STAGEHAND_SOCKET" ]
	for node in "${NODES[@]}"; do
		[ "$(on_node "$node" hostname)" = "$node" ]
		run on_node "$node" test -e "$STAGEHAND_SOCKET"
		[ "$status" -ne 0 ]
		run on_node "$node" ls -A "$(dirname "$STAGEHAND_SOCKET")"
		[ "$status" -eq 0 ]
		[[ $output != *stagehandd* ]]
		# Scratch is shared: a file written here is there.
		[ "$(on_node "$node" stat -c %i "$STAGEHAND_TESTBED_SCRATCH")" = "$(stat -c %i "$STAGEHAND_TESTBED_SCRATCH")" ]
	done
}

@test "multi-node: the daemon answers over TCP from the service namespace and from every node" {
	local cli=$STAGEHAND_BUILD_DIR/cli/stagehand node
	[[ -n $STAGEHAND_SERVER ]]
	run run_as_user "$TESTBED_USER" "$cli" --server "$STAGEHAND_SERVER" health
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output == *"at $STAGEHAND_SERVER: ok"* ]]
	for node in "${NODES[@]}"; do
		run on_node "$node" runuser -u "$TESTBED_USER" -- "$cli" --server "$STAGEHAND_SERVER" health
		echo "$node: $output"
		[ "$status" -eq 0 ]
		[[ $output == *"at $STAGEHAND_SERVER: ok"* ]]
	done
}

@test "multi-node: the host's network namespace has no address or link of the bed, only a guard route" {
	local subnet3=${STAGEHAND_TESTBED_SVC_ADDR%.*}
	# Read the host namespace's configuration (nothing is sent there); the
	# kernel thread kthreadd (pid 2) lives in the initial network namespace.
	local host=/proc/2/ns/net
	[ "$(readlink "$host")" != "$(readlink /proc/self/ns/net)" ]
	run nsenter --net="$host" ip -4 -o addr show
	[ "$status" -eq 0 ]
	[[ $output != *" $subnet3."* ]]
	# The one route of the bed there is the guard that makes a stray packet
	# for a bed address fail on this host instead of leaving by the default
	# route.
	run nsenter --net="$host" ip -4 route show
	[ "$status" -eq 0 ]
	[[ $(grep -F "$subnet3." <<<"$output") == "unreachable $subnet3.0/24"* ]]
	[ "$(grep -cF "$subnet3." <<<"$output")" -eq 1 ]
	run nsenter --net="$host" ip -4 route get "$STAGEHAND_TESTBED_SVC_ADDR"
	[ "$status" -ne 0 ]
	run nsenter --net="$host" ip -o link show
	[[ $output != *"v-n1"* && $output != *" br0"* ]]
}
