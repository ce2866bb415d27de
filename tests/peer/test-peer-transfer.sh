#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The embedded service (peer-serve: an engine serving 64 Qwen3-like
# page-first blocks from its own memory) and a fetcher in another network
# namespace, over the TCP transport: every byte of every fetched block
# compared with what its key says, with TP 1, TP 2 and an MLA replicated
# layout; then the prefix rules: a geometry the peer does not hold, a
# peer that holds fewer blocks (a stale registry entry), a full pool on
# the fetcher, a peer that is not the one expected, joined fetches, and no
# lock or pin left behind.
. "$top_srcdir/tests/peer/netns.sh"

serve_start tp1 --blocks 64 --node prefill-a --epoch 7 || fail "tp1 did not start"
fetch --peer "$ADDR_tp1" --blocks 64 --repeat 2 --stats
[ "$FETCH_RC" = 0 ] || fail "TP 1 fetch: $(cat "$FETCH_OUT")"
[ "$(grep -c '^result fetched=64 ' "$FETCH_OUT")" = 2 ] || fail "TP 1: $(grep result "$FETCH_OUT")"
expect_result "$FETCH_OUT" 64 0
# The second fetch reused the pooled connection.
grep -q "conns_open=1 " "$FETCH_OUT" || fail "the idle connection was not pooled"
grep -q '^peer .* node=prefill-a state=1 .* blocks=128 ' "$FETCH_OUT" ||
	fail "per-peer state: $(grep '^peer' "$FETCH_OUT")"
expect_stat tp1 locks_held 0
[ "$(stat tp1 locks_granted)" = 2 ] && [ "$(stat tp1 locks_released)" = 2 ] ||
	fail "locks: $(grep '^stats' "$tmp/tp1.out" | tail -n 1)"
[ "$(stat tp1 serve_blocks)" = 128 ] || fail "served $(stat tp1 serve_blocks) blocks"
[ "$(stat tp1 pins)" = 0 ] || fail "pins left"

serve_start tp2 --blocks 64 --tp 2 || fail "tp2 did not start"
fetch --peer "$ADDR_tp2" --blocks 64 --tp 2
[ "$FETCH_RC" = 0 ] || fail "TP 2 fetch"
expect_result "$FETCH_OUT" 64 0

serve_start mla --blocks 64 --mla || fail "mla did not start"
fetch --peer "$ADDR_mla" --blocks 64 --mla
[ "$FETCH_RC" = 0 ] || fail "MLA fetch"
expect_result "$FETCH_OUT" 64 0
# Replicated: one shard a block, sent once.
[ "$(field "$FETCH_OUT" fetched)" = 64 ] && expect_stat mla serve_bytes $((64 * 576 * 16 * 2 * 36))

# Another geometry (TP 2 asked of a TP 1 node): not there, nothing locked.
fetch --peer "$ADDR_tp1" --blocks 64 --tp 2
expect_result "$FETCH_OUT" 0 0
# A node that is not the one the hint named, or an old epoch: refused before any lock.
fetch --peer "$ADDR_tp1" --blocks 8 --expect-node prefill-b
expect_result "$FETCH_OUT" 0 ESTALE
fetch --peer "$ADDR_tp1" --blocks 8 --expect-node prefill-a --expect-epoch 6
expect_result "$FETCH_OUT" 0 ESTALE
fetch --peer "$ADDR_tp1" --blocks 8 --expect-node prefill-a --expect-epoch 7
expect_result "$FETCH_OUT" 8 0
# The fetcher's pool fills after 10 blocks: 10, and the lock is given back.
fetch --peer "$ADDR_tp1" --blocks 64 --alloc-limit 10
expect_result "$FETCH_OUT" 10 ENOSPC
expect_stat tp1 locks_held 0
# Full before the first block: nothing, at once, and the lock given back too.
fetch --peer "$ADDR_tp1" --blocks 64 --alloc-limit 0
expect_result "$FETCH_OUT" 0 ENOSPC
expect_within "$FETCH_OUT" 0
expect_stat tp1 locks_held 0
# Joined: three more waiters see the same result.
fetch --peer "$ADDR_tp1" --blocks 64 --join 3
[ "$FETCH_RC" = 0 ] || fail "join: $(cat "$FETCH_OUT")"
grep -q 'joined=3' "$FETCH_OUT" || fail "joined fetches: $(cat "$FETCH_OUT")"
expect_result "$FETCH_OUT" 64 0
# HEALTH.
fetch --peer "$ADDR_tp1" --health
grep -q '^health node=prefill-a epoch=7 locks=0' "$FETCH_OUT" || fail "health: $(cat "$FETCH_OUT")"
serve_cmd tp1 peers
wait_for "$tmp/tp1.out" '^peers' || fail "no peers line"

# The stale registry entry: the peer evicted all but 40.
serve_start have40 --blocks 64 --have 40 || fail "have40 did not start"
fetch --peer "$ADDR_have40" --blocks 64
expect_result "$FETCH_OUT" 40 0

for s in tp1 tp2 mla have40; do
	expect_stat $s locks_held 0
	[ "$(stat $s pins)" = 0 ] || fail "$s: pins left"
	serve_cmd $s quit
done
for p in $PID_tp1 $PID_tp2 $PID_mla $PID_have40; do
	wait_exit "$p" || fail "a server did not exit"
	wait "$p" || fail "a server exited with an error (pins left after kvspeer_free?)"
done
echo "ok - transfer: TP 1, TP 2, MLA, prefixes, pool, joins, health"
