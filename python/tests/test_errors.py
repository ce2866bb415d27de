# SPDX-License-Identifier: MIT
"""Each exception class, triggered for real by kvstashd or libkvstash."""

from __future__ import annotations

import errno

import pytest

import kvstash
from conftest import BLOCK, BLOCKS, LAYERS, SEG, make_keys


def test_save_before_register_is_not_sealed(worker_factory):
    w = worker_factory(register=False)
    with pytest.raises(kvstash.NotSealed) as e:
        w.client.save(make_keys(1), [0]).wait(timeout=10)
    assert e.value.errno == kvstash.EUNSEALED == errno.EUNATCH and e.value.op == "save"


def test_an_instance_missing_a_rank_is_not_sealed(worker_factory):
    w = worker_factory(instance="tp2", namespace="py/tp2", tp_size=2, tp_rank=0)
    with pytest.raises(kvstash.NotSealed):
        w.client.save(make_keys(1), [0]).wait(timeout=10)


def test_unknown_and_consumed_leases_are_not_found(worker):
    c = worker.client
    with pytest.raises(kvstash.LeaseNotFound, match="lease"):
        c.release(0x1234).wait(timeout=10)
    keys = make_keys(2)
    c.save(keys, [0, 1]).wait()
    c.flush().wait()
    lease = c.query(keys).wait().lease
    c.load(lease, [2, 3]).wait()
    with pytest.raises(kvstash.LeaseNotFound) as e:
        c.load(lease, [2, 3]).wait(timeout=10)  # world_size 1: consumed by the first
    assert e.value.errno == errno.ENOENT and e.value.op == "load"


def test_a_second_load_by_the_same_rank_is_already_used(worker_factory):
    r0 = worker_factory(instance="tp2", namespace="py/tp2", tp_size=2, tp_rank=0)
    r1 = worker_factory(instance="tp2", namespace="py/tp2", tp_size=2, tp_rank=1)
    keys = make_keys(2)
    for w in (r0, r1):
        w.client.save(keys, [0, 1]).wait(timeout=10)
    r0.client.flush(instance=True).wait(timeout=10)
    lease = r0.client.query(keys).wait(timeout=10).lease
    assert r0.client.load(lease, [4, 5]).wait(timeout=10) == 2
    with pytest.raises(kvstash.LeaseAlreadyUsed):
        r0.client.load(lease, [4, 5]).wait(timeout=10)
    assert r1.client.load(lease, [4, 5]).wait(timeout=10) == 2


@pytest.mark.parametrize("case", ["block-id-range", "more-ids-than-hits", "layer-range"])
def test_malformed_requests_are_invalid(worker, case):
    c = worker.client
    keys = make_keys(2)
    c.save(keys, [0, 1]).wait()
    c.flush().wait()
    if case == "block-id-range":
        op, want = c.save(make_keys(1, salt=5), [BLOCKS]), errno.ERANGE
    else:
        lease = c.query(keys).wait().lease
        if case == "more-ids-than-hits":
            op, want = c.load(lease, [4, 5, 6]), errno.EINVAL
        else:
            op, want = c.load(lease, [4, 5], layers=(LAYERS - 1, 2)), errno.EINVAL
    with pytest.raises(kvstash.InvalidArgument) as e:
        op.wait(timeout=10)
    assert e.value.errno == want
    assert isinstance(e.value, ValueError)


def test_more_keys_than_max_keys_is_too_big(daemon_factory, worker_factory):
    d = daemon_factory("[session]\nmax_keys = 8\n")
    w = worker_factory(socket_path=d.socket)
    assert w.client.info.max_keys == 8
    with pytest.raises(kvstash.InvalidArgument) as e:
        w.client.save(make_keys(9), range(9))
    assert e.value.errno == errno.E2BIG and w.client.pending == 0


def test_a_pool_pinned_full_has_no_space(daemon_factory, worker_factory):
    # 4 MiB pool, 32 KiB blocks: exactly 128 fit.
    d = daemon_factory("[pool]\nsize = 4M\nextent_size = 256K\n")
    w = worker_factory(socket_path=d.socket)
    c = w.client
    keys = make_keys(128)
    for i in range(0, 128, BLOCKS):
        assert c.save(keys[i:i + BLOCKS], range(BLOCKS)).wait(timeout=10) == (BLOCKS, 0)
    c.flush().wait()
    q = c.query(keys).wait()
    assert q.hits == 128
    with pytest.raises(kvstash.NoSpace) as e:
        c.save(make_keys(8, salt=1), range(8)).wait(timeout=10)
    assert e.value.errno == errno.ENOSPC
    c.release(q).wait()
    assert c.save(make_keys(8, salt=1), range(8)).wait(timeout=10) == (8, 0)


def test_schedulers_may_not_save_or_load(worker, daemon):
    keys = make_keys(1)
    worker.client.save(keys, [0]).wait()
    worker.client.flush().wait()
    with kvstash.Client(daemon.socket, instance="py-test", namespace="py-test/ns", role="scheduler") as s:
        with pytest.raises(kvstash.PermissionDenied) as e:
            s.save(keys, [0]).wait(timeout=10)
        assert e.value.errno == errno.EPERM and isinstance(e.value, PermissionError)
        lease = s.query(keys).wait(timeout=10).lease  # schedulers may query
        assert worker.client.load(lease, [3]).wait(timeout=10) == 1


def test_another_instances_lease_is_denied(worker_factory):
    a = worker_factory(instance="a")
    b = worker_factory(instance="b")
    keys = make_keys(1)
    a.client.save(keys, [0]).wait()
    a.client.flush().wait()
    lease = a.client.query(keys).wait().lease
    with pytest.raises(kvstash.PermissionDenied) as e:
        b.client.load(lease, [1]).wait(timeout=10)
    assert e.value.errno == errno.EACCES


def test_the_lease_limit_is_busy(daemon_factory, worker_factory):
    d = daemon_factory("[lease]\nmax_leases = 1\n")
    c = worker_factory(socket_path=d.socket).client
    keys = make_keys(1)
    c.save(keys, [0]).wait()
    c.flush().wait()
    first = c.query(keys).wait()
    with pytest.raises(kvstash.Busy) as e:
        c.query(keys).wait(timeout=10)
    assert e.value.errno == errno.EBUSY
    c.release(first).wait()
    assert c.query(keys).wait().hits == 1


def test_another_geometry_in_a_namespace_is_a_layout_mismatch(worker, daemon):
    with kvstash.Client(daemon.socket, instance="other", namespace="py-test/ns") as c:
        mem = kvstash.HostMemory(BLOCKS * 2 * SEG)
        with pytest.raises(kvstash.LayoutMismatch) as e:
            c.register(kvstash.page_first_layers(mem, 2, BLOCKS, SEG))  # 2 layers, not 4
        assert e.value.errno == errno.EXDEV and e.value.op == "register"
        mem.close()


def test_a_bad_registration_says_why(daemon):
    with kvstash.Client(daemon.socket, instance="bad", namespace="py/bad") as c:
        mem = kvstash.HostMemory(BLOCK)
        layer = kvstash.Layer("x", mem, num_blocks=4, segment_bytes=SEG, block_stride=BLOCK)  # past the end
        with pytest.raises(kvstash.InvalidArgument) as e:
            c.register([layer])
        assert e.value.errno in (errno.EINVAL, errno.ERANGE, errno.EOVERFLOW)
        assert "registration refused" in str(e.value)  # libkvstash's log line rides along
        mem.close()


def test_no_daemon_is_unavailable(tmp_path):
    with pytest.raises(kvstash.DaemonUnavailable) as e:
        kvstash.Client(str(tmp_path / "nobody.sock"), instance="x", namespace="y")
    assert e.value.op == "connect" and isinstance(e.value, ConnectionError)


def test_a_cuda_device_without_cuda_is_not_supported(daemon):
    if kvstash.cuda_available():
        pytest.skip("a CUDA device is usable here")
    with pytest.raises(kvstash.NotSupported):
        kvstash.Client(daemon.socket, instance="x", namespace="y", device=0)


def test_closing_with_operations_in_flight_cancels_them(worker, daemon):
    c = worker.client
    daemon.freeze()
    try:
        op = c.nop()
        c.close()
    finally:
        daemon.thaw()
    with pytest.raises(kvstash.Cancelled):
        op.wait(timeout=10)
    with pytest.raises(kvstash.Cancelled):
        c.nop()


def test_every_errno_has_its_class():
    expect = {
        errno.ECONNRESET: kvstash.ConnectionLost,
        errno.EUNATCH: kvstash.NotSealed,
        errno.ENOENT: kvstash.LeaseNotFound,
        errno.EALREADY: kvstash.LeaseAlreadyUsed,
        errno.EINVAL: kvstash.InvalidArgument,
        errno.ERANGE: kvstash.InvalidArgument,
        errno.E2BIG: kvstash.InvalidArgument,
        errno.ENOSPC: kvstash.NoSpace,
        errno.EPERM: kvstash.PermissionDenied,
        errno.EACCES: kvstash.PermissionDenied,
        errno.EBUSY: kvstash.Busy,
        errno.EXDEV: kvstash.LayoutMismatch,
        errno.EPROTONOSUPPORT: kvstash.ProtocolMismatch,
        errno.ETIMEDOUT: kvstash.Timeout,
        errno.EIO: kvstash.CopyFailed,
        errno.ECANCELED: kvstash.Cancelled,
        errno.EOPNOTSUPP: kvstash.NotSupported,
        errno.EMLINK: kvstash.KvstashError,
    }
    for err, cls in expect.items():
        e = kvstash.error_for(-err, "load")
        assert type(e) is cls and e.errno == err and e.op == "load"
        assert f"({errno.errorcode[err]})" in str(e)
    assert type(kvstash.error_for(errno.ENOENT, "connect")) is kvstash.DaemonUnavailable
