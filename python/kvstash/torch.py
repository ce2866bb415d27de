# SPDX-License-Identifier: MIT
"""PyTorch helpers: register KV-cache tensors, allocate shareable KV caches.

torch is imported when a function here is called, never at import time, so
`import kvstash.torch` works (and documents itself) without PyTorch.

Registration derives every number kvstashd needs from the tensors
themselves (shape, stride, element size, data_ptr) and registers by device
pointer (kvs_register_cuda), which finds each pointer's allocation and
exports every distinct allocation once.

What can be shared: memory from cudaMalloc (PyTorch's default caching
allocator), and CUDA VMM allocations exportable as a POSIX fd.  What
cannot: PyTorch's expandable segments (VMM without a shareable handle)
and the cudaMallocAsync backend (stream-ordered pools).  For those,
allocate the KV cache with empty_kv(), which takes it from libkvstash's
exportable arenas and wraps it as a tensor.

CPU engines (kvstashd's host backend) keep their cache in a HostMemory:
host_tensor() views one as a tensor, and register_tensors(...,
memory=mem) registers CPU tensors that lie in it.
"""

from __future__ import annotations

import ctypes
import errno
import threading
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Union

from . import _lib
from .client import Client, CudaLayer, HostMemory, Layer, cuda_device_uuid
from .errors import InvalidArgument, KvstashError, error_for

if TYPE_CHECKING:
    import torch as _torch_t

    TensorSpec = Union[_torch_t.Tensor, Mapping[str, _torch_t.Tensor], Sequence[_torch_t.Tensor]]

ADVICE = (
    "kvstashd can import memory from cudaMalloc or from a CUDA VMM allocation "
    "exportable as a POSIX fd, not PyTorch's expandable segments or a "
    "stream-ordered pool: start the engine with "
    "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False (and without "
    "backend:cudaMallocAsync), or allocate the KV cache with kvstash.torch.empty_kv()"
)


def _torch() -> Any:
    import torch  # the top-level package (absolute import)

    return torch


def device_uuid(ordinal: int | None = None) -> bytes:
    """The 16-byte UUID of CUDA device @ordinal (default: torch's current
    device), as Client(device=...) wants it.  UUIDs, not ordinals, name
    GPUs to kvstashd: CUDA_VISIBLE_DEVICES renumbers ordinals per process."""
    if ordinal is None:
        ordinal = _torch().cuda.current_device()
    return cuda_device_uuid(ordinal)


# ---- registration --------------------------------------------------------------


def tensor_layer(name: str, t: Any, block_dim: int) -> CudaLayer:
    """The kvstashd view of one layer's KV tensor.

    block_dim 0: t is [num_blocks, ...]; one segment per block (page-first,
    or fused K/V within a block).  block_dim 1: t is [segments, num_blocks,
    ...]; segments (K and V) apart by t.stride(0) (layer-first split K/V,
    vLLM's flash-attention [2, num_blocks, block_size, heads, head_dim]).
    One block's segment (t[b] or t[s, b]) must be contiguous.  The base is
    the tensor's address (a device pointer for CUDA tensors).
    """
    if block_dim not in (0, 1) or t.dim() <= block_dim:
        raise InvalidArgument(errno.EINVAL, "register",
                              f"layer {name}: block_dim must be 0 or 1 and below the tensor's {t.dim()} dims")
    es = t.element_size()
    num_blocks = t.shape[block_dim]
    if num_blocks == 0:
        raise InvalidArgument(errno.EINVAL, "register", f"layer {name}: no blocks")
    seg = t[0] if block_dim == 0 else t[0, 0]
    if not seg.is_contiguous():
        raise InvalidArgument(errno.EINVAL, "register",
                              f"layer {name}: one block's data must be contiguous (shape {tuple(t.shape)}, "
                              f"stride {t.stride()})")
    segments = 1 if block_dim == 0 else t.shape[0]
    kv_stride = 0 if block_dim == 0 else t.stride(0) * es
    block_stride = t.stride(block_dim) * es
    if block_stride <= 0 or (segments > 1 and kv_stride <= 0):
        raise InvalidArgument(errno.EINVAL, "register", f"layer {name}: blocks or segments alias (stride 0)")
    return CudaLayer(name, t.data_ptr(), num_blocks=num_blocks, segment_bytes=seg.numel() * es,
                     block_stride=block_stride, segments=segments, kv_stride=kv_stride)


def tensor_layers(kv: Any, layout: str = "page_first", block_dim: int | None = None,
                  names: Sequence[str] | None = None) -> list[CudaLayer]:
    """The CudaLayers register_tensors() would register (see there)."""
    torch = _torch()
    if layout not in ("page_first", "layer_first"):
        raise InvalidArgument(errno.EINVAL, "register", "layout must be 'page_first' or 'layer_first'")
    if block_dim is None:
        block_dim = 0 if layout == "page_first" else 1
    if isinstance(kv, torch.Tensor):
        # One tensor holding every layer: page-first [num_blocks, layers, ...]
        # or layer-first [layers, ...].
        n = kv.shape[1] if layout == "page_first" else kv.shape[0]
        views = [kv[:, i] if layout == "page_first" else kv[i] for i in range(n)]
    elif isinstance(kv, Mapping):
        names = list(kv.keys())
        views = list(kv.values())
    else:
        views = list(kv)
    if names is None:
        names = [f"layers.{i}" for i in range(len(views))]
    if len(names) != len(views) or not views:
        raise InvalidArgument(errno.EINVAL, "register", f"{len(views)} layer tensors but {len(names)} names")
    devices = {v.device for v in views}
    if len(devices) != 1 or next(iter(devices)).type not in ("cuda", "cpu"):
        raise InvalidArgument(errno.EINVAL, "register", f"layers on several devices: {sorted(map(str, devices))}")
    return [tensor_layer(n, v, block_dim) for n, v in zip(names, views)]


def _host_layers(layers: list[CudaLayer], memory: HostMemory | Sequence[HostMemory] | None) -> list[Layer]:
    """CPU tensors as views into the HostMemory objects that hold them."""
    mems = [memory] if isinstance(memory, HostMemory) else list(memory or [])
    if not mems:
        raise InvalidArgument(errno.EINVAL, "register",
                              "CPU tensors register through the HostMemory they lie in: pass memory=")
    spans = [(m.address, m) for m in mems]
    out = []
    for x in layers:
        last = x.base + (x.num_blocks - 1) * x.block_stride + (x.segments - 1) * x.kv_stride + x.segment_bytes
        home = [(a, m) for a, m in spans if a <= x.base and last <= a + m.size]
        if not home:
            raise InvalidArgument(errno.EINVAL, "register", f"layer {x.name}: not inside the given HostMemory")
        a, m = home[0]
        out.append(Layer(x.name, m, offset=x.base - a, num_blocks=x.num_blocks, segment_bytes=x.segment_bytes,
                         block_stride=x.block_stride, segments=x.segments, kv_stride=x.kv_stride))
    return out


def register_tensors(client: Client, kv: Any, layout: str = "page_first", block_dim: int | None = None,
                     replicated: bool = False, names: Sequence[str] | None = None,
                     memory: HostMemory | Sequence[HostMemory] | None = None) -> list[CudaLayer]:
    """Register a KV cache given as tensors; returns the layers registered.

    kv is one of:
      - one fused tensor: page_first [num_blocks, layers, ...] (each block
        holds all its layers, the layout that copies fastest), or
        layer_first [layers, ...] (each layer as below);
      - a dict name -> tensor, one per layer (names are the layer names);
      - a sequence of per-layer tensors (named layers.0, layers.1, ...).
    block_dim: the block dimension of each layer's tensor (default 0 for
    page_first, 1 for layer_first, i.e. [2, num_blocks, ...] split K/V).
    replicated: one shard for all ranks (MLA).
    memory: for CPU tensors (host backend), the HostMemory they lie in
    (see host_tensor()).

    Tensors whose memory cannot be shared (expandable segments,
    cudaMallocAsync) raise a KvstashError (usually InvalidArgument) whose
    message says what to do instead.
    """
    layers = tensor_layers(kv, layout, block_dim, names)
    device = _first(kv).device
    if device.type == "cpu":
        client.register(_host_layers(layers, memory), replicated=replicated)
        return layers
    try:
        # libkvstash exports in the thread's current context: the tensors'.
        with _torch().cuda.device(device):
            client.register_cuda(layers, replicated=replicated)
    except KvstashError as e:
        # What a memory kvstashd cannot import turns into: libkvstash's
        # refusal of pool memory (EINVAL), a failed export (EOPNOTSUPP,
        # EIO), or a view past the exported allocation (ERANGE, EOVERFLOW).
        if e.errno in _UNSHAREABLE:
            raise type(e)(e.errno, e.op, f"{e.message}. {ADVICE}") from e
        raise
    return layers


_UNSHAREABLE = frozenset({errno.EINVAL, errno.ERANGE, errno.EOVERFLOW, errno.EOPNOTSUPP, errno.EIO})


def _first(kv: Any) -> Any:
    """The first tensor of a tensor, dict or sequence of tensors."""
    if isinstance(kv, _torch().Tensor):
        return kv
    return next(iter(kv.values() if isinstance(kv, Mapping) else kv))


def host_tensor(memory: HostMemory, shape: Sequence[int], dtype: Any, offset: int = 0) -> Any:
    """A CPU tensor viewing @memory (no copy), for CPU engines' KV caches.

    The tensor keeps a memoryview of the memory alive, and with it a buffer
    export: memory.close() refuses (BufferError) while such tensors live,
    instead of unmapping memory under them.
    """
    torch = _torch()
    count = torch.empty((), dtype=dtype).element_size()
    for n in shape:
        count *= int(n)
    if offset < 0 or count <= 0 or offset + count > memory.size:
        raise InvalidArgument(errno.EINVAL, "host_tensor", f"{count} bytes at {offset} do not fit {memory.size}")
    # torch.frombuffer keeps a reference to the object but not its buffer
    # export; a memoryview is an object whose life is an export.
    raw = torch.frombuffer(memoryview(memory.buffer), dtype=torch.uint8, count=count, offset=offset)
    return raw.view(dtype).view(tuple(int(n) for n in shape))


# ---- shareable allocation ----------------------------------------------------------

_KINDS = {"vmm": _lib.MEM_CUDA_VMM_FD, "ipc": _lib.MEM_CUDA_IPC}


class _Arena:
    """Owns one kvs_cuda_arena; frees it when the last tensor on it is freed.

    It carries __cuda_array_interface__, so torch.as_tensor(arena) makes a
    tensor on the memory that keeps the arena alive (torch holds a reference
    to the object until the tensor's storage dies).
    """

    def __init__(self, arena: _lib.CudaArena) -> None:
        self.arena = arena
        self.__cuda_array_interface__ = {
            "shape": (arena.size,),
            "typestr": "|u1",
            "data": (arena.dptr, False),
            "strides": None,
            "version": 2,  # no stream: the memory is fresh, nothing to order against
        }

    def __del__(self) -> None:
        try:
            _lib.lib().kvs_cuda_arena_free(ctypes.byref(self.arena))
        except Exception:
            pass


# DLPack, for torch without numpy (torch's __cuda_array_interface__ import
# needs numpy).  Layouts from dlpack.h (v0.x, "dltensor" capsules).
class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DLDeleter = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DLDeleter),
]
_KDLCUDA, _KDLUINT = 2, 1
_CAPSULE_NAME = b"dltensor"  # must outlive the capsule: a module constant
_dl_live: dict[int, tuple[Any, ...]] = {}  # managed tensor address -> what it keeps alive
_dl_lock = threading.Lock()


def _dl_delete(managed: Any) -> None:
    with _dl_lock:
        _dl_live.pop(ctypes.addressof(managed.contents), None)  # drops the _Arena: frees it


_DL_DELETER = _DLDeleter(_dl_delete)


def _dlpack_capsule(owner: _Arena, device: int) -> Any:
    shape = (ctypes.c_int64 * 1)(owner.arena.size)
    m = _DLManagedTensor()
    m.dl_tensor.data = owner.arena.dptr
    m.dl_tensor.device = _DLDevice(_KDLCUDA, device)
    m.dl_tensor.ndim = 1
    m.dl_tensor.dtype = _DLDataType(_KDLUINT, 8, 1)
    m.dl_tensor.shape = shape
    m.dl_tensor.strides = None
    m.dl_tensor.byte_offset = 0
    m.deleter = _DL_DELETER
    with _dl_lock:
        _dl_live[ctypes.addressof(m)] = (owner, m, shape)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(m), _CAPSULE_NAME, None)


def empty_kv(shape: Sequence[int], dtype: Any, device: Any = None, kind: str = "vmm",
             _via: str | None = None) -> Any:
    """An uninitialised tensor in memory kvstashd can always import.

    Allocated by kvs_cuda_arena_alloc (kind "vmm": a CUDA VMM allocation
    exportable as a POSIX fd; "ipc": cuMemAlloc memory with a legacy IPC
    handle), whatever PyTorch's allocator settings; freed when the last
    tensor viewing it is freed.
    """
    torch = _torch()
    if kind not in _KINDS:
        raise InvalidArgument(errno.EINVAL, "empty_kv", "kind must be 'vmm' or 'ipc'")
    dev = torch.device(device if device is not None else "cuda")
    if dev.type != "cuda":
        raise InvalidArgument(errno.EINVAL, "empty_kv", f"{dev} is not a CUDA device")
    index = dev.index if dev.index is not None else torch.cuda.current_device()
    nbytes = torch.empty((), dtype=dtype).element_size()
    for s in shape:
        nbytes *= int(s)
    if nbytes <= 0:
        raise InvalidArgument(errno.EINVAL, "empty_kv", "empty shape")
    arena = _lib.CudaArena()
    with torch.cuda.device(index):
        # libkvstash allocates in the thread's current context: make it
        # this device's primary context, the one PyTorch uses.
        torch.cuda.synchronize(index)
        r = _lib.lib().kvs_cuda_arena_alloc(index, nbytes, _KINDS[kind], ctypes.byref(arena))
    if r < 0:
        raise error_for(r, "empty_kv")
    owner = _Arena(arena)
    if _via is None:
        try:
            import numpy  # noqa: F401  (torch needs it for __cuda_array_interface__)

            _via = "cai"
        except ImportError:
            _via = "dlpack"
    if _via == "cai":
        raw = torch.as_tensor(owner, device=torch.device("cuda", index))
    else:
        raw = torch.utils.dlpack.from_dlpack(_dlpack_capsule(owner, index))
    del owner  # the tensor holds it now
    if raw.data_ptr() != arena.dptr or raw.dtype != torch.uint8 or raw.device != torch.device("cuda", index):
        raise RuntimeError("kvstash.torch.empty_kv: PyTorch did not wrap the arena in place")
    return raw[:nbytes].view(dtype).view(tuple(int(s) for s in shape))


# ---- stream ordering -------------------------------------------------------------


def _stream(stream: Any) -> Any:
    """@stream, or torch's current stream of the current device."""
    return stream if stream is not None else _torch().cuda.current_stream()


def save_on_stream(client: Client, keys: Any, block_ids: Any, stream: Any = None) -> Any:
    """SAVE what the work enqueued so far on @stream (default: the current
    stream) writes, without synchronizing: kvstashd's copy waits for a
    write that stream makes after that work (client.save(stream=...)).
    The Operation completes when the blocks may be reused.  Needs a
    Client(fences=True)."""
    return client.save(keys, block_ids, stream=_stream(stream))


class LayerwiseLoad:
    """A LOAD PROGRESS: the layers come one by one, and wait_layer(i) makes
    a stream wait for layer i only, so layer i computes while the layers
    after it are still copying.

        ll = kvstash.torch.load_layerwise(client, q.lease, blocks)
        for i, layer in enumerate(model.layers):
            ll.wait_layer(i)          # on the current stream, no host wait
            x = layer(x, cache)
        ll.op.wait()                  # the CQE: did every layer arrive?

    Every wait is released however the LOAD ends (failed, refused, or
    kvstashd gone: then by libkvstash); status() says how it ended, and
    the Operation's result stays the authority (an engine recomputes what
    a failed LOAD should have brought).
    """

    def __init__(self, op: Any, first_layer: int) -> None:
        self.op = op
        self.fence = op.fence
        self.first_layer = first_layer

    def wait_layer(self, layer: int, stream: Any = None) -> None:
        """Enqueue on @stream (default: the current stream) a wait until
        model layer @layer (an index into the registered layers, within the
        LOAD's range) is in GPU memory for every block."""
        i = layer - self.first_layer
        if i < 0 or i >= self.fence.count:
            raise InvalidArgument(errno.EINVAL, "wait_layer",
                                  f"layer {layer} is outside the LOAD's layers "
                                  f"{self.first_layer}..{self.first_layer + self.fence.count - 1}")
        self.fence.wait(i, _stream(stream))

    def status(self) -> tuple[int, int]:
        """(0 or -errno, blocks copied) as the fence slot holds them."""
        return self.fence.status()


def load_layerwise(client: Client, lease: Any, block_ids: Any, layers: Any = None) -> LayerwiseLoad:
    """client.load(..., progress=True) wrapped for a torch forward pass:
    see LayerwiseLoad.  @layers as in Client.load (None: every layer)."""
    op = client.load(lease, block_ids, layers=layers, progress=True)
    first = 0 if layers is None else (layers.start if isinstance(layers, range) else int(layers[0]))
    return LayerwiseLoad(op, first)


__all__ = ["ADVICE", "LayerwiseLoad", "device_uuid", "empty_kv", "host_tensor", "load_layerwise",
           "register_tensors", "save_on_stream", "tensor_layer", "tensor_layers"]
