# SPDX-License-Identifier: MIT
"""The SSD tier as the binding shows it: QUERY_DRAM and a QUERY's pending.

- the constants mirror include/kvstash/abi.h (read from the header itself);
- without [ssd] every hit is in DRAM: pending is 0 and dram_only counts the
  same hits;
- with [ssd] on a file of a real disk (O_DIRECT), blocks evicted from a
  small pool are found again: dram_only misses them, a leased query counts
  them with pending > 0 (read back from SSD), and load() brings them back
  byte-exact into other blocks.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

import kvstash
from conftest import BLOCK, BLOCKS, LAYERS, SEG, TOP, _find_kvstashd, make_keys, pattern
from kvstash import _lib

ABI_H = TOP / "include" / "kvstash" / "abi.h"


def _abi_define(name: str) -> int:
    """The value of `#define NAME <expr>` in abi.h: a number or (1u << n)."""
    m = re.search(rf"^#define\s+{name}\s+(.+?)\s*(?:/\*.*)?$", ABI_H.read_text(), re.M)
    assert m, f"{name} is not defined in {ABI_H}"
    expr = re.sub(r"(0x[0-9a-fA-F]+|\d+)[uU]?[lL]*", r"\1", m.group(1))
    assert re.fullmatch(r"[\s()<x0-9a-fA-F]+", expr), f"{name}: cannot read {m.group(1)!r}"
    return int(eval(expr))  # noqa: S307 -- digits, parentheses and shifts only


@pytest.mark.parametrize("name, value", [
    ("KVS_QUERY_NOLEASE", _lib.QUERY_NOLEASE),
    ("KVS_QUERY_CLUSTER", _lib.QUERY_CLUSTER),
    ("KVS_QUERY_DRAM", _lib.QUERY_DRAM),
    ("KVS_CQE_LOCAL", _lib.CQE_LOCAL),
    ("KVS_CQE_CLUSTER", _lib.CQE_CLUSTER),
    ("KVS_CQE_PENDING_SHIFT", _lib.CQE_PENDING_SHIFT),
    ("KVS_CQE_PENDING_MAX", _lib.CQE_PENDING_MAX),
])
def test_constants_match_abi_h(name, value):
    assert _abi_define(name) == value, f"{name} differs between abi.h and kvstash._lib"


def test_pending_reads_bits_8_to_31_of_the_flags():
    flags = (0x123456 << 8) | _lib.CQE_CLUSTER | _lib.CQE_LOCAL
    assert _lib.cqe_pending(flags) == 0x123456
    assert kvstash.Completion(5, flags, 0, 0).pending == 0x123456
    assert kvstash.Completion(5, _lib.CQE_PENDING_MAX << 8, 0, 0).pending == _lib.CQE_PENDING_MAX
    assert kvstash.Completion(5, _lib.CQE_CLUSTER, 0, 0).pending == 0


def test_query_result_keeps_its_two_fields():
    """Existing callers unpack (hits, lease) and compare with tuples."""
    q = kvstash.QueryResult(4, 9, pending=3)
    hits, lease = q
    assert (hits, lease, q.pending) == (4, 9, 3)
    assert q == (4, 9) and len(q) == 2
    assert q != kvstash.QueryResult(4, 9) and q == kvstash.QueryResult(4, 9, 3)
    assert q._replace(lease=1).pending == 3
    assert kvstash.QueryResult(1, 2).pending == 0


def test_without_ssd_pending_is_zero(worker):
    c = worker.client
    n = 8
    keys = make_keys(n, salt=31)
    for b in range(n):
        worker.fill(b, seed=300 + b)
    c.save(keys, range(n)).wait()
    c.flush().wait()
    op = c.query(keys)
    q = op.wait()
    assert q.hits == n and q.lease != 0
    assert q.pending == 0 and op.completion.pending == 0
    c.release(q).wait()
    d = c.query(keys, dram_only=True).wait()
    assert d.hits == n and d.lease != 0 and d.pending == 0, "dram_only without [ssd]"
    c.release(d).wait()
    assert c.query(keys, lease=False, dram_only=True).wait() == kvstash.QueryResult(n, 0, 0)


def _direct_dir() -> Path | None:
    """A fresh directory where O_DIRECT works (tmpfs before Linux 6.6 has none)."""
    for base in (os.environ.get("KVSTASH_SSD_TEST_DIR"), os.environ.get("top_builddir"),
                 "/var/tmp", tempfile.gettempdir()):
        if not base or not os.path.isdir(base):
            continue
        d = Path(tempfile.mkdtemp(prefix="kvs-py-ssd.", dir=base))
        try:
            fd = os.open(d / "probe", os.O_RDWR | os.O_CREAT | os.O_DIRECT, 0o600)
            os.close(fd)
            return d
        except OSError:
            shutil.rmtree(d, ignore_errors=True)
    return None


@pytest.fixture
def ssd_dir():
    binary = _find_kvstashd()
    if binary and os.access(binary, os.X_OK):
        chk = subprocess.run([binary, "--config", "/dev/null", "-o", "ssd.path=/nonexistent/x",
                              "--check-config"], capture_output=True, text=True)
        if chk.returncode != 0 and "not compiled in" in chk.stderr:
            pytest.skip("kvstashd without the SSD tier")
    d = _direct_dir()
    if d is None:
        pytest.skip("no directory with O_DIRECT")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _wait_counted(c: kvstash.Client, keys: list[bytes]) -> None:
    """Until a count-only query finds every key (either tier): the spills landed."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if c.query(keys, lease=False).wait().hits == len(keys):
            return
        time.sleep(0.01)
    pytest.fail(f"{len(keys)} keys never all counted: {c.query(keys, lease=False).wait()}")


def test_with_ssd_evicted_blocks_come_back_pending(daemon_factory, ssd_dir):
    # A pool of 16 MiB holds 512 blocks of 32 KiB: 1024 go through it.
    d = daemon_factory(f"[ssd]\npath = {ssd_dir}/drive0\nsize = 128M\nregion_size = 1M\n")
    c = kvstash.Client(d.socket, instance="py-tier", namespace="py-tier/ns")
    mem = kvstash.HostMemory(BLOCKS * BLOCK)
    try:
        c.register(kvstash.page_first_layers(mem, LAYERS, BLOCKS, SEG))
        batch = BLOCKS // 2
        prompts = 1024 // batch
        keys = [make_keys(batch, salt=1000 + p) for p in range(prompts)]

        def data(p: int, i: int) -> bytes:
            return pattern(50_000 + p * batch + i, BLOCK)

        for p in range(prompts):
            for i in range(batch):
                mem.buffer[i * BLOCK:(i + 1) * BLOCK] = data(p, i)
            assert c.save(keys[p], range(batch)).wait() == (batch, 0)
            c.flush().wait()
            # At the drive's pace: an eviction never waits, a faster engine sees drops.
            _wait_counted(c, keys[p])
        _wait_counted(c, keys[0])

        # The first prompt went long ago: in DRAM none of it, on SSD all.
        assert c.query(keys[0], dram_only=True).wait() == kvstash.QueryResult(0, 0, 0)
        counted = c.query(keys[0], lease=False).wait()
        assert counted.hits == batch and counted.pending == 0, "count-only reads nothing"

        op = c.query(keys[0])
        q = op.wait()
        assert q.hits == batch and q.lease != 0
        assert 0 < q.pending <= batch, f"pending {q.pending} of {batch} hits read back"
        assert q.pending == op.completion.pending
        dst = list(range(BLOCKS - 1, BLOCKS - 1 - batch, -1))
        for b in dst:
            mem.buffer[b * BLOCK:(b + 1) * BLOCK] = b"\xa5" * BLOCK
        assert c.load(q, dst).wait() == batch
        for i, b in enumerate(dst):
            assert mem.buffer[b * BLOCK:(b + 1) * BLOCK] == data(0, i), f"block {i} differs"

        # Read back, they are in DRAM again: nothing pending.
        again = c.query(keys[0], dram_only=True).wait()
        assert again.hits == batch and again.pending == 0
        c.release(again).wait()
    finally:
        c.close()
        mem.close()
