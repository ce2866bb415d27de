# SPDX-License-Identifier: MIT
"""KvstashConnector with CUDA KV caches in vLLM's layouts, driven in vLLM's call order.

test_vllm_connector.py on a GPU: the same MiniEngine (vLLM commit
9aaf83ef502fc37bc647f6e474314d48ba36cd1c's call order, vllm_stubs for
vLLM's classes), but each worker's cache is CUDA memory from PyTorch's
allocator, viewed as vLLM views it (FlashAttention per layer, or one
cross-layer tensor), registered by device pointer, and the "model" writes
its blocks behind a long kernel on the current stream, so a SAVE submitted
before the stream reached it would store stale bytes.  Skipped without
torch with CUDA and a kvstashd with its CUDA backend.
"""

from __future__ import annotations

import sys
import time

import pytest

import kvstash
import vllm_engine as ve
import vllm_stubs as vs

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)

PROMPT = list(range(3000, 3056))


@pytest.fixture(autouse=True)
def _seed(monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")


@pytest.fixture
def gpu_daemon(daemon_factory):
    if not kvstash.cuda_available():
        pytest.skip("libkvstash has no usable CUDA")
    d = daemon_factory("[pool]\nsize = 64M\nextent_size = 1M\n")
    if not kvstash.status(d.socket)["daemon"]["cuda_available"]:
        pytest.skip("kvstashd has no CUDA backend")
    return d


class CudaWorkerRank(ve.WorkerRank):
    """vllm_engine.WorkerRank over a CUDA byte buffer instead of host memory."""

    def __init__(self, p):  # noqa: super().__init__ is replaced, not extended
        from kvstash.vllm.connector import KvstashConnector

        base = sys.modules["vllm.distributed.kv_transfer.kv_connector.v1.base"]
        vs.set_tp_rank(p["rank"])
        self.p, self.rank, self.layout, nb = p, p["rank"], p["layout"], p["num_blocks"]
        self.nb = nb
        cfg = vs.vllm_config(tp=p["tp"], engine_id=p["engine_id"], extra=ve.extra_config(p["socket"]))
        kvc = vs.kv_cache_config(num_blocks=nb, layer_names=ve.NAMES, block_size=ve.BS, heads=ve.HEADS,
                                 head_size=ve.HEAD)
        self.buf = torch.zeros(ve.LAYERS * 2 * nb * ve.SEG, dtype=torch.uint8, device="cuda")
        self.conn = KvstashConnector(cfg, base.KVConnectorRole.WORKER, kvc)
        elems = self.buf.view(torch.bfloat16)
        if self.layout == "cross":
            t = elems.view(nb, ve.LAYERS, 2, ve.BS, ve.HEADS, ve.HEAD)
            self.conn.register_cross_layers_kv_cache(t, vs.FlashAttentionBackend)
        else:
            per = elems.numel() // ve.LAYERS
            self.conn.register_kv_caches({n: elems[i * per:(i + 1) * per].view(2, nb, ve.BS, ve.HEADS, ve.HEAD)
                                          for i, n in enumerate(ve.NAMES)})
        self._slept, self._keep = False, []

    def _write(self, block, layer, kv, data):
        if not self._slept:
            torch.cuda._sleep(100_000_000)   # the step's writes land late on the stream
            self._slept = True
        o = ve.seg_offset(self.layout, self.nb, layer, kv, block)
        # Pinned and non-blocking: nothing here waits for the stream, so the
        # writes are still queued behind the sleep when wait_for_save runs.
        src = torch.frombuffer(bytearray(data), dtype=torch.uint8).pin_memory()
        self._keep.append(src)
        self.buf[o:o + ve.SEG].copy_(src, non_blocking=True)

    def read(self, block):
        torch.cuda.synchronize()
        host = self.buf.cpu()
        out = []
        for layer in range(ve.LAYERS):
            for kv in range(2):
                o = ve.seg_offset(self.layout, self.nb, layer, kv, block)
                out.append(bytes(host[o:o + ve.SEG].tolist()))
        return out

    def fill(self, blocks, byte):
        for b in blocks:
            for layer in range(ve.LAYERS):
                for kv in range(2):
                    o = ve.seg_offset(self.layout, self.nb, layer, kv, b)
                    self.buf[o:o + ve.SEG].fill_(byte)

    def step(self, *args):
        self._slept, self._keep = False, []
        out = super().step(*args)
        return out

    def close(self):
        self.conn.shutdown()


class CudaWorker(ve.LocalWorker):
    def __init__(self, p):
        self.w = CudaWorkerRank(p)
        self.rank = self.w.rank
        self._out = None


@pytest.mark.parametrize("save_layout,load_layout", [("flash", "cross"), ("cross", "flash")])
def test_cuda_caches_save_and_load_byte_exact(gpu_daemon, save_layout, load_layout):
    with vs.stubbed():
        engines = []
        try:
            for eid, layout, seed in (("gpu-a", save_layout, 1), ("gpu-b", load_layout, 7)):
                sched = ve.scheduler(gpu_daemon.socket, engine_id=eid)
                w = CudaWorker(ve.worker_params(layout=layout, socket=gpu_daemon.socket, engine_id=eid))
                engines.append(ve.MiniEngine(sched, [w], seed=seed))
            a, b = engines
            a.add("a", PROMPT)
            a.run(timeout=60)
            b.workers[0].fill(list(range(1, 32)), 0xEE)
            b.add("b", PROMPT)
            deadline = time.monotonic() + 60
            while "b" not in b.recv_done and time.monotonic() < deadline:
                b.step()
            assert b.hits == {"b": 48}
            req = b.reqs["b"]
            for i, blk in enumerate(b.blocks["b"][:3]):
                assert b.workers[0].read(blk) == ve.expected(bytes(req.block_hashes[i][:16]), 0), f"block {i}"
            b.run(timeout=60)
            assert not b.invalid
            # RELEASEs are submitted, not waited for: kvstashd takes them a moment later.
            deadline = time.monotonic() + 10
            while kvstash.stats(gpu_daemon.socket)["global"]["leases_live"] and time.monotonic() < deadline:
                time.sleep(0.005)
            assert kvstash.stats(gpu_daemon.socket)["global"]["leases_live"] == 0
        finally:
            for e in engines:
                e.close()
