# SPDX-License-Identifier: MIT
"""KvstashOffloadingSpec: kvstash under vLLM's OffloadingConnector.

    vllm serve MODEL --prefix-caching-hash-algo xxhash_cbor \\
        --kv-transfer-config '{"kv_connector": "OffloadingConnector", "kv_role": "kv_both",
            "kv_connector_extra_config": {"spec_name": "KvstashOffloadingSpec",
                                          "spec_module_path": "kvstash.vllm.offload"}}'

vLLM's OffloadingSpecFactory (vllm/v1/kv_offload/factory.py) imports this
module and builds the spec in the scheduler process and in every worker.
The contract followed is vllm/v1/kv_offload/base.py, factory.py and
worker/worker.py at vLLM commit 9aaf83ef502fc37bc647f6e474314d48ba36cd1c.

  - scheduler: KvstashOffloadingManager.  vLLM asks lookup() one block at a
    time, which kvstashd answers a whole prefix at once: the first lookups
    of a request's blocks are only recorded and answered None ("retry
    later"; vLLM keeps asking for the rest, so every key of the request is
    recorded), and on the next step one QUERY of all of them answers the
    lookups and pins the hits under a lease, which prepare_load hands to the
    workers.  A lease not claimed by prepare_load in its step is released
    in take_events, which vLLM calls once per step; complete_load releases
    the rest (normally ENOENT: the ranks' LOADs consumed it).  kvstashd
    decides what to keep, so prepare_store never evicts, and touch,
    complete_store and reset_cache have nothing to do.
  - workers: one handler per direction over the rank's worker session,
    which registers vLLM's canonical KV tensors (CanonicalKVCaches: per
    tensor a (num_blocks, page) view) as kvstash layers.  GPU -> KVSTASH is
    a SAVE of the GPU blocks under the block keys, submitted once the
    compute stream has written them (a CUDA event); KVSTASH -> GPU is a
    LOAD from the lease.

Limits, each refused at start with a clear error: one KV-cache group (no
hybrid models), the offloaded block size equal to vLLM's (no "block_size"
in kv_connector_extra_config), the CBOR block hashes with PYTHONHASHSEED.
vLLM's OffloadingConnectorWorker asserts that every transfer succeeded, so
a failed LOAD (kvstashd killed mid-load) stops vLLM; KvstashConnector
recomputes instead.  A failed SAVE is reported as done: the blocks are
free again either way, and kvstashd indexes only saves that completed.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from vllm.v1.kv_offload.base import (
    GPULoadStoreSpec,
    LoadStoreSpec,
    OffloadingManager,
    OffloadingSpec,
    PrepareStoreOutput,
    get_offload_block_hash,
    get_offload_group_idx,
)
from vllm.v1.kv_offload.worker.worker import OffloadingHandler, TransferResult

from ..client import CudaLayer, Operation
from ..errors import ConnectionLost, KvstashError
from .layout import LayoutError, View
from .session import Releases, Session
from .settings import ConfigError, Settings, block_key, settings_for
from .worker import WorkerCore

log = logging.getLogger("kvstash.vllm")

MEDIUM = "KVSTASH"


class KvstashLoadStoreSpec(LoadStoreSpec):
    """Blocks in kvstashd: the keys to store, or the lease (and how many of its blocks) to load."""

    def __init__(self, keys: bytes, lease: int = 0, count: int = 0) -> None:
        self.keys = keys
        self.lease = lease
        self.count = count

    @staticmethod
    def medium() -> str:
        return MEDIUM

    def __repr__(self) -> str:
        return f"KvstashLoadStoreSpec({len(self.keys) // 16} keys, lease={self.lease:#x}, count={self.count})"


def _key(key: bytes) -> bytes:
    if get_offload_group_idx(key) != 0:
        raise ValueError("kvstash serves one KV-cache group; got a key of group "
                         f"{get_offload_group_idx(key)}")
    return block_key(get_offload_block_hash(key))


def _ids(block_ids: Any) -> list[int]:
    """GPULoadStoreSpec.block_ids (a numpy array in vLLM) as ints."""
    return [int(b) for b in (block_ids.tolist() if hasattr(block_ids, "tolist") else block_ids)]


# ---- scheduler: the manager -----------------------------------------------------


@dataclass
class _Probe:
    """One request's lookups: the keys asked for, and the QUERY answering them."""

    keys: list[bytes] = field(default_factory=list)
    index: dict[bytes, int] = field(default_factory=dict)
    recording: bool = True     # keys still being collected; no QUERY yet
    fresh: bool = False        # answered in this step (lease, if any, still held)
    base: int = 0              # index of the QUERY's first key
    hits: int = 0
    lease: int = 0


class KvstashOffloadingManager(OffloadingManager):
    """The scheduler side (module docstring): lookups batched into QUERYs, leases per step."""

    # Requests whose lookups are remembered (only keys: no lease outlives a step).
    MAX_PROBES = 65536

    def __init__(self, settings: Settings, session: Session) -> None:
        self.settings = settings
        self.session = session
        self._probes: OrderedDict[str, _Probe] = OrderedDict()
        self._loading: dict[str, list[int]] = {}
        self._releases = Releases(session)

    def _query(self, rid: str, p: _Probe, start: int) -> None:
        """One QUERY of the request's keys from @start: answers its lookups for this step."""
        self._releases.release(p.lease)
        p.lease, p.hits, p.base, p.recording, p.fresh = 0, 0, start, False, True
        c = self.session.ensure()
        if c is None:
            return
        keys = b"".join(p.keys[start:start + c.info.max_keys])
        try:
            p.hits, p.lease = c.query(keys).wait(self.settings.query_timeout_s)
        except ConnectionLost as e:
            self.session.lost(e)
        except KvstashError as e:   # not sealed yet, lease limit, a QUERY that took too long
            log.debug("kvstash: QUERY for %s: %s", rid, e)

    # -- OffloadingManager --

    def lookup(self, key: Any, req_context: Any) -> bool | None:
        rid = req_context.req_id
        k = _key(key)
        p = self._probes.get(rid)
        if p is None:
            p = self._probes[rid] = _Probe()
            if len(self._probes) > self.MAX_PROBES:
                _old, q = self._probes.popitem(last=False)
                self._releases.release(q.lease)
        else:
            self._probes.move_to_end(rid)
        j = p.index.get(k)
        if j is None:
            # A key never asked about: record it; the next step's lookup
            # QUERYs every recorded key at once.
            if not p.recording:
                self._releases.release(p.lease)
                p.lease, p.fresh, p.recording = 0, False, True
            p.index[k] = len(p.keys)
            p.keys.append(k)
            return None
        if p.recording or not p.fresh or j < p.base:
            self._query(rid, p, j)    # a new pass over recorded keys
        return j - p.base < p.hits

    def prepare_load(self, keys: Collection[Any], req_context: Any) -> LoadStoreSpec:
        rid = req_context.req_id
        ks = [_key(k) for k in keys]
        p = self._probes.pop(rid, None)
        lease, count = 0, 0
        if p is not None and p.fresh and ks and p.index.get(ks[0]) == p.base \
                and p.keys[p.base:p.base + len(ks)] == ks and len(ks) <= p.hits:
            lease, count = p.lease, len(ks)
            p.lease = 0
        elif ks:
            # vLLM loads other blocks than it looked up (its GPU prefix grew
            # meanwhile): the lease cannot serve them, a new QUERY can (the
            # old lease still pins them while it runs).
            c = self.session.ensure()
            if c is not None:
                try:
                    count, lease = c.query(b"".join(ks)).wait(self.settings.query_timeout_s)
                except KvstashError as e:
                    log.warning("kvstash: QUERY for %s's load failed: %s", rid, e)
            if count < len(ks):
                log.error("kvstash: %s: %d of %d blocks to load are resident; the load will fail",
                          rid, count, len(ks))
        if p is not None:
            self._releases.release(p.lease)
        if lease:
            self._loading.setdefault(rid, []).append(lease)
        return KvstashLoadStoreSpec(b"".join(ks), lease, count)

    def complete_load(self, keys: Collection[Any], req_context: Any) -> None:
        for lease in self._loading.pop(req_context.req_id, ()):
            self._releases.release(lease)   # ENOENT when every rank's LOAD consumed it
        self._releases.reap()

    def prepare_store(self, keys: Collection[Any], req_context: Any) -> PrepareStoreOutput | None:
        ks = list(keys)
        # kvstashd skips keys already resident and evicts by itself: store all.
        return PrepareStoreOutput(keys_to_store=ks,
                                  store_spec=KvstashLoadStoreSpec(b"".join(_key(k) for k in ks)),
                                  evicted_keys=[])

    def take_events(self) -> Iterable[Any]:
        # Once per step (Scheduler.update_from_output): leases that no
        # prepare_load claimed are released; the keys stay recorded, so the
        # next lookup QUERYs again at once.
        for p in self._probes.values():
            if p.fresh:
                self._releases.release(p.lease)
                p.lease, p.fresh = 0, False
        self._releases.reap()
        return ()

    def reset_cache(self) -> None:
        # kvstashd's pool is shared by every engine on the host: a reset of
        # this engine's cache only forgets its own lookups.
        for p in self._probes.values():
            self._releases.release(p.lease)
        self._probes.clear()

    def shutdown(self) -> None:
        self.reset_cache()
        self.session.close()

    def live_leases(self) -> int:
        """Leases this manager holds (probes of this step and loads not completed)."""
        return sum(1 for p in self._probes.values() if p.lease) + sum(len(v) for v in self._loading.values())


# ---- workers: the handlers ---------------------------------------------------------


class _Transfers:
    """One rank's SAVEs and LOADs for both handlers, over the rank's WorkerCore session."""

    def __init__(self, core: WorkerCore, block_bytes: int) -> None:
        self.core = core
        self.block_bytes = block_bytes
        self._waiting: list[tuple[Any, int, list[int], bytes]] = []      # stores behind a CUDA event
        self._ops: dict[int, tuple[str, Operation | None, int, float]] = {}  # job -> (kind, op, blocks, t0)
        self._done: dict[str, list[TransferResult]] = {"store": [], "load": []}

    def _client(self) -> Any:
        return self.core._client()

    def store(self, job: int, ids: list[int], keys: bytes) -> None:
        self._waiting.append((self.core._ordering.mark(), job, ids, keys))
        self._submit(force_jobs=None)

    def load(self, job: int, lease: int, count: int, ids: list[int]) -> None:
        t0 = time.monotonic()
        if not lease or count < len(ids):
            self._finish("load", job, False, 0, t0)
            return
        c = self._client()
        if c is None:
            self._finish("load", job, False, 0, t0)
            return
        try:
            self._ops[job] = ("load", c.load(lease, ids), len(ids), t0)
        except KvstashError as e:
            log.warning("kvstash: LOAD job %d not submitted: %s", job, e)
            self._finish("load", job, False, 0, t0)

    def _submit(self, force_jobs: set[int] | None) -> None:
        last = -1
        if force_jobs:
            for i, w in enumerate(self._waiting):
                if w[1] in force_jobs:
                    last = i
        while self._waiting:
            token, job, ids, keys = self._waiting[0]
            if last >= 0:
                self.core._ordering.wait(token)
                last -= 1
            elif not self.core._ordering.ready(token):
                break
            self._waiting.pop(0)
            t0 = time.monotonic()
            c = self._client()
            op = None
            if c is not None:
                try:
                    op = c.save(keys, ids)
                except KvstashError as e:
                    log.warning("kvstash: SAVE job %d not submitted: %s", job, e)
            if op is None:
                self._finish("store", job, True, 0, t0)
            else:
                self._ops[job] = ("store", op, len(ids), t0)

    def _finish(self, kind: str, job: int, ok: bool, nbytes: int, t0: float) -> None:
        # transfer_time is left out: the time until this rank reaped the
        # completion (once per step) is no measure of the copy.
        self._done[kind].append(TransferResult(job_id=job, success=ok, transfer_size=nbytes or None,
                                               transfer_type=("GPU", MEDIUM) if kind == "store" else (MEDIUM, "GPU")))

    def poll(self) -> None:
        self._submit(force_jobs=None)
        c = self.core.session.client if self.core.session is not None else None
        if c is not None and not c.closed and self._ops:
            c.poll()
            if self._ops and not c.connected:
                c.poll()
        for job, (kind, op, blocks, t0) in list(self._ops.items()):
            if op is not None and not op.done():
                continue
            del self._ops[job]
            e = op.exception() if op is not None else None
            if kind == "load":
                if e is not None:
                    log.warning("kvstash: LOAD job %d failed: %s", job, e)
                self._finish(kind, job, e is None, op.completion.result0 if e is None else 0, t0)
            else:
                if e is not None:
                    log.warning("kvstash: SAVE job %d failed (%s); its blocks are free anyway", job, e)
                stored = op.completion.result0 if e is None else 0
                self._finish(kind, job, True, stored * self.block_bytes, t0)

    def finished(self, kind: str) -> list[TransferResult]:
        self.poll()
        out, self._done[kind] = self._done[kind], []
        return out

    def wait(self, jobs: set[int]) -> None:
        self._submit(force_jobs=jobs)
        for job in jobs:
            entry = self._ops.get(job)
            if entry is not None and entry[1] is not None:
                try:
                    entry[1].wait()
                except KvstashError:
                    pass
        self.poll()

    def shutdown(self) -> None:
        self._submit(force_jobs={w[1] for w in self._waiting})
        self.core.shutdown()


class _Handler(OffloadingHandler):
    def __init__(self, transfers: _Transfers, kind: str) -> None:
        self._t = transfers
        self._kind = kind

    def transfer_async(self, job_id: int, spec: Any) -> bool:
        src, dst = spec
        if self._kind == "store":
            assert isinstance(src, GPULoadStoreSpec) and isinstance(dst, KvstashLoadStoreSpec)
            ids = _ids(src.block_ids)
            if len(ids) * 16 != len(dst.keys):
                raise ValueError(f"store job {job_id}: {len(ids)} GPU blocks for {len(dst.keys) // 16} keys")
            self._t.store(job_id, ids, dst.keys)
        else:
            assert isinstance(src, KvstashLoadStoreSpec) and isinstance(dst, GPULoadStoreSpec)
            self._t.load(job_id, src.lease, src.count, _ids(dst.block_ids))
        return True

    def get_finished(self) -> list[TransferResult]:
        return self._t.finished(self._kind)

    def wait(self, job_ids: set[int]) -> None:
        self._t.wait(job_ids)

    def shutdown(self) -> None:
        if self._kind == "store":   # the pair shares one session: close it once
            self._t.shutdown()


def canonical_views(kv_caches: Any) -> list[View]:
    """CanonicalKVCaches as kvstash layers: tensor i, a (num_blocks, page) byte view, is layer kv.<i>.

    The bytes copied per block are the group's (un-padded) page size, as in
    vLLM's own CPU offloading.
    """
    groups = list(kv_caches.group_data_refs)
    if len(groups) != 1:
        raise LayoutError(f"kvstash serves one KV-cache group; these caches have {len(groups)}")
    page = {ref.tensor_idx: int(ref.page_size_bytes) for ref in groups[0]}
    out = []
    for i, ct in enumerate(kv_caches.tensors):
        t = ct.tensor
        if len(t.shape) != 2:
            raise LayoutError(f"canonical tensor {i}: shape {tuple(t.shape)} is not (num_blocks, page)")
        es = int(t.element_size())
        seg = page.get(i, int(ct.page_size_bytes))
        dev = t.device
        out.append(View(CudaLayer(f"kv.{i}", int(t.data_ptr()), num_blocks=int(t.shape[0]), segment_bytes=seg,
                                  block_stride=int(t.stride(0)) * es),
                        str(dev.type), None if getattr(dev, "index", None) is None else int(dev.index)))
    if len({v.layer.num_blocks for v in out}) != 1:
        raise LayoutError("canonical tensors with different block counts")
    return out


def _tp_rank() -> int:
    from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

    return int(get_tensor_model_parallel_rank())


class KvstashOffloadingSpec(OffloadingSpec):
    """The OffloadingSpec vLLM's factory builds from spec_name/spec_module_path."""

    def __init__(self, vllm_config: Any, kv_cache_config: Any) -> None:
        super().__init__(vllm_config, kv_cache_config)
        if self.block_size_factor != 1:
            raise ConfigError("kvstash stores vLLM's own blocks: leave 'block_size' out of "
                              "kv_connector_extra_config (offloaded blocks larger than GPU blocks)")
        groups = list(kv_cache_config.kv_cache_groups)
        if len(groups) != 1:
            raise ConfigError(f"kvstash serves models with one KV-cache group, this one has {len(groups)} "
                              "(hybrid models are not supported)")
        self.settings = settings_for(vllm_config, flavour="o")
        self._manager: KvstashOffloadingManager | None = None
        self._transfers: _Transfers | None = None

    def get_manager(self) -> OffloadingManager:
        if self._manager is None:
            session = Session(self.settings, role="scheduler")
            session.start()
            self._manager = KvstashOffloadingManager(self.settings, session)
        return self._manager

    def get_handlers(self, kv_caches: Any) -> Iterator[tuple[type[LoadStoreSpec], type[LoadStoreSpec], OffloadingHandler]]:
        if self._transfers is None:
            views = canonical_views(kv_caches)
            core = WorkerCore(self.settings, _tp_rank())
            core.register(views)
            block_bytes = sum(v.layer.segment_bytes for v in views)
            self._transfers = _Transfers(core, block_bytes)
        yield GPULoadStoreSpec, KvstashLoadStoreSpec, _Handler(self._transfers, "store")
        yield KvstashLoadStoreSpec, GPULoadStoreSpec, _Handler(self._transfers, "load")


__all__ = ["KvstashLoadStoreSpec", "KvstashOffloadingManager", "KvstashOffloadingSpec", "canonical_views"]
