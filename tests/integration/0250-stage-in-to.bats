#!/usr/bin/env bats
# Where `#DATA stage_in=SRC to=DEST` puts its input (docs/directives.md,
# "Where stage_in puts its input"): a trailing '/' on DEST, or several
# stage_in lines sharing one DEST, make DEST a directory (created when
# missing) that receives SRC under its own name; without them DEST names
# the copy itself. Real jobs submitted with sbatch as shtest.

load helpers
load ../faults/faults

setup() { faults_setup; }
teardown() { faults_teardown; }

@test "to=DIR/ in a fresh work directory: a directory is made and the file lands inside it" {
	user_file shtest "$WD/src/input.dat" 5
	want=$(sha256sum <"$WD/src/input.dat" | cut -d' ' -f1)
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/input.dat to=input/
ls input/ > listing.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	[ -d "$WD/input" ]
	[ "$(stat -c %U "$WD/input")" = shtest ]
	[ "$(cat "$WD/listing.txt")" = input.dat ]
	[ "$(sha256sum <"$WD/input/input.dat" | cut -d' ' -f1)" = "$want" ]
}

@test "to=NAME without '/': NAME is the copy itself" {
	user_file shtest "$WD/src/input.dat" 1
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/input.dat to=renamed.dat
test -f renamed.dat
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	[ -f "$WD/renamed.dat" ]
	cmp "$WD/src/input.dat" "$WD/renamed.dat"
}

@test "several stage_in lines with one to= (no '/'): a directory holding every input" {
	user_file shtest "$WD/src/a.dat" 1
	user_file shtest "$WD/src/b.dat" 1
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/a.dat to=inputs
#DATA stage_in=$WD/src/b.dat to=inputs
ls inputs > listing.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	[ "$(tr '\n' ' ' <"$WD/listing.txt")" = "a.dat b.dat " ]
	cmp "$WD/src/a.dat" "$WD/inputs/a.dat"
	cmp "$WD/src/b.dat" "$WD/inputs/b.dat"
}

@test "to=DIR/ with a directory source: the tree lands inside DIR under its own name" {
	install -d -o shtest -g shtest "$WD/src/set1/sub"
	runuser -u shtest -- bash -c "echo one > '$WD/src/set1/sub/one.txt'"
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=$WD/src/set1 to=data/
cat data/set1/sub/one.txt > got.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	[ "$(cat "$WD/got.txt")" = one ]
}

@test "stage_in=file:///PATH: the path itself is staged, as a plain path would be" {
	user_file shtest "$WD/src/by-url.dat" 5
	want=$(sha256sum <"$WD/src/by-url.dat" | cut -d' ' -f1)
	write_user_script shtest "$WD/job.sh" <<EOF
#!/bin/bash
#SBATCH --output=$WD/out-%j.txt
#DATA stage_in=file://$WD/src/by-url.dat to=input/
ls input/ > listing.txt
EOF
	submit -d "$WD" "$WD/job.sh"
	wait_job_state "$j" COMPLETED 90
	[ "$(cat "$WD/listing.txt")" = by-url.dat ]
	[ "$(stat -c %U "$WD/input/by-url.dat")" = shtest ]
	[ "$(sha256sum <"$WD/input/by-url.dat" | cut -d' ' -f1)" = "$want" ]
}
