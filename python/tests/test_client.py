# SPDX-License-Identifier: MIT
"""Every operation against a real kvstashd (host backend), byte-exact."""

from __future__ import annotations

import array

import pytest

import kvstash
from conftest import BLOCK, BLOCKS, LAYERS, SEG, make_keys, pattern

POISON = b"\xa5"


def test_nop_and_session_facts(worker):
    c = worker.client
    assert c.nop().wait() is None
    info = c.info
    assert info.session_id == c.session_id > 0
    assert info.max_keys > 0 and info.sq_entries > 0 and info.daemon_rev[0] == 1
    assert c.connected
    assert c.pending == 0


def test_save_flush_query_load_roundtrip(worker):
    c = worker.client
    n = 8
    keys = make_keys(n)
    want = [worker.fill(b, seed=100 + b) for b in range(n)]
    worker.mem.buffer[n * BLOCK:] = POISON * ((BLOCKS - n) * BLOCK)

    assert c.save(keys, range(n)).wait() == kvstash.SaveResult(stored=n, skipped=0)
    assert c.flush().wait() >= 0
    op = c.query(keys, req_id=7)
    q = op.wait()
    assert q.hits == n and q.lease != 0
    assert op.completion.result1 == c.info.lease_ttl_ms  # the lease's time to live

    dst = list(range(BLOCKS - 1, BLOCKS - 1 - n, -1))  # elsewhere, reversed
    assert c.load(q, dst).wait() == n
    for i, b in enumerate(dst):
        assert worker.block(b) == want[i], f"block {b} (key {i}) differs after LOAD"
    untouched = set(range(n, BLOCKS)) - set(dst)
    assert all(worker.block(b) == POISON * BLOCK for b in untouched)


def test_load_reports_bytes_copied(worker):
    c = worker.client
    keys = make_keys(3)
    c.save(keys, [0, 1, 2]).wait()
    c.flush().wait()
    op = c.load(c.query(keys).wait().lease, [10, 11, 12])
    assert op.wait() == 3
    assert op.completion.result0 == 3 * BLOCK and not op.completion.local


def test_resident_keys_are_skipped(worker):
    c = worker.client
    keys = make_keys(6)
    for b in range(6):
        worker.fill(b, seed=b)
    assert c.save(keys[:4], range(4)).wait() == (4, 0)
    c.flush().wait()
    assert c.save(keys, range(6)).wait() == kvstash.SaveResult(stored=2, skipped=4)


def test_query_returns_the_longest_prefix_and_nolease_pins_nothing(worker):
    c = worker.client
    keys = make_keys(10)
    saved = [i for i in range(10) if i != 4]
    c.save([keys[i] for i in saved], saved).wait()
    c.flush().wait()
    q = c.query(keys).wait()
    assert q.hits == 4 and q.lease != 0
    c.release(q).wait()
    counted = c.query(keys, lease=False).wait()
    assert counted.hits == 4 and counted.lease == 0
    assert kvstash.stats(worker.client.socket_path)["global"]["leases_live"] == 0
    missed = c.query(make_keys(3, salt=9)).wait()
    assert missed == kvstash.QueryResult(hits=0, lease=0)


def test_load_a_layer_range(worker):
    c = worker.client
    keys = make_keys(2)
    src = [worker.fill(b, seed=50 + b) for b in range(2)]
    worker.mem.buffer[2 * BLOCK:4 * BLOCK] = POISON * (2 * BLOCK)
    c.save(keys, [0, 1]).wait()
    c.flush().wait()
    lease = c.query(keys).wait().lease
    assert c.load(lease, [2, 3], layers=range(1, 3)).wait() == 2
    for i, b in enumerate((2, 3)):
        got = worker.block(b)
        for layer in range(LAYERS):
            piece = slice(layer * SEG, (layer + 1) * SEG)
            want = src[i][piece] if layer in (1, 2) else POISON * SEG
            assert got[piece] == want, f"block {b} layer {layer}"


def test_load_accepts_begin_count_and_a_prefix_of_the_lease(worker):
    c = worker.client
    keys = make_keys(4)
    src = [worker.fill(b, seed=70 + b) for b in range(4)]
    c.save(keys, range(4)).wait()
    c.flush().wait()
    q = c.query(keys).wait()
    assert c.load(q.lease, array.array("I", [20, 21]), layers=(0, LAYERS)).wait() == 2
    assert worker.block(20) == src[0] and worker.block(21) == src[1]


def test_split_kv_layout_roundtrip(daemon):
    blocks = 16
    mems = [kvstash.HostMemory(2 * blocks * SEG) for _ in range(3)]
    layers = kvstash.split_kv_layers(mems, ["l0", "l1", "l2"], blocks, SEG)
    assert layers[1].segments == 2 and layers[1].kv_stride == blocks * SEG
    with kvstash.Client(daemon.socket, instance="split", namespace="py/split") as c:
        c.register(layers)
        for li, m in enumerate(mems):
            for seg in range(2):
                off = seg * blocks * SEG
                m.buffer[off:off + SEG] = pattern(li * 10 + seg, SEG)  # block 0
        keys = make_keys(1)
        c.save(keys, [0]).wait()
        c.flush().wait()
        c.load(c.query(keys).wait(), [5]).wait()
        for li, m in enumerate(mems):
            for seg in range(2):
                off = seg * blocks * SEG + 5 * SEG
                assert m.buffer[off:off + SEG] == pattern(li * 10 + seg, SEG)
    for m in mems:
        m.close()


def test_release_and_flush_instance(worker):
    c = worker.client
    keys = make_keys(2)
    c.save(keys, [0, 1]).wait()
    assert c.flush(instance=True).wait() >= 0
    q = c.query(keys).wait()
    assert c.release(q.lease).wait() is None
    with pytest.raises(kvstash.LeaseNotFound):
        c.release(q.lease).wait()


def test_keys_may_be_packed_or_listed(worker):
    c = worker.client
    keys = make_keys(3)
    c.save(b"".join(keys), [0, 1, 2]).wait()
    c.flush().wait()
    assert c.query(keys, lease=False).wait().hits == 3
    assert c.query(bytearray(b"".join(keys)), lease=False).wait().hits == 3
    assert c.query(iter(keys), lease=False).wait().hits == 3
    assert c.query(keys[0], lease=False).wait().hits == 1  # one key, packed


@pytest.mark.parametrize(
    "keys",
    [[], b"", b"x" * 15, b"x" * 17, [b"x" * 16, b"y" * 15], [b"short"], ["0123456789abcdef"]],
    ids=["empty-list", "empty-bytes", "15", "17", "one-short", "short", "str"],
)
def test_bad_keys_are_refused_before_submission(worker, keys):
    with pytest.raises(kvstash.InvalidArgument) as e:
        worker.client.query(keys)
    assert e.value.errno == 22 and e.value.op == "query"
    assert worker.client.pending == 0


def test_bad_block_ids_are_refused_before_submission(worker):
    c = worker.client
    with pytest.raises(kvstash.InvalidArgument):
        c.save(make_keys(2), [0, -1])
    with pytest.raises(kvstash.InvalidArgument):
        c.save(make_keys(2), [0, 2**32])
    with pytest.raises(kvstash.InvalidArgument, match="2 keys but 3 block ids"):
        c.save(make_keys(2), [0, 1, 2])
    with pytest.raises(kvstash.InvalidArgument):
        c.load(1, [])
    with pytest.raises(kvstash.InvalidArgument):
        c.load(1, [0], layers=range(2, 2))
    assert c.pending == 0


def test_admin_status_and_stats(worker):
    c = worker.client
    c.save(make_keys(2), [0, 1]).wait()
    c.flush().wait()
    st = kvstash.status(c.socket_path)
    assert st["daemon"]["version"] == kvstash.library_version()
    me = [s for s in st["sessions"] if s["session_id"] == c.session_id]
    assert len(me) == 1
    assert me[0]["instance"] == "py-test" and me[0]["ns"] == "py-test/ns"
    assert me[0]["nr_layers"] == LAYERS and me[0]["sealed"] is True
    assert me[0]["first_layer"] == "layers.0" and me[0]["last_layer"] == f"layers.{LAYERS - 1}"
    stats = kvstash.stats(c.socket_path)
    assert stats["global"]["save_blocks_stored"] == 2
    assert stats["global"]["blocks_resident"] == 2
    assert stats["nodes"] and stats["nodes"][0]["capacity_bytes"] > 0
    assert any(s["session_id"] == c.session_id and s["save_blocks"] == 2 for s in stats["sessions"])


def test_host_memory_refuses_to_close_under_a_view(daemon):
    mem = kvstash.HostMemory(4096)
    view = mem.view()
    view[:4] = b"abcd"
    with pytest.raises(BufferError):
        mem.close()
    view.release()
    assert mem.buffer[:4] == b"abcd"
    mem.close()
    mem.close()  # idempotent
