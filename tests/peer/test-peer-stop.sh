#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The serving process SIGSTOPped.  Mid-transfer and past its lock's TTL:
# the fetch ends at its deadline with the blocks verified before; once
# the server runs again it ends the stale stream and gives the lock back,
# and serves the next fetch whole.  Stopped before a request: the fetch
# ends at its deadline, empty, and leaves nothing behind on the server.
. "$top_srcdir/tests/peer/netns.sh"

serve_start a --blocks 64 --hold-after 11 --ttl 1500 --io-timeout 1000 || fail "a did not start"
fetch_bg --peer "$ADDR_a" --blocks 64 --timeout 2000
wait_for "$tmp/a.out" '^held' || fail "the transfer did not reach block 11"
kill -STOP "$PID_a"
serve_cmd a go # read once it runs again
wait_exit "$FETCH_PID" 30 || fail "the fetch did not end at its deadline"
wait "$FETCH_PID" || fail "wrong bytes from a stopped server"
expect_result "$FETCH_OUT" 10 ETIMEDOUT
expect_within "$FETCH_OUT" 2000
# Past the TTL while stopped (the condition under test, not a wait for a result).
sleep 2
kill -CONT "$PID_a"
expect_stat a locks_held 0 30
[ "$(stat a pins)" = 0 ] || fail "pins left"
fetch --peer "$ADDR_a" --blocks 64 --timeout 20000
expect_result "$FETCH_OUT" 64 0

serve_start b --blocks 64 --ttl 1500 || fail "b did not start"
kill -STOP "$PID_b"
fetch --peer "$ADDR_b" --blocks 64 --timeout 1500
expect_result "$FETCH_OUT" 0 ETIMEDOUT
expect_within "$FETCH_OUT" 1500
kill -CONT "$PID_b"
expect_stat b locks_held 0
expect_stat b conns_open 0 30
fetch --peer "$ADDR_b" --blocks 64 --timeout 20000
expect_result "$FETCH_OUT" 64 0
echo "ok - stop: SIGSTOP mid-transfer past the TTL, and before a request"
