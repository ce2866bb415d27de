# SPDX-License-Identifier: MIT
"""Fixtures: a real kvstashd per test, and registered host-memory workers.

The binaries come from the environment (tests/python.sh sets both to the
build tree), else from an in-tree build next to this source tree:
  KVSTASH_LIB  libkvstash.so.0   (default <top>/client/.libs/libkvstash.so.0)
  KVSTASHD     kvstashd          (default <top>/sidecar/kvstashd, then $PATH)
Tests that need them skip when they are missing; the keys tests need neither.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
TOP = HERE.parents[1]
sys.path.insert(0, str(HERE.parent))  # the kvstash package of this source tree
# ... and of the build tree, where the build generated kvstash._abi.
sys.path.insert(1, str(Path(os.environ.get("top_builddir", TOP)) / "python"))

if "KVSTASH_LIB" not in os.environ:
    _intree = TOP / "client" / ".libs" / "libkvstash.so.0"
    if _intree.exists():
        os.environ["KVSTASH_LIB"] = str(_intree)

import kvstash  # noqa: E402

# Block geometry of the default worker: 4 layers x 8 KiB, page-first.
LAYERS = 4
SEG = 8192
BLOCK = LAYERS * SEG
BLOCKS = 64


def _find_kvstashd() -> str | None:
    explicit = os.environ.get("KVSTASHD")
    if explicit:
        return explicit
    intree = TOP / "sidecar" / "kvstashd"
    if intree.exists():
        return str(intree)
    return shutil.which("kvstashd")


def have_library() -> bool:
    try:
        kvstash.library_version()
        return True
    except OSError:
        return False


class Daemon:
    """A kvstashd with a generated configuration in its own temp directory."""

    def __init__(self, binary: str, extra_ini: str = "") -> None:
        # Not pytest's tmp_path: a socket path must fit in 107 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="kvs-py."))
        self.socket = str(self.dir / "run" / "kvstash.sock")
        self.conf = self.dir / "kvstash.conf"
        self.log = self.dir / "kvstashd.log"
        self.binary = binary
        text = f"[server]\nsocket = {self.socket}\n"
        if "[pool]" not in extra_ini:
            text += "[pool]\nsize = 16M\nextent_size = 256K\n"
        if "[log]" not in extra_ini:
            text += "[log]\nlevel = info\n"
        self.conf.write_text(text + extra_ini + "\n")
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([self.binary, "--config", str(self.conf)],
                                         stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"kvstashd exited with {self.proc.returncode}:\n{self.log_text()}")
            if self._answers():
                return
            time.sleep(0.01)
        pytest.fail(f"kvstashd did not open {self.socket}:\n{self.log_text()}")

    def _answers(self) -> bool:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect(self.socket)
            return True
        except OSError:
            return False
        finally:
            s.close()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(sig)

    def freeze(self) -> None:
        """SIGSTOP, and wait until every thread has stopped: from then on
        nothing submitted can complete until thaw()."""
        self.signal(signal.SIGSTOP)
        tasks = Path(f"/proc/{self.pid}/task")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            states = []
            for t in tasks.iterdir():
                try:
                    states.append((t / "stat").read_text().rsplit(")", 1)[1].split()[0])
                except OSError:
                    pass  # a thread that just exited
            if states and all(s == "T" for s in states):
                return
            time.sleep(0.001)
        pytest.fail("kvstashd did not stop on SIGSTOP")

    def thaw(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL and reap: the socket is closed when this returns."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def stop(self) -> int:
        """SIGTERM (drain and exit); the exit status."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)

    def log_text(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def cleanup(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # in case a test stopped it
            self.kill()
        if not os.environ.get("KVSTASH_TEST_KEEP"):
            shutil.rmtree(self.dir, ignore_errors=True)


@pytest.fixture
def daemon_factory(request: pytest.FixtureRequest) -> Iterator[Callable[[str], Daemon]]:
    """start(extra_ini="") -> a running Daemon, killed and removed afterwards."""
    binary = _find_kvstashd()
    if not binary or not os.access(binary, os.X_OK):
        pytest.skip("kvstashd not found (set KVSTASHD)")
    if not have_library():
        pytest.skip("libkvstash not found (set KVSTASH_LIB)")
    started: list[Daemon] = []

    def start(extra_ini: str = "") -> Daemon:
        d = Daemon(binary, extra_ini)
        started.append(d)
        d.start()
        return d

    yield start
    failed = getattr(request.node, "rep_call", None)
    for d in started:
        if failed is not None and failed.failed:
            sys.stderr.write(f"---- kvstashd log ({d.log}) ----\n{d.log_text()}---- end ----\n")
        d.cleanup()


@pytest.fixture
def daemon(daemon_factory: Callable[[str], Daemon]) -> Daemon:
    return daemon_factory("")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    rep = outcome.get_result()
    if rep.when == "call":
        item.rep_call = rep  # type: ignore[attr-defined]


class Worker:
    """A connected, registered worker over a page-first HostMemory cache."""

    def __init__(self, client: kvstash.Client, mem: kvstash.HostMemory, blocks: int) -> None:
        self.client = client
        self.mem = mem
        self.blocks = blocks

    def fill(self, block: int, seed: int) -> bytes:
        """Write a block with bytes derived from @seed; return them."""
        data = pattern(seed, BLOCK)
        self.mem.buffer[block * BLOCK:(block + 1) * BLOCK] = data
        return data

    def block(self, block: int) -> bytes:
        return self.mem.buffer[block * BLOCK:(block + 1) * BLOCK]

    def close(self) -> None:
        self.client.close()
        self.mem.close()


def pattern(seed: int, size: int) -> bytes:
    """Deterministic, seed-specific bytes (no two blocks alike)."""
    unit = seed.to_bytes(8, "little") + (seed * 0x9E3779B97F4A7C15 % (1 << 64)).to_bytes(8, "little")
    return (unit * (size // 16 + 1))[:size]


@pytest.fixture
def worker_factory(daemon: Daemon) -> Iterator[Callable[..., Worker]]:
    """make(instance=..., namespace=..., register=True, **client_kwargs) -> Worker."""
    made: list[Worker] = []

    def make(instance: str = "py-test", namespace: str = "py-test/ns", register: bool = True,
             blocks: int = BLOCKS, socket_path: str | None = None, **kw: object) -> Worker:
        c = kvstash.Client(socket_path or daemon.socket, instance=instance, namespace=namespace, **kw)
        mem = kvstash.HostMemory(blocks * BLOCK)
        if register:
            c.register(kvstash.page_first_layers(mem, LAYERS, blocks, SEG))
        w = Worker(c, mem, blocks)
        made.append(w)
        return w

    yield make
    for w in made:
        w.client.close()
        try:
            w.mem.close()
        except BufferError:
            pass


@pytest.fixture
def worker(worker_factory: Callable[..., Worker]) -> Worker:
    return worker_factory()


def make_keys(n: int, salt: int = 0) -> list[bytes]:
    """n distinct 16-byte keys, different per salt."""
    return [(salt * 1_000_003 + i).to_bytes(8, "little") + b"py-keys!" for i in range(n)]
