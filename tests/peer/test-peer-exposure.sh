#!/bin/sh
# SPDX-License-Identifier: MIT
#
# What a serving node exposes.  With the TCP transport exactly one socket
# listens, on the configured address: no UCX interface exists that a peer
# could reach (UCX over TCP reads and writes whatever address a peer names,
# see peer.h).  With KVSPEER_F_UCX_ALLOW_TCP, UCX's own TCP listeners are
# there too: why that flag is for tests only.  A wildcard address, a
# readable secret file and a short secret are refused.
. "$top_srcdir/tests/peer/netns.sh"

command -v ss >/dev/null 2>&1 || fail "ss(8) (iproute2) not found"
serve_start a --blocks 4 || fail "a did not start"
fetch --peer "$ADDR_a" --blocks 4
expect_result "$FETCH_OUT" 4 0
listen=$(ip netns exec "$NS_A" ss -Hltn | awk '{ print $4 }' | sort)
[ "$listen" = "$ADDR_a" ] || fail "TCP transport: listening on: $listen"
udp=$(ip netns exec "$NS_A" ss -Hlun | wc -l)
[ "$udp" = 0 ] || fail "TCP transport: $udp UDP sockets"
serve_cmd a quit
wait_exit "$PID_a" || fail "a did not exit"

serve_start u --blocks 4 --transport ucx --ucx-allow-tcp --ucx-devices "$VETH_A" || fail "u did not start"
n=$(ip netns exec "$NS_A" ss -Hltn | wc -l)
[ "$n" -gt 1 ] || fail "UCX over TCP: only $n listening socket(s); revisit peer.h's warning"
echo "UCX over TCP listens on $((n - 1)) socket(s) besides the service's own"
serve_cmd u quit

out=$(ip netns exec "$NS_A" "$bin/peer-serve" --listen "0.0.0.0:7600" --allow 10.213.0.0/30 \
	--secret "$SECRET" </dev/null 2>/dev/null)
[ "$out" = "error kvspeer_new: EINVAL" ] || fail "wildcard listen: $out"
cp "$SECRET" "$tmp/open.key"
chmod 644 "$tmp/open.key"
out=$(ip netns exec "$NS_A" "$bin/peer-serve" --listen "$ADDR_A:7601" --allow 10.213.0.0/30 \
	--secret "$tmp/open.key" </dev/null 2>/dev/null)
[ "$out" = "error kvspeer_new: EPERM" ] || fail "a secret others can read: $out"
printf 'short\n' >"$tmp/short.key"
chmod 600 "$tmp/short.key"
out=$(ip netns exec "$NS_A" "$bin/peer-serve" --listen "$ADDR_A:7602" --allow 10.213.0.0/30 \
	--secret "$tmp/short.key" </dev/null 2>/dev/null)
[ "$out" = "error kvspeer_new: EINVAL" ] || fail "a short secret: $out"
echo "ok - exposure: one listener, refusals"
