#!/usr/bin/env bats
# Job arrays with #DATA on the real test bed, as an ordinary user: a held
# array is split into tasks, each task's %a inputs are staged before that
# task runs, an input without %a is staged once for the whole array, each
# task is released on its own (the %N throttle still holds) and archived
# under ARCHIVE/USER/ARRAYID_TASK. Needs 'scripts/testbed up' with the Lua
# hook, the SPANK plugin and stagehandd (all built in this tree), or an
# epilog-only bed (--epilog-only), where the job scripts find their input
# directories by the documented paths (without_plugin_lines).

bats_require_minimum_version 1.5.0

load helpers

setup() {
	daemon_setup
}

teardown() {
	cancel_jobs "${JOBS[@]}"
}

# tasks A: "TASK JOBID STATE" per task of array A, as slurmctld lists them
# (nothing while the array is still one pending record).
tasks() {
	scontrol -o show job "$1" 2>/dev/null |
		sed -n 's/^JobId=\([0-9]*\) ArrayJobId=[0-9]* ArrayTaskId=\([0-9]*\) .* JobState=\([A-Z_]*\) .*/\2 \1 \3/p' |
		sort -n
}

# all_tasks_done A N: N tasks listed, every one in a final state.
all_tasks_done() {
	local t
	t=$(tasks "$1")
	[[ $(wc -l <<<"$t") -eq $2 ]] || return 1
	[[ -z $(grep -vE ' (COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|PREEMPTED|OUT_OF_MEMORY)$' <<<"$t") ]]
}

# task_field A TASK FIELD: one field of one task's record ('scontrol show job'
# of an array's job id lists every task, so the task's own line is picked).
# task_admin_comment ARRAY TASK: one task's AdminComment (stagehand's record:
# its status and markers look like keys, so it runs to scontrol's next field).
task_admin_comment() {
	local line
	line=$(scontrol -o show job "$1" 2>/dev/null | grep -E "^JobId=[0-9]+ ArrayJobId=$1 ArrayTaskId=$2 ")
	[[ $line == *" AdminComment="* ]] || return 0
	line=${line#* AdminComment=}
	line=${line%% Comment=*}
	printf '%s\n' "${line%% StdErr=*}"
}

# task_status ARRAY TASK: stagehandd's status text for one task.
task_status() {
	status_text "$(task_admin_comment "$1" "$2")"
}

task_field() {
	scontrol -o show job "$1" 2>/dev/null |
		grep -E "^JobId=[0-9]+ ArrayJobId=$1 ArrayTaskId=$2 " | awk -v f="$3" '
	{
		n = split($0, t, " "); val = ""; found = 0
		for (i = 1; i <= n; i++) {
			if (found) {
				if (t[i] ~ /^[A-Za-z][A-Za-z0-9_:\/]*=/) break
				val = val " " t[i]
			} else if (index(t[i], f "=") == 1) {
				val = substr(t[i], length(f) + 2); found = 1
			}
		}
		if (found) print val
	}'
}

status_as() { # the user's 'stagehand status --all' (every request)
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" status --all "$@"
}

@test "array 1-8%4: per-task %a inputs staged before each task, the shared input once, one archive per task" {
	install -d -o shtest -g shtest "$WD/params"
	for i in $(seq 1 8); do
		echo "params of task $i $RANDOM" >"$WD/params/$i.txt"
	done
	runuser -u shtest -- dd if=/dev/urandom of="$WD/params/ref.db" bs=1M count=2 status=none
	chown -R shtest:shtest "$WD/params"
	want_ref=$(sha256sum <"$WD/params/ref.db" | cut -d' ' -f1)
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --job-name=sweep
#SBATCH --output=$WD/out-%A_%a.txt
#DATA stage_in=$WD/params/%a.txt
#DATA stage_in=$WD/params/ref.db
#DATA archive=res-%a
$(without_plugin_lines)
t=\$SLURM_ARRAY_TASK_ID
mkdir -p res-\$t
cp "\$STAGEHAND_INPUT_DIR/\$t.txt" res-\$t/params.txt
sha256sum < "\$STAGEHAND_SHARED_INPUT_DIR/ref.db" | cut -d' ' -f1 > res-\$t/ref.sha
ls "\$STAGEHAND_INPUT_DIR" > res-\$t/inputs.txt
echo "\$SLURM_JOB_ID" > res-\$t/jobid
EOF
	submit -d "$WD" "$WD/job.sh" --array=1-8%4
	A=$j
	wait_for 180 all_tasks_done "$A" 8 || { tasks "$A"; false; }
	tasks "$A"
	for i in $(seq 1 8); do
		read -r _ id st < <(tasks "$A" | awk -v t="$i" '$1 == t')
		[ "$st" = COMPLETED ]
		# Released by stagehandd (root), task by task.
		[[ "$(task_admin_comment "$A" "$i")" =~ "stagehand:hold=released" ]]
		[[ "$(task_status "$A" "$i")" =~ "inputs staged" ]]
		# Its own %a input, in its own input dir, and only that one there.
		cmp "$WD/params/$i.txt" "$WD/res-$i/params.txt"
		[ "$(cat "$WD/res-$i/inputs.txt")" = "$i.txt" ]
		[ "$(cat "$WD/res-$i/ref.sha")" = "$want_ref" ]
		[ "$(cat "$WD/res-$i/jobid")" = "$id" ]
		# Archived once, under ARRAYID_TASK.
		wait_for 60 test -f "$STAGEHAND_TESTBED_ARCHIVE/shtest/${A}_$i/res-$i/params.txt"
		cmp "$WD/params/$i.txt" "$STAGEHAND_TESTBED_ARCHIVE/shtest/${A}_$i/res-$i/params.txt"
		[ ! -e "$STAGEHAND_TESTBED_ARCHIVE/shtest/$id" ]
	done
	# The input without %a: one request, one copy, in the array's shared dir.
	st=$(status_as)
	[ "$(grep -c "$WD/params/ref.db -> " <<<"$st")" -eq 1 ]
	grep -q "params/ref.db -> $STAGEHAND_TESTBED_SCRATCH/shtest/$A/shared/ref.db" <<<"$st"
	dirs=()
	for id in $(tasks "$A" | awk '{ print $2 }'); do
		dirs+=("$STAGEHAND_TESTBED_SCRATCH/shtest/$id")
	done
	[ "$(find "${dirs[@]}" -name ref.db | wc -l)" -eq 1 ]
	# %a expanded everywhere: no request names NO_VAL (4294967294).
	run ! grep -q 4294967294 <<<"$st"
	# One archive request per task.
	[ "$(grep -cE " archive .*$WD/res-[1-8] -> .*/${A}_[1-8]/res-[1-8]\$" <<<"$st")" -eq 8 ]
}

@test "array throttle %1 survives the split: never two tasks at once, all staged and run" {
	install -d -o shtest -g shtest "$WD/in"
	for i in 1 2 3; do echo "in $i" >"$WD/in/$i"; done
	chown -R shtest:shtest "$WD/in"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=/dev/null
#DATA stage_in=$WD/in/%a
$(without_plugin_lines)
cp "\$STAGEHAND_INPUT_DIR/\$SLURM_ARRAY_TASK_ID" got-\$SLURM_ARRAY_TASK_ID
sleep 2
EOF
	submit -d "$WD" "$WD/job.sh" --array=1-3%1
	A=$j
	max=0
	for ((k = 0; k < 600; k++)); do
		r=$(squeue -h -r -j "$A" -t RUNNING -o %i 2>/dev/null | wc -l)
		((r > max)) && max=$r
		all_tasks_done "$A" 3 && break
		sleep 0.2
	done
	tasks "$A"
	all_tasks_done "$A" 3
	[ "$max" -eq 1 ]
	[ "$(scontrol -o show job "$A" | grep -c 'ArrayTaskThrottle=1')" -ge 1 ]
	for i in 1 2 3; do
		[ "$(task_field "$A" "$i" JobState)" = COMPLETED ]
		cmp "$WD/in/$i" "$WD/got-$i"
	done
}

@test "array: a task whose %a input is missing stays held alone; fixed and retried, it runs" {
	install -d -o shtest -g shtest "$WD/in"
	echo one >"$WD/in/1"
	echo three >"$WD/in/3"
	chown -R shtest:shtest "$WD/in"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=/dev/null
#DATA stage_in=$WD/in/%a
$(without_plugin_lines)
cp "\$STAGEHAND_INPUT_DIR/\$SLURM_ARRAY_TASK_ID" got-\$SLURM_ARRAY_TASK_ID
EOF
	submit -d "$WD" "$WD/job.sh" --array=1-3
	A=$j
	wait_for 60 test -f "$WD/got-1"
	wait_for 60 test -f "$WD/got-3"
	t2() { task_field "$A" 2 "$1"; }
	wait_for 30 eval '[[ "$(task_status "$A" 2)" =~ "stage-in failed" ]]'
	[ "$(t2 JobState)" = PENDING ]
	[[ "$(task_status "$A" 2)" =~ in/2 ]]
	# squeue shows the task by its array name with its own status; its comment stays empty.
	squeue -h -j "${A}_2" -O 'JobArrayID:20,State:10,admin_comment:2000' |
		grep -q "^${A}_2 *PENDING *stagehand:status=stage-in failed"
	[ -z "$(squeue -h -j "${A}_2" -o '%k' | sed 's/(null)//')" ]
	id2=$(tasks "$A" | awk '$1 == 2 { print $2 }')
	echo two >"$WD/in/2"
	chown shtest:shtest "$WD/in/2"
	run_as_user shtest env STAGEHAND_SOCKET="$STAGEHAND_SOCKET" "$STAGEHAND" retry "$id2"
	wait_for 60 eval '[ "$(t2 JobState)" = COMPLETED ]' 
	[ "$(cat "$WD/got-2")" = two ]
}
