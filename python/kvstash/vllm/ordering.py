# SPDX-License-Identifier: MIT
"""How a rank's SAVEs and LOADs are ordered against its GPU work.

kvstashd copies with its own CUDA context and streams, so nothing orders
its copies against vLLM's kernels but the host:

  - a SAVE may only be submitted once the kernels that wrote its blocks
    have finished, or kvstashd copies half-written blocks;
  - a LOAD's completion means its bytes are in GPU memory, so kernels
    launched after the host saw it read the loaded blocks.

This is the synchronous version.  For saves, mark() records a CUDA event on
the current stream after the forward pass was enqueued, and the SAVEs are
submitted once the event has completed (polled each step, waited for only
when a preemption must flush them), so the host never stalls on the GPU
for a save.  Loads either run between steps (async mode: the request is
not in the batch until its load finished) or complete before the forward
pass (sync mode: the first wait_for_layer_load waits for every load).

Where the stream-ordered SAVE and layer-by-layer LOAD of kvstashd land,
they plug in here: mark() would enqueue a signal on the engine's stream
that kvstashd's copy waits for on the GPU (submit at once, no polling),
and layer_ready(layer) would enqueue a wait on that layer's load progress
instead of a host wait for the whole load.
"""

from __future__ import annotations

from typing import Any


class HostOrdering:
    """Host-memory caches (kvstashd's host backend): writes are done when the engine's code returns."""

    def mark(self) -> Any:
        return None

    def ready(self, token: Any) -> bool:
        return True

    def wait(self, token: Any) -> None:
        return None


class CudaEventOrdering:
    """CUDA caches: a CUDA event on the current stream of the cache's device."""

    def __init__(self, device_index: int | None) -> None:
        import torch  # only ever built for CUDA tensors, so torch is there

        self._torch = torch
        self._device = torch.device("cuda", device_index) if device_index is not None else torch.device("cuda")

    def mark(self) -> Any:
        ev = self._torch.cuda.Event()
        ev.record(self._torch.cuda.current_stream(self._device))
        return ev

    def ready(self, token: Any) -> bool:
        return bool(token.query())

    def wait(self, token: Any) -> None:
        token.synchronize()


def ordering_for(device_type: str, device_index: int | None) -> Any:
    return CudaEventOrdering(device_index) if device_type == "cuda" else HostOrdering()


__all__ = ["CudaEventOrdering", "HostOrdering", "ordering_for"]
