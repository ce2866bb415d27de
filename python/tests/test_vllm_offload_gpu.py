# SPDX-License-Identifier: MIT
"""KvstashOffloadingSpec through vLLM's own kv_offload modules, with CUDA tensors.

Conformance with vLLM's real interfaces, not with stand-ins: the test
imports vllm/v1/kv_offload/{base,factory}.py and worker/worker.py from a
copy of vLLM's source (they need only torch and numpy), builds the spec
with vLLM's OffloadingSpecFactory from spec_name / spec_module_path,
registers vLLM's canonical KV tensors (CanonicalKVCaches, made from CUDA
tensors in vLLM's layouts as OffloadingConnectorWorker makes them) through
vLLM's OffloadingWorker, and runs store -> lookup -> load into shuffled
blocks, byte-identical.

The source comes from $KVSTASH_VLLM_SRC, default <top>/.vllm-src (a folder
git ignores, never committed: python/tests/run_vllm_device.sh documents
how it is made and carried); the file COMMIT there names the vLLM commit,
which the test prints.  Skipped without that source, without torch with
CUDA or numpy, and without a kvstashd with its CUDA backend.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sys
import time
import types
from pathlib import Path

import pytest

import kvstash
import kvstash.vllm
import vllm_stubs as vs

TOP = Path(__file__).resolve().parents[2]
SRC = Path(os.environ.get("KVSTASH_VLLM_SRC", TOP / ".vllm-src"))

torch = pytest.importorskip("torch")
pytest.importorskip("numpy")   # vllm/v1/kv_offload/base.py needs it
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)
if not (SRC / "vllm" / "v1" / "kv_offload" / "base.py").exists():
    pytest.skip(f"no vLLM source in {SRC} (see python/tests/run_vllm_device.sh)", allow_module_level=True)

NB, L, H, BS, D = 64, 4, 2, 16, 64           # blocks, layers, kv heads, block size, head dim (bf16)
PAGE = 2 * BS * H * D * 2                     # one layer's K and V of one block, bytes


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


@contextlib.contextmanager
def real_kv_offload():
    """vLLM's kv_offload modules from SRC, with stand-ins only for what they import outside it:
    vllm.logger.init_logger (vLLM's logging setup) and, for the spec's worker side,
    vllm.distributed.parallel_state.get_tensor_model_parallel_rank."""
    saved = {k: v for k, v in sys.modules.items()
             if k == "vllm" or k.startswith("vllm.") or k == "kvstash.vllm.offload"}
    for k in saved:
        del sys.modules[k]
    sys.path.insert(0, str(SRC))
    sys.modules["vllm.logger"] = types.SimpleNamespace(init_logger=logging.getLogger)
    ps = types.ModuleType("vllm.distributed.parallel_state")
    ps.get_tensor_model_parallel_rank = lambda: 0
    sys.modules["vllm.distributed"] = types.ModuleType("vllm.distributed")
    sys.modules["vllm.distributed"].__path__ = []
    sys.modules["vllm.distributed.parallel_state"] = ps
    try:
        import vllm.v1.kv_offload.base as base
        import vllm.v1.kv_offload.factory as factory
        import vllm.v1.kv_offload.worker.worker as worker

        assert Path(base.__file__).resolve().is_relative_to(SRC.resolve()), base.__file__
        yield base, factory, worker
    finally:
        sys.path.remove(str(SRC))
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.") or k == "kvstash.vllm.offload"]:
            del sys.modules[k]
        sys.modules.update(saved)
        kvstash.vllm.__dict__.pop("offload", None)


def canonical_caches(base, layout, dev):
    """KV caches in vLLM's layout and their CanonicalKVCaches, as OffloadingConnectorWorker
    builds them: FlashAttention per layer (2, num_blocks, ...) unbound into K and V
    (num_blocks, half page) byte views; cross-layer (num_blocks, layers, 2, ...) as one
    (num_blocks, layers * page) view."""
    if layout == "per_layer":
        kv = [torch.zeros((2, NB, BS, H, D), dtype=torch.bfloat16, device=dev) for _ in range(L)]
        tensors = []
        for t in kv:
            raw = torch.tensor([], dtype=torch.int8, device=dev).set_(t.untyped_storage()).view(2, NB, PAGE // 2)
            tensors += [base.CanonicalKVCacheTensor(tensor=x, page_size_bytes=PAGE // 2) for x in raw.unbind(0)]
        refs = [base.CanonicalKVCacheRef(tensor_idx=i, page_size_bytes=PAGE // 2) for i in range(len(tensors))]
        blocks = lambda ids: torch.stack([t[:, ids] for t in kv])          # noqa: E731
    else:
        kv = torch.zeros((NB, L, 2, BS, H, D), dtype=torch.bfloat16, device=dev)
        raw = torch.tensor([], dtype=torch.int8, device=dev).set_(kv.untyped_storage()).view(NB, L * PAGE)
        tensors = [base.CanonicalKVCacheTensor(tensor=raw, page_size_bytes=L * PAGE)]
        refs = [base.CanonicalKVCacheRef(tensor_idx=0, page_size_bytes=L * PAGE)]
        blocks = lambda ids: kv[ids]                                        # noqa: E731
    return kv, base.CanonicalKVCaches(tensors=tensors, group_data_refs=[refs]), blocks


def fill(kv, layout, ids, seed):
    g = torch.Generator(device=kv[0].device if isinstance(kv, list) else kv.device).manual_seed(seed)
    # Behind a long kernel on the current stream: a SAVE that did not wait
    # for the stream would copy the zeros that are there before.
    torch.cuda._sleep(200_000_000)
    for b in ids:
        if layout == "per_layer":
            for t in kv:
                t[:, b].copy_(torch.randn(t[:, b].shape, generator=g, device=t.device))
        else:
            kv[b].copy_(torch.randn(kv[b].shape, generator=g, device=kv.device))


def wait_job(worker_obj, job, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for r in worker_obj.get_finished():
            if r.job_id == job:
                return r
        time.sleep(0.001)
    raise AssertionError(f"transfer job {job} not finished after {timeout} s")


@pytest.mark.parametrize("layout", ["per_layer", "cross_layer"])
def test_offloading_spec_through_vllm_interfaces(gpu_daemon, layout):
    commit = (SRC / "COMMIT").read_text().split()[0] if (SRC / "COMMIT").exists() else "unknown"
    print(f"vLLM source: {SRC} at commit {commit}")
    with real_kv_offload() as (base, factory, worker_mod):
        cfg = vs.vllm_config(kv_connector="OffloadingConnector", engine_id=f"gpu-{layout}",
                             extra={"spec_name": "KvstashOffloadingSpec", "spec_module_path": "kvstash.vllm.offload",
                                    "kvstash.socket": gpu_daemon.socket})
        kvc = vs.kv_cache_config(num_blocks=NB, layer_names=[f"model.layers.{i}.attn" for i in range(L)],
                                 block_size=BS, heads=H, head_size=D)
        # The scheduler and the worker each build the spec, as in vLLM.
        sched_spec = factory.OffloadingSpecFactory.create_spec(cfg, kvc)
        worker_spec = factory.OffloadingSpecFactory.create_spec(cfg, kvc)
        assert isinstance(sched_spec, base.OffloadingSpec)
        manager = sched_spec.get_manager()
        assert isinstance(manager, base.OffloadingManager)

        dev = torch.device("cuda", 0)
        kv, caches, blocks = canonical_caches(base, layout, dev)
        w = worker_mod.OffloadingWorker()
        for src_cls, dst_cls, handler in worker_spec.get_handlers(caches):
            assert isinstance(handler, worker_mod.OffloadingHandler)
            w.register_handler(src_cls, dst_cls, handler)
        assert set(w.transfer_type_to_handler) == {("GPU", "KVSTASH"), ("KVSTASH", "GPU")}

        n = 8
        src_ids = list(range(1, n + 1))
        fill(kv, layout, src_ids, seed=11)
        hashes = kvstash.keys.block_hashes(list(range(n * BS)), BS, root="0", hash="xxh3_128")
        keys = [base.make_offload_key(h, 0) for h in hashes]
        ctx = base.ReqContext(req_id="r-store")

        out = manager.prepare_store(keys, ctx)
        assert out is not None and list(out.keys_to_store) == keys
        gpu_src = base.GPULoadStoreSpec(src_ids, group_sizes=[n], block_indices=[0])
        assert w.transfer_async(1, (gpu_src, out.store_spec))
        r = wait_job(w, 1)
        assert isinstance(r, worker_mod.TransferResult) and r.success
        manager.complete_store(keys, ctx)

        # Lookups as OffloadingConnectorScheduler makes them: block by block
        # until a miss; None asks again at the next step.
        ctx = base.ReqContext(req_id="r-load")
        assert [manager.lookup(k, ctx) for k in keys] == [None] * n
        list(manager.take_events())
        assert [manager.lookup(k, ctx) for k in keys] == [True] * n
        load_spec = manager.prepare_load(keys, ctx)
        dst_ids = random.Random(3).sample(range(n + 1, NB), n)
        gpu_dst = base.GPULoadStoreSpec(dst_ids, group_sizes=[n], block_indices=[0])
        assert w.transfer_async(2, (load_spec, gpu_dst))
        r = wait_job(w, 2)
        assert r.success and r.transfer_size == n * L * PAGE
        manager.complete_load(keys, ctx)
        list(manager.take_events())

        torch.cuda.synchronize()
        got, want = blocks(dst_ids), blocks(src_ids)
        assert bool(want.abs().sum() > 0), "the source blocks were never filled"
        assert torch.equal(got.view(torch.int16), want.view(torch.int16)), "loaded blocks differ from the saved ones"
        # RELEASEs are submitted, not waited for: kvstashd takes them a moment later.
        deadline = time.monotonic() + 10
        while kvstash.stats(gpu_daemon.socket)["global"]["leases_live"] and time.monotonic() < deadline:
            time.sleep(0.005)
        assert kvstash.stats(gpu_daemon.socket)["global"]["leases_live"] == 0
        w.shutdown()
        manager.shutdown()
