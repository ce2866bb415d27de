#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Hostile peers.  Against a serving node: garbage, an oversized header, a
# message type it must not receive (before authentication, at 2 MiB), a
# bad HELLO, another major, another cluster, a wrong secret, requests
# before authentication, forged lock ids (guessed, or another
# connection's), out-of-range requests, a peer that stalls mid-message or
# stops reading, lock and connection floods, and an address outside the
# allow-list.  Each is refused as the protocol says and costs nothing: the
# node serves a real fetch whole afterwards, with no lock or pin left.
# Against a fetcher: a server that cannot prove the secret, one that
# announces more or larger blocks than asked, sends a shard longer than
# locked, the wrong block, a changed generation, or stalls mid-shard.
# The fetch ends within its deadline, with only the blocks that were
# right counted, and no byte written outside its buffers.
. "$top_srcdir/tests/peer/netns.sh"

serve_start a --blocks 64 --io-timeout 1000 --hello-timeout 1000 --max-locks 16 --max-conns 8 ||
	fail "a did not start"
for c in garbage huge-len wrong-type bad-version bad-hello wrong-cluster wrong-secret before-auth \
	forged-lock out-of-range stall-header stall-payload stall-reader lock-flood conn-flood; do
	out=$(ip netns exec "$NS_B" "$bin/peer-hostile" --peer "$ADDR_a" --secret "$SECRET" \
		--case $c --io-ms 10000 2>&1)
	case "$out" in
	"case $c: ok"*) echo "$out" ;;
	*) fail "$out" ;;
	esac
done
expect_stat a locks_held 0
expect_stat a conns_open 0 30
[ "$(stat a pins)" = 0 ] || fail "pins left"
for k in auth protocol bad_lock range stall limit; do
	[ "$(stat a serve_fail_$k)" -ge 1 ] || fail "serve_fail_$k is $(stat a serve_fail_$k)"
done
fetch --peer "$ADDR_a" --blocks 64
expect_result "$FETCH_OUT" 64 0

# An address outside the allow-list is refused before a byte is read.
ALLOW=10.213.0.1/32 serve_start narrow --blocks 4 || fail "narrow did not start"
fetch --peer "$ADDR_narrow" --blocks 4 --timeout 3000
expect_result "$FETCH_OUT" 0 ECONNRESET
expect_stat narrow serve_fail_allowlist 1

# Hostile servers, each against a real fetcher.
hp=7700
for c in srv-wrong-secret:0:EACCES srv-too-many:0:EPROTO srv-oversize:0:EPROTO \
	srv-long-data:1:EPROTO srv-wrong-block:1:EPROTO srv-generation:2:ESTALE \
	srv-stall:2:ETIMEDOUT; do
	name=${c%%:*}
	rest=${c#*:}
	want=${rest%%:*}
	err=${rest#*:}
	ip netns exec "$NS_A" "$bin/peer-hostile" --listen "$ADDR_A:$hp" --secret "$SECRET" \
		--case "$name" --io-ms 5000 >"$tmp/$name.out" 2>&1 &
	hpid=$!
	pids="$pids $hpid"
	wait_for "$tmp/$name.out" '^listening' || fail "$name did not listen"
	fetch --peer "$ADDR_A:$hp" --blocks 8 --timeout 3000
	[ "$FETCH_RC" = 0 ] || fail "$name: the fetcher counted wrong bytes or wrote outside its buffers"
	expect_result "$FETCH_OUT" "$want" "$err"
	expect_within "$FETCH_OUT" 3000
	wait_exit "$hpid" 30 || fail "$name: still running"
	wait "$hpid" || fail "$(cat "$tmp/$name.out")"
	echo "$(tail -n 1 "$tmp/$name.out"): fetched $want, $err"
	hp=$((hp + 1))
done
echo "ok - hostile peers, both ways"
