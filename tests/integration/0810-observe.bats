#!/usr/bin/env bats
# What a site watches (docs/admin-guide.md, "Metrics", "Audit export",
# "Notifications"), on the real test bed with real jobs of shtest and
# shtest2: NotifyCommand announces each finished archive once (done or
# failed) with the job, user, state and paths, without a shell and within
# NotifyTimeout; MetricsAddress serves /metrics as plain HTTP that a stock
# Prometheus scrapes (per-user series, hashed on request, per-file-system
# series, no user paths); etc/grafana-dashboard.json asks only for series
# the daemon exports; 'stagehand audit' shows a user their own moves only.

bats_require_minimum_version 1.5.0

load helpers
load ../faults/faults

setup() {
	faults_setup
	REC=$BATS_TEST_TMPDIR/rec
	install -d -m 0755 "$REC"
	METRICS=127.0.0.1:$((STAGEHAND_TESTBED_DAEMON_PORT + 1))
	BG_PID=
	# The site's program: writes what it was given, then (for shtest2) hangs.
	cat >"$BATS_TEST_TMPDIR/record" <<EOF
#!/bin/bash
f=$REC/notice-\$STAGEHAND_REQUEST_ID
echo "\$STAGEHAND_REQUEST_ID" >>"$REC/calls"
{ printf 'argv'; printf ' [%s]' "\$@"; echo; env | sort; } >"\$f.tmp"
mv "\$f.tmp" "\$f"
if [ "\$STAGEHAND_USER" = shtest2 ]; then sleep 120; fi
EOF
	chmod 0755 "$BATS_TEST_TMPDIR/record"
}

teardown() {
	if [[ -n $BG_PID ]]; then
		kill "$BG_PID" 2>/dev/null || true
		wait "$BG_PID" 2>/dev/null || true
	fi
	[[ -z ${LOCKED:-} ]] || rm -rf "$LOCKED"
	faults_teardown
}

# conf LINES...: run the bed's daemon with these stagehand.conf lines.
conf() {
	printf '%s\n' "$@" >"$BATS_TEST_TMPDIR/daemon.conf"
	daemon_conf "$BATS_TEST_TMPDIR/daemon.conf"
}

# archive_job USER NFILES [DATA-OPTIONS]: a job of USER that writes NFILES
# files of 1 KiB into results/ (archived); sets $j.
archive_job() {
	local user=$1 n=$2 opts=${3:-} wd
	wd=$(user_workdir "$user")
	write_user_script "$user" "$wd/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$wd/out-%j.txt
#DATA archive=results $opts
for i in \$(seq $n); do head -c 1024 /dev/urandom > results/f\$i; done
EOF
	submit -u "$user" -d "$wd" "$wd/job.sh"
	eval "WD_$user=$wd"
}

archive_state() {
	job_requests "$1" | jq -r 'select(.action == "archive") | .state'
}

has_archive() {
	[ -n "$(job_requests "$1" | jq -r 'select(.action == "archive") | .id')" ]
}

archive_done() {
	[ "$(archive_state "$1")" = done ]
}

# prom_is QUERY VALUE: the Prometheus server on $p answers QUERY with VALUE.
prom_is() {
	[ "$(curl -s "http://127.0.0.1:$p/api/v1/query" --data-urlencode "query=$1" |
		jq -r '.data.result[0].value[1] // empty')" = "$2" ]
}

@test "NotifyCommand: each archive outcome announced once, done or failed, argv and STAGEHAND_* only, no shell; a hung one is killed at NotifyTimeout without holding up the rest" {
	# Under ArchiveRoot, but a file: no directory can be made below it.
	LOCKED=$STAGEHAND_TESTBED_ARCHIVE/notadir-$$
	echo x >"$LOCKED"
	conf "NotifyCommand=$BATS_TEST_TMPDIR/record --site-arg" "NotifyTimeout=4s"
	archive_job shtest 3
	j1=$j
	archive_job shtest2 1
	j2=$j
	# A destination shtest cannot write: the archive fails for good (MaxRetries=1).
	archive_job shtest 1 "to=$LOCKED/out"
	j3=$j
	for jj in $j1 $j2 $j3; do wait_job_state "$jj" COMPLETED 90; done
	for jj in $j1 $j2 $j3; do wait_for 60 has_archive "$jj"; done
	r1=$(job_requests "$j1" | jq -r 'select(.action == "archive") | .id')
	r2=$(job_requests "$j2" | jq -r 'select(.action == "archive") | .id')
	r3=$(job_requests "$j3" | jq -r 'select(.action == "archive") | .id')
	for r in $r1 $r2 $r3; do wait_for 120 test -s "$REC/notice-$r"; done
	cat "$REC/notice-$r1"
	src1=$(job_requests "$j1" | jq -r 'select(.action == "archive") | .source')
	dst1=$(job_requests "$j1" | jq -r 'select(.action == "archive") | .dest')
	[ "$(head -n1 "$REC/notice-$r1")" = "argv [--site-arg] [$j1] [shtest] [done] [$src1] [$dst1]" ]
	grep -qx "STAGEHAND_JOB_ID=$j1" "$REC/notice-$r1"
	grep -qx "STAGEHAND_USER=shtest" "$REC/notice-$r1"
	grep -qx "STAGEHAND_STATE=done" "$REC/notice-$r1"
	grep -qx "STAGEHAND_FILES=3" "$REC/notice-$r1"
	grep -qx "STAGEHAND_SOURCE=$src1" "$REC/notice-$r1"
	# Nothing of the daemon's own environment.
	run ! grep -E '^(STAGEHAND_SOCKET|SLURM_CONF|HOME|NOTIFY_SOCKET)=' "$REC/notice-$r1"
	grep -qx "STAGEHAND_STATE=failed" "$REC/notice-$r3"
	grep -q "^STAGEHAND_ERROR=..*" "$REC/notice-$r3"
	grep -qx "STAGEHAND_USER=shtest2" "$REC/notice-$r2"
	# shtest2's hangs: killed at NotifyTimeout, and the log says so.
	wait_for 30 grep -q "NotifyCommand for request $r2 (job $j2) ran longer than NotifyTimeout=4 s: killed" \
		"$STAGEHAND_TESTBED_LOGDIR/stagehandd.log"
	run ! pgrep -f "$BATS_TEST_TMPDIR/record"
	# Once each, also across a restart.
	daemon_stop
	daemon_start
	sleep 3
	cat "$REC/calls"
	for r in $r1 $r2 $r3; do [ "$(grep -cx "$r" "$REC/calls")" -eq 1 ]; done
	[ "$(sort "$REC/calls" | uniq -d | wc -l)" -eq 0 ]
	# The failed one, fixed and retried by its owner: announced again, as done.
	rm -f "$LOCKED"
	api -u shtest POST "/v1/requests/$r3/retry"
	[ "$API_STATUS" = 200 ]
	wait_for 60 grep -qx "STAGEHAND_STATE=done" "$REC/notice-$r3"
	[ "$(grep -cx "$r3" "$REC/calls")" -eq 2 ]
}

@test "MetricsAddress: plain-HTTP /metrics, read-only, per user and per file system, no user paths; a stock Prometheus scrapes it; the Grafana dashboard's series all exist" {
	conf "MetricsAddress=$METRICS"
	archive_job shtest 2
	j1=$j
	archive_job shtest2 3
	j2=$j
	wait_job_state "$j1" COMPLETED 90
	wait_job_state "$j2" COMPLETED 90
	wait_for 90 archive_done "$j1"
	wait_for 90 archive_done "$j2"
	run curl -sS -o "$BATS_TEST_TMPDIR/metrics.txt" -w '%{http_code} %{content_type}' "http://$METRICS/metrics"
	echo "$output"
	[[ $output == "200 text/plain; version=0.0.4"* ]]
	m=$BATS_TEST_TMPDIR/metrics.txt
	grep -qx 'stagehand_up 1' "$m"
	# Per user: bytes as the audit trail has them (shtest2's 3 KiB and more from earlier tests).
	want=$(api_get "/v1/audit?by=user&user=shtest2" | jq -r '.rows[0].bytes')
	[ "$want" -ge 3072 ]
	grep -qx "stagehand_user_bytes_moved_total{user=\"shtest2\"} $want" "$m"
	grep -q "^stagehand_filesystem_bytes_written_total{filesystem=\"$STAGEHAND_TESTBED_ARCHIVE\"} [1-9]" "$m"
	grep -q "^stagehand_filesystem_bytes_read_total{filesystem=\"$STAGEHAND_TESTBED_SCRATCH\"} [1-9]" "$m"
	# No user path: neither the work directories nor anything below the roots.
	run ! grep -F "$WD_shtest" "$m"
	run ! grep -E "\"$STAGEHAND_TESTBED_SCRATCH/|\"$STAGEHAND_TESTBED_ARCHIVE/" "$m"
	# The exposition format, as Prometheus' own tool reads it.
	promtool check metrics <"$m"
	# Read-only, one path.
	[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST -d x=1 "http://$METRICS/metrics")" = 405 ]
	[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$METRICS/v1/requests")" = 404 ]
	# A stock Prometheus server scrapes it.
	p=$((STAGEHAND_TESTBED_DAEMON_PORT + 2))
	cat >"$BATS_TEST_TMPDIR/prom.yml" <<EOF
global: { scrape_interval: 1s }
scrape_configs:
  - job_name: stagehand
    static_configs: [ { targets: [ "$METRICS" ] } ]
EOF
	prometheus --config.file="$BATS_TEST_TMPDIR/prom.yml" --storage.tsdb.path="$BATS_TEST_TMPDIR/tsdb" \
		--web.listen-address=127.0.0.1:$p >"$BATS_TEST_TMPDIR/prom.log" 2>&1 &
	BG_PID=$!
	wait_for 60 prom_is 'up{job="stagehand"}' 1
	wait_for 30 prom_is 'stagehand_user_bytes_moved_total{user="shtest2"}' "$want"
	# Every series the dashboard asks for is one the daemon exports.
	dash=$STAGEHAND_BUILD_DIR/etc/grafana-dashboard.json
	jq -e '.panels | length > 0' "$dash" >/dev/null
	n=0
	for name in $(jq -r '.. | .expr? // empty' "$dash" | grep -oE 'stagehand_[a-z_]+' | sort -u); do
		grep -q "^# TYPE $name " "$m" || { echo "dashboard uses $name, not exported"; false; }
		n=$((n + 1))
	done
	[ "$n" -ge 8 ]
	# MetricsHashUsers=yes: the user label is 16 hex digits of SHA-256(name).
	conf "MetricsAddress=$METRICS" "MetricsHashUsers=yes"
	curl -sf "http://$METRICS/metrics" >"$m"
	h=$(printf shtest2 | sha256sum | cut -c1-16)
	grep -qx "stagehand_user_bytes_moved_total{user=\"$h\"} $want" "$m"
	run ! grep -q 'user="shtest' "$m"
}

@test "stagehand audit: per job, user and file, CSV and JSON; shtest sees only shtest's, cannot ask for shtest2's; root sees both" {
	archive_job shtest 2
	j1=$j
	archive_job shtest2 1
	j2=$j
	wait_job_state "$j1" COMPLETED 90
	wait_job_state "$j2" COMPLETED 90
	wait_for 90 archive_done "$j1"
	wait_for 90 archive_done "$j2"
	as() {
		local u=$1
		shift
		run_as_user "$u" env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" --socket "$STAGEHAND_SOCKET" audit "$@"
	}
	run as shtest --job "$j1" --format json
	echo "$output"
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | jq -r '.rows[0].files')" = 2 ]
	[ "$(echo "$output" | jq -r '.rows[0].bytes')" = 2048 ]
	[ "$(echo "$output" | jq -r '.rows[0].action')" = archive ]
	# shtest's view: only uid shtest, even without --user.
	run as shtest --by job --format json
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | jq "[.rows[] | select(.uid != $(id -u shtest))] | length")" = 0 ]
	[ "$(echo "$output" | jq "[.rows[] | select(.job_id == $j2)] | length")" = 0 ]
	run as shtest --job "$j2" --format json
	[ "$status" -eq 0 ]
	[ "$(echo "$output" | jq '.rows | length')" = 0 ]
	run as shtest --user shtest2
	echo "$output"
	[ "$status" -eq 1 ]
	[[ $output == *"you may see only your own transfers"* ]]
	# Per file, CSV: header, then one line per verified file with its destination.
	run as shtest --job "$j1" --by file --format csv
	echo "$output"
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "job_id,user,uid,action,source,dest,bytes,checksum,ended" ]
	[ "${#lines[@]}" -eq 3 ]
	for l in "${lines[@]:1}"; do
		dst=$(echo "$l" | cut -d, -f6)
		[ -f "$dst" ]
		[ "$(stat -c %s "$dst")" = 1024 ]
	done
	# root (an admin): both users, per user.
	run "$STAGEHAND" --socket "$STAGEHAND_SOCKET" audit --by user --format csv
	echo "$output"
	[ "$status" -eq 0 ]
	echo "$output" | grep -q '^shtest,'
	echo "$output" | grep -q '^shtest2,'
	# --since: nothing ended in the future; a date before the test counts all.
	run as shtest --job "$j1" --since @$(( $(date +%s) + 3600 )) --format json
	[ "$(echo "$output" | jq '.rows | length')" = 0 ]
	run as shtest --job "$j1" --since "$(date -u -d '1 day ago' +%F)" --format json
	[ "$(echo "$output" | jq -r '.rows[0].files')" = 2 ]
	run as shtest --since yesterday
	[ "$status" -eq 2 ]
	[[ $output == *"--since yesterday: use a date"* ]]
}

@test "etc/notify-webhook.example as NotifyCommand: a web hook on 127.0.0.1 receives the archive's event as JSON" {
	hp=$((STAGEHAND_TESTBED_DAEMON_PORT + 3))
	# The hook: keeps each event as REC/hook-JOB.json (earlier archives may come too).
	python3 - "$hp" "$REC" <<'PY' &
import http.server, json, os, sys
port, out = int(sys.argv[1]), sys.argv[2]
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        f = os.path.join(out, "hook-%s.json" % int(json.loads(body)["job_id"]))
        with open(f + ".tmp", "wb") as fp:
            fp.write(body)
        os.rename(f + ".tmp", f)
        self.send_response(204)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
PY
	BG_PID=$!
	conf "NotifyCommand=$STAGEHAND_BUILD_DIR/etc/notify-webhook.example http://127.0.0.1:$hp/hook" "NotifyTimeout=10s"
	archive_job shtest 2
	wait_job_state "$j" COMPLETED 90
	wait_for 90 test -s "$REC/hook-$j.json"
	cat "$REC/hook-$j.json"
	jq -e --arg j "$j" '.job_id == $j and .user == "shtest" and .state == "done" and .files == "2" and .event == "archive"' "$REC/hook-$j.json"
}
