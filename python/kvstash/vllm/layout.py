# SPDX-License-Identifier: MIT
"""vLLM's KV-cache tensors as kvstash layers.

vLLM hands a connector its KV cache in one of two ways
(vllm/v1/worker/gpu_model_runner.py, kv_connector_model_runner_mixin.py):

  - register_kv_caches({layer name: tensor}): one tensor per layer, in the
    attention backend's logical shape with its strides permuted into the
    physical order, e.g. FlashAttention (2, num_blocks, block_size, heads,
    head_dim), FlashInfer (num_blocks, 2, block_size, heads, head_dim), MLA
    (num_blocks, block_size, dim).  Layers that share KV (kv sharing) share a
    tensor.
  - register_cross_layers_kv_cache(tensor, backend): when the connector
    prefers cross-layer blocks and the backend supports it, one contiguous
    tensor in physical order whose first dimension is the block: a block
    holds every layer (page-first, the layout kvstashd copies fastest).

Whichever way, every layer is registered in one canonical geometry, so that
a block saved from one layout can be loaded into the other: per layer, a K
and a V segment of block_size x heads x head_dim elements (or, for MLA, one
latent segment).  The byte order inside a segment (NHD: token-major, HND:
head-major) is part of the namespace and is checked here against the
strides, because kvstashd cannot see it.

Only shape, stride(), element_size(), data_ptr() and device are used, so
the functions work on torch tensors and on the tests' stand-ins alike.
"""

from __future__ import annotations

import errno
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..client import CudaLayer, HostMemory, Layer
from ..errors import InvalidArgument


class LayoutError(InvalidArgument):
    """A KV-cache tensor kvstash cannot describe; the message says which and why."""

    def __init__(self, message: str) -> None:
        super().__init__(errno.EINVAL, "register", message)


@dataclass(frozen=True)
class Geometry:
    """What the scheduler's configuration says a block looks like."""

    num_blocks: int     # vLLM's blocks (kv_cache_config.num_blocks)
    block_size: int     # tokens per block
    num_kv_heads: int   # on this rank
    head_size: int      # elements per head (MLA: the latent dim)
    use_mla: bool
    kv_layout: str      # "NHD" or "HND"


@dataclass(frozen=True)
class View:
    """One layer as kvstashd sees it, at an address (a device pointer for CUDA tensors)."""

    layer: CudaLayer
    device_type: str      # "cuda" or "cpu"
    device_index: int | None


def _dims(shape: Sequence[int], g: Geometry) -> dict[str, int] | None:
    """Which logical dimension is which, from the shapes vLLM's backends use.

    Returns {"blk", "tok", "dim", optionally "kv" and "head"} or None.  A
    dimension of blocks may hold kernel blocks (a vLLM block split into
    several smaller ones for the attention kernel): num_blocks * r of them,
    r * tokens-per-kernel-block = block_size.
    """
    nb, bs = g.num_blocks, g.block_size

    def blocks_tokens(blk: int, tok: int) -> bool:
        return shape[blk] % nb == 0 and (shape[blk] // nb) * shape[tok] == bs

    if g.use_mla:
        if len(shape) == 3 and blocks_tokens(0, 1) and shape[2] == g.head_size:
            return {"blk": 0, "tok": 1, "dim": 2}
        return None
    if len(shape) != 5 or shape[3] != g.num_kv_heads or shape[4] != g.head_size:
        return None
    if shape[0] == 2 and blocks_tokens(1, 2):
        return {"kv": 0, "blk": 1, "tok": 2, "head": 3, "dim": 4}   # FlashAttention, Triton, ...
    if shape[1] == 2 and blocks_tokens(0, 2):
        return {"blk": 0, "kv": 1, "tok": 2, "head": 3, "dim": 4}   # FlashInfer
    return None


def layer_view(name: str, base: int, shape: Sequence[int], strides: Sequence[int], elem: int,
               g: Geometry) -> CudaLayer:
    """The canonical kvstash layer of one layer's KV tensor (logical @shape, element @strides)."""
    shape = tuple(int(s) for s in shape)
    strides = tuple(int(s) for s in strides)
    where = f"layer {name} (shape {shape}, strides {strides})"
    if g.num_blocks < 3:
        raise LayoutError(f"{where}: {g.num_blocks} blocks are too few to tell the block dimension apart")
    d = _dims(shape, g)
    if d is None:
        want = ("(num_blocks, block_size, dim)" if g.use_mla else
                "(2, num_blocks, block_size, heads, head_dim) or (num_blocks, 2, block_size, heads, head_dim)")
        raise LayoutError(f"{where}: not a layout kvstash knows; expected {want} with num_blocks="
                          f"{g.num_blocks}, block_size={g.block_size}, heads={g.num_kv_heads}, "
                          f"head_dim={g.head_size}")
    r = shape[d["blk"]] // g.num_blocks          # kernel blocks per vLLM block

    # One kernel block of one segment (tokens x heads x dim) must be dense.
    inner = [k for k in ("tok", "head", "dim") if k in d]
    by_stride = sorted(inner, key=lambda k: strides[d[k]])
    expect = 1
    for k in by_stride:
        if strides[d[k]] != expect and shape[d[k]] > 1:
            raise LayoutError(f"{where}: one block's {'/'.join(inner)} elements are not contiguous")
        expect *= shape[d[k]]
    piece = expect                                 # elements of one kernel block's segment
    order = "NHD"
    if "head" in d and shape[d["head"]] > 1 and strides[d["head"]] > strides[d["tok"]]:
        order = "HND"
    if not g.use_mla and order != g.kv_layout:
        raise LayoutError(f"{where}: the KV cache is laid out {order} but the namespace says "
                          f"{g.kv_layout}: every process must see the same VLLM_KV_CACHE_LAYOUT")
    if r > 1 and order == "HND":
        raise LayoutError(f"{where}: HND blocks split into {r} kernel blocks do not hold a block's "
                          f"tokens x heads x dim in one order; use the NHD layout")
    # The r kernel blocks of a vLLM block must follow each other within a segment.
    if r > 1 and strides[d["blk"]] != piece:
        raise LayoutError(f"{where}: the {r} kernel blocks of a block are not adjacent")
    seg_elems = r * piece
    block_stride = r * strides[d["blk"]] * elem
    if "kv" in d:
        kv_stride = strides[d["kv"]] * elem
        if kv_stride <= 0:
            raise LayoutError(f"{where}: K and V alias")
        segments = 2
    else:
        kv_stride, segments = 0, 1
    if block_stride <= 0:
        raise LayoutError(f"{where}: blocks alias (stride 0)")
    return CudaLayer(name, base, num_blocks=g.num_blocks, segment_bytes=seg_elems * elem,
                     block_stride=block_stride, segments=segments, kv_stride=kv_stride)


def _device(t: Any) -> tuple[str, int | None]:
    dev = t.device
    return str(dev.type), (None if getattr(dev, "index", None) is None else int(dev.index))


def _valid_name(name: str, i: int) -> str:
    """vLLM's layer name if kvstash accepts it (1-63 of [A-Za-z0-9._:/@+=-]), else layers.<i>."""
    ok = 0 < len(name) <= 63 and all(c.isascii() and (c.isalnum() or c in "._:/@+=-") for c in name)
    return name if ok else f"layers.{i}"


def _ordered_layers(kv_caches: Mapping[str, Any], kv_cache_config: Any) -> list[tuple[str, Any]]:
    """(name, tensor) once per distinct tensor, in kv_cache_config.kv_cache_tensors order.

    The order (and the name: the first layer sharing a tensor) is what the
    cross-layer path uses too, so both register the same geometry.
    """
    out: list[tuple[str, Any]] = []
    seen: set[int] = set()
    for kt in getattr(kv_cache_config, "kv_cache_tensors", None) or ():
        names = [n for n in getattr(kt, "shared_by", ()) if n in kv_caches]
        if names:
            t = kv_caches[names[0]]
            if t.data_ptr() not in seen:
                seen.add(t.data_ptr())
                out.append((names[0], t))
    for name, t in kv_caches.items():     # layers the config did not list
        if not isinstance(t, (list, tuple)) and t.data_ptr() not in seen:
            seen.add(t.data_ptr())
            out.append((name, t))
    return out


def views_of_layers(kv_caches: Mapping[str, Any], kv_cache_config: Any, g: Geometry) -> list[View]:
    """register_kv_caches' dict as kvstash views, one per distinct tensor."""
    for name, t in kv_caches.items():
        if isinstance(t, (list, tuple)):
            raise LayoutError(f"layer {name}: a state-space (Mamba) layer; kvstash supports attention only")
    layers = _ordered_layers(kv_caches, kv_cache_config)
    if not layers:
        raise LayoutError("no KV-cache tensors to register")
    out = []
    for i, (name, t) in enumerate(layers):
        dev = _device(t)
        out.append(View(layer_view(_valid_name(name, i), int(t.data_ptr()), tuple(t.shape), tuple(t.stride()),
                                   int(t.element_size()), g), *dev))
    if len({(v.device_type, v.device_index) for v in out}) != 1:
        raise LayoutError("the layers lie on several devices")
    return out


def layer_names(kv_cache_config: Any, count: int) -> list[str]:
    """Names of the layers of a cross-layer tensor: kv_cache_tensors[i].shared_by[0], as vLLM's
    allocate_uniform_kv_caches assigns layer i of the tensor to kv_cache_tensors[i]."""
    tensors = list(getattr(kv_cache_config, "kv_cache_tensors", None) or ())
    if len(tensors) != count:
        return [f"layers.{i}" for i in range(count)]
    return [_valid_name(str(kt.shared_by[0]), i) for i, kt in enumerate(tensors)]


def views_of_cross_layers(kv_cache: Any, backend: Any, kv_cache_config: Any, g: Geometry) -> list[View]:
    """register_cross_layers_kv_cache's tensor as one kvstash view per layer.

    The tensor is in physical order; the backend says what each dimension
    means: get_kv_cache_shape() is the logical per-layer shape, and
    get_kv_cache_stride_order(include_num_layers_dimension=True) the
    permutation from (num_layers, *logical) to the physical order.  Each
    layer becomes a view of the same memory with that layer's strides.
    """
    phys_shape = tuple(int(s) for s in kv_cache.shape)
    phys_strides = tuple(int(s) for s in kv_cache.stride())
    order = tuple(int(i) for i in backend.get_kv_cache_stride_order(include_num_layers_dimension=True))
    if sorted(order) != list(range(len(phys_shape))):
        raise LayoutError(f"cross-layer tensor of shape {phys_shape}: the backend's stride order {order} "
                          "does not permute its dimensions")
    logical = [0] * len(order)       # logical dim -> physical dim
    for p, lg in enumerate(order):
        logical[lg] = p
    shape = [phys_shape[logical[i]] for i in range(len(order))]
    strides = [phys_strides[logical[i]] for i in range(len(order))]
    num_layers, layer_stride = shape[0], strides[0]
    names = layer_names(kv_cache_config, num_layers)
    dev = _device(kv_cache)
    elem = int(kv_cache.element_size())
    base = int(kv_cache.data_ptr())
    return [View(layer_view(names[i], base + i * layer_stride * elem, shape[1:], strides[1:], elem, g), *dev)
            for i in range(num_layers)]


# ---- host memory (kvstashd's host backend: CPU engines and tests) --------------

_host_memories: list[HostMemory] = []


def announce_host_memory(memory: HostMemory) -> None:
    """Tell the connector that CPU KV-cache tensors of this process lie in @memory.

    kvstashd can only reach host memory shared as a sealed memfd; vLLM does
    not allocate its cache that way, so this is for CPU engines and tests
    that do: a CPU tensor outside every announced HostMemory is refused.
    """
    if memory not in _host_memories:
        _host_memories.append(memory)


def forget_host_memory(memory: HostMemory) -> None:
    if memory in _host_memories:
        _host_memories.remove(memory)


def host_layers(views: Sequence[View]) -> list[Layer]:
    """CPU views as Layers of the announced HostMemory that holds each."""
    out = []
    for v in views:
        x = v.layer
        last = x.base + (x.num_blocks - 1) * x.block_stride + (x.segments - 1) * x.kv_stride + x.segment_bytes
        home = [m for m in _host_memories if m.fd >= 0 and m.address <= x.base and last <= m.address + m.size]
        if not home:
            raise LayoutError(f"layer {x.name}: a CPU tensor outside every HostMemory announced with "
                              "kvstash.vllm.announce_host_memory(); kvstashd cannot reach it")
        m = home[0]
        out.append(Layer(x.name, m, offset=x.base - m.address, num_blocks=x.num_blocks,
                         segment_bytes=x.segment_bytes, block_stride=x.block_stride,
                         segments=x.segments, kv_stride=x.kv_stride))
    return out


def geometry_of(kv_cache_config: Any, block_size: int, use_mla: bool, kv_layout: str) -> Geometry:
    """The Geometry of a single-group kv_cache_config (KvstashConnector supports one group)."""
    groups = list(getattr(kv_cache_config, "kv_cache_groups", None) or ())
    if len(groups) != 1:
        raise LayoutError(f"kvstash supports models with one KV-cache group (full attention), this one "
                          f"has {len(groups)}: hybrid models (sliding window, Mamba) are not supported")
    spec = groups[0].kv_cache_spec
    if getattr(spec, "sliding_window", None):
        raise LayoutError("sliding-window attention is not supported: its blocks are freed while the "
                          "request runs")
    heads = int(getattr(spec, "num_kv_heads", 1) or 1)
    return Geometry(num_blocks=int(kv_cache_config.num_blocks), block_size=int(spec.block_size),
                    num_kv_heads=heads, head_size=int(spec.head_size), use_mla=use_mla, kv_layout=kv_layout)


__all__ = ["Geometry", "LayoutError", "View", "announce_host_memory", "forget_host_memory", "geometry_of",
           "host_layers", "layer_names", "layer_view", "views_of_cross_layers", "views_of_layers"]
