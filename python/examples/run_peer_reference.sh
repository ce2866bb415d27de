#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The reference engine across two nodes on one host: kvstashd A and B, each
# with the peer service on its own loopback address and its own node name.
# For each layout: paged_engine.py cold (prefill, save, flush) against A,
# then warm against B, whose QUERY fetches A's blocks through the peer path
# (B holds none of its own); the warm run checks every loaded block against
# the cold run's digests and its 32 tokens against the cold run's.  Then,
# with a new prompt, cold against A, A SIGKILLed, warm against B: B
# recomputes (0 hits) and its tokens still match the cold run's.
#
#   python/examples/run_peer_reference.sh [paged_engine options...]
#
# Environment as run_reference.sh (KVSTASHD, KVSTASH_LIB, PYTHON,
# KVSTASH_POOL, KVSTASH_KEEP).  Exit status non-zero on any mismatch.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
PYTHON=${PYTHON:-python3}
if [ -z "${KVSTASHD:-}" ]; then
	if [ -x "$top/sidecar/kvstashd" ]; then
		KVSTASHD=$top/sidecar/kvstashd
	else
		KVSTASHD=$(command -v kvstashd) || { echo "run_peer_reference: kvstashd not found: set KVSTASHD" >&2; exit 2; }
	fi
fi
if [ -z "${KVSTASH_LIB:-}" ] && [ -e "$top/client/.libs/libkvstash.so.0" ]; then
	KVSTASH_LIB=$top/client/.libs/libkvstash.so.0
	export KVSTASH_LIB
fi
PYTHONPATH=$here/..${PYTHONPATH:+:$PYTHONPATH}
export PYTHONPATH

dir=$(mktemp -d "${TMPDIR:-/tmp}/kvstash-peer-ref.XXXXXX") || exit 2
pids=
cleanup() {
	for p in $pids; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	[ -n "${KVSTASH_KEEP:-}" ] || rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The cluster secret, the same file for both nodes (0600: kvstashd checks).
umask 077
printf 'run-peer-reference-secret-%s-0123456789abcdef\n' "$$" > "$dir/cluster.key"
net=127.0.$(( $$ % 200 + 20 ))

# start NAME ADDR: a kvstashd with the peer service on ADDR:7471; its pid in $PID.
start() {
	mkdir -p "$dir/$1/run"
	cat > "$dir/$1/kvstash.conf" <<CONF
[server]
socket = $dir/$1/run/kvstash.sock
[pool]
size = ${KVSTASH_POOL:-1G}
[cluster]
name = peer-ref-$$
node = $1
peer_listen = $2:7471
peer_allow = $net.0/24
secret_file = $dir/cluster.key
fetch_timeout = 5s
[log]
level = info
CONF
	"$KVSTASHD" --config "$dir/$1/kvstash.conf" > "$dir/$1/kvstashd.log" 2>&1 &
	PID=$!
	pids="$pids $PID"
	i=0
	until "$PYTHON" -c "import socket, sys; socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET).connect(sys.argv[1])" "$dir/$1/run/kvstash.sock" 2>/dev/null; do
		if ! kill -0 "$PID" 2>/dev/null || [ $i -ge 300 ]; then
			echo "run_peer_reference: kvstashd $1 did not start:" >&2
			cat "$dir/$1/kvstashd.log" >&2
			exit 2
		fi
		i=$((i + 1))
		sleep 0.1
	done
}

start a "$net.1"
pid_a=$PID
start b "$net.2"
engine() {
	"$PYTHON" -B "$here/paged_engine.py" "$@"
}

status=0
for layout in page-first layer-first; do
	json=$dir/$layout.json
	if engine --phase cold --socket "$dir/a/run/kvstash.sock" --layout "$layout" --json "$json" "$@" &&
		engine --phase warm --socket "$dir/b/run/kvstash.sock" --layout "$layout" --json "$json" \
			--fetch-from "$net.1:7471" "$@"; then
		echo "run_peer_reference: $layout: cold on a, warm on b through the peer path: ok"
	else
		echo "run_peer_reference: $layout: FAILED" >&2
		status=1
	fi
done

# The prefill node gone before decode asks: decode recomputes, same tokens.
json=$dir/gone.json
if engine --phase cold --socket "$dir/a/run/kvstash.sock" --json "$json" --seed 4321 "$@"; then
	kill -9 "$pid_a"
	wait "$pid_a" 2>/dev/null
	if engine --phase warm --socket "$dir/b/run/kvstash.sock" --json "$json" --seed 4321 \
		--fetch-from "$net.1:7471" --allow-miss "$@" > "$dir/gone.out" 2>&1 &&
		grep -q 'restored 0 of' "$dir/gone.out"; then
		cat "$dir/gone.out"
		echo "run_peer_reference: a killed before the fetch: b recomputed, tokens identical: ok"
	else
		cat "$dir/gone.out" >&2
		echo "run_peer_reference: a killed before the fetch: FAILED" >&2
		status=1
	fi
else
	status=1
fi
if [ $status -ne 0 ]; then
	for n in a b; do
		echo "---- kvstashd $n log ----" >&2
		tail -n 40 "$dir/$n/kvstashd.log" >&2
	done
fi
exit $status
