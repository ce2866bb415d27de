# SPDX-License-Identifier: MIT
"""ctypes declarations of libkvstash: structs, constants and prototypes.

The constants and struct layouts come from include/kvstash/{kvstash,abi,wire}.h
through kvstash._abi, which the build generates from them (python/gen-abi.c),
so a header change reaches Python with the next build; the prototypes below
are declared here.  Each struct's ctypes layout is checked against the
compiler's offsets when this module is imported.

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
    c_char_p,
    c_int,
    c_int32,
    c_uint,
    c_uint8,
    c_uint32,
    c_uint64,
    c_void_p,
)

try:
    from ._abi import *  # noqa: F403  (the constants)
    from ._abi import CQE_PENDING_SHIFT
    from ._abi import STRUCTS as _STRUCTS
except ModuleNotFoundError as e:
    raise ImportError(
        "kvstash._abi is missing: the build generates it from the C headers (make); "
        "a build tree's python/ must be on sys.path next to the sources"
    ) from e


def cqe_pending(flags: int) -> int:
    """KVS_CQE_PENDING(flags): a QUERY's hits still being read from SSD."""
    return (flags & 0xFFFFFFFF) >> CQE_PENDING_SHIFT


LogFn = CFUNCTYPE(None, c_void_p, c_int, c_char_p)
AdminFn = CFUNCTYPE(c_int, c_void_p, c_void_p)

# The ctypes types _abi.STRUCTS names that are not ctypes' own: the callback
# types above and the structs already built (each comes after the ones it
# embeds).
_TYPES: dict[str, object] = {"LogFn": LogFn}


def _struct(name: str) -> type[Structure]:
    """The ctypes Structure of _abi.STRUCTS[name], checked against C's layout.

    ctypes lays the fields out by its own rules; each offset and the size
    must come out as the C compiler's (written by gen-abi), else a type
    mapping is wrong and the binding would corrupt memory: fail at import.
    """
    size, fields = _STRUCTS[name]
    members = []
    for field, ctype, count, _ in fields:
        t = _TYPES[ctype] if ctype in _TYPES else getattr(ctypes, ctype)
        members.append((field, t * count if count else t))
    cls = type(name, (Structure,), {"_fields_": members})
    for field, _, _, offset in fields:
        got = getattr(cls, field).offset
        if got != offset:
            raise ImportError(f"kvstash._abi: {name}.{field} at {got} in ctypes, {offset} in C")
    if ctypes.sizeof(cls) != size:
        raise ImportError(f"kvstash._abi: {name} is {ctypes.sizeof(cls)} bytes in ctypes, {size} in C")
    _TYPES[name] = cls
    return cls


ConnectOpts = _struct("ConnectOpts")
SessionInfo = _struct("SessionInfo")
Mem = _struct("Mem")
LayerDesc = _struct("LayerDesc")
Cqe = _struct("Cqe")
FenceRef = _struct("FenceRef")  # struct kvs_fence_ref: an armed fence slot
ClusterHolder = _struct("ClusterHolder")
ClusterAnswer = _struct("ClusterAnswer")
CudaArena = _struct("CudaArena")
CudaLayerDesc = _struct("CudaLayerDesc")
# Admin replies (wire.h).  The stats messages (KVS_MSG_STATS_*) are not
# declared here: admin.py builds their structures from the library's own
# tables (kvs_stats_group/field).
MsgHdr = _struct("MsgHdr")
StatusDaemon = _struct("StatusDaemon")
StatusSession = _struct("StatusSession")

ADMIN_STRUCTS: dict[int, type[Structure]] = {
    MSG_STATUS_DAEMON: StatusDaemon,  # noqa: F405
    MSG_STATUS_SESSION: StatusSession,  # noqa: F405
}

CqePtr = POINTER(Cqe)

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
