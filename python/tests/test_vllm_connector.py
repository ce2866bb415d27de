# SPDX-License-Identifier: MIT
"""KvstashConnector driven in vLLM's call order, over a real kvstashd (host backend).

The contract is vLLM commit 9aaf83ef502fc37bc647f6e474314d48ba36cd1c
(kvstash.vllm.VLLM_COMMIT): KVConnectorBase_V1 and the scheduler / model
runner call order as vllm_engine.MiniEngine reproduces it, with the
stand-ins of vllm_stubs for vLLM's classes (vLLM itself cannot be installed
here).  The stand-ins are in sys.modules only inside each test.
"""

from __future__ import annotations

import sys
import threading
import time

import pytest

import kvstash
import kvstash.vllm
import vllm_engine as ve
import vllm_stubs as vs

PROMPT = list(range(1000, 1056))   # 56 tokens: 3 full blocks of 16, and 8 more


@pytest.fixture(autouse=True)
def _seed(monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "0")


@pytest.fixture
def stubs():
    with vs.stubbed():
        yield


@pytest.fixture
def engines(daemon, stubs):
    """make(engine_id, tp=1, layout="flash", procs=False, seed=1, **extra) -> MiniEngine; all closed after."""
    made = []

    def make(engine_id="engine-0", *, tp=1, layout="flash", procs=False, seed=1, **extra):
        sched = ve.scheduler(daemon.socket, tp=tp, engine_id=engine_id, **extra)
        workers = []
        for rank in range(tp):
            p = ve.worker_params(tp=tp, rank=rank, layout=layout, socket=daemon.socket, engine_id=engine_id,
                                 extra=extra)
            workers.append(ve.ProcWorker(p) if procs else ve.LocalWorker(p))
        eng = ve.MiniEngine(sched, workers, seed=seed)
        made.append(eng)
        return eng

    yield make
    for e in made:
        try:
            e.close()
        except Exception:
            pass


def live_leases(daemon) -> int:
    return kvstash.stats(daemon.socket)["global"]["leases_live"]


def leases_become(daemon, want: int, timeout: float = 10.0) -> bool:
    """Does kvstashd's live-lease count reach @want within @timeout?

    A RELEASE is an SQE like any other: the connector submits it and goes
    on, so the count drops once kvstashd has taken it, not at once."""
    deadline = time.monotonic() + timeout
    while live_leases(daemon) != want:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True


def assert_clean(daemon, *engines):
    """No live lease in kvstashd, no request left in any connector, every block back."""
    assert leases_become(daemon, 0)
    for e in engines:
        assert e.idle()
        assert e.conn._sched.tracked() == 0
        assert len(e.free) == 31
        assert all(o["pending"] == 0 for o in e.outputs[-1]["outs"])   # no copy in flight


def keys_of(req, n):
    return [bytes(h[:16]) for h in req.block_hashes[:n]]


def step_until(eng, cond, timeout=20.0):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"condition not met in {timeout} s"
        eng.step()
        time.sleep(0.0005)


def assert_loaded(eng, rid, nblocks, ranks=(0,)):
    """The request's first @nblocks blocks hold exactly what the saving engine's model wrote."""
    req = eng.reqs[rid]
    for w in eng.workers:
        for i, (b, key) in enumerate(zip(eng.blocks[rid][:nblocks], keys_of(req, nblocks))):
            got = w.read(b)
            assert got == ve.expected(key, w.rank), f"rank {w.rank}: block {i} (id {b}) differs"


def save_prompt(make, engine_id="saver", **kw):
    eng = make(engine_id, **kw)
    eng.add("a", PROMPT)
    eng.run()
    return eng


# ---- the happy path -------------------------------------------------------------


def test_saved_blocks_load_byte_exact_into_other_block_ids(engines, daemon):
    a = save_prompt(engines)
    a_ids = list(a.outputs[0]["plan"].saves[0].block_ids)
    assert len(a_ids) == 3

    b = engines("loader", seed=7)
    for w in b.workers:
        w.fill(list(range(1, 32)), 0xEE)     # nothing in B's memory looks like a block
    b.add("b", PROMPT + [7, 7])
    b.step()
    # get_num_new_matched_tokens found the 3 blocks: an asynchronous load
    assert b.hits == {"b": 48}
    assert "b" in b.remote
    step_until(b, lambda: "b" in b.recv_done)
    assert b.blocks["b"][:3] != a_ids
    assert_loaded(b, "b", 3)
    b.run()
    assert b.reqs["b"].status == vs.RequestStatus.FINISHED_STOPPED
    assert not b.invalid
    assert_clean(daemon, b)


@pytest.mark.parametrize("save_layout,load_layout", [("flash", "cross"), ("cross", "flashinfer"),
                                                     ("flashinfer", "flash")])
def test_layouts_share_blocks(engines, daemon, save_layout, load_layout):
    """Per-layer, FlashInfer and cross-layer caches register one geometry: blocks move between them."""
    save_prompt(engines, layout=save_layout)
    b = engines("loader", layout=load_layout, seed=3)
    b.add("b", PROMPT)
    step_until(b, lambda: "b" in b.recv_done)
    assert b.hits == {"b": 48}
    assert_loaded(b, "b", 3)
    b.run()
    assert_clean(daemon, b)


def test_decode_blocks_are_saved_as_they_fill(engines, daemon):
    """A block filled by generated tokens is saved the step it becomes full."""
    a = engines("saver")
    a.add("a", PROMPT[:40], max_tokens=10)   # blocks 0-1 from the prompt, block 2 filled by decoding
    a.run()
    saved = [s for o in a.outputs for s in o["plan"].saves]
    assert [len(s.block_ids) for s in saved] == [2, 1]
    full = a.reqs["a"].all_token_ids[:48]
    b = engines("loader", seed=5)
    b.add("b", full)
    step_until(b, lambda: "b" in b.recv_done)
    assert b.hits == {"b": 48}
    assert_loaded(b, "b", 3)


def test_tp2_as_two_worker_processes(engines, daemon):
    a = save_prompt(engines, tp=2, procs=True)
    assert len({w.proc.pid for w in a.workers}) == 2     # two ranks, two processes
    b = engines("loader", tp=2, procs=True, seed=9)
    for w in b.workers:
        w.fill(list(range(1, 32)), 0x55)
    b.add("b", PROMPT)
    step_until(b, lambda: "b" in b.recv_done)
    assert b.hits == {"b": 48}
    assert_loaded(b, "b", 3)     # each rank its own shard
    b.run()
    assert not b.invalid
    assert_clean(daemon, b)


def test_sync_load_completes_before_the_forward_pass(engines, daemon):
    save_prompt(engines)
    b = engines("loader", seed=4, **{"kvstash.load_mode": "sync"})
    b.add("b", PROMPT[:48])           # exactly 3 blocks: the last one must be computed
    so, writes, nsched = b.schedule()
    assert b.hits == {"b": 32}        # 2 blocks: vLLM needs a token left to compute
    assert "b" in b.running and not b.remote
    ids = list(b.blocks["b"][:2])
    b.snapshot = ids                  # read at the first layer, before any KV is written
    b.execute(so, writes, nsched)
    snap = b.outputs[-1]["outs"][0]["snap"]
    req = b.reqs["b"]
    for i, bid in enumerate(ids):
        assert snap[bid] == ve.expected(keys_of(req, 2)[i], 0), f"block {i} not loaded before the forward pass"
    b.snapshot = None
    b.run()
    assert_clean(daemon, b)


# ---- leases: re-lookups, unallocated lookups, aborts -------------------------------


def test_relookup_and_unallocated_lookup_leave_no_lease(engines, daemon):
    save_prompt(engines)
    b = engines("loader")
    req = vs.Request("b", PROMPT, ve.BS)
    assert b.conn.get_num_new_matched_tokens(req, 0) == (48, True)
    assert leases_become(daemon, 1)
    # Asked again with a longer GPU-cached prefix: the old lease goes, a new one comes.
    assert b.conn.get_num_new_matched_tokens(req, 16) == (32, True)
    assert leases_become(daemon, 1)
    # vLLM could not allocate blocks for it: the step ends without update_state_after_alloc.
    so = vs.SchedulerOutput([], vs.CachedRequestData(), {}, set(), set())
    b.conn.build_connector_meta(so)
    assert leases_become(daemon, 0)
    b.conn.request_finished(req, [])
    assert b.conn._sched.tracked() == 0


def test_request_that_does_not_fit_releases_its_lease(engines, daemon):
    save_prompt(engines)
    b = engines("loader")
    b.free = b.free[:2]               # fewer free blocks than the 3 to load
    b.add("b", PROMPT)
    b.step()
    assert "b" in b.waiting and "b" not in b.remote
    assert leases_become(daemon, 0)
    b.abort("b")
    assert b.conn._sched.tracked() == 0


def test_abort_during_load_frees_blocks_and_leases(engines, daemon):
    save_prompt(engines)
    b = engines("loader")
    b.add("b", PROMPT)
    b.step()                          # looked up, allocated, load sent to the worker
    assert "b" in b.remote
    b.abort("b")                      # vLLM keeps its blocks until the load ended
    b.run()
    assert b.idle() and len(b.free) == 31
    assert leases_become(daemon, 0)
    assert b.conn._sched.tracked() == 0


def test_abort_while_saving_keeps_blocks_until_saved(engines, daemon):
    a = engines("saver")
    a.add("a", PROMPT, max_tokens=5)
    daemon.freeze()                   # the step's SAVE cannot complete
    try:
        a.step()
        assert a.outputs[-1]["outs"][0]["pending"] == 1
        a.abort("a")
        assert "a" in a.held          # request_finished returned True: blocks kept
        a.step()
        assert "a" in a.held
    finally:
        daemon.thaw()
    a.run()
    assert a.idle() and len(a.free) == 31
    b = engines("loader")
    b.add("b", PROMPT)
    step_until(b, lambda: "b" in b.recv_done)
    assert_loaded(b, "b", 3)          # the save finished from the untouched blocks


def test_preemption_waits_for_saves_before_blocks_are_reused(engines, daemon):
    a = engines("saver", **{"kvstash.query_timeout_s": 0.2})
    a.add("a", PROMPT, max_tokens=5)
    daemon.freeze()
    try:
        a.step()                      # a's prefill: SAVE of 3 blocks submitted, not copied
        a.preempt("a")                # blocks freed; the next step hands them to c
        a.add("c", list(range(5000, 5056)))
        a.waiting.remove("a")
        a.waiting.append("a")         # c first, so c gets a's blocks (LIFO free list)
        done = threading.Event()
        t = threading.Thread(target=lambda: (a.step(), done.set()), daemon=True)
        t.start()
        # handle_preemptions waits for a's SAVE before c's forward writes the blocks.
        assert not done.wait(1.0), "the step did not wait for the preempted request's saves"
    finally:
        daemon.thaw()
    t.join(30)
    assert done.is_set()
    plan = a.outputs[1]["plan"]
    assert plan.flush == {"a"}
    assert set(a.blocks["c"][:3]) & set(a.outputs[0]["plan"].saves[0].block_ids)
    a.run()
    b = engines("loader")
    b.add("b", PROMPT)
    step_until(b, lambda: "b" in b.recv_done)
    assert_loaded(b, "b", 3)
    b.run()
    assert_clean(daemon, a, b)


class SlowGpu:
    """An ordering whose marks complete only after @polls ready() calls (a GPU still busy),
    or when waited for: what the CUDA event ordering does, without a GPU."""

    def __init__(self, polls):
        self.polls = polls
        self.waited = 0

    def mark(self):
        return [self.polls]

    def ready(self, token):
        token[0] -= 1
        return token[0] < 0

    def wait(self, token):
        self.waited += 1
        token[0] = -1


def test_saves_wait_until_the_gpu_wrote_the_blocks(engines, daemon):
    a = engines("saver")
    slow = SlowGpu(polls=4)
    a.workers[0].w.conn._worker._ordering = slow
    a.add("a", PROMPT)
    a.step()                          # the forward pass "is still running": nothing submitted
    assert a.outputs[-1]["outs"][0]["pending"] == 1
    a.run()
    saves = [s for o in a.outputs for s in o["plan"].saves]
    assert len(saves) == 1 and slow.waited == 0       # went out once ready, never waited for
    b = engines("loader")
    b.add("b", PROMPT)
    step_until(b, lambda: "b" in b.recv_done)
    assert_loaded(b, "b", 3)


def test_preemption_forces_saves_the_gpu_has_not_finished(engines, daemon):
    a = engines("saver")
    slow = SlowGpu(polls=1000)
    a.workers[0].w.conn._worker._ordering = slow
    a.add("a", PROMPT, max_tokens=5)
    a.step()
    a.preempt("a")
    a.step()                          # handle_preemptions: wait for the GPU, then the SAVE
    assert slow.waited == 1
    assert a.outputs[-1]["plan"].flush == {"a"}
    b = engines("loader")
    b.add("b", PROMPT)
    step_until(b, lambda: "b" in b.recv_done)
    assert_loaded(b, "b", 3)


# ---- kvstashd away -------------------------------------------------------------------


def test_kvstashd_killed_mid_load_means_recompute(engines, daemon):
    save_prompt(engines)
    b = engines("loader")
    b.add("b", PROMPT)
    so, writes, nsched = b.schedule()
    load = so.kv_connector_metadata.plan.loads[0]
    daemon.freeze()                   # the LOAD is submitted but never copied
    b.execute(so, writes, nsched)
    assert "b" in b.remote and "b" not in b.recv_done
    daemon.kill()
    t0 = time.monotonic()
    b.run(timeout=10)                 # no hang: recomputed within seconds
    assert time.monotonic() - t0 < 10
    assert b.invalid == set(load.block_ids)          # reported as load errors
    req = b.reqs["b"]
    assert req.status == vs.RequestStatus.FINISHED_STOPPED and req.num_output_tokens == 3
    # Serving goes on without kvstashd: a new request is looked up as a miss.
    b.add("c", PROMPT)
    b.run()
    assert b.hits.get("c", 0) == 0


def test_kvstashd_restart_reconnects(engines, daemon):
    a = engines("saver")
    a.add("a", PROMPT)
    a.run()
    daemon.kill()
    a.add("a2", PROMPT)
    a.run()                           # served without kvstashd: a miss, no error
    assert "a2" not in a.hits
    daemon.start()                    # a new kvstashd on the same socket, empty
    time.sleep(0.1)                   # past kvstash.reconnect_s (0.05 s) since the last try
    other = PROMPT[:40] + [9] * 16
    a.add("a3", other)                # the sessions come back by themselves and save again
    a.run()
    a.add("a4", other)
    a.run()
    assert a.hits.get("a4") == 48
    assert_clean(daemon, a)


# ---- refusals ------------------------------------------------------------------------


def _connector(cfg, role="SCHEDULER"):
    from kvstash.vllm.connector import KvstashConnector

    base = sys.modules["vllm.distributed.kv_transfer.kv_connector.v1.base"]
    kvc = vs.kv_cache_config(num_blocks=32, layer_names=ve.NAMES, block_size=16, heads=2, head_size=8)
    return KvstashConnector(cfg, getattr(base.KVConnectorRole, role), kvc)


@pytest.mark.parametrize("algo", ["sha256", "xxhash"])
def test_refuses_hashes_that_differ_between_processes(stubs, algo):
    with pytest.raises(kvstash.vllm.ConfigError, match="sha256_cbor or xxhash_cbor"):
        _connector(vs.vllm_config(hash_algo=algo))


def test_refuses_without_pythonhashseed(stubs, monkeypatch):
    monkeypatch.delenv("PYTHONHASHSEED")
    with pytest.raises(kvstash.vllm.ConfigError, match="PYTHONHASHSEED"):
        _connector(vs.vllm_config())


def test_refuses_pipeline_parallelism(stubs):
    with pytest.raises(kvstash.vllm.ConfigError, match="pipeline"):
        _connector(vs.vllm_config(pp=2))


def test_refuses_unknown_settings(stubs):
    with pytest.raises(kvstash.vllm.ConfigError, match="kvstash.load_moed"):
        _connector(vs.vllm_config(extra={"kvstash.load_moed": "sync"}))


def test_starts_without_kvstashd(stubs, tmp_path):
    """No kvstashd: vLLM still starts; every lookup is a miss."""
    cfg = vs.vllm_config(extra=ve.extra_config(str(tmp_path / "none.sock")))
    c = _connector(cfg)
    assert c.get_num_new_matched_tokens(vs.Request("r", PROMPT, 16), 0) == (0, False)


def test_connector_is_a_kv_connector_and_imports_vllm_lazily(stubs):
    from kvstash.vllm.connector import KvstashConnector, KvstashWorkerMetadata

    base = sys.modules["vllm.distributed.kv_transfer.kv_connector.v1.base"]
    assert issubclass(KvstashConnector, base.KVConnectorBase_V1)
    assert kvstash.vllm.KvstashConnector is KvstashConnector
    assert KvstashConnector.get_required_kvcache_layout(vs.vllm_config()) == "NHD"
    m = KvstashWorkerMetadata({1: 1}).aggregate(KvstashWorkerMetadata({1: 1, 2: 1}))
    assert m.completed_saves == {1: 2, 2: 1}
