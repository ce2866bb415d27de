# SPDX-License-Identifier: MIT
"""Status and counters of a running kvstashd, as plain dicts.

The same requests the kvstash CLI makes (KVS_MSG_STATUS, KVS_MSG_STATS),
over an admin session: it maps no ring and counts against no session limit.
Field names are those of include/kvstash/wire.h, so the C headers document
them; strings are decoded, UUIDs are bytes and flags are bools.

The stats messages are not declared here: their structures are built, once,
from the tables libkvstash exports (kvs_stats_group(), kvs_stats_field(),
generated from include/kvstash/stats.h), so a counter added there appears
here with no change, and the layout always is that of the library in use.
"""

from __future__ import annotations

import ctypes
import os
import threading
from ctypes import POINTER, Structure, c_char, c_char_p, c_int, c_int32, c_uint8, c_uint32, c_uint64
from typing import Any

from . import _lib
from .client import Client
from .errors import error_for

_BOOLS = {"sealed", "cuda_available"}  # of the status messages


class _StatsGroup(Structure):  # struct kvs_stats_group (kvstash.h)
    _fields_ = [
        ("name", c_char_p),
        ("msg_type", c_uint32),
        ("size", c_uint32),
        ("nr_fields", c_uint32),
        ("flags", c_uint32),
        ("resv", c_uint64 * 2),
    ]


class _StatsField(Structure):  # struct kvs_stats_field (kvstash.h)
    _fields_ = [
        ("name", c_char_p),
        ("offset", c_uint32),
        ("size", c_uint32),
        ("type", c_uint32),
        ("kind", c_uint32),
        ("unit", c_uint32),
        ("resv0", c_uint32),
        ("resv", c_uint64 * 2),
    ]


_STATS_GROUP_MANY = 1 << 0
# KVS_STATS_T_* (stats.h): U64, U32, I32, BOOL (a u32), NAME (a char array).
_T_U64, _T_U32, _T_I32, _T_BOOL, _T_NAME = 1, 2, 3, 4, 5
_CTYPES = {_T_U64: c_uint64, _T_U32: c_uint32, _T_I32: c_int32, _T_BOOL: c_uint32}


class _Layout:
    """One stats group: where its messages go in stats(), and their structure."""

    def __init__(self, key: str, many: bool, cls: type[Structure], bools: frozenset[str]):
        self.key, self.many, self.cls, self.bools = key, many, cls, bools


_layouts: dict[int, _Layout] | None = None
_layouts_lock = threading.Lock()


def _structure(name: str, size: int, fields: list[_StatsField]) -> type[Structure]:
    """A ctypes structure of @size bytes: the header, @fields at their offsets, padding."""
    members: list[tuple[str, Any]] = [("hdr", _lib.MsgHdr)]
    pos = ctypes.sizeof(_lib.MsgHdr)
    for f in sorted(fields, key=lambda f: f.offset):
        if f.offset < pos:
            raise RuntimeError(f"libkvstash: stats field {f.name!r} overlaps the one before it")
        if f.offset > pos:
            members.append((f"resv_{pos}", c_uint8 * (f.offset - pos)))
        ctype = c_char * f.size if f.type == _T_NAME else _CTYPES.get(f.type)
        if ctype is None or ctypes.sizeof(ctype) != f.size:
            raise RuntimeError(f"libkvstash: stats field {f.name!r} has an unknown type {f.type}")
        members.append((f.name.decode(), ctype))
        pos = f.offset + f.size
    if size > pos:
        members.append(("resv", c_uint8 * (size - pos)))
    # Packed: the offsets are the library's, not ctypes' idea of alignment.
    cls = type(name, (Structure,), {"_pack_": 1, "_fields_": members})
    if ctypes.sizeof(cls) != size:
        raise RuntimeError(f"libkvstash: {name} is {ctypes.sizeof(cls)} bytes, the library says {size}")
    return cls


def _stats_layouts() -> dict[int, _Layout]:
    """{message type: layout} of every stats group the library knows (built once)."""
    global _layouts
    if _layouts is not None:
        return _layouts
    with _layouts_lock:
        if _layouts is None:
            lib = _lib.lib()
            group_fn, field_fn = lib.kvs_stats_group, lib.kvs_stats_field
            group_fn.restype, group_fn.argtypes = c_int, [c_uint32, POINTER(_StatsGroup)]
            field_fn.restype, field_fn.argtypes = c_int, [c_uint32, c_uint32, POINTER(_StatsField)]
            out: dict[int, _Layout] = {}
            g = _StatsGroup()
            i = 0
            while group_fn(i, ctypes.byref(g)) == 0:
                fields = []
                for k in range(g.nr_fields):
                    f = _StatsField()
                    if field_fn(g.msg_type, k, ctypes.byref(f)) != 0:
                        raise RuntimeError(f"libkvstash: stats group {g.name!r} lost field {k}")
                    fields.append(f)
                key = g.name.decode()
                cls = _structure("Stats" + key.title(), g.size, fields)
                bools = frozenset(f.name.decode() for f in fields if f.type == _T_BOOL)
                out[g.msg_type] = _Layout(key, bool(g.flags & _STATS_GROUP_MANY), cls, bools)
                i += 1
            _layouts = out
    return _layouts


def _as_dict(s: ctypes.Structure, bools: set[str] | frozenset[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, _type in s._fields_:  # type: ignore[attr-defined]
        if name == "hdr" or name.startswith("resv"):
            continue
        v = getattr(s, name)
        if isinstance(v, bytes):
            v = v.decode(errors="replace")  # c_char arrays stop at the NUL
        elif isinstance(v, ctypes.Array):
            v = bytes(v)
        elif name in bools:
            v = bool(v)
        out[name] = v
    return out


def _request(socket_path: str | os.PathLike[str] | None, msg_type: int, op: str, timeout_ms: int,
             structs: dict[int, tuple[type[Structure], set[str] | frozenset[str]]]
             ) -> list[tuple[int, dict[str, Any]]]:
    replies: list[tuple[int, dict[str, Any]]] = []

    def on_reply(_arg: int | None, msg: int) -> int:
        hdr = _lib.MsgHdr.from_address(msg)
        cls, bools = structs.get(hdr.type, (None, set()))
        # libkvstash checked the size: ours, or longer from a newer daemon (ours come first).
        if cls is not None and hdr.size >= ctypes.sizeof(cls):
            raw = ctypes.string_at(msg, ctypes.sizeof(cls))
            replies.append((hdr.type, _as_dict(cls.from_buffer_copy(raw), bools)))
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
    """{"daemon": {...}, "sessions": [{...}, ...]} (struct kvs_msg_status_*),
    "registry": {...} (struct kvs_msg_stats_registry) from a kvstashd with [cluster],
    and "peer": {...} with "peers": [{...}, ...] (struct kvs_msg_stats_peer, _peer_info)
    from a kvstashd with a peer service ([cluster] peer_listen)."""
    out: dict[str, Any] = {"daemon": {}, "sessions": []}
    layouts = _stats_layouts()
    structs = {t: (cls, _BOOLS) for t, cls in _lib.ADMIN_STRUCTS.items()}
    # Stats groups may come with the status (the registry's, the peer service's and its peers).
    structs.update({t: (g.cls, g.bools) for t, g in layouts.items()})
    for t, d in _request(socket_path, _lib.MSG_STATUS, "status", timeout_ms, structs):
        if t == _lib.MSG_STATUS_DAEMON:
            out["daemon"] = d
        elif t == _lib.MSG_STATUS_SESSION:
            out["sessions"].append(d)
        elif t in layouts and layouts[t].many:
            out.setdefault(layouts[t].key, []).append(d)
        elif t in layouts:
            out[layouts[t].key] = d
    # The service's peers: a list, empty when it has none.
    if "peer" in out:
        out.setdefault("peers", [])
    return out


def stats(socket_path: str | os.PathLike[str] | None = None, *, timeout_ms: int = 5000) -> dict[str, Any]:
    """{"global": {...}, "nodes": [...], "sessions": [...]}: one key per stats group
    (struct kvs_msg_stats_*), a list for a group of many messages, a dict for a
    group of one, present when kvstashd sent it: "global" always, "registry" from
    a kvstashd with [cluster], "ssd" from a kvstashd with [ssd] (its drives in
    "ssd_drives", a list that is empty without [ssd]), "peer" from a kvstashd with
    a peer service ([cluster] peer_listen; its peers in "peers", a list that is
    empty without)."""
    layouts = _stats_layouts()
    out: dict[str, Any] = {g.key: [] if g.many else None for g in layouts.values()}
    structs = {t: (g.cls, g.bools) for t, g in layouts.items()}
    for t, d in _request(socket_path, _lib.MSG_STATS, "stats", timeout_ms, structs):
        g = layouts[t]
        if g.many:
            out[g.key].append(d)
        else:
            out[g.key] = d
    # In the groups' order, without the groups of one message that did not come.
    return {k: v for k, v in out.items() if v is not None}
