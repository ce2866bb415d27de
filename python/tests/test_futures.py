# SPDX-License-Identifier: MIT
"""Operation handles: done/wait/result/poll, batches, completion in any order."""

from __future__ import annotations

import threading

import pytest

import kvstash
from conftest import BLOCKS, make_keys


def test_done_wait_result_and_poll(worker):
    c = worker.client
    assert c.poll() == 0  # nothing in flight: returns at once
    op = c.nop()
    assert c.pending == 1
    op.wait(timeout=10)
    assert op.done() and c.pending == 0
    assert op.result() is None and op.wait() is None  # repeatable
    assert op.exception() is None
    assert "nop" in repr(op) and "res=0" in repr(op)

    ops = [c.nop() for _ in range(20)]
    reaped = 0
    while not all(o.done() for o in ops):
        reaped += c.poll()
    assert c.pending == 0
    assert all(o.result() is None for o in ops)


def test_a_failed_operation_raises_on_every_result(worker):
    op = worker.client.release(0xDEAD)
    err = op.exception(timeout=10)
    assert isinstance(err, kvstash.LeaseNotFound) and err.op == "release"
    for _ in range(2):
        with pytest.raises(kvstash.LeaseNotFound):
            op.result()
    assert op.done() and op.completion.res == -2


def test_each_handle_gets_its_own_completion_whatever_the_order(worker):
    """Many different operations in one batch, waited for newest first: each
    handle must carry the result of its own SQE (user_data mapping)."""
    c = worker.client
    for b in range(BLOCKS):
        worker.fill(b, seed=b)
    groups = [make_keys(n, salt=n) for n in range(1, 9)]
    with c.batch():
        saves = [c.save(keys, range(len(keys))) for keys in groups]
        assert c.pending == len(saves) and not any(s.done() for s in saves)  # not submitted yet
    flush = c.flush()
    flush.wait(timeout=10)
    with c.batch():
        # Group i has i + 1 keys: each query's hit count names its group.
        queries = [c.query(keys, req_id=i, lease=False) for i, keys in enumerate(groups)]
        nops = [c.nop() for _ in range(5)]
        bad = c.release(12345)
    everything = saves + queries + nops + [bad]
    for op in reversed(everything):
        op.exception(timeout=10)
    for i, keys in enumerate(groups):
        assert saves[i].result() == (len(keys), 0), f"save {i}"
        assert queries[i].result().hits == len(keys), f"query {i}"
    assert all(n.result() is None for n in nops)
    with pytest.raises(kvstash.LeaseNotFound):
        bad.result()


def test_a_large_save_and_a_nop_complete_independently(worker):
    """A SAVE handed to copy threads and a NOP behind it: waiting on the NOP
    first must neither block on nor steal the SAVE's completion."""
    c = worker.client
    keys = make_keys(BLOCKS, salt=3)
    save = c.save(keys, range(BLOCKS))
    nop = c.nop()
    assert nop.wait(timeout=10) is None
    assert save.wait(timeout=10) == (BLOCKS, 0)


def test_wait_times_out_and_the_operation_stays_pending(worker, daemon):
    c = worker.client
    daemon.freeze()
    try:
        op = c.nop()
        with pytest.raises(kvstash.Timeout) as e:
            op.wait(timeout=0.2)
        assert isinstance(e.value, TimeoutError) and not op.done()
    finally:
        daemon.thaw()
    assert op.wait(timeout=10) is None


def test_wait_all_and_threads_sharing_a_client(worker):
    c = worker.client
    results: list[object] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            results.extend(c.wait_all([c.nop() for _ in range(50)], timeout=30))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and results == [None] * 200 and c.pending == 0


def test_a_full_submission_queue_is_drained_not_refused(daemon, worker_factory):
    """More operations than the SQ has entries: libkvstash runs out of SQEs,
    the binding reaps completions to make room."""
    w = worker_factory(sq_entries=4)
    assert w.client.info.sq_entries == 4
    ops = [w.client.nop() for _ in range(100)]
    assert w.client.wait_all(ops, timeout=30) == [None] * 100
