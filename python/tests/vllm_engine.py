# SPDX-License-Identifier: MIT
"""A miniature vLLM engine that drives a KV connector in vLLM's call order.

The order and the bookkeeping follow vLLM commit
9aaf83ef502fc37bc647f6e474314d48ba36cd1c:

  Scheduler.schedule()            (vllm/v1/core/sched/scheduler.py)
      running requests first, then waiting ones: a waiting request with no
      computed tokens asks get_num_new_matched_tokens (None: skipped this
      step), gets blocks (none free: scheduling stops), then
      update_state_after_alloc; an asynchronous load parks it in
      WAITING_FOR_REMOTE_KVS with num_computed_tokens set.  A parked one is
      promoted once finished_recving named it (after a failed load, with
      num_computed_tokens cut at the first invalid block; a full hit
      recomputes the last token).  build_connector_meta at the end, then
      num_computed_tokens advances.
  the model runner, per worker     (gpu_model_runner.py, kv_connector_model_runner_mixin.py)
      handle_preemptions, bind_connector_metadata, start_load_kv, per layer
      wait_for_layer_load / (the layer's KV is written) / save_kv_layer,
      wait_for_save, get_finished, get_block_ids_with_load_errors,
      build_connector_worker_meta, clear_connector_metadata.
  KVOutputAggregator              (kv_connector/utils.py)
      a request id is finished once every worker reported it.
  Scheduler.update_from_output()
      invalid blocks first, then outputs (a finished request goes through
      request_finished, which may keep its blocks), update_connector_output,
      finished_recving / finished_sending, take_events.
  finish_requests (abort), _preempt_request (blocks freed at once, the
      request back to waiting with nothing computed).

The "model" writes, for each block that a step fills, bytes derived from
the block's key, the rank and the layer: pattern().  So a block loaded from
kvstashd must equal pattern() of its key, byte for byte, whatever block id
it lands in.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import random
import struct
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import kvstash
import vllm_stubs as vs

HERE = Path(__file__).resolve().parent
LAYERS, HEADS, HEAD, BS, ELEM = 3, 2, 8, 16, 2
SEG = BS * HEADS * HEAD * ELEM           # bytes of one K (or V) block of one layer
NAMES = [f"model.layers.{i}.self_attn.attn" for i in range(LAYERS)]


def pattern(key: bytes, rank: int, layer: int, kv: int) -> bytes:
    unit = hashlib.blake2b(key + bytes((rank, layer, kv)), digest_size=32).digest()
    return (unit * (SEG // 32 + 1))[:SEG]


def seg_offset(layout: str, num_blocks: int, layer: int, kv: int, block: int) -> int:
    """Where segment kv of block of layer lies in the worker's memory, per layout."""
    if layout == "flash":       # per layer (2, num_blocks, bs, heads, dim)
        return layer * 2 * num_blocks * SEG + kv * num_blocks * SEG + block * SEG
    if layout == "flashinfer":  # per layer (num_blocks, 2, bs, heads, dim)
        return layer * num_blocks * 2 * SEG + block * 2 * SEG + kv * SEG
    if layout == "cross":       # one tensor (num_blocks, layers, 2, bs, heads, dim)
        return block * LAYERS * 2 * SEG + layer * 2 * SEG + kv * SEG
    raise ValueError(layout)


def worker_params(**kw: Any) -> dict[str, Any]:
    p = dict(tp=1, rank=0, layout="flash", socket=None, num_blocks=32, engine_id="engine-0",
             model="test/tiny", extra={}, seed=os.environ.get("PYTHONHASHSEED", "0"))
    p.update(kw)
    return p


def extra_config(socket: str, **more: Any) -> dict[str, Any]:
    return {"kvstash.socket": socket, "kvstash.reconnect_s": 0.05, **more}


class WorkerRank:
    """One vLLM worker's side of the connector, over host memory laid out as vLLM lays it out."""

    def __init__(self, p: dict[str, Any]) -> None:
        from kvstash.vllm.connector import KvstashConnector

        base = sys.modules["vllm.distributed.kv_transfer.kv_connector.v1.base"]
        vs.set_tp_rank(p["rank"])
        self.p = p
        self.rank = p["rank"]
        self.layout = p["layout"]
        nb = self.nb = p["num_blocks"]
        cfg = vs.vllm_config(tp=p["tp"], engine_id=p["engine_id"], model=p["model"],
                             extra=extra_config(p["socket"], **p["extra"]))
        kvc = vs.kv_cache_config(num_blocks=nb, layer_names=NAMES, block_size=BS, heads=HEADS, head_size=HEAD)
        self.mem = kvstash.HostMemory(LAYERS * 2 * nb * SEG)
        kvstash.vllm.announce_host_memory(self.mem)
        self.conn = KvstashConnector(cfg, base.KVConnectorRole.WORKER, kvc)
        a = self.mem.address
        shape = (nb, LAYERS, 2, BS, HEADS, HEAD)
        if self.layout == "cross":
            self.conn.register_cross_layers_kv_cache(vs.FakeTensor(a, shape), vs.FlashAttentionBackend)
        elif self.layout == "flash":
            self.conn.register_kv_caches({n: vs.FakeTensor(a + i * 2 * nb * SEG, (2, nb, BS, HEADS, HEAD))
                                          for i, n in enumerate(NAMES)})
        elif self.layout == "flashinfer":
            self.conn.register_kv_caches({n: vs.FakeTensor(a + i * 2 * nb * SEG, (nb, 2, BS, HEADS, HEAD))
                                          for i, n in enumerate(NAMES)})
        else:
            raise ValueError(self.layout)

    def _write(self, block: int, layer: int, kv: int, data: bytes) -> None:
        o = seg_offset(self.layout, self.nb, layer, kv, block)
        self.mem.buffer[o:o + SEG] = data

    def read(self, block: int) -> list[bytes]:
        out = []
        for layer in range(LAYERS):
            for kv in range(2):
                o = seg_offset(self.layout, self.nb, layer, kv, block)
                out.append(bytes(self.mem.buffer[o:o + SEG]))
        return out

    def fill(self, blocks: list[int], byte: int) -> None:
        for b in blocks:
            for layer in range(LAYERS):
                for kv in range(2):
                    self._write(b, layer, kv, bytes([byte]) * SEG)

    def step(self, meta: Any, writes: list[tuple[int, bytes]], finished: set[str],
             snapshot: list[int] | None = None) -> dict[str, Any]:
        c = self.conn
        c.handle_preemptions(meta)
        c.bind_connector_metadata(meta)
        c.start_load_kv(None)
        snap = {}
        for layer, name in enumerate(NAMES):
            c.wait_for_layer_load(name)
            if layer == 0 and snapshot:
                snap = {b: self.read(b) for b in snapshot}   # what attention would read
            for block, key in writes:
                for kv in range(2):
                    self._write(block, layer, kv, pattern(key, self.rank, layer, kv))
            c.save_kv_layer(name, None, None)
        c.wait_for_save()
        sending, recving = c.get_finished(set(finished))
        errors = c.get_block_ids_with_load_errors()
        wm = c.build_connector_worker_meta()
        c.clear_connector_metadata()
        return {"sending": sending, "recving": recving, "errors": errors, "meta": wm, "snap": snap,
                "pending": c._worker.pending()}

    def close(self) -> None:
        self.conn.shutdown()
        kvstash.vllm.forget_host_memory(self.mem)
        try:
            self.mem.close()
        except BufferError:
            pass


class LocalWorker:
    """A WorkerRank in this process (the stubs must be installed around it)."""

    def __init__(self, p: dict[str, Any]) -> None:
        self.w = WorkerRank(p)
        self.rank = self.w.rank
        self._out: dict[str, Any] | None = None

    def send_step(self, *args: Any) -> None:
        self._out = self.w.step(*args)

    def recv_step(self) -> dict[str, Any]:
        out, self._out = self._out, None
        assert out is not None
        return out

    def read(self, block: int) -> list[bytes]:
        return self.w.read(block)

    def fill(self, blocks: list[int], byte: int) -> None:
        self.w.fill(blocks, byte)

    def close(self) -> None:
        self.w.close()


class ProcWorker:
    """A WorkerRank in a process of its own (vllm_worker_proc.py), as vLLM runs TP ranks."""

    def __init__(self, p: dict[str, Any], env: dict[str, str] | None = None) -> None:
        self.rank = p["rank"]
        self.proc = subprocess.Popen([sys.executable, "-B", str(HERE / "vllm_worker_proc.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env or dict(os.environ))
        self._call("init", p)

    def _send(self, *msg: Any) -> None:
        data = pickle.dumps(msg)
        assert self.proc.stdin is not None
        self.proc.stdin.write(struct.pack("<I", len(data)) + data)
        self.proc.stdin.flush()

    def _recv(self) -> Any:
        assert self.proc.stdout is not None
        head = self.proc.stdout.read(4)
        if len(head) < 4:
            raise RuntimeError(f"worker rank {self.rank} died (status {self.proc.wait()})")
        kind, value = pickle.loads(self.proc.stdout.read(struct.unpack("<I", head)[0]))
        if kind == "err":
            raise RuntimeError(f"worker rank {self.rank}:\n{value}")
        return value

    def _call(self, *msg: Any) -> Any:
        self._send(*msg)
        return self._recv()

    def send_step(self, *args: Any) -> None:
        self._send("step", *args)

    def recv_step(self) -> dict[str, Any]:
        return self._recv()

    def read(self, block: int) -> list[bytes]:
        return self._call("read", block)

    def fill(self, blocks: list[int], byte: int) -> None:
        self._call("fill", blocks, byte)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self._call("close")
            finally:
                self.proc.stdin.close()   # type: ignore[union-attr]
                self.proc.wait(timeout=30)


def expected(key: bytes, rank: int) -> list[bytes]:
    return [pattern(key, rank, layer, kv) for layer in range(LAYERS) for kv in range(2)]


class MiniEngine:
    def __init__(self, conn: Any, workers: list[Any], *, num_blocks: int = 32, seed: int = 1) -> None:
        self.conn = conn
        self.workers = workers
        self.world = len(workers)
        self.free = list(range(1, num_blocks))      # block 0 is vLLM's null block
        random.Random(seed).shuffle(self.free)
        self.reqs: dict[str, vs.Request] = {}
        self.blocks: dict[str, list[int]] = {}
        self.waiting: list[str] = []
        self.running: list[str] = []
        self.remote: set[str] = set()               # WAITING_FOR_REMOTE_KVS
        self.recv_done: set[str] = set()
        self.failed_recv: set[str] = set()
        self.held: set[str] = set()                 # finished, blocks kept for the connector
        self._finished: set[str] = set()
        self._preempted: set[str] = set()
        self._recv_count: dict[str, int] = {}
        self._send_count: dict[str, int] = {}
        self.step_no = 0
        self.outputs: list[dict[str, Any]] = []
        self.invalid: set[int] = set()
        self.hits: dict[str, int] = {}              # request -> external tokens it was granted
        self.snapshot: list[int] | None = None

    # ---- requests -------------------------------------------------------------

    def add(self, rid: str, prompt: list[int], max_tokens: int = 3) -> vs.Request:
        r = self.reqs[rid] = vs.Request(rid, prompt, BS, max_tokens)
        self.blocks[rid] = []
        self.waiting.append(rid)
        return r

    def _take(self, n: int) -> list[int] | None:
        if n > len(self.free):
            return None
        return [self.free.pop() for _ in range(n)]

    def _release_blocks(self, rid: str) -> None:
        # Freed blocks are the first ones handed out again (LIFO), as vLLM's
        # free queue appends freed blocks at the end it allocates from last:
        # here the harshest order for anything still reading them.
        self.free.extend(reversed(self.blocks.get(rid, [])))
        self.blocks[rid] = []

    def _finish(self, rid: str, status: vs.RequestStatus) -> None:
        req = self.reqs[rid]
        req.status = status
        for q in (self.running, self.waiting):
            if rid in q:
                q.remove(rid)
        delay, _ = self.conn.request_finished(req, list(self.blocks[rid]))
        self._finished.add(rid)
        if delay:
            self.held.add(rid)
        else:
            self._release_blocks(rid)

    def abort(self, rid: str) -> None:
        """Scheduler.finish_requests(rid, FINISHED_ABORTED)."""
        req = self.reqs[rid]
        if req.is_finished():
            return
        delay_free = False
        if rid in self.remote:
            delay_free = rid not in self.recv_done
            self.remote.discard(rid)
            self.recv_done.discard(rid)
            self.failed_recv.discard(rid)
        req.status = vs.RequestStatus.FINISHED_ABORTED
        for q in (self.running, self.waiting):
            if rid in q:
                q.remove(rid)
        delay, _ = self.conn.request_finished(req, list(self.blocks[rid]))
        self._finished.add(rid)
        if delay or delay_free:
            self.held.add(rid)
        else:
            self._release_blocks(rid)

    def preempt(self, rid: str) -> None:
        """Scheduler._preempt_request in the next schedule(): blocks freed at once."""
        req = self.reqs[rid]
        assert rid in self.running
        self.running.remove(rid)
        self._release_blocks(rid)
        req.status = vs.RequestStatus.PREEMPTED
        req.num_computed_tokens = 0
        req.num_preemptions += 1
        self.waiting.insert(0, rid)
        self._preempted.add(rid)

    # ---- a step --------------------------------------------------------------------

    def schedule(self) -> tuple[vs.SchedulerOutput, list[tuple[int, bytes]], dict[str, int]]:
        new: list[vs.NewRequestData] = []
        cached = vs.CachedRequestData()
        nsched: dict[str, int] = {}

        for rid in self.running:
            req = self.reqs[rid]
            n = req.num_tokens - req.num_computed_tokens
            need = -(-(req.num_computed_tokens + n) // BS) - len(self.blocks[rid])
            got = self._take(max(need, 0)) or []
            if len(got) < need:
                raise RuntimeError("the test engine ran out of blocks for a running request")
            self.blocks[rid] += got
            cached.req_ids.append(rid)
            cached.new_block_ids.append((got,) if got else None)
            cached.num_computed_tokens.append(req.num_computed_tokens)
            nsched[rid] = n

        for rid in list(self.waiting):
            req = self.reqs[rid]
            if rid in self.remote:
                if rid not in self.recv_done:
                    continue
                self.remote.discard(rid)
                self.recv_done.discard(rid)
                if rid in self.failed_recv:
                    self.failed_recv.discard(rid)
                    if req.num_computed_tokens == 0:
                        self._release_blocks(rid)
                elif req.num_computed_tokens == req.num_tokens:
                    req.num_computed_tokens = req.num_tokens - 1
                req.status = vs.RequestStatus.PREEMPTED if req.num_preemptions else vs.RequestStatus.WAITING
            resumed = req.status == vs.RequestStatus.PREEMPTED
            ext, load_async = 0, False
            if req.num_computed_tokens == 0:
                ext, load_async = self.conn.get_num_new_matched_tokens(req, 0)
                if ext is None:
                    continue
            computed = req.num_computed_tokens + ext
            tokens = computed if load_async else req.num_tokens
            need = -(-tokens // BS) - len(self.blocks[rid])
            got = self._take(max(need, 0))
            if got is None:
                break
            self.blocks[rid] += got
            self.conn.update_state_after_alloc(
                req, vs.KVCacheBlocks(([vs.KVCacheBlock(b) for b in self.blocks[rid]],)), ext)
            if ext:
                self.hits[rid] = self.hits.get(rid, 0) + ext
            self.waiting.remove(rid)
            if load_async:
                req.status = vs.RequestStatus.WAITING_FOR_REMOTE_KVS
                req.num_computed_tokens = computed
                self.remote.add(rid)
                self.waiting.append(rid)
                continue
            req.num_computed_tokens = computed
            req.status = vs.RequestStatus.RUNNING
            self.running.append(rid)
            if resumed:
                cached.req_ids.append(rid)
                cached.resumed_req_ids.add(rid)
                cached.new_block_ids.append((list(self.blocks[rid]),))
                cached.num_computed_tokens.append(computed)
            else:
                new.append(vs.NewRequestData(rid, req.prompt_token_ids, (list(self.blocks[rid]),), computed))
            nsched[rid] = req.num_tokens - computed

        so = vs.SchedulerOutput(new, cached, nsched, finished_req_ids=self._finished,
                                preempted_req_ids=self._preempted)
        so.kv_connector_metadata = self.conn.build_connector_meta(so)
        self._finished, self._preempted = set(), set()

        writes: list[tuple[int, bytes]] = []
        for rid, n in nsched.items():
            req = self.reqs[rid]
            c = req.num_computed_tokens
            for i in range(c // BS, (c + n) // BS):
                if i < len(req.block_hashes):
                    writes.append((self.blocks[rid][i], bytes(req.block_hashes[i][:16])))
            req.num_computed_tokens += n
        return so, writes, nsched

    def _aggregate(self, outs: list[dict[str, Any]]) -> vs.KVConnectorOutput:
        def count(ids: set[str] | None, table: dict[str, int]) -> set[str]:
            done = set()
            for rid in ids or ():
                table[rid] = table.get(rid, self.world) - 1
                if table[rid] == 0:
                    done.add(rid)
                    del table[rid]
            return done

        out = vs.KVConnectorOutput(finished_sending=set(), finished_recving=set())
        meta = None
        for o in outs:
            out.finished_sending |= count(o["sending"], self._send_count)
            out.finished_recving |= count(o["recving"], self._recv_count)
            out.invalid_block_ids |= o["errors"]
            if o["meta"] is not None:
                meta = o["meta"] if meta is None else meta.aggregate(o["meta"])
        out.kv_connector_worker_meta = meta
        return out

    def step(self) -> vs.KVConnectorOutput:
        return self.execute(*self.schedule())

    def execute(self, so: vs.SchedulerOutput, writes: list[tuple[int, bytes]],
                nsched: dict[str, int]) -> vs.KVConnectorOutput:
        """The workers' part of a step and update_from_output (step() = schedule() + execute())."""
        for w in self.workers:
            w.send_step(so.kv_connector_metadata, writes, so.finished_req_ids, self.snapshot)
        outs = [w.recv_step() for w in self.workers]
        self.outputs.append({"plan": so.kv_connector_metadata.plan, "outs": outs})
        out = self._aggregate(outs)
        self.update(out, nsched)
        self.step_no += 1
        return out

    def update(self, out: vs.KVConnectorOutput, nsched: dict[str, int]) -> None:
        bad = out.invalid_block_ids
        skip: set[str] = set()
        if bad:
            self.invalid |= bad
            for rid in list(self.remote) + list(self.running):
                req = self.reqs[rid]
                before = req.num_computed_tokens - nsched.get(rid, 0)
                for idx, b in enumerate(self.blocks[rid][:-(-before // BS)]):
                    if b in bad:
                        req.num_computed_tokens = idx * BS
                        if rid in self.remote:
                            self.failed_recv.add(rid)
                        else:
                            skip.add(rid)
                        break
        for rid in nsched:
            req = self.reqs[rid]
            if rid in skip or req.is_finished() or req.num_computed_tokens < req.num_tokens:
                continue
            req.append_token(int.from_bytes(hashlib.sha1(f"{rid}/{req.num_tokens}".encode()).digest()[:2], "little"))
            if req.num_output_tokens >= req.max_tokens:
                self._finish(rid, vs.RequestStatus.FINISHED_STOPPED)
        self.conn.update_connector_output(out)
        for rid in out.finished_recving or ():
            if rid in self.remote:
                self.recv_done.add(rid)
            else:
                assert self.reqs[rid].is_finished(), f"finished_recving for {rid}, which is neither loading nor finished"
                self.held.discard(rid)
                self._release_blocks(rid)
        for rid in out.finished_sending or ():
            assert rid in self.held, f"finished_sending for {rid}, whose blocks vLLM did not keep"
            self.held.discard(rid)
            self._release_blocks(rid)
        list(self.conn.take_events())

    def idle(self) -> bool:
        return not (self.waiting or self.running or self.held)

    def run(self, timeout: float = 20.0) -> None:
        """Step until idle, as vLLM's engine loop does: for as many steps as the
        copies take (kvstashd's take milliseconds, a step here microseconds).
        Not idle within @timeout seconds fails: something waits for ever."""
        deadline = time.monotonic() + timeout
        steps = 0
        while not self.idle():
            if time.monotonic() > deadline:
                raise AssertionError(f"not idle after {steps} steps ({timeout} s): waiting {self.waiting}, running "
                                     f"{self.running}, remote {sorted(self.remote)}, held {sorted(self.held)}")
            self.step()
            steps += 1
            plan = self.outputs[-1]["plan"]
            if not (plan.saves or plan.loads or self.running):
                time.sleep(0.0005)   # only transfers left: let them progress

    def close(self) -> None:
        for w in self.workers:
            w.close()
        self.conn.shutdown()


def scheduler(socket: str, *, tp: int = 1, engine_id: str = "engine-0", model: str = "test/tiny",
              num_blocks: int = 32, **extra: Any) -> Any:
    """The scheduler-side KvstashConnector (the stubs must be installed)."""
    from kvstash.vllm.connector import KvstashConnector

    base = sys.modules["vllm.distributed.kv_transfer.kv_connector.v1.base"]
    cfg = vs.vllm_config(tp=tp, engine_id=engine_id, model=model, extra=extra_config(socket, **extra))
    kvc = vs.kv_cache_config(num_blocks=num_blocks, layer_names=NAMES, block_size=BS, heads=HEADS, head_size=HEAD)
    return KvstashConnector(cfg, base.KVConnectorRole.SCHEDULER, kvc)
