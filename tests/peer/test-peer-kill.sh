#!/bin/sh
# SPDX-License-Identifier: MIT
#
# Deaths mid-transfer.  The serving process SIGKILLed while a fetch runs:
# the fetch ends at once with the blocks verified before, every byte
# right.  The fetcher SIGKILLed mid-transfer: the server drops its lock at
# once (not at the TTL, a minute away) and says so in its stats.
. "$top_srcdir/tests/peer/netns.sh"

# --hold-after 21: the server stops inside the 21st shard's generation read,
# so 20 blocks are verified and the 21st is on the wire.
serve_start a --blocks 64 --hold-after 21 --ttl 60000 || fail "a did not start"
fetch_bg --peer "$ADDR_a" --blocks 64 --timeout 20000
wait_for "$tmp/a.out" '^held' || fail "the transfer did not reach block 21"
kill -9 "$PID_a"
wait_exit "$FETCH_PID" 30 || fail "the fetch did not end after its server died"
wait "$FETCH_PID" || fail "wrong bytes after the server died"
expect_result "$FETCH_OUT" 20 ECONNRESET
expect_within "$FETCH_OUT" 0

serve_start b --blocks 64 --hold-after 11 --ttl 60000 || fail "b did not start"
fetch_bg --peer "$ADDR_b" --blocks 64 --timeout 20000
wait_for "$tmp/b.out" '^held' || fail "the transfer did not reach block 11"
expect_stat b locks_held 1 5
kill -9 "$FETCH_PID"
wait_exit "$FETCH_PID" || fail "the fetcher did not die"
serve_cmd b go
# At once: well within 20 s, the TTL is 60 s.
expect_stat b locks_held 0 20
[ "$(stat b locks_dropped)" = 1 ] || fail "locks_dropped is $(stat b locks_dropped)"
[ "$(stat b locks_expired)" = 0 ] || fail "the lock expired instead of being dropped"
[ "$(stat b pins)" = 0 ] || fail "pins left"
# And the server goes on serving.
fetch --peer "$ADDR_b" --blocks 64
expect_result "$FETCH_OUT" 64 0
echo "ok - kill: server and fetcher deaths mid-transfer"
