#!/bin/sh
# SPDX-License-Identifier: MIT
#
# A slot recycled while locked (a host that broke its pin, or a lock that
# outlived its TTL): the serving host bumps block 10's generation and
# rewrites it mid-transfer.  The fetch counts the 10 blocks before it and
# nothing after (ESTALE), no wrong byte counted, the lock given back.
. "$top_srcdir/tests/peer/netns.sh"

serve_start a --blocks 64 --recycle 10 || fail "a did not start"
fetch --peer "$ADDR_a" --blocks 64
[ "$FETCH_RC" = 0 ] || fail "wrong bytes counted"
expect_result "$FETCH_OUT" 10 ESTALE
expect_stat a locks_held 0
[ "$(stat a serve_fail_stale)" = 1 ] || fail "serve_fail_stale is $(stat a serve_fail_stale)"
[ "$(stat a pins)" = 0 ] || fail "pins left"
# TP 2: the recycled shard is block 10's first; its second is never counted either.
serve_start b --blocks 64 --tp 2 --recycle 10 || fail "b did not start"
fetch --peer "$ADDR_b" --blocks 64 --tp 2
expect_result "$FETCH_OUT" 10 ESTALE
expect_stat b locks_held 0
echo "ok - generation: a recycled slot ends the prefix"
