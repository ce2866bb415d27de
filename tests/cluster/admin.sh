# SPDX-License-Identifier: MIT
# Sourced by the admin-view tests of the cluster pieces (test-cluster-status.sh,
# test-cluster-peer-stats.sh) after their skip checks, with $b (the build
# tree, absolute), $src (the source tree, absolute), $kvstashd and $kvstash
# set, and $tag naming the run's directory.  Gives:
#   $dir           the run's directory, removed at exit (KVSTASH_TEST_KEEP keeps it)
#   fail MSG       print MSG and every log of $dir, exit 1
#   json EXPR FILE true when the Python expression EXPR holds for "d" parsed from FILE
#   scrape PORT FILE   /metrics of the kvstashd on PORT into FILE
#   random_port
#   start_daemon NAME [CONF LINES]   kvstashd on $dir/NAME.sock, [metrics] on a
#                  free port ($mport), answering `kvstash status`; its pid in $pid
#   stop_daemon PID    SIGTERM, and its exit status must be 0
#   track PID / untrack PID   processes the exit handler kills
#   py SOCK EXPR   EXPR over the binding's st = kvstash.status(), sx =
#                  kvstash.stats() of SOCK; true without the binding (a
#                  sanitized libkvstash cannot be loaded into python3)

dir=$(mktemp -d "${TMPDIR:-/tmp}/$tag.XXXXXX") || exit 1
pids=
cleanup() {
	for p in $pids; do
		kill -KILL "$p" 2>/dev/null && wait "$p" 2>/dev/null
	done
	[ -n "${KVSTASH_TEST_KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 1' HUP INT TERM

fail() {
	echo "FAIL: $*"
	for f in "$dir"/*.log "$dir/out"; do
		[ -f "$f" ] && { echo "--- $f"; cat "$f"; }
	done
	exit 1
}

track() {
	pids="$pids $1"
}

untrack() {
	pids=$(echo "$pids" | sed "s/ $1\$//; s/ $1 / /")
}

export KVSTASH_LIB="$b/client/.libs/libkvstash.so.0"
# The build tree's python/ holds kvstash/_abi.py, generated from the headers.
export PYTHONPATH="$src/python:$b/python${PYTHONPATH:+:$PYTHONPATH}"
level=info
[ -n "${KVSTASH_TEST_DEBUG:-}" ] && level=debug

json() {
	python3 -c 'import json, sys
d = json.load(open(sys.argv[2], encoding="utf-8"))
sys.exit(0 if eval("(" + sys.argv[1] + ")") else 1)' "$@"
}

scrape() {
	python3 -c 'import sys, urllib.request
sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())' \
		"http://127.0.0.1:$1/metrics" >"$2"
}

random_port() {
	python3 -c 'import random; print(random.randint(20000, 59999))'
}

start_daemon() {
	name=$1
	shift
	for _ in 1 2 3 4 5; do
		mport=$(random_port)
		{
			printf '[server]\nsocket = %s\n[pool]\nsize = 16M\n' "$dir/$name.sock"
			printf '[log]\nlevel = %s\n[metrics]\nlisten = 127.0.0.1:%s\n' "$level" "$mport"
			for l in "$@"; do
				printf '%s\n' "$l"
			done
		} >"$dir/$name.conf"
		rm -f "$dir/$name.sock"
		"$kvstashd" --config "$dir/$name.conf" >"$dir/kvstashd-$name.log" 2>&1 &
		pid=$!
		n=200
		while [ $n -gt 0 ] && kill -0 "$pid" 2>/dev/null; do
			if "$kvstash" --socket "$dir/$name.sock" status >/dev/null 2>&1; then
				track "$pid"
				return 0
			fi
			n=$((n - 1))
			sleep 0.05
		done
		kill -KILL "$pid" 2>/dev/null
		wait "$pid" 2>/dev/null
	done
	fail "kvstashd $name did not start"
}

stop_daemon() {
	kill -TERM "$1"
	wait "$1" || fail "kvstashd exit status $?"
	untrack "$1"
}

binding=1
if command -v ldd >/dev/null 2>&1 && ldd "$KVSTASH_LIB" | grep -q 'lib[at]san'; then
	echo "libkvstash is built with sanitizers: the binding's checks are skipped"
	binding=
fi

py() {
	[ -n "$binding" ] || return 0
	python3 -c 'import sys, kvstash
st = kvstash.status(sys.argv[2])
sx = kvstash.stats(sys.argv[2])
sys.exit(0 if eval("(" + sys.argv[1] + ")") else 1)' "$2" "$1"
}
