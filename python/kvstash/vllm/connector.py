# SPDX-License-Identifier: MIT
"""KvstashConnector: kvstash as a vLLM KV connector (KVConnectorBase_V1).

    vllm serve MODEL --prefix-caching-hash-algo xxhash_cbor \\
        --kv-transfer-config '{"kv_connector": "KvstashConnector",
            "kv_connector_module_path": "kvstash.vllm.connector",
            "kv_role": "kv_both", "kv_load_failure_policy": "recompute"}'

(with PYTHONHASHSEED set; see docs/VLLM.md).  The contract followed is
vLLM's vllm/distributed/kv_transfer/kv_connector/v1/base.py at commit
9aaf83ef502fc37bc647f6e474314d48ba36cd1c (kvstash.vllm.VLLM_COMMIT).

This module imports vLLM: it is what vLLM loads.  The logic lives in
scheduler.py and worker.py, which do not, so it is tested without vLLM
installed.  Scheduler role: SchedulerCore over a scheduler session; worker
role: WorkerCore over the rank's worker session.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorWorkerMetadata,
)

from .layout import geometry_of, views_of_cross_layers, views_of_layers
from .plan import StepPlan
from .scheduler import SchedulerCore
from .session import Session
from .settings import PREFIX, settings_for
from .worker import WorkerCore

if TYPE_CHECKING:
    from vllm.config import VllmConfig

log = logging.getLogger("kvstash.vllm")


@dataclass
class KvstashConnectorMetadata(KVConnectorMetadata):
    """Scheduler -> every worker: the step's plan (plan.py)."""

    plan: StepPlan


@dataclass
class KvstashWorkerMetadata(KVConnectorWorkerMetadata):
    """Worker -> scheduler: SAVE jobs finished (job -> ranks) and LOADs ended (lease -> ranks)
    on this rank; vLLM sums the ranks' with aggregate()."""

    completed_saves: dict[int, int] = field(default_factory=dict)
    completed_loads: dict[int, int] = field(default_factory=dict)

    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata:
        if not isinstance(other, KvstashWorkerMetadata):
            raise TypeError(f"cannot aggregate {type(other).__name__} into KvstashWorkerMetadata")

        def add(a: dict[int, int], b: dict[int, int]) -> dict[int, int]:
            out = dict(a)
            for k, n in b.items():
                out[k] = out.get(k, 0) + n
            return out

        return KvstashWorkerMetadata(add(self.completed_saves, other.completed_saves),
                                     add(self.completed_loads, other.completed_loads))


def _tp_rank() -> int:
    from vllm.distributed.parallel_state import get_tensor_model_parallel_rank

    return int(get_tensor_model_parallel_rank())


class KvstashConnector(KVConnectorBase_V1):
    """KV-cache offload to kvstashd; see the module docstring and docs/VLLM.md."""

    def __init__(self, vllm_config: VllmConfig, role: KVConnectorRole, kv_cache_config: Any = None) -> None:
        super().__init__(vllm_config, role, kv_cache_config)
        self.settings = settings_for(vllm_config, flavour="c")
        self._sched: SchedulerCore | None = None
        self._worker: WorkerCore | None = None
        if role == KVConnectorRole.SCHEDULER:
            session = Session(self.settings, role="scheduler")
            session.start()
            self._sched = SchedulerCore(self.settings, session, world_size=self.settings.tp_size)
        else:
            self._worker = WorkerCore(self.settings, _tp_rank())
        log.info("kvstash %s: instance %s, namespace %s, load %s", role.name.lower(), self.settings.instance,
                 self.settings.namespace, self.settings.load_mode)

    # ---- layout --------------------------------------------------------------------

    @property
    def prefer_cross_layer_blocks(self) -> bool:
        # Blocks that hold every layer are one piece per block for kvstashd's
        # copies (one DMA instead of 2 x layers small ones).
        return self.settings.cross_layer_blocks

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: VllmConfig) -> str | None:
        # The namespace names the byte order of a block; asking vLLM for one
        # keeps every process (and every replica) on the same one.
        ktc = getattr(vllm_config, "kv_transfer_config", None)
        extra = getattr(ktc, "kv_connector_extra_config", None) or {}
        return str(extra.get(PREFIX + "kv_cache_layout", "NHD"))

    def _geometry(self) -> Any:
        return geometry_of(self._kv_cache_config, self.settings.block_size, self.settings.use_mla,
                           self.settings.kv_layout)

    def register_kv_caches(self, kv_caches: dict[str, Any]) -> None:
        assert self._worker is not None, "register_kv_caches on the scheduler side"
        self._worker.register(views_of_layers(kv_caches, self._kv_cache_config, self._geometry()))

    def register_cross_layers_kv_cache(self, kv_cache: Any, attn_backend: Any) -> None:
        assert self._worker is not None, "register_cross_layers_kv_cache on the scheduler side"
        self._worker.register(views_of_cross_layers(kv_cache, attn_backend, self._kv_cache_config,
                                                    self._geometry()))

    # ---- worker side ---------------------------------------------------------------------

    def _plan(self, meta: Any) -> StepPlan:
        if not isinstance(meta, KvstashConnectorMetadata):
            raise TypeError(f"KvstashConnector got {type(meta).__name__}, not KvstashConnectorMetadata")
        return meta.plan

    def handle_preemptions(self, kv_connector_metadata: KVConnectorMetadata) -> None:
        assert self._worker is not None
        self._worker.begin(self._plan(kv_connector_metadata))

    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None:
        assert self._worker is not None
        self._worker.begin(self._plan(self._get_connector_metadata()))
        self._worker.start_loads()
        if self.settings.load_mode == "sync":
            # The loading requests compute in this step: their blocks must be
            # in GPU memory before the forward pass is launched.  Waiting here,
            # not in wait_for_layer_load, keeps CUDA-graph replay safe.
            self._worker.wait_loads("")

    def wait_for_layer_load(self, layer_name: str) -> None:
        # Every load has completed in start_load_kv (sync) or before the
        # request was scheduled at all (async); the layer-wise LOAD plugs in
        # here (WorkerCore.wait_loads).
        assert self._worker is not None
        self._worker.wait_loads(layer_name)

    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None:
        # Saves are whole blocks (every layer at once, one SAVE per step)
        # taken after the step in wait_for_save; a stream-ordered per-layer
        # SAVE would start here.
        return None

    def wait_for_save(self) -> None:
        assert self._worker is not None
        self._worker.after_forward()

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        assert self._worker is not None
        sending, recving = self._worker.finished(finished_req_ids)
        return sending or None, recving or None

    def get_block_ids_with_load_errors(self) -> set[int]:
        assert self._worker is not None
        return self._worker.load_errors()

    def build_connector_worker_meta(self) -> KVConnectorWorkerMetadata | None:
        if self._worker is None:
            return None
        saves, loads = self._worker.completed_jobs(), self._worker.completed_loads()
        return KvstashWorkerMetadata(saves, loads) if saves or loads else None

    def clear_connector_metadata(self) -> None:
        super().clear_connector_metadata()
        if self._worker is not None:
            self._worker.end()

    def shutdown(self) -> None:
        if self._worker is not None:
            self._worker.shutdown()
        if self._sched is not None:
            self._sched.shutdown()

    # ---- scheduler side ----------------------------------------------------------------------

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]:
        assert self._sched is not None
        return self._sched.lookup(request, num_computed_tokens)

    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None:
        assert self._sched is not None
        ids = list(blocks.get_block_ids()[0]) if num_external_tokens else []
        self._sched.after_alloc(request, ids, num_external_tokens)

    def build_connector_meta(self, scheduler_output: Any) -> KVConnectorMetadata:
        assert self._sched is not None
        return KvstashConnectorMetadata(self._sched.build(scheduler_output))

    def update_connector_output(self, connector_output: Any) -> None:
        assert self._sched is not None
        meta = getattr(connector_output, "kv_connector_worker_meta", None)
        if not isinstance(meta, KvstashWorkerMetadata):
            meta = KvstashWorkerMetadata()
        self._sched.worker_output(meta.completed_saves, meta.completed_loads, connector_output.finished_sending,
                                  getattr(connector_output, "invalid_block_ids", None))

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        assert self._sched is not None
        return self._sched.finished(request), None


__all__ = ["KvstashConnector", "KvstashConnectorMetadata", "KvstashWorkerMetadata"]
