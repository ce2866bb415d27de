# SPDX-License-Identifier: MIT
"""The engine's session with kvstashd: connect, register, submit, reap.

A thin layer over libkvstash's ring API.  Every operation method prepares
one SQE, submits it (one kvs_submit per call, or one per batch() block) and
returns an Operation: a future-like handle completed from the CQE.  Handles
complete in whatever order kvstashd finishes the work; reaping one
completes all that have arrived (Client.poll), so waiting on any handle
makes progress for all of them.

Keys and block ids are packed with bytes.join and array('I'), so a batch of
thousands of blocks costs a few C-level copies, not a Python loop per key.
"""

from __future__ import annotations

import array
import ctypes
import errno
import itertools
import logging
import mmap
import os
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass
from typing import Any, Callable, NamedTuple, Union

from . import _lib
from .errors import Busy, Cancelled, InvalidArgument, KvstashError, NoSpace, Timeout, error_for

log = logging.getLogger("kvstash")

_LEVELS = {
    _lib.LOG_ERR: logging.ERROR,
    _lib.LOG_WARNING: logging.WARNING,
    _lib.LOG_INFO: logging.INFO,
    _lib.LOG_DEBUG: logging.DEBUG,
}

# Longest single sleep in libkvstash while a Python thread waits: short, so
# that Ctrl-C and other threads (who need the client's lock) get a turn.
_WAIT_SLICE_MS = 50

KeysLike = Union[bytes, bytearray, memoryview, Sequence[bytes]]
IdsLike = Union[Sequence[int], "array.array[int]"]
LayerRange = Union[None, range, tuple[int, int]]


# ---- results --------------------------------------------------------------


class SaveResult(NamedTuple):
    """SAVE: blocks copied into the pool, and blocks skipped (already resident)."""

    stored: int
    skipped: int


class _QueryHits(NamedTuple):
    hits: int
    lease: int


class QueryResult(_QueryHits):
    """QUERY: the resident prefix length and the lease pinning it (0: none).

    hits spans kvstashd's DRAM and its SSD tier; pending (an attribute, not
    a tuple field, so `hits, lease = result` keeps working) is how many of
    them were still being read from SSD when the QUERY completed: a load()
    of them waits for those reads, and loads fewer blocks if one fails.
    0 without [ssd], with lease=False and with dram_only=True.

    How long the lease lives unless loaded or released is the operation's
    completion.result1 (milliseconds).
    """

    pending: int = 0  # what _make() and tuple-level copies get

    def __new__(cls, hits: int, lease: int, pending: int = 0) -> QueryResult:
        self = super().__new__(cls, hits, lease)
        self.pending = pending
        return self

    def _replace(self, **kw: object) -> QueryResult:
        pending = kw.pop("pending", self.pending)
        return QueryResult(*super()._replace(**kw), pending=pending)  # type: ignore[misc]

    def __getnewargs__(self) -> tuple[int, int, int]:
        return (self.hits, self.lease, self.pending)

    def __repr__(self) -> str:
        return f"QueryResult(hits={self.hits}, lease={self.lease}, pending={self.pending})"

    def __eq__(self, other: object) -> bool:
        # Another result compares pending too; a plain (hits, lease) tuple does not.
        if isinstance(other, QueryResult) and self.pending != other.pending:
            return False
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


class ClusterHolder(NamedTuple):
    """Another node holding the @blocks keys after a cluster QUERY's local hits."""

    node: str
    addr: str  # its peer address; "" if none
    epoch: int  # of its registry lease
    blocks: int


class ClusterAnswer(NamedTuple):
    """The cluster part of a cluster QUERY (struct kvs_cluster_answer).

    It covers the keys after the local hits: best is the longest run of
    them one other node holds, holders the nodes (best first).  status 0,
    or -ENOTCONN / -ETIMEDOUT / -ESHUTDOWN / -EPROTO: local hits only.
    """

    status: int
    best: int
    holders: tuple[ClusterHolder, ...]
    round_trips: int


class _ClusterQueryHits(NamedTuple):
    hits: int
    lease: int
    cluster: ClusterAnswer


class ClusterQueryResult(_ClusterQueryHits):
    """Cluster QUERY: the local hits and their lease, and the cluster answer;
    pending as in QueryResult (an attribute, not a tuple field)."""

    pending: int = 0  # what _make() and tuple-level copies get

    def __new__(cls, hits: int, lease: int, cluster: ClusterAnswer,
                pending: int = 0) -> ClusterQueryResult:
        self = super().__new__(cls, hits, lease, cluster)
        self.pending = pending
        return self

    def _replace(self, **kw: object) -> ClusterQueryResult:
        pending = kw.pop("pending", self.pending)
        return ClusterQueryResult(*super()._replace(**kw), pending=pending)  # type: ignore[misc]

    def __getnewargs__(self) -> tuple[int, int, ClusterAnswer, int]:
        return (self.hits, self.lease, self.cluster, self.pending)

    def __repr__(self) -> str:
        return (f"ClusterQueryResult(hits={self.hits}, lease={self.lease}, "
                f"cluster={self.cluster!r}, pending={self.pending})")

    def __eq__(self, other: object) -> bool:
        if isinstance(other, ClusterQueryResult) and self.pending != other.pending:
            return False
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__


class ClusterFlushResult(NamedTuple):
    """Cluster FLUSH: the session's registrations (its instance's with
    FLUSH_INSTANCE) delivered and dropped since its previous cluster FLUSH."""

    registered: int
    dropped: int


class Completion(NamedTuple):
    """A CQE as kvstashd (or, with local=True, libkvstash) posted it;
    cluster: the checked answer of a cluster QUERY (kvs_cqe_cluster), else None."""

    res: int
    flags: int
    result0: int
    result1: int
    cluster: ClusterAnswer | None = None

    @property
    def local(self) -> bool:
        return bool(self.flags & _lib.CQE_LOCAL)

    @property
    def pending(self) -> int:
        """A QUERY's hits still being read from SSD (KVS_CQE_PENDING(flags))."""
        return _lib.cqe_pending(self.flags)


@dataclass(frozen=True)
class SessionInfo:
    """Facts from kvstashd's HELLO reply: the session's limits."""

    session_id: int
    sq_entries: int
    cq_entries: int
    arg_bytes: int
    max_keys: int
    max_inflight: int
    max_layers: int
    lease_ttl_ms: int
    daemon_rev: tuple[int, int]


class Operation:
    """A submitted operation; completes when its CQE is reaped.

    done() reaps without blocking; wait()/result() block until this
    operation completes (completing any other operation whose CQE arrives
    meanwhile) and return its result or raise its KvstashError.
    """

    __slots__ = ("op", "user_data", "fence", "_client", "_convert", "_completion", "_submitted")

    def __init__(self, client: Client, op: str, user_data: int, convert: Callable[[Completion], Any]):
        self.op = op
        self.user_data = user_data
        # save_after() and load(progress=True): its Fence; else None.
        self.fence: Fence | None = None
        self._client = client
        self._convert = convert
        self._completion: Completion | None = None
        self._submitted = False

    def __repr__(self) -> str:
        state = "pending" if self._completion is None else f"res={self._completion.res}"
        return f"<kvstash.Operation {self.op} #{self.user_data} {state}>"

    @property
    def completion(self) -> Completion | None:
        """The raw CQE once complete (e.g. result0 = bytes copied by a LOAD)."""
        return self._completion

    def done(self) -> bool:
        """True once completed; reaps arrived completions first (never blocks)."""
        if self._completion is None and self._submitted:
            self._client.poll()
        return self._completion is not None

    def wait(self, timeout: float | None = None) -> Any:
        """Block until complete (timeout in seconds, None: for ever); return result().

        Raises Timeout when the wait ends first: the operation itself is
        still pending and can be waited for again.
        """
        if self._completion is None:
            self._client._wait_for(self, timeout)
        return self.result()

    def result(self, timeout: float | None = None) -> Any:
        """The operation's result, waiting for it if needed; raises its error."""
        if self._completion is None:
            return self.wait(timeout)
        res = self._completion.res
        if res < 0:
            raise error_for(res, self.op)
        return self._convert(self._completion)

    def exception(self, timeout: float | None = None) -> KvstashError | None:
        """The error the operation failed with, or None (waits like result())."""
        if self._completion is None:
            self._client._wait_for(self, timeout)
        assert self._completion is not None
        res = self._completion.res
        return error_for(res, self.op) if res < 0 else None

    def _complete(self, c: Completion) -> None:
        self._completion = c


def _stream_handle(stream: Any) -> int | None:
    """A CUDA stream as libkvstash takes it: a torch.cuda.Stream (its
    cuda_stream), a raw handle (int), or None / 0 for the legacy default
    stream."""
    if stream is None:
        return None
    handle = getattr(stream, "cuda_stream", stream)
    if not isinstance(handle, int):
        raise InvalidArgument(errno.EINVAL, "stream", f"not a CUDA stream: {stream!r}")
    return handle or None


def _save_args(keys: KeysLike, block_ids: IdsLike, op: str) -> tuple[Any, int, int, Any]:
    """A SAVE's packed keys, the address of its packed block ids and their
    count, and the ids' array (keep it alive until the SQE is prepared)."""
    data, n = pack_keys(keys, op)
    ids = pack_ids(block_ids, op)
    if len(ids) != n:
        raise InvalidArgument(errno.EINVAL, op, f"{n} keys but {len(ids)} block ids")
    return data, ids.buffer_info()[0], n, ids


class Fence:
    """The fence slot of a SAVE AFTER or a LOAD PROGRESS (libkvstash(3),
    STREAM ORDERING).  Valid until its operation completed; after a
    reconnect its calls raise ConnectionReset and enqueue nothing.

    A SAVE's: signal(stream) enqueues on @stream the write that lets the
    SAVE copy (after the KV the stream's work before it wrote);
    signal_host() does it from the CPU.  A LOAD's: wait(i, stream)
    enqueues on @stream a wait until layer i of the LOAD's range (0: its
    first) is in GPU memory; done(i) asks from the host; status() is
    (status, blocks) as kvstashd (or, after its death, libkvstash) wrote
    them; device_ptr() the slot's address for kernels (struct kvs_fence).
    """

    __slots__ = ("_client", "ref", "kind")

    def __init__(self, client: Client, ref: _lib.FenceRef, kind: str) -> None:
        self._client = client
        self.ref = ref
        self.kind = kind

    def __repr__(self) -> str:
        return f"<kvstash.Fence {self.kind} slot {self.ref.slot} values {self.ref.base}+{self.ref.count}>"

    @property
    def count(self) -> int:
        """Values it has: 1 for a SAVE, its layers for a LOAD."""
        return int(self.ref.count)

    def _call(self, op: str, fn: Callable[[int], int]) -> int:
        with self._client._lock:
            r = fn(self._client._handle())
        if r < 0:
            raise error_for(r, op)
        return r

    def signal(self, stream: Any = None) -> None:
        h = _stream_handle(stream)
        lib = self._client._lib
        self._call("fence signal", lambda c: lib.kvs_fence_signal(c, ctypes.byref(self.ref), h))

    def signal_host(self) -> None:
        lib = self._client._lib
        self._call("fence signal", lambda c: lib.kvs_fence_signal_host(c, ctypes.byref(self.ref)))

    def wait(self, i: int, stream: Any = None) -> None:
        h = _stream_handle(stream)
        lib = self._client._lib
        self._call("fence wait", lambda c: lib.kvs_fence_wait(c, ctypes.byref(self.ref), i, h))

    def done(self, i: int = 0) -> bool:
        lib = self._client._lib
        return bool(self._call("fence done",
                               lambda c: lib.kvs_fence_done(c, ctypes.byref(self.ref), i, None, None)))

    def status(self) -> tuple[int, int]:
        st, blocks = ctypes.c_int32(), ctypes.c_uint32()
        lib = self._client._lib
        self._call("fence status", lambda c: lib.kvs_fence_done(c, ctypes.byref(self.ref), 0,
                                                                ctypes.byref(st), ctypes.byref(blocks)))
        return st.value, blocks.value

    def device_ptr(self) -> int:
        d = ctypes.c_uint64()
        lib = self._client._lib
        self._call("fence device_ptr", lambda c: lib.kvs_fence_device_ptr(c, ctypes.byref(self.ref),
                                                                          ctypes.byref(d)))
        return d.value


# ---- memory and layers ----------------------------------------------------


class HostMemory:
    """Shareable host memory for a CPU engine's KV cache (kvs_host_alloc).

    A memfd sealed against shrinking (kvstashd refuses memory that could
    shrink under its copies).  .buffer is an mmap of it: it supports the
    buffer protocol and slicing, and it refuses to be closed while views of
    it exist, so close() can never leave a dangling view behind.
    """

    def __init__(self, size: int) -> None:
        if size <= 0:
            raise InvalidArgument(errno.EINVAL, "host_alloc", "size must be positive")
        fd = ctypes.c_int(-1)
        ptr = ctypes.c_void_p()
        r = _lib.lib().kvs_host_alloc(size, ctypes.byref(fd), ctypes.byref(ptr))
        if r < 0:
            raise error_for(r, "host_alloc")
        # The library's own mapping is not needed: Python maps the memfd
        # itself so that the mapping's lifetime follows its buffer exports.
        _lib.lib().kvs_host_free(-1, ptr, size)
        self.size = size
        self.fd: int = fd.value
        try:
            self.buffer = mmap.mmap(self.fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except BaseException:
            os.close(self.fd)
            raise

    @property
    def address(self) -> int:
        """Where the memory is mapped in this process (for wrapping it, e.g. as a tensor)."""
        anchor = ctypes.c_char.from_buffer(self.buffer)  # a buffer export, dropped at once
        try:
            return ctypes.addressof(anchor)
        finally:
            del anchor

    def view(self) -> memoryview:
        """A writable memoryview of the whole allocation (release it before close())."""
        return memoryview(self.buffer)

    def close(self) -> None:
        """Unmap and close.  BufferError while memoryviews of it are alive."""
        if self.fd < 0:
            return
        self.buffer.close()
        os.close(self.fd)
        self.fd = -1

    def __enter__(self) -> HostMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        # Views may outlive this object (they keep the mmap alive): drop
        # what is ours, the fd, whatever happens to the mapping.
        if getattr(self, "fd", -1) < 0:
            return
        try:
            self.buffer.close()
        except Exception:
            pass
        os.close(self.fd)
        self.fd = -1

    def __len__(self) -> int:
        return self.size


@dataclass(frozen=True)
class Layer:
    """One layer's view into a HostMemory (see struct kvs_wire_layer).

    Segment s of block b lies at offset + b * block_stride + s * kv_stride
    and is segment_bytes long.  Page-first fused layout: one memory for all
    layers, segments=1, block_stride = the bytes of all layers of one block,
    offset = the layer's place in the block.  Layer-first split K/V: one
    memory per layer, segments=2, kv_stride = num_blocks * block_stride.
    """

    name: str
    memory: HostMemory
    _: KW_ONLY
    num_blocks: int
    segment_bytes: int
    block_stride: int
    offset: int = 0
    segments: int = 1
    kv_stride: int = 0


@dataclass(frozen=True)
class CudaLayer:
    """A layer given by device pointer (struct kvs_cuda_layer); see Layer."""

    name: str
    base: int
    _: KW_ONLY
    num_blocks: int
    segment_bytes: int
    block_stride: int
    segments: int = 1
    kv_stride: int = 0


def page_first_layers(
    memory: HostMemory, names: int | Sequence[str], num_blocks: int, layer_bytes: int, *, offset: int = 0
) -> list[Layer]:
    """Layers of a page-first fused cache: block b holds every layer, layer l at l * layer_bytes."""
    names = [f"layers.{i}" for i in range(names)] if isinstance(names, int) else list(names)
    stride = len(names) * layer_bytes
    return [
        Layer(n, memory, offset=offset + i * layer_bytes, num_blocks=num_blocks,
              segment_bytes=layer_bytes, block_stride=stride)
        for i, n in enumerate(names)
    ]


def split_kv_layers(
    memories: Sequence[HostMemory], names: Sequence[str] | None, num_blocks: int, segment_bytes: int
) -> list[Layer]:
    """Layers of a layer-first split K/V cache: one memory per layer, all K blocks then all V blocks."""
    names = list(names) if names is not None else [f"layers.{i}" for i in range(len(memories))]
    if len(names) != len(memories):
        raise InvalidArgument(errno.EINVAL, "register", "one name per memory")
    return [
        Layer(n, m, num_blocks=num_blocks, segment_bytes=segment_bytes, block_stride=segment_bytes,
              segments=2, kv_stride=num_blocks * segment_bytes)
        for n, m in zip(names, memories)
    ]


# ---- argument packing -------------------------------------------------------


def pack_keys(keys: KeysLike, op: str = "keys") -> tuple[bytes, int]:
    """Keys as one bytes object and their count.

    Accepts a sequence of 16-byte bytes objects, or the keys already packed
    back to back (a bytes-like object whose length is a multiple of 16).
    """
    if isinstance(keys, (bytes, bytearray, memoryview)):
        data = bytes(keys)
        if not data or len(data) % _lib.KEY_SIZE:
            raise InvalidArgument(
                errno.EINVAL, op, f"packed keys must be a non-empty multiple of {_lib.KEY_SIZE} bytes"
            )
        return data, len(data) // _lib.KEY_SIZE
    if not isinstance(keys, (list, tuple)):
        keys = list(keys)
    if not keys:
        raise InvalidArgument(errno.EINVAL, op, "no keys")
    if isinstance(keys[0], str) or set(map(len, keys)) != {_lib.KEY_SIZE}:
        raise InvalidArgument(errno.EINVAL, op, f"every key must be {_lib.KEY_SIZE} bytes")
    return b"".join(keys), len(keys)


def pack_ids(ids: IdsLike, op: str = "block ids") -> array.array:
    """Block ids as a C array of uint32 (no copy when given one)."""
    if isinstance(ids, array.array) and ids.typecode == "I" and ids.itemsize == 4:
        return ids
    try:
        out = array.array("I", ids)
    except OverflowError:
        raise InvalidArgument(errno.ERANGE, op, "block ids must lie in 0 .. 2**32 - 1") from None
    assert out.itemsize == 4
    return out


def _layer_range(layers: LayerRange, op: str) -> tuple[int, int]:
    if layers is None:
        return 0, 0
    if isinstance(layers, range):
        if layers.step != 1 or len(layers) == 0:
            raise InvalidArgument(errno.EINVAL, op, "a layer range must be non-empty with step 1")
        return layers.start, len(layers)
    begin, count = layers
    if begin < 0 or count <= 0:
        raise InvalidArgument(errno.EINVAL, op, "layers=(begin, count) needs begin >= 0, count > 0")
    return begin, count


def _uuid_for(device: Any) -> tuple[int, bytes]:
    if device is None or device == "host":
        return _lib.DEVICE_HOST, bytes(16)
    if isinstance(device, (bytes, bytearray)):
        if len(device) != 16:
            raise InvalidArgument(errno.EINVAL, "connect", "a device UUID is 16 bytes")
        return _lib.DEVICE_CUDA, bytes(device)
    if isinstance(device, int) and not isinstance(device, bool):
        return _lib.DEVICE_CUDA, cuda_device_uuid(device)
    raise TypeError("device: None, 'host', a CUDA ordinal or a 16-byte UUID")


def cuda_device_uuid(ordinal: int) -> bytes:
    """The UUID of CUDA device @ordinal (as this process numbers devices)."""
    buf = (ctypes.c_uint8 * 16)()
    r = _lib.lib().kvs_cuda_device_uuid(ordinal, buf)
    if r < 0:
        raise error_for(r, "device_uuid")
    return bytes(buf)


# ---- the client ---------------------------------------------------------------


def _make_log_callback(messages: list[str]) -> Any:
    """libkvstash's log lines go to logging ("kvstash"); warnings and errors
    are also kept (the last 16) to explain the next failure."""

    def on_log(_arg: int | None, level: int, msg: bytes) -> None:
        text = msg.decode(errors="replace")
        if level <= _lib.LOG_WARNING:
            messages.append(text)
            del messages[:-16]
        log.log(_LEVELS.get(level, logging.INFO), "%s", text)

    return _lib.LogFn(on_log)


class Client:
    """A session with kvstashd.

    Client(socket_path=None, *, instance, namespace, ...) connects at once
    (socket_path None: $KVSTASH_SOCKET, else /run/kvstash/kvstash.sock).
    Use it as a context manager, or call close().

    Like libkvstash, a Client serves one thread at a time; it takes a lock
    around each library call, so several threads may share it, but they
    then take turns.
    """

    def __init__(
        self,
        socket_path: str | os.PathLike[str] | None = None,
        *,
        instance: str,
        namespace: str,
        tp_rank: int = 0,
        tp_size: int = 1,
        world_size: int | None = None,
        device: None | str | int | bytes = None,
        role: str = "worker",
        sq_entries: int = 0,
        arg_bytes: int = 0,
        timeout_ms: int = 5000,
        cluster: bool = False,
        wait_spin_us: int = 0,
        fences: bool = False,
    ) -> None:
        roles = {"worker": _lib.ROLE_WORKER, "scheduler": _lib.ROLE_SCHEDULER, "admin": _lib.ROLE_ADMIN}
        if role not in roles:
            raise InvalidArgument(errno.EINVAL, "connect", f"role must be one of {sorted(roles)}")
        self._c: int | None = None
        self._lock = threading.RLock()
        self._pending: dict[int, Operation] = {}
        self._unsubmitted: list[Operation] = []
        self._batch = 0
        self._ids = itertools.count(1)
        self._timeout = timeout_ms / 1000 if timeout_ms > 0 else 5.0
        self._lib = _lib.lib()
        # libkvstash keeps the callback pointer for the session's lifetime;
        # a closure over the message list (not a bound method) keeps the
        # client free of reference cycles.
        self._messages: list[str] = []
        self._log_cb = _make_log_callback(self._messages)

        kind, uuid = _uuid_for(device)
        o = _lib.ConnectOpts()
        self._lib.kvs_connect_opts_init(ctypes.byref(o))
        o.role = roles[role]
        o.tp_rank = tp_rank
        o.tp_size = tp_size
        o.world_size = world_size or 0
        o.device_kind = kind
        o.device_uuid[:] = list(uuid)
        self._instance = instance.encode() if instance is not None else None
        self._ns = namespace.encode() if namespace is not None else None
        o.instance = self._instance
        o.ns = self._ns
        o.sq_entries = sq_entries
        o.arg_bytes = arg_bytes
        o.timeout_ms = timeout_ms
        # How long libkvstash's waits poll the CQ before sleeping (0: its default, 50 us).
        o.wait_spin_us = wait_spin_us
        # KVS_CONNECT_CLUSTER: the answer area, so that query_cluster() may be used.
        # KVS_CONNECT_FENCES: the fence slots, so that save(stream=...),
        # save_after() and load(progress=True) may be used.
        o.flags = (_lib.CONNECT_CLUSTER if cluster else 0) | (_lib.CONNECT_FENCES if fences else 0)
        o.log = self._log_cb
        self.cluster = cluster
        self.fences = fences
        self.role = role
        self.instance = instance
        self.namespace = namespace
        self.socket_path = os.fspath(socket_path) if socket_path is not None else None
        handle = ctypes.c_void_p()
        path = self.socket_path.encode() if self.socket_path is not None else None
        mark = len(self._messages)
        r = self._lib.kvs_connect(path, ctypes.byref(o), ctypes.byref(handle))
        if r < 0:
            raise self._error(r, "connect", mark)
        self._c = handle.value

    # ---- plumbing ----------------------------------------------------------

    def _error(self, r: int, op: str, mark: int) -> KvstashError:
        """The error for -errno @r, with what libkvstash logged since @mark."""
        why = "; ".join(self._messages[mark:])
        return error_for(r, op, f"{_lib.strerror(r)}: {why}" if why else None)

    def _handle(self) -> int:
        if self._c is None:
            raise Cancelled(errno.ECANCELED, "client", "the client is closed")
        return self._c

    @property
    def closed(self) -> bool:
        return self._c is None

    # ---- session -------------------------------------------------------------

    def close(self) -> None:
        """Say goodbye and free the session; pending operations complete as Cancelled."""
        with self._lock:
            if self._c is None:
                return
            c, self._c = self._c, None
            self._lib.kvs_close(c)
            for opn in list(self._pending.values()) + self._unsubmitted:
                opn._complete(Completion(-errno.ECANCELED, _lib.CQE_LOCAL, 0, 0))
            self._pending.clear()
            self._unsubmitted.clear()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def reconnect(self) -> None:
        """New session after kvstashd restarted; registration is sent again."""
        with self._lock:
            mark = len(self._messages)
            r = self._lib.kvs_reconnect(self._handle())
            self._reap()  # the old session's operations, completed with ECONNRESET
            if r < 0:
                raise self._error(r, "reconnect", mark)

    @property
    def connected(self) -> bool:
        """False once libkvstash has seen kvstashd go away."""
        with self._lock:
            return self._c is not None and self._lib.kvs_connected(self._c) == 1

    @property
    def info(self) -> SessionInfo:
        """The session's id and limits."""
        s = _lib.SessionInfo()
        with self._lock:
            self._lib.kvs_session_info(self._handle(), ctypes.byref(s))
        return SessionInfo(s.session_id, s.sq_entries, s.cq_entries, s.arg_bytes, s.max_keys,
                           s.max_inflight, s.max_layers, s.lease_ttl_ms,
                           (s.daemon_rev_major, s.daemon_rev_minor))

    @property
    def session_id(self) -> int:
        return self.info.session_id

    @property
    def pending(self) -> int:
        """Operations submitted and not yet completed."""
        with self._lock:
            return len(self._pending) + len(self._unsubmitted)

    # ---- registration ------------------------------------------------------------

    def register(self, layers: Sequence[Layer], *, replicated: bool = False) -> None:
        """Register host-memory layers (workers; once per session)."""
        if not layers:
            raise InvalidArgument(errno.EINVAL, "register", "no layers")
        mems: list[HostMemory] = []
        index: dict[int, int] = {}
        for layer in layers:
            if id(layer.memory) not in index:
                if layer.memory.fd < 0:
                    raise InvalidArgument(errno.EINVAL, "register", f"layer {layer.name}: memory is closed")
                index[id(layer.memory)] = len(mems)
                mems.append(layer.memory)
        cmems = (_lib.Mem * len(mems))()
        for i, m in enumerate(mems):
            cmems[i].kind = _lib.MEM_HOST_FD
            cmems[i].fd = m.fd
            cmems[i].size = m.size
        names = [layer.name.encode() for layer in layers]
        clayers = (_lib.LayerDesc * len(layers))()
        for i, layer in enumerate(layers):
            clayers[i] = _lib.LayerDesc(names[i], index[id(layer.memory)], layer.segments, layer.offset,
                                        layer.num_blocks, layer.segment_bytes, layer.kv_stride,
                                        layer.block_stride)
        flags = _lib.REGISTER_REPLICATED if replicated else 0
        with self._lock:
            mark = len(self._messages)
            r = self._lib.kvs_register(self._handle(), cmems, len(mems), clayers, len(layers), flags)
            if r < 0:
                raise self._error(r, "register", mark)

    def register_cuda(self, layers: Sequence[CudaLayer], *, replicated: bool = False) -> None:
        """Register GPU layers by device pointer (kvs_register_cuda: each
        allocation is exported once).  See kvstash.torch.register_tensors."""
        if not layers:
            raise InvalidArgument(errno.EINVAL, "register", "no layers")
        names = [layer.name.encode() for layer in layers]
        clayers = (_lib.CudaLayerDesc * len(layers))()
        for i, layer in enumerate(layers):
            clayers[i] = _lib.CudaLayerDesc(names[i], layer.base, layer.segments, layer.num_blocks,
                                            layer.segment_bytes, layer.kv_stride, layer.block_stride)
        flags = _lib.REGISTER_REPLICATED if replicated else 0
        with self._lock:
            mark = len(self._messages)
            r = self._lib.kvs_register_cuda(self._handle(), clayers, len(layers), flags)
            if r < 0:
                raise self._error(r, "register", mark)

    def unregister(self) -> None:
        """Flush this session's saves, then drop its mappings (idempotent)."""
        with self._lock:
            mark = len(self._messages)
            r = self._lib.kvs_unregister(self._handle())
            if r < 0:
                raise self._error(r, "unregister", mark)

    # ---- submission --------------------------------------------------------------

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Submit every operation started inside the block with one kvs_submit."""
        with self._lock:
            self._batch += 1
            try:
                yield
            finally:
                self._batch -= 1
                if self._batch == 0:
                    self._submit()

    def _submit(self) -> None:
        if self._unsubmitted and self._c is not None:
            self._lib.kvs_submit(self._c)
            for opn in self._unsubmitted:
                opn._submitted = True
                self._pending[opn.user_data] = opn
            self._unsubmitted.clear()

    def _start(self, op: str, convert: Callable[[Completion], Any],
               prep: Callable[[int, int, int], int]) -> Operation:
        """Get an SQE, prepare it with @prep(client, sqe, user_data), submit.

        When the SQ, the in-flight limit or the argument area is full, make
        room by reaping (and, for up to the session timeout, waiting for)
        completions; fail only when nothing in flight could make room.
        """
        with self._lock:
            c = self._handle()
            user_data = next(self._ids)
            deadline = None
            while True:
                sqe = self._lib.kvs_get_sqe(c)
                r = prep(c, sqe, user_data) if sqe else -errno.EAGAIN
                if r == 0:
                    break
                if r not in (-errno.EAGAIN, -errno.ENOSPC):
                    raise error_for(r, op)
                # Full: what we prepared must go out before anything can drain.
                self._submit()
                if not self._pending:
                    cls = Busy if r == -errno.EAGAIN else NoSpace
                    raise cls(-r, op, "submission queue or argument area full with nothing in flight")
                deadline = deadline or time.monotonic() + self._timeout
                if time.monotonic() > deadline:
                    raise Busy(errno.EBUSY, op, "no room in the submission queue")
                self._wait_slice(_WAIT_SLICE_MS)
            opn = Operation(self, op, user_data, convert)
            self._unsubmitted.append(opn)
            if self._batch == 0:
                self._submit()
            return opn

    def nop(self) -> Operation:
        """A round trip through kvstashd; result None."""
        return self._start("nop", _none, lambda c, s, u: self._lib.kvs_prep_nop(c, s, u))

    def save(self, keys: KeysLike, block_ids: IdsLike, stream: Any = None) -> Operation:
        """Copy blocks @block_ids into the pool under @keys; result SaveResult.

        Completes when the copy out of engine memory is done (the blocks may
        then be reused).  Keys already resident are skipped.  With @stream
        (a torch.cuda.Stream or a raw handle; a Client(fences=True)) the
        copy waits on the GPU side for what that stream's work enqueued so
        far writes: no synchronize first (kvs_prep_save_stream).
        """
        data, addr, n, _ids = _save_args(keys, block_ids, "save")
        if stream is not None:
            h = _stream_handle(stream)
            return self._start("save", _save_result,
                               lambda c, s, u: self._lib.kvs_prep_save_stream(c, s, data, addr, n, h, u))
        return self._start("save", _save_result,
                           lambda c, s, u: self._lib.kvs_prep_save(c, s, data, addr, n, u))

    def save_after(self, keys: KeysLike, block_ids: IdsLike) -> Operation:
        """save() that copies nothing before its fence is signalled: the
        Operation's fence.signal(stream) or fence.signal_host(); result
        SaveResult (TimedOut when no signal came within kvstashd's [worker]
        save_wait_ms).  Needs a Client(fences=True)."""
        data, addr, n, _ids = _save_args(keys, block_ids, "save_after")
        ref = _lib.FenceRef()
        opn = self._start("save_after", _save_result,
                          lambda c, s, u: self._lib.kvs_prep_save_after(c, s, data, addr, n,
                                                                        ctypes.byref(ref), u))
        opn.fence = Fence(self, ref, "save")
        return opn

    def query(self, keys: KeysLike, req_id: int = 0, lease: bool = True,
              dram_only: bool = False) -> Operation:
        """Longest resident prefix of @keys; result QueryResult.

        With lease=True (default) the hits are pinned under a lease until
        loaded, released or expired; lease=False only counts.  The hits span
        kvstashd's DRAM and its SSD tier ([ssd]); SSD hits are read back at
        once, and the result's pending says how many still were when the
        QUERY completed.  dram_only=True (KVS_QUERY_DRAM) counts DRAM hits
        only: nothing slower than a copy from memory.
        """
        data, n = pack_keys(keys, "query")
        flags = _query_flags(lease, dram_only)
        return self._start("query", _query_result,
                           lambda c, s, u: self._lib.kvs_prep_query(c, s, data, n, req_id, flags, u))

    def query_cluster(self, keys: KeysLike, req_id: int = 0, lease: bool = True,
                      dram_only: bool = False) -> Operation:
        """query() that also asks the cluster registry who else holds the keys
        after the local hits; result ClusterQueryResult.

        Needs a Client(cluster=True) (InvalidArgument otherwise); a kvstashd
        without [cluster] fails it with NotSupported.
        """
        data, n = pack_keys(keys, "query_cluster")
        flags = _lib.QUERY_CLUSTER | _query_flags(lease, dram_only)
        return self._start("query_cluster", _cluster_query_result,
                           lambda c, s, u: self._lib.kvs_prep_query(c, s, data, n, req_id, flags, u))

    def query_fetch(self, keys: KeysLike, hint: str | None = None, req_id: int = 0,
                    lease: bool = True, dram_only: bool = False) -> Operation:
        """query() that first fetches the keys missing here from another
        kvstashd; result QueryResult over what is resident then.

        @hint is the node to fetch from, "ADDR:PORT" (its [cluster]
        peer_listen, as a prefill node tells its decode node); None asks the
        cluster registry for the holder.  The result comes within kvstashd's
        [cluster] fetch_timeout, with a shorter prefix (never an error) when
        the peer is gone or holds fewer: recompute the rest.  A kvstashd
        without a peer service fails it with NotSupported.
        """
        data, n = pack_keys(keys, "query_fetch")
        flags = _query_flags(lease, dram_only)
        h = None
        if hint is not None:
            h = hint.encode()
            if not h or len(h) >= _lib.FETCH_HINT_MAX or b"\0" in h:
                raise InvalidArgument(errno.EINVAL, "query_fetch",
                                      f"hint must be 1-{_lib.FETCH_HINT_MAX - 1} bytes")
        return self._start("query_fetch", _query_result,
                           lambda c, s, u: self._lib.kvs_prep_query_fetch(c, s, data, n, req_id,
                                                                          flags, h, u))

    def load(self, lease: int | QueryResult | ClusterQueryResult, block_ids: IdsLike,
             layers: LayerRange = None, progress: bool = False) -> Operation:
        """Copy the leased blocks (the first len(block_ids) of them) into
        @block_ids; result the number of blocks loaded.

        layers: None for all, range(begin, end), or (begin, count).
        progress=True (a Client(fences=True)): a LOAD PROGRESS, copied layer
        by layer; the Operation's fence.wait(i, stream) lets a stream wait
        for layer i of the range only (kvs_prep_load_progress).
        """
        lease_id = lease.lease if isinstance(lease, (QueryResult, ClusterQueryResult)) else lease
        ids = pack_ids(block_ids, "load")
        if not ids:
            raise InvalidArgument(errno.EINVAL, "load", "no block ids")
        begin, count = _layer_range(layers, "load")
        addr, n = ids.buffer_info()
        if not progress:
            return self._start("load", _load_result,
                               lambda c, s, u: self._lib.kvs_prep_load(c, s, lease_id, addr, n, begin, count, u))
        ref = _lib.FenceRef()
        opn = self._start("load", _load_result,
                          lambda c, s, u: self._lib.kvs_prep_load_progress(c, s, lease_id, addr, n, begin,
                                                                           count, ctypes.byref(ref), u))
        opn.fence = Fence(self, ref, "load")
        return opn

    def release(self, lease: int | QueryResult | ClusterQueryResult) -> Operation:
        """Drop a lease not used by a load; result None (LeaseNotFound if unknown)."""
        lease_id = lease.lease if isinstance(lease, (QueryResult, ClusterQueryResult)) else lease
        return self._start("release", _none,
                           lambda c, s, u: self._lib.kvs_prep_release(c, s, lease_id, u))

    def flush(self, instance: bool = False) -> Operation:
        """Barrier: saves submitted before are visible to QUERY; result the
        number of saves waited for.  instance=True: every session of the instance."""
        flags = _lib.FLUSH_INSTANCE if instance else 0
        return self._start("flush", _flush_result,
                           lambda c, s, u: self._lib.kvs_prep_flush(c, s, flags, u))

    def flush_cluster(self, instance: bool = False) -> Operation:
        """flush() that also waits until every registry change enqueued before
        it was delivered or dropped; result ClusterFlushResult.

        Timeout when kvstashd's flush deadline passed (the counts are then in
        the operation's completion.result0/result1); NotSupported without
        [cluster] in kvstashd.
        """
        flags = _lib.FLUSH_CLUSTER | (_lib.FLUSH_INSTANCE if instance else 0)
        return self._start("flush_cluster", _cluster_flush_result,
                           lambda c, s, u: self._lib.kvs_prep_flush(c, s, flags, u))

    # ---- completion ------------------------------------------------------------------

    def _take(self, cqe: ctypes._Pointer) -> None:  # type: ignore[name-defined]
        e = cqe.contents
        answer = None
        if e.flags & _lib.CQE_CLUSTER:
            # Only while this CQE is the one looked at: before kvs_cqe_seen().
            a = _lib.ClusterAnswer()
            if self._lib.kvs_cqe_cluster(self._c, cqe, ctypes.byref(a)) == 0:
                answer = _cluster_answer(a)
        comp = Completion(e.res, e.flags, e.result0, e.result1, answer)
        user_data = e.user_data
        self._lib.kvs_cqe_seen(self._c, cqe)
        opn = self._pending.pop(user_data, None)
        if opn is not None:
            opn._complete(comp)

    def _reap(self) -> int:
        n = 0
        cqe = _lib.CqePtr()
        while self._c is not None and self._lib.kvs_peek_cqe(self._c, ctypes.byref(cqe)) == 0:
            self._take(cqe)
            n += 1
        return n

    def poll(self) -> int:
        """Reap every arrived completion without blocking; returns how many."""
        with self._lock:
            if self._c is None:
                return 0
            self._submit()
            return self._reap()

    def _wait_slice(self, ms: int) -> None:
        """Sleep in libkvstash up to @ms for a completion, then reap (lock held)."""
        cqe = _lib.CqePtr()
        r = self._lib.kvs_wait_cqe(self._handle(), ctypes.byref(cqe), ms)
        if r == 0:
            self._take(cqe)
            self._reap()
        elif r == -errno.ECONNRESET:
            # kvstashd is gone and libkvstash has nothing left to hand out:
            # whatever we still track can never complete.
            for opn in list(self._pending.values()):
                opn._complete(Completion(-errno.ECONNRESET, _lib.CQE_LOCAL, 0, 0))
            self._pending.clear()

    def _wait_for(self, opn: Operation, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while opn._completion is None:
            with self._lock:
                if opn._completion is not None:
                    break
                if self._c is None:
                    opn._complete(Completion(-errno.ECANCELED, _lib.CQE_LOCAL, 0, 0))
                    break
                self._submit()
                ms = _WAIT_SLICE_MS
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise Timeout(errno.ETIMEDOUT, opn.op, f"not complete after {timeout} s")
                    ms = max(1, min(ms, int(left * 1000)))
                self._wait_slice(ms)

    def wait_all(self, ops: Iterable[Operation], timeout: float | None = None) -> list[Any]:
        """Wait for every operation; their results in order (first error raised)."""
        ops = list(ops)
        deadline = None if timeout is None else time.monotonic() + timeout
        for opn in ops:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if opn._completion is None:
                self._wait_for(opn, left)
        return [opn.result() for opn in ops]


def _none(_c: Completion) -> None:
    return None


def _save_result(c: Completion) -> SaveResult:
    return SaveResult(c.result0, c.result1)


def _query_flags(lease: bool, dram_only: bool) -> int:
    return (0 if lease else _lib.QUERY_NOLEASE) | (_lib.QUERY_DRAM if dram_only else 0)


def _query_result(c: Completion) -> QueryResult:
    return QueryResult(c.res, c.result0, c.pending)


def _load_result(c: Completion) -> int:
    return c.res


def _flush_result(c: Completion) -> int:
    return c.result0


def _cluster_answer(a: _lib.ClusterAnswer) -> ClusterAnswer:
    # libkvstash checked nr_holders and the names' NULs.
    holders = tuple(
        ClusterHolder(_lib.cstr(h.node), _lib.cstr(h.addr), h.epoch, h.blocks)
        for h in a.holders[: a.nr_holders]
    )
    return ClusterAnswer(a.status, a.best, holders, a.round_trips)


def _cluster_query_result(c: Completion) -> ClusterQueryResult:
    # A successful cluster QUERY always carries its answer (libkvstash makes it -EBADMSG otherwise).
    assert c.cluster is not None
    return ClusterQueryResult(c.res, c.result0, c.cluster, c.pending)


def _cluster_flush_result(c: Completion) -> ClusterFlushResult:
    return ClusterFlushResult(c.result0, c.result1)
