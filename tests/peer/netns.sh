# SPDX-License-Identifier: MIT
# Sourced by the peer tests: two network namespaces joined by a veth pair,
# on a private range (10.213.0.0/30, or /$NETNS_PREFIX when set before: a
# test that dials from more addresses of NS_B, netns_addr) that exists
# inside the namespaces only
# (each test makes its own pair, so tests running at once do not meet),
# the programs under test started in them, and bounded polls on what they
# print.  Exits 77 only when namespaces cannot be made (not root).
#
#   . "$top_srcdir/tests/peer/netns.sh"
#   serve_start a --blocks 64          # peer-serve in NS_A, as "a"
#   fetch --blocks 64                  # peer-fetch in NS_B -> $FETCH_OUT
#   expect_field "$FETCH_OUT" fetched 64
#   serve_stats a; expect_stat a locks_held 0
#
# Nothing here sleeps to synchronise: waits are polls with generous
# bounds, and a bound that runs out is a failure that says what it waited for.

: "${top_builddir:?}" "${top_srcdir:?}"
bin=$top_builddir/tests/peer
if [ "$(id -u)" != 0 ]; then
	echo "not root: cannot make network namespaces: skipped"
	exit 77
fi
if ! command -v ip >/dev/null 2>&1; then
	echo "ip(8) not found: skipped"
	exit 77
fi

tag=kvp$$
NS_A=${tag}a
NS_B=${tag}b
VETH_A=${tag}x
VETH_B=${tag}y
ADDR_A=10.213.0.1
ADDR_B=10.213.0.2
PORT=7471
tmp=$(mktemp -d "${TMPDIR:-/tmp}/kvspeer-test.XXXXXX") || exit 99
pids=""
# UCX (only the UCX cases load it): no signal handlers of its own in our
# processes (peer/ucx.c refuses otherwise), and quiet.
export UCX_HANDLE_ERRORS=none UCX_DEBUG_SIGNO=0 UCX_LOG_LEVEL=error

cleanup() {
	for p in $pids; do
		kill -CONT "$p" 2>/dev/null
		kill -9 "$p" 2>/dev/null
	done
	wait 2>/dev/null
	ip netns del "$NS_A" 2>/dev/null
	ip netns del "$NS_B" 2>/dev/null
	if [ -n "${KVSTASH_TEST_KEEP:-}" ]; then
		echo "kept $tmp"
	else
		rm -rf "$tmp"
	fi
}
trap cleanup EXIT

fail() {
	echo "FAIL: $*"
	for f in "$tmp"/*.out "$tmp"/*.err; do
		[ -s "$f" ] || continue
		echo "---- $(basename "$f") (last lines)"
		tail -n 15 "$f"
	done
	exit 1
}

if ! ip netns add "$NS_A" 2>/dev/null; then
	echo "cannot make a network namespace: skipped"
	exit 77
fi
ip netns add "$NS_B" || fail "ip netns add $NS_B"
ip link add "$VETH_A" type veth peer name "$VETH_B" || fail "veth pair"
ip link set "$VETH_A" netns "$NS_A" && ip link set "$VETH_B" netns "$NS_B" || fail "veth into namespaces"
NETNS_PREFIX=${NETNS_PREFIX:-30}
ip -n "$NS_A" addr add "$ADDR_A/$NETNS_PREFIX" dev "$VETH_A" || fail "address A"
ip -n "$NS_B" addr add "$ADDR_B/$NETNS_PREFIX" dev "$VETH_B" || fail "address B"
for ns in "$NS_A" "$NS_B"; do
	ip -n "$ns" link set lo up
done
ip -n "$NS_A" link set "$VETH_A" up && ip -n "$NS_B" link set "$VETH_B" up || fail "links up"

# netns_addr ADDR: one more address of NS_B (inside the /$NETNS_PREFIX), to dial from.
netns_addr() {
	ip -n "$NS_B" addr add "$1/$NETNS_PREFIX" dev "$VETH_B" || fail "address $1"
}

# The cluster secret: 0600, owned by us.
SECRET=$tmp/cluster.key
head -c 48 /dev/urandom | base64 >"$SECRET"
chmod 600 "$SECRET"

# wait_for FILE REGEX [SECONDS]: until a line of FILE matches (default 30 s).
wait_for() {
	local file=$1 re=$2 secs=${3:-30} i=0
	while ! grep -Eq "$re" "$file" 2>/dev/null; do
		i=$((i + 1))
		[ $i -le $((secs * 20)) ] || return 1
		sleep 0.05
	done
}

# wait_exit PID [SECONDS]: until the process is gone.
wait_exit() {
	local pid=$1 secs=${2:-30} i=0
	while kill -0 "$pid" 2>/dev/null; do
		i=$((i + 1))
		[ $i -le $((secs * 20)) ] || return 1
		sleep 0.05
	done
}

# serve_start NAME ARGS...: peer-serve in NS_A on ADDR_A:PORT; its stdin is
# a fifo (serve_cmd), its output $tmp/NAME.out.  Sets SERVE_PID and PORT+1
# for the next one.
serve_start() {
	local name=$1
	shift
	mkfifo "$tmp/$name.in"
	eval "ADDR_$name=$ADDR_A:$PORT"
	ip netns exec "$NS_A" "$bin/peer-serve" --listen "$ADDR_A:$PORT" --allow "${ALLOW:-10.213.0.0/30}" \
		--secret "$SECRET" "$@" <"$tmp/$name.in" >"$tmp/$name.out" 2>"$tmp/$name.err" &
	SERVE_PID=$!
	eval "PID_$name=$SERVE_PID"
	# A writer that stays, so the server's stdin never reaches EOF between commands.
	sleep 100000 >"$tmp/$name.in" &
	pids="$pids $SERVE_PID $!"
	PORT=$((PORT + 1))
	wait_for "$tmp/$name.out" '^(listening|error)' 60 || fail "$name did not start"
	if grep -q '^error' "$tmp/$name.out"; then
		return 3
	fi
}

# serve_cmd NAME CMD: one line to its stdin.
serve_cmd() {
	echo "$2" >"$tmp/$1.in"
}

# serve_stats NAME: ask for its counters; waits for the fresh line.
serve_stats() {
	local n
	n=$(grep -c '^stats' "$tmp/$1.out")
	serve_cmd "$1" stats
	local i=0
	while [ "$(grep -c '^stats' "$tmp/$1.out")" -le "$n" ]; do
		i=$((i + 1))
		[ $i -le 600 ] || fail "$1 did not answer stats"
		sleep 0.05
	done
}

# stat NAME KEY: from its last stats line ("pins" is its pinned blocks).
stat() {
	if [ "$2" = pins ]; then
		grep '^pins' "$tmp/$1.out" | tail -n 1 | cut -d' ' -f2
	else
		grep '^stats' "$tmp/$1.out" | tail -n 1 | tr ' ' '\n' | sed -n "s/^$2=//p"
	fi
}

# expect_stat NAME KEY VALUE [SECONDS]: poll its counters until KEY is VALUE.
expect_stat() {
	local i=0 secs=${4:-20}
	while :; do
		serve_stats "$1"
		[ "$(stat "$1" "$2")" = "$3" ] && return 0
		i=$((i + 1))
		[ $i -le $((secs * 10)) ] || fail "$1: $2 is $(stat "$1" "$2"), expected $3"
		sleep 0.1
	done
}

# fetch ARGS...: peer-fetch in NS_B; output in $FETCH_OUT, status in $FETCH_RC.
nfetch=0
fetch() {
	nfetch=$((nfetch + 1))
	FETCH_OUT=$tmp/fetch$nfetch.out
	ip netns exec "$NS_B" "$bin/peer-fetch" --secret "$SECRET" "$@" >"$FETCH_OUT" \
		2>"$tmp/fetch$nfetch.err"
	FETCH_RC=$?
}

# fetch_bg ARGS...: the same, in the background: $FETCH_PID.
fetch_bg() {
	nfetch=$((nfetch + 1))
	FETCH_OUT=$tmp/fetch$nfetch.out
	ip netns exec "$NS_B" "$bin/peer-fetch" --secret "$SECRET" "$@" >"$FETCH_OUT" \
		2>"$tmp/fetch$nfetch.err" &
	FETCH_PID=$!
	pids="$pids $FETCH_PID"
}

# field FILE KEY: KEY=VALUE from the last "result" line.
field() {
	grep '^result' "$1" | tail -n 1 | tr ' ' '\n' | sed -n "s/^$2=//p"
}

# expect_result FILE FETCHED ERROR: the prefix, the reason, every byte and guard right.
expect_result() {
	local got err bad guards
	got=$(field "$1" fetched)
	err=$(field "$1" error)
	bad=$(field "$1" bad_bytes)
	guards=$(field "$1" guards)
	[ "$bad" = 0 ] || fail "$(basename "$1"): $bad wrong bytes"
	[ "$guards" = ok ] || fail "$(basename "$1"): bytes written outside the buffers"
	[ "$got" = "$2" ] || fail "$(basename "$1"): fetched $got, expected $2 ($(grep '^result' "$1" | tail -n 1))"
	[ "$err" = "$3" ] || fail "$(basename "$1"): error $err, expected $3"
}

# expect_within FILE MS: the fetch ended within its deadline (plus a generous slack).
expect_within() {
	local ms
	ms=$(field "$1" ms)
	[ -n "$ms" ] && [ "$ms" -le $(($2 + 5000)) ] || fail "$(basename "$1"): took $ms ms, deadline $2 ms"
}
