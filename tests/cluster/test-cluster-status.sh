#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The registry client in every admin view, against a real redis-server
# (random loopback port, no persistence, its own directory) and a real
# kvstashd:
#   - without [cluster]: no "Registry:" in `kvstash status` or `stats`, no
#     "registry" member in their JSON or in the Python binding's dicts, no
#     kvstash_registry_* family on /metrics;
#   - with [cluster]: status and stats (text and JSON) show the state
#     "ready", connected, leased, an epoch >= 1, the configured queue
#     capacity, the drops and the last round trip; the example engine's
#     blocks are delivered; /metrics exports a kvstash_registry_* family
#     (HELP, TYPE) for every field of struct registry_stats, with the
#     same values and no label but the drop reason; the Python binding
#     has the group;
#   - Redis killed: every view shows the state leaving "ready", and
#     kvstashd keeps answering.
# Skips (77) when redis-server is not installed, kvstashd was built
# without hiredis or libmicrohttpd, or python3 (the JSON and HTTP checks)
# is missing; leaves the binding out when libkvstash has sanitizers.

: "${top_builddir:?}"
b=$(cd "$top_builddir" && pwd)
src=$(cd "${top_srcdir:?}" && pwd)
kvstashd=$b/sidecar/kvstashd
kvstash=$b/tools/kvstash
engine=$b/examples/kvstash-example-engine
redis=${REDIS_SERVER:-redis-server}

if ! "$redis" --version >/dev/null 2>&1; then
	echo "redis-server not found (apt-get install redis-server): skipped"
	exit 77
fi
for f in "$kvstashd" "$kvstash" "$engine"; do
	if [ ! -x "$f" ]; then
		echo "$f not built: skipped"
		exit 77
	fi
done
grep -q '^#define HAVE_HIREDIS 1' "$b/config.h" || { echo "built without hiredis: skipped"; exit 77; }
grep -q '^#define HAVE_MICROHTTPD 1' "$b/config.h" || { echo "built without libmicrohttpd: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }

tag=kvstash-cstatus
. "$src/tests/cluster/admin.sh"
daemon= sock=

# until SECONDS DESC CMD...: poll CMD every 50 ms until it succeeds, or fail
# naming DESC after SECONDS.  The deadline only bounds the wait.
until_ok() {
	secs=$1 desc=$2
	shift 2
	n=$((secs * 20))
	while ! "$@" >/dev/null 2>&1; do
		n=$((n - 1))
		[ $n -gt 0 ] || fail "$desc (after ${secs}s)"
		[ -n "$daemon" ] && ! kill -0 "$daemon" 2>/dev/null && fail "kvstashd exited"
		sleep 0.05
	done
}

# node NAME [CONF LINES]: start_daemon, and the node the checks below talk to.
node() {
	start_daemon "$@"
	daemon=$pid sock=$dir/$1.sock
}

ks() {
	"$kvstash" --socket "$sock" "$@"
}

# ---- without [cluster]: nothing of the registry anywhere -------------------

node plain
ks status >"$dir/out" || fail "status"
! grep -qi registry "$dir/out" || fail "status shows a registry without [cluster]"
ks stats >"$dir/out" || fail "stats"
! grep -qi registry "$dir/out" || fail "stats shows a registry without [cluster]"
ks status --json >"$dir/status.json" || fail "status --json"
json '"registry" not in d and "daemon" in d' "$dir/status.json" || fail "status JSON has a registry"
ks stats --json >"$dir/stats.json" || fail "stats --json"
json '"registry" not in d and "per_session" in d' "$dir/stats.json" || fail "stats JSON has a registry"
scrape "$mport" "$dir/m0" || fail "scrape"
grep -q '^kvstash_blocks_resident ' "$dir/m0" || fail "no families at all"
! grep -q 'kvstash_registry_' "$dir/m0" || fail "registry families without [cluster]"
py "$sock" '"registry" not in st and "registry" not in sx and "global" in sx' ||
	fail "the binding shows a registry without [cluster]"
stop_daemon "$daemon"
daemon=

# ---- a real redis-server ----------------------------------------------------

mkdir "$dir/redis"
for _ in $(seq 20); do
	rport=$(random_port)
	"$redis" --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir/redis" \
		--logfile "$dir/redis/redis.log" --daemonize no </dev/null >/dev/null 2>&1 &
	rpid=$!
	n=400
	up=
	while [ $n -gt 0 ] && kill -0 "$rpid" 2>/dev/null; do
		if python3 -c 'import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=1)
s.sendall(b"PING\r\n")
sys.exit(0 if s.recv(16).startswith(b"+PONG") else 1)' "$rport" 2>/dev/null; then
			up=1
			break
		fi
		n=$((n - 1))
		sleep 0.05
	done
	[ -n "$up" ] && break
	kill -KILL "$rpid" 2>/dev/null
	wait "$rpid" 2>/dev/null
	rpid=
done
[ -n "$rpid" ] || fail "redis-server did not start"
track "$rpid"

# ---- with [cluster] ----------------------------------------------------------

node cluster "[cluster]" "redis = 127.0.0.1:$rport" "node = status-test" \
	"queue_entries = 1024"
until_ok 30 "registry not ready" sh -c \
	"'$kvstash' --socket '$sock' status --json >'$dir/status.json' &&
	 python3 -c 'import json,sys; sys.exit(json.load(open(sys.argv[1]))[\"registry\"][\"state\"] != \"ready\")' '$dir/status.json'"

ks status >"$dir/out" || fail "status"
grep -qx 'Registry:' "$dir/out" || fail "status: no Registry: block"
grep -Eq '^  state +ready, connected yes, leased yes, backfilling (yes|no), epoch [1-9][0-9]*, incarnation [0-9a-f]{16}$' \
	"$dir/out" || fail "status: state line"
grep -Eq '^  queue +[0-9]+/1024 queued, ' "$dir/out" || fail "status: queue depth/capacity"
grep -Eq '^  dropped +[0-9]+ overflow, [0-9]+ offline, [0-9]+ failed$' "$dir/out" ||
	fail "status: drops"
grep -Eq '^  redis +[1-9][0-9]* replies, last round trip [0-9]+ us, ' "$dir/out" ||
	fail "status: last round trip"
# The master, how it was found, the failovers followed (none: a plain Redis).
grep -Eq "^  master +127\.0\.0\.1:$rport \(direct\)$" "$dir/out" || fail "status: master line"
grep -Eq '^  failover +0 followed, ' "$dir/out" || fail "status: failover line"
json 'd["registry"]["state"] == "ready" and d["registry"]["state_code"] == 3 and
      d["registry"]["connected"] is True and d["registry"]["leased"] is True and
      d["registry"]["epoch"] >= 1 and d["registry"]["queue"]["capacity"] == 1024 and
      sorted(d["registry"]["dropped"]) == ["failed", "offline", "overflow"] and
      d["registry"]["redis"]["round_trips"] >= 1 and "last_rtt_us" in d["registry"]["redis"] and
      d["registry"]["redis"]["master"] == "127.0.0.1:'"$rport"'" and
      d["registry"]["redis"]["discovery"] == "direct" and
      d["registry"]["redis"]["failovers"] == 0 and d["registry"]["redis"]["sentinels"] == 0 and
      len(d["registry"]["incarnation"]) == 16' \
	"$dir/status.json" || fail "status JSON: $(cat "$dir/status.json")"

# Blocks the example engine saves are registered: delivered moves.
"$engine" --socket "$sock" --nops 50 --segment-bytes 4096 >"$dir/engine.log" 2>&1 ||
	{ cat "$dir/engine.log"; fail "example engine"; }
until_ok 30 "no registration delivered" sh -c \
	"'$kvstash' --socket '$sock' stats --json >'$dir/stats.json' &&
	 python3 -c 'import json,sys; r = json.load(open(sys.argv[1]))[\"registry\"]
sys.exit(not (r[\"queue\"][\"delivered\"] >= 1 and r[\"queue\"][\"depth\"] == 0))' '$dir/stats.json'"
json 'd["registry"]["state"] == "ready" and d["registry"]["epoch"] >= 1 and
      d["registry"]["queue"]["enqueued"] >= d["registry"]["queue"]["delivered"] and
      d["blocks"]["resident"] >= 1' "$dir/stats.json" || fail "stats JSON: $(cat "$dir/stats.json")"
ks stats >"$dir/out" || fail "stats"
grep -qx 'Registry:' "$dir/out" || fail "stats: no Registry: block"
grep -Eq '^  state +ready, connected yes, leased yes, backfilling (yes|no), epoch [1-9][0-9]*, incarnation [0-9a-f]{16}$' \
	"$dir/out" || fail "stats: state line"
grep -Eq '^  queue +0/1024 queued, [1-9][0-9]* enqueued, [1-9][0-9]* delivered, ' "$dir/out" ||
	fail "stats: queue line"

# Prometheus: a family for every field of struct registry_stats, the same
# figures as STATS (nothing moves once the queue is empty), bounded labels.
ks stats --json >"$dir/stats.json" || fail "stats --json"
scrape "$mport" "$dir/m1" || fail "scrape"
python3 - "$dir/m1" "$dir/stats.json" <<'PY' || fail "registry families"
import json, re, sys

types, helps, samples = {}, {}, {}
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("# TYPE "):
        _, _, name, t = line.split(" ", 3)
        types[name] = t
    elif line.startswith("# HELP "):
        _, _, name, h = line.split(" ", 3)
        helps[name] = h
    elif line and not line.startswith("#"):
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)', line)
        assert m, "malformed sample line: " + line
        samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
r = json.load(open(sys.argv[2]))["registry"]
gauges = ["state", "connected", "leased", "backfilling", "epoch", "queue_depth",
          "queue_capacity", "last_rtt_seconds"]
counters = ["enqueued", "delivered", "dropped", "backfilled", "round_trips", "errors",
            "connects", "disconnects", "leases_acquired", "leases_lost", "queries",
            "query_hits", "flushes", "failovers", "connect_attempts"]
gauges.append("sentinels_up")
for f in gauges + counters:
    name = "kvstash_registry_" + f + ("_total" if f in counters else "")
    want = "counter" if f in counters else "gauge"
    assert types.get(name) == want, f"{name}: type {types.get(name)}, want {want}"
    assert helps.get(name), f"{name}: no HELP"
mine = {k: v for k, v in samples.items() if k.startswith("kvstash_registry_")}
for k in mine:
    labels = k.partition("{")[2]
    assert not labels or re.fullmatch(r'reason="(overflow|offline|failed)"\}', labels), \
        f"{k}: unbounded or unknown label"
assert len(mine) == len(gauges) + len(counters) + 2, sorted(mine)
assert mine["kvstash_registry_state"] == 3
assert mine["kvstash_registry_connected"] == 1 and mine["kvstash_registry_leased"] == 1
assert mine["kvstash_registry_epoch"] == r["epoch"] >= 1
assert mine["kvstash_registry_queue_capacity"] == r["queue"]["capacity"] == 1024
assert mine["kvstash_registry_delivered_total"] == r["queue"]["delivered"] >= 1
assert mine["kvstash_registry_enqueued_total"] == r["queue"]["enqueued"]
for why in ("overflow", "offline", "failed"):
    assert mine[f'kvstash_registry_dropped_total{{reason="{why}"}}'] == r["dropped"][why]
assert mine["kvstash_registry_leases_acquired_total"] == r["leases"]["acquired"] >= 1
assert 0 <= mine["kvstash_registry_last_rtt_seconds"] < 60
assert mine["kvstash_registry_connect_attempts_total"] == r["redis"]["connect_attempts"] >= 1
assert r["redis"]["connect_attempts"] >= r["redis"]["connects"]
print("registry families ok:", len(mine), "samples")
PY

# The binding builds the group from libkvstash's descriptors.
py "$sock" 'st["registry"]["state_name"] == "ready" and st["registry"]["connected"] is True and
    st["registry"]["epoch"] >= 1 and sx["registry"]["delivered"] >= 1 and
    sx["registry"]["queue_capacity"] == 1024' || fail "the binding's registry group"

# ---- Redis killed: every view shows the state leaving "ready" ---------------

kill -KILL "$rpid"
wait "$rpid" 2>/dev/null
untrack "$rpid"
rpid=
until_ok 30 "status still ready after Redis died" sh -c \
	"'$kvstash' --socket '$sock' status --json >'$dir/status.json' &&
	 python3 -c 'import json,sys; r = json.load(open(sys.argv[1]))[\"registry\"]
sys.exit(not (r[\"state\"] != \"ready\" and r[\"connected\"] is False))' '$dir/status.json'"
ks status >"$dir/out" || fail "status with Redis down"
grep -Eq '^  state +[a-z]+, connected no, leased no, ' "$dir/out" || fail "status: state line with Redis down"
! grep -Eq '^  state +ready' "$dir/out" || fail "status text still ready"
scrape "$mport" "$dir/m2" || fail "scrape with Redis down"
grep -q '^kvstash_registry_connected 0$' "$dir/m2" || fail "metrics: still connected"
! grep -q '^kvstash_registry_state 3$' "$dir/m2" || fail "metrics: still ready"
grep -Eq '^kvstash_registry_disconnects_total [1-9]' "$dir/m2" || fail "metrics: no disconnect"
# Redis is gone for good: the client retries, and each try counts.
until_ok 30 "no connect attempt counted while Redis is down" sh -c \
	"'$kvstash' --socket '$sock' stats --json >'$dir/stats.json' &&
	 python3 -c 'import json,sys; r = json.load(open(sys.argv[1]))[\"registry\"][\"redis\"]
sys.exit(not (r[\"connect_attempts\"] > r[\"connects\"]))' '$dir/stats.json'"
ks stats >"$dir/out" || fail "stats with Redis down"
grep -Eq '^  redis .*, [0-9]+ disconnects, [1-9][0-9]* attempts$' "$dir/out" ||
	fail "stats: no attempts on the redis line: $(grep '^  redis' "$dir/out")"
ks stats --json >"$dir/stats.json" || fail "stats with Redis down"
json 'd["registry"]["state"] != "ready" and d["blocks"]["resident"] >= 1' "$dir/stats.json" ||
	fail "stats JSON with Redis down"
stop_daemon "$daemon"
daemon=
echo "ok"
