#!/usr/bin/env bats
# Mover jobs on the multi-node test bed (scripts/testbed up --nodes 3: the
# daemon runs with MoverPartition=xfer, a partition over n2 and n3). A big
# archive is split into shards, each a real Slurm batch job of the owner
# running stagehand-mover, which reports to the daemon over TCP + MUNGE.
# This file makes requests "big" with small shard sizes (stagehand.conf is
# edited and reloaded with SIGHUP, then restored) and slows each mover down
# (MoverBandwidth) so that a test can act while shards run.
#
# Skipped on a one-node bed (expected: tests/integration/expected-skips).

load helpers

CONF_ADD=(MoverShardFiles=8 MoverBandwidth=256K MoverMaxJobs=4)

setup_file() {
	testbed_require
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]] || return 0
	conf=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	grep -qx 'MoverPartition=xfer' "$conf" ||
		_tb_fail "$conf has no MoverPartition=xfer (scripts/testbed up --nodes 3 writes it)" || return 1
	conf_extend "$BATS_FILE_TMPDIR" 0670-movers.bats "${CONF_ADD[@]}"
}

teardown_file() {
	conf_restore "$BATS_FILE_TMPDIR"
}

setup() {
	testbed_env
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]] ||
		skip "one-node test bed (STAGEHAND_TESTBED_NODES='${STAGEHAND_TESTBED_NODES:-}'; scripts/testbed up --nodes 3 for these)"
	XFER_NODES=$(sinfo -h -p xfer -o %N)
	[[ -n $XFER_NODES ]] || skip "one-node test bed: no xfer partition"
	STAGEHAND=$STAGEHAND_BUILD_DIR/cli/stagehand
	LOG=$STAGEHAND_TESTBED_LOGDIR/stagehandd.log
	DB="file:$STAGEHAND_TESTBED_DIR/state/stagehand.db?mode=ro"
	WD=$(user_workdir)
	RID=""
	NODE_DOWN=""
	YCONF=""
	USERJOB=""
	STALLER=""
}

teardown() {
	[[ -z ${STALLER:-} ]] || kill "$STALLER" 2>/dev/null || true
	[[ -z ${USERJOB:-} ]] || scancel "$USERJOB" 2>/dev/null || true
	if [[ -n ${YCONF:-} ]]; then
		cp -p "$YCONF" "$STAGEHAND_TESTBED_DIR/etc/stagehand.conf"
		reload_daemon
	fi
	if [[ -n ${NODE_DOWN:-} ]]; then
		"$TESTBED" up >/dev/null 2>&1
		wait_for 180 node_back "$NODE_DOWN"
	fi
	[[ -n ${RID:-} ]] || return 0
	# No mover job of this test outlives it.
	local ids
	ids=$(squeue -h -n "stagehand-mover-$RID" -o %i 2>/dev/null)
	[[ -z $ids ]] || scancel $ids 2>/dev/null || true
	run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" cancel "r$RID" >/dev/null 2>&1 || true
}

db() {
	sqlite3 -batch -noheader "$DB" "$1"
}

# tree DIR FILES KIB: FILES files of KIB KiB each (random), owned by shtest.
tree() {
	run_as_user shtest bash -c 'mkdir -p "$1/d1/d2" && for ((i = 0; i < $2; i++)); do
		case $((i % 3)) in 0) p=$1 ;; 1) p=$1/d1 ;; *) p=$1/d1/d2 ;; esac
		head -c $(($3 * 1024 + i)) /dev/urandom >"$p/f$i"; done && ln -s f0 "$1/link"' \
		_ "$1" "$2" "$3"
}

# leaf_tree DIR NDIRS PER KIB: NDIRS directories of PER files (KIB KiB and a
# few bytes each), no file in DIR itself.
leaf_tree() {
	run_as_user shtest bash -c 'for ((d = 0; d < $2; d++)); do mkdir -p "$1/d$d"
		for ((i = 0; i < $3; i++)); do
			head -c $(($4 * 1024 + d * $3 + i)) /dev/urandom >"$1/d$d/f$i"; done; done' \
		_ "$1" "$2" "$3" "$4"
}

archive() {
	local out
	out=$(run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" submit --archive "$1" "$2" --json) ||
		_tb_fail "stagehand submit failed: $out" || return 1
	RID=$(jq -r .id <<<"$out")
	[[ $RID =~ ^[0-9]+$ ]] || _tb_fail "no request id in: $out"
}

req_state() {
	db "SELECT state FROM requests WHERE id=$RID"
}

wait_req() {
	local want=$1 timeout=${2:-120}
	if ! wait_for "$timeout" eval '[[ $(req_state) == '"$want"' ]]'; then
		echo "request $RID: $(db "SELECT state, error FROM requests WHERE id=$RID")" >&2
		db "SELECT * FROM shards WHERE request_id=$RID" >&2
		grep "request ${RID}[: ]" "$LOG" | tail -n 30 >&2
		return 1
	fi
}

# Slurm job ids of the request's mover jobs, from the daemon's log (every one ever submitted).
mover_jobs() {
	sed -n "s/.*request $RID: shard [0-9]* ([^)]*): mover job \([0-9]*\) submitted.*/\1/p" "$LOG"
}

# The tree was copied whole, each file verified and counted exactly once.
check_archive() {
	local src=$1 dst=$2 n
	diff -r --no-dereference "$src" "$dst"
	n=$(find "$src" -type f | wc -l)
	[ "$(db "SELECT files_total, files_done, bytes_total = bytes_done FROM requests WHERE id=$RID")" = "$n|$n|1" ]
	[ "$(db "SELECT count(*) FROM items WHERE request_id=$RID AND type='file' AND state='done'")" -eq "$n" ]
	[ "$(db "SELECT count(*) FROM audit WHERE request_id=$RID")" -eq "$n" ]
	[ "$(db "SELECT count(DISTINCT path_dst) FROM audit WHERE request_id=$RID")" -eq "$n" ]
	[ "$(getfattr --only-values -n user.stagehand.policy "$src")" = archived ]
}

# on_two_nodes JOB...: each a completed mover job of shtest on the xfer
# partition; together they ran on at least 2 nodes.
on_two_nodes() {
	local jid nodes=()
	for jid in "$@"; do
		[ "$(job_field "$jid" UserId)" = "shtest($(id -u shtest))" ] || return 1
		[ "$(job_field "$jid" Partition)" = xfer ] || return 1
		[ "$(job_field "$jid" JobState)" = COMPLETED ] || return 1
		nodes+=("$(job_field "$jid" BatchHost)")
	done
	echo "mover jobs $* ran on ${nodes[*]}"
	[ "$(printf '%s\n' "${nodes[@]}" | sort -u | wc -l)" -ge 2 ]
}

@test "movers: a tree is archived by mover jobs of its owner on two nodes, then verified" {
	tree "$WD/t" 32 64
	archive "$WD/t" "$STAGEHAND_TESTBED_ARCHIVE/shtest/m1"
	# The movers show in squeue under the owner's name and the request's job name.
	wait_for 30 eval '[[ -n $(squeue -h -u shtest -n stagehand-mover-$RID -o %i) ]]'
	wait_req done 180
	[ "$(db "SELECT count(*) FROM shards WHERE request_id=$RID AND state='done'")" -eq 4 ]
	mapfile -t jobs < <(mover_jobs)
	[ "${#jobs[@]}" -eq 4 ]
	on_two_nodes "${jobs[@]}"
	check_archive "$WD/t" "$STAGEHAND_TESTBED_ARCHIVE/shtest/m1"
	[ -L "$STAGEHAND_TESTBED_ARCHIVE/shtest/m1/link" ]
}

@test "movers: a mover killed mid-shard: its shard runs again, nothing lost, nothing done twice" {
	# 32 files in 8 leaf directories of 4 (none in the root): the 4 shards
	# of 8 are runs of the walk (depth first, each directory in readdir
	# order, as find walks it), so the last shard holds the last two
	# directories walked. Its mover is held in its open of the walk's last
	# file: it has verified the other directory's 4 files (SyncMode=batch
	# makes small files durable and reports them a directory's batch at a
	# time, once all of that batch's copies are over: what shares the held
	# file's directory waits with it, the other directory does not) and is
	# surely alive when it is killed. Whatever the file system's
	# readdir order (with files in the root as well, tmpfs's order put the
	# held file's batch first and nothing was ever reported).
	leaf_tree "$WD/t" 8 4 192
	last=$(cd "$WD/t" && find . -type f -printf '%P\n' | tail -n1)
	stall_mover_open "$WD/t/$last"
	archive "$WD/t" "$STAGEHAND_TESTBED_ARCHIVE/shtest/m2"
	read -r -t 120 pid <&"${STALL[0]}"
	[[ $pid =~ ^[0-9]+$ ]]
	idx=$(db "SELECT idx FROM shard_files WHERE request_id=$RID AND relpath='$last'")
	[[ $idx =~ ^[0-9]+$ ]]
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "--request $RID --shard $idx"
	wait_for 30 eval '[[ -n $(db "SELECT slurm_job FROM shards WHERE request_id=$RID AND idx=$idx") ]]'
	shard_done() {
		db "SELECT count(*) FROM items i JOIN shard_files f ON f.request_id=i.request_id
		    AND f.relpath=i.relpath WHERE i.request_id=$RID AND f.idx=$idx AND i.state='done'"
	}
	# ... has verified part of its shard (at least 2 files) ...
	wait_for 120 eval '[[ $(shard_done) -ge 2 ]]'
	job=$(db "SELECT slurm_job FROM shards WHERE request_id=$RID AND idx=$idx")
	[[ $(db "SELECT state FROM shards WHERE request_id=$RID AND idx=$idx") == submitted ]]
	# ... and is killed before it finishes (SIGKILL: no chance to report anything).
	kill -KILL "$pid"
	before=$(shard_done)
	kill "$STALLER"
	wait_req done 240
	grep -q "request $RID: shard $idx: mover job $job ended FAILED on .* without reporting its result" "$LOG"
	[ "$(db "SELECT attempts FROM shards WHERE request_id=$RID AND idx=$idx")" -eq 2 ]
	# The second mover took the verified files as done (resume set), not again.
	grep -Eq "request $RID: shard $idx: mover fetched [0-9]+ files, ([1-9][0-9]*) of them verified before" "$LOG"
	again=$(sed -n "s/.*request $RID: shard $idx: mover fetched [0-9]* files, \([0-9]*\) of them verified before.*/\1/p" "$LOG" | tail -n1)
	[ "$again" -ge "$before" ]
	check_archive "$WD/t" "$STAGEHAND_TESTBED_ARCHIVE/shtest/m2"
}

@test "movers: cancelling the request cancels its mover jobs" {
	tree "$WD/t" 32 192
	# A mover is held in its open of the tree: it is running when the
	# request is cancelled, however fast the copy would be.
	stall_mover_open "$WD/t"
	archive "$WD/t" "$STAGEHAND_TESTBED_ARCHIVE/shtest/m3"
	read -r -t 120 held <&"${STALL[0]}"
	[[ $held =~ ^[0-9]+$ ]]
	[ "$(squeue -h -n stagehand-mover-$RID -t RUNNING -o %i | wc -l)" -ge 1 ]
	run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" cancel "r$RID"
	wait_for 30 eval '[[ -z $(squeue -h -n stagehand-mover-$RID -o %i) ]]'
	[ "$(req_state)" = cancelled ]
	for jid in $(mover_jobs); do
		[[ $(job_field "$jid" JobState) =~ ^(CANCELLED|COMPLETED)$ ]]
	done
	grep -q "request $RID: mover job [0-9]* (shard [0-9]*) cancelled: request cancelled" "$LOG"
	sleep 3
	[ -z "$(squeue -h -n "stagehand-mover-$RID" -o %i)" ]
}

# Byte ranges: MoverShardBytes=32M, and each mover at 8 MiB/s (a range of
# 32 MiB takes about 8 s with its read-back), for this test only. Three
# ranges and a shard of small files are 4 mover jobs (MoverMaxJobs=4): all
# run at once on the two 2-CPU nodes of the xfer partition.
ranged_conf() {
	local conf=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	cp -p "$conf" "$BATS_TEST_TMPDIR/stagehand.conf.movers"
	YCONF=$BATS_TEST_TMPDIR/stagehand.conf.movers
	sed -i 's/^MoverBandwidth=.*/MoverBandwidth=8M/' "$conf"
	echo MoverShardBytes=32M >>"$conf"
	reload_daemon
}

# bigtree DIR: one file of 96 MiB (three ranges) and 4 small files (a shard of their own).
bigtree() {
	run_as_user shtest bash -c 'mkdir -p "$1/d" && head -c 96M /dev/urandom >"$1/d/big" &&
		for i in 0 1 2 3; do head -c $((64 * 1024 + i)) /dev/urandom >"$1/s$i"; done' _ "$1"
}

# The big file was finished once, from its ranges, and counted as one file.
check_ranged() {
	local src=$1 dst=$2
	check_archive "$src" "$dst"
	cmp "$src/d/big" "$dst/d/big"
	[ "$(db "SELECT count(*) FROM audit WHERE request_id=$RID AND path_dst LIKE '%/d/big'")" -eq 1 ]
	[[ $(db "SELECT checksum_dst FROM items WHERE request_id=$RID AND relpath='d/big'") == ranges-* ]]
	[ "$(db "SELECT count(*) FROM shard_ranges WHERE request_id=$RID AND relpath='d/big' AND done=1")" -eq 3 ]
	[ -z "$(find "$dst" -name '.*stagehand-*')" ]
}

@test "movers: a big file is split by byte range, copied by mover jobs on two nodes, then verified" {
	ranged_conf
	bigtree "$WD/r"
	archive "$WD/r" "$STAGEHAND_TESTBED_ARCHIVE/shtest/r1"
	wait_req done 120
	[ "$(db "SELECT count(*) FROM shards WHERE request_id=$RID")" -eq 4 ]
	# Each range was copied by its own mover job; those ran on two nodes.
	mapfile -t jobs < <(db "SELECT DISTINCT s.slurm_job FROM shard_ranges g JOIN shards s ON
		s.request_id=g.request_id AND s.idx=g.idx WHERE g.request_id=$RID AND g.relpath='d/big'")
	[ "${#jobs[@]}" -eq 3 ]
	on_two_nodes "${jobs[@]}"
	check_ranged "$WD/r" "$STAGEHAND_TESTBED_ARCHIVE/shtest/r1"
}

@test "movers: a mover killed mid-range: the range is copied again, the file finished and counted once" {
	ranged_conf
	bigtree "$WD/r"
	# The first mover to open the big file is held in that open: its range
	# is surely unfinished when it is killed, however fast the copy would be.
	stall_mover_open "$WD/r/d/big"
	archive "$WD/r" "$STAGEHAND_TESTBED_ARCHIVE/shtest/r2"
	read -r -t 120 pid <&"${STALL[0]}"
	[[ $pid =~ ^[0-9]+$ ]]
	idx=$(tr '\0' ' ' <"/proc/$pid/cmdline" | sed -n "s/.*--request $RID --shard \([0-9]*\).*/\1/p")
	[[ $idx =~ ^[0-9]+$ ]]
	[ "$(db "SELECT count(*) FROM shard_ranges WHERE request_id=$RID AND idx=$idx AND relpath='d/big'")" -eq 1 ]
	wait_for 30 eval '[[ -n $(db "SELECT slurm_job FROM shards WHERE request_id=$RID AND idx=$idx") ]]'
	job=$(db "SELECT slurm_job FROM shards WHERE request_id=$RID AND idx=$idx")
	# ... and has not finished it when it is killed (SIGKILL: it reports nothing).
	[ "$(db "SELECT done FROM shard_ranges WHERE request_id=$RID AND idx=$idx")" -eq 0 ]
	kill -KILL "$pid"
	kill "$STALLER"
	wait_req done 120
	grep -q "request $RID: shard $idx: mover job $job ended FAILED on .* without reporting its result" "$LOG"
	[ "$(db "SELECT attempts FROM shards WHERE request_id=$RID AND idx=$idx")" -eq 2 ]
	# The second mover was handed the unfinished range again.
	[ "$(grep -c "request $RID: shard $idx: mover fetched 0 files, 0 of them verified before, and 1 byte ranges" "$LOG")" -eq 2 ]
	check_ranged "$WD/r" "$STAGEHAND_TESTBED_ARCHIVE/shtest/r2"
}

# health FIELD: the daemon's yield state (GET /v1/health as root).
yield_field() {
	curl -sS --max-time 10 --unix-socket "$STAGEHAND_SOCKET" http://localhost/v1/health |
		jq -r ".yield.$1"
}

# A local archive of shtest (2 files, 4 MiB each: under MoverShardFiles, so
# the daemon's own workers run it, not movers): its request id in LRID.
local_archive() {
	local src=$WD/$1 out
	run_as_user shtest bash -c 'mkdir -p "$1" && head -c 4M /dev/urandom >"$1/a" &&
		head -c 4M /dev/urandom >"$1/b"' _ "$src"
	out=$(run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" submit --archive "$src" \
		"$STAGEHAND_TESTBED_ARCHIVE/shtest/$1" --json) || _tb_fail "submit failed: $out" || return 1
	LRID=$(jq -r .id <<<"$out")
	[[ $LRID =~ ^[0-9]+$ ]]
}

lreq_state() {
	db "SELECT state FROM requests WHERE id=$LRID"
}

@test "movers: local after-job transfers never yield to mover jobs, but do to a user's job of the same name" {
	# Pause mode, no escape: a transfer that yields does not move at all.
	local conf=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	cp -p "$conf" "$BATS_TEST_TMPDIR/stagehand.conf.movers"
	YCONF=$BATS_TEST_TMPDIR/stagehand.conf.movers
	printf '%s\n' YieldToJobs=yes YieldMode=pause YieldBandwidth=0 YieldMaxDelay=10m BandwidthCap=8M >>"$conf"
	reload_daemon
	# Movers of a big archive run on the xfer nodes, on the same file system
	# (the bed has one) as the local archive that follows; their job-start
	# events and slurmctld's record both name them. 16 shards of 4 MiB at
	# MoverBandwidth=256K, 4 at a time: movers run for at least 64 s, so
	# they surely still run when the local archive is done.
	tree "$WD/t" 128 512
	archive "$WD/t" "$STAGEHAND_TESTBED_ARCHIVE/shtest/m5"
	wait_for 60 eval '[[ $(squeue -h -n stagehand-mover-$RID -t RUNNING -o %i | wc -l) -ge 1 ]]'
	sleep 3	# a watch period (SlurmWatchInterval=2): slurmctld's view is in too
	local_archive l1
	wait_for 20 eval '[[ $(lreq_state) == done ]]' || {
		echo "local request $LRID: $(lreq_state); yield: $(yield_field active) active," \
			"$(yield_field started_jobs) started jobs" >&2
		return 1
	}
	# It ran alongside the movers, which still run.
	[ "$(squeue -h -n "stagehand-mover-$RID" -t RUNNING -o %i | wc -l)" -ge 1 ]
	[ "$(yield_field started_jobs)" -eq 0 ]
	# A user's job named like a mover (same name, same user) is a job like
	# any other: the next local archive yields to it until it ends.
	user=$(run_as_user shtest sbatch --parsable -J "stagehand-mover-$RID" -D "$WD" \
		-o /dev/null --wrap 'sleep 120')
	USERJOB=${user%%;*}
	wait_job_state "$USERJOB" RUNNING 60
	wait_for 10 eval '[[ $(yield_field started_jobs) -ge 1 ]]'
	local_archive l2
	wait_for 10 eval '[[ $(yield_field active) -ge 1 ]]'
	sleep 3
	[ "$(lreq_state)" != done ]
	scancel "$USERJOB"
	wait_for 30 eval '[[ $(lreq_state) == done ]]'
	diff -r "$WD/l1" "$STAGEHAND_TESTBED_ARCHIVE/shtest/l1"
	diff -r "$WD/l2" "$STAGEHAND_TESTBED_ARCHIVE/shtest/l2"
}

@test "movers: the listing before a split runs off the main loop: a stalled one holds up nothing else" {
	tree "$WD/big" 16 4
	# The listing child (the owner's, named stagehand-list) hangs in its first
	# open of the tree, as on a file system whose metadata server stalls.
	coproc STALL { exec "$BATS_TEST_DIRNAME/stall-open" "$WD/big" stagehand-list; }
	STALLER=$STALL_PID
	read -r -t 10 ready <&"${STALL[0]}"
	[ "$ready" = ready ]
	archive "$WD/big" "$STAGEHAND_TESTBED_ARCHIVE/shtest/big"
	read -r -t 20 LISTER <&"${STALL[0]}"
	[[ $LISTER =~ ^[0-9]+$ ]]
	[ "$(stat -c %U "/proc/$LISTER")" = shtest ]
	# Meanwhile the daemon goes on: the API answers, and a small request is
	# claimed, run by a local worker and verified.
	# A main loop held up by the listing would never answer: 30 s tells the two
	# apart on any machine.
	timeout 30 runuser -u shtest -- "$STAGEHAND" --socket "$STAGEHAND_SOCKET" status "r$RID" >/dev/null
	local_archive l3
	wait_for 20 eval '[[ $(lreq_state) == done ]]'
	diff -r "$WD/l3" "$STAGEHAND_TESTBED_ARCHIVE/shtest/l3"
	[ -e "/proc/$LISTER" ]
	[ "$(req_state)" = running ]
	[ "$(db "SELECT count(*) FROM shards WHERE request_id=$RID")" -eq 0 ]
	# Cancelled while listed: the hung listing child is killed.
	run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" cancel "r$RID" >/dev/null
	wait_for 10 eval '[[ ! -e /proc/$LISTER ]]'
	wait_for 10 grep -q "request $RID: left while it was listed for its mover plan" "$LOG"
	[ "$(req_state)" = cancelled ]
}

@test "movers: a mover node lost (slurmd, slurmstepd, mover killed): the shard goes to the other node" {
	tree "$WD/t" 16 512
	# The first mover to open the tree is held there, so its node is lost
	# while the mover is surely alive, however fast the copy would be.
	stall_mover_open "$WD/t"
	archive "$WD/t" "$STAGEHAND_TESTBED_ARCHIVE/shtest/m4"
	read -r -t 120 held <&"${STALL[0]}"
	[[ $held =~ ^[0-9]+$ ]]
	idx=$(tr '\0' ' ' <"/proc/$held/cmdline" | sed -n 's/.*--shard \([0-9]*\).*/\1/p')
	[[ $idx =~ ^[0-9]+$ ]]
	wait_for 30 eval '[[ -n $(db "SELECT slurm_job FROM shards WHERE request_id=$RID AND idx=$idx") ]]'
	job=$(db "SELECT slurm_job FROM shards WHERE request_id=$RID AND idx=$idx")
	[[ $(job_state "$job") == RUNNING ]]
	node=$(job_node "$job")
	# The whole node goes at once: its slurmd, the job's slurmstepd (else it
	# would report the mover's death at once) and the held mover itself.
	NODE_DOWN=$node
	killed=$(lose_node "$node")
	((killed >= 3))
	wait_for 10 eval '[[ ! -e /proc/$held ]]'
	kill "$STALLER"
	# Declared down (not after SlurmdTimeout, 60 s on the bed: helpers.bash):
	# the job ends NODE_FAIL and the daemon submits the shard again.
	declare_node_lost "$node"
	wait_for 200 eval '[[ $(db "SELECT attempts FROM shards WHERE request_id=$RID AND idx=$idx") -ge 2 ]]'
	wait_req done 200
	grep -q "request $RID: shard $idx: mover job $job ended NODE_FAIL on $node without reporting its result" "$LOG"
	job2=$(db "SELECT slurm_job FROM shards WHERE request_id=$RID AND idx=$idx")
	[ "$job2" != "$job" ]
	[ "$(job_node "$job2")" != "$node" ]
	check_archive "$WD/t" "$STAGEHAND_TESTBED_ARCHIVE/shtest/m4"
}
