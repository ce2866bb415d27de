# SPDX-License-Identifier: MIT
"""kvstash.torch without a GPU: CPU tensors in HostMemory on the host
backend, and the reference engine's whole cold/warm protocol on a tiny
model.  Skipped without torch."""

from __future__ import annotations

import struct
import subprocess
import sys
from pathlib import Path

import pytest

import kvstash
from conftest import make_keys

torch = pytest.importorskip("torch")
import kvstash.torch as kt  # noqa: E402

ENGINE = Path(__file__).resolve().parents[1] / "examples" / "paged_engine.py"
NB, L, H, BS, D = 32, 3, 2, 16, 8


def test_importing_kvstash_torch_does_not_need_torch():
    code = "import sys; sys.modules['torch'] = None; import kvstash.torch; print('ok')"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(kvstash.__file__).parents[1])
    assert out.stdout.strip() == "ok", out.stderr


def test_host_tensor_views_the_memory():
    mem = kvstash.HostMemory(4 * 6 * 4)
    t = kt.host_tensor(mem, (4, 6), torch.float32)
    t.fill_(2.5)
    assert mem.buffer[:8] == struct.pack("<2f", 2.5, 2.5)
    with pytest.raises(BufferError):
        mem.close()  # the tensor still views it
    del t
    mem.close()
    with pytest.raises(kvstash.InvalidArgument):
        kt.host_tensor(kvstash.HostMemory(16), (5,), torch.float32)


@pytest.mark.parametrize("layout", ["page_first", "layer_first"])
def test_cpu_tensors_round_trip_on_the_host_backend(daemon, layout):
    if layout == "page_first":
        shape = (NB, L, 2, H, BS, D)
        block_dim, layer = 0, (lambda kv, i: kv[:, i])
    else:
        shape = (L, 2, NB, BS, H, D)
        block_dim, layer = 1, (lambda kv, i: kv[i])
    mem = kvstash.HostMemory(torch.Size(shape).numel() * 2)
    kv = kt.host_tensor(mem, shape, torch.bfloat16)
    kv.fill_(-1)
    g = torch.Generator().manual_seed(5)
    for i in range(L):
        for b in range(4):
            view = layer(kv, i).select(block_dim, b)
            view.copy_(torch.randn(view.shape, generator=g).to(torch.bfloat16))
    with kvstash.Client(daemon.socket, instance="cpu", namespace=f"py-cpu/{layout}") as c:
        layers = kt.register_tensors(c, kv, layout=layout, memory=mem)
        assert len(layers) == L and layers[0].segments == (1 if layout == "page_first" else 2)
        keys = make_keys(4)
        c.save(keys, range(4)).wait(timeout=10)
        c.flush().wait(timeout=10)
        assert c.load(c.query(keys).wait(timeout=10), [20, 21, 22, 23]).wait(timeout=10) == 4
    for i in range(L):
        lt = layer(kv, i)
        for b in range(4):
            assert torch.equal(lt.select(block_dim, 20 + b), lt.select(block_dim, b)), f"layer {i} block {b}"
        assert bool((lt.select(block_dim, 10) == -1).all())
    del kv, lt, view  # every tensor on the memory, then it may close
    mem.close()


def test_cpu_tensors_need_their_host_memory(daemon):
    kv = torch.zeros((NB, L, 64))
    with kvstash.Client(daemon.socket, instance="cpu", namespace="py-cpu/x") as c:
        with pytest.raises(kvstash.InvalidArgument, match="memory="):
            kt.register_tensors(c, kv)
        other = kvstash.HostMemory(4096)
        with pytest.raises(kvstash.InvalidArgument, match="not inside"):
            kt.register_tensors(c, kv, memory=other)
        other.close()


def test_tensor_layers_geometry():
    kv = torch.empty((NB, L, 2, H, BS, D), dtype=torch.float16)
    per_layer = 2 * H * BS * D * 2
    for i, x in enumerate(kt.tensor_layers(kv, "page_first")):
        assert x.base == kv.data_ptr() + i * per_layer
        assert (x.num_blocks, x.segments, x.segment_bytes, x.block_stride, x.kv_stride) == (
            NB, 1, per_layer, L * per_layer, 0)
    split = [torch.empty((2, NB, BS, H, D), dtype=torch.float16) for _ in range(L)]
    seg = BS * H * D * 2
    for t, x in zip(split, kt.tensor_layers(split, "layer_first", names=["a", "b", "c"])):
        assert (x.base, x.num_blocks, x.segments, x.segment_bytes, x.block_stride, x.kv_stride) == (
            t.data_ptr(), NB, 2, seg, seg, NB * seg)
    with pytest.raises(kvstash.InvalidArgument, match="contiguous"):
        kt.tensor_layers(kv.transpose(3, 4), "page_first")
    with pytest.raises(kvstash.InvalidArgument, match="names"):
        kt.tensor_layers(split, "layer_first", names=["a"])


@pytest.mark.parametrize("layout", ["page-first", "layer-first"])
def test_reference_engine_cold_then_warm(daemon, tmp_path, layout):
    """paged_engine.py on the CPU: a new process restores and must match."""
    common = [sys.executable, "-B", str(ENGINE), "--socket", daemon.socket, "--layout", layout,
              "--json", str(tmp_path / "cold.json"), "--device", "cpu", "--tiny",
              "--prompt-len", "200", "--gen", "6", "--blocks", "32", "--chunk", "64"]
    cold = subprocess.run(common + ["--phase", "cold"], capture_output=True, text=True, timeout=600)
    assert cold.returncode == 0, cold.stdout + cold.stderr
    warm = subprocess.run(common + ["--phase", "warm"], capture_output=True, text=True, timeout=600)
    assert warm.returncode == 0, warm.stdout + warm.stderr
    # 200 tokens: 12 full blocks saved; the one with the last token (block 12,
    # partial) is recomputed, so all 12 load.
    assert "restored 12 of 12 blocks" in warm.stdout
    assert "bit-identical" in warm.stdout and "6 tokens identical" in warm.stdout
