# SPDX-License-Identifier: MIT
"""What the scheduler tells every worker rank for one engine step.

vLLM pickles the connector metadata into each worker's SchedulerOutput, so
these are plain dataclasses of ints, bytes and strings.  Every rank gets
the same plan and applies it to its own shard: a LOAD from the same lease
(a lease has one consumer per rank), a SAVE of the same keys from the same
block ids (each rank stores its own shard of each block).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class LoadSpec:
    """Load the first len(block_ids) blocks of @lease into @block_ids.

    lease 0 means the scheduler could not set the load up (vLLM allocated
    other blocks than the lease covers, or kvstashd went away between the
    QUERY and the allocation): the worker reports every block id as a load
    error at once, so vLLM recomputes them instead of waiting for a load
    that will never come.
    """

    req_id: str
    lease: int
    block_ids: tuple[int, ...]


@dataclass(frozen=True)
class SaveSpec:
    """Save @block_ids under @keys (16 bytes each, back to back); @job counts completions."""

    job: int
    req_id: str
    keys: bytes
    block_ids: tuple[int, ...]


@dataclass
class StepPlan:
    """One step's work for every rank."""

    step: int
    loads: list[LoadSpec] = field(default_factory=list)
    saves: list[SaveSpec] = field(default_factory=list)
    # Requests preempted in this step: vLLM has freed their blocks and may
    # hand them to other requests in this very step, so every rank waits for
    # their SAVEs still copying before the forward pass (handle_preemptions).
    flush: set[str] = field(default_factory=set)
    # Finished requests whose blocks vLLM keeps until the workers report them
    # in finished_sending: each rank does once its SAVEs of them completed.
    finish_after_save: set[str] = field(default_factory=set)

    def is_empty(self) -> bool:
        return not (self.loads or self.saves or self.flush or self.finish_after_save)


__all__ = ["LoadSpec", "SaveSpec", "StepPlan"]
