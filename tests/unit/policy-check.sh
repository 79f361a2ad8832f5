#!/bin/bash
# policy-check.sh - the policy exports beyond their golden text (TAP):
#  * the GPFS rules from a real labelled tree parse under the grammar of the
#    subset used (gpfs_grammar.py), and the grammar rejects broken rules;
#  * the lustre-hsm and dmf drivers pass bash -n, and, run against stub
#    lfs / dmtag / dmput on a real labelled tree, flag exactly the right
#    files (nested exempt directories inside archive ones included), and do
#    nothing when the scan fails.
# Needs STAGEHAND_BIN; user.* xattrs in STAGEHAND_TEST_TMP (skips otherwise).

bin=${STAGEHAND_BIN:-../cli/stagehand}
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d "${STAGEHAND_TEST_TMP:-/tmp}/policy-check.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

if ! setfattr -n user.stagehand.probe -v 1 "$tmp" 2>/dev/null; then
	echo "1..0 # SKIP no user.* xattrs (or no setfattr) in $tmp"
	exit 0
fi

n=0
fails=0
ok() {  # ok STATUS DESCRIPTION
	n=$((n + 1))
	if [ "$1" -eq 0 ]; then
		echo "ok $n - $2"
	else
		echo "not ok $n - $2"
		fails=$((fails + 1))
		[ -f "$tmp/out" ] && sed 's/^/# /' "$tmp/out"
	fi
}

label() {  # label DIR POLICY
	setfattr -n user.stagehand.policy -v "$2" "$1" &&
		setfattr -n user.stagehand.job -v 7 "$1" &&
		setfattr -n user.stagehand.owner -v 1000 "$1"
}

# A scratch tree: exempt, pending, archive with a nested exempt dir, archived,
# and a path with the characters each syntax must escape.
s=$tmp/scratch
mkdir -p "$s/j/tmp" "$s/j/run" "$s/j/out/scr" "$s/j/out/sub" "$s/j/out/g[1]*?" "$s/j/done" "$s/odd/it's_50%[x]*"
touch "$s/j/tmp/t1" "$s/j/run/p1" "$s/j/out/o1" "$s/j/out/sub/o2" "$s/j/out/scr/s1" \
	"$s/j/out/g[1]*?/s2" "$s/j/done/d1" "$s/loose" "$s/odd/it's_50%[x]*/q1"
label "$s/j/tmp" exempt
label "$s/j/run" pending
label "$s/j/out" archive
label "$s/j/out/scr" exempt
label "$s/j/out/g[1]*?" exempt
label "$s/j/done" archived
label "$s/odd/it's_50%[x]*" exempt

# ---- GPFS grammar ----
"$bin" policy export --format=gpfs --namespace=user. --paths-from="$s" > "$tmp/tree.pol" 2> "$tmp/out"
ok $? "gpfs export from a labelled tree"
python3 "$here/gpfs_grammar.py" "$tmp/tree.pol" > "$tmp/out" 2>&1
ok $? "gpfs rules from the tree parse: $(cat "$tmp/out")"
grep -c "^RULE 'stagehand_hold_[0-9]" "$tmp/tree.pol" | grep -qx 5
ok $? "gpfs: one EXCLUDE per exempt/pending directory (5)"
# The tree's own path is escaped too (it may hold '_', as under distcheck).
esc_s=$(printf '%s' "$s" | sed -e "s/'/''/g" -e 's/[_%]/\\&/g')
grep -qF "LIKE '$esc_s/odd/it''s\\_50\\%[x]*/%' ESCAPE" "$tmp/tree.pol"
ok $? "gpfs: quote doubled, % and _ escaped"
for f in "$here"/policy/gpfs-*.golden; do
	python3 "$here/gpfs_grammar.py" "$f" > "$tmp/out" 2>&1
	ok $? "golden $(basename "$f") parses"
done
printf "RULE 'x' EXCLUDE WHERE PATH_NAME LIKE '/a/%%\n" > "$tmp/bad1.pol"
printf "RULE 'x' EXCLUDE WHERE XATTR('a') IN ('b')\nRULE 'x' EXCLUDE WHERE XATTR('a') IN ('c')\n" > "$tmp/bad2.pol"
printf "RULE 'x' MIGRATE WHERE PATH_NAME LIKE '/a/%%' ESCAPE '\\\\'\n" > "$tmp/bad3.pol"
for b in bad1 bad2 bad3; do
	! python3 "$here/gpfs_grammar.py" "$tmp/$b.pol" > "$tmp/out" 2>&1
	ok $? "the grammar rejects $b ($(cat "$tmp/out"))"
done

# ---- shell drivers ----
stubs=$tmp/bin
mkdir "$stubs"
for cmd in lfs dmtag dmput; do
	cat > "$stubs/$cmd" <<STUB
#!/bin/bash
# Log one line per file argument: command, its options, the file.
opts=()
for a in "\$@"; do
	case \$a in
	/*) printf '%s %s %s\n' "$cmd" "\${opts[*]}" "\$a" >> "$tmp/calls" ;;
	*) opts+=("\$a") ;;
	esac
done
STUB
	chmod +x "$stubs/$cmd"
done

calls_for() {  # calls_for PREFIX -> the files, sorted, relative to $s
	grep -F "$1 /" "$tmp/calls" | sed "s|^.* $s/||" | sort | tr '\n' ' '
}

for fmt in lustre-hsm dmf; do
	"$bin" policy export --format=$fmt --namespace=user. > "$tmp/$fmt.sh" 2> "$tmp/out"
	ok $? "$fmt export"
	bash -n "$tmp/$fmt.sh" 2> "$tmp/out"
	ok $? "$fmt driver passes bash -n"
done

rm -f "$tmp/calls"
PATH="$stubs:$PATH" STAGEHAND="$bin" bash "$tmp/lustre-hsm.sh" "$s" 3 > "$tmp/out" 2>&1
ok $? "lustre-hsm driver runs"
got=$(calls_for "lfs hsm_set --noarchive --norelease")
want="j/out/g[1]*?/s2 j/out/scr/s1 j/run/p1 j/tmp/t1 odd/it's_50%[x]*/q1 "
[ "$got" = "$want" ]
ok $? "lustre-hsm: NOARCHIVE/NORELEASE on exempt and pending files [$got]"
got=$(calls_for "lfs hsm_archive --archive 3")
[ "$got" = "j/out/o1 j/out/sub/o2 " ]
ok $? "lustre-hsm: archive requests for the archive tree, not its nested exempt dir [$got]"
got=$(calls_for "lfs hsm_clear --noarchive --norelease")
[ "$got" = "j/out/o1 j/out/sub/o2 " ]
ok $? "lustre-hsm: flags lifted on the archive tree only [$got]"
! grep -q "j/done\|loose" "$tmp/calls"
ok $? "lustre-hsm: archived and unlabelled files untouched"

rm -f "$tmp/calls"
PATH="$stubs:$PATH" STAGEHAND="$bin" bash "$tmp/dmf.sh" "$s" > "$tmp/out" 2>&1
ok $? "dmf driver runs"
got=$(calls_for "dmtag -t 5301")
[ "$got" = "j/out/g[1]*?/s2 j/out/scr/s1 j/run/p1 j/tmp/t1 odd/it's_50%[x]*/q1 " ]
ok $? "dmf: hold tag on exempt and pending files [$got]"
got=$(calls_for "dmtag -t 5302")
[ "$got" = "j/out/o1 j/out/sub/o2 " ]
ok $? "dmf: archive tag on the archive tree only [$got]"
got=$(calls_for "dmput ")
[ "$got" = "j/out/o1 j/out/sub/o2 " ]
ok $? "dmf: dmput of the archive tree only [$got]"

# A scan that fails stops the driver before it changes anything.
rm -f "$tmp/calls"
printf '#!/bin/sh\necho "stagehand: scan: boom" >&2\nexit 2\n' > "$tmp/failing"
chmod +x "$tmp/failing"
PATH="$stubs:$PATH" STAGEHAND="$tmp/failing" bash "$tmp/lustre-hsm.sh" "$s" > "$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && [ ! -e "$tmp/calls" ] && grep -q "nothing changed" "$tmp/out"
ok $? "a failed scan: the driver exits 1 and calls no lfs (rc $rc)"

# ---- robinhood options ----
# refused ARGS... MESSAGE: exit 2 and MESSAGE on stderr, nothing on stdout.
refused() {
	local want=${*: -1}
	"$bin" policy export "${@:1:$#-1}" > "$tmp/stdout" 2> "$tmp/out"
	[ $? -eq 2 ] && [ ! -s "$tmp/stdout" ] && grep -qF -- "$want" "$tmp/out"
}
refused --format=robinhood --namespace=user. --robinhood-policies=gpfs "give posix or lhsm"
ok $? "robinhood: --robinhood-policies other than posix or lhsm refused"
refused --format=robinhood --namespace=user. --archive-cmd='/bin/sh -c x' "give an absolute path"
ok $? "robinhood: an --archive-cmd with a space refused"
refused --format=robinhood --namespace=user. --archive-cmd='/x"); } define_policy evil {' "give an absolute path"
ok $? "robinhood: an --archive-cmd with a quote or brace refused"
refused --format=robinhood --namespace=user. --robinhood-policies=lhsm --archive-cmd=/bin/true \
	"the Lustre HSM copytool archives"
ok $? "robinhood: --archive-cmd with lhsm refused"
refused --format=gpfs --namespace=user. --robinhood-policies=lhsm "are for --format=robinhood"
ok $? "gpfs: --robinhood-policies refused"
refused --format=robinhood --namespace=user. --exempt-days=0 "give a number from 1 to 36500"
ok $? "robinhood: --exempt-days 0 refused"
"$bin" policy export --format=robinhood --namespace=user. --archive-cmd=/usr/local/sbin/site-archive \
	--exempt-days=7 > "$tmp/rbh.inc" 2> "$tmp/out" &&
	grep -qF 'default_action = cmd("/usr/local/sbin/site-archive {fullpath}");' "$tmp/rbh.inc" &&
	grep -qF 'condition { last_mod > 7d }' "$tmp/rbh.inc"
ok $? "robinhood: --archive-cmd and --exempt-days reach the policies"

echo "1..$n"
[ $fails -eq 0 ]
