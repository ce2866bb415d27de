# SPDX-License-Identifier: MIT
"""A kvstash session that outlives kvstashd.

vLLM must keep serving while kvstashd is down or restarting: every
operation then costs only a cache miss.  Session holds the Client and,
once it has seen kvstashd go away (or never found it), tries to connect
again at most every reconnect_s seconds from the calls that need it, so
a missing daemon costs one poll(2) per call, not a connect per call.

A worker's registration is sent again on reconnect (libkvstash keeps it);
a worker that never reached kvstashd registers on its first connect.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from ..client import Client, Operation
from ..errors import ConnectionLost, DaemonUnavailable, KvstashError, LeaseNotFound
from .settings import Settings

log = logging.getLogger("kvstash.vllm")


class Session:
    def __init__(self, settings: Settings, *, role: str, tp_rank: int = 0, device: Any = None,
                 on_connect: Callable[[Client], None] | None = None) -> None:
        self.settings = settings
        self.role = role
        self.tp_rank = tp_rank
        self.device = device
        self._on_connect = on_connect
        self._client: Client | None = None
        self._next_try = 0.0
        self._down_logged = False

    @property
    def client(self) -> Client | None:
        """The client, connected or not (None before the first successful connect)."""
        return self._client

    def _open(self) -> Client:
        s = self.settings
        return Client(s.socket, instance=s.instance, namespace=s.namespace, tp_rank=self.tp_rank,
                      tp_size=s.tp_size, world_size=s.tp_size, device=self.device, role=self.role,
                      timeout_ms=s.timeout_ms)

    def connect(self) -> Client:
        """Connect now (and register, for workers); raises what Client raises."""
        c = self._open()
        try:
            if self._on_connect is not None:
                self._on_connect(c)
        except BaseException:
            c.close()
            raise
        self._client = c
        self._down_logged = False
        return c

    def start(self) -> None:
        """Connect if kvstashd is there; vLLM starts serving either way (ensure() retries)."""
        try:
            self.connect()
        except (ConnectionLost, DaemonUnavailable) as e:
            who = f"rank {self.tp_rank}" if self.role == "worker" else self.role
            log.warning("kvstash %s: kvstashd unavailable at start (%s); serving without it", who, e)
            self.lost(e)

    def ensure(self) -> Client | None:
        """A connected client, or None while kvstashd is away (then retried every reconnect_s)."""
        c = self._client
        if c is not None and c.connected:
            return c
        now = time.monotonic()
        if now < self._next_try:
            return None
        self._next_try = now + self.settings.reconnect_s
        try:
            if c is None:
                c = self.connect()
            else:
                c.reconnect()
        except (ConnectionLost, DaemonUnavailable) as e:
            if not self._down_logged:
                log.warning("kvstash %s: kvstashd unavailable (%s); serving without it, retrying every %g s",
                            self.role, e, self.settings.reconnect_s)
                self._down_logged = True
            return None
        except KvstashError as e:
            # Anything else (a refused HELLO or registration) will not mend by itself.
            log.error("kvstash %s: reconnect refused: %s", self.role, e)
            return None
        log.info("kvstash %s: connected to kvstashd (instance %s, namespace %s)", self.role,
                 self.settings.instance, self.settings.namespace)
        self._down_logged = False
        return c

    def lost(self, e: BaseException) -> None:
        """Note that an operation found kvstashd gone; the next ensure() may reconnect at once."""
        if not self._down_logged:
            log.warning("kvstash %s: kvstashd went away (%s); recomputing until it is back", self.role, e)
            self._down_logged = True
        self._next_try = 0.0

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


class Releases:
    """The scheduler's RELEASEs, sent without waiting: each completes at once and is reaped later."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._ops: list[Operation] = []

    def release(self, lease: int) -> None:
        c = self.session.client
        if not lease or c is None or c.closed:
            return
        try:
            self._ops.append(c.release(lease))
        except ConnectionLost as e:
            self.session.lost(e)       # the lease died with kvstashd
        except KvstashError as e:
            log.warning("kvstash: RELEASE of lease %#x not submitted: %s", lease, e)

    def reap(self) -> None:
        keep = []
        for op in self._ops:
            if not op.done():
                keep.append(op)
                continue
            e = op.exception()
            # ENOENT: consumed by the ranks' LOADs, or expired: nothing was left to drop.
            if e is not None and not isinstance(e, (LeaseNotFound, ConnectionLost)):
                log.warning("kvstash: RELEASE failed: %s", e)
        self._ops = keep


__all__ = ["Releases", "Session"]
