#!/usr/bin/env bats
# Bound credentials on the real test bed (docs/security.md, "Bound
# credentials"): a credential root's job-end event carries, lifted before it
# was used, is worth nothing to anyone who sends it with another request,
# and the request it was made for is taken once.
#
# The credential: 'stagehand job-end' as root on the job's node, the
# epilog's own call, with STAGEHAND_DUMP_REQUEST, so the request (head,
# credential and body) is written out instead of sent. The sender: the
# ordinary user shtest on that same node, with curl, i.e. someone who saw
# the request on the network and sends from the address the daemon expects
# job events from. Multi-node bed only (the node's own address is the
# point); skipped on the one-node bed.

load helpers

multi() {
	[[ ${STAGEHAND_TESTBED_MODE:-one} == multi ]]
}

setup() {
	testbed_env
	testbed_require
	multi || skip "needs the multi-node bed (scripts/testbed up --nodes 3)"
	command -v curl >/dev/null || skip "curl is not installed"
	STAGEHAND=$STAGEHAND_BUILD_DIR/cli/stagehand
	LOG=$STAGEHAND_TESTBED_LOGDIR/stagehandd.log
	SRV=$STAGEHAND_SERVER
	WD=$(user_workdir)
	WD2=$(user_workdir shtest2)
	JOBS=()
	DUMPS=()
}

teardown() {
	touch "$WD2/go" 2>/dev/null || true
	cancel_jobs "${JOBS[@]}"
	rm -f "${DUMPS[@]}"
}

# lift N: root's job-end request for job $j as sent from $node, written out
# unsent; sets CRED (the X-Stagehand-Munge value) and BODY.
lift() {
	local f=$STAGEHAND_TESTBED_DIR/t0521-lifted-$j-$1
	rm -f "$f"
	DUMPS+=("$f")
	run on_node "$node" env STAGEHAND_DUMP_REQUEST="$f" "$STAGEHAND" --server "$SRV" \
		job-end "$j" --state COMPLETED --exit-code 0
	[ "$status" -eq 2 ]
	[[ $output == *"written to $f, not sent (STAGEHAND_DUMP_REQUEST)"* ]]
	CRED=$(sed -n 's/^X-Stagehand-Munge: \(.*\)\r$/\1/p' "$f")
	BODY=$(sed '1,/^\r$/d' "$f")
	[[ $CRED == MUNGE:* ]]
	[[ $BODY == *'"state":"COMPLETED"'* ]]
	head -n1 "$f" | grep -qx "POST /v1/jobs/$j/end HTTP/1.1"$'\r'
}

# send METHOD TARGET BODY: shtest on $node sends it with $CRED; prints the
# JSON answer, then the HTTP status on a line of its own.
send() {
	on_node "$node" runuser -u shtest -- curl -sS -m 20 -X "$1" -H "X-Stagehand-Munge: $CRED" \
		-H 'Content-Type: application/json' -H 'Expect:' --data-binary "$3" -w '\n%{http_code}\n' \
		"http://$SRV$2"
}

# The end state the daemon recorded for job $1; "none" when it has none (a
# job it knows only from its start event is not one it answers for).
end_state() {
	local out
	if out=$("$STAGEHAND" --server "$SRV" status "$1" --json 2>&1); then
		jq -r '.end.state // "none"' <<<"$out"
	elif [[ $out == *"stagehandd knows nothing about job $1"* ]]; then
		echo none
	else
		echo "error: $out"
	fi
}

@test "root's lifted job-end credential: refused for another job, body, query or method; taken once as made; the second time refused" {
	write_user_script shtest "$WD/done.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/done-%j.txt
#DATA exempt=tmp
true
EOF
	submit -d "$WD" "$WD/done.sh"
	wait_job_state "$j" COMPLETED 90
	node=$(job_node "$j")
	wait_for 30 grep -q "job $j: end event (COMPLETED) from uid 0 (TCP" "$LOG"
	# Another user's job, still running on the same node: the prize.
	write_user_script shtest2 "$WD2/run.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD2/run-%j.txt
#DATA archive=results
mkdir -p results; echo partial > results/a.txt
while [[ ! -e $WD2/go ]]; do sleep 0.2; done
EOF
	submit -u shtest2 -d "$WD2" "$WD2/run.sh" -w "$node"
	running=$j
	wait_job_state "$running" RUNNING 90
	wait_for 30 grep -q "job $running: started on" "$LOG"
	j=${JOBS[0]}

	# Root's credential for job j's end, sent as job $running's end.
	lift path
	run send POST "/v1/jobs/$running/end" "$BODY"
	[ "${lines[-1]}" = 403 ]
	[[ $output == *"the MUNGE credential was made for another request"* ]]
	[ "$(end_state "$running")" = none ]
	run grep -q "job $running: end event" "$LOG"
	[ "$status" -eq 1 ]
	[ "$(job_state "$running")" = RUNNING ]
	# With another body (a failed job, as if its outputs were not worth keeping).
	lift body
	run send POST "/v1/jobs/$j/end" "${BODY/COMPLETED/FAILED}"
	[ "${lines[-1]}" = 403 ]
	[[ $output == *"made for another request"* ]]
	[ "$(end_state "$j")" = COMPLETED ]
	# With a query added, and with another method.
	lift query
	run send POST "/v1/jobs/$j/end?force=1" "$BODY"
	[ "${lines[-1]}" = 403 ]
	lift method
	run send PUT "/v1/jobs/$j/end" "$BODY"
	[ "${lines[-1]}" = 403 ]
	grep -q "api: TCP request POST /v1/jobs/$running/end from $(scontrol show node "$node" |
		sed -n 's/.*NodeAddr=\([^ ]*\).*/\1/p') (uid 0) refused: the MUNGE credential was made for another request" "$LOG"

	# As made: taken (a repeat of the plugin's event: nothing changes) ...
	lift asis
	run send POST "/v1/jobs/$j/end" "$BODY"
	[ "${lines[-1]}" = 202 ]
	[[ $output == *'"duplicate":true'* ]]
	# ... once.
	run send POST "/v1/jobs/$j/end" "$BODY"
	[ "${lines[-1]}" = 401 ]
	[[ $output == *"MUNGE credential refused: Replayed credential"* ]]
	[ "$(end_state "$running")" = none ]
	run grep -q "job $running: end event" "$LOG"
	[ "$status" -eq 1 ]
}

@test "a credential with no request digest (a client older than bound credentials) is refused, saying to upgrade every node" {
	node=${STAGEHAND_TESTBED_NODES%% *}
	CRED=$(on_node "$node" munge -n)
	run send GET /v1/health ""
	[ "${lines[-1]}" = 403 ]
	[[ $output == *"the client is older than this stagehandd"*"on every node that sends requests over TCP"* ]]
	# The current client on the same node, same user: taken.
	run on_node "$node" runuser -u shtest -- "$STAGEHAND" --server "$SRV" health
	[ "$status" -eq 0 ]
}
