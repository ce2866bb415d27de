#!/bin/sh
# SPDX-License-Identifier: MIT
#
# The peer service in every admin view, with real kvstashd nodes (no
# registry: [cluster] peer_listen alone) and kvstash-example-pd handing
# blocks from one to the other:
#   - without a peer service: no "Peer service:" in `kvstash status` or
#     `stats`, no "peer" member in their JSON or in the Python binding's
#     dicts, no kvstash_peer_* family on /metrics;
#   - two nodes, after the handoffs: the fetching node's status and stats
#     (text and JSON) count full fetches, blocks, bytes and latencies, and
#     list the serving node as a server, idle or busy, authenticated, with
#     the blocks fetched; the serving node counts the blocks served, the
#     locks granted and released, the connection accepted, and lists the
#     fetching node as a client;
#   - a hint nobody listens on: a connect failure, the peer failed with
#     its error's text, in the table and the JSON;
#   - /metrics on the fetching node: the kvstash_peer_* families with the
#     figures of STATS, the fetch latency a histogram (cumulative, +Inf
#     equal to _count), failures by side and kind, and no label naming a
#     peer; the Python binding has both groups.
# Skips (77) when kvstashd was built without libkvspeer (--with-ucx) or
# libmicrohttpd, or python3 (the JSON and HTTP checks) is missing; leaves
# the binding out when libkvstash has sanitizers.

: "${top_builddir:?}"
b=$(cd "$top_builddir" && pwd)
src=$(cd "${top_srcdir:?}" && pwd)
kvstashd=$b/sidecar/kvstashd
kvstash=$b/tools/kvstash
pd=$b/examples/kvstash-example-pd

for f in "$kvstashd" "$kvstash" "$pd"; do
	if [ ! -x "$f" ]; then
		echo "$f not built: skipped"
		exit 77
	fi
done
grep -q '^#define HAVE_UCX 1' "$b/config.h" || { echo "built without libkvspeer: skipped"; exit 77; }
grep -q '^#define HAVE_MICROHTTPD 1' "$b/config.h" || { echo "built without libmicrohttpd: skipped"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 not found: skipped"; exit 77; }

tag=kvstash-pstats
. "$src/tests/cluster/admin.sh"

# A loopback /24 of this run's own (127.0.0.0/8 is all loopback), so that
# parallel runs never meet: the nodes listen on .1 and .2 and allow it.
net=127.$((1 + $$ / 250 % 250)).$((1 + $$ % 250))
printf 'kvstash-peer-stats-test-secret-0123456789abcdef\n' >"$dir/secret"
chmod 600 "$dir/secret"

# until_json SECS DESC SOCK CMD FILE EXPR: poll `kvstash CMD --json` of SOCK
# into FILE every 50 ms until EXPR holds for it (as json), or fail naming
# DESC after SECS: what one node counts after the other answered may take a
# moment (a lock's release travels on its own).  The deadline only bounds
# the wait.
until_json() {
	secs=$1 desc=$2 s=$3 cmd=$4 file=$5 expr=$6
	n=$((secs * 20))
	while ! { "$kvstash" --socket "$s" "$cmd" --json >"$file" && json "$expr" "$file"; } \
		2>/dev/null; do
		n=$((n - 1))
		[ $n -gt 0 ] || fail "$desc (after ${secs}s): $(cat "$file")"
		sleep 0.05
	done
}

# peer_node NAME HOST: a node with the peer service on $net.HOST:7471.
peer_node() {
	start_daemon "$1" "[cluster]" "name = pstats-$$" "node = node-$1" \
		"peer_listen = $net.$2:7471" "peer_allow = $net.0/24" "secret_file = $dir/secret"
}

# ---- without a peer service: nothing of it anywhere -------------------------

start_daemon plain
sock=$dir/plain.sock
"$kvstash" --socket "$sock" status >"$dir/out" || fail "status"
! grep -qi 'peer' "$dir/out" || fail "status shows peers without a peer service"
"$kvstash" --socket "$sock" stats >"$dir/out" || fail "stats"
! grep -qi 'peer' "$dir/out" || fail "stats shows peers without a peer service"
"$kvstash" --socket "$sock" status --json >"$dir/status.json" || fail "status --json"
json '"peer" not in d and "daemon" in d' "$dir/status.json" || fail "status JSON has a peer"
"$kvstash" --socket "$sock" stats --json >"$dir/stats.json" || fail "stats --json"
json '"peer" not in d and "per_session" in d' "$dir/stats.json" || fail "stats JSON has a peer"
scrape "$mport" "$dir/m0" || fail "scrape"
grep -q '^kvstash_blocks_resident ' "$dir/m0" || fail "no families at all"
! grep -q 'kvstash_peer_' "$dir/m0" || fail "peer families without a peer service"
py "$sock" '"peer" not in st and "peers" not in st and "peer" not in sx and sx["peers"] == []' ||
	fail "the binding shows a peer service without one"
stop_daemon "$pid"

# ---- two nodes: prefill serves, decode fetches -------------------------------

peer_node prefill 1
pre=$pid pre_sock=$dir/prefill.sock
peer_node decode 2
dec=$pid dec_sock=$dir/decode.sock dec_mport=$mport

# Before any fetch: the service's lines, no peer yet.
"$kvstash" --socket "$dec_sock" status >"$dir/out" || fail "status"
grep -qx 'Peer service:' "$dir/out" || fail "status: no Peer service: block"
grep -Eq '^  peers +0, 0 failed$' "$dir/out" || fail "status: peers line before a fetch"
! grep -qx 'Per peer:' "$dir/out" || fail "status: a peer table before any peer"
"$kvstash" --socket "$dec_sock" status --json >"$dir/status.json" || fail "status --json"
json 'd["peer"]["peers"] == 0 and d["peer"]["per_peer"] == [] and
      d["peer"]["fetches"]["completed"] == 0 and d["peer"]["fetches"]["p99_us"] == 0' \
	"$dir/status.json" || fail "status JSON before a fetch: $(cat "$dir/status.json")"

"$pd" --prefill-socket "$pre_sock" --decode-socket "$dec_sock" --hint "$net.1:7471" \
	--ns pstats/ns --layers 2 --segment-bytes 8192 --blocks 8 --runs 3 >"$dir/pd.log" 2>&1 ||
	fail "kvstash-example-pd"

# The fetching node.
"$kvstash" --socket "$dec_sock" stats --json >"$dir/dec.json" || fail "stats --json"
json 'd["peer"]["fetches"]["completed"] >= 3 and d["peer"]["fetches"]["full"] >= 3 and
      d["peer"]["fetches"]["blocks"] >= 24 and d["peer"]["fetches"]["bytes"] > 0 and
      0 < d["peer"]["fetches"]["p50_us"] <= d["peer"]["fetches"]["p99_us"] and
      d["peer"]["fetches"]["latency_sum_us"] > 0 and d["peer"]["fetches"]["failures"] == 0 and
      d["peer"]["peers"] == 1 and d["peer"]["peers_failed"] == 0 and
      sum(d["peer"]["fetch_failures"].values()) == 0 and len(d["peer"]["fetch_failures"]) == 15' \
	"$dir/dec.json" || fail "decode stats JSON: $(cat "$dir/dec.json")"
json 'len(d["peer"]["per_peer"]) == 1' "$dir/dec.json" || fail "decode: not one peer"
json 'd["peer"]["per_peer"][0]["addr"] == "'"$net"'.1:7471" and
      d["peer"]["per_peer"][0]["node"] == "node-prefill" and
      d["peer"]["per_peer"][0]["role"] == "server" and d["peer"]["per_peer"][0]["role_code"] == 1 and
      d["peer"]["per_peer"][0]["state"] in ("idle", "busy", "closed") and
      d["peer"]["per_peer"][0]["authenticated"] is True and
      d["peer"]["per_peer"][0]["blocks"] == d["peer"]["fetches"]["blocks"] and
      d["peer"]["per_peer"][0]["last_error"] == 0' "$dir/dec.json" ||
	fail "decode: the server's row: $(cat "$dir/dec.json")"
"$kvstash" --socket "$dec_sock" stats >"$dir/out" || fail "stats"
grep -qx 'Peer service:' "$dir/out" || fail "stats: no Peer service: block"
grep -Eq '^  fetches +[0-9]+ completed: [0-9]+ full, 0 partial, [0-9]+ empty, 0 failed$' \
	"$dir/out" || fail "stats: fetches line"
grep -Eq '^  fetched +[1-9][0-9]* blocks, [0-9.]+ [KM]iB, latency p50 [1-9][0-9]* us, p99 [1-9][0-9]* us$' \
	"$dir/out" || fail "stats: fetched line"
grep -Eq '^  ADDR +NODE +ROLE +STATE +CONNS +LOCKS +BLOCKS +BYTES +FAILURES +LAST_ERROR$' \
	"$dir/out" || fail "stats: the peers' table head"
grep -Eq "^  $net\\.1:7471 +node-prefill +server +(idle|busy|closed) +[0-9]+ +0 +[1-9][0-9]* .* 0 +-\$" \
	"$dir/out" || fail "stats: the server's row"

# The serving node: the same in its status, once the releases arrived.
until_json 30 "prefill: the locks not all released" "$pre_sock" status "$dir/pre.json" \
	'd["peer"]["locks"]["released"] >= 3 and d["peer"]["locks"]["held"] == 0'
json 'd["peer"]["serves"]["blocks"] >= 24 and d["peer"]["serves"]["bytes"] > 0 and
      d["peer"]["serves"]["failures"] == 0 and
      d["peer"]["locks"]["released"] == d["peer"]["locks"]["granted"] and
      d["peer"]["locks"]["expired"] == 0 and d["peer"]["conns"]["accepted"] >= 1 and
      d["peer"]["fetches"]["completed"] == 0' "$dir/pre.json" ||
	fail "prefill status JSON: $(cat "$dir/pre.json")"
# A client row per address it comes from: decode's, from its listen address.
json 'sum(p["blocks"] for p in d["peer"]["per_peer"] if p["role"] == "client" and
          p["node"] == "node-decode" and p["addr"].startswith("'"$net"'.2:")) >= 24' \
	"$dir/pre.json" || fail "prefill: no client row for decode: $(cat "$dir/pre.json")"
"$kvstash" --socket "$pre_sock" status >"$dir/out" || fail "status"
grep -Eq '^  served +[1-9][0-9]* blocks, [0-9.]+ [KM]iB, 0 failures$' "$dir/out" ||
	fail "status: served line"
grep -Eq '^  locks +0 held, [1-9][0-9]* granted, [1-9][0-9]* released, 0 expired, 0 dropped$' \
	"$dir/out" || fail "status: locks line"
grep -Eq "^  $net\\.2:[0-9]+ +node-decode +client " "$dir/out" || fail "status: the client's row"

# ---- a hint nobody listens on: a connect failure, the peer failed ------------

"$pd" --prefill-socket "$pre_sock" --decode-socket "$dec_sock" --hint "$net.9:7471" \
	--ns pstats/gone --layers 2 --segment-bytes 8192 --blocks 4 --runs 1 --allow-partial \
	>"$dir/pd-gone.log" 2>&1
"$kvstash" --socket "$dec_sock" status --json >"$dir/dec.json" || fail "status --json"
json 'd["peer"]["fetch_failures"]["connect"] >= 1 and d["peer"]["fetches"]["failures"] >= 1 and
      d["peer"]["peers"] == 2 and d["peer"]["peers_failed"] == 1 and
      any(p["addr"] == "'"$net"'.9:7471" and p["state"] == "failed" and p["state_code"] == 4 and
          p["last_error"] < 0 and p["last_error_text"] and p["node"] == "" and
          p["authenticated"] is False and p["failures"] >= 1 for p in d["peer"]["per_peer"])' \
	"$dir/dec.json" || fail "decode after the dead hint: $(cat "$dir/dec.json")"
"$kvstash" --socket "$dec_sock" status >"$dir/out" || fail "status"
grep -Eq '^  peers +2, 1 failed$' "$dir/out" || fail "status: peers line after the dead hint"
grep -Eq "^  $net\\.9:7471 +- +server +failed +0 +0 +0 +0 B +[1-9][0-9]* +[A-Z]" "$dir/out" ||
	fail "status: the failed peer's row"

# ---- /metrics: the same figures, bounded labels ------------------------------

"$kvstash" --socket "$dec_sock" stats --json >"$dir/dec.json" || fail "stats --json"
scrape "$dec_mport" "$dir/m1" || fail "scrape"
python3 - "$dir/m1" "$dir/dec.json" <<'PY' || fail "peer families"
import json, re, sys

types, samples = {}, {}
for line in open(sys.argv[1]):
    line = line.rstrip("\n")
    if line.startswith("# TYPE "):
        _, _, name, t = line.split(" ", 3)
        types[name] = t
    elif line and not line.startswith("#"):
        m = re.fullmatch(r'([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)', line)
        assert m, "malformed sample line: " + line
        samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
p = json.load(open(sys.argv[2]))["peer"]
mine = {k: v for k, v in samples.items() if k.startswith("kvstash_peer_")}
for k in mine:
    labels = k.partition("{")[2]
    assert not labels or re.fullmatch(
        r'(result="(full|partial|empty)"|end="(released|expired|dropped)"|'
        r'reason="(host_conns|host_unauth|unauth_budget|max_conns|host_locks)"|'
        r'side="(fetch|serve)",kind="[a-z_]+"|le="[^"]+")\}', labels), f"{k}: unknown label"
    assert "127." not in k, f"{k}: a label per peer"
want = {"kvstash_peer_peers": "gauge", "kvstash_peer_peers_failed": "gauge",
        "kvstash_peer_fetches_total": "counter", "kvstash_peer_fetched_blocks_total": "counter",
        "kvstash_peer_fetched_bytes_total": "counter",
        "kvstash_peer_fetch_duration_seconds": "histogram",
        "kvstash_peer_served_blocks_total": "counter", "kvstash_peer_served_bytes_total": "counter",
        "kvstash_peer_locks_held": "gauge", "kvstash_peer_locks_granted_total": "counter",
        "kvstash_peer_locks_total": "counter", "kvstash_peer_connections": "gauge",
        "kvstash_peer_connections_accepted_total": "counter",
        "kvstash_peer_failures_total": "counter",
        "kvstash_peer_connections_unauthenticated": "gauge",
        "kvstash_peer_refused_total": "counter", "kvstash_peer_unauth_evicted_total": "counter",
        "kvstash_peer_fetch_staged_bytes": "gauge"}
for name, t in want.items():
    assert types.get(name) == t, f"{name}: type {types.get(name)}, want {t}"
assert mine["kvstash_peer_peers"] == p["peers"] == 2
assert mine["kvstash_peer_peers_failed"] == p["peers_failed"] == 1
f = p["fetches"]
for r in ("full", "partial", "empty"):
    assert mine[f'kvstash_peer_fetches_total{{result="{r}"}}'] == f[r]
assert mine["kvstash_peer_fetched_blocks_total"] == f["blocks"]
assert mine["kvstash_peer_fetched_bytes_total"] == f["bytes"]
for side in ("fetch", "serve"):
    for kind, v in p[side + "_failures"].items():
        assert mine[f'kvstash_peer_failures_total{{side="{side}",kind="{kind}"}}'] == v
assert len([k for k in mine if k.startswith("kvstash_peer_failures_total")]) == 30
h = "kvstash_peer_fetch_duration_seconds"
buckets = [(k, v) for k, v in mine.items() if k.startswith(h + "_bucket")]
assert len(buckets) == 24, buckets
assert all(a[1] <= b[1] for a, b in zip(buckets, buckets[1:])), "buckets not cumulative"
assert buckets[-1][0] == h + '_bucket{le="+Inf"}' and buckets[-1][1] == mine[h + "_count"]
assert mine[h + "_count"] == f["completed"]
assert abs(mine[h + "_sum"] - f["latency_sum_us"] / 1e6) < 1e-6
print("peer families ok:", len(mine), "samples")
PY

py "$dec_sock" 'st["peer"]["nr_peers"] == 2 and len(st["peers"]) == 2 and
    sx["peer"]["fetch_fail_connect"] >= 1 and
    any(q["role_name"] == "server" and q["node"] == "node-prefill" for q in sx["peers"])' ||
	fail "the binding's peer groups"

stop_daemon "$dec"
stop_daemon "$pre"
echo "ok"
