# SPDX-License-Identifier: MIT
"""What the GPU tests share: torch with CUDA, and a kvstashd with its CUDA backend.

Importing this skips the importing test module when torch or its CUDA
device is missing; the fixture gpu_daemon skips a test when libkvstash or
kvstashd has no CUDA.  `from gpu_common import gpu_daemon, torch  # noqa: F401`.
"""

from __future__ import annotations

import pytest

import kvstash

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    pytest.skip("no CUDA device for torch", allow_module_level=True)


@pytest.fixture
def gpu_daemon(daemon_factory):
    if not kvstash.cuda_available():
        pytest.skip("libkvstash has no usable CUDA")
    d = daemon_factory("[pool]\nsize = 64M\nextent_size = 1M\n")
    if not kvstash.status(d.socket)["daemon"]["cuda_available"]:
        pytest.skip("kvstashd has no CUDA backend")
    return d
