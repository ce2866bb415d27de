# SPDX-License-Identifier: MIT
"""KvstashOffloadingSpec under vLLM's OffloadingConnector call pattern, over a real kvstashd.

The contract is vllm/v1/kv_offload/{base,factory}.py, worker/worker.py and
the OffloadingConnector's scheduler and worker (kv_connector/v1/offloading/)
of vLLM commit 9aaf83ef502fc37bc647f6e474314d48ba36cd1c: the spec is found
by the factory from spec_name / spec_module_path; the scheduler looks keys
up one at a time until a miss (None: ask again next step), prepare_load /
prepare_store give the specs of transfer jobs that every worker runs through
OffloadingWorker, complete_* follow once all workers are done, take_events
runs once per step.  vllm_stubs stands in for those interfaces here (in
sys.modules only inside a test); test_vllm_offload_gpu.py runs the same
adapter through vLLM's own modules with CUDA tensors.
"""

from __future__ import annotations

import hashlib
import importlib
import random
import sys
import time

import pytest

import kvstash
import kvstash.vllm
import vllm_stubs as vs

NB, HALF, LAYERS, BS = 16, 512, 2, 16
EXTRA = {"spec_name": "KvstashOffloadingSpec", "spec_module_path": "kvstash.vllm.offload"}


@pytest.fixture(autouse=True)
def _seed(monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")


def create_spec(cfg, kvc):
    """What OffloadingSpecFactory.create_spec does with an unregistered spec_name."""
    extra = cfg.kv_transfer_config.kv_connector_extra_config
    cls = getattr(importlib.import_module(extra["spec_module_path"]), extra["spec_name"])
    base = sys.modules["vllm.v1.kv_offload.base"]
    assert issubclass(cls, base.OffloadingSpec)
    return cls(cfg, kvc)


def configs(socket, engine_id="e0", tp=1, **extra):
    cfg = vs.vllm_config(kv_connector="OffloadingConnector", engine_id=engine_id, tp=tp,
                         extra={**EXTRA, "kvstash.socket": socket, "kvstash.reconnect_s": 0.05, **extra})
    kvc = vs.kv_cache_config(num_blocks=NB, layer_names=[f"l{i}" for i in range(LAYERS)], block_size=BS,
                             heads=2, head_size=HALF // (BS * 2 * 2))
    return cfg, kvc


class Rank:
    """One worker's canonical KV caches, as OffloadingConnectorWorker builds them for
    FlashAttention: per layer the (2, num_blocks, half page) bytes unbound into K and V."""

    def __init__(self, spec, rank=0):
        self.rank = rank
        vs.set_tp_rank(rank)          # vLLM's get_tensor_model_parallel_rank() in this process
        self.mem = kvstash.HostMemory(LAYERS * 2 * NB * HALF)
        kvstash.vllm.announce_host_memory(self.mem)
        a = self.mem.address
        tensors = [vs.CanonicalKVCacheTensor(vs.FakeTensor(a + (2 * l + kv) * NB * HALF, (NB, HALF), elem=1), HALF)
                   for l in range(LAYERS) for kv in range(2)]
        caches = vs.CanonicalKVCaches(tensors, [[vs.CanonicalKVCacheRef(i, HALF) for i in range(len(tensors))]])
        self.worker = vs.OffloadingWorker()
        for src, dst, handler in spec.get_handlers(caches):
            self.worker.register_handler(src, dst, handler)

    def _seg(self, block, t):
        o = t * NB * HALF + block * HALF
        return o, o + HALF

    def write(self, block, key):
        for t in range(LAYERS * 2):
            a, b = self._seg(block, t)
            self.mem.buffer[a:b] = (hashlib.sha256(key + bytes([t, self.rank])).digest() * (HALF // 32))

    def read(self, block):
        return [bytes(self.mem.buffer[slice(*self._seg(block, t))]) for t in range(LAYERS * 2)]

    def expect(self, key):
        return [hashlib.sha256(key + bytes([t, self.rank])).digest() * (HALF // 32) for t in range(LAYERS * 2)]

    def wait(self, job, timeout=10.0):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for r in self.worker.get_finished():
                if r.job_id == job:
                    return r
            time.sleep(0.001)
        raise AssertionError(f"job {job} did not finish in {timeout} s")

    def close(self):
        self.worker.shutdown()
        kvstash.vllm.forget_host_memory(self.mem)


@pytest.fixture
def setup(daemon):
    with vs.stubbed():
        made = []

        def make(engine_id="e0", **extra):
            cfg, kvc = configs(daemon.socket, engine_id, **extra)
            sched_spec, worker_spec = create_spec(cfg, kvc), create_spec(cfg, kvc)   # two processes in vLLM
            manager = sched_spec.get_manager()
            rank = Rank(worker_spec)
            made.append((manager, rank))
            return manager, rank

        yield make
        for m, r in made:
            r.close()
            m.shutdown()


def keys_for(tokens_seed, n):
    hashes = kvstash.keys.block_hashes([tokens_seed + i for i in range(n * BS)], BS, root="0", hash="xxh3_128")
    return [vs.make_offload_key(h, 0) for h in hashes]


def store(manager, rank, keys, ids, job, ctx):
    out = manager.prepare_store(keys, ctx)
    assert out.keys_to_store == keys and out.evicted_keys == []
    src = vs.GPULoadStoreSpec(ids, group_sizes=[len(ids)], block_indices=[0])
    assert rank.worker.transfer_async(job, (src, out.store_spec))
    r = rank.wait(job)
    assert r.success and r.transfer_type == ("GPU", "KVSTASH")
    manager.complete_store(keys, ctx)


def prefix_lookup(manager, keys, ctx):
    """OffloadingConnectorScheduler._maximal_prefix_lookup."""
    hits, deferred = 0, False
    for k in keys:
        r = manager.lookup(k, ctx)
        if r is None:
            deferred, r = True, True
        if not r:
            break
        hits += 1
    return None if deferred else hits


def live(daemon):
    return kvstash.stats(daemon.socket)["global"]["leases_live"]


def leases_become(daemon, want, timeout=10.0):
    """Does the live-lease count reach @want within @timeout?  RELEASEs
    are submitted, not waited for: kvstashd takes them a moment later."""
    deadline = time.monotonic() + timeout
    while live(daemon) != want:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def test_store_lookup_load_into_shuffled_blocks(setup, daemon):
    a_mgr, a = setup("e0")
    keys = keys_for(100, 4)
    for i, k in enumerate(keys):
        a.write(1 + i, vs.get_offload_block_hash(k))
    ctx = vs.ReqContext("r0")
    store(a_mgr, a, keys, [1, 2, 3, 4], job=0, ctx=ctx)

    b_mgr, b = setup("e1")            # another engine, same namespace
    ctx = vs.ReqContext("r1")
    assert prefix_lookup(b_mgr, keys + keys_for(900, 1), ctx) is None   # first step: recorded, retry
    list(b_mgr.take_events())
    assert prefix_lookup(b_mgr, keys + keys_for(900, 1), ctx) == 4      # next step: one QUERY answers
    dst = random.Random(5).sample(range(5, NB), 4)
    spec = b_mgr.prepare_load(keys, ctx)
    assert leases_become(daemon, 1)
    assert b.worker.transfer_async(7, (spec, vs.GPULoadStoreSpec(dst, group_sizes=[4], block_indices=[0])))
    r = b.wait(7)
    assert r.success and r.transfer_size == 4 * LAYERS * 2 * HALF and r.transfer_type == ("KVSTASH", "GPU")
    for k, blk in zip(keys, dst):
        assert b.read(blk) == b.expect(vs.get_offload_block_hash(k))
    b_mgr.complete_load(keys, ctx)
    list(b_mgr.take_events())
    assert leases_become(daemon, 0)


def test_unclaimed_lookups_release_their_lease_each_step(setup, daemon):
    mgr, rank = setup()
    keys = keys_for(200, 2)
    for i, k in enumerate(keys):
        rank.write(1 + i, vs.get_offload_block_hash(k))
    store(mgr, rank, keys, [1, 2], 0, vs.ReqContext("s"))
    ctx = vs.ReqContext("r")
    prefix_lookup(mgr, keys, ctx)
    list(mgr.take_events())
    assert prefix_lookup(mgr, keys, ctx) == 2
    assert leases_become(daemon, 1)
    list(mgr.take_events())           # the request was not scheduled this step
    assert leases_become(daemon, 0)
    assert prefix_lookup(mgr, keys, ctx) == 2    # asked again: answered at once, no retry step
    list(mgr.take_events())
    assert leases_become(daemon, 0) and mgr.live_leases() == 0


def test_load_of_other_blocks_than_looked_up(setup, daemon):
    """vLLM's GPU prefix grew between lookup and allocation: it loads a suffix of the hits."""
    mgr, rank = setup()
    keys = keys_for(300, 3)
    for i, k in enumerate(keys):
        rank.write(1 + i, vs.get_offload_block_hash(k))
    store(mgr, rank, keys, [1, 2, 3], 0, vs.ReqContext("s"))
    ctx = vs.ReqContext("r")
    prefix_lookup(mgr, keys, ctx)
    list(mgr.take_events())
    assert prefix_lookup(mgr, keys, ctx) == 3
    spec = mgr.prepare_load(keys[1:], ctx)
    assert spec.count == 2
    assert rank.worker.transfer_async(1, (spec, vs.GPULoadStoreSpec([9, 8], group_sizes=[2], block_indices=[1])))
    assert rank.wait(1).success
    assert rank.read(9) == rank.expect(vs.get_offload_block_hash(keys[1]))
    assert rank.read(8) == rank.expect(vs.get_offload_block_hash(keys[2]))
    mgr.complete_load(keys[1:], ctx)
    list(mgr.take_events())
    assert leases_become(daemon, 0)


def test_kvstashd_killed_mid_load_fails_the_job_without_a_hang(setup, daemon):
    mgr, rank = setup()
    keys = keys_for(400, 2)
    store(mgr, rank, keys, [1, 2], 0, vs.ReqContext("s"))
    ctx = vs.ReqContext("r")
    prefix_lookup(mgr, keys, ctx)
    list(mgr.take_events())
    assert prefix_lookup(mgr, keys, ctx) == 2
    spec = mgr.prepare_load(keys, ctx)
    daemon.freeze()
    assert rank.worker.transfer_async(3, (spec, vs.GPULoadStoreSpec([5, 6], group_sizes=[2], block_indices=[0])))
    assert not rank.worker.get_finished()
    daemon.kill()
    t0 = time.monotonic()
    r = rank.wait(3)
    assert not r.success and time.monotonic() - t0 < 5
    # Stores without kvstashd are done at once (nothing reads the blocks), lookups miss.
    out = mgr.prepare_store(keys_for(500, 1), vs.ReqContext("t"))
    assert rank.worker.transfer_async(4, (vs.GPULoadStoreSpec([7], group_sizes=[1], block_indices=[0]),
                                          out.store_spec))
    assert rank.wait(4).success
    assert prefix_lookup(mgr, keys_for(500, 1), vs.ReqContext("u")) in (None, 0)


def test_tp2_ranks_load_their_own_shards(daemon):
    with vs.stubbed():
        cfg, kvc = configs(daemon.socket, "tp2", tp=2)
        mgr = create_spec(cfg, kvc).get_manager()
        ranks = [Rank(create_spec(cfg, kvc), r) for r in range(2)]   # one process per rank in vLLM
        try:
            keys = keys_for(600, 2)
            for r in ranks:
                for i, k in enumerate(keys):
                    r.write(1 + i, vs.get_offload_block_hash(k))
            out = mgr.prepare_store(keys, vs.ReqContext("s"))
            src = vs.GPULoadStoreSpec([1, 2], group_sizes=[2], block_indices=[0])
            for r in ranks:
                assert r.worker.transfer_async(0, (src, out.store_spec))
            assert all(r.wait(0).success for r in ranks)
            ctx = vs.ReqContext("r")
            prefix_lookup(mgr, keys, ctx)
            list(mgr.take_events())
            assert prefix_lookup(mgr, keys, ctx) == 2   # visible once both shards are saved
            spec = mgr.prepare_load(keys, ctx)
            dst = vs.GPULoadStoreSpec([11, 4], group_sizes=[2], block_indices=[0])
            for r in ranks:
                assert r.worker.transfer_async(1, (spec, dst))
            assert all(r.wait(1).success for r in ranks)
            for r in ranks:
                assert r.read(11) == r.expect(vs.get_offload_block_hash(keys[0]))
                assert r.read(4) == r.expect(vs.get_offload_block_hash(keys[1]))
            mgr.complete_load(keys, ctx)
            list(mgr.take_events())
            assert leases_become(daemon, 0)
        finally:
            for r in ranks:
                r.close()
            mgr.shutdown()


def test_refusals(daemon):
    with vs.stubbed():
        cfg, kvc = configs(daemon.socket, **{"block_size": 32})
        with pytest.raises(kvstash.vllm.ConfigError, match="block_size"):
            create_spec(cfg, kvc)
        cfg, kvc = configs(daemon.socket)
        kvc.kv_cache_groups = kvc.kv_cache_groups * 2
        with pytest.raises(kvstash.vllm.ConfigError, match="one KV-cache group"):
            create_spec(cfg, kvc)
        cfg, kvc = configs(daemon.socket)
        cfg.cache_config.prefix_caching_hash_algo = "sha256"
        with pytest.raises(kvstash.vllm.ConfigError, match="sha256_cbor"):
            create_spec(cfg, kvc)
        mgr = create_spec(*configs(daemon.socket)).get_manager()
        with pytest.raises(ValueError, match="one KV-cache group"):
            mgr.lookup(vs.make_offload_key(b"\1" * 16, 1), vs.ReqContext("r"))
        mgr.shutdown()
