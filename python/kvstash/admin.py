# SPDX-License-Identifier: MIT
"""Status and counters of a running kvstashd, as plain dicts.

The same requests the kvstash CLI makes (KVS_MSG_STATUS, KVS_MSG_STATS),
over an admin session: it maps no ring and counts against no session limit.
Field names are those of include/kvstash/wire.h, so the C headers document
them; strings are decoded, UUIDs are bytes and flags are bools.
"""

from __future__ import annotations

import ctypes
import os
from typing import Any

from . import _lib
from .client import Client
from .errors import error_for

_BOOLS = {"sealed", "cuda_available", "hugepages"}


def _as_dict(s: ctypes.Structure) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, _type in s._fields_:  # type: ignore[attr-defined]
        if name == "hdr" or name.startswith("resv"):
            continue
        v = getattr(s, name)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")  # c_char arrays stop at the NUL
        elif isinstance(v, ctypes.Array):
            v = bytes(v)
        elif name in _BOOLS:
            v = bool(v)
        out[name] = v
    return out


def _request(socket_path: str | os.PathLike[str] | None, msg_type: int, op: str,
             timeout_ms: int) -> list[tuple[int, dict[str, Any]]]:
    replies: list[tuple[int, dict[str, Any]]] = []

    def on_reply(_arg: int | None, msg: int) -> int:
        hdr = _lib.MsgHdr.from_address(msg)
        cls = _lib.ADMIN_STRUCTS.get(hdr.type)
        if cls is not None and hdr.size == ctypes.sizeof(cls):
            replies.append((hdr.type, _as_dict(cls.from_buffer_copy(ctypes.string_at(msg, hdr.size)))))
        return 0

    cb = _lib.AdminFn(on_reply)
    with Client(socket_path, instance=None, namespace=None, role="admin",  # type: ignore[arg-type]
                timeout_ms=timeout_ms) as c:
        with c._lock:
            r = c._lib.kvs_admin_request(c._handle(), msg_type, cb, None)
    if r < 0:
        raise error_for(r, op)
    return replies


def status(socket_path: str | os.PathLike[str] | None = None, *, timeout_ms: int = 5000) -> dict[str, Any]:
    """{"daemon": {...}, "sessions": [{...}, ...]} (struct kvs_msg_status_*)."""
    out: dict[str, Any] = {"daemon": {}, "sessions": []}
    for t, d in _request(socket_path, _lib.MSG_STATUS, "status", timeout_ms):
        if t == _lib.MSG_STATUS_DAEMON:
            out["daemon"] = d
        elif t == _lib.MSG_STATUS_SESSION:
            out["sessions"].append(d)
    return out


def stats(socket_path: str | os.PathLike[str] | None = None, *, timeout_ms: int = 5000) -> dict[str, Any]:
    """{"global": {...}, "nodes": [...], "sessions": [...]} (struct kvs_msg_stats_*)."""
    out: dict[str, Any] = {"global": {}, "nodes": [], "sessions": []}
    for t, d in _request(socket_path, _lib.MSG_STATS, "stats", timeout_ms):
        if t == _lib.MSG_STATS_GLOBAL:
            out["global"] = d
        elif t == _lib.MSG_STATS_NODE:
            out["nodes"].append(d)
        elif t == _lib.MSG_STATS_SESSION:
            out["sessions"].append(d)
    return out
