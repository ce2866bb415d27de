#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench_load_progress: a LOAD PROGRESS against a whole LOAD, with and
without an engine's stream waiting on it and computing meanwhile.

Starts a kvstashd (extra kvstash.conf lines with --daemon-conf, e.g. a
[cuda] mover), saves --blocks blocks of a vLLM-shaped layer-first cache
(--layers layers of [2, blocks, 16, 8, 128] bf16), then times, from the
host, until the LOAD's CQE (median of --runs):

  whole        a LOAD, waited for on the host (the baseline)
  progress     a LOAD PROGRESS, waited for on the host: its layer-by-layer
               copies alone
  + waits      the same with a stream waiting for every layer in turn
  + compute    the same with a matrix product after each layer's wait on
               that stream (an engine's layer), and that compute alone:
               the overlap is good when this is near max(restore, compute)

  python/examples/bench_load_progress.py --daemon-conf '[cuda]\\nmover = kernel'
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, ".."))
TOP = os.path.dirname(os.path.dirname(HERE))
if not os.environ.get("KVSTASH_LIB") and os.path.exists(os.path.join(TOP, "client/.libs/libkvstash.so.0")):
    os.environ["KVSTASH_LIB"] = os.path.join(TOP, "client/.libs/libkvstash.so.0")
import kvstash  # noqa: E402
import kvstash.torch as kt  # noqa: E402
from bench_restore import start_daemon  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=32)
    p.add_argument("--blocks", type=int, default=1024)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--matmul", type=int, default=3072, help="side of each layer's matrix product")
    p.add_argument("--pool", default="8G")
    p.add_argument("--daemon-conf", default="")
    args = p.parse_args()
    L, n = args.layers, args.blocks
    tmp = tempfile.mkdtemp(prefix="kvstash-bench-lp.")
    daemon, sock = start_daemon(tmp, args.pool, args.daemon_conf)
    try:
        kv = [torch.randn((2, 2 * n, 16, 8, 128), device="cuda").to(torch.bfloat16) for _ in range(L)]
        c = kvstash.Client(sock, instance="bench-lp", namespace="bench-lp/lf", device=0, fences=True)
        kt.register_tensors(c, kv, layout="layer_first")
        keys = [i.to_bytes(8, "little") + b"bench-lp" for i in range(n)]
        torch.cuda.synchronize()
        c.save(keys, range(n)).wait(timeout=60)
        c.flush().wait(timeout=60)
        dst = list(range(n, 2 * n))
        nbytes = n * L * 2 * 16 * 8 * 128 * 2
        a = torch.randn((args.matmul, args.matmul), device="cuda")
        w = torch.randn((args.matmul, args.matmul), device="cuda") / args.matmul
        s = torch.cuda.Stream()

        def compute_only() -> float:
            torch.cuda.synchronize()
            t = time.perf_counter()
            with torch.cuda.stream(s):
                x = a
                for _ in range(L):
                    x = x @ w
            s.synchronize()
            return time.perf_counter() - t

        def one(mode: str) -> float:
            q = c.query(keys).wait(timeout=30)
            torch.cuda.synchronize()
            t = time.perf_counter()
            if mode == "whole":
                c.load(q, dst).wait(timeout=60)
                return time.perf_counter() - t
            op = c.load(q, dst, progress=True)
            if mode != "progress":
                with torch.cuda.stream(s):
                    x = a
                    for i in range(L):
                        op.fence.wait(i, s)
                        if mode == "compute":
                            x = x @ w
            op.wait(timeout=60)
            s.synchronize()
            return time.perf_counter() - t

        comp = statistics.median(compute_only() for _ in range(args.runs))
        rows = []
        for mode in ("whole", "progress", "waits", "compute"):
            one(mode)  # warm-up
            rows.append((mode, statistics.median(one(mode) for _ in range(args.runs))))
        c.close()
    finally:
        daemon.terminate()
        daemon.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n{n} blocks x {L} layers ({nbytes / 2**20:.0f} MiB), median of {args.runs}"
          f"{'; kvstashd: ' + args.daemon_conf if args.daemon_conf else ''}\n")
    print("| LOAD | ms | GB/s | vs whole |")
    print("|---|---:|---:|---:|")
    whole = rows[0][1]
    for mode, t in rows:
        label = {"whole": "whole", "progress": "progress", "waits": "progress + waits",
                 "compute": "progress + waits + compute"}[mode]
        print(f"| {label} | {t * 1e3:.2f} | {nbytes / t / 1e9:.1f} | {t / whole:.2f} |")
    print(f"| compute alone ({L} x {args.matmul}^2 fp32 products) | {comp * 1e3:.2f} | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
