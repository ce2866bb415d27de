#!/bin/sh
# SPDX-License-Identifier: MIT
#
# kvstash(1) against a real kvstashd: status lists an engine's session
# while it is connected, stats counts what the example engine did, --json
# is one well-formed object (also with a socket path that needs escaping),
# usage errors exit 2, and with no daemon every command exits 1 naming the
# socket and the reason.

: "${top_builddir:?}"
kvstashd=$top_builddir/sidecar/kvstashd
kvstash=$top_builddir/tools/kvstash
engine=$top_builddir/examples/kvstash-example-engine
for f in "$kvstashd" "$kvstash" "$engine"; do
	if [ ! -x "$f" ]; then
		echo "$f not built: skipped"
		exit 77
	fi
done
if ! command -v python3 >/dev/null 2>&1; then
	echo "python3 not found (needed to check the JSON): skipped"
	exit 77
fi

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvstash-cli.XXXXXX") || exit 1
daemon=
eng=
cleanup() {
	[ -n "$eng" ] && kill "$eng" 2>/dev/null && wait "$eng" 2>/dev/null
	[ -n "$daemon" ] && kill -KILL "$daemon" 2>/dev/null && wait "$daemon" 2>/dev/null
	[ -n "${KVSTASH_TEST_KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

fail() {
	echo "FAIL: $*"
	if [ -f "$dir/kvstashd.log" ]; then
		echo "--- kvstashd log"
		cat "$dir/kvstashd.log"
	fi
	exit 1
}

# The socket is reached through a directory whose name needs JSON escapes
# (a quote, a backslash, a tab, a non-ASCII letter): a symlink to $dir.
tab=$(printf '\t')
odd="$dir/q\"b\\t${tab}é"
ln -s "$dir" "$odd" || fail "cannot create $odd"
sock="$odd/kvstash.sock"

level=info
[ -n "${KVSTASH_TEST_DEBUG:-}" ] && level=debug
cat >"$dir/kvstash.conf" <<EOF
[server]
socket = $dir/kvstash.sock
[pool]
size = 16M
[log]
level = $level
EOF

# json EXPR FILE [ARG]: true when the Python expression EXPR holds for the
# object "d" parsed from FILE (json.load fails on anything ill-formed);
# ARG is sys.argv[3].
json() {
	python3 -c 'import json, sys
d = json.load(open(sys.argv[2], encoding="utf-8"))
sys.exit(0 if eval("(" + sys.argv[1] + ")") else 1)' "$@"
}

"$kvstashd" --config "$dir/kvstash.conf" >"$dir/kvstashd.log" 2>&1 &
daemon=$!
up=
for _ in $(seq 200); do
	if "$kvstash" --socket "$sock" status >/dev/null 2>&1; then
		up=1
		break
	fi
	kill -0 "$daemon" 2>/dev/null || fail "kvstashd exited at start"
	sleep 0.05
done
[ -n "$up" ] || fail "kvstashd did not answer within 10 s"

# ---- usage ------------------------------------------------------------
"$kvstash" >/dev/null 2>&1
[ $? -eq 2 ] || fail "no command: exit status is not 2"
"$kvstash" --socket "$sock" frobnicate >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown command: exit status is not 2"
"$kvstash" --bogus-option status >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown option: exit status is not 2"
"$kvstash" --timeout soon status >/dev/null 2>&1
[ $? -eq 2 ] || fail "bad --timeout: exit status is not 2"
"$kvstash" status extra >/dev/null 2>&1
[ $? -eq 2 ] || fail "extra argument: exit status is not 2"
"$kvstash" --help | grep -q "^Usage: kvstash" || fail "--help prints no usage"
"$kvstash" --version | grep -q "^kvstash [0-9]" || fail "--version prints no version"

# ---- an idle daemon ---------------------------------------------------
"$kvstash" --socket "$sock" status >"$dir/status.txt" || fail "status exited $?"
grep -Fq " is up at $sock" "$dir/status.txt" || fail "status: no daemon line"
grep -q "No engine sessions" "$dir/status.txt" || fail "status: sessions listed on an idle daemon"
KVSTASH_SOCKET=$sock "$kvstash" status --json >"$dir/status.json" ||
	fail "status with \$KVSTASH_SOCKET exited $?"
json "d['sessions'] == [] and d['daemon']['pid'] == int(sys.argv[3])" "$dir/status.json" \
	"$daemon" || fail "status --json: $(cat "$dir/status.json")"
json "d['socket'] == sys.argv[3]" "$dir/status.json" "$sock" ||
	fail "status --json: socket path not escaped right: $(cat "$dir/status.json")"

# A second daemon on the same socket exits 3 (kvstashd(8)) and leaves the
# first one serving.
kill -0 "$daemon" 2>/dev/null || fail "kvstashd died (a signal from outside the test?)"
# Bounded: if the first one is gone, the second would serve for ever.
timeout 30 "$kvstashd" --config "$dir/kvstash.conf" >"$dir/second.log" 2>&1
st=$?
[ $st -eq 3 ] || fail "a second kvstashd on the socket exited $st, not 3: $(cat "$dir/second.log")"
"$kvstash" --socket "$sock" status >/dev/null || fail "the first kvstashd stopped answering"

# ---- the example engine's counters ------------------------------------
# 8 layers of 8 KiB: 64 KiB blocks, so a prompt fits the 16 MiB pool.
"$engine" --socket "$sock" --nops 100 --layers 8 --segment-bytes 8192 >"$dir/engine.log" 2>&1 ||
	fail "example engine failed: $(cat "$dir/engine.log")"
"$kvstash" --socket "$sock" stats --json >"$dir/stats.json" || fail "stats --json exited $?"
json "d['saves']['ops'] >= 1 and d['saves']['blocks_stored'] > 0" "$dir/stats.json" ||
	fail "stats --json: no saved blocks: $(cat "$dir/stats.json")"
json "d['queries']['blocks_hit'] > 0 and d['loads']['blocks'] > 0 and d['loads']['bytes'] > 0" \
	"$dir/stats.json" || fail "stats --json: no query hits or loads"
json "d['blocks']['resident'] > 0 and d['pool']['used_bytes'] > 0 and
      d['pool']['capacity_bytes'] == sum(n['capacity_bytes'] for n in d['pool']['nodes'])" \
	"$dir/stats.json" || fail "stats --json: pool figures"
json "d['sessions']['total'] >= 1 and d['sessions']['live'] == 0 and d['errors'] == 0" \
	"$dir/stats.json" || fail "stats --json: session counters"
"$kvstash" --socket "$sock" stats >"$dir/stats.txt" || fail "stats exited $?"
grep -Eq "^Saves +[1-9][0-9]* ops: [1-9][0-9]* blocks stored" "$dir/stats.txt" ||
	fail "stats: no saves line: $(cat "$dir/stats.txt")"
grep -Eq "^Pool .* MiB capacity" "$dir/stats.txt" || fail "stats: pool without units"

# ---- a connected engine -----------------------------------------------
# A huge NOP count keeps it connected, registered, until we kill it.
"$engine" --socket "$sock" --instance cli-test --nops 1000000000 --layers 8 \
	--segment-bytes 8192 >"$dir/engine2.log" 2>&1 &
eng=$!
seen=
for _ in $(seq 200); do
	"$kvstash" --socket "$sock" status --json >"$dir/status.json" || fail "status exited $?"
	if json "any(s['instance'] == 'cli-test' and s['layers']['count'] > 0
		 for s in d['sessions'])" "$dir/status.json"; then
		seen=1
		break
	fi
	kill -0 "$eng" 2>/dev/null || fail "engine exited: $(cat "$dir/engine2.log")"
	sleep 0.05
done
[ -n "$seen" ] || fail "status never listed the engine's registered session"
json "[(s['role'], s['tp_rank'], s['tp_size'], s['device'], s['layers']['count'],
	s['layers']['first'], s['layers']['last'], s['sealed']) for s in d['sessions']] ==
      [('worker', 0, 1, 'host', 8, 'model.layers.0', 'model.layers.7', True)] and
      d['sessions'][0]['pid'] == int(sys.argv[3]) and d['daemon']['sessions'] == 1 and
      d['daemon']['instances'] == 1 and d['sessions'][0]['layers']['mapped_bytes'] > 0" \
	"$dir/status.json" "$eng" || fail "status --json: $(cat "$dir/status.json")"
"$kvstash" --socket "$sock" status >"$dir/status.txt" || fail "status exited $?"
grep -q "^ *SESSION .*INSTANCE" "$dir/status.txt" || fail "status: no session table"
grep -Eq "^ *[0-9]+ +$eng +[0-9]+ +worker +cli-test +0/1 .* host .*model.layers.0..model.layers.7 +64.0 KiB .*MiB +yes\$" \
	"$dir/status.txt" || fail "status: session row: $(cat "$dir/status.txt")"
"$kvstash" --socket "$sock" stats --json >"$dir/stats.json" || fail "stats exited $?"
json "d['sessions']['live'] == 1 and [s['instance'] for s in d['per_session']] == ['cli-test']
      and d['per_session'][0]['ops'] > 0" "$dir/stats.json" ||
	fail "stats --json: per-session counters: $(cat "$dir/stats.json")"
kill "$eng"
wait "$eng" 2>/dev/null
eng=
gone=
for _ in $(seq 100); do
	"$kvstash" --socket "$sock" status --json >"$dir/status.json" || fail "status exited $?"
	if json "d['sessions'] == []" "$dir/status.json"; then
		gone=1
		break
	fi
	sleep 0.05
done
[ -n "$gone" ] || fail "the dead engine's session is still listed"

# ---- version ----------------------------------------------------------
"$kvstash" --socket "$sock" version >"$dir/version.txt" || fail "version exited $?"
grep -q "^libkvstash [0-9]" "$dir/version.txt" || fail "version: no library line"
grep -q "^kvstashd [0-9].* pid $daemon)" "$dir/version.txt" || fail "version: no daemon line"
"$kvstash" --socket "$sock" --json version >"$dir/version.json" || fail "version --json exited $?"
json "d['daemon']['pid'] == int(sys.argv[3]) and d['libkvstash']" "$dir/version.json" "$daemon" ||
	fail "version --json: $(cat "$dir/version.json")"

# ---- SIGTERM: drain and exit 0 ------------------------------------------
kill -TERM "$daemon"
wait "$daemon"
st=$?
daemon=
[ $st -eq 0 ] || fail "kvstashd exited $st after SIGTERM"

# ---- no daemon ----------------------------------------------------------
for cmd in status stats version; do
	"$kvstash" --socket "$sock" $cmd >/dev/null 2>"$dir/err.txt"
	st=$?
	[ $st -eq 1 ] || fail "$cmd without a daemon: exit status $st, not 1"
	grep -Fq "cannot reach kvstashd at $sock: " "$dir/err.txt" ||
		fail "$cmd without a daemon: message does not name the socket: $(cat "$dir/err.txt")"
	grep -Eq "No such file or directory|Connection refused" "$dir/err.txt" ||
		fail "$cmd without a daemon: no errno text: $(cat "$dir/err.txt")"
done
"$kvstash" --socket "$sock" --json version >"$dir/version.json" 2>/dev/null
[ $? -eq 1 ] || fail "version --json without a daemon: exit status is not 1"
json "d['daemon'] is None and d['kvstash']" "$dir/version.json" ||
	fail "version --json without a daemon: $(cat "$dir/version.json")"
echo "ok"
exit 0
