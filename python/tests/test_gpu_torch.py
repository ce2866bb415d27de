# SPDX-License-Identifier: MIT
"""kvstash.torch on a GPU: shareable allocation, registration, round trips.

Skipped unless torch with CUDA, a libkvstash built with CUDA and a
kvstashd with its CUDA backend are all here.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from uuid import UUID

import pytest

import kvstash
from conftest import make_keys
from gpu_common import gpu_daemon, torch  # noqa: F401 (gpu_daemon: a fixture)

import kvstash.torch as kt  # noqa: E402

NB, L, H, BS, D = 64, 4, 2, 16, 64  # blocks, layers, kv heads, block size, head dim


def _client(d, name):
    return kvstash.Client(d.socket, instance=name, namespace=f"py-gpu/{name}", device=0)


def _fill(t, block_dim, blocks, seed):
    """Distinct bytes per block: block b of t along block_dim gets values from seed + b."""
    g = torch.Generator(device=t.device).manual_seed(seed)
    for b in blocks:
        view = t.select(block_dim, b)
        view.copy_(torch.randn(view.shape, generator=g, device=t.device, dtype=torch.float32).to(t.dtype))


def _via_params():
    try:
        import numpy  # noqa: F401

        return ["cai", "dlpack"]
    except ImportError:
        return ["dlpack"]


@pytest.mark.parametrize("kind", ["vmm", "ipc"])
@pytest.mark.parametrize("via", _via_params())
def test_empty_kv_wraps_the_arena_in_place(kind, via):
    if not kvstash.cuda_available():
        pytest.skip("libkvstash has no usable CUDA")
    t = kt.empty_kv((4, 8, 16), torch.bfloat16, "cuda:0", kind=kind, _via=via)
    assert t.shape == (4, 8, 16) and t.dtype == torch.bfloat16 and t.device == torch.device("cuda", 0)
    assert t.is_contiguous()
    t.fill_(1.5)
    assert float(t.float().sum()) == 1.5 * 4 * 8 * 16
    del t
    torch.cuda.synchronize()  # the arena is freed with its last tensor: no fault


def test_tensor_layers_geometry():
    es = 2
    fused = torch.empty((NB, L, 2, H, BS, D), dtype=torch.bfloat16, device="cuda")
    layers = kt.tensor_layers(fused, "page_first")
    per_layer = 2 * H * BS * D * es
    assert [x.name for x in layers] == [f"layers.{i}" for i in range(L)]
    for i, x in enumerate(layers):
        assert x.base == fused.data_ptr() + i * per_layer
        assert (x.num_blocks, x.segments, x.segment_bytes, x.block_stride, x.kv_stride) == (
            NB, 1, per_layer, L * per_layer, 0)
    split = {f"l{i}": torch.empty((2, NB, BS, H, D), dtype=torch.bfloat16, device="cuda") for i in range(L)}
    layers = kt.tensor_layers(split, "layer_first")
    seg = BS * H * D * es
    for (name, t), x in zip(split.items(), layers):
        assert x.name == name and x.base == t.data_ptr()
        assert (x.num_blocks, x.segments, x.segment_bytes, x.block_stride, x.kv_stride) == (
            NB, 2, seg, seg, NB * seg)
    with pytest.raises(kvstash.InvalidArgument):
        kt.tensor_layers(fused.transpose(2, 4), "page_first")  # a block is not contiguous
    with pytest.raises(kvstash.InvalidArgument):
        kt.tensor_layers([fused[:, 0], fused[:, 1].cpu()], "page_first")  # two devices


@pytest.mark.parametrize("kind", ["vmm", "ipc"])
def test_page_first_fused_round_trip(gpu_daemon, kind):
    kv = kt.empty_kv((NB, L, 2, H, BS, D), torch.bfloat16, "cuda:0", kind=kind)
    kv.fill_(-7.0)
    _fill(kv, 0, range(8), seed=1)
    torch.cuda.synchronize()
    with _client(gpu_daemon, f"pf-{kind}") as c:
        kt.register_tensors(c, kv, layout="page_first")
        keys = make_keys(8)
        assert c.save(keys, range(8)).wait(timeout=30) == (8, 0)
        c.flush().wait(timeout=30)
        q = c.query(keys).wait(timeout=30)
        assert q.hits == 8
        dst = [40 + 2 * i for i in range(8)]  # scattered targets
        assert c.load(q, dst).wait(timeout=30) == 8
        for i, b in enumerate(dst):
            assert torch.equal(kv[b], kv[i]), f"block {b}"
        untouched = [b for b in range(8, NB) if b not in dst]
        assert bool((kv[untouched] == -7.0).all())


def test_layer_first_split_kv_round_trip_from_the_torch_allocator(gpu_daemon):
    if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        pytest.skip("expandable segments cannot be shared")
    kv = {f"model.layers.{i}.attn": torch.full((2, NB, BS, H, D), -3.0, dtype=torch.float16, device="cuda")
          for i in range(L)}
    for i, t in enumerate(kv.values()):
        _fill(t, 1, range(4), seed=10 + i)
    torch.cuda.synchronize()
    with _client(gpu_daemon, "lf") as c:
        kt.register_tensors(c, kv, layout="layer_first")
        keys = make_keys(4, salt=2)
        c.save(keys, range(4)).wait(timeout=30)
        c.flush().wait(timeout=30)
        q = c.query(keys).wait(timeout=30)
        assert c.load(q, [60, 61, 62, 63], layers=range(1, L)).wait(timeout=30) == 4
        for li, t in enumerate(kv.values()):
            for i in range(4):
                if li == 0:  # outside the layer range: untouched
                    assert bool((t[:, 60 + i] == -3.0).all())
                else:
                    assert torch.equal(t[:, 60 + i], t[:, i]), f"layer {li} block {60 + i}"


def test_save_on_stream_and_load_layerwise(gpu_daemon):
    """kvstash.torch's stream ordering: a SAVE of what a stream is still
    writing, with no synchronize; a layer-by-layer LOAD whose per-layer
    checks run on the GPU right after each layer's wait."""
    if "expandable_segments:True" in os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        pytest.skip("expandable segments cannot be shared")
    kv = [torch.full((2, NB, BS, H, D), -3.0, dtype=torch.float16, device="cuda") for _ in range(L)]
    torch.cuda.synchronize()
    s = torch.cuda.Stream()
    with kvstash.Client(gpu_daemon.socket, instance="lw", namespace="py-gpu/lw", device=0, fences=True) as c:
        kt.register_tensors(c, kv, layout="layer_first")
        keys = make_keys(4, salt=3)
        with torch.cuda.stream(s):
            # Long work first, then the writes: a copy made when the SAVE
            # arrived would store -3.0.
            a = torch.randn(4096, 4096, device="cuda")
            for _ in range(20):
                a = a @ a / 64.0
            for li, t in enumerate(kv):
                t[:, :4] = float(li + 1)
            op = kt.save_on_stream(c, keys, range(4))
        assert op.wait(timeout=30).stored == 4
        c.flush().wait(timeout=30)
        torch.cuda.synchronize()
        q = c.query(keys).wait(timeout=30)
        ll = kt.load_layerwise(c, q, [60, 61, 62, 63])
        oks = []
        with torch.cuda.stream(s):
            for li, t in enumerate(kv):
                ll.wait_layer(li)
                oks.append((t[:, 60:64] == float(li + 1)).all())
        assert ll.op.wait(timeout=30) == 4
        torch.cuda.synchronize()
        assert [bool(x) for x in oks] == [True] * L
        assert ll.status() == (0, 4)


def test_expandable_segments_are_refused_with_advice(gpu_daemon):
    """A fresh process (the allocator setting is read at CUDA init)."""
    script = textwrap.dedent(f"""
        import sys, torch, kvstash, kvstash.torch as kt
        # 64 MiB: more than one of the segment's physical pieces.
        kv = torch.empty((64, 2, 1 << 18), dtype=torch.bfloat16, device="cuda")
        with kvstash.Client({gpu_daemon.socket!r}, instance="exp", namespace="py-gpu/exp", device=0) as c:
            try:
                kt.register_tensors(c, kv)
            except kvstash.KvstashError as e:
                ok = "expandable_segments:False" in str(e) and "empty_kv" in str(e)
                print("ADVICE-OK" if ok else f"NO ADVICE: {{e}}")
                sys.exit(0)
        print("REGISTERED")
    """)
    env = dict(os.environ, PYTORCH_CUDA_ALLOC_CONF="expandable_segments:True",
               PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(kvstash.__file__)),
                                           os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    if "REGISTERED" in out.stdout:
        pytest.skip("this torch's expandable segments are shareable")
    assert "ADVICE-OK" in out.stdout, out.stdout + out.stderr


def test_device_uuid_names_the_gpu():
    if not kvstash.cuda_available():
        pytest.skip("libkvstash has no usable CUDA")
    uuid = kt.device_uuid(0)
    assert len(uuid) == 16 and uuid != bytes(16)
    assert str(UUID(bytes=uuid)) in str(torch.cuda.get_device_properties(0).uuid)
