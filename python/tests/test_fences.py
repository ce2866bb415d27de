# SPDX-License-Identifier: MIT
"""Stream ordering through the binding (Client(fences=True)), host backend:
the CPU plays the engine's stream, signalling and polling from the host."""

from __future__ import annotations

import time

import pytest

import kvstash
from conftest import BLOCK, BLOCKS, LAYERS, SEG, make_keys

POISON = b"\xa5"


def test_save_after_waits_for_its_signal(worker_factory):
    w = worker_factory(instance="py-fence-save", fences=True)
    c = w.client
    n = 4
    keys = make_keys(n, salt=41)
    for b in range(n):
        w.fill(b, seed=1 + b)
    op = c.save_after(keys, range(n))
    assert isinstance(op.fence, kvstash.Fence) and op.fence.count == 1
    time.sleep(0.2)
    assert not op.done(), "a SAVE AFTER completed before its signal"
    want = [w.fill(b, seed=100 + b) for b in range(n)]  # written after the SAVE was submitted
    op.fence.signal_host()
    assert op.wait(timeout=10) == kvstash.SaveResult(stored=n, skipped=0)
    c.flush().wait()
    dst = list(range(BLOCKS - n, BLOCKS))
    assert c.load(c.query(keys).wait(), dst).wait() == n
    assert [w.block(b) for b in dst] == want


def test_load_progress_publishes_every_layer(worker_factory):
    w = worker_factory(instance="py-fence-load", fences=True)
    c = w.client
    n = 3
    keys = make_keys(n, salt=42)
    want = [w.fill(b, seed=7 + b) for b in range(n)]
    c.save(keys, range(n)).wait()
    dst = [10, 11, 12]
    op = c.load(c.query(keys).wait(), dst, layers=range(1, LAYERS), progress=True)
    assert op.fence.count == LAYERS - 1
    assert op.wait(timeout=10) == n
    assert all(op.fence.done(i) for i in range(LAYERS - 1))
    assert op.fence.status() == (0, n)
    for i, b in enumerate(dst):
        got, exp = w.block(b), want[i]
        assert got[SEG:] == exp[SEG:], f"block {b}: layers 1.. differ"
    with pytest.raises(kvstash.InvalidArgument):
        op.fence.done(LAYERS - 1)  # past the range


def test_refused_load_progress_is_released(worker_factory):
    w = worker_factory(instance="py-fence-refused", fences=True)
    c = w.client
    op = c.load(0xDEAD, [0, 1], progress=True)
    with pytest.raises(kvstash.LeaseNotFound):
        op.wait(timeout=10)
    assert op.fence.done(LAYERS - 1)
    status, blocks = op.fence.status()
    assert status < 0 and blocks == 0


def test_fences_need_the_flag(worker_factory):
    w = worker_factory(instance="py-fence-none")
    with pytest.raises(kvstash.InvalidArgument):
        w.client.save_after(make_keys(1, salt=43), [0])
    with pytest.raises(kvstash.InvalidArgument):
        w.client.load(1, [0], progress=True)


def test_layout_constants():
    assert BLOCK == LAYERS * SEG
