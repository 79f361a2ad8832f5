#!/usr/bin/env bats
# stagehand doctor --role (docs/admin-guide.md, "Checking a host: stagehand
# doctor --role"): on each host of the bed, the checks of its kind pass: the
# service host as controller and as daemon host, every compute node as a
# node, the last node as a login host too. Then one thing per role is broken
# in a copy of its file (slurm.conf, plugstack.conf, stagehand.conf, PATH),
# and that check fails with exit 1, the file or host, and its fix. The
# bed's own files are never changed.

load helpers

setup_file() {
	testbed_require
	daemon_require
	spank_require
}

setup() {
	testbed_env
	STAGEHAND=$STAGEHAND_BUILD_DIR/cli/stagehand
	ETC=$STAGEHAND_TESTBED_DIR/etc
	# Copies live beside slurm.conf (the doctor looks for the Lua scripts
	# there) and under the bed's directory (the nodes see it, not /tmp).
	T=$STAGEHAND_TESTBED_DIR/doctor-roles
	rm -rf "$T"
	mkdir -p "$T"
	SLURM_COPY=$ETC/slurm-doctor-roles.conf
	# A client host's stagehand.conf: the bed's, with Server= (what the
	# install page gives login and compute nodes).
	CLIENT=$T/client.conf
	cp "$STAGEHAND_TESTBED_CONF" "$CLIENT"
	if [[ -n ${STAGEHAND_SERVER:-} ]]; then
		echo "Server=$STAGEHAND_SERVER" >>"$CLIENT"
	fi
	# The daemon host's stagehandd: the build's, as the bed runs it.
	PATH=$STAGEHAND_BUILD_DIR/daemon:$PATH
	read -ra NODES <<<"${STAGEHAND_TESTBED_NODES:-$STAGEHAND_TESTBED_NODE}"
}

teardown() {
	rm -rf "$T" "$SLURM_COPY"
}

# role HOST ROLE [ARGS...]: the doctor with --role on HOST (svc: here), the
# caller's STAGEHAND_SERVER/SOCKET left out (users' shells do not have them);
# the JSON report in $out, the exit status in $status.
role() {
	local host=$1
	shift
	if [[ $host == svc ]]; then
		run env -u STAGEHAND_SERVER -u STAGEHAND_SOCKET "$STAGEHAND" doctor --json --role "$@"
	else
		run on_node "$host" env -u STAGEHAND_SERVER -u STAGEHAND_SOCKET "$STAGEHAND" doctor --json --role "$@"
	fi
	out=$output
	echo "$out" | jq -c '.checks[] | select(.status != "ok")' >&3 || true
}

# green ROLE CHECK...: exit 0, ok, the role named, each CHECK there and ok.
green() {
	local r=$1 c
	shift
	[ "$status" -eq 0 ] || { echo "exit $status: $out"; return 1; }
	echo "$out" | jq -e --arg r "$r" '.ok == true and .role == $r' >/dev/null
	for c in "$@"; do
		echo "$out" | jq -e --arg c "$c" '[.checks[] | select(.check == $c)] | length > 0 and all(.status == "ok")' >/dev/null ||
			{ echo "$r: check $c not all ok: $out"; return 1; }
	done
}

# fails CHECK MESSAGE-REGEX HINT-REGEX: exit 1, and CHECK failed with both.
fails() {
	[ "$status" -eq 1 ] || { echo "exit $status, expected 1: $out"; return 1; }
	echo "$out" | jq -e --arg c "$1" --arg re "$2" --arg h "$3" \
		'[.checks[] | select(.check == $c and .status == "fail" and (.message | test($re)) and (.hint | test($h)))] | length > 0' >/dev/null ||
		{ echo "no failed '$1' check matching /$2/ with a hint matching /$3/ in: $out"; return 1; }
}

@test "every host of the bed passes the checks of its role" {
	role svc controller --config "$STAGEHAND_TESTBED_CONF" --slurm-conf "$SLURM_CONF"
	green controller config slurm.conf lua-version lua-files trusted-uids server daemon munge lua site
	# The bed's slurm.conf leaves PluginDir to Slurm: slurmctld is asked.
	if ! grep -qi '^PluginDir=' "$SLURM_CONF"; then
		echo "$out" | jq -e '.checks[] | select(.check == "lua-version") | .message | test("_lua\\.so loads Lua 5\\.[1-4] \\(PluginDir from scontrol show config\\)")' >/dev/null
	fi
	role svc daemon --config "$STAGEHAND_TESTBED_CONF"
	green daemon config stagehandd state daemon munge xattr scratch archive
	# The daemon host answers on its socket, and on ListenAddress= (multi-node: TCP + MUNGE).
	echo "$out" | jq -e '[.checks[] | select(.check == "daemon" and .status == "ok")] | length >= 1' >/dev/null
	if [[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]]; then
		echo "$out" | jq -e '.checks[] | select(.check == "daemon") | .message | test("TCP \\+ MUNGE, target from ListenAddress=")' >/dev/null
	fi
	for n in "${NODES[@]}"; do
		role "$n" node --config "$CLIENT" --slurm-conf "$SLURM_CONF"
		green node config slurm.conf plugstack slurm-release server daemon munge xattr scratch
	done
	role "${NODES[-1]}" login --config "$CLIENT"
	green login config sbatch server daemon munge
	# Text output names the role.
	run on_node "${NODES[0]}" env -u STAGEHAND_SERVER -u STAGEHAND_SOCKET "$STAGEHAND" doctor --role node \
		--config "$CLIENT" --slurm-conf "$SLURM_CONF"
	[ "$status" -eq 0 ]
	[[ $output == *"stagehand doctor (role node): no problems found"* ]]
}

@test "controller: a non-root SlurmUser missing from TrustedUids; another Lua than Slurm's; a module not found" {
	local uid
	uid=$(id -u "$TESTBED_USER")
	sed "s/^SlurmUser=.*/SlurmUser=$TESTBED_USER/" "$SLURM_CONF" >"$SLURM_COPY"
	role svc controller --config "$STAGEHAND_TESTBED_CONF" --slurm-conf "$SLURM_COPY"
	fails trusted-uids "slurm-doctor-roles.conf:[0-9]+: SlurmUser=$TESTBED_USER \\(uid $uid\\) is not in TrustedUids=0 " \
		"set TrustedUids=0,$uid in .*stagehand.conf"
	cp "$STAGEHAND_TESTBED_CONF" "$T/trusted.conf"
	echo "TrustedUids=0,$uid" >>"$T/trusted.conf"
	role svc controller --config "$T/trusted.conf" --slurm-conf "$SLURM_COPY"
	echo "$out" | jq -e --arg u "$uid" '.checks[] | select(.check == "trusted-uids" and .status == "ok") | .message | test("uid " + $u + "\\) is in TrustedUids=0," + $u)' >/dev/null
	# Slurm's hook plugin loads Lua 5.1 (Debian 12): checking under 5.4 is refused.
	if command -v lua5.4 >/dev/null; then
		role svc controller --config "$STAGEHAND_TESTBED_CONF" --slurm-conf "$SLURM_CONF" --lua lua5.4
		fails lua-version "_lua\\.so loads Lua 5\\.1 but lua5\\.4 is Lua 5\\.4" "--lua lua5.x"
	fi
	# slurm.conf in a directory with the hook scripts but not their modules.
	install -d "$T/etc"
	cp "$SLURM_CONF" "$T/etc/slurm.conf"
	cp -L "$ETC"/job_submit.lua "$ETC"/burst_buffer.lua "$T/etc/"
	role svc controller --config "$STAGEHAND_TESTBED_CONF" --slurm-conf "$T/etc/slurm.conf"
	# The build's data directory (where make install puts the modules), as make knows it.
	datadir=$(printf 'doctor-datadir:\n\t@echo $(pkgdatadir)\n' |
		MAKEFLAGS= MAKELEVEL= make -s --no-print-directory -C "$STAGEHAND_BUILD_DIR/lua" \
			-f Makefile -f - doctor-datadir)
	[ -n "$datadir" ]
	if [ -e "$datadir/stagehand_dsl.lua" ]; then
		# Stagehand is installed on this host: the modules come from its data directory.
		echo "$out" | jq -e '.checks[] | select(.check == "lua-files" and .status == "ok") | .message | test("stagehand_dsl.lua \\(data directory\\)")' >/dev/null
		return 0
	fi
	fails lua-files "stagehand_dsl\\.lua is neither beside .* nor in the package data directory \\(stat $T/etc/stagehand_dsl\\.lua: No such file or directory; stat $datadir/stagehand_dsl\\.lua: No such file or directory\\)" \
		"install stagehand's Lua files"
}

@test "node: no stagehand.so line, scratch= other than the daemon's first ScratchRoots, no Server=" {
	local n=${NODES[0]}
	grep -v 'stagehand\.so' "$ETC/plugstack.conf" >"$T/plugstack.conf"
	sed "/^PlugStackConfig=/d" "$SLURM_CONF" >"$SLURM_COPY"
	echo "PlugStackConfig=$T/plugstack.conf" >>"$SLURM_COPY"
	role "$n" node --config "$CLIENT" --slurm-conf "$SLURM_COPY"
	fails plugstack "$T/plugstack.conf has no 'required\\|optional .*/stagehand.so' line" \
		"add the line .* restart slurmd"
	sed "/stagehand\\.so/ s#scratch=[^ ]*#scratch=$STAGEHAND_TESTBED_SCRATCH/elsewhere#" \
		"$ETC/plugstack.conf" >"$T/plugstack.conf"
	role "$n" node --config "$CLIENT" --slurm-conf "$SLURM_COPY"
	fails plugstack "plugstack.conf:[0-9]+: scratch=$STAGEHAND_TESTBED_SCRATCH/elsewhere is not $STAGEHAND_TESTBED_SCRATCH, the first entry of stagehandd's \\(/v1/health\\) ScratchRoots" \
		"set scratch=$STAGEHAND_TESTBED_SCRATCH on the stagehand.so line .* restart slurmd"
	# The daemon's list counts, not the node's file: a node file naming the
	# wrong root first does not make the line right.
	sed "s#^ScratchRoots=.*#ScratchRoots=$STAGEHAND_TESTBED_SCRATCH/elsewhere#" "$CLIENT" >"$T/wrong-roots.conf"
	role "$n" node --config "$T/wrong-roots.conf" --slurm-conf "$SLURM_COPY"
	fails plugstack "scratch=$STAGEHAND_TESTBED_SCRATCH/elsewhere is not $STAGEHAND_TESTBED_SCRATCH, the first" "set scratch="
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]] || skip "one-node bed: the daemon's socket is on this host"
	role "$n" node --config "$STAGEHAND_TESTBED_CONF" --slurm-conf "$SLURM_CONF"
	fails server "stagehand.conf sets no Server=, so stagehand here looks for the daemon's UNIX socket: stat .*: No such file or directory" \
		"add Server=HOST:PORT \\(the daemon host's ListenAddress=\\) to .*stagehand.conf"
}

@test "daemon: stagehandd refusing its file, StateDB's directory missing, ArchiveRoot missing, ListenAddress= not answering" {
	sed 's/^Workers=.*/Workers=lots/' "$STAGEHAND_TESTBED_CONF" >"$T/daemon.conf"
	role svc daemon --config "$T/daemon.conf"
	fails stagehandd "stagehandd -c $T/daemon.conf --check-config: .*daemon.conf:[0-9]+: error: Workers must be an integer" \
		"stagehandd refuses to start"
	sed -e "s#^StateDB=.*#StateDB=$T/gone/stagehand.db#" -e "s#^ArchiveRoot=.*#ArchiveRoot=$T/no-archive#" \
		"$STAGEHAND_TESTBED_CONF" >"$T/daemon.conf"
	role svc daemon --config "$T/daemon.conf"
	fails state "StateDB=$T/gone/stagehand.db: stat $T/gone: No such file or directory" \
		"install -d -m 0700 $T/gone"
	fails archive "ArchiveRoot=$T/no-archive: stat $T/no-archive: No such file or directory" \
		"mount the archive file system"
	# stagehandd starts with it, and says so.
	echo "$out" | jq -e --arg re "--check-config: ArchiveRoot $T/no-archive: No such file or directory" \
		'[.checks[] | select(.check == "stagehandd" and .status == "warn" and (.message | test($re)))] | length == 1' >/dev/null
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]] || skip "one-node bed: no ListenAddress="
	sed "s#^ListenAddress=.*#ListenAddress=${STAGEHAND_SERVER%:*}:1#" "$STAGEHAND_TESTBED_CONF" >"$T/daemon.conf"
	role svc daemon --config "$T/daemon.conf"
	fails daemon "${STAGEHAND_SERVER%:*}:1.*refused.*target from ListenAddress= at $T/daemon.conf:[0-9]+" \
		"start stagehandd .* ListenAddress="
}

@test "login: sbatch not on PATH; no Server=" {
	local n=${NODES[-1]}
	install -d "$T/empty"
	run on_node "$n" env -u STAGEHAND_SERVER -u STAGEHAND_SOCKET PATH="$T/empty" "$STAGEHAND" doctor \
		--json --role login --config "$CLIENT"
	out=$output
	fails sbatch "cannot run sbatch: No such file or directory \\(PATH=$T/empty\\)" "apt-get install slurm-client"
	echo "$out" | jq -e '.checks[] | select(.check == "cli" and .status == "warn") | .hint | test("install the stagehand package")' >/dev/null
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]] || skip "one-node bed: the daemon's socket is on this host"
	role "$n" login --config "$STAGEHAND_TESTBED_CONF"
	fails server "sets no Server=" "add Server=HOST:PORT"
}
