# SPDX-License-Identifier: MIT
"""Stand-ins for the parts of vLLM that kvstash.vllm touches, for tests without vLLM.

They follow the interfaces of vLLM commit 9aaf83ef502fc37bc647f6e474314d48ba36cd1c
(vllm-project/vllm main, 2026-05-19), written from reading them, not copied:

  vllm.distributed.kv_transfer.kv_connector.v1.base
      KVConnectorRole, KVConnectorMetadata, KVConnectorWorkerMetadata (abstract
      aggregate), KVConnectorBase_V1 (its __init__ checks kv_transfer_config and
      keeps the config, the role and the kv_cache_config; bind/clear/
      _get_connector_metadata; the abstract methods of the real class)
  vllm.distributed.parallel_state.get_tensor_model_parallel_rank
  vllm.v1.kv_offload.base, vllm.v1.kv_offload.worker.worker
      OffloadKey helpers, LoadStoreSpec, GPULoadStoreSpec, PrepareStoreOutput,
      ReqContext, OffloadingManager, OffloadingSpec (its __init__: extra_config,
      hash/gpu block sizes, block_size_factor), Canonical* dataclasses,
      OffloadingHandler, OffloadingWorker, TransferResult
  plus the objects vLLM passes in: Request, KVCacheBlock(s), SchedulerOutput,
  NewRequestData, CachedRequestData, KVConnectorOutput, and the configs.

install() puts the modules into sys.modules; stubbed() does so for the
duration of a with-block and restores what was there (and drops the
kvstash modules imported over the stubs), so no test leaks them.
"""

from __future__ import annotations

import abc
import contextlib
import enum
import sys
import types
from dataclasses import dataclass, field
from typing import Any

import kvstash.keys

VLLM_COMMIT = "9aaf83ef502fc37bc647f6e474314d48ba36cd1c"

# ---- vllm.distributed.kv_transfer.kv_connector.v1.base ------------------------------


class KVConnectorRole(enum.Enum):
    SCHEDULER = 0
    WORKER = 1


class KVConnectorMetadata(abc.ABC):  # noqa: B024 - as in vLLM
    pass


class KVConnectorWorkerMetadata(abc.ABC):
    @abc.abstractmethod
    def aggregate(self, other: KVConnectorWorkerMetadata) -> KVConnectorWorkerMetadata: ...


class KVConnectorBase_V1(abc.ABC):
    def __init__(self, vllm_config: Any, role: KVConnectorRole, kv_cache_config: Any) -> None:
        self._connector_metadata = None
        self._vllm_config = vllm_config
        if vllm_config.kv_transfer_config is None:
            raise ValueError("kv_transfer_config must be set for KVConnectorBase_V1")
        self._kv_transfer_config = vllm_config.kv_transfer_config
        self._kv_cache_config = kv_cache_config
        self._role = role

    @property
    def role(self) -> KVConnectorRole:
        return self._role

    @property
    def prefer_cross_layer_blocks(self) -> bool:
        return False

    def bind_connector_metadata(self, connector_metadata: Any) -> None:
        self._connector_metadata = connector_metadata

    def clear_connector_metadata(self) -> None:
        self._connector_metadata = None

    def _get_connector_metadata(self) -> Any:
        assert self._connector_metadata is not None
        return self._connector_metadata

    def register_kv_caches(self, kv_caches: Any) -> None:
        return

    def register_cross_layers_kv_cache(self, kv_cache: Any, attn_backend: Any) -> None:
        return

    def handle_preemptions(self, kv_connector_metadata: Any) -> None:
        return

    @abc.abstractmethod
    def start_load_kv(self, forward_context: Any, **kwargs: Any) -> None: ...

    @abc.abstractmethod
    def wait_for_layer_load(self, layer_name: str) -> None: ...

    @abc.abstractmethod
    def save_kv_layer(self, layer_name: str, kv_layer: Any, attn_metadata: Any, **kwargs: Any) -> None: ...

    @abc.abstractmethod
    def wait_for_save(self) -> None: ...

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        return None, None

    def get_block_ids_with_load_errors(self) -> set[int]:
        return set()

    def shutdown(self) -> None:
        return None

    def build_connector_worker_meta(self) -> Any:
        return None

    @abc.abstractmethod
    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> tuple[int | None, bool]: ...

    @abc.abstractmethod
    def update_state_after_alloc(self, request: Any, blocks: Any, num_external_tokens: int) -> None: ...

    @abc.abstractmethod
    def build_connector_meta(self, scheduler_output: Any) -> Any: ...

    def update_connector_output(self, connector_output: Any) -> None:
        return

    def request_finished(self, request: Any, block_ids: list[int]) -> tuple[bool, dict[str, Any] | None]:
        return False, None

    def take_events(self) -> Any:
        return ()

    @classmethod
    def get_required_kvcache_layout(cls, vllm_config: Any) -> str | None:
        if cls is KVConnectorBase_V1:
            raise TypeError("get_required_kvcache_layout should not be called on the abstract base class")
        return None


# ---- vllm.v1.kv_offload.base / worker.worker -----------------------------------------


def make_offload_key(block_hash: bytes, group_idx: int) -> bytes:
    return bytes(block_hash) + group_idx.to_bytes(4, "big", signed=False)


def get_offload_block_hash(key: bytes) -> bytes:
    return key[:-4]


def get_offload_group_idx(key: bytes) -> int:
    return int.from_bytes(key[-4:], "big", signed=False)


@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: dict[str, Any] | None = None


class LoadStoreSpec(abc.ABC):
    @staticmethod
    @abc.abstractmethod
    def medium() -> str: ...


@dataclass
class PrepareStoreOutput:
    keys_to_store: list[bytes]
    store_spec: LoadStoreSpec
    evicted_keys: list[bytes]


class OffloadingManager(abc.ABC):
    @abc.abstractmethod
    def lookup(self, key: bytes, req_context: ReqContext) -> bool | None: ...

    @abc.abstractmethod
    def prepare_load(self, keys: Any, req_context: ReqContext) -> LoadStoreSpec: ...

    def touch(self, keys: Any, req_context: ReqContext) -> None:
        return

    def complete_load(self, keys: Any, req_context: ReqContext) -> None:
        return

    @abc.abstractmethod
    def prepare_store(self, keys: Any, req_context: ReqContext) -> PrepareStoreOutput | None: ...

    def complete_store(self, keys: Any, req_context: ReqContext, success: bool = True) -> None:
        return

    def take_events(self) -> Any:
        return ()

    def reset_cache(self) -> None:
        return

    def shutdown(self) -> None:
        return


class BlockIDsLoadStoreSpec(LoadStoreSpec, abc.ABC):
    def __init__(self, block_ids: list[int]) -> None:
        self.block_ids = list(block_ids)   # vLLM: a numpy int64 array (numpy is not here)


class GPULoadStoreSpec(BlockIDsLoadStoreSpec):
    def __init__(self, block_ids: list[int], group_sizes: Any, block_indices: Any) -> None:
        super().__init__(block_ids)
        assert sum(group_sizes) == len(block_ids)
        assert len(block_indices) == len(group_sizes)
        self.group_sizes = group_sizes
        self.block_indices = block_indices

    @staticmethod
    def medium() -> str:
        return "GPU"


@dataclass
class CanonicalKVCacheTensor:
    tensor: Any
    page_size_bytes: int


@dataclass
class CanonicalKVCacheRef:
    tensor_idx: int
    page_size_bytes: int


@dataclass
class CanonicalKVCaches:
    tensors: list[CanonicalKVCacheTensor]
    group_data_refs: list[list[CanonicalKVCacheRef]]


class OffloadingSpec(abc.ABC):
    def __init__(self, vllm_config: Any, kv_cache_config: Any) -> None:
        self.vllm_config = vllm_config
        self.kv_cache_config = kv_cache_config
        self.extra_config = vllm_config.kv_transfer_config.kv_connector_extra_config
        pc = vllm_config.parallel_config
        cp = pc.decode_context_parallel_size * pc.prefill_context_parallel_size
        self.hash_block_size = vllm_config.cache_config.block_size * cp
        self.gpu_block_size = tuple(g.kv_cache_spec.block_size * cp for g in kv_cache_config.kv_cache_groups)
        self.block_size_factor = 1
        offloaded = self.extra_config.get("block_size")
        if offloaded is not None:
            sizes = set(self.gpu_block_size)
            assert len(sizes) == 1
            self.block_size_factor = int(offloaded) // sizes.pop()

    @abc.abstractmethod
    def get_manager(self) -> OffloadingManager: ...

    @abc.abstractmethod
    def get_handlers(self, kv_caches: CanonicalKVCaches) -> Any: ...


@dataclass
class TransferResult:
    job_id: int
    success: bool
    transfer_size: int | None = None
    transfer_time: float | None = None
    transfer_type: tuple[str, str] | None = None


class OffloadingHandler(abc.ABC):
    @abc.abstractmethod
    def transfer_async(self, job_id: int, spec: Any) -> bool: ...

    @abc.abstractmethod
    def get_finished(self) -> list[TransferResult]: ...

    @abc.abstractmethod
    def wait(self, job_ids: set[int]) -> None: ...

    def shutdown(self) -> None:
        return


class OffloadingWorker:
    def __init__(self) -> None:
        self.handlers: set[OffloadingHandler] = set()
        self.transfer_type_to_handler: dict[tuple[str, str], OffloadingHandler] = {}

    def register_handler(self, src_cls: Any, dst_cls: Any, handler: OffloadingHandler) -> None:
        t = (src_cls.medium(), dst_cls.medium())
        assert t not in self.transfer_type_to_handler
        self.handlers.add(handler)
        self.transfer_type_to_handler[t] = handler

    def transfer_async(self, job_id: int, spec: Any) -> bool:
        src, dst = spec
        return self.transfer_type_to_handler[(src.medium(), dst.medium())].transfer_async(job_id, spec)

    def get_finished(self) -> list[TransferResult]:
        out: list[TransferResult] = []
        for h in self.handlers:
            out.extend(h.get_finished())
        return out

    def wait(self, job_ids: set[int]) -> None:
        for h in self.handlers:
            h.wait(job_ids)

    def shutdown(self) -> None:
        for h in self.handlers:
            h.shutdown()


# ---- the module tree -------------------------------------------------------------------

_rank = [0]


def set_tp_rank(rank: int) -> None:
    _rank[0] = rank


def _module(name: str, **attrs: Any) -> types.ModuleType:
    m = types.ModuleType(name)
    m.__path__ = []  # a package, so submodules resolve
    m.__dict__.update(attrs)
    return m


def modules() -> dict[str, types.ModuleType]:
    base = _module(
        "vllm.distributed.kv_transfer.kv_connector.v1.base",
        KVConnectorRole=KVConnectorRole, KVConnectorMetadata=KVConnectorMetadata,
        KVConnectorWorkerMetadata=KVConnectorWorkerMetadata, KVConnectorBase_V1=KVConnectorBase_V1,
    )
    ps = _module("vllm.distributed.parallel_state", get_tensor_model_parallel_rank=lambda: _rank[0])
    ko_base = _module(
        "vllm.v1.kv_offload.base",
        make_offload_key=make_offload_key, get_offload_block_hash=get_offload_block_hash,
        get_offload_group_idx=get_offload_group_idx, ReqContext=ReqContext, LoadStoreSpec=LoadStoreSpec,
        PrepareStoreOutput=PrepareStoreOutput, OffloadingManager=OffloadingManager,
        BlockIDsLoadStoreSpec=BlockIDsLoadStoreSpec, GPULoadStoreSpec=GPULoadStoreSpec,
        CanonicalKVCacheTensor=CanonicalKVCacheTensor, CanonicalKVCacheRef=CanonicalKVCacheRef,
        CanonicalKVCaches=CanonicalKVCaches, OffloadingSpec=OffloadingSpec,
    )
    ko_worker = _module("vllm.v1.kv_offload.worker.worker", OffloadingHandler=OffloadingHandler,
                        OffloadingWorker=OffloadingWorker, TransferResult=TransferResult)
    names = ["vllm", "vllm.distributed", "vllm.distributed.kv_transfer",
             "vllm.distributed.kv_transfer.kv_connector", "vllm.distributed.kv_transfer.kv_connector.v1",
             "vllm.v1", "vllm.v1.kv_offload", "vllm.v1.kv_offload.worker"]
    out = {n: _module(n) for n in names}
    out.update({base.__name__: base, ps.__name__: ps, ko_base.__name__: ko_base, ko_worker.__name__: ko_worker})
    out["vllm"].__stub__ = VLLM_COMMIT
    return out


_KVSTASH_OVER_VLLM = ("kvstash.vllm.connector", "kvstash.vllm.offload")


def install() -> None:
    """Install the stubs for good (worker subprocesses)."""
    if "vllm" in sys.modules and not hasattr(sys.modules["vllm"], "__stub__"):
        raise RuntimeError("a real vllm is imported; the stubs would shadow it")
    sys.modules.update(modules())


@contextlib.contextmanager
def stubbed():
    """The stubs in sys.modules for the block; afterwards sys.modules as before."""
    saved = {k: v for k, v in sys.modules.items() if k == "vllm" or k.startswith("vllm.") or k in _KVSTASH_OVER_VLLM}
    for k in saved:
        del sys.modules[k]
    sys.modules.update(modules())
    try:
        yield
    finally:
        for k in [k for k in sys.modules if k == "vllm" or k.startswith("vllm.") or k in _KVSTASH_OVER_VLLM]:
            del sys.modules[k]
        sys.modules.update(saved)
        import kvstash.vllm as kv

        for k in ("connector", "offload"):
            kv.__dict__.pop(k, None)   # the submodule attributes bound over the stubs


# ---- objects vLLM passes in ------------------------------------------------------------

HASH_SEED = "kvstash-test-seed"


class RequestStatus(enum.Enum):
    WAITING = 1
    WAITING_FOR_REMOTE_KVS = 2
    RUNNING = 3
    PREEMPTED = 4
    FINISHED_STOPPED = 5
    FINISHED_ABORTED = 6


class Request:
    """vllm.v1.request.Request, the parts connectors read: request_id, block_hashes (one per
    full block, prefix-chained, grown as tokens are appended), num_tokens, num_computed_tokens,
    status, is_finished(), kv_transfer_params, num_preemptions."""

    def __init__(self, request_id: str, prompt: list[int], block_size: int, max_tokens: int = 4) -> None:
        self.request_id = request_id
        self.prompt_token_ids = list(prompt)
        self.all_token_ids = list(prompt)
        self.block_size = block_size
        self.max_tokens = max_tokens
        self.num_computed_tokens = 0
        self.status = RequestStatus.WAITING
        self.kv_transfer_params = None
        self.num_preemptions = 0
        self.block_hashes: list[bytes] = []
        self._rehash()

    def _rehash(self) -> None:
        # vLLM's request_block_hasher with xxhash_cbor, rooted in the seed as with PYTHONHASHSEED.
        n = len(self.all_token_ids) // self.block_size
        if n > len(self.block_hashes):
            self.block_hashes = kvstash.keys.block_hashes(self.all_token_ids[:n * self.block_size],
                                                          self.block_size, root=HASH_SEED, hash="xxh3_128")

    @property
    def num_tokens(self) -> int:
        return len(self.all_token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.all_token_ids) - len(self.prompt_token_ids)

    def append_token(self, tok: int) -> None:
        self.all_token_ids.append(tok)
        self._rehash()

    def is_finished(self) -> bool:
        return self.status in (RequestStatus.FINISHED_STOPPED, RequestStatus.FINISHED_ABORTED)


@dataclass
class KVCacheBlock:
    block_id: int
    block_hash: bytes | None = None
    is_null: bool = False


@dataclass
class KVCacheBlocks:
    blocks: tuple[list[KVCacheBlock], ...]

    def get_block_ids(self) -> tuple[list[int], ...]:
        return tuple([b.block_id for b in g] for g in self.blocks)


@dataclass
class NewRequestData:
    req_id: str
    prompt_token_ids: list[int]
    block_ids: tuple[list[int], ...]
    num_computed_tokens: int


@dataclass
class CachedRequestData:
    req_ids: list[str] = field(default_factory=list)
    resumed_req_ids: set[str] = field(default_factory=set)
    new_block_ids: list[tuple[list[int], ...] | None] = field(default_factory=list)
    num_computed_tokens: list[int] = field(default_factory=list)


@dataclass
class SchedulerOutput:
    scheduled_new_reqs: list[NewRequestData]
    scheduled_cached_reqs: CachedRequestData
    num_scheduled_tokens: dict[str, int]
    finished_req_ids: set[str]
    preempted_req_ids: set[str] | None = None
    kv_connector_metadata: Any = None


@dataclass
class KVConnectorOutput:
    finished_sending: set[str] | None = None
    finished_recving: set[str] | None = None
    kv_connector_worker_meta: Any = None
    invalid_block_ids: set[int] = field(default_factory=set)


# ---- configs -------------------------------------------------------------------------------


class _KVTransferConfig:
    def __init__(self, kv_connector: str, engine_id: str, extra: dict[str, Any]) -> None:
        self.kv_connector = kv_connector
        self.engine_id = engine_id
        self.kv_role = "kv_both"
        self.kv_connector_extra_config = extra
        self.kv_load_failure_policy = "recompute"

    def get_from_extra_config(self, key: str, default: Any) -> Any:
        return self.kv_connector_extra_config.get(key, default)


def vllm_config(*, tp: int = 1, block_size: int = 16, engine_id: str = "engine-0", model: str = "test/tiny",
                extra: dict[str, Any] | None = None, hash_algo: str = "xxhash_cbor", use_mla: bool = False,
                kv_connector: str = "KvstashConnector", pp: int = 1) -> Any:
    ns = types.SimpleNamespace
    return ns(
        model_config=ns(model=model, dtype="torch.bfloat16", use_mla=use_mla, revision=None, quantization=None),
        cache_config=ns(block_size=block_size, prefix_caching_hash_algo=hash_algo, cache_dtype="auto",
                        enable_prefix_caching=True),
        parallel_config=ns(tensor_parallel_size=tp, pipeline_parallel_size=pp, world_size=tp * pp,
                           decode_context_parallel_size=1, prefill_context_parallel_size=1,
                           data_parallel_size=1, data_parallel_rank=0),
        kv_transfer_config=_KVTransferConfig(kv_connector, engine_id, dict(extra or {})),
        scheduler_config=ns(disable_hybrid_kv_cache_manager=True),
        kv_events_config=None,
    )


def kv_cache_config(*, num_blocks: int, layer_names: list[str], block_size: int, heads: int, head_size: int,
                    elem: int = 2, use_mla: bool = False) -> Any:
    ns = types.SimpleNamespace
    page = (1 if use_mla else 2) * block_size * heads * head_size * elem
    spec = ns(block_size=block_size, num_kv_heads=heads, head_size=head_size, page_size_bytes=page,
              sliding_window=None)
    return ns(num_blocks=num_blocks,
              kv_cache_tensors=[ns(size=num_blocks * page, shared_by=[n]) for n in layer_names],
              kv_cache_groups=[ns(layer_names=list(layer_names), kv_cache_spec=spec)])


# ---- tensors ----------------------------------------------------------------------------------


class FakeTensor:
    """What kvstash.vllm.layout reads of a torch tensor: shape, stride(), element_size(),
    data_ptr(), device.  Strides in elements, like torch."""

    def __init__(self, address: int, shape: tuple[int, ...], strides: tuple[int, ...] | None = None,
                 elem: int = 2) -> None:
        self.shape = tuple(shape)
        if strides is None:
            s, acc = [], 1
            for n in reversed(self.shape):
                s.append(acc)
                acc *= n
            strides = tuple(reversed(s))
        self._strides = tuple(strides)
        self._elem = elem
        self._addr = address
        self.device = types.SimpleNamespace(type="cpu", index=None)

    def stride(self, dim: int | None = None) -> Any:
        return self._strides if dim is None else self._strides[dim]

    def element_size(self) -> int:
        return self._elem

    def data_ptr(self) -> int:
        return self._addr

    def storage_offset(self) -> int:
        return 0


class FlashAttentionBackend:
    """The two calls the cross-layer path makes of a backend (FlashAttention's, NHD)."""

    @staticmethod
    def get_kv_cache_shape(num_blocks: int, block_size: int, num_kv_heads: int, head_size: int,
                           cache_dtype_str: str = "auto") -> tuple[int, ...]:
        return (2, num_blocks, block_size, num_kv_heads, head_size)

    @staticmethod
    def get_kv_cache_stride_order(include_num_layers_dimension: bool = False) -> tuple[int, ...]:
        # (num_blocks, num_layers, 2, block_size, heads, head_dim) in memory
        return (2, 0, 1, 3, 4, 5) if include_num_layers_dimension else (0, 1, 2, 3, 4)
