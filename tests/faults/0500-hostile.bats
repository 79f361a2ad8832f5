#!/usr/bin/env bats
# Hostile paths: shtest attacks shtest2's and root's data through #DATA lines,
# API requests and the trees it asks the daemon to copy. Nothing outside
# shtest's own rights may be read or written, and every refusal must say
# what was refused and why (sbatch message, job Comment, request status).

bats_require_minimum_version 1.5.0

load ../integration/helpers
load faults

setup() {
	faults_setup
	# shtest2's private data: a 0700 directory with a marked secret.
	H2=$(getent passwd shtest2 | cut -d: -f6)
	P2=$H2/private-$BATS_TEST_NUMBER-$$
	install -d -o shtest2 -g shtest2 -m 0700 "$P2"
	SECRET_MARK="shtest2-secret-$RANDOM$RANDOM"
	printf '%s\n' "$SECRET_MARK" >"$P2/secret.txt"
	chown shtest2:shtest2 "$P2/secret.txt"
	chmod 0600 "$P2/secret.txt"
	SECRET_SUM=$(sha256sum <"$P2/secret.txt")
	SHADOW_SUM=$(sha256sum </etc/shadow)
}

teardown() {
	faults_teardown
	# The victims' data is never modified.
	[ "$(sha256sum <"$P2/secret.txt")" = "$SECRET_SUM" ]
	[ "$(sha256sum </etc/shadow)" = "$SHADOW_SUM" ]
	rm -rf "$P2"
}

# leaked: the secret's marker appears somewhere shtest can read under the test bed.
leaked() {
	runuser -u shtest -- grep -rlsF "$SECRET_MARK" "$STAGEHAND_TESTBED_SCRATCH/shtest" "$STAGEHAND_TESTBED_ARCHIVE" "$WD" 2>/dev/null | grep -q .
}

# sbatch_refused SCRIPT RE: sbatch as shtest fails and says RE.
sbatch_refused() {
	run bash -c "cd '$WD' && runuser -u shtest -- env SLURM_CONF='$SLURM_CONF' sbatch '$1' 2>&1"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ $output =~ $2 ]]
}

@test "#DATA with '..' traversal is refused by sbatch with the line number" {
	write_user_script shtest "$WD/a.sh" <<EOF
#!/bin/bash
#DATA stage_in=$STAGEHAND_TESTBED_SCRATCH/shtest/../shtest2/x
true
EOF
	sbatch_refused "$WD/a.sh" "line 2.*\.\."
	write_user_script shtest "$WD/b.sh" <<EOF
#!/bin/bash
#DATA archive=../../shtest2/stolen
true
EOF
	sbatch_refused "$WD/b.sh" "line 2.*\.\."
	write_user_script shtest "$WD/c.sh" <<EOF
#!/bin/bash
#DATA archive=results to=$STAGEHAND_TESTBED_ARCHIVE/shtest/../shtest2/x
true
EOF
	sbatch_refused "$WD/c.sh" "line 2.*\.\."
}

@test "#DATA stage_in of another user's private file and of /etc/shadow: held with 'Permission denied', nothing copied" {
	for src in "$P2/secret.txt" /etc/shadow; do
		write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$src
echo ran > ran.txt
EOF
		submit -d "$WD" "$WD/job.sh"
		wait_for 60 comment_matches "$j" "stage-in failed"
		echo "$(comment "$j")"
		[[ "$(comment "$j")" =~ "Permission denied" ]]
		[ "$(job_state "$j")" = PENDING ]
		[ ! -e "$WD/ran.txt" ]
		[ -z "$(ls -A "$STAGEHAND_TESTBED_SCRATCH/shtest/$j/input" 2>/dev/null)" ]
	done
	run ! leaked
}

@test "#DATA writing into another user's directories (stage_in to=, archive to=): refused with 'Permission denied'" {
	install -d -o shtest2 -g shtest2 -m 0700 "$STAGEHAND_TESTBED_SCRATCH/shtest2" "$STAGEHAND_TESTBED_ARCHIVE/shtest2"
	user_file shtest "$WD/src/in.dat" 1
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/in.dat to=$STAGEHAND_TESTBED_SCRATCH/shtest2/planted-$$
echo ran > ran.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_for 60 comment_matches "$j" "stage-in failed"
	[[ "$(comment "$j")" =~ "Permission denied" ]]
	[ ! -e "$STAGEHAND_TESTBED_SCRATCH/shtest2/planted-$$" ]
	write_user_script shtest "$WD/job2.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results to=$STAGEHAND_TESTBED_ARCHIVE/shtest2/planted-$$
echo x > results/x
EOF
	submit -d "$WD" "$WD/job2.sh"
	wait_job_state "$j" COMPLETED 60
	wait_for 60 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' 'http://x/v1/requests?job=$j&all=1' |
		jq -e '.requests[] | select(.state == \"failed_final\")' >/dev/null"
	job_requests "$j" | jq -r .error | grep -q "Permission denied"
	[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest2/planted-$$" ]
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$j"
	echo "$output"
	[[ $output =~ "Permission denied" ]]
}

@test "API requests as shtest: other users' files, '..', relative paths, forged uid, other users' requests" {
	body() { printf '{"action":"stage_in","source":"%s","dest":"%s"%s}' "$1" "$2" "${3:-}"; }
	D=$STAGEHAND_TESTBED_SCRATCH/shtest/api-$$
	# '..' and relative paths: 400 with the field named.
	api -u shtest POST /v1/requests "$(body "$WD/../../shtest2/x" "$D/x")"
	[ "$API_STATUS" = 400 ]
	[[ $API_BODY =~ "'..' is not allowed" ]]
	api -u shtest POST /v1/requests "$(body "etc/shadow" "$D/x")"
	[ "$API_STATUS" = 400 ]
	[[ $API_BODY =~ "absolute path" ]]
	# Outside the scratch roots for a stage-in destination.
	api -u shtest POST /v1/requests "$(body "$WD/x" "/tmp/x-$$")"
	[ "$API_STATUS" = 400 ]
	[[ $API_BODY =~ "outside the allowed ScratchRoots" ]]
	# Accepted, but the worker runs as shtest: permission denied.
	for src in /etc/shadow "$P2/secret.txt" "$P2"; do
		api -u shtest POST /v1/requests "$(body "$src" "$D/$(basename "$src")" ',"uid":0,"user":"root"')"
		[ "$API_STATUS" = 201 ]
		[ "$(jq -r .uid <<<"$API_BODY")" = "$(id -u shtest)" ]
		id=$(jq -r .id <<<"$API_BODY")
		wait_for 30 bash -c "curl -sf --unix-socket '$STAGEHAND_SOCKET' http://x/v1/requests/$id | jq -e '.state == \"failed_final\"' >/dev/null"
		api GET "/v1/requests/$id"
		echo "$API_BODY"
		[[ "$(jq -r .error <<<"$API_BODY")" =~ "Permission denied" ]]
	done
	# shtest2's request is not shtest's to see, cancel or retry.
	install -d -o shtest2 -g shtest2 "$STAGEHAND_TESTBED_SCRATCH/shtest2"
	api -u shtest2 POST /v1/requests "$(body /nonexistent-$$ "$STAGEHAND_TESTBED_SCRATCH/shtest2/x-$$")"
	[ "$API_STATUS" = 201 ]
	id2=$(jq -r .id <<<"$API_BODY")
	api -u shtest GET "/v1/requests/$id2"
	[ "$API_STATUS" = 403 ]
	api -u shtest POST "/v1/requests/$id2/cancel"
	[ "$API_STATUS" = 403 ]
	api -u shtest GET "/v1/requests?all=1"
	[ "$API_STATUS" = 403 ] || run ! jq -e --arg id "$id2" '.requests[] | select((.id | tostring) == $id)' <<<"$API_BODY" >/dev/null
	# Only root or an admin may report a job's end.
	api -u shtest POST /v1/jobs/1/end '{"state":"COMPLETED","exit_code":0}'
	[ "$API_STATUS" = 403 ]
	run ! leaked
	[ -z "$(find "$D" -type f 2>/dev/null)" ]
}

@test "symlinks to /etc/shadow and into shtest2's home in stage-in and archive trees are copied as links, never followed" {
	install -d -o shtest -g shtest "$WD/tree" "$WD/tree/sub"
	runuser -u shtest -- bash -c "cd '$WD/tree' && echo ok > real.txt && ln -s /etc/shadow shadow &&
		ln -s '$P2/secret.txt' sub/secret && ln -s '$P2' sub/privdir && ln -s ../../../../.. up"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/tree to=in
#DATA archive=results
cp -a $WD/tree/. results/
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	for d in "$WD/in" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/results"; do
		[ "$d" = "$WD/in" ] || wait_for 60 label_is "$WD/results" archived
		[ -L "$d/shadow" ] && [ "$(readlink "$d/shadow")" = /etc/shadow ]
		[ -L "$d/sub/secret" ] && [ "$(readlink "$d/sub/secret")" = "$P2/secret.txt" ]
		[ -L "$d/sub/privdir" ]
		[ -L "$d/up" ]
		[ "$(cat "$d/real.txt")" = ok ]
		[ "$(stat -c %U "$d/real.txt")" = shtest ]
	done
	# A stage-in whose source itself is a link to a file shtest cannot read.
	# Two refusals are right: the owner's open of /etc/shadow fails
	# ("Permission denied"), or the stage-in reads the source through the
	# archive restore (it does here since stage-ins from archive copies
	# landed: "stage-in from the archive: ... 'shadow-link' ... is a symbolic
	# link"), which refuses the link itself before opening anything.
	# Either way nothing is read, which the two checks after it prove.
	runuser -u shtest -- ln -s /etc/shadow "$WD/shadow-link"
	write_user_script shtest "$WD/job2.sh" <<EOF
#!/bin/bash
#DATA stage_in=$WD/shadow-link
echo ran > ran2.txt
EOF
	submit -d "$WD" "$WD/job2.sh"
	wait_for 60 comment_matches "$j" "stage-in failed.*(Permission denied|'shadow-link' .* is a symbolic link)"
	run ! leaked
	run ! grep -rqsF root: "$STAGEHAND_TESTBED_SCRATCH/shtest" "$STAGEHAND_TESTBED_ARCHIVE/shtest"
}

@test "a stage-in destination that is a symlink into shtest2's directory: refused, nothing written there" {
	user_file shtest "$WD/src/in.dat" 1
	runuser -u shtest -- ln -s "$P2" "$WD/in"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src to=in
echo ran > ran.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_for 60 comment_matches "$j" "stage-in failed"
	echo "$(comment "$j")"
	[[ "$(comment "$j")" =~ "Permission denied" ]]
	[ "$(ls -A "$P2")" = secret.txt ]
}

@test "FIFOs, sockets and device nodes in a tree are skipped with a reason and never block" {
	install -d -o shtest -g shtest "$WD/tree"
	runuser -u shtest -- bash -c "cd '$WD/tree' && echo ok > real.txt && mkfifo fifo &&
		python3 -c 'import socket; s=socket.socket(socket.AF_UNIX); s.bind(\"sock\")'"
	# Users cannot mknod; root plants the nastiest devices (reading them never ends).
	mknod "$WD/tree/zero" c 1 5
	mknod "$WD/tree/random" c 1 8
	chown -h shtest:shtest "$WD/tree/zero" "$WD/tree/random"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/tree to=in
#DATA archive=in
echo done > done.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	[ "$(cat "$WD/in/real.txt")" = ok ]
	[ ! -e "$WD/in/fifo" ] && [ ! -e "$WD/in/zero" ] && [ ! -e "$WD/in/sock" ]
	r=$(job_requests "$j" | jq -s '[.[] | select(.action == "stage_in")][0]')
	[ "$(jq -r .files_skipped <<<"$r")" = 4 ]
	id=$(jq -r .id <<<"$r")
	items=$(api_get "/v1/requests/$id?items=1")
	echo "$items" | jq -c '.items[] | select(.state == "skipped")'
	[ "$(jq '[.items[] | select(.state == "skipped" and (.error | test("skipped")))] | length' <<<"$items")" = 4 ]
	jq -e '.items[] | select(.relpath == "fifo") | .error | test("FIFO")' <<<"$items"
	jq -e '.items[] | select(.relpath == "zero") | .error | test("device")' <<<"$items"
	# The archive of a tree with specials works the same way.
	wait_for 60 label_is "$WD/in" archived
	report "specials: FIFO, socket, 2 char devices skipped with reasons ($(jq -r '[.items[] | select(.state == "skipped") | .error] | unique | join("; ")' <<<"$items"))"
}

@test "hard links to other users' files: refused by the kernel (fs.protected_hardlinks=1); what is possible is within the user's rights" {
	[ "$(sysctl -n fs.protected_hardlinks)" = 1 ] || skip "fs.protected_hardlinks is not 1 here"
	install -d -o shtest -g shtest "$WD/tree"
	# A hard link never crosses a mount, and the multi-node bed's state
	# directory is a mount of its own: there /etc/shadow is refused with
	# EXDEV before protected_hardlinks is asked. Refused either way.
	run runuser -u shtest -- ln /etc/shadow "$WD/tree/shadow"
	echo "$output"
	[ "$status" -ne 0 ]
	[[ $output =~ "Operation not permitted" || $output =~ "Invalid cross-device link" ]]
	# The victims on the same mount as the tree, so that protected_hardlinks
	# is what refuses: a root file like /etc/shadow, shtest2's private file
	# and one of shtest2's that shtest may read but not write.
	V=$(user_workdir shtest2)
	chmod 0755 "$V"
	echo root-only >"$V/root.txt"
	chmod 0600 "$V/root.txt"
	echo "$SECRET_MARK" >"$V/secret.txt"
	echo readable >"$V/r.txt"
	echo shared >"$V/w.txt"
	chown shtest2:shtest2 "$V/secret.txt" "$V/r.txt" "$V/w.txt"
	chmod 0600 "$V/secret.txt"
	chmod 0644 "$V/r.txt"
	[ "$(stat -c %m "$V")" = "$(stat -c %m "$WD/tree")" ]
	for f in root.txt secret.txt r.txt; do
		run runuser -u shtest -- ln "$V/$f" "$WD/tree/$f"
		echo "$output"
		[ "$status" -ne 0 ]
		[[ $output =~ "Operation not permitted" ]]
	done
	# Only a file shtest may read and write can be linked (protected_hardlinks):
	# copying it is within shtest's rights anyway.
	chmod 0666 "$V/w.txt"
	runuser -u shtest -- ln "$V/w.txt" "$WD/tree/w"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/tree to=in
true
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	[ "$(cat "$WD/in/w")" = shared ]
	[ "$(stat -c %U "$WD/in/w")" = shtest ]
	# The copy is the user's own file, not a link to shtest2's.
	[ "$(stat -c %h "$WD/in/w")" = 1 ]
	[ "$(cat "$V/w.txt")" = shared ]
	[ "$(cat "$V/root.txt")" = root-only ]
	[ "$(cat "$V/secret.txt")" = "$SECRET_MARK" ]
	[ ! -e "$WD/in/secret.txt" ] && [ ! -e "$WD/in/root.txt" ] && [ ! -e "$WD/in/r.txt" ]
	rm -rf "$V"
	report "hard links (fs.protected_hardlinks=1): ln to a root 0600 file and to a 0600 and a 0644 file of shtest2 on the tree's mount refused (EPERM); /etc/shadow refused (EPERM, or EXDEV across the bed's mount); ln to a 0666 file allowed and copied as shtest's own file"
}

@test "names with newlines, invalid UTF-8 and control characters are copied and reported in valid JSON" {
	install -d -o shtest -g shtest "$WD/tree"
	runuser -u shtest -- python3 - "$WD/tree" <<'PY'
import os, sys
d = sys.argv[1].encode()
for name in [b"new\nline.txt", b"bad-\xff\xfe.dat", b"tab\there", b"esc\x1b[31m", b"quote\"back\\slash", b"\xc3\xa9t\xc3\xa9.txt"]:
    with open(os.path.join(d, name), "wb") as f:
        f.write(b"content of " + name)
PY
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/tree to=in
#DATA archive=in
true
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	wait_for 60 label_is "$WD/in" archived
	# Every name arrived byte for byte, with its content, in both copies.
	python3 - "$WD/tree" "$WD/in" "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j/in" <<'PY'
import os, sys
src, *dsts = [a.encode() for a in sys.argv[1:]]
names = sorted(os.listdir(src))
assert len(names) == 6, names
for d in dsts:
    assert sorted(os.listdir(d)) == names, (d, sorted(os.listdir(d)))
    for n in names:
        assert open(os.path.join(d, n), "rb").read() == open(os.path.join(src, n), "rb").read(), n
PY
	# The status JSON stays valid and names every item.
	for id in $(job_requests "$j" | jq -r .id); do
		curl -sf --unix-socket "$STAGEHAND_SOCKET" "http://x/v1/requests/$id?items=1" >"$BATS_TEST_TMPDIR/r.json"
		python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); assert len(r["items"]) == 6, r["items"]; assert r["state"] == "done"' "$BATS_TEST_TMPDIR/r.json"
	done
	run run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status --json "$j"
	[ "$status" -eq 0 ]
	jq -e . <<<"$output" >/dev/null
}

@test "#DATA paths with invalid UTF-8 or control characters are refused by sbatch with the line number" {
	printf '#!/bin/bash\n#DATA stage_in=/tmp/bad-\xff\xfe\ntrue\n' >"$WD/u.sh"
	chown shtest "$WD/u.sh"
	sbatch_refused "$WD/u.sh" "line 2.*UTF-8"
	printf '#!/bin/bash\n#DATA archive="res\x01ults"\ntrue\n' >"$WD/c.sh"
	chown shtest "$WD/c.sh"
	sbatch_refused "$WD/c.sh" "line 2.*control"
}

# The job's end was received and every after-job request of it is finished.
after_job_settled() {
	api_get "/v1/jobs/$1" | jq -e '.end != null and ([.requests[] |
		select(.action != "stage_in" and (.state | test("^(queued|running|verifying|failed_retryable)$")))] | length == 0)' >/dev/null
}

# The daemon has made job $1's archive request.
archive_request_made() {
	[[ -n "$(job_requests "$1" | jq -r 'select(.action == "archive") | .id')" ]]
}

# What shtest's 'stagehand status JOB' prints.
user_status() {
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status "$1" 2>&1
}

@test "archive=results/ where results is a symlink to /etc before submit: refused by the plugin, nothing archived, the user is told" {
	runuser -u shtest -- ln -s /etc "$WD/results"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results/
echo ran > ran.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" 'FAILED|COMPLETED' 60
	wait_for 60 after_job_settled "$j"
	# Nothing of /etc under the job's name, and no label put on /etc.
	[ -z "$(find "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j" -mindepth 1 2>/dev/null | head -1)" ]
	[ -z "$(getfattr -n user.stagehand.policy /etc 2>/dev/null)" ]
	out=$(user_status "$j")
	echo "$out"
	[[ $out =~ "line 3" ]]
	[[ $out =~ "symbolic link" ]]
	# The daemon learned of the plugin's refusal: no after-job request at all.
	[[ "$(api_get "/v1/jobs/$j" | jq -r .refused)" =~ "symbolic link" ]]
	[ -z "$(job_requests "$j" | jq -c 'select(.action != "stage_in")')" ]
	[[ $out =~ "refused at job start" ]]
}

@test "the job swaps results/ for a symlink to /etc before it exits: the archive refuses it with the #DATA line and the link" {
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results/
echo data > results/a.txt
rm -rf results && ln -s /etc results
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	wait_for 60 archive_request_made "$j"
	wait_for 60 after_job_settled "$j"
	[ -z "$(find "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j" -type f 2>/dev/null | head -1)" ]
	err=$(job_requests "$j" | jq -r 'select(.action == "archive") | .error')
	echo "$err"
	[[ $err =~ "#DATA line 3" ]]
	[[ $err =~ "'results'" ]]
	[[ $err =~ "symbolic link (to '/etc')" ]]
	[[ "$(user_status "$j")" =~ "symbolic link" ]]
}

@test "a symlink in a middle component (out/ swapped during the job) is refused too" {
	install -d -o shtest -g shtest "$WD/elsewhere/results"
	runuser -u shtest -- bash -c "echo foreign > '$WD/elsewhere/results/f.txt'"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=out/results
echo data > out/results/a.txt
rm -rf out && ln -s $WD/elsewhere out
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	wait_for 60 archive_request_made "$j"
	wait_for 60 after_job_settled "$j"
	[ -z "$(find "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j" -type f 2>/dev/null | head -1)" ]
	err=$(job_requests "$j" | jq -r 'select(.action == "archive") | .error')
	echo "$err"
	[[ $err =~ "'out'".*"symbolic link" ]]
	[ -z "$(getfattr -n user.stagehand.policy "$WD/elsewhere/results" 2>/dev/null)" ]
}

@test "keep=no and results/ swapped for a symlink to another tree of the user's: nothing archived, nothing deleted through the link" {
	install -d -o shtest -g shtest "$WD/precious"
	for i in 1 2 3; do runuser -u shtest -- bash -c "echo $i > '$WD/precious/f$i.txt'"; done
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results/ keep=no
echo data > results/a.txt
rm -rf results && ln -s $WD/precious results
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	# With SlurmWatch the daemon turns the end into requests only once
	# slurmctld confirms it: wait for the archive request to exist first.
	wait_for 60 archive_request_made "$j"
	wait_for 60 after_job_settled "$j"
	[ "$(ls "$WD/precious" | tr '\n' ' ')" = "f1.txt f2.txt f3.txt " ]
	[ -z "$(find "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j" -type f 2>/dev/null | head -1)" ]
	[[ "$(job_requests "$j" | jq -r 'select(.action == "archive") | .error')" =~ "symbolic link" ]]
}

@test "keep=no and out/ (a middle component) swapped for a relative link to another tree of the user's: nothing archived, nothing deleted through it" {
	install -d -o shtest -g shtest "$WD/elsewhere/results"
	for i in 1 2 3; do runuser -u shtest -- bash -c "echo $i > '$WD/elsewhere/results/f$i.txt'"; done
	# A relative link that stays below the work directory: RESOLVE_BENEATH
	# alone would let it through; only the no-link rule refuses it.
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=out/results keep=no
echo data > out/results/a.txt
rm -rf out && ln -s elsewhere out
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	wait_for 60 archive_request_made "$j"
	wait_for 60 after_job_settled "$j"
	[ "$(ls "$WD/elsewhere/results" | tr '\n' ' ')" = "f1.txt f2.txt f3.txt " ]
	[ -z "$(find "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j" -type f 2>/dev/null | head -1)" ]
	err=$(job_requests "$j" | jq -r 'select(.action == "archive") | .error')
	echo "$err"
	[[ $err == *"'out' in '"*"/out/results' is a symbolic link (to 'elsewhere')"* ]]
}

@test "results/ swapped for a link through /proc/self/root (a magic link): refused, nothing archived or deleted" {
	install -d -o shtest -g shtest "$WD/elsewhere/results"
	runuser -u shtest -- bash -c "echo foreign > '$WD/elsewhere/results/f.txt'"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA archive=results/ keep=no
echo data > results/a.txt
rm -rf results && ln -s /proc/self/root$WD/elsewhere/results results
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 60
	wait_for 60 archive_request_made "$j"
	wait_for 60 after_job_settled "$j"
	[ "$(cat "$WD/elsewhere/results/f.txt")" = foreign ]
	[ -z "$(find "$STAGEHAND_TESTBED_ARCHIVE/shtest/$j" -type f 2>/dev/null | head -1)" ]
	err=$(job_requests "$j" | jq -r 'select(.action == "archive") | .error')
	echo "$err"
	[[ $err == *"'results' in '"*"/results' is a symbolic link (to '/proc/self/root/"* ]]
}
