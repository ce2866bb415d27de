#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Network partitions.  The link set down mid-transfer: the fetch ends at
# its deadline with the blocks verified before; the server gives up the
# stalled stream and its lock.  A drop rule (nft, else iptables) inside the
# fetcher's namespace: the fetch ends at its deadline, empty; with the rule
# gone the next one gets everything.
. "$top_srcdir/tests/peer/netns.sh"

serve_start a --blocks 64 --hold-after 11 --io-timeout 1000 --ttl 60000 || fail "a did not start"
fetch_bg --peer "$ADDR_a" --blocks 64 --timeout 3000
wait_for "$tmp/a.out" '^held' || fail "the transfer did not reach block 11"
ip -n "$NS_B" link set "$VETH_B" down
serve_cmd a go
wait_exit "$FETCH_PID" 30 || fail "the fetch did not end at its deadline"
wait "$FETCH_PID" || fail "wrong bytes across the partition"
expect_result "$FETCH_OUT" 10 ETIMEDOUT
expect_within "$FETCH_OUT" 3000
expect_stat a locks_held 0 30
[ "$(stat a serve_fail_stall)" -ge 1 ] || [ "$(stat a serve_fail_reset)" -ge 1 ] ||
	fail "the server did not see the stall"
[ "$(stat a pins)" = 0 ] || fail "pins left"
ip -n "$NS_B" link set "$VETH_B" up

serve_start b --blocks 64 || fail "b did not start"
rule=""
if command -v nft >/dev/null 2>&1 &&
	ip netns exec "$NS_B" nft add table inet kvptest 2>/dev/null; then
	ip netns exec "$NS_B" nft add chain inet kvptest out '{ type filter hook output priority 0; }' &&
	ip netns exec "$NS_B" nft add rule inet kvptest out ip daddr "$ADDR_A" tcp dport "${ADDR_b##*:}" drop ||
		fail "nft rule"
	rule=nft
elif command -v iptables >/dev/null 2>&1 &&
	ip netns exec "$NS_B" iptables -A OUTPUT -d "$ADDR_A" -p tcp --dport "${ADDR_b##*:}" -j DROP 2>/dev/null; then
	rule=iptables
fi
if [ -n "$rule" ]; then
	fetch --peer "$ADDR_b" --blocks 64 --timeout 2000
	expect_result "$FETCH_OUT" 0 ETIMEDOUT
	expect_within "$FETCH_OUT" 2000
	if [ $rule = nft ]; then
		ip netns exec "$NS_B" nft delete table inet kvptest
	else
		ip netns exec "$NS_B" iptables -D OUTPUT -d "$ADDR_A" -p tcp --dport "${ADDR_b##*:}" -j DROP
	fi
	fetch --peer "$ADDR_b" --blocks 64 --timeout 20000
	expect_result "$FETCH_OUT" 64 0
	echo "ok - partition: link down mid-transfer, $rule drop rule"
else
	echo "ok - partition: link down mid-transfer (no nft or iptables: the drop rule case did not run)"
fi
