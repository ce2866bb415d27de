# SPDX-License-Identifier: MIT
"""What the vLLM tests share: the hash seed vLLM needs, and waiting on kvstashd's lease count.

A test module takes the fixture by importing it (pytest finds fixtures
among a module's names): `from vllm_common import hash_seed  # noqa: F401`.
"""

from __future__ import annotations

import time

import pytest

import kvstash


@pytest.fixture(autouse=True)
def hash_seed(monkeypatch):
    """vLLM's block hashes, and so kvstash's keys, agree across processes only with PYTHONHASHSEED set."""
    monkeypatch.setenv("PYTHONHASHSEED", "0")


def live_leases(daemon) -> int:
    return kvstash.stats(daemon.socket)["global"]["leases_live"]


def leases_become(daemon, want: int, timeout: float = 10.0) -> bool:
    """Does kvstashd's live-lease count reach @want within @timeout?

    A RELEASE is an SQE like any other: the connector submits it and goes
    on, so the count drops once kvstashd has taken it, not at once."""
    deadline = time.monotonic() + timeout
    while live_leases(daemon) != want:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.005)
    return True
