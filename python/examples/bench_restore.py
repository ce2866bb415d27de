#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench_restore: what stream ordering buys the reference engine, on a GPU.

Starts a kvstashd, then for each prompt length runs paged_engine.py (each
run a new process, as a restarted engine would be):

  cold --save none     prefill and decode, nothing saved: the decode baseline
  cold --save stream   the same, the prompt's blocks saved while the decode
                       runs (the SAVE waits for the prefill on the GPU side;
                       no synchronize): decode tokens/s against the baseline
  warm --restore whole       QUERY, LOAD, wait for it, then prefill the last block
  warm --restore layerwise   QUERY, LOAD PROGRESS, and the prefill's layer i
                             waits on the GPU for layer i only

and prints one table: time to first token cold and warm both ways (warm
whole split into QUERY, restore and prefill; warm layer by layer into the
time its last layer was in after the first wait and the compute after it),
cold over warm, and decode tokens/s with saves against without.  Every
warm run checks its loaded blocks and tokens against the cold run's, and
the benchmark fails if one differs.

  python/examples/bench_restore.py --model 8b --prompts 4096,16384,32768

Environment as for run_reference.sh: KVSTASHD (default: the build tree's
sidecar/kvstashd), KVSTASH_LIB (default: the build tree's libkvstash).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.path.dirname(os.path.dirname(HERE))


def start_daemon(tmp: str, pool: str, extra: str) -> tuple[subprocess.Popen[bytes], str]:
    kvstashd = os.environ.get("KVSTASHD") or os.path.join(TOP, "sidecar", "kvstashd")
    if not os.access(kvstashd, os.X_OK):
        kvstashd = shutil.which("kvstashd") or sys.exit("bench_restore: kvstashd not found: set KVSTASHD")
    sock = os.path.join(tmp, "run", "kvstash.sock")
    conf = os.path.join(tmp, "kvstash.conf")
    with open(conf, "w") as f:
        f.write(f"[server]\nsocket = {sock}\n[pool]\nsize = {pool}\n[log]\nlevel = info\n")
        f.write(extra.replace("\\n", "\n") + "\n")
    log = open(os.path.join(tmp, "kvstashd.log"), "wb")
    d = subprocess.Popen([kvstashd, "--config", conf], stdout=log, stderr=subprocess.STDOUT)
    for _ in range(600):
        if d.poll() is not None:
            break
        try:
            s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            s.connect(sock)
            s.close()
            return d, sock
        except OSError:
            time.sleep(0.1)
    sys.exit("bench_restore: kvstashd did not start:\n" + open(log.name).read())


def engine(args: argparse.Namespace, sock: str, tmp: str, prompt: int, phase: str, mode: list[str]) -> dict:
    cold_json = os.path.join(tmp, f"cold-{prompt}.json")
    result = os.path.join(tmp, "result.json")
    blocks = (prompt + args.gen) // 16 + 8
    # A seed per length: prompts that share a prefix would share blocks
    # computed in other chunks (other bits), which the warm check rejects.
    cmd = [sys.executable, "-B", os.path.join(HERE, "paged_engine.py"), "--phase", phase, "--socket", sock,
           "--seed", str(7000 + prompt),
           "--model", args.model, "--layout", args.layout, "--prompt-len", str(prompt), "--gen", str(args.gen),
           "--blocks", str(blocks), "--chunk", str(args.chunk), "--json", cold_json, "--result", result] + mode
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-4000:])
        sys.exit(f"bench_restore: {phase} {' '.join(mode)} at {prompt} tokens failed ({p.returncode})")
    with open(result) as f:
        return json.load(f)


def median_run(runs: list[dict]) -> dict:
    """The run of median time to first token, with the spread of all."""
    by = sorted(runs, key=lambda r: r["ttft_s"])
    r = dict(by[len(by) // 2])
    r["spread"] = (by[0]["ttft_s"], by[-1]["ttft_s"])
    return r


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="8b", help="paged_engine --model (default 8b)")
    p.add_argument("--layout", default="layer-first", help="paged_engine --layout (default layer-first)")
    p.add_argument("--prompts", default="4096,16384,32768", help="prompt lengths, comma-separated")
    p.add_argument("--gen", type=int, default=64, help="tokens to generate (decode tokens/s over gen-1)")
    p.add_argument("--chunk", type=int, default=1024, help="prefill chunk")
    p.add_argument("--pool", default="32G", help="kvstashd's pool")
    p.add_argument("--repeat", type=int, default=1, help="warm runs of each kind (the median's row, "
                   "and the spread of TTFT, are shown)")
    p.add_argument("--decode-bench", type=int, default=3, metavar="ROUNDS",
                   help="paged_engine --decode-bench in the baseline run: decode tokens/s with a SAVE "
                        "after every step against none, in one process (0: off)")
    p.add_argument("--decode-saves", type=int, default=16, help="blocks saved after each decode step there")
    p.add_argument("--decode-only", action="store_true", help="only the baseline run's --decode-bench")
    p.add_argument("--daemon-conf", default="", help="more kvstash.conf lines (\\n between them), "
                   "e.g. '[cuda]\\nmover = kernel'")
    args = p.parse_args()
    if not os.environ.get("KVSTASH_LIB") and os.path.exists(os.path.join(TOP, "client/.libs/libkvstash.so.0")):
        os.environ["KVSTASH_LIB"] = os.path.join(TOP, "client/.libs/libkvstash.so.0")
    os.environ["PYTHONPATH"] = os.path.join(HERE, "..") + (":" + os.environ["PYTHONPATH"]
                                                           if os.environ.get("PYTHONPATH") else "")
    tmp = tempfile.mkdtemp(prefix="kvstash-bench-restore.")
    daemon, sock = start_daemon(tmp, args.pool, args.daemon_conf)
    rows = []
    try:
        for prompt in [int(x) for x in args.prompts.split(",")]:
            bench = ["--decode-bench", str(args.decode_bench), "--decode-saves", str(args.decode_saves)] \
                if args.decode_bench else []
            base = engine(args, sock, tmp, prompt, "cold", ["--save", "none"] + bench)
            if args.decode_only:
                rows.append((prompt, base))
                continue
            cold = engine(args, sock, tmp, prompt, "cold", ["--save", "stream"])
            runs: dict[str, list[dict]] = {"whole": [], "layerwise": []}
            for _ in range(max(1, args.repeat)):
                for kind in runs:
                    runs[kind].append(engine(args, sock, tmp, prompt, "warm", ["--restore", kind]))
            whole, lw = (median_run(runs[k]) for k in ("whole", "layerwise"))
            rows.append((prompt, base, cold, whole, lw, runs))
    finally:
        daemon.terminate()
        daemon.wait()
    brows = rows  # every prompt's baseline run, for the decode table
    if args.decode_only:
        rows = []  # no warm runs: no TTFT table
    if rows:
        reps = f", warm runs: median of {args.repeat} (TTFT spread in brackets)" if args.repeat > 1 else ""
        print(f"\nmodel {args.model}, layout {args.layout}, {args.gen - 1} decode tokens; times in ms{reps}"
              f"{'; kvstashd: ' + args.daemon_conf if args.daemon_conf else ''}\n")
        print("| prompt | cold TTFT | warm whole: TTFT = QUERY + restore + prefill | "
              "warm layer by layer: TTFT (last layer in, compute after) | bound: QUERY + max(restore, prefill) | "
              "restore GB/s | cold/warm | layerwise/whole | decode tok/s, all steps: saving / not / ratio | "
              "decode tok/s while the SAVE ran: saving / not / ratio |")
        print("|---:|---:|---|---|---:|---:|---:|---:|---|---|")
        for prompt, base, cold, whole, lw, _ in rows:
            ms = lambda x: x * 1e3  # noqa: E731
            spread = lambda r: f" [{ms(r['spread'][0]):.1f}-{ms(r['spread'][1]):.1f}]" if args.repeat > 1 else ""  # noqa: E731
            gbps = whole["bytes"] / whole["load_s"] / 1e9 if whole["load_s"] else 0.0
            ratio = cold["decode_tps"] / base["decode_tps"] if base["decode_tps"] else 0.0
            bound = whole["query_s"] + max(whole["load_s"], whole["prefill_s"])
            # The steps while the SAVE ran (until the step that saw its CQE), against the same steps unsaved.
            k = cold["save_done_at"] if cold["save_done_at"] > 0 else len(cold["step_s"])
            during = k / sum(cold["step_s"][:k]) if k else 0.0
            during_base = k / sum(base["step_s"][:k]) if k else 0.0
            print(f"| {prompt} | {ms(cold['ttft_s']):.1f} | {ms(whole['ttft_s']):.1f}{spread(whole)} = "
                  f"{ms(whole['query_s']):.2f} + {ms(whole['load_s']):.2f} + {ms(whole['prefill_s']):.2f} | "
                  f"{ms(lw['ttft_s']):.1f}{spread(lw)} ({ms(lw['last_layer_in_s']):.2f}, "
                  f"{ms(lw['compute_after_s']):.2f}) | {ms(bound):.1f} | {gbps:.1f} | "
                  f"{cold['ttft_s'] / lw['ttft_s']:.1f}x | {lw['ttft_s'] / whole['ttft_s']:.2f} | "
                  f"{cold['decode_tps']:.1f} / {base['decode_tps']:.1f} / {ratio:.3f} | "
                  f"{during:.1f} / {during_base:.1f} / {during / during_base if during_base else 0:.3f} "
                  f"({k} steps) |")
    if args.decode_bench:
        print(f"\nDecode tokens/s in one process, segments of {args.gen - 1} steps alternating without "
              f"and with a stream-ordered SAVE of {args.decode_saves} blocks after every step "
              f"(never waited for in the segment); median of {args.decode_bench} each\n")
        # The rate drifts over a process's life in both modes alike (seen on
        # the H200: 20 down to 12 tokens/s), so each saving segment is
        # compared with the unsaved one just before it.
        print("| prompt | no saves | saving | median of the pairs' ratios | segments: no saves | segments: saving |")
        print("|---:|---:|---:|---:|---|---|")
        for prompt, base, *_ in brows:
            a, b = base["decode_none"], base["decode_saving"]
            ma, mb = statistics.median(a), statistics.median(b)
            pairs = statistics.median(y / x for x, y in zip(a, b))
            print(f"| {prompt} | {ma:.2f} | {mb:.2f} | {pairs:.3f} | {', '.join(f'{x:.2f}' for x in a)} | "
                  f"{', '.join(f'{x:.2f}' for x in b)} |")
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
