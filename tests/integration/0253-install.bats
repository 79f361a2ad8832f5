#!/usr/bin/env bats
# What an admin gets from 'make install' and the shipped unit: man pages
# that name this build's sysconfdir, no libtool archive in the Slurm plugin
# directory, and a daemon that finds the site's slurm.conf through
# SlurmConf= when SLURM_CONF is not in its environment (the unit starts it
# without one): it then releases a held job on the real test bed.

bats_require_minimum_version 1.5.0

load helpers
load ../faults/faults

setup() {
	faults_setup
	BUILD=${STAGEHAND_BUILD_DIR:?}
	DEST=$BATS_TEST_TMPDIR/dest
}

teardown() {
	if [[ -n ${PID2:-} ]]; then
		kill "$PID2" 2>/dev/null
		wait "$PID2" 2>/dev/null || true
	fi
	faults_teardown
}

# mkvar NAME: the value make uses for NAME in the build tree.
mkvar() {
	# Under "make integration" MAKEFLAGS carries -w: without this the answer
	# would come wrapped in "Entering directory" lines.
	env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s --no-print-directory -C "$BUILD" -f - print <<<"include Makefile
print: ; @echo \$($1)" 2>/dev/null
}

@test "make install: man pages name the configured sysconfdir; no stagehand.la in the plugin directory" {
	sysconfdir=$(mkvar sysconfdir)
	plugindir=$(mkvar slurmplugindir)
	[ -n "$sysconfdir" ] && [ -n "$plugindir" ]
	make -s -C "$BUILD" install DESTDIR="$DEST" >"$BATS_TEST_TMPDIR/install.log" 2>&1 ||
		{ cat "$BATS_TEST_TMPDIR/install.log"; false; }
	[ -f "$DEST$plugindir/stagehand.so" ] || {
		echo "no $DEST$plugindir/stagehand.so; installed plugin files:"
		find "$DEST" -name 'stagehand*' | sed 's/^/  /'
		tail -n 30 "$BATS_TEST_TMPDIR/install.log"
		false
	}
	[ ! -e "$DEST$plugindir/stagehand.la" ]
	mandir=$(mkvar mandir)
	for page in man8/stagehandd.8 man1/stagehand.1 man5/stagehand.conf.5; do
		echo "$page"
		grep -qF "$sysconfdir/stagehand/stagehand.conf" "$DEST$mandir/$page"
		run ! grep -q '@sysconfdir@' "$DEST$mandir/$page"
		if [ "$sysconfdir" != /etc ]; then
			# No /etc/stagehand/stagehand.conf but inside the configured one
			# (/usr/local/etc/stagehand/stagehand.conf contains it).
			rest=$(sed "s|$sysconfdir/stagehand/stagehand\.conf||g" "$DEST$mandir/$page")
			run ! grep -qF "/etc/stagehand/stagehand.conf" <<<"$rest"
		fi
	done
	grep -qF "SlurmConf" "$DEST$mandir/man5/stagehand.conf.5"
	grep -qF "CreateUserDirs" "$DEST$mandir/man5/stagehand.conf.5"
	unit=$(find "$DEST" -name stagehandd.service)
	grep -qx "EnvironmentFile=-$sysconfdir/default/stagehandd" "$unit"
	# make uninstall leaves no plugin behind either.
	make -s -C "$BUILD" uninstall DESTDIR="$DEST" >/dev/null 2>&1
	[ ! -e "$DEST$plugindir/stagehand.so" ]
}

@test "stagehandd without SLURM_CONF in its environment finds slurm.conf through SlurmConf= and releases a held job" {
	conf=$BATS_TEST_TMPDIR/stagehand.conf
	grep -v '^SlurmConf=' "$STAGEHAND_TESTBED_DIR/etc/stagehand.conf" >"$conf"
	echo "SlurmConf=$SLURM_CONF" >>"$conf"
	daemon_stop
	env -u SLURM_CONF "$BUILD/daemon/stagehandd" -F -c "$conf" \
		>"$BATS_TEST_TMPDIR/d2.log" 2>&1 &
	PID2=$!
	wait_for 20 test -S "$STAGEHAND_SOCKET"
	user_file shtest "$WD/src/in.dat" 1
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/in.dat to=in.dat
true
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90 || { cat "$BATS_TEST_TMPDIR/d2.log"; false; }
	cmp "$WD/src/in.dat" "$WD/in.dat"
	grep -q "SlurmConf: libslurm reads $SLURM_CONF" "$BATS_TEST_TMPDIR/d2.log"
}
