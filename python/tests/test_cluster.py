# SPDX-License-Identifier: MIT
"""The cluster calls of the binding against a real kvstashd without [cluster]:
the connect flag, query_cluster() and flush_cluster() refused as libkvstash
and kvstashd refuse them.  (With a registry: tests/cluster/.)"""

from __future__ import annotations

import pytest

import kvstash
from conftest import make_keys


def test_query_cluster_needs_a_cluster_session(worker):
    c = worker.client
    assert not c.cluster
    with pytest.raises(kvstash.InvalidArgument):
        c.query_cluster(make_keys(2))
    assert c.pending == 0
    assert c.nop().wait() is None  # nothing was left half-prepared


def test_cluster_ops_without_cluster_in_the_daemon(worker_factory):
    w = worker_factory(cluster=True)
    c = w.client
    assert c.cluster and c.info.daemon_rev >= (1, 1)
    keys = make_keys(4)
    c.save(keys, range(4)).wait()
    with pytest.raises(kvstash.NotSupported):
        c.query_cluster(keys).wait()
    op = c.flush_cluster(instance=True)
    with pytest.raises(kvstash.NotSupported):
        op.wait()
    assert op.completion.cluster is None and not op.completion.local
    # The plain operations of a cluster session are unchanged.
    assert c.flush().wait() >= 0
    q = c.query(keys).wait()
    assert q.hits == 4
    c.release(q).wait()


def test_cluster_scheduler_session(worker, daemon):
    # The worker seals the instance; its scheduler may ask the cluster too.
    with kvstash.Client(daemon.socket, instance="py-test", namespace="py-test/ns",
                        role="scheduler", cluster=True) as s:
        with pytest.raises(kvstash.NotSupported):
            s.query_cluster(make_keys(3), lease=False).wait(timeout=10)


def test_cluster_flag_refused_for_admin(daemon):
    with pytest.raises(kvstash.InvalidArgument):
        kvstash.Client(daemon.socket, instance=None, namespace=None, role="admin", cluster=True)


def test_cluster_answer_conversion():
    """What _take() hands a ClusterQueryResult: the holders up to nr_holders, as str."""
    from kvstash import _lib
    from kvstash.client import _cluster_answer

    a = _lib.ClusterAnswer()
    a.status, a.best, a.nr_holders, a.round_trips = 0, 3, 2, 1
    a.holders[0].node, a.holders[0].addr, a.holders[0].epoch, a.holders[0].blocks = b"b", b"10.0.0.2:1", 7, 3
    a.holders[1].node, a.holders[1].epoch, a.holders[1].blocks = b"c", 2, 1
    a.holders[2].node = b"never"
    got = _cluster_answer(a)
    assert got == kvstash.ClusterAnswer(
        0, 3, (kvstash.ClusterHolder("b", "10.0.0.2:1", 7, 3), kvstash.ClusterHolder("c", "", 2, 1)), 1
    )
