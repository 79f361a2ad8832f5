# scripts/testbed-netns.bash: the namespaces of the multi-node test bed,
# sourced by scripts/testbed (not run on its own).
#
#   PREFIXsvc   network namespace: bridge br0 with the service address
#               A.B.C.1/24, lo; slurmctld and stagehandd run here (in the
#               host's mount and UTS namespaces, so the daemon's UNIX socket
#               and the test bed's files are where they always are)
#   PREFIXnK    network + UTS + mount namespace per compute node: eth0
#               A.B.C.(10+K)/24 (a veth whose peer v-nK is a port of br0 in
#               PREFIXsvc), lo, hostname nK, an empty tmpfs over the test
#               bed's run/ (the daemon's socket is not there) and the node's
#               own stagehand spool bound over spool/stagehand. A holder
#               process ("stagehand-testbed-node TB_DIR nK", pid in
#               nodes/nK/holder.pid) keeps the UTS and mount namespaces alive;
#               slurmd and "scripts/testbed exec nK" enter them through it.
# Nothing is routed: the host's own network namespace gets no address, link
# or route into the bed, and every address is inside the bed's namespaces.

# The recorded topology of the bed that runs (or ran last): MODE, NODE_COUNT,
# NETNS_PREFIX, SUBNET, SH_PORT. Without a record: one-node.
load_topology() {
	local k v
	MODE=one
	NODE_COUNT=0
	if [[ -r $TOPOLOGY ]]; then
		while IFS='=' read -r k v; do
			case $k in
			MODE) MODE=$v ;;
			NODE_COUNT) NODE_COUNT=$v ;;
			NETNS_PREFIX) NETNS_PREFIX=$v ;;
			SUBNET) SUBNET=$v ;;
			SH_PORT) SH_PORT=$v ;;
			esac
		done <"$TOPOLOGY"
	fi
	derive_topology
}

write_topology() {
	printf 'MODE=%s\nNODE_COUNT=%s\nNETNS_PREFIX=%s\nSUBNET=%s\nSH_PORT=%s\n' \
		"$MODE" "$NODE_COUNT" "$NETNS_PREFIX" "$SUBNET" "$SH_PORT" >"$TOPOLOGY.new"
	mv -f "$TOPOLOGY.new" "$TOPOLOGY"
}

# Names and addresses from MODE, NODE_COUNT, NETNS_PREFIX, SUBNET.
derive_topology() {
	[[ $MODE == one || $MODE == multi ]] || die "$TOPOLOGY: MODE must be one or multi, not '$MODE'"
	[[ $NODE_COUNT =~ ^[0-9]+$ ]] && ((NODE_COUNT <= 200)) ||
		die "the node count must be a number from 1 to 200, not '$NODE_COUNT'"
	[[ $NETNS_PREFIX =~ ^[A-Za-z0-9_-]{1,20}$ ]] ||
		die "STAGEHAND_TESTBED_NETNS_PREFIX must be 1-20 of A-Z a-z 0-9 _ -, not '$NETNS_PREFIX'"
	[[ $SUBNET =~ ^((25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])\.(25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9]))\.0/24$ ]] ||
		die "STAGEHAND_TESTBED_SUBNET must be A.B.C.0/24 (a private network used only inside the bed's namespaces), not '$SUBNET'"
	NET3=${BASH_REMATCH[1]}
	[[ $SH_PORT =~ ^[0-9]+$ ]] && ((SH_PORT > 0 && SH_PORT < 65536)) ||
		die "STAGEHAND_TESTBED_DAEMON_PORT must be a TCP port, not '$SH_PORT'"
	SVC_ADDR=$NET3.1
	SVC_NS=${NETNS_PREFIX}svc
	NODES=()
	local k
	if [[ $MODE == multi ]]; then
		((NODE_COUNT >= 1)) || die "a multi-node bed needs at least one node"
		for ((k = 1; k <= NODE_COUNT; k++)); do NODES+=("n$k"); done
	else
		NODES=("$NODE")
	fi
}

node_addr() {
	echo "$NET3.$((10 + ${1#n}))"
}

# Run a Slurm client command (or anything that talks to slurmctld) where
# slurmctld can be reached: the service namespace of a multi-node bed.
slurm() {
	if [[ $MODE == multi ]]; then
		nsenter --net="/run/netns/$SVC_NS" -- "${RUN_IN[@]}" "$@"
	else
		"${RUN_IN[@]}" "$@"
	fi
}

ns_exists() {
	[[ -e /run/netns/$1 ]] && ip netns list 2>/dev/null | awk '{print $1}' | grep -qxF "$1"
}

# The bed's namespaces present now (any node count), by name.
bed_namespaces() {
	ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${NETNS_PREFIX}(svc|n[0-9]+)\$" || true
}

# Pid of node $1's holder, if it runs and is ours.
holder_pid() {
	local f=$NODEDIR/$1/holder.pid pid
	[[ -r $f ]] || return 1
	pid=$(tr -dc '0-9' <"$f") || return 1
	[[ -n $pid ]] || return 1
	{ tr '\0' ' ' <"/proc/$pid/cmdline"; } 2>/dev/null | grep -qF "stagehand-testbed-node $TB_DIR $1 " || return 1
	echo "$pid"
}

# Mounts made under the state directory later (a test's small tmpfs under
# scratch/) must reach the nodes as they would on a shared file system: the
# state directory becomes a shared mount, the nodes' copies its slaves.
ensure_shared_tb() {
	local d line
	d=$(readlink -f "$TB_DIR")
	line=$(awk -v d="$d" '$5 == d' /proc/self/mountinfo | tail -n1)
	if [[ -z $line ]]; then
		mount --bind "$d" "$d" || die "mount --bind $d $d failed"
		line=$(awk -v d="$d" '$5 == d' /proc/self/mountinfo | tail -n1)
	fi
	[[ $line == *shared:* ]] || mount --make-shared "$d" || die "mount --make-shared $d failed"
}

release_shared_tb() {
	local d
	d=$(readlink -f "$TB_DIR")
	if awk -v d="$d" '$5 == d' /proc/self/mountinfo | grep -q .; then
		umount -l "$d" 2>/dev/null || note "warning: could not unmount the bind mount $d"
	fi
}

start_holder() {
	local node=$1 ns=${NETNS_PREFIX}$1 pidf=$NODEDIR/$1/holder.pid i
	rm -f "$pidf"
	# nsenter, unshare, bash and sleep exec one another: one process. The
	# hostname, the tmpfs over run/ and the node's spool are set up inside.
	# shellcheck disable=SC2016
	# In a release bed ($7: the Slurm root, seen from here) the node's
	# mounts are made at the root's paths as well, and the holder lives
	# chrooted in it, so that whatever enters the node with nsenter -r runs
	# that release.
	setsid nsenter --net="/run/netns/$ns" -- unshare --uts --mount --propagation slave -- \
		/bin/bash -c 'set -e
			echo "$1" >/proc/sys/kernel/hostname
			mount -t tmpfs -o mode=0755,size=4m "stagehand-testbed-$1-run" "$2"
			mount --bind "$3" "$4"
			if [[ -n $7 ]]; then
				mount -t tmpfs -o mode=0755,size=4m "stagehand-testbed-$1-run" "$7$2"
				mount --bind "$3" "$7$4"
			fi
			echo $$ >"$5"
			[[ -z $7 ]] || exec chroot "$7" /bin/bash -c "exec -a \"stagehand-testbed-node $6 $1\" sleep infinity"
			exec -a "stagehand-testbed-node $6 $1" sleep infinity' \
		holder "$node" "$RUNDIR" "$NODEDIR/$node/stagehand-spool" "$SH_SPOOL" "$pidf" "$TB_DIR" "$RP" \
		</dev/null >>"$LOGDIR/holder-$node.log" 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
	for ((i = 0; i < 50; i++)); do
		holder_pid "$node" >/dev/null && return 0
		sleep 0.1
	done
	tail -n 5 "$LOGDIR/holder-$node.log" >&2 || true
	die "the namespace holder of node $node did not start (log $LOGDIR/holder-$node.log)"
}

# Is node $1 complete: holder, namespace, veth pair and address?
node_net_ok() {
	local node=$1 ns=${NETNS_PREFIX}$1 pid
	pid=$(holder_pid "$node") || return 1
	ns_exists "$ns" || return 1
	[[ "$(stat -L -c %i "/run/netns/$ns")" == "$(stat -L -c %i "/proc/$pid/ns/net")" ]] || return 1
	ip -n "$SVC_NS" link show "v-$node" >/dev/null 2>&1 || return 1
	ip -n "$ns" -4 addr show dev eth0 2>/dev/null | grep -qF "inet $(node_addr "$node")/24"
}

svc_net_ok() {
	ns_exists "$SVC_NS" && ip -n "$SVC_NS" -4 addr show dev br0 2>/dev/null | grep -qF "inet $SVC_ADDR/24"
}

node_net_up() {
	local node=$1 ns=${NETNS_PREFIX}$1 addr
	node_net_ok "$node" && return 0
	node_net_down "$node"
	addr=$(node_addr "$node")
	note "creating compute node $node: namespace $ns, address $addr"
	install -d -m 0755 "$NODEDIR/$node" "$NODEDIR/$node/spool"
	install -d -m 0700 "$NODEDIR/$node/stagehand-spool"
	ip netns add "$ns" || die "ip netns add $ns failed"
	ip -n "$ns" link set lo up
	ip -n "$SVC_NS" link add "v-$node" type veth peer name eth0 netns "$ns" ||
		die "cannot create the veth pair v-$node (in $SVC_NS) / eth0 (in $ns)"
	ip -n "$SVC_NS" link set "v-$node" master br0 up
	ip -n "$ns" addr add "$addr/24" dev eth0
	ip -n "$ns" link set eth0 up
	start_holder "$node"
}

# Remove node $1: every process left in its namespaces (holder, stray
# slurmd, job processes), the veth pair and the namespace.
node_net_down() {
	local node=$1 ns=${NETNS_PREFIX}$1 pid pids
	if pid=$(holder_pid "$node"); then
		kill -KILL "$pid" 2>/dev/null || true
	fi
	if ns_exists "$ns"; then
		pids=$(ip netns pids "$ns" 2>/dev/null | grep -vx "$$" | tr "\n" " " || true)
		if [[ -n ${pids// /} ]]; then
			# shellcheck disable=SC2086
			kill -KILL $pids 2>/dev/null || true
		fi
	fi
	ip -n "$SVC_NS" link del "v-$node" 2>/dev/null || true
	ns_exists "$ns" && { ip netns del "$ns" || note "warning: ip netns del $ns failed"; }
	rm -f "$NODEDIR/$node/holder.pid"
}

net_up() {
	local ns node k
	ensure_shared_tb
	install -d -m 0755 "$NODEDIR"
	install -d -m 0700 "$SH_SPOOL"
	if ! svc_net_ok; then
		# A service namespace without its bridge cannot carry the nodes.
		for ns in $(bed_namespaces); do
			[[ $ns == "$SVC_NS" ]] || node_net_down "${ns#"$NETNS_PREFIX"}"
		done
		ns_exists "$SVC_NS" && ip netns del "$SVC_NS"
		note "creating the service namespace $SVC_NS: bridge br0, address $SVC_ADDR"
		ip netns add "$SVC_NS" || die "ip netns add $SVC_NS failed"
		ip -n "$SVC_NS" link set lo up
		ip -n "$SVC_NS" link add br0 type bridge || die "cannot create bridge br0 in $SVC_NS"
		ip -n "$SVC_NS" addr add "$SVC_ADDR/24" dev br0
		ip -n "$SVC_NS" link set br0 up
	fi
	# The host's namespace has no address on the bed's subnet, so its default
	# route would send a stray packet for those addresses (a command run
	# outside the service namespace by mistake) off the machine. An
	# unreachable route makes such a packet fail here, at once. "up" may run
	# inside the service namespace (tests reconfigure the bed from there):
	# the route goes into the initial namespace, where kthreadd (pid 2) is.
	nsenter --net=/proc/2/ns/net ip route replace unreachable "$SUBNET" ||
		die "cannot add the guard route 'unreachable $SUBNET' in the host's namespace"
	for node in "${NODES[@]}"; do
		node_net_up "$node"
	done
	# Nodes of an earlier, bigger bed.
	for ns in $(bed_namespaces); do
		[[ $ns =~ ^${NETNS_PREFIX}n([0-9]+)$ ]] || continue
		k=${BASH_REMATCH[1]}
		((k >= 1 && k <= NODE_COUNT)) || node_net_down "n$k"
	done
}

net_down() {
	local ns
	for ns in $(bed_namespaces); do
		[[ $ns == "$SVC_NS" ]] || node_net_down "${ns#"$NETNS_PREFIX"}"
	done
	if ns_exists "$SVC_NS"; then
		ip netns del "$SVC_NS" || note "warning: ip netns del $SVC_NS failed"
	fi
	nsenter --net=/proc/2/ns/net ip route del unreachable "$SUBNET" 2>/dev/null || true
	release_shared_tb
}

# exec svc|NODE CMD...: run CMD (with SLURM_CONF) in the service namespace or
# in compute node NODE's namespaces, from the current directory.
cmd_exec() {
	local target=${1:-} node pid
	[[ -n $target && $# -ge 2 ]] || die "usage: $PROG exec svc|NODE CMD..."
	shift
	need_root exec
	load_topology
	if [[ $MODE != multi ]]; then
		[[ $target == svc || $target == "$NODE" ]] ||
			die "the one-node bed has 'svc' and '$NODE' (both this host), not '$target'"
		exec "${RUN_IN[@]}" env SLURM_CONF="$CONF" "$@"
	fi
	case $target in
	svc | "$SVC_NS")
		ns_exists "$SVC_NS" || die "the service namespace $SVC_NS does not exist: run '$PROG up --nodes N'"
		exec nsenter --net="/run/netns/$SVC_NS" -- "${RUN_IN[@]}" env SLURM_CONF="$CONF" "$@"
		;;
	esac
	node=${target#"$NETNS_PREFIX"}
	printf '%s\n' "${NODES[@]}" | grep -qxF "$node" ||
		die "no compute node '$target' in this bed (nodes: ${NODES[*]}; or svc)"
	pid=$(holder_pid "$node") || die "compute node $node is not up (no holder process): run '$PROG up'"
	# The holder's root (a release bed's root) and this directory in it.
	local wd=$PWD
	[[ -d $RP$wd ]] || wd=/
	exec nsenter -t "$pid" -n -u -m -r --wdns="$wd" -- env SLURM_CONF="$CONF" "$@"
}
