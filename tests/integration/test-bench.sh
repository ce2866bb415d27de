#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvstash-bench, the installed operator bench, end to end on a daemon it
# spawns, every host section at a tiny size: it exits 0, every table has
# its rows (one per layout and direction, key count, round trip), --json
# prints one well-formed object per row, and the ssd section (on a file
# where O_DIRECT works) times its rows with the samples asked for and
# takes its drive baselines.  What this checks is that the bench runs and
# reports; no figure it prints decides anything here.

: "${top_builddir:?}"
bench=$top_builddir/tools/kvstash-bench
if [ ! -x "$bench" ] || [ ! -x "$top_builddir/sidecar/kvstashd" ]; then
	echo "kvstash-bench or kvstashd not built: skipped"
	exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
	echo "python3 not found (needed to check the JSON): skipped"
	exit 77
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvstash-bench-test.XXXXXX") || exit 1
ssd_dir=
cleanup() {
	rm -rf "$dir"
	[ -n "$ssd_dir" ] && rm -rf "$ssd_dir"
}
trap cleanup EXIT
fail() {
	echo "FAIL: $*"
	[ -f "$dir/out" ] && sed 's/^/  | /' "$dir/out"
	exit 1
}

small="--spawn --pool-size 256M --no-spin0 --sizes 16K --batches 32 --reps 2
	--query-keys 1,64 --query-iters 20 --query-resident 1024 --nop-iters 200
	--cpu-seconds 0.2"

# shellcheck disable=SC2086
"$bench" $small --sections copy,query,cpu,nop >"$dir/out" 2>&1 || fail "the host sections exited $?"
rows() { grep -c "$1" "$dir/out"; }
# copy: three layouts, save and load each.
[ "$(rows '^| \(page\|split\|mla\) .* | \(save\|load\) |')" = 6 ] || fail "copy: not 6 rows"
# query: the two key counts asked for.
[ "$(rows '^|  *\(1\|64\) |  *20 |')" = 2 ] || fail "query: not 2 rows"
# cpu: a save and a load run per layout.
[ "$(rows '^| \(save\|load\) \(page\|split\|mla\) S=16K x32')" = 6 ] || fail "cpu: not 6 runs"
# nop: back to back, after idle, and the socketpair baseline.
[ "$(rows '^| \(kvstashd NOP\|Unix socketpair\)')" = 4 ] || fail "nop: not 4 rows"
# Rows with a target (here the NOP after idle) say ok or SHORT, and the
# run ends with as many SHORT rows listed as the tables marked.
marked=$(grep '^|' "$dir/out" | grep -c '| *SHORT *|')
ok=$(grep '^|' "$dir/out" | grep -c '| *ok *|')
[ $((marked + ok)) -ge 1 ] || fail "no row says ok or SHORT"
if [ "$marked" = 0 ]; then
	grep -q "^every one of the $ok rows with a target met it" "$dir/out" ||
		fail "no summary of $ok rows met"
else
	grep -q "^$marked of the $((marked + ok)) rows with a target fell short:" "$dir/out" ||
		fail "no summary of $marked short rows"
	[ "$(grep -c '^  .*target' "$dir/out")" = "$marked" ] || fail "not $marked short rows listed"
fi
# Every row of a table has the header's columns.
python3 - "$dir/out" <<'EOF' || fail "a table's rows and header disagree"
import sys
table = []
for line in list(open(sys.argv[1])) + [""]:
    if line.startswith("|"):
        table.append(line.count("|"))
        continue
    if table and len(set(table)) != 1:
        sys.exit("columns per line: %s" % table)
    table = []
EOF
echo "ok - host sections: copy, query, cpu and nop tables complete"

# shellcheck disable=SC2086
"$bench" $small --sections copy,query,nop --json >"$dir/out" 2>&1 || fail "--json exited $?"
python3 - "$dir/out" <<'EOF' || fail "--json: not one object per row"
import json, sys
tests = {}
for line in open(sys.argv[1]):
    if line.startswith("{"):
        t = json.loads(line)["test"]
        tests[t] = tests.get(t, 0) + 1
want = {"copy": 6, "query": 2}
for t, n in want.items():
    if tests.get(t, 0) != n:
        sys.exit("%s: %d objects, want %d (%s)" % (t, tests.get(t, 0), n, tests))
if not tests.get("rtt"):
    sys.exit("no rtt objects (%s)" % tests)
EOF
echo "ok - --json: one object per row"

# The ssd section needs O_DIRECT: not tmpfs.
for cand in "${KVSTASH_SSD_TEST_DIR:-}" "$top_builddir" /var/tmp; do
	[ -n "$cand" ] || continue
	d=$(mktemp -d "$cand/kvstash-bench-ssd.XXXXXX" 2>/dev/null) || continue
	if dd if=/dev/zero of="$d/probe" bs=4096 count=1 oflag=direct 2>/dev/null; then
		ssd_dir=$d
		break
	fi
	rm -rf "$d"
done
if [ -z "$ssd_dir" ]; then
	echo "no directory with O_DIRECT: the ssd section skipped"
	exit 0
fi
"$bench" --spawn --pool-size 256M --no-spin0 --sections ssd --ssd "$ssd_dir/tier.dat" \
	--ssd-size 2G --ssd-samples 4 >"$dir/out" 2>&1 || fail "the ssd section exited $?"
grep -q "prompts on SSD only" "$dir/out" || fail "ssd: no title"
# Both rows, with the 4 samples asked for.
[ "$(rows '^|  *\(8\|32\) |  *[0-9.]* |  *4 |')" = 2 ] || fail "ssd: not 2 rows of 4 samples"
grep -q "during the timed QUERY+LOADs the tier read" "$dir/out" || fail "ssd: no tier summary"
echo "ok - ssd section: two rows of 4 samples on $ssd_dir"
