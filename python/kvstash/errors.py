# SPDX-License-Identifier: MIT
"""Exceptions: one class per thing an engine reacts to differently.

libkvstash and kvstashd report failures as -errno (see abi.h).  An engine
rarely cares about the number itself; it cares whether to recompute
(ConnectionLost, NoSpace), fix its code (InvalidArgument), retry later
(Busy) or wait for its other ranks (NotSealed).  So each errno maps to a
subclass of KvstashError, which still carries .errno and .op.

KvstashError is an OSError, and the subclasses also derive from the builtin
exception that matches (ConnectionLost is a ConnectionResetError, Timeout a
TimeoutError, InvalidArgument a ValueError), so generic handlers keep working.
"""

from __future__ import annotations

import errno as _errno

from . import _lib

# kvstashd's "instance not sealed" (abi.h: KVS_EUNSEALED = EUNATCH).
EUNSEALED = _errno.EUNATCH


class KvstashError(OSError):
    """A failed kvstash operation.

    Attributes: errno (positive), op (the operation: "save", "query",
    "connect", ...), message (why, for humans; includes libkvstash's log line
    when it gave one).
    """

    def __init__(self, err: int, op: str, message: str | None = None) -> None:
        err = abs(err)
        self.op = op
        self.message = message or _lib.strerror(err)
        super().__init__(err, self.message)

    def __str__(self) -> str:
        name = _errno.errorcode.get(self.errno, str(self.errno))
        return f"{self.op}: {self.message} ({name})"

    def __reduce__(self):  # keep pickling (multiprocessing) working
        return (type(self), (self.errno, self.op, self.message))


class ConnectionLost(KvstashError, ConnectionResetError):
    """kvstashd went away (ECONNRESET): recompute, then Client.reconnect()."""


class DaemonUnavailable(KvstashError, ConnectionRefusedError):
    """No kvstashd listens on the socket (ENOENT / ECONNREFUSED at connect)."""


class NotSealed(KvstashError):
    """No memory registered yet, or the instance lacks ranks (KVS_EUNSEALED)."""


class LeaseNotFound(KvstashError):
    """Unknown, expired or fully consumed lease (ENOENT)."""


class LeaseAlreadyUsed(KvstashError):
    """This rank already loaded from the lease (EALREADY)."""


class InvalidArgument(KvstashError, ValueError):
    """Malformed request: bad sizes, block id out of range, too many keys
    (EINVAL, ERANGE, E2BIG, EFAULT, EOVERFLOW, ENOTUNIQ)."""


class NoSpace(KvstashError):
    """The pool is full of blocks that cannot be evicted (ENOSPC)."""


class PermissionDenied(KvstashError, PermissionError):
    """Not allowed for this role, socket allow-list, or another instance's
    lease (EPERM, EACCES)."""


class Busy(KvstashError):
    """A limit is reached: leases of the instance, sessions, registration in
    use (EBUSY, EUSERS)."""


class LayoutMismatch(KvstashError):
    """The layout or tensor-parallel shape differs from the instance's or
    the namespace's (EXDEV)."""


class ProtocolMismatch(KvstashError):
    """kvstashd speaks another wire revision (EPROTONOSUPPORT)."""


class Timeout(KvstashError, TimeoutError):
    """No answer in time (ETIMEDOUT); for Operation.wait() only the wait
    ended, not the operation."""


class CopyFailed(KvstashError):
    """A copy failed in kvstashd (EIO)."""


class Cancelled(KvstashError):
    """The session is shutting down or the client was closed (ECANCELED)."""


class NotSupported(KvstashError):
    """Unsupported here: unknown opcode, no CUDA driver or library built
    without CUDA (EOPNOTSUPP, ENODEV, ENOSYS)."""


_BY_ERRNO: dict[int, type[KvstashError]] = {
    _errno.ECONNRESET: ConnectionLost,
    _errno.EPIPE: ConnectionLost,
    EUNSEALED: NotSealed,
    _errno.ENOENT: LeaseNotFound,
    _errno.EALREADY: LeaseAlreadyUsed,
    _errno.EINVAL: InvalidArgument,
    _errno.ERANGE: InvalidArgument,
    _errno.E2BIG: InvalidArgument,
    _errno.EFAULT: InvalidArgument,
    _errno.EOVERFLOW: InvalidArgument,
    _errno.ENOTUNIQ: InvalidArgument,
    _errno.ENOSPC: NoSpace,
    _errno.EPERM: PermissionDenied,
    _errno.EACCES: PermissionDenied,
    _errno.EBUSY: Busy,
    _errno.EUSERS: Busy,
    _errno.EXDEV: LayoutMismatch,
    _errno.EPROTONOSUPPORT: ProtocolMismatch,
    _errno.ETIMEDOUT: Timeout,
    _errno.EIO: CopyFailed,
    _errno.ECANCELED: Cancelled,
    _errno.EOPNOTSUPP: NotSupported,
    _errno.ENODEV: NotSupported,
    _errno.ENOSYS: NotSupported,
}

# At connect time ENOENT means "no socket", not "no lease".
_CONNECT: dict[int, type[KvstashError]] = {
    _errno.ENOENT: DaemonUnavailable,
    _errno.ECONNREFUSED: DaemonUnavailable,
}


# What an errno means in a CQE (abi.h), where strerror() would mislead
# ("No such file or directory" for an unknown lease).
_DATA_PATH = {
    _errno.ENOENT: "unknown, expired or fully consumed lease",
    _errno.EALREADY: "this rank already loaded from the lease",
    _errno.ERANGE: "a block id is beyond the registered num_blocks",
    _errno.E2BIG: "more keys than the session's max_keys, or than its argument area holds",
    _errno.ENOSPC: "the pool is full of blocks that cannot be evicted",
    _errno.EBUSY: "the instance's lease limit is reached",
    _errno.EACCES: "the lease belongs to another instance",
    _errno.EPERM: "not allowed for this session's role",
    _errno.EFAULT: "arguments outside the argument area",
    _errno.EIO: "a copy failed in kvstashd",
    _errno.ECANCELED: "the session is shutting down",
}
_DATA_OPS = frozenset({"nop", "save", "query", "load", "release", "flush"})


def error_for(err: int, op: str, message: str | None = None) -> KvstashError:
    """The exception for -errno (or errno) @err from operation @op."""
    err = abs(err)
    cls = None
    if op in ("connect", "reconnect", "status", "stats"):
        cls = _CONNECT.get(err)
    cls = cls or _BY_ERRNO.get(err, KvstashError)
    if message is None and op in _DATA_OPS:
        message = _DATA_PATH.get(err)
    return cls(err, op, message)


__all__ = [
    "KvstashError",
    "ConnectionLost",
    "DaemonUnavailable",
    "NotSealed",
    "LeaseNotFound",
    "LeaseAlreadyUsed",
    "InvalidArgument",
    "NoSpace",
    "PermissionDenied",
    "Busy",
    "LayoutMismatch",
    "ProtocolMismatch",
    "Timeout",
    "CopyFailed",
    "Cancelled",
    "NotSupported",
    "EUNSEALED",
    "error_for",
]
