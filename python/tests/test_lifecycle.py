# SPDX-License-Identifier: MIT
"""Session lifetime: context-manager cleanup, kvstashd death, reconnect."""

from __future__ import annotations

import threading
import time

import pytest

import kvstash
from conftest import make_keys


def _session_ids(socket_path: str) -> set[int]:
    return {s["session_id"] for s in kvstash.status(socket_path)["sessions"]}


def test_leaving_the_with_block_ends_the_session(daemon):
    with kvstash.Client(daemon.socket, instance="cm", namespace="py/cm") as c:
        sid = c.session_id
        assert sid in _session_ids(daemon.socket)
    assert c.closed
    # kvstashd tears a session down on its control thread: allow it a moment.
    deadline = time.monotonic() + 10
    while sid in _session_ids(daemon.socket) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sid not in _session_ids(daemon.socket)


def test_an_exception_in_the_with_block_still_closes(daemon):
    with pytest.raises(RuntimeError):
        with kvstash.Client(daemon.socket, instance="cm", namespace="py/cm") as c:
            raise RuntimeError("engine failed")
    assert c.closed


def test_kvstashd_death_mid_wait_is_connection_lost_at_once(worker, daemon):
    """SIGKILL while an operation is in flight (kvstashd stopped, so it cannot
    answer first): the waiter gets ConnectionLost, not a hang."""
    c = worker.client
    daemon.freeze()
    op = c.nop()
    killed_at: list[float] = []

    def kill() -> None:
        time.sleep(0.2)  # let the main thread block in the wait first
        daemon.kill()  # SIGKILL and reap: the socket is closed from here on
        killed_at.append(time.monotonic())

    killer = threading.Thread(target=kill)
    killer.start()
    try:
        # Generous, so that only a missed death (a hang) fails this wait.
        with pytest.raises(kvstash.ConnectionLost) as e:
            op.wait(timeout=30)
        noticed = time.monotonic()
    finally:
        killer.join()
    assert e.value.op == "nop" and op.completion.local
    # libkvstash looks at the socket every KVS_DEATH_POLL_MS (20 ms); the
    # issue asks for well under a second after SIGKILL.
    assert noticed - killed_at[0] < 1.0
    assert not c.connected
    # Later submissions complete at once with the same error.
    with pytest.raises(kvstash.ConnectionLost):
        c.save(make_keys(1), [0]).wait(timeout=5)


def test_reconnect_after_a_restart_registers_again(worker, daemon):
    c = worker.client
    keys = make_keys(2)
    for b in range(2):
        worker.fill(b, seed=b + 1)
    daemon.kill()
    with pytest.raises(kvstash.ConnectionLost):
        c.nop().wait(timeout=10)
    daemon.start()  # same socket, empty pool
    c.reconnect()
    assert c.connected
    assert c.save(keys, [0, 1]).wait(timeout=10) == (2, 0)  # registration was resent
    c.flush().wait(timeout=10)
    assert c.query(keys, lease=False).wait(timeout=10).hits == 2
