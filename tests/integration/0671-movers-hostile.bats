#!/usr/bin/env bats
# A hostile owner against mover jobs (issue 47; docs/admin-guide.md, "Mover
# jobs", "Who may report" and "Verification"), on the multi-node test bed
# (MoverPartition=xfer over n2 and n3). A mover job runs as the request's owner, so the owner's
# MUNGE credential proves nothing about a record: records are taken only
# with the shard's token, from the mover job's node; and whatever movers
# recorded is read back by the daemon before the archive counts as verified.
# Movers are slowed down (MoverBandwidth) so that the tests act while they run.
#
# Skipped on a one-node bed (expected: tests/integration/expected-skips).

load helpers
bats_require_minimum_version 1.5.0

CONF_ADD=(MoverShardFiles=8 MoverBandwidth=64K MoverMaxJobs=4)
XR_RESULT=10
XR_ITEM_FILE=11
ZEROS=00000000000000000000000000000000

setup_file() {
	testbed_require
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]] || return 0
	conf=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	grep -qx 'MoverPartition=xfer' "$conf" ||
		_tb_fail "$conf has no MoverPartition=xfer (scripts/testbed up --nodes 3 writes it)" || return 1
	conf_extend "$BATS_FILE_TMPDIR" 0671-movers-hostile.bats "${CONF_ADD[@]}"
}

teardown_file() {
	conf_restore "$BATS_FILE_TMPDIR"
}

setup() {
	testbed_env
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]] ||
		skip "one-node test bed (scripts/testbed up --nodes 3 for these)"
	[[ -n $(sinfo -h -p xfer -o %N) ]] || skip "one-node test bed: no xfer partition"
	command -v curl >/dev/null || skip "curl is not installed"
	STAGEHAND=$STAGEHAND_BUILD_DIR/cli/stagehand
	LOG=$STAGEHAND_TESTBED_LOGDIR/stagehandd.log
	DB="file:$STAGEHAND_TESTBED_DIR/state/stagehand.db?mode=ro"
	SRV=$STAGEHAND_SERVER
	WD=$(user_workdir)
	RID=""
	YCONF=""
	STALLER=""
}

teardown() {
	[[ -z ${STALLER:-} ]] || kill "$STALLER" 2>/dev/null || true
	if [[ -n ${YCONF:-} ]]; then
		cp -p "$YCONF" "$STAGEHAND_TESTBED_DIR/etc/stagehand.conf"
		reload_daemon
	fi
	[[ -n ${RID:-} ]] || return 0
	local ids
	ids=$(squeue -h -n "stagehand-mover-$RID" -o %i 2>/dev/null)
	[[ -z $ids ]] || scancel $ids 2>/dev/null || true
	run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" cancel "r$RID" >/dev/null 2>&1 || true
}

db() {
	sqlite3 -batch -noheader "$DB" "$1"
}

# tree DIR FILES KIB: FILES random files of about KIB KiB, owned by shtest.
tree() {
	run_as_user shtest bash -c 'mkdir -p "$1/d" && for ((i = 0; i < $2; i++)); do
		head -c $(($3 * 1024 + i)) /dev/urandom >"$1/$( ((i % 2)) && echo d/)f$i"; done' \
		_ "$1" "$2" "$3"
}

archive() {
	local out
	out=$(run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" submit --archive "$1" "$2" --json) ||
		_tb_fail "stagehand submit failed: $out" || return 1
	RID=$(jq -r .id <<<"$out")
	[[ $RID =~ ^[0-9]+$ ]] || _tb_fail "no request id in: $out"
}

wait_req() {
	local want=$1 timeout=${2:-120}
	if ! wait_for "$timeout" eval '[[ $(db "SELECT state FROM requests WHERE id=$RID") == '"$want"' ]]'; then
		echo "request $RID: $(db "SELECT state, error FROM requests WHERE id=$RID")" >&2
		db "SELECT * FROM shards WHERE request_id=$RID" >&2
		grep "request ${RID}[: ]" "$LOG" | tail -n 30 >&2
		return 1
	fi
}

# bound_cred USER NODE METHOD TARGET BODY: a MUNGE credential of USER, made on
# NODE, bound to that one request (common/credbind.h), as dclient makes it.
bound_cred() {
	local t n d
	t=$(date +%s)
	n=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
	d=$(printf '%s\n%s\n%s\n%s\n%s\n%s\n%s' stagehand-req-v1 "$3" "$4" "$t" "$n" "${#5}" "$5" |
		sha256sum | cut -d' ' -f1)
	on_node "$2" runuser -u "$1" -- munge -s "stagehand-req-v1 $t $n $d"
}

# post_as USER NODE TARGET BODY: USER posts BODY from NODE over TCP with a bound
# credential of their own; prints the answer, then the HTTP status on its own line.
post_as() {
	local cred
	cred=$(bound_cred "$1" "$2" POST "$3" "$4") || return 1
	on_node "$2" runuser -u "$1" -- curl -sS -m 20 -X POST -H "X-Stagehand-Munge: $cred" \
		-H 'Content-Type: application/json' -H 'Expect:' --data-binary "$4" \
		-w '\n%{http_code}\n' "http://$SRV$3"
}

# forged JOB TOKEN: a records body claiming every file of shard $IDX copied and
# verified (checksums of zeros), and the shard done.
forged() {
	local recs
	recs=$(db "SELECT relpath, size FROM shard_files WHERE request_id=$RID AND idx=$IDX" |
		jq -R -s -c --argjson t "$XR_ITEM_FILE" --arg z "xxh128:$ZEROS" '
		[split("\n")[] | select(length > 0) | split("|") |
		 [$t, 0, (.[1] | tonumber), 0, 420, 0, 0, $z, $z, .[0], ""]]')
	jq -n -c --argjson job "$1" --arg tok "$2" --argjson recs "$recs" --argjson r "$XR_RESULT" \
		'{job: $job, token: $tok, records: ($recs + [[$r, 0, 0, 0, 0, 0, 0, "", "", "", ""]])}'
}

# The shard's real token, as root computes it from the daemon's key (what an
# owner who stole it from the mover job would hold).
real_token() {
	local att key
	att=$(db "SELECT attempts FROM shards WHERE request_id=$RID AND idx=$IDX")
	key=$(od -An -tx1 "$STAGEHAND_TESTBED_DIR/state/mover.key" | tr -d ' \n')
	printf 'stagehand-mover-v1 %s %s %s' "$RID" "$IDX" "$att" |
		openssl dgst -sha256 -mac HMAC -macopt "hexkey:$key" | sed 's/.*= *//'
}

@test "movers: hostile owner: the owner's forged records are refused without the token, off the mover's node, over the UNIX socket; nothing recorded" {
	tree "$WD/t" 16 64
	archive "$WD/t" "$STAGEHAND_TESTBED_ARCHIVE/shtest/${WD##*/}-h1"
	# A mover job running: its id, node and shard.
	wait_for 60 eval '[[ -n $(squeue -h -u shtest -n stagehand-mover-$RID -t R -o %i) ]]'
	read -r JOB NODE < <(squeue -h -u shtest -n "stagehand-mover-$RID" -t R -o '%i %N' | head -n1)
	IDX=$(db "SELECT idx FROM shards WHERE request_id=$RID AND slurm_job=$JOB")
	[[ $IDX =~ ^[0-9]+$ ]]
	OTHER=n1
	[[ $NODE != n1 ]] || OTHER=n2
	TARGET="/v1/requests/$RID/shards/$IDX/records?job=$JOB"
	TOKEN=$(real_token)
	[[ $TOKEN =~ ^[0-9a-f]{64}$ ]]

	# The owner cannot read the token out of their own mover process.
	wait_for 30 eval 'pids=$(on_node "$NODE" pgrep -u shtest -x stagehand-mover)'
	[ -n "$pids" ]
	for p in $pids; do
		run on_node "$NODE" runuser -u shtest -- cat "/proc/$p/environ"
		[ "$status" -ne 0 ]
		[[ $output != *"$TOKEN"* ]]
	done

	# From another node, the owner's own credential, a made-up token.
	run post_as shtest "$OTHER" "$TARGET" "$(forged "$JOB" "$ZEROS$ZEROS")"
	[ "${lines[-1]}" = 403 ]
	[[ $output == *"the mover token is not this shard's"* ]]
	# The same on the mover's node.
	run post_as shtest "$NODE" "$TARGET" "$(forged "$JOB" "$ZEROS$ZEROS")"
	[ "${lines[-1]}" = 403 ]
	[[ $output == *"the mover token is not this shard's"* ]]
	# The real token (stolen), from a node that is not the mover job's.
	run post_as shtest "$OTHER" "$TARGET" "$(forged "$JOB" "$TOKEN")"
	[ "${lines[-1]}" = 403 ]
	[[ $output == *"taken only from the node slurmctld gave mover job $JOB"* ]]
	# The real token over the UNIX socket (the owner's own identity there).
	body=$(forged "$JOB" "$TOKEN")
	run run_as_user shtest curl -sS -m 20 --unix-socket "$STAGEHAND_SOCKET" -X POST \
		-H 'Content-Type: application/json' -H 'Expect:' --data-binary "$body" \
		-w '\n%{http_code}\n' "http://localhost$TARGET"
	[ "${lines[-1]}" = 403 ]
	[[ $output == *"not over the UNIX socket"* ]]

	# Nothing of it was taken: no zero checksum recorded, the shard not done by it.
	[ "$(db "SELECT count(*) FROM items WHERE request_id=$RID AND checksum_dst LIKE '%$ZEROS%'")" -eq 0 ]
	grep -q "request $RID shard $IDX: records for mover job $JOB from uid $(id -u shtest) refused" "$LOG"
	# The real movers finish; the archive is what was copied and read back.
	wait_req done 180
	diff -r "$WD/t" "$STAGEHAND_TESTBED_ARCHIVE/shtest/${WD##*/}-h1"
	grep -q "request $RID: read back 16 files .* every checksum as recorded" "$LOG"
}

@test "movers: hostile owner: a file at the destination that is not what its mover recorded fails the request: not verified, not labelled archived" {
	tree "$WD/t" 16 64
	dst=$STAGEHAND_TESTBED_ARCHIVE/shtest/${WD##*/}-h2
	archive "$WD/t" "$dst"
	# The first file a mover recorded; the owner overwrites its copy, same
	# size and mtime, before the last shard is done.
	wait_for 60 eval '[[ -n $(db "SELECT relpath FROM items WHERE request_id=$RID AND type='"'file'"' AND state='"'done'"' LIMIT 1") ]]'
	rel=$(db "SELECT relpath FROM items WHERE request_id=$RID AND type='file' AND state='done' LIMIT 1")
	[ "$(db "SELECT count(*) FROM shards WHERE request_id=$RID AND state!='done'")" -gt 0 ]
	run_as_user shtest bash -c 'head -c "$(stat -c %s "$1")" /dev/zero >"$1" && touch -r "$2" "$1"' \
		_ "$dst/$rel" "$WD/t/$rel"
	# It ends either way (done, unmutated, only if nothing was read back).
	wait_req '@(done|failed_final)' 180
	[ "$(db "SELECT state FROM requests WHERE id=$RID")" = failed_final ]
	err=$(db "SELECT error FROM requests WHERE id=$RID")
	echo "$err"
	[[ $err == *"verification of the mover jobs' records failed: 1 of 16 files"* ]]
	[[ $err == *"'$rel' at the destination reads xxh128:"*", but its mover recorded xxh128:"* ]]
	[ "$(db "SELECT state FROM items WHERE request_id=$RID AND relpath='$rel'")" = failed ]
	# Not archived: no final pass labelled the source, and every source is still there.
	[ "$(getfattr --only-values -n user.stagehand.policy "$WD/t" 2>/dev/null)" != archived ]
	[ "$(find "$WD/t" -type f | wc -l)" -eq 16 ]
	run ! grep -q "request $RID: done and verified" "$LOG"
	# A retry copies that file again (the final pass), counts it once, and is verified.
	run_as_user shtest "$STAGEHAND" --socket "$STAGEHAND_SOCKET" retry "r$RID"
	wait_req done 120
	diff -r "$WD/t" "$dst"
	[ "$(db "SELECT files_done, files_total FROM requests WHERE id=$RID")" = "16|16" ]
}

@test "movers: hostile owner: a byte range at the destination that is not what its mover recorded fails the request; the big file is not finished from it" {
	conf=$STAGEHAND_TESTBED_DIR/etc/stagehand.conf
	cp -p "$conf" "$BATS_TEST_TMPDIR/stagehand.conf.hostile"
	YCONF=$BATS_TEST_TMPDIR/stagehand.conf.hostile
	sed -i 's/^MoverBandwidth=.*/MoverBandwidth=8M/' "$conf"
	echo MoverShardBytes=1M >>"$conf"
	reload_daemon
	# One file of 3 MiB (three ranges) and 4 small files (a shard of their own).
	run_as_user shtest bash -c 'mkdir -p "$1/d" && head -c 3M /dev/urandom >"$1/d/big" &&
		for i in 0 1 2 3; do head -c $((64 * 1024 + i)) /dev/urandom >"$1/s$i"; done' _ "$WD/r"
	dst=$STAGEHAND_TESTBED_ARCHIVE/shtest/${WD##*/}-h3
	# The small files' mover is held in its open of s0 while the ranges are copied.
	stall_open "$WD/r/s0" stagehand-mover shtest
	archive "$WD/r" "$dst"
	wait_for 90 eval '[[ $(db "SELECT count(*) FROM shard_ranges WHERE request_id=$RID AND done=1") == 3 ]]'
	tmp=$dst/d/.big.stagehand-$RID
	[ -f "$tmp" ]
	# The owner changes 4 KiB of the first range in the copy the final pass would rename.
	run_as_user shtest dd if=/dev/zero of="$tmp" bs=4096 seek=8 count=1 conv=notrunc status=none
	kill "$STALLER"
	STALLER=""
	wait_req '@(done|failed_final)' 120
	[ "$(db "SELECT state FROM requests WHERE id=$RID")" = failed_final ]
	err=$(db "SELECT error FROM requests WHERE id=$RID")
	echo "$err"
	[[ $err == *"0 of 4 files and 1 of 3 byte ranges are not what was recorded"* ]]
	[[ $err == *"'d/big' bytes 0+1048576 at the destination read xxh128:"*", but its mover recorded xxh128:"* ]]
	# That range is not done any more: no final pass will finish the file from it.
	[ "$(db "SELECT done FROM shard_ranges WHERE request_id=$RID AND relpath='d/big' AND off=0")" -eq 0 ]
	[ ! -e "$dst/d/big" ]
}
