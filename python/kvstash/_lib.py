# SPDX-License-Identifier: MIT
"""ctypes declarations of libkvstash: structs, constants and prototypes.

Everything here mirrors include/kvstash/{kvstash,abi,wire}.h.  The struct
sizes are checked against the C headers' own _Static_asserts when this
module is imported, so a header change that is not carried over here fails
loudly instead of corrupting memory.

The library is loaded lazily (first call of lib()), so that modules which do
not talk to kvstashd, such as kvstash.keys, work where libkvstash is not
installed.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_int,
    c_int32,
    c_uint,
    c_uint8,
    c_uint16,
    c_uint32,
    c_uint64,
    c_void_p,
)

KEY_SIZE = 16

# Opcodes (abi.h).
OP_NOP, OP_SAVE, OP_QUERY, OP_LOAD, OP_RELEASE, OP_FLUSH = range(6)
QUERY_NOLEASE = 1 << 0
QUERY_CLUSTER = 1 << 1
QUERY_DRAM = 1 << 2  # DRAM hits only, none read back from the SSD tier (wire minor 2)
QUERY_FETCH = 1 << 3  # fetch what is missing from another node first (wire minor 3)
FETCH_HINT_MAX = 64  # a node hint "ADDR:PORT", NUL included
FLUSH_INSTANCE = 1 << 0
FLUSH_CLUSTER = 1 << 1
CQE_LOCAL = 1 << 0
CQE_CLUSTER = 1 << 1
# A QUERY's flags bits 8-31: hits still being read from the SSD tier (KVS_CQE_PENDING).
CQE_PENDING_SHIFT = 8
CQE_PENDING_MAX = 0xFFFFFF


def cqe_pending(flags: int) -> int:
    """KVS_CQE_PENDING(flags): a QUERY's hits still being read from SSD."""
    return (flags & 0xFFFFFFFF) >> CQE_PENDING_SHIFT

CONNECT_CLUSTER = 1 << 0  # kvstash.h: kvs_connect_opts.flags
CONNECT_FENCES = 1 << 1
FENCE_SLOTS = 4096  # abi.h: KVS_FENCE_SLOTS

# The cluster answer (abi.h).
CLUSTER_NAME_MAX = 64
CLUSTER_ADDR_MAX = 128
CLUSTER_HOLDERS = 4

# Roles, device and memory kinds (wire.h).
ROLE_WORKER, ROLE_SCHEDULER, ROLE_ADMIN = 1, 2, 3
DEVICE_HOST, DEVICE_CUDA = 1, 2
MEM_HOST_FD, MEM_CUDA_IPC, MEM_CUDA_VMM_FD = 1, 2, 3
REGISTER_REPLICATED = 1 << 0

# Admin message types (wire.h).
MSG_STATUS = 16
MSG_STATUS_DAEMON = 17
MSG_STATUS_SESSION = 18
MSG_STATS = 19
MSG_STATS_GLOBAL = 20
MSG_STATS_NODE = 21
MSG_STATS_SESSION = 22

NAME_MAX = 64
NS_MAX = 128
IPC_HANDLE_SIZE = 64

LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG = 3, 4, 6, 7

LogFn = CFUNCTYPE(None, c_void_p, c_int, c_char_p)
AdminFn = CFUNCTYPE(c_int, c_void_p, c_void_p)


class ConnectOpts(Structure):
    _fields_ = [
        ("role", c_uint32),
        ("tp_rank", c_uint32),
        ("tp_size", c_uint32),
        ("world_size", c_uint32),
        ("device_kind", c_uint32),
        ("device_uuid", c_uint8 * 16),
        ("instance", c_char_p),
        ("ns", c_char_p),
        ("sq_entries", c_uint32),
        ("cq_entries", c_uint32),
        ("arg_bytes", c_uint64),
        ("timeout_ms", c_int),
        ("log", LogFn),
        ("log_arg", c_void_p),
        ("flags", c_uint32),
        ("wait_spin_us", c_uint32),
        ("resv", c_uint64 * 3),
    ]


class SessionInfo(Structure):
    _fields_ = [
        ("session_id", c_uint64),
        ("sq_entries", c_uint32),
        ("cq_entries", c_uint32),
        ("arg_bytes", c_uint64),
        ("max_keys", c_uint32),
        ("max_inflight", c_uint32),
        ("max_layers", c_uint32),
        ("lease_ttl_ms", c_uint32),
        ("daemon_rev_major", c_uint16),
        ("daemon_rev_minor", c_uint16),
        ("resv0", c_uint32),
    ]


class Mem(Structure):
    _fields_ = [
        ("kind", c_uint32),
        ("fd", c_int),
        ("size", c_uint64),
        ("ipc_handle", c_uint8 * IPC_HANDLE_SIZE),
    ]


class LayerDesc(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("mem", c_uint32),
        ("segments", c_uint32),
        ("offset", c_uint64),
        ("num_blocks", c_uint32),
        ("segment_bytes", c_uint64),
        ("kv_stride", c_uint64),
        ("block_stride", c_uint64),
    ]


class Cqe(Structure):
    _fields_ = [
        ("user_data", c_uint64),
        ("res", c_int32),
        ("flags", c_uint32),
        ("result0", c_uint64),
        ("result1", c_uint64),
    ]


class ClusterHolder(Structure):
    _fields_ = [
        ("node", c_char * CLUSTER_NAME_MAX),
        ("addr", c_char * CLUSTER_ADDR_MAX),
        ("epoch", c_uint64),
        ("blocks", c_uint32),
        ("resv0", c_uint32),
    ]


class ClusterAnswer(Structure):
    _fields_ = [
        ("status", c_int32),
        ("best", c_uint32),
        ("nr_holders", c_uint32),
        ("round_trips", c_uint32),
        ("resv", c_uint64 * 2),
        ("holders", ClusterHolder * CLUSTER_HOLDERS),
    ]


class CudaArena(Structure):
    _fields_ = [
        ("dptr", c_uint64),
        ("size", c_uint64),
        ("kind", c_uint32),
        ("device", c_int),
        ("priv", c_uint64 * 4),
    ]


class CudaLayerDesc(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("base", c_uint64),
        ("segments", c_uint32),
        ("num_blocks", c_uint32),
        ("segment_bytes", c_uint64),
        ("kv_stride", c_uint64),
        ("block_stride", c_uint64),
    ]


# ---- admin replies (wire.h) ------------------------------------------------


class MsgHdr(Structure):
    _fields_ = [
        ("type", c_uint32),
        ("size", c_uint32),
        ("seq", c_uint32),
        ("flags", c_uint32),
    ]


class StatusDaemon(Structure):
    _fields_ = [
        ("hdr", MsgHdr),
        ("version", c_char * 32),
        ("pid", c_uint32),
        ("nr_sessions", c_uint32),
        ("uptime_ms", c_uint64),
        ("nr_workers", c_uint32),
        ("nr_instances", c_uint32),
        ("cuda_available", c_uint32),
        ("resv0", c_uint32),
        ("resv", c_uint64 * 4),
    ]


class StatusSession(Structure):
    _fields_ = [
        ("hdr", MsgHdr),
        ("session_id", c_uint64),
        ("pid", c_uint32),
        ("uid", c_uint32),
        ("role", c_uint32),
        ("tp_rank", c_uint32),
        ("tp_size", c_uint32),
        ("world_size", c_uint32),
        ("device_kind", c_uint32),
        ("worker", c_uint32),
        ("device_uuid", c_uint8 * 16),
        ("nr_layers", c_uint32),
        ("sealed", c_uint32),
        ("slot_bytes", c_uint64),
        ("mapped_bytes", c_uint64),
        ("instance", c_char * NAME_MAX),
        ("ns", c_char * NS_MAX),
        ("first_layer", c_char * NAME_MAX),
        ("last_layer", c_char * NAME_MAX),
        ("resv", c_uint64 * 4),
    ]


# The stats messages (KVS_MSG_STATS_*) are not declared here: admin.py builds
# their structures from the library's own tables (kvs_stats_group/field).


# The C headers' sizes (checked there by _Static_assert).
for _s, _size in (
    (ConnectOpts, 128),
    (SessionInfo, 48),
    (Mem, 80),
    (LayerDesc, 56),
    (Cqe, 32),
    (ClusterHolder, 208),
    (ClusterAnswer, 32 + 4 * 208),
    (CudaArena, 56),
    (CudaLayerDesc, 48),
    (MsgHdr, 16),
    (StatusDaemon, 112),
    (StatusSession, 448),
):
    assert ctypes.sizeof(_s) == _size, f"{_s.__name__}: {ctypes.sizeof(_s)} bytes, C says {_size}"

ADMIN_STRUCTS: dict[int, type[Structure]] = {
    MSG_STATUS_DAEMON: StatusDaemon,
    MSG_STATUS_SESSION: StatusSession,
}

CqePtr = POINTER(Cqe)


class FenceRef(Structure):
    """struct kvs_fence_ref (kvstash.h): an armed fence slot."""

    _fields_ = [
        ("slot", c_uint32),
        ("base", c_uint32),
        ("count", c_uint32),
        ("gen", c_uint32),
    ]

# name: (restype, argtypes)
_PROTOTYPES: dict[str, tuple[object, list[object]]] = {
    "kvs_connect_opts_init": (None, [POINTER(ConnectOpts)]),
    "kvs_connect": (c_int, [c_char_p, POINTER(ConnectOpts), POINTER(c_void_p)]),
    "kvs_reconnect": (c_int, [c_void_p]),
    "kvs_close": (None, [c_void_p]),
    "kvs_session_info": (c_int, [c_void_p, POINTER(SessionInfo)]),
    "kvs_connected": (c_int, [c_void_p]),
    "kvs_register": (c_int, [c_void_p, POINTER(Mem), c_uint, POINTER(LayerDesc), c_uint, c_uint32]),
    "kvs_unregister": (c_int, [c_void_p]),
    "kvs_get_sqe": (c_void_p, [c_void_p]),
    "kvs_prep_nop": (c_int, [c_void_p, c_void_p, c_uint64]),
    "kvs_prep_save": (c_int, [c_void_p, c_void_p, c_char_p, c_void_p, c_uint32, c_uint64]),
    "kvs_prep_query": (c_int, [c_void_p, c_void_p, c_char_p, c_uint32, c_uint64, c_uint32, c_uint64]),
    "kvs_prep_query_fetch": (
        c_int,
        [c_void_p, c_void_p, c_char_p, c_uint32, c_uint64, c_uint32, c_char_p, c_uint64],
    ),
    "kvs_prep_load": (
        c_int,
        [c_void_p, c_void_p, c_uint64, c_void_p, c_uint32, c_uint32, c_uint32, c_uint64],
    ),
    "kvs_prep_release": (c_int, [c_void_p, c_void_p, c_uint64, c_uint64]),
    "kvs_prep_save_after": (
        c_int,
        [c_void_p, c_void_p, c_char_p, c_void_p, c_uint32, POINTER(FenceRef), c_uint64],
    ),
    "kvs_prep_save_stream": (
        c_int,
        [c_void_p, c_void_p, c_char_p, c_void_p, c_uint32, c_void_p, c_uint64],
    ),
    "kvs_prep_load_progress": (
        c_int,
        [c_void_p, c_void_p, c_uint64, c_void_p, c_uint32, c_uint32, c_uint32, POINTER(FenceRef), c_uint64],
    ),
    "kvs_fence_signal": (c_int, [c_void_p, POINTER(FenceRef), c_void_p]),
    "kvs_fence_signal_host": (c_int, [c_void_p, POINTER(FenceRef)]),
    "kvs_fence_wait": (c_int, [c_void_p, POINTER(FenceRef), c_uint32, c_void_p]),
    "kvs_fence_done": (c_int, [c_void_p, POINTER(FenceRef), c_uint32, POINTER(c_int32), POINTER(c_uint32)]),
    "kvs_fence_device_ptr": (c_int, [c_void_p, POINTER(FenceRef), POINTER(c_uint64)]),
    "kvs_prep_flush": (c_int, [c_void_p, c_void_p, c_uint32, c_uint64]),
    "kvs_submit": (c_int, [c_void_p]),
    "kvs_peek_cqe": (c_int, [c_void_p, POINTER(CqePtr)]),
    "kvs_wait_cqe": (c_int, [c_void_p, POINTER(CqePtr), c_int]),
    "kvs_cqe_seen": (None, [c_void_p, CqePtr]),
    "kvs_pending": (c_uint, [c_void_p]),
    "kvs_cqe_cluster": (c_int, [c_void_p, CqePtr, POINTER(ClusterAnswer)]),
    "kvs_host_alloc": (c_int, [c_uint64, POINTER(c_int), POINTER(c_void_p)]),
    "kvs_host_free": (None, [c_int, c_void_p, c_uint64]),
    "kvs_cuda_available": (c_int, []),
    "kvs_cuda_device_uuid": (c_int, [c_int, c_uint8 * 16]),
    "kvs_cuda_arena_alloc": (c_int, [c_int, c_uint64, c_uint32, POINTER(CudaArena)]),
    "kvs_cuda_arena_free": (None, [POINTER(CudaArena)]),
    "kvs_register_cuda": (c_int, [c_void_p, POINTER(CudaLayerDesc), c_uint, c_uint32]),
    "kvs_admin_request": (c_int, [c_void_p, c_uint32, AdminFn, c_void_p]),
    "kvs_strerror": (c_char_p, [c_int]),
    "kvs_version": (c_char_p, []),
}

_lib: ctypes.CDLL | None = None
_lib_lock = threading.Lock()


def _open() -> ctypes.CDLL:
    """Find libkvstash: $KVSTASH_LIB, else the soname, else the linker's search."""
    explicit = os.environ.get("KVSTASH_LIB")
    if explicit:
        return ctypes.CDLL(explicit)
    errors = []
    for name in ("libkvstash.so.0", ctypes.util.find_library("kvstash")):
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError as e:
            errors.append(str(e))
    raise OSError(
        "libkvstash not found (install kvstash, add its libdir to LD_LIBRARY_PATH, "
        "or set KVSTASH_LIB to the library's path): " + "; ".join(errors or ["no candidate"])
    )


def lib() -> ctypes.CDLL:
    """The loaded library with every prototype declared (loaded on first use)."""
    global _lib
    if _lib is None:
        with _lib_lock:
            if _lib is None:
                handle = _open()
                for name, (restype, argtypes) in _PROTOTYPES.items():
                    fn = getattr(handle, name)
                    fn.restype = restype
                    fn.argtypes = argtypes
                _lib = handle
    return _lib


def strerror(err: int) -> str:
    """kvs_strerror() when the library is loadable, else os.strerror()."""
    try:
        return lib().kvs_strerror(abs(err)).decode(errors="replace")
    except OSError:
        return os.strerror(abs(err))


def cstr(raw: bytes) -> str:
    """A NUL-padded fixed array from the wire as str."""
    return raw.split(b"\0", 1)[0].decode(errors="replace")
