#!/usr/bin/env bats
# stagehand doctor (docs/admin-guide.md, "Checking a node: stagehand
# doctor"): on the test bed's real setup (slurm.conf, plugstack.conf,
# munged, stagehandd, scratch) it finds nothing wrong, on the service host
# and on a compute node; then each check is shown to catch its problem by
# breaking that part of the bed on purpose and putting it back. Every
# failure must exit 1 and carry a fix hint.

load helpers
load ../faults/faults

setup() {
	faults_setup
	ETC=$STAGEHAND_TESTBED_DIR/etc
	SAVE=$BATS_TEST_TMPDIR/save
	mkdir -p "$SAVE"
	cp -a "$ETC/slurm.conf" "$ETC/plugstack.conf" "$ETC"/*.lua "$SAVE/"
	chmod_scratch=$(stat -c %a "$STAGEHAND_TESTBED_SCRATCH")
}

teardown() {
	cp -a "$SAVE/slurm.conf" "$SAVE/plugstack.conf" "$ETC/"
	rm -f "$ETC"/*.lua
	cp -a "$SAVE"/*.lua "$ETC/"
	chmod "$chmod_scratch" "$STAGEHAND_TESTBED_SCRATCH"
	rm -rf "$STAGEHAND_TESTBED_SCRATCH/shtest2-doctor"
	faults_teardown
}

# doctor [ARGS...]: the doctor as on this host, against the bed's files;
# the JSON report in $out, the exit status in $status.
doctor() {
	run "$STAGEHAND" doctor --json --config "$STAGEHAND_TESTBED_CONF" --slurm-conf "$SLURM_CONF" "$@"
	out=$output
	echo "$out" | jq -c '.checks[] | select(.status != "ok")' >&3 || true
}

# fails CHECK REGEX: exit 1, and CHECK failed with a message matching REGEX and a hint.
fails() {
	[ "$status" -eq 1 ] || { echo "exit $status, expected 1"; return 1; }
	echo "$out" | jq -e --arg c "$1" --arg re "$2" \
		'[.checks[] | select(.check == $c and .status == "fail" and (.message | test($re)) and (.hint | length > 0))] | length > 0' >/dev/null ||
		{ echo "no failed '$1' check matching /$2/ with a hint in: $out"; return 1; }
}

# passes CHECK: CHECK has no failure.
passes() {
	echo "$out" | jq -e --arg c "$1" '[.checks[] | select(.check == $c and .status == "fail")] | length == 0' >/dev/null
}

@test "the bed as set up: no problem on the service host (TCP + MUNGE from the plugstack line) and on compute node n1" {
	doctor
	[ "$status" -eq 0 ]
	echo "$out" | jq -e '.ok == true' >/dev/null
	for c in config slurm.conf plugstack slurm-release daemon munge xattr scratch site; do
		echo "$out" | jq -e --arg c "$c" '[.checks[] | select(.check == $c and .status == "ok")] | length > 0' >/dev/null
	done
	echo "$out" | jq -e '.checks[] | select(.check == "daemon") | .message | test("TCP \\+ MUNGE")' >/dev/null
	# job_submit.lua loads the stagehand module of this release.
	echo "$out" | jq -e '.checks[] | select(.check == "lua" and .status == "ok") | .message | test("job_submit.lua: stagehand module [0-9.]+, same as stagehandd")' >/dev/null
	# Text output on a compute node (its own network and mount namespace).
	run on_node n1 "$STAGEHAND" doctor --config "$STAGEHAND_TESTBED_CONF" --slurm-conf "$SLURM_CONF"
	echo "$output"
	[ "$status" -eq 0 ]
	[[ $output == *"no problems found"* ]]
}

@test "slurm.conf: neither JobSubmitPlugins=lua nor BurstBufferType=burst_buffer/lua fails; burst_buffer/lua alone is accepted" {
	sed -i '/^JobSubmitPlugins=/d' "$ETC/slurm.conf"
	doctor
	fails slurm.conf "neither JobSubmitPlugins=lua nor BurstBufferType=burst_buffer/lua"
	echo "BurstBufferType=burst_buffer/lua" >>"$ETC/slurm.conf"
	doctor
	passes slurm.conf
	echo "$out" | jq -e '.checks[] | select(.check == "slurm.conf") | .message | test("burst-buffer mode")' >/dev/null
	# ...and then the doctor runs burst_buffer.lua beside slurm.conf, and wants it there.
	echo "$out" | jq -e '.checks[] | select(.check == "lua" and .status == "ok") | .message | test("burst_buffer.lua: stagehand module")' >/dev/null
	rm -f "$ETC/burst_buffer.lua"
	doctor
	fails lua "burst_buffer.lua: No such file"
}

@test "plugstack: no stagehand.so line, a missing .so, a bad argument, and xattr_ns or scratch= disagreeing with stagehand.conf" {
	sed -i 's/^optional /# optional /' "$ETC/plugstack.conf"
	doctor
	fails plugstack "has no 'required\\|optional .*/stagehand.so' line"
	cp -a "$SAVE/plugstack.conf" "$ETC/"
	sed -i 's#[^ ]*/stagehand\.so#/nonexistent/stagehand.so#' "$ETC/plugstack.conf"
	doctor
	fails plugstack "cannot stat /nonexistent/stagehand.so"
	cp -a "$SAVE/plugstack.conf" "$ETC/"
	sed -i '/stagehand\.so/ s/$/ on_error=maybe/' "$ETC/plugstack.conf"
	doctor
	fails plugstack "plugstack.conf:[0-9]+: bad stagehand.so argument: .*on_error"
	cp -a "$SAVE/plugstack.conf" "$ETC/"
	sed -i '/stagehand\.so/ s/$/ xattr_ns=trusted/' "$ETC/plugstack.conf"
	doctor
	fails plugstack "xattr_ns=trusted but .* has XattrNamespace=user"
	cp -a "$SAVE/plugstack.conf" "$ETC/"
	sed -i "/stagehand\\.so/ s#scratch=[^ ]*#scratch=/elsewhere#" "$ETC/plugstack.conf"
	doctor
	fails plugstack "plugstack.conf:[0-9]+: scratch=/elsewhere is not .*, the first entry of stagehandd.s \\(/v1/health\\) ScratchRoots"
}

@test "slurm-release: a plugin built for another Slurm release than this slurmd fails, with the release of each" {
	local so rel
	so=$(awk '$2 ~ /\/stagehand\.so$/ { print $2; exit }' "$ETC/plugstack.conf")
	rel=$(slurmd -V | awk '{ split($2, v, "."); print v[1] "." v[2] }')
	# The bed's plugin says the release of the slurmd it runs with.
	doctor
	echo "$out" | jq -e --arg r "$rel" '.checks[] | select(.check == "slurm-release" and .status == "ok") | .message | test("built for Slurm " + $r)' >/dev/null
	# The same plugin, marked as built for 21.08.
	cp "$so" "$BATS_TEST_TMPDIR/stagehand.so"
	perl -pi -e 's/stagehand-built-for-slurm=\d\d\.\d\d/stagehand-built-for-slurm=21.08/' "$BATS_TEST_TMPDIR/stagehand.so"
	sed -i "s#[^ ]*/stagehand\.so#$BATS_TEST_TMPDIR/stagehand.so#" "$ETC/plugstack.conf"
	doctor
	fails slurm-release "built for Slurm 21\\.08 but slurmd here is $rel"
}

@test "daemon: stopped stagehandd fails over the plugstack's TCP target and over the UNIX socket" {
	daemon_stop
	doctor
	fails daemon "10.244|connect|refused"
	doctor --socket "$STAGEHAND_SOCKET"
	fails daemon "$STAGEHAND_SOCKET"
	daemon_start
	doctor
	[ "$status" -eq 0 ]
}

@test "munge: with munged's socket out of reach (a private mount over /run/munge) the round trip and the TCP daemon check fail" {
	run unshare -m bash -c 'mount -t tmpfs tmpfs /run/munge && exec "$@"' _ \
		"$STAGEHAND" doctor --json --config "$STAGEHAND_TESTBED_CONF" --slurm-conf "$SLURM_CONF"
	out=$output
	fails munge "munge_encode: "
	fails daemon "MUNGE|munge|credential"
}

@test "xattr: a scratch root without xattrs (ramfs) fails with the mount hint" {
	install -d "$BATS_TEST_TMPDIR/noxattr"
	mount -t ramfs ramfs "$BATS_TEST_TMPDIR/noxattr"
	_FAULTS_MOUNTS+=("$BATS_TEST_TMPDIR/noxattr")
	sed -e "s#^ScratchRoots=.*#ScratchRoots=$STAGEHAND_TESTBED_SCRATCH,$BATS_TEST_TMPDIR/noxattr#" \
		"$STAGEHAND_TESTBED_CONF" >"$BATS_TEST_TMPDIR/stagehand.conf"
	run "$STAGEHAND" doctor --json --config "$BATS_TEST_TMPDIR/stagehand.conf" --slurm-conf "$SLURM_CONF"
	out=$output
	fails xattr "noxattr: fsetxattr on a probe file .* failed: Operation not supported"
	echo "$out" | jq -e '.checks[] | select(.check == "xattr" and .status == "fail") | .hint | test("user_xattr")' >/dev/null
	[ -z "$(ls -A "$BATS_TEST_TMPDIR/noxattr")" ]
}

@test "scratch: a world-writable root without the sticky bit, a user's directory owned by another user, one writable by all" {
	chmod 0777 "$STAGEHAND_TESTBED_SCRATCH"
	doctor
	fails scratch "writable by every user without the sticky bit"
	chmod "$chmod_scratch" "$STAGEHAND_TESTBED_SCRATCH"
	# scratch/shtest2 made by the wrong user (the bed's own, if any, is kept aside).
	if [ -e "$STAGEHAND_TESTBED_SCRATCH/shtest2" ]; then
		mv "$STAGEHAND_TESTBED_SCRATCH/shtest2" "$STAGEHAND_TESTBED_SCRATCH/shtest2-doctor"
	fi
	install -d -o shtest -m 0700 "$STAGEHAND_TESTBED_SCRATCH/shtest2"
	doctor
	fails scratch "shtest2 belongs to uid $(id -u shtest), not to shtest2"
	rmdir "$STAGEHAND_TESTBED_SCRATCH/shtest2"
	install -d -o shtest2 -m 0777 "$STAGEHAND_TESTBED_SCRATCH/shtest2"
	doctor
	fails scratch "shtest2 is writable by every user \\(mode 0777\\)"
	rmdir "$STAGEHAND_TESTBED_SCRATCH/shtest2"
	if [ -e "$STAGEHAND_TESTBED_SCRATCH/shtest2-doctor" ]; then
		mv "$STAGEHAND_TESTBED_SCRATCH/shtest2-doctor" "$STAGEHAND_TESTBED_SCRATCH/shtest2"
	fi
}

@test "site: slurmctld's module reading another stagehand.conf (AllowedSchemes, StageInRoots, MaxDirectives, SubmitMode differ) fails" {
	# What slurmctld's module reads when its STAGEHAND_CONF names the file
	# as it was; the daemon's (--config) then gets the site's new policy,
	# and the other submit mode than the bed's.
	cp "$STAGEHAND_TESTBED_CONF" "$BATS_TEST_TMPDIR/as-it-was.conf"
	was=$(sed -n 's/^SubmitMode=//p' "$STAGEHAND_TESTBED_CONF" | tail -n1)
	was=${was:-hold}
	other=bb
	[ "$was" = hold ] || other=hold
	conf_file=$BATS_TEST_TMPDIR/site.conf
	printf '%s\n' "AllowedSchemes=https,s3" "StageInRoots=/project" "MaxDirectives=8" \
		"SubmitMode=$other" >"$conf_file"
	daemon_conf "$conf_file"
	doctor
	passes site
	STAGEHAND_CONF=$BATS_TEST_TMPDIR/as-it-was.conf doctor
	fails site "site_config\\(\\).AllowedSchemes = 'https,s3,ftp,ftps,sftp,file' but .* has AllowedSchemes=https,s3"
	fails site "site_config\\(\\).StageInRoots = '' but .* has StageInRoots=/project"
	fails site "site_config\\(\\).MaxDirectives = '64' but .* has MaxDirectives=8"
	fails site "site_config\\(\\).SubmitMode = '$was' but .* has SubmitMode=$other: .*different modes"
}

@test "lua: a script that does not load, a stagehand module of another version, a module whose site_config() disagrees" {
	rm -f "$ETC/job_submit.lua"
	printf 'local x = = 1\n' >"$ETC/job_submit.lua"
	doctor
	fails lua "job_submit.lua: .*unexpected symbol"
	# The module contract: stagehand.VERSION and stagehand.site_config(), keyed by stagehand.conf names.
	printf 'local stagehand = require("stagehand")\n' >"$ETC/job_submit.lua"
	version=$("$STAGEHAND" --version | awk '{print $2}')
	rm -f "$ETC/stagehand.lua"	# a link into the build tree: never write through it
	cat >"$ETC/stagehand.lua" <<'EOF'
local M = { VERSION = "0.0.1" }
function M.site_config()
	return { AllowedSchemes = { "https", "s3", "ftp", "ftps", "sftp", "file" }, StageInRoots = {},
		MaxDirectives = 64, MaxDirectiveLine = 4096, MaxPathLength = 4095 }
end
return M
EOF
	doctor
	fails lua "stagehand module is version 0.0.1 but stagehandd is $version"
	passes site
	sed -i "s/VERSION = \"0.0.1\"/VERSION = \"$version\"/; s/MaxPathLength = 4095/MaxPathLength = 1024/" "$ETC/stagehand.lua"
	doctor
	passes lua
	fails site "site_config\\(\\).MaxPathLength = '1024' but .* has MaxPathLength=4095"
	sed -i 's/MaxPathLength = 1024/MaxPathLength = 4095/' "$ETC/stagehand.lua"
	doctor
	[ "$status" -eq 0 ]
	echo "$out" | jq -e '.checks[] | select(.check == "lua" and .status == "ok") | .message | test("stagehand module")' >/dev/null
}

@test "config: a bad stagehand.conf line is named with its file and line; the other checks still run" {
	sed 's/^Workers=.*/Workers=lots/' "$STAGEHAND_TESTBED_CONF" >"$BATS_TEST_TMPDIR/bad.conf"
	run "$STAGEHAND" doctor --json --config "$BATS_TEST_TMPDIR/bad.conf" --slurm-conf "$SLURM_CONF"
	out=$output
	fails config "bad.conf:[0-9]+: error: Workers must be an integer"
	passes slurm.conf
	passes munge
}
