# SPDX-License-Identifier: MIT
"""The cluster calls of the binding against real kvstashd processes: without
[cluster], the connect flag, query_cluster() and flush_cluster() refused as
libkvstash and kvstashd refuse them; with a real redis-server as the
registry, one node's query_cluster() names the node holding the rest and
flush_cluster() reports its counts."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

import kvstash
from conftest import BLOCK, BLOCKS, LAYERS, SEG, make_keys


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


# ---- with a registry: a real redis-server, two kvstashd nodes ------------------


class Redis:
    """redis-server on a random loopback port, no persistence, its own directory."""

    def __init__(self, binary: str) -> None:
        self.dir = tempfile.mkdtemp(prefix="kvs-py-redis.")
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = os.path.join(self.dir, "redis.log")
        for _ in range(20):
            self.port = random.randrange(20000, 60000)
            self.proc = subprocess.Popen(
                [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no", "--dir", self.dir, "--logfile", self.log,
                 "--daemonize", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            if self._wait_ready():
                return
            self._kill()  # most likely the port was taken: another one
        with open(self.log, errors="replace") as f:
            log = f.read()
        self.stop()
        pytest.fail(f"redis-server did not start on any port tried:\n{log}")

    def _wait_ready(self) -> bool:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                return False  # the port was taken
            try:
                # Ours, not another test's redis-server that had the port first.
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                    s.sendall(b"INFO server\r\n")
                    got = b""
                    while b"run_id:" not in got:
                        chunk = s.recv(4096)
                        if not chunk:
                            break
                        got += chunk
                    if f"process_id:{self.proc.pid}\r\n".encode() in got:
                        return True
                    if b"process_id:" in got:
                        return False  # someone else's: the port was taken
            except OSError:
                pass
            time.sleep(0.01)
        return False

    def _kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> None:
        self._kill()
        shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def redis() -> Iterator[Redis]:
    binary = shutil.which("redis-server")
    if not binary:
        pytest.skip("redis-server not found (apt-get install redis-server)")
    r = Redis(binary)
    yield r
    r.stop()


def cluster_ini(redis: Redis, node: str) -> str:
    return (f"[cluster]\nredis = 127.0.0.1:{redis.port}\nnode = {node}\n"
            f"peer_address = {node}.example:7000\nflush_timeout = 10s\nquery_timeout = 2s\n")


def cluster_worker(d, instance: str) -> tuple[kvstash.Client, kvstash.HostMemory]:
    c = kvstash.Client(d.socket, instance=instance, namespace="py-cluster/ns", cluster=True)
    mem = kvstash.HostMemory(BLOCKS * BLOCK)
    c.register(kvstash.page_first_layers(mem, LAYERS, BLOCKS, SEG))
    return c, mem


def test_query_cluster_finds_another_nodes_blocks(daemon_factory, redis):
    a = daemon_factory(cluster_ini(redis, "node-a"))
    b = daemon_factory(cluster_ini(redis, "node-b"))
    ca, ma = cluster_worker(a, "py-a")
    cb, mb = cluster_worker(b, "py-b")
    try:
        keys = make_keys(6, salt=77)
        assert ca.save(keys, range(6)).wait() == kvstash.SaveResult(6, 0)
        assert cb.save(keys[:1], [0]).wait() == kvstash.SaveResult(1, 0)
        # Until node a holds its registry lease, its inserts may be dropped
        # and come back by backfill: poll (bounded) until b's query sees them.
        deadline = time.monotonic() + 30
        while True:
            flushed = ca.flush_cluster().wait(timeout=30)
            assert isinstance(flushed, kvstash.ClusterFlushResult)
            q = cb.query_cluster(keys, req_id=5).wait(timeout=30)
            if q.cluster.status == 0 and q.cluster.best == 5:
                break
            cb.release(q).wait()
            assert time.monotonic() < deadline, f"node b never saw node a's blocks: {q}"
            time.sleep(0.05)  # pacing between polls only
        assert isinstance(q, kvstash.ClusterQueryResult)
        assert q.hits == 1 and q.lease != 0  # its own first block, leased
        holders = q.cluster.holders
        assert holders and holders[0].node == "node-a" and holders[0].blocks == 5
        assert holders[0].addr == "node-a.example:7000" and holders[0].epoch > 0
        assert all(h.node != "node-b" for h in holders)
        cb.release(q).wait()
        # Every key local: nothing asked, status 0, no holders.
        q = ca.query_cluster(keys, lease=False).wait(timeout=30)
        assert q.hits == 6 and q.cluster == kvstash.ClusterAnswer(0, 0, (), q.cluster.round_trips)
    finally:
        for c, m in ((ca, ma), (cb, mb)):
            c.close()
            m.close()


# ---- peer transfer: two kvstashd with the peer service, no registry ----------


def peer_ini(addr: str, allow: str, secret: str) -> str:
    return (f"[cluster]\nname = py-peer-{os.getpid()}\npeer_listen = {addr}\n"
            f"peer_allow = {allow}\nsecret_file = {secret}\nfetch_timeout = 3s\n")


@pytest.fixture
def secret_file() -> Iterator[str]:
    fd, path = tempfile.mkstemp(prefix="kvs-py-secret.")
    os.write(fd, b"python-binding-test-cluster-secret-0123456789\n")
    os.close(fd)
    os.chmod(path, 0o600)
    yield path
    os.unlink(path)


# python.sh says whether this build's kvstashd has the peer service; run
# by hand (unset), the tests assume it has.
needs_peer = pytest.mark.skipif(os.environ.get("KVSTASH_HAVE_PEER") == "0",
                                reason="kvstashd built without libkvspeer (configure --with-ucx)")


@needs_peer
def test_query_fetch_pulls_another_nodes_blocks(daemon_factory, secret_file):
    # Loopback addresses of this run's own: parallel runs never meet.
    net = f"127.{1 + os.getpid() % 250}.{1 + os.getpid() // 250 % 250}"
    a = daemon_factory(peer_ini(f"{net}.1:7471", f"{net}.0/24", secret_file))
    b = daemon_factory(peer_ini(f"{net}.2:7471", f"{net}.0/24", secret_file))
    ca, ma = cluster_worker(a, "py-prefill")
    cb, mb = cluster_worker(b, "py-decode")
    try:
        assert cb.info.daemon_rev >= (1, 3)
        keys = make_keys(8, salt=91)
        for i in range(8):
            ma.buffer[i * BLOCK:(i + 1) * BLOCK] = bytes([i + 1]) * BLOCK
        assert ca.save(keys, range(8)).wait() == kvstash.SaveResult(8, 0)
        assert cb.query(keys, lease=False).wait().hits == 0
        q = cb.query_fetch(keys, hint=f"{net}.1:7471").wait(timeout=30)
        assert isinstance(q, kvstash.QueryResult) and q.hits == 8 and q.lease != 0
        mb.buffer[16 * BLOCK:24 * BLOCK] = b"\xa5" * (8 * BLOCK)
        assert cb.load(q, range(16, 24)).wait(timeout=30) == 8
        assert mb.buffer[16 * BLOCK:24 * BLOCK] == ma.buffer[0:8 * BLOCK]
        # A peer that holds nothing more: the local prefix, no error.
        more = keys + make_keys(4, salt=92)
        q = cb.query_fetch(more, hint=f"{net}.1:7471", lease=False).wait(timeout=30)
        assert q.hits == 8
        # A hint nobody listens on: the local prefix within the deadline.
        q = cb.query_fetch(make_keys(3, salt=93), hint=f"{net}.9:7471", lease=False).wait(timeout=30)
        assert q.hits == 0
        with pytest.raises(kvstash.InvalidArgument):
            cb.query_fetch(keys, hint="x" * 64)
    finally:
        for c, m in ((ca, ma), (cb, mb)):
            c.close()
            m.close()


def test_query_fetch_without_a_peer_service(worker):
    with pytest.raises(kvstash.NotSupported):
        worker.client.query_fetch(make_keys(2), hint="127.0.0.1:7471").wait(timeout=10)
