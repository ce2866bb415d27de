#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The peer service's admission under attack (kvspeer(7), ADMISSION), with
# real kvstashd nodes in two network namespaces (tests/peer/netns.sh, a
# /24 here): node "srv" serves on 10.213.0.1, and while peer-hostile
# attacks it from addresses inside peer_allow, a fresh node "dec" on
# 10.213.0.2 fetches from it (kvstash-example-pd, the prefill/decode
# handoff: every block whole and byte-exact, within the fetch deadline;
# the attack lasts until the handoff is done):
#   - slow, partial and byte-at-a-time handshakes, and silent connections,
#     from one address at different rates: that host never holds more
#     than peer_max_unauth_per_peer connections;
#   - the same from seven addresses at once: together they never hold
#     more than peer_max_unauth, and dec still gets in (the host holding
#     the most gives up its oldest);
#   - one authenticated host asking for locks over several connections:
#     never more than peer_max_locks_per_peer in all;
#   - `kvstash stats --json` of srv says what was refused and why
#     (refused.host_unauth, refused.evicted_unauth,
#     refused.host_locks, serve timeouts at the handshake deadline), and
#     once the attacks end nothing of them is left (no connection, no
#     lock).
NETNS_PREFIX=24
. "$top_srcdir/tests/peer/netns.sh"

daemon=$top_builddir/sidecar/kvstashd
kvstash=$top_builddir/tools/kvstash
example=$top_builddir/examples/kvstash-example-pd
hostile=$top_builddir/tests/peer/peer-hostile
for f in "$daemon" "$kvstash" "$example" "$hostile"; do
	[ -x "$f" ] || fail "$f not built"
done
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }

ATTACKERS="10.213.0.3 10.213.0.4 10.213.0.5 10.213.0.6 10.213.0.7 10.213.0.8 10.213.0.9"
for a in $ATTACKERS; do
	netns_addr "$a"
done
binds=$(echo $ATTACKERS | tr ' ' ',')
MAX_UNAUTH=6
MAX_UNAUTH_HOST=2
MAX_LOCKS=8

# node NAME NS ADDR EXTRA: kvstashd NAME in namespace NS, its peer service
# on ADDR:7471 (no registry: the hint names the holder); pid in $PID_NAME.
node() {
	local name=$1 ns=$2 addr=$3 extra=$4
	mkdir -p "$tmp/$name/run"
	rm -f "$tmp/$name/run/kvstash.sock"
	cat >"$tmp/$name/kvstash.conf" <<EOF
[server]
socket = $tmp/$name/run/kvstash.sock
[pool]
size = 256M
extent_size = 1M
[cluster]
name = admit-$$
node = $name
peer_listen = $addr:7471
peer_allow = 10.213.0.0/24
secret_file = $SECRET
fetch_timeout = 3s
peer_io_timeout = 1s
$extra
[log]
level = info
EOF
	ip netns exec "$ns" "$daemon" --config "$tmp/$name/kvstash.conf" >"$tmp/$name.out" 2>&1 &
	eval "PID_$name=$!"
	pids="$pids $!"
	wait_for "$tmp/$name.out" 'ready: |error' 60 || fail "kvstashd $name did not start"
	! grep -q 'error' "$tmp/$name.out" || fail "kvstashd $name: $(grep error "$tmp/$name.out")"
}

stop_node() {
	local pid
	eval "pid=\$PID_$1"
	kill "$pid"
	wait_exit "$pid" 30 || fail "kvstashd $1 did not stop"
}

# pstat EXPR: EXPR holds for srv's peer group ("p", from `kvstash stats --json`).
pstat() {
	"$kvstash" --socket "$tmp/srv/run/kvstash.sock" stats --json >"$tmp/stats.json" ||
		fail "kvstash stats of srv"
	python3 -c 'import json, sys
p = json.load(open(sys.argv[2]))["peer"]
sys.exit(0 if eval("(" + sys.argv[1] + ")") else 1)' "$1" "$tmp/stats.json"
}

# until_pstat SECS EXPR: poll pstat until EXPR holds, or fail after SECS.
until_pstat() {
	local i=0
	while ! pstat "$2"; do
		i=$((i + 1))
		[ $i -le $(($1 * 10)) ] || fail "srv: $2 never held: $(cat "$tmp/stats.json")"
		sleep 0.1
	done
}

# round NAME EXPECT ARGS...: the attack (peer-hostile slowloris ARGS) in
# the background; once srv counts it, a fresh dec fetches from srv, whole
# and byte-exact; the attack must have held at most EXPECT connections.
# It lasts until the handoff is done and $UNTIL (a pstat expression, if
# set) holds.
nround=0
round() {
	local name=$1 expect=$2 hpid
	shift 2
	nround=$((nround + 1))
	ip netns exec "$NS_B" "$hostile" --peer "$ADDR_A:7471" --secret "$SECRET" \
		--cluster "admit-$$" --case slowloris --expect-max "$expect" "$@" \
		>"$tmp/attack-$name.out" 2>&1 &
	hpid=$!
	pids="$pids $hpid"
	wait_for "$tmp/attack-$name.out" '^attacking' 60 || fail "$name: the attack did not start"
	node dec "$NS_B" "$ADDR_B" ""
	"$example" --prefill-socket "$tmp/srv/run/kvstash.sock" \
		--decode-socket "$tmp/dec/run/kvstash.sock" --hint "$ADDR_A:7471" \
		--ns "admit/$name" --layers 4 --segment-bytes 16384 --blocks 32 --runs 3 \
		>"$tmp/handoff-$name.out" 2>&1 ||
		fail "$name: the legitimate node's handoff under attack: $(cat "$tmp/handoff-$name.out")"
	# The fetch met the attack, not what came after it: held until now.
	kill -0 "$hpid" 2>/dev/null || fail "$name: the attack ended before the handoff did"
	[ -z "${UNTIL:-}" ] || until_pstat 30 "$UNTIL"
	kill -TERM "$hpid"
	stop_node dec
	wait_exit "$hpid" 60 || fail "$name: the attack did not end"
	wait "$hpid" || fail "$name: $(cat "$tmp/attack-$name.out")"
	echo "$name: $(cat "$tmp/attack-$name.out"); dec fetched 3 x 32 blocks byte-exact"
}

node srv "$NS_A" "$ADDR_A" "peer_max_conns = 24
peer_max_conns_per_peer = 6
peer_max_unauth = $MAX_UNAUTH
peer_max_unauth_per_peer = $MAX_UNAUTH_HOST
peer_max_locks_per_peer = $MAX_LOCKS
peer_handshake_timeout = 1500ms"

# One host: half a HELLO each, 5 ms apart; a HELLO a byte at a time, 20 ms
# apart; silent connections, 2 ms apart.
round partial-fast $MAX_UNAUTH_HOST --bind 10.213.0.3:0 --conns 48 --gap-ms 5 --pattern partial \
	--hold-ms 120000
round drip-slow $MAX_UNAUTH_HOST --bind 10.213.0.3:0 --conns 48 --gap-ms 20 --pattern drip \
	--hold-ms 120000
# Silent ones only end at the handshake deadline (1.5 s): held past it.
UNTIL='p["serve_failures"]["timeout"] >= 1' \
	round silent $MAX_UNAUTH_HOST --bind 10.213.0.3:0 --conns 48 --gap-ms 2 --pattern silent \
	--hold-ms 120000
pstat 'p["refused"]["host_unauth"] >= 1 and
       p["serve_failures"]["limit"] >= p["refused"]["host_unauth"]' ||
	fail "srv does not say it refused one host's unauthenticated connections: $(cat "$tmp/stats.json")"
pstat 'p["serve_failures"]["timeout"] >= 1' ||
	fail "no handshake ended at its deadline: $(cat "$tmp/stats.json")"
echo "ok - one host: at most $MAX_UNAUTH_HOST unauthenticated connections held, the legitimate node fetched"

# Seven hosts at once: more than the budget between them.
round many-partial $MAX_UNAUTH --binds "$binds" --conns 140 --gap-ms 3 --pattern partial \
	--hold-ms 120000
round many-drip $MAX_UNAUTH --binds "$binds" --conns 70 --gap-ms 10 --pattern drip \
	--hold-ms 120000
# Seven hosts of two each against a budget of six: a host below two that
# dials into a full budget closes the oldest of one holding two.  (A
# refusal for the budget needs every host at one, which the attack seldom
# leaves: not required.)
pstat 'p["refused"]["evicted_unauth"] >= 1' ||
	fail "srv does not say it closed a handshake to make room: $(cat "$tmp/stats.json")"
echo "ok - seven hosts: at most $MAX_UNAUTH unauthenticated connections held, the legitimate node fetched"

# Locks: one authenticated host, four connections, each asking until
# refused, for a block srv holds (the example saved it there, --seed).
node dec "$NS_B" "$ADDR_B" ""
"$example" --prefill-socket "$tmp/srv/run/kvstash.sock" --decode-socket "$tmp/dec/run/kvstash.sock" \
	--hint "$ADDR_A:7471" --ns admit/locks --layers 4 --segment-bytes 16384 --blocks 4 --runs 1 \
	--seed 77 >"$tmp/handoff-locks.out" 2>&1 || fail "handoff: $(cat "$tmp/handoff-locks.out")"
stop_node dec
ip netns exec "$NS_B" "$hostile" --peer "$ADDR_A:7471" --secret "$SECRET" --cluster "admit-$$" \
	--bind 10.213.0.4:0 --case lock-hog --conns 4 --expect-max $MAX_LOCKS \
	--pd-seed 77 --pd-ns admit/locks --layers 4 --seg-bytes 16384 >"$tmp/lock-hog.out" 2>&1 ||
	fail "$(cat "$tmp/lock-hog.out")"
cat "$tmp/lock-hog.out"
pstat 'p["refused"]["host_locks"] >= 1' ||
	fail "srv does not say it refused a host's locks: $(cat "$tmp/stats.json")"
echo "ok - one host over four connections: at most $MAX_LOCKS locks"

# Nothing of the attacks is left.
until_pstat 30 'p["conns"]["unauthenticated"] == 0 and p["locks"]["held"] == 0'
"$kvstash" --socket "$tmp/srv/run/kvstash.sock" stats >"$tmp/stats.txt" || fail "kvstash stats"
grep -E '^  refused ' "$tmp/stats.txt" || fail "no refused line in kvstash stats: $(cat "$tmp/stats.txt")"
stop_node srv
echo "ok - peer admission: per-host limits and the unauthenticated budget hold"
