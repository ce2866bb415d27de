#!/bin/bash
# SPDX-License-Identifier: MIT
#
# tools/kvspeer-bench.sh [BUILD_DIR]: libkvspeer between two network
# namespaces joined by a veth pair (as root), against a raw TCP stream
# between the same namespaces in the same run: throughput for 64 KiB,
# 2 MiB and 16 MiB blocks (TCP transport, and the UCX transport over UCX's
# TCP with the shipped tuning), the handoff of 33 blocks of 2.25 MiB (the
# seed's 74.25 MiB) cold and warm, iperf3 for reference when installed,
# UCX's own ucx_perftest with UCX's defaults and with the shipped tuning,
# and the handoff through two kvstashd (the prefill/decode example: FLUSH,
# QUERY with fetch, LOAD).  docs/PERFORMANCE.md ("Peer transfer") has a
# run of it.
#   RUNS (default 3): repetitions per cell; the median is printed.
set -euo pipefail
build=${1:-build}
bench=$build/tools/kvspeer-bench
[ -x "$bench" ] || { echo "no $bench: configure --with-ucx and make tools/kvspeer-bench" >&2; exit 2; }
[ "$(id -u)" = 0 ] || { echo "kvspeer-bench.sh: needs root (network namespaces)" >&2; exit 2; }
runs=${RUNS:-3}
tag=kvb$$
A=${tag}a B=${tag}b VA=${tag}x VB=${tag}y
IPA=10.214.0.1 IPB=10.214.0.2
tmp=$(mktemp -d)
pids=""
export UCX_HANDLE_ERRORS=none UCX_DEBUG_SIGNO=0 UCX_LOG_LEVEL=error
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	ip netns del $A 2>/dev/null || true
	ip netns del $B 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
ip netns add $A
ip netns add $B
ip link add $VA type veth peer name $VB
ip link set $VA netns $A
ip link set $VB netns $B
ip -n $A addr add $IPA/30 dev $VA
ip -n $B addr add $IPB/30 dev $VB
for n in $A $B; do ip -n $n link set lo up; done
ip -n $A link set $VA up
ip -n $B link set $VB up
head -c 48 /dev/urandom | base64 >"$tmp/key"
chmod 600 "$tmp/key"

port=7100
start() { # start NAME ARGS...: a server in A, waits for "listening"
	local name=$1
	shift
	mkfifo "$tmp/$name.in"
	ip netns exec $A "$bench" "$@" <"$tmp/$name.in" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	pids="$pids $!"
	sleep 100000 >"$tmp/$name.in" &
	pids="$pids $!"
	for _ in $(seq 600); do
		grep -q '^listening' "$tmp/$name.out" 2>/dev/null && return 0
		sleep 0.05
	done
	echo "$name did not start: $(cat "$tmp/$name.out")" >&2
	exit 1
}
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
val() { sed -n "s/.*$1=\([0-9.]*\).*/\1/p"; }
ucx_srv="--transport ucx --ucx-allow-tcp --ucx-devices $VA"
ucx_cli="--transport ucx --ucx-allow-tcp --ucx-devices $VB"

printf '%-10s %10s %14s %7s %14s %7s\n' block "raw MB/s" "kvspeer TCP" ratio "kvspeer UCX" ratio
for size in 65536 2097152 16777216; do
	blocks=$(( (256 << 20) / size ))
	[ $blocks -le 4096 ] || blocks=4096
	bytes=$((blocks * size))
	rp=$port tp=$((port + 1)) up=$((port + 2))
	port=$((port + 3))
	start raw$size raw-serve --listen $IPA:$rp --block-bytes $size
	start tcp$size serve --listen $IPA:$tp --allow $IPB/32 --secret "$tmp/key" --block-bytes $size --blocks $blocks
	start ucx$size serve --listen $IPA:$up --allow $IPB/32 --secret "$tmp/key" --block-bytes $size --blocks $blocks $ucx_srv
	raw="" tcp="" ucx=""
	for _ in $(seq "$runs"); do
		# Interleaved, so load on the machine weighs on all three alike.
		raw="$raw $(ip netns exec $B "$bench" raw-fetch --peer $IPA:$rp --bytes $bytes --repeat 4 | val MBps)"
		tcp="$tcp $(ip netns exec $B "$bench" fetch --peer $IPA:$tp --secret "$tmp/key" --block-bytes $size --blocks $blocks --repeat 4 | val MBps)"
		ucx="$ucx $(ip netns exec $B "$bench" fetch --peer $IPA:$up --secret "$tmp/key" --block-bytes $size --blocks $blocks --repeat 4 $ucx_cli 2>/dev/null | val MBps)"
	done
	r=$(echo $raw | tr ' ' '\n' | median)
	t=$(echo $tcp | tr ' ' '\n' | median)
	u=$(echo $ucx | tr ' ' '\n' | median)
	printf '%-10s %10s %14s %7.2f %14s %7.2f\n' "$((size / 1024)) KiB" "$r" "$t" "$(echo "$t / $r" | bc -l)" "$u" "$(echo "$u / $r" | bc -l)"
done

echo
size=2359296 blocks=33 bytes=$((33 * 2359296))
hp=$port
port=$((port + 2))
start hand serve --listen $IPA:$hp --allow $IPB/32 --secret "$tmp/key" --block-bytes $size --blocks $blocks
start handraw raw-serve --listen $IPA:$((hp + 1)) --block-bytes $size
warm=$(ip netns exec $B "$bench" fetch --peer $IPA:$hp --secret "$tmp/key" --block-bytes $size --blocks $blocks --repeat 11 | val median_ms)
cold=$(ip netns exec $B "$bench" fetch --peer $IPA:$hp --secret "$tmp/key" --block-bytes $size --blocks $blocks --repeat 11 --cold | val median_ms)
rawm=$(ip netns exec $B "$bench" raw-fetch --peer $IPA:$((hp + 1)) --bytes $bytes --repeat 11 | val MBps)
printf 'handoff, 33 blocks x 2.25 MiB (74.25 MiB): warm %s ms, cold (connect + handshake) %s ms; raw TCP moves it in %.1f ms\n' \
	"$warm" "$cold" "$(echo "$bytes / $rawm / 1000" | bc -l)"

if command -v iperf3 >/dev/null 2>&1; then
	ip netns exec $A iperf3 -s -1 -B $IPA >/dev/null 2>&1 &
	pids="$pids $!"
	sleep 0.5
	echo "iperf3, one stream: $(ip netns exec $B iperf3 -c $IPA -t 5 -f m 2>/dev/null | awk '/receiver/ { print $7, $8 }')"
fi
if command -v ucx_perftest >/dev/null 2>&1; then
	pt() { # pt ENV...: ucp_get of 2 MiB, 8 in flight
		env "$@" UCX_TLS=tcp UCX_NET_DEVICES=$VA ip netns exec $A ucx_perftest -p 13399 >/dev/null 2>&1 &
		pids="$pids $!"
		sleep 1
		env "$@" UCX_TLS=tcp UCX_NET_DEVICES=$VB ip netns exec $B ucx_perftest $IPA -p 13399 -t ucp_get \
			-s 2097152 -n 400 -O "${O:-1}" 2>/dev/null | awk '/Final/ { print $(NF-2) }'
	}
	echo "ucx_perftest ucp_get 2 MiB over UCX TCP (MB/s, 2^20): UCX defaults, 1 in flight: $(pt X=1);" \
		"defaults, 8 in flight: $(O=8 pt X=1); shipped segments (256k), 8 in flight: $(O=8 pt UCX_TCP_TX_SEG_SIZE=256k UCX_TCP_RX_SEG_SIZE=256k)"
fi

# The handoff through kvstashd: two nodes (host backend) in the two
# namespaces, the prefill/decode example as the engine (it reaches both by
# their Unix sockets), 33 blocks of 2.25 MiB, FLUSH (instance + cluster) +
# QUERY with fetch + LOAD, median of 11 requests, by node hint and (with
# redis-server) through the registry.
daemon=$build/sidecar/kvstashd
example=$build/examples/kvstash-example-pd
if [ -x "$daemon" ] && [ -x "$example" ]; then
	redis_line=""
	if command -v redis-server >/dev/null 2>&1; then
		ip netns exec $A redis-server --port 7399 --bind $IPA --save '' --appendonly no \
			--protected-mode no --dir "$tmp" --logfile "$tmp/redis.log" >/dev/null 2>&1 &
		pids="$pids $!"
		for _ in $(seq 200); do grep -q 'Ready to accept' "$tmp/redis.log" 2>/dev/null && break; sleep 0.05; done
		redis_line="redis = $IPA:7399"
	fi
	node() { # node NAME NS ADDR
		mkdir -p "$tmp/$1/run"
		printf '[server]\nsocket = %s\n[pool]\nsize = 1G\n[cluster]\n%s\nname = bench-%s\nnode = %s\npeer_listen = %s:7471\npeer_allow = 10.214.0.0/30\nsecret_file = %s\nfetch_timeout = 10s\n[log]\nlevel = notice\n' \
			"$tmp/$1/run/kvstash.sock" "$redis_line" "$$" "$1" "$3" "$tmp/key" >"$tmp/$1/kvstash.conf"
		ip netns exec "$2" "$daemon" --config "$tmp/$1/kvstash.conf" >"$tmp/$1.log" 2>&1 &
		pids="$pids $!"
		for _ in $(seq 1200); do grep -q 'ready:' "$tmp/$1.log" && return 0; sleep 0.05; done
		echo "kvstashd $1 did not start: $(cat "$tmp/$1.log")" >&2
		exit 1
	}
	node a $A $IPA
	node b $B $IPB
	sleep 1 # the registry lease (only the registry case needs it)
	pd() { # pd ARGS...: median total_ms and fetch_ms of 11 handoffs
		"$example" --prefill-socket "$tmp/a/run/kvstash.sock" --decode-socket "$tmp/b/run/kvstash.sock" \
			--runs 11 "$@" >"$tmp/pd.out" 2>&1 || { cat "$tmp/pd.out" >&2; exit 1; }
		awk '$1 ~ /^[0-9]+$/ && $2 == 33 { print $8 }' "$tmp/pd.out" | median
		awk '$1 ~ /^[0-9]+$/ && $2 == 33 { print $5 }' "$tmp/pd.out" | median
	}
	set -- $(pd --hint $IPA:7471 --ns bench/hint)
	printf 'handoff through kvstashd, 33 blocks x 2.25 MiB, node hint: %s ms (fetch %s ms); raw TCP moves it in %.1f ms\n' \
		"$1" "$2" "$(echo "$bytes / $rawm / 1000" | bc -l)"
	if [ -n "$redis_line" ]; then
		set -- $(pd --ns bench/registry)
		printf 'handoff through kvstashd, 33 blocks x 2.25 MiB, registry: %s ms (fetch %s ms)\n' "$1" "$2"
	fi
fi
