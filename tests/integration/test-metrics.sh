#!/bin/sh
# The Prometheus endpoint: /metrics in text format with HELP and TYPE for
# every kvstash_* family, counters that move with traffic and agree with
# `kvstash stats`, /health 200 once ready, 404 elsewhere.  Skips (77)
# without curl or python3, or when kvstashd was built without
# libmicrohttpd.
set -eu
command -v curl >/dev/null 2>&1 || { echo "no curl: skipping"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "no python3: skipping"; exit 77; }
b=$(cd "${top_builddir:-.}" && pwd)
grep -q '^#define HAVE_MICROHTTPD 1' "$b/config.h" || { echo "built without libmicrohttpd: skipping"; exit 77; }
tmp=$(mktemp -d)
pid=
cleanup() {
	[ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() { echo "FAIL: $*"; cat "$tmp/d.log"; exit 1; }

# A port nobody uses: try a few.
for try in 1 2 3 4 5; do
	port=$((20000 + ($$ * 7 + try * 131) % 30000))
	printf '[server]\nsocket = %s/s.sock\n[pool]\nsize = 64M\n[metrics]\nlisten = 127.0.0.1:%s\n' \
		"$tmp" "$port" >"$tmp/k.conf"
	"$b/sidecar/kvstashd" --config "$tmp/k.conf" >"$tmp/d.log" 2>&1 &
	pid=$!
	for _ in $(seq 100); do
		[ -S "$tmp/s.sock" ] && break
		kill -0 $pid 2>/dev/null || break
		sleep 0.05
	done
	kill -0 $pid 2>/dev/null && break
	pid=
done
[ -n "$pid" ] || fail "kvstashd did not start"
url=http://127.0.0.1:$port

# The socket exists before the pool is ready; /health turns 200 only then.
code=000
for _ in $(seq 200); do
	code=$(curl -s -o /dev/null -w '%{http_code}' "$url/health" || true)
	[ "$code" = 200 ] && break
	case $code in 000|503) ;; *) fail "/health answered $code before ready" ;; esac
	sleep 0.05
done
[ "$code" = 200 ] || fail "/health not 200 once ready ($code)"
grep -q "ready: " "$tmp/d.log" || fail "/health 200 before kvstashd logged ready"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/nope")" = 404 ] || fail "unknown path not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url/metrics")" = 405 ] || fail "POST not refused"
curl -sf -D "$tmp/h1" "$url/metrics" >"$tmp/m1" || fail "first scrape"
grep -qi '^content-type: text/plain; version=0.0.4' "$tmp/h1" || fail "content type"

# Traffic while scraping: the example engine saves, queries and loads.
"$b/examples/kvstash-example-engine" --socket "$tmp/s.sock" --nops 200 --segment-bytes 4096 \
	>"$tmp/e.log" 2>&1 &
epid=$!
curl -sf "$url/metrics" >/dev/null || fail "scrape during traffic"
wait $epid || { cat "$tmp/e.log"; fail "example engine"; }
curl -sf "$url/metrics" >"$tmp/m2" || fail "second scrape"
"$b/tools/kvstash" --socket "$tmp/s.sock" stats --json >"$tmp/stats.json" || fail "kvstash stats"

python3 - "$tmp/m1" "$tmp/m2" "$tmp/stats.json" <<'PY' || fail "metric checks"
import json, re, sys

def parse(path):
    types, helps, samples = {}, {}, {}
    for line in open(path):
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
    return types, helps, samples

t1, h1, s1 = parse(sys.argv[1])
t2, h2, s2 = parse(sys.argv[2])
stats = json.load(open(sys.argv[3]))
want = {
    "kvstash_pool_capacity_bytes": "gauge", "kvstash_pool_used_bytes": "gauge",
    "kvstash_blocks_resident": "gauge", "kvstash_query_blocks_hit_total": "counter",
    "kvstash_query_blocks_missed_total": "counter", "kvstash_save_blocks_stored_total": "counter",
    "kvstash_save_blocks_skipped_total": "counter", "kvstash_load_blocks_total": "counter",
    "kvstash_evictions_total": "counter", "kvstash_leases_live": "gauge",
    "kvstash_leases_expired_total": "counter", "kvstash_copy_bytes_total": "counter",
    "kvstash_copy_duration_seconds": "histogram", "kvstash_sessions": "gauge",
    "kvstash_errors_total": "counter",
}
for name, typ in want.items():
    assert t2.get(name) == typ, f"{name}: type {t2.get(name)}, want {typ}"
    assert h2.get(name), f"{name}: no HELP"
for name in t2:
    assert name.startswith("kvstash_"), f"family {name} is not kvstash_*"
    if t2[name] == "counter":
        assert name.endswith("_total"), f"counter {name} does not end in _total"
# Counters move with traffic and never go back.
for k, v in s1.items():
    if k.split("{")[0].endswith("_total") and k in s2:
        assert s2[k] >= v, f"{k} went back: {v} -> {s2[k]}"
for k in ("kvstash_save_blocks_stored_total", "kvstash_load_blocks_total",
          "kvstash_query_blocks_hit_total", 'kvstash_copy_bytes_total{direction="save"}',
          'kvstash_copy_bytes_total{direction="load"}',
          'kvstash_copy_duration_seconds_count{direction="load"}'):
    assert s2[k] > s1.get(k, 0), f"{k} did not move: {s1.get(k)} -> {s2[k]}"
# The same numbers as `kvstash stats` (nothing ran between the two reads).
assert s2["kvstash_save_blocks_stored_total"] == stats["saves"]["blocks_stored"]
assert s2["kvstash_load_blocks_total"] == stats["loads"]["blocks"]
assert s2["kvstash_query_blocks_hit_total"] == stats["queries"]["blocks_hit"]
assert s2['kvstash_copy_bytes_total{direction="save"}'] == stats["saves"]["bytes"]
# Histogram buckets are cumulative and end in +Inf == count.
for d in ("save", "load"):
    b = [v for k, v in s2.items() if k.startswith("kvstash_copy_duration_seconds_bucket") and f'direction="{d}"' in k]
    assert b == sorted(b), f"{d} buckets not cumulative"
    assert s2[f'kvstash_copy_duration_seconds_bucket{{direction="{d}",le="+Inf"}}'] == \
        s2[f'kvstash_copy_duration_seconds_count{{direction="{d}"}}']
print("metrics ok:", len(t2), "families")
PY

kill -TERM $pid
wait $pid || fail "kvstashd exit status"
pid=
echo "ok"
