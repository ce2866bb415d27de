#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""paged_engine: a small transformer engine that restores its prompt's KV
cache through kvstash, and proves the restore exact.

A decoder-only transformer with random weights from a fixed seed (8 layers,
GQA with 16 query and 8 KV heads of dimension 128, SwiGLU MLP, RoPE, bf16),
a paged KV cache of 16-token blocks, and greedy generation.

  --phase cold   prefill a 4096-token prompt (tokens from --seed), generate
                 32 tokens, save every full prompt block through kvstash
                 (keys from kvstash.keys.block_keys), flush, and write the
                 tokens and a SHA-256 per saved block to --json.
  --phase warm   a new process: query the prompt's keys, load the hits into
                 other (shuffled) block ids, prefill only the rest, generate
                 32 tokens; check the loaded blocks against the cold run's
                 digests and the tokens against its tokens; print cold vs
                 warm time to first token and the restore bandwidth.
                 Exit status 1 on any mismatch.
  --fetch-from ADDR:PORT (warm)  decode on another node: the QUERY fetches
                 what its kvstashd lacks from the prefill node's peer
                 service (or, with 'registry', the holder the registry
                 names); --allow-miss when that node is gone on purpose
                 (the engine recomputes, the tokens must still match).

Layouts (--layout): page-first, one fused tensor
[num_blocks, layers, 2, kv_heads, block_size, head_dim] (a block holds all
its layers: large copies); layer-first, per layer a split K/V tensor
[2, num_blocks, block_size, kv_heads, head_dim] (vLLM's flash-attention
layout).  Different layouts use different kvstash namespaces.

Why the warm tokens can be bit-identical: the last prompt block (the one
holding the last token, whose logits give the first new token) is always
prefilled as a chunk of its own, cold and warm, so the warm run computes it
with the same shapes, kernels and cached K/V bytes as the cold run; only the
blocks before it come from kvstash.  (vLLM likewise recomputes the last
token of a fully cached prompt.)  And the kernels must be deterministic
across processes: attention is plain fp32 matrix products by default
(--attention exact), as torch's fused attention with a mask was seen giving
different tokens in different processes from identical inputs on an H200;
cuBLAS and torch are put in their deterministic modes.

Times to first token are taken after an untimed warm-up on a scratch cache
(as in a serving engine that has run before), so cold vs warm compares a
full prefill with a restore plus a one-block prefill.

--device cpu runs everything on the CPU against kvstashd's host backend
(the cache lives in kvstash.HostMemory); with --tiny, a model small enough
for a test machine.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import math
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

try:
    import kvstash
except ImportError:  # run from the source tree
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    import kvstash
import kvstash.keys
import kvstash.torch as kt


@dataclass(frozen=True)
class Config:
    layers: int = 8
    hidden: int = 2048
    heads: int = 16
    kv_heads: int = 8
    head_dim: int = 128
    mlp: int = 5632
    vocab: int = 32000
    block_size: int = 16
    rope_theta: float = 10000.0
    dtype: str = "bfloat16"

    @property
    def torch_dtype(self) -> torch.dtype:
        return getattr(torch, self.dtype)


TINY = Config(layers=2, hidden=256, heads=4, kv_heads=2, head_dim=64, mlp=512, vocab=1000, dtype="float32")
# Llama-3-8B's shapes (32 layers, GQA 32/8 x 128, SwiGLU 14336): 128 KiB of
# KV per token, so restoring a long prompt takes as long as computing its
# last block, which is where layer-by-layer loading pays.
LLAMA8B = Config(layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128, mlp=14336)
MODELS = {"tiny": TINY, "small": Config(), "8b": LLAMA8B}


# ---- model ----------------------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight).to(x.dtype)


ATTENTION = "exact"  # --attention


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(d) + mask) v for q [H, T, D], k/v [H, S, D], mask [T, S] (True: attend)."""
    if ATTENTION == "sdpa" and hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q[None], k[None], v[None], attn_mask=mask)[0]
    scores = (q.float() @ k.float().transpose(-1, -2)) / math.sqrt(q.shape[-1])  # torch < 2.0
    scores = scores.masked_fill(~mask, float("-inf"))
    return (scores.softmax(-1) @ v.float()).to(q.dtype)


class Model:
    """Random weights from @seed: the same seed gives the same model in every process."""

    def __init__(self, cfg: Config, seed: int, device: torch.device) -> None:
        self.cfg = cfg
        self.device = device
        g = torch.Generator(device=device).manual_seed(seed)
        dt = cfg.torch_dtype

        def w(fan_in: int, fan_out: int) -> torch.Tensor:
            x = torch.randn((fan_in, fan_out), generator=g, device=device, dtype=torch.float32)
            return (x / math.sqrt(fan_in)).to(dt)

        q_dim, kv_dim = cfg.heads * cfg.head_dim, cfg.kv_heads * cfg.head_dim
        self.embed = torch.randn((cfg.vocab, cfg.hidden), generator=g, device=device, dtype=torch.float32).to(dt)
        self.layers = [
            {
                "wq": w(cfg.hidden, q_dim), "wk": w(cfg.hidden, kv_dim), "wv": w(cfg.hidden, kv_dim),
                "wo": w(q_dim, cfg.hidden), "gate": w(cfg.hidden, cfg.mlp), "up": w(cfg.hidden, cfg.mlp),
                "down": w(cfg.mlp, cfg.hidden),
            }
            for _ in range(cfg.layers)
        ]
        self.norm = torch.ones(cfg.hidden, device=device)
        self.lm_head = w(cfg.hidden, cfg.vocab)
        half = cfg.head_dim // 2
        self.inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(half, device=device, dtype=torch.float32) / half))

    def rope(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Rotary embedding of x [T, heads, head_dim] at @positions."""
        freqs = positions.float()[:, None] * self.inv_freq[None]
        cos, sin = freqs.cos()[:, None], freqs.sin()[:, None]
        x1, x2 = x.float().chunk(2, dim=-1)
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1).to(x.dtype)

    @torch.inference_mode()
    def forward(self, tokens: torch.Tensor, start: int, cache: PagedCache, table: torch.Tensor,
                hook: Callable[[int], None] | None = None) -> torch.Tensor:
        """Run tokens at positions start.. through the model, writing their K/V
        into the cache (blocks from @table); the last position's logits (fp32).
        @hook(i) runs before layer i reads the cache, and hook(layers) after
        the last (the warm prefill makes the stream wait there for layer i
        of a layer-by-layer restore)."""
        cfg = self.cfg
        n = tokens.shape[0]
        end = start + n
        positions = torch.arange(start, end, device=self.device)
        # Causal: query i (position start + i) sees keys 0 .. start + i.
        mask = torch.arange(end, device=self.device)[None, :] <= positions[:, None]
        group = cfg.heads // cfg.kv_heads
        x = self.embed[tokens]
        for i, p in enumerate(self.layers):
            if hook:
                hook(i)
            h = rms_norm(x, self.norm)
            q = self.rope((h @ p["wq"]).view(n, cfg.heads, cfg.head_dim), positions)
            k = self.rope((h @ p["wk"]).view(n, cfg.kv_heads, cfg.head_dim), positions)
            v = (h @ p["wv"]).view(n, cfg.kv_heads, cfg.head_dim)
            cache.write(i, table, positions, k, v)
            keys, values = cache.gather(i, table, end)  # [kv_heads, end, head_dim]
            keys = keys.repeat_interleave(group, dim=0)
            values = values.repeat_interleave(group, dim=0)
            o = attention(q.transpose(0, 1), keys, values, mask)  # [heads, n, head_dim]
            x = x + o.transpose(0, 1).reshape(n, -1) @ p["wo"]
            h = rms_norm(x, self.norm)
            x = x + (F.silu(h @ p["gate"]) * (h @ p["up"])) @ p["down"]
        if hook:
            hook(len(self.layers))
        return (rms_norm(x[-1:], self.norm) @ self.lm_head).float()[0]


# ---- paged KV cache ---------------------------------------------------------------


class PagedCache:
    """num_blocks blocks of block_size tokens, every layer's K and V.

    Whatever the layout, block_view(layer) is a view [num_blocks,
    block_size, 2, kv_heads, head_dim] of the same memory, so writing and
    gathering are layout-independent.
    """

    def __init__(self, cfg: Config, num_blocks: int, layout: str, device: torch.device, alloc: str) -> None:
        self.cfg = cfg
        self.layout = layout
        self.num_blocks = num_blocks
        self.memory: kvstash.HostMemory | None = None
        dt = cfg.torch_dtype
        L, H, B, D = cfg.layers, cfg.kv_heads, cfg.block_size, cfg.head_dim
        if layout == "page-first":
            shape = (num_blocks, L, 2, H, B, D)
        else:
            shape = (L, 2, num_blocks, B, H, D)  # per layer: kv[l] is [2, num_blocks, B, H, D]
        if device.type == "cpu":
            nbytes = math.prod(shape) * torch.empty((), dtype=dt).element_size()
            self.memory = kvstash.HostMemory(nbytes)
            self.kv = kt.host_tensor(self.memory, shape, dt)
        elif alloc == "arena":
            self.kv = kt.empty_kv(shape, dt, device)
        elif layout == "page-first":
            self.kv = torch.empty(shape, dtype=dt, device=device)
        else:  # the torch allocator, one allocation per layer
            self.kv = [torch.empty(shape[1:], dtype=dt, device=device) for _ in range(L)]
        for t in [self.kv] if isinstance(self.kv, torch.Tensor) else self.kv:
            t.zero_()

    def layer_tensors(self) -> dict[str, torch.Tensor]:
        """What kvstash registers: per layer, a [num_blocks, ...] (page-first)
        or [2, num_blocks, ...] (layer-first) view."""
        names = [f"model.layers.{i}.self_attn" for i in range(self.cfg.layers)]
        if self.layout == "page-first":
            return {n: self.kv[:, i] for i, n in enumerate(names)}
        return {n: self.kv[i] for i, n in enumerate(names)}

    def block_view(self, layer: int) -> torch.Tensor:
        if self.layout == "page-first":
            return self.kv[:, layer].permute(0, 3, 1, 2, 4)  # [NB, 2, H, B, D] -> [NB, B, 2, H, D]
        return self.kv[layer].permute(1, 2, 0, 3, 4)  # [2, NB, B, H, D] -> [NB, B, 2, H, D]

    def write(self, layer: int, table: torch.Tensor, positions: torch.Tensor, k: torch.Tensor,
              v: torch.Tensor) -> None:
        bs = self.cfg.block_size
        self.block_view(layer)[table[positions // bs], positions % bs] = torch.stack((k, v), dim=1)

    def gather(self, layer: int, table: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V of positions 0 .. n-1, each [kv_heads, n, head_dim]."""
        bs = self.cfg.block_size
        nb = (n + bs - 1) // bs
        x = self.block_view(layer)[table[:nb]].reshape(nb * bs, 2, self.cfg.kv_heads, self.cfg.head_dim)[:n]
        return x[:, 0].transpose(0, 1), x[:, 1].transpose(0, 1)

    def block_bytes(self) -> int:
        c = self.cfg
        return c.layers * c.block_size * 2 * c.kv_heads * c.head_dim * torch.empty((), dtype=c.torch_dtype).element_size()

    def digests(self, blocks: list[int]) -> list[str]:
        """SHA-256 of each block's bytes (every layer's K and V, in layer order)."""
        if not blocks:
            return []
        idx = torch.tensor(blocks, device=self.block_view(0).device)
        data = torch.stack([self.block_view(i)[idx] for i in range(self.cfg.layers)], dim=1)
        data = data.contiguous().cpu()  # [n, layers, B, 2, H, D]
        size = self.block_bytes()
        base = data.data_ptr()
        return [hashlib.sha256((ctypes.c_char * size).from_address(base + i * size)).hexdigest()
                for i in range(len(blocks))]


# ---- the engine ----------------------------------------------------------------------


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def prompt_tokens(cfg: Config, seed: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed + 1)
    return torch.randint(0, cfg.vocab, (n,), generator=g)


def block_table(num_blocks: int, needed: int, seed: int) -> torch.Tensor:
    """Blocks for one request, scattered over the cache (shuffled ids)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(num_blocks, generator=g)[:needed]


def prefill_chunks(start: int, n: int, block_size: int, chunk: int) -> list[tuple[int, int]]:
    """[begin, end) ranges covering start..n: chunks of @chunk tokens up to
    the block that holds the last token, then that block on its own."""
    tail = (n - 1) // block_size * block_size
    assert start <= tail or start == n, "start must not pass the last prompt block"
    out = [(b, min(b + chunk, tail)) for b in range(start, tail, chunk)]
    return out + [(max(start, tail), n)]


@dataclass
class Timing:
    ttft_s: float = 0.0
    decode_s: float = 0.0  # the new tokens after the first
    save_done_at: int = -1  # decode steps done when the overlapping SAVE had completed
    save_done_t: float = 0.0  # perf_counter() when that completion was first seen
    step_s: list[float] | None = None  # each decode step (a token: its argmax is read on the host)


def generate(model: Model, cache: PagedCache, table: torch.Tensor, tokens: torch.Tensor, start: int,
             new_tokens: int, chunk: int, t0: float, hook: Callable[[int], None] | None = None,
             after_prefill: Callable[[], kvstash.Operation | None] | None = None) -> tuple[list[int], Timing]:
    """Prefill tokens[start:] (the cache holds 0..start-1), then decode
    greedily; the new tokens and the times (to the first token since @t0,
    of the decode after it).  @hook goes to the first prefill chunk's
    forward; @after_prefill runs once the prefill is enqueued (before its
    result is read): a SAVE submitted there overlaps the decode."""
    cfg, dev = model.cfg, model.device
    n = tokens.shape[0]
    logits = None
    for j, (b, e) in enumerate(prefill_chunks(start, n, cfg.block_size, chunk)):
        logits = model.forward(tokens[b:e].to(dev), b, cache, table, hook if j == 0 else None)
    save = after_prefill() if after_prefill else None
    out = [int(torch.argmax(logits))]
    sync(dev)
    t = Timing(ttft_s=time.perf_counter() - t0)
    t1 = time.perf_counter()
    t.step_s = []
    for i in range(new_tokens - 1):
        ts = time.perf_counter()
        logits = model.forward(torch.tensor([out[-1]], device=dev), n + i, cache, table)
        out.append(int(torch.argmax(logits)))
        t.step_s.append(time.perf_counter() - ts)
        if save is not None and t.save_done_at < 0 and save.done():
            t.save_done_at = i + 1
            t.save_done_t = time.perf_counter()
    sync(dev)
    t.decode_s = time.perf_counter() - t1
    return out, t


def decode_bench(args: argparse.Namespace, model: Model, cache: PagedCache, table: torch.Tensor,
                 client: kvstash.Client, first: int, ids: list[int]) -> dict[str, object]:
    """--decode-bench: decode tokens/s with SAVEs running against none, in
    this process, in alternating segments (none, saving, none, ...): each
    segment decodes --gen - 1 tokens from the end of the prompt again, and
    a saving one submits after every step's kernels a SAVE of
    --decode-saves blocks under fresh keys, ordered on the stream (CUDA) or
    after the step's token was read (host), never waited for during the
    segment: a serving engine's sustained save load while it decodes."""
    n, steps, k = args.prompt_len, args.gen - 1, args.decode_saves
    ids = (ids * (k // len(ids) + 1))[:k]
    rates: dict[str, list[float]] = {"none": [], "saving": []}
    stored = 0
    for r in range(args.decode_bench):
        for mode in ("none", "saving"):
            # Keys made before the clock starts (an engine hashes its blocks anyway).
            keys = [[hashlib.blake2b(f"{os.getpid()}/{r}/{i}/{j}".encode(), digest_size=16).digest()
                     for j in range(k)] for i in range(steps)] if mode == "saving" else []
            ops = []
            tok = first
            sync(model.device)
            t0 = time.perf_counter()
            for i in range(steps):
                logits = model.forward(torch.tensor([tok], device=model.device), n + i, cache, table)
                if mode == "saving":
                    ops.append(kt.save_on_stream(client, keys[i], ids) if model.device.type == "cuda"
                               else None)
                tok = int(torch.argmax(logits))
                if mode == "saving" and ops[-1] is None:
                    ops[-1] = client.save(keys[i], ids)
            sync(model.device)
            rates[mode].append(steps / (time.perf_counter() - t0))
            for op in ops:
                stored += op.wait(timeout=120).stored
    none, saving = statistics.median(rates["none"]), statistics.median(rates["saving"])
    print(f"cold [{args.layout}]: decode {none:.2f} tokens/s without saves, {saving:.2f} with a SAVE of "
          f"{k} blocks after every step ({saving / none:.3f}; medians of {args.decode_bench} segments of "
          f"{steps} steps each; {stored} blocks stored)")
    return {"decode_none": rates["none"], "decode_saving": rates["saving"], "decode_saves": k,
            "decode_stored": stored}


def connect(args: argparse.Namespace, cfg: Config, cache: PagedCache, phase: str) -> kvstash.Client:
    namespace = (f"kvstash-reference/seed{args.seed}-L{cfg.layers}-H{cfg.kv_heads}x{cfg.head_dim}-"
                 f"{cfg.dtype}/{args.layout}-{cfg.block_size}")
    device = None if args.device == "cpu" else torch.device(args.device).index or 0
    client = kvstash.Client(args.socket, instance=f"paged-engine-{phase}-{os.getpid()}",
                            namespace=namespace, device=device,
                            fences=args.save == "stream" or args.restore == "layerwise" or
                            (args.decode_bench > 0 and args.device != "cpu"))
    layout = "page_first" if args.layout == "page-first" else "layer_first"
    kt.register_tensors(client, cache.layer_tensors(), layout=layout, memory=cache.memory)
    return client


def run(args: argparse.Namespace) -> int:
    if args.tiny:
        args.model = "tiny"
    cfg = MODELS[args.model]
    dev = torch.device(args.device)
    # Stream ordering needs CUDA streams: the host backend saves and restores as before.
    if args.save == "auto":
        args.save = "sync" if dev.type == "cpu" else "stream"
    if args.restore == "auto":
        args.restore = "whole" if dev.type == "cpu" else "layerwise"
    if dev.type == "cpu" and (args.save == "stream" or args.restore == "layerwise"):
        sys.exit("paged_engine: --save stream and --restore layerwise need a CUDA device")
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
    n, bs = args.prompt_len, cfg.block_size
    if n < 2 * bs:
        sys.exit("paged_engine: --prompt-len must hold at least two blocks")
    needed = (n + args.gen + bs - 1) // bs
    if needed > args.blocks:
        sys.exit(f"paged_engine: --blocks {args.blocks} cannot hold {needed} blocks")
    model = Model(cfg, args.seed, dev)
    tokens = prompt_tokens(cfg, args.seed, n)
    keys = kvstash.keys.block_keys(tokens, bs, root=f"paged-engine/{args.seed}")
    full = len(keys)  # full prompt blocks
    cache = PagedCache(cfg, args.blocks, args.layout, dev, args.alloc)
    # Cold and warm place the request in different (shuffled) blocks.
    table = block_table(args.blocks, needed, seed=1 if args.phase == "cold" else 2)
    table_list = table.tolist()
    table = table.to(dev)
    if dev.type == "cuda":
        warm_up(model, cfg, args, dev)
    client = connect(args, cfg, cache, args.phase)
    try:
        if args.phase == "cold":
            return cold(args, cfg, model, cache, table, table_list, tokens, keys, client)
        return warm(args, cfg, model, cache, table, table_list, tokens, keys, full, client)
    finally:
        client.close()


def warm_up(model: Model, cfg: Config, args: argparse.Namespace, dev: torch.device) -> None:
    """A prefill chunk, a one-block chunk and a decode step on a scratch
    cache, untimed: CUDA's lazily loaded kernels and cuBLAS are ready, as in
    a serving engine that has run before, so the times to first token
    compare prefill with restore, not process start-up."""
    bs, n = cfg.block_size, args.prompt_len
    chunk = min(args.chunk, n)
    blocks = (n + bs) // bs + 1
    scratch = PagedCache(cfg, blocks, args.layout, dev, "torch")
    table = torch.arange(blocks, device=dev)
    tokens = torch.zeros(chunk + 1, dtype=torch.long, device=dev)
    # The shapes the timed runs use: a cold prefill chunk, the warm
    # prefill's last block over the whole prompt (what the scratch cache
    # holds there does not matter: only its kernels and their choice by
    # cuBLAS, which depends on the context length) and a decode step.
    model.forward(tokens[:chunk], 0, scratch, table)
    last = (n - 1) // bs * bs
    model.forward(tokens[: n - last], last, scratch, table)
    model.forward(tokens[:1], n, scratch, table)
    sync(dev)
    del scratch
    torch.cuda.empty_cache()


def cold(args, cfg, model, cache, table, table_list, tokens, keys, client) -> int:
    saved = table_list[: len(keys)]
    save_op: kvstash.Operation | None = None
    t_save = 0.0

    def save_on_stream() -> kvstash.Operation:
        # The prefill's kernels are enqueued, not finished: the SAVE waits
        # for them on the GPU side, and the decode runs meanwhile.
        nonlocal save_op, t_save
        t_save = time.perf_counter()
        save_op = kt.save_on_stream(client, keys, saved)
        return save_op

    sync(model.device)
    t0 = time.perf_counter()
    out, tm = generate(model, cache, table, tokens, 0, args.gen, args.chunk, t0,
                       after_prefill=save_on_stream if args.save == "stream" else None)
    stored = None
    if args.save == "stream":
        assert save_op is not None
        stored = save_op.wait(timeout=120)
        # To the first sight of its completion between decode steps (an
        # upper bound by one step), not to the end of the decode.
        save_s = (tm.save_done_t or time.perf_counter()) - t_save
        client.flush().wait(timeout=120)
    elif args.save == "sync":
        sync(model.device)  # the blocks must be written before kvstashd copies them
        t1 = time.perf_counter()
        stored = client.save(keys, saved).wait(timeout=120)
        client.flush().wait(timeout=120)
        save_s = time.perf_counter() - t1
    else:
        save_s = 0.0
    decode_tps = (args.gen - 1) / tm.decode_s if tm.decode_s else 0.0
    bench = decode_bench(args, model, cache, table, client, out[0], saved) if args.decode_bench else {}
    report = {
        "config": asdict(cfg), "layout": args.layout, "seed": args.seed, "prompt_len": args.prompt_len,
        "tokens": out, "digests": cache.digests(saved) if stored else [], "ttft_s": tm.ttft_s,
        "save_s": save_s, "save": args.save, "decode_tps": decode_tps,
        "saved_blocks": len(saved) if stored else 0,
        "stored": stored.stored if stored else 0, "skipped": stored.skipped if stored else 0,
    }
    with open(args.json, "w") as f:
        json.dump(report, f)
    write_result(args, {"phase": "cold", "save": args.save, "ttft_s": tm.ttft_s, "decode_tps": decode_tps,
                        "decode_tokens": args.gen - 1, "step_s": tm.step_s, "save_s": save_s,
                        "save_done_at": tm.save_done_at, **bench,
                        "saved_blocks": report["saved_blocks"], "ok": True})
    mib = len(saved) * cache.block_bytes() / 2**20
    print(f"cold [{args.layout}]: TTFT {tm.ttft_s * 1e3:.1f} ms for {args.prompt_len} tokens; decode "
          f"{decode_tps:.1f} tokens/s ({args.gen - 1} tokens, save {args.save})")
    if stored:
        overlap = (f"; done after {tm.save_done_at} of {args.gen - 1} decode steps"
                   if args.save == "stream" and tm.save_done_at >= 0 else "")
        print(f"cold [{args.layout}]: saved {len(saved)} blocks ({mib:.1f} MiB; {stored.stored} stored, "
              f"{stored.skipped} skipped) in {save_s * 1e3:.1f} ms ({args.save}){overlap}")
    print(f"cold [{args.layout}]: tokens {out}")
    return 0


def warm(args, cfg, model, cache, table, table_list, tokens, keys, full, client) -> int:
    with open(args.json) as f:
        ref = json.load(f)
    if ref["config"] != asdict(cfg) or ref["layout"] != args.layout or ref["prompt_len"] != args.prompt_len:
        sys.exit("paged_engine: the cold run's --json is for another model, layout or prompt")
    sync(model.device)
    t0 = time.perf_counter()
    if args.fetch_from:
        # Decode on another node: what this kvstashd lacks comes from the
        # prefill node (its peer address as the handoff names it, or the
        # registry's holder), then answers like local hits.
        hint = None if args.fetch_from == "registry" else args.fetch_from
        q = client.query_fetch(keys, hint=hint, req_id=1).wait(timeout=60)
    else:
        q = client.query(keys, req_id=1).wait(timeout=60)
    query_s = time.perf_counter() - t0
    # The block holding the last prompt token is always recomputed (its
    # logits make the first new token); load everything before it.
    usable = min(q.hits, (args.prompt_len - 1) // cfg.block_size)
    load_s, copied, check_s = 0.0, 0, 0.0
    hook = None
    layerwise = args.restore == "layerwise" and usable > 0
    events: list[torch.cuda.Event] = []
    if layerwise:
        # Submitted, not waited for: the prefill's layer i waits on the GPU
        # for layer i only, while the later layers are still copying.
        ll = kt.load_layerwise(client, q.lease, table_list[:usable])
        events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]

        def hook(i: int) -> None:
            if i == 0:
                events[0].record()
            if i < cfg.layers:
                ll.wait_layer(i)
            if i == cfg.layers - 1:
                events[1].record()  # the last layer is in (and the layers before it computed)
            if i == cfg.layers:
                events[2].record()
    elif usable:
        t1 = time.perf_counter()
        op = client.load(q.lease, table_list[:usable])
        loaded = op.wait(timeout=120)
        load_s = time.perf_counter() - t1
        copied = op.completion.result0
        assert loaded == usable
    elif q.lease:
        client.release(q.lease).wait(timeout=60)
    got: list[str] = []
    if not layerwise:
        # The loaded bytes, checked as the model is about to read them (the
        # LOAD's completion must mean the copy is finished, not just
        # queued); the check's time is left out of the time to first token.
        t2 = time.perf_counter()
        got = cache.digests(table_list[:usable])
        check_s = time.perf_counter() - t2
    out, tm = generate(model, cache, table, tokens, usable * cfg.block_size, args.gen, args.chunk,
                       t0 + check_s, hook=hook)
    ttft = tm.ttft_s
    restore_note = ""
    last_in = tail = 0.0
    if layerwise:
        # The CQE is the authority: a LOAD that failed means recompute.
        loaded = ll.op.wait(timeout=120)
        copied = ll.op.completion.result0
        assert loaded == usable, f"layer-by-layer LOAD brought {loaded} of {usable} blocks"
        got = cache.digests(table_list[:usable])
        last_in = events[0].elapsed_time(events[1]) / 1e3
        tail = events[1].elapsed_time(events[2]) / 1e3
        load_s = last_in
        restore_note = (f"; layer by layer: last layer in {last_in * 1e3:.2f} ms after the first wait, "
                        f"then {tail * 1e3:.2f} ms of compute")
    else:
        restore_note = f"; prefill after the restore {(ttft - query_s - load_s) * 1e3:.2f} ms"

    ok = True
    if q.hits != ref["saved_blocks"] and not args.allow_miss:
        print(f"warm [{args.layout}]: MISMATCH: {q.hits} of {ref['saved_blocks']} saved blocks hit "
              "(pool too small, or another kvstashd?)")
        ok = False
    bad = [i for i, (a, b) in enumerate(zip(got, ref["digests"])) if a != b]
    if bad:
        print(f"warm [{args.layout}]: MISMATCH: {len(bad)} loaded blocks differ from the cold run's, "
              f"first block {bad[0]}")
        ok = False
    if out != ref["tokens"]:
        first = next(i for i, (a, b) in enumerate(zip(out, ref["tokens"])) if a != b)
        print(f"warm [{args.layout}]: MISMATCH: tokens differ from token {first}:\n  cold {ref['tokens']}\n"
              f"  warm {out}")
        ok = False
    gbps = copied / load_s / 1e9 if load_s else 0.0
    print(f"warm [{args.layout}]: TTFT {ttft * 1e3:.1f} ms (cold {ref['ttft_s'] * 1e3:.1f} ms, "
          f"{ref['ttft_s'] / ttft:.1f}x) restore {args.restore}; restored {usable} of {full} blocks, "
          f"{copied / 2**20:.1f} MiB in {load_s * 1e3:.2f} ms = {gbps:.2f} GB/s; "
          f"{'QUERY with fetch' if args.fetch_from else 'QUERY'} {query_s * 1e3:.2f} ms{restore_note}")
    if ok:
        print(f"warm [{args.layout}]: {usable} loaded blocks bit-identical to the cold run's, "
              f"{len(out)} tokens identical")
    write_result(args, {"phase": "warm", "restore": args.restore, "ttft_s": ttft, "query_s": query_s,
                        "load_s": load_s, "prefill_s": ttft - query_s - load_s if not layerwise else 0.0,
                        "last_layer_in_s": last_in, "compute_after_s": tail, "bytes": copied,
                        "blocks": usable, "cold_ttft_s": ref["ttft_s"], "ok": ok})
    return 0 if ok else 1


def write_result(args: argparse.Namespace, result: dict[str, object]) -> None:
    """--result: the run's figures as JSON, for bench_restore.py."""
    if args.result:
        result.update(prompt_len=args.prompt_len, layout=args.layout, model=args.model)
        with open(args.result, "w") as f:
            json.dump(result, f)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", choices=("cold", "warm"), required=True)
    p.add_argument("--socket", default=None, help="kvstashd's socket (default $KVSTASH_SOCKET or /run/kvstash)")
    p.add_argument("--layout", choices=("page-first", "layer-first"), default="page-first")
    p.add_argument("--json", required=True, help="cold: where to write tokens and digests; warm: read them")
    p.add_argument("--device", default="cuda:0", help="cuda:N, or cpu (host backend)")
    p.add_argument("--alloc", choices=("arena", "torch"), default="arena",
                   help="KV cache from kvstash.torch.empty_kv (default) or the torch allocator")
    p.add_argument("--seed", type=int, default=1234, help="model weights and prompt")
    p.add_argument("--prompt-len", type=int, default=4096)
    p.add_argument("--gen", type=int, default=32, help="tokens to generate")
    p.add_argument("--blocks", type=int, default=512, help="KV cache blocks")
    p.add_argument("--chunk", type=int, default=512, help="prefill chunk (tokens)")
    p.add_argument("--tiny", action="store_true", help="a small fp32 model (for CPU tests): --model tiny")
    p.add_argument("--model", choices=sorted(MODELS), default="small",
                   help="small (8 layers, the default), 8b (Llama-3-8B's shapes), tiny")
    p.add_argument("--save", choices=("auto", "stream", "sync", "none"), default="auto",
                   help="cold: SAVE ordered after the prefill on its CUDA stream while the decode "
                        "runs (stream; auto on CUDA), after a synchronize once generation ended "
                        "(sync; auto on CPU), or not at all (none: a decode baseline)")
    p.add_argument("--restore", choices=("auto", "layerwise", "whole"), default="auto",
                   help="warm: each layer of the prefill waits on the GPU for its layer of the "
                        "LOAD (layerwise; auto on CUDA), or the whole LOAD first (whole)")
    # exact by default: on the H200 torch's fused attention with a mask gave
    # different tokens in different processes from the same inputs.
    p.add_argument("--attention", choices=("exact", "sdpa"), default="exact",
                   help="plain fp32 matrix products (deterministic), or torch's fused attention")
    p.add_argument("--fetch-from", default=None, metavar="ADDR:PORT",
                   help="warm: QUERY with fetch from that kvstashd's peer service (or 'registry')")
    p.add_argument("--decode-bench", type=int, default=0, metavar="ROUNDS",
                   help="cold: then decode tokens/s with and without SAVEs after every step, "
                        "ROUNDS segments of each, alternating")
    p.add_argument("--decode-saves", type=int, default=16, metavar="BLOCKS",
                   help="blocks each decode step of --decode-bench saves (default 16)")
    p.add_argument("--result", default=None, help="write this run's figures as JSON there")
    p.add_argument("--allow-miss", action="store_true",
                   help="warm: fewer hits than the cold run saved is no error (its node is gone: "
                        "recompute); the tokens must still match")
    args = p.parse_args(argv)
    global ATTENTION
    ATTENTION = args.attention
    # Bit-identical tokens across processes need deterministic kernels:
    # cuBLAS's workspace pinned (before its first use), and torch told.
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True, warn_only=True)
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
