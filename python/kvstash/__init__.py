# SPDX-License-Identifier: MIT
"""kvstash: Python binding of libkvstash, the engine side of kvstashd.

    import kvstash

    with kvstash.Client("/run/kvstash/kvstash.sock", instance="engine-0",
                        namespace="my-model/bf16/page-first-16") as c:
        mem = kvstash.HostMemory(num_blocks * block_bytes)
        c.register(kvstash.page_first_layers(mem, 36, num_blocks, layer_bytes))
        c.save(keys, block_ids).wait()
        c.flush().wait()
        hits, lease = c.query(keys).wait()
        c.load(lease, other_block_ids[:hits]).wait()

Pure Python over ctypes: libkvstash is found through $KVSTASH_LIB, else the
usual library search (libkvstash.so.0).  kvstash.keys computes vLLM-compatible
block keys; kvstash.torch registers PyTorch tensors (imported on demand, so
this package needs no torch).  See docs/PYTHON.md.
"""

from __future__ import annotations

from . import _lib
from .admin import stats, status
from .client import (
    Client,
    ClusterAnswer,
    ClusterFlushResult,
    ClusterHolder,
    ClusterQueryResult,
    Completion,
    CudaLayer,
    Fence,
    HostMemory,
    Layer,
    Operation,
    QueryResult,
    SaveResult,
    SessionInfo,
    cuda_device_uuid,
    page_first_layers,
    split_kv_layers,
)
from .errors import (
    EUNSEALED,
    Busy,
    Cancelled,
    ConnectionLost,
    CopyFailed,
    DaemonUnavailable,
    InvalidArgument,
    KvstashError,
    LayoutMismatch,
    LeaseAlreadyUsed,
    LeaseNotFound,
    NoSpace,
    NotSealed,
    NotSupported,
    PermissionDenied,
    ProtocolMismatch,
    Timeout,
    error_for,
)

__version__ = "0.1.0"

KEY_SIZE = _lib.KEY_SIZE


def library_version() -> str:
    """The version of the loaded libkvstash."""
    return _lib.lib().kvs_version().decode()


def cuda_available() -> bool:
    """Whether libkvstash finds a usable CUDA driver and device."""
    return _lib.lib().kvs_cuda_available() == 1


__all__ = [
    "KEY_SIZE",
    "Busy",
    "Cancelled",
    "Client",
    "ClusterAnswer",
    "ClusterFlushResult",
    "ClusterHolder",
    "ClusterQueryResult",
    "Completion",
    "ConnectionLost",
    "CopyFailed",
    "CudaLayer",
    "Fence",
    "DaemonUnavailable",
    "EUNSEALED",
    "HostMemory",
    "InvalidArgument",
    "KvstashError",
    "Layer",
    "LayoutMismatch",
    "LeaseAlreadyUsed",
    "LeaseNotFound",
    "NoSpace",
    "NotSealed",
    "NotSupported",
    "Operation",
    "PermissionDenied",
    "ProtocolMismatch",
    "QueryResult",
    "SaveResult",
    "SessionInfo",
    "Timeout",
    "cuda_available",
    "cuda_device_uuid",
    "error_for",
    "library_version",
    "page_first_layers",
    "split_kv_layers",
    "stats",
    "status",
]
