#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Two kvstashd nodes in two network namespaces joined by a veth pair (a
# private range inside the namespaces only, tests/peer/netns.sh), a real
# redis-server in the first, the host backend, and the prefill/decode
# handoff example as the engine (it reaches both daemons by their Unix
# sockets, which no namespace hides):
#   - node A saves 64 blocks of a Qwen3-like page-first layout, FLUSHes
#     with the cluster flag; node B fetches and LOADs them into other block
#     ids, every byte compared: with the node hint, and through the registry
#     (no hint), at tp 1 and tp 2, and an MLA-like replicated layout at
#     tp 2 (one shard a block, fetched once, both decode ranks LOAD it);
#   - the link set down: B's fetching QUERY answers 0 hits within its
#     deadline (the engine recomputes); the link up: whole again;
#   - both nodes again with peer_transport = ucx over UCX's TCP transport
#     (ucx_allow_tcp: the same RDMA READ code as over verbs): whole, byte-exact.
. "$top_srcdir/tests/peer/netns.sh"

redis=${REDIS_SERVER:-redis-server}
if ! command -v "$redis" >/dev/null 2>&1; then
	echo "redis-server not found (apt-get install redis-server): skipped"
	exit 77
fi
daemon=$top_builddir/sidecar/kvstashd
example=$top_builddir/examples/kvstash-example-pd
[ -x "$daemon" ] && [ -x "$example" ] || fail "kvstashd or the example not built"

rport=$((20000 + $$ % 20000))
ip netns exec "$NS_A" "$redis" --port "$rport" --bind "$ADDR_A" --save '' --appendonly no --protected-mode no \
	--dir "$tmp" --logfile "$tmp/redis.log" --daemonize no >/dev/null 2>&1 &
pids="$pids $!"
i=0
until grep -q 'Ready to accept connections' "$tmp/redis.log" 2>/dev/null; do
	i=$((i + 1))
	[ $i -le 600 ] || fail "redis-server did not start"
	sleep 0.05
done

# node NAME NS ADDR EXTRA: kvstashd NAME in namespace NS, its peer service on
# ADDR:7471; its pid in $PID_NAME, its socket $tmp/NAME/run/kvstash.sock.
node() {
	local name=$1 ns=$2 addr=$3 extra=$4
	mkdir -p "$tmp/$name/run"
	rm -f "$tmp/$name/run/kvstash.sock" "$tmp/$name.log"
	cat >"$tmp/$name/kvstash.conf" <<EOF
[server]
socket = $tmp/$name/run/kvstash.sock
[pool]
size = 512M
extent_size = 1M
[cluster]
redis = $ADDR_A:$rport
name = netns-$$
node = $name
peer_listen = $addr:7471
peer_allow = 10.213.0.0/30
secret_file = $SECRET
fetch_timeout = 3s
peer_io_timeout = 1s
lease_ttl = 30s
query_timeout = 5s
$extra
[log]
level = info
EOF
	ip netns exec "$ns" "$daemon" --config "$tmp/$name/kvstash.conf" >"$tmp/$name.log" 2>&1 &
	eval "PID_$name=$!"
	pids="$pids $!"
	wait_for "$tmp/$name.log" 'registry: node .* holds its lease|error' 60 ||
		fail "kvstashd $name did not take its lease"
	grep -q 'error' "$tmp/$name.log" && fail "kvstashd $name: $(grep error "$tmp/$name.log")"
	return 0
}

# handoff OUT ARGS...: the example from A to B (36 layers of 8 KiB segments).
handoff() {
	local out=$1
	shift
	"$example" --prefill-socket "$tmp/a/run/kvstash.sock" --decode-socket "$tmp/b/run/kvstash.sock" \
		--layers 36 --segment-bytes 8192 --blocks 64 "$@" >"$tmp/$out.out" 2>&1
}

stop_nodes() {
	kill "$PID_a" "$PID_b"
	wait_exit "$PID_a" 30 && wait_exit "$PID_b" 30 || fail "the nodes did not stop"
}

node a "$NS_A" "$ADDR_A" ""
node b "$NS_B" "$ADDR_B" ""

handoff hint --tp 1 --runs 2 --hint "$ADDR_A:7471" --ns netns/tp1 ||
	fail "handoff by hint: $(cat "$tmp/hint.out")"
cat "$tmp/hint.out"
handoff registry --tp 2 --runs 2 --ns netns/tp2 || fail "handoff through the registry: $(cat "$tmp/registry.out")"
cat "$tmp/registry.out"
handoff mla --tp 2 --replicated --runs 2 --hint "$ADDR_A:7471" --ns netns/mla ||
	fail "replicated handoff: $(cat "$tmp/mla.out")"
cat "$tmp/mla.out"
grep -q 'x 1 replicated shard' "$tmp/mla.out" || fail "the replicated handoff moved more than one shard"
echo "ok - 64 blocks A -> B across namespaces, by hint and through the registry, tp 1 and 2, MLA"

# A partition: B's link down, the fetch answers the local prefix (0) in time.
ip -n "$NS_B" link set "$VETH_B" down
start=$(date +%s%N)
handoff cut --tp 1 --runs 1 --hint "$ADDR_A:7471" --ns netns/cut --allow-partial ||
	fail "handoff across a partition: $(cat "$tmp/cut.out")"
ms=$((($(date +%s%N) - start) / 1000000))
grep -Eq '^0 +0 ' "$tmp/cut.out" || fail "a partitioned fetch got blocks: $(cat "$tmp/cut.out")"
[ $ms -lt 15000 ] || fail "the partitioned handoff took $ms ms"
ip -n "$NS_B" link set "$VETH_B" up
handoff healed --tp 1 --runs 1 --hint "$ADDR_A:7471" --ns netns/healed ||
	fail "handoff after the partition: $(cat "$tmp/healed.out")"
echo "ok - partitioned: 0 hits within the deadline ($ms ms for the whole handoff); healed: whole"

# UCX's RDMA READ code over UCX's TCP transport.
stop_nodes
node a "$NS_A" "$ADDR_A" "peer_transport = ucx
ucx_allow_tcp = yes
ucx_devices = $VETH_A"
node b "$NS_B" "$ADDR_B" "peer_transport = ucx
ucx_allow_tcp = yes
ucx_devices = $VETH_B"
handoff ucx --tp 2 --runs 2 --hint "$ADDR_A:7471" --ns netns/ucx || fail "UCX handoff: $(cat "$tmp/ucx.out")"
cat "$tmp/ucx.out"
echo "ok - the UCX transport (over TCP): 64 blocks x 2 ranks, byte-exact"
stop_nodes
echo "ok - peer transfer between kvstashd in network namespaces"
