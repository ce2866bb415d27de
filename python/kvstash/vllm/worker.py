# SPDX-License-Identifier: MIT
"""KvstashConnector's worker side: one rank's session, LOADs and SAVEs.

Runs in each vLLM worker process (one per tensor-parallel rank) over a
role="worker" session that registers the rank's KV cache.  vLLM calls it
each step in this order (gpu_model_runner.py, kv_connector_model_runner_
mixin.py, vllm/v1/worker/gpu/kv_connector.py):

  handle_preemptions(plan)   before the step's inputs are prepared: wait for
                             the SAVEs of preempted requests, whose blocks
                             vLLM may hand to other requests in this step;
  start_load_kv()            submit the plan's LOADs;
  wait_for_layer_load(l)     per attention layer (sync mode: the first one
                             waits for every load of the step);
  wait_for_save()            after the forward pass: the plan's SAVEs, once
                             the GPU has written their blocks (ordering.py);
  get_finished(finished)     reap: loads ended (finished_recving), requests
                             whose blocks may be freed (finished_sending);
  get_block_ids_with_load_errors()   blocks of failed loads, for vLLM to
                             recompute (kv_load_failure_policy=recompute);
  build_connector_worker_meta()      SAVE jobs finished on this rank.

Nothing here waits on kvstashd without need: a load or save that fails,
or finds kvstashd gone (libkvstash completes everything in flight with
ECONNRESET when the socket closes), is reported like a finished one, its
blocks as load errors, so vLLM recomputes and never hangs.
"""

from __future__ import annotations

import errno
import logging
from collections.abc import Sequence
from typing import Any

from ..client import Client, Operation
from ..errors import ConnectionLost, KvstashError
from .layout import View, host_layers
from .ordering import ordering_for
from .plan import LoadSpec, SaveSpec, StepPlan
from .session import Session
from .settings import Settings

log = logging.getLogger("kvstash.vllm")


class WorkerCore:
    def __init__(self, settings: Settings, tp_rank: int) -> None:
        self.settings = settings
        self.tp_rank = tp_rank
        self.session: Session | None = None
        self.views: list[View] = []
        self._ordering: Any = None
        self._plan: StepPlan | None = None
        self._loads: list[tuple[Operation, LoadSpec]] = []
        self._sync_loads: list[tuple[Operation, LoadSpec]] = []
        self._waiting: list[tuple[Any, list[SaveSpec]]] = []     # marked, not submitted yet
        self._saves: list[tuple[Operation, SaveSpec]] = []
        self._saves_marked_step = -1
        self._pending_by_req: dict[str, int] = {}
        self._finishing: set[str] = set()
        self._finished_seen: set[str] = set()
        self._recv_done: set[str] = set()
        self._errors: set[int] = set()
        self._completed: dict[int, int] = {}
        self._loads_done: dict[int, int] = {}

    # ---- registration --------------------------------------------------------

    def register(self, views: Sequence[View]) -> None:
        """Open the rank's session and register @views (once).

        kvstashd not running is no error: vLLM serves without it and the
        session connects (and registers) once it is there.  Anything else
        kvstashd refuses (a layout other than the namespace's, memory it
        cannot import) is a configuration error and raised.
        """
        if self.session is not None:
            raise KvstashError(errno.EALREADY, "register", "the KV cache is already registered")
        self.views = list(views)
        v0 = self.views[0]
        replicated = self.settings.use_mla
        if v0.device_type == "cuda":
            layers = [v.layer for v in self.views]

            def on_connect(c: Client) -> None:
                import torch

                from ..torch import _UNSHAREABLE, ADVICE

                # libkvstash exports each allocation in the thread's current context.
                try:
                    with torch.cuda.device(v0.device_index):
                        c.register_cuda(layers, replicated=replicated)
                except KvstashError as e:
                    # vLLM's cache from expandable segments or a pool: say what to change.
                    if e.errno in _UNSHAREABLE:
                        raise type(e)(e.errno, e.op, f"{e.message}. {ADVICE}") from e
                    raise

            device: Any = v0.device_index if v0.device_index is not None else 0
        elif v0.device_type == "cpu":
            host = host_layers(self.views)

            def on_connect(c: Client) -> None:
                c.register(host, replicated=replicated)

            device = None
        else:
            raise KvstashError(errno.ENODEV, "register", f"KV cache on a {v0.device_type} device; kvstash serves "
                               "CUDA and host memory")
        self._ordering = ordering_for(v0.device_type, v0.device_index)
        self.session = Session(self.settings, role="worker", tp_rank=self.tp_rank, device=device,
                               on_connect=on_connect)
        self.session.start()

    def _client(self) -> Client | None:
        return self.session.ensure() if self.session is not None else None

    # ---- a step --------------------------------------------------------------------

    def begin(self, plan: StepPlan) -> None:
        """Take the step's plan (idempotent: handle_preemptions and start_load_kv both call it)."""
        if self._plan is plan:
            return
        self._plan = plan
        self._finishing |= plan.finish_after_save
        if plan.flush:
            self._flush(plan.flush)

    def start_loads(self) -> None:
        plan = self._plan
        if plan is None or not plan.loads:
            return
        c = self._client()
        batch = []
        for spec in plan.loads:
            if spec.lease == 0 or c is None:
                self._fail_load(spec, "no lease" if spec.lease == 0 else "kvstashd unavailable")
                continue
            batch.append(spec)
        if not batch:
            return
        assert c is not None
        try:
            with c.batch():
                for spec in batch:
                    op = c.load(spec.lease, spec.block_ids)
                    self._loads.append((op, spec))
                    if self.settings.load_mode == "sync":
                        self._sync_loads.append((op, spec))
        except KvstashError as e:
            # A submit that fails leaves earlier ones of the batch in flight;
            # the rest never went out.
            if isinstance(e, ConnectionLost):
                self.session.lost(e)   # type: ignore[union-attr]
            started = {id(s) for _, s in self._loads}
            for spec in batch:
                if id(spec) not in started:
                    self._fail_load(spec, str(e))

    def wait_loads(self, layer_name: str) -> None:
        """Sync mode: every load of the step is in GPU memory before the first layer runs.

        The layer-wise LOAD would wait here for @layer_name's layers only.
        """
        if not self._sync_loads:
            return
        ops, self._sync_loads = self._sync_loads, []
        for op, _spec in ops:
            try:
                op.wait()
            except KvstashError:
                pass   # reported by _reap, with the block ids
        self._reap()

    def after_forward(self) -> None:
        """wait_for_save: queue the plan's SAVEs behind the GPU work of this step."""
        plan = self._plan
        if plan is None or not plan.saves or self._saves_marked_step == plan.step:
            return
        self._saves_marked_step = plan.step
        for spec in plan.saves:
            self._pending_by_req[spec.req_id] = self._pending_by_req.get(spec.req_id, 0) + 1
        self._waiting.append((self._ordering.mark(), list(plan.saves)))
        self._submit_ready(force=False)

    def finished(self, finished_req_ids: set[str]) -> tuple[set[str], set[str]]:
        """get_finished: (finished_sending, finished_recving) of this rank."""
        self._finished_seen |= set(finished_req_ids or ())
        # A step without a forward pass (vLLM's kv_connector_no_forward) or
        # with a deferred one skips wait_for_save: its saves go out here.
        self.after_forward()
        self._submit_ready(force=False)
        self._reap()
        sending = {r for r in self._finishing
                   if r in self._finished_seen and not self._pending_by_req.get(r)}
        self._finishing -= sending
        self._finished_seen -= sending
        # finished_req_ids of requests that needed no waiting are not kept.
        self._finished_seen &= self._finishing
        recving, self._recv_done = self._recv_done, set()
        return sending, recving

    def load_errors(self) -> set[int]:
        errors, self._errors = self._errors, set()
        return errors

    def completed_jobs(self) -> dict[int, int]:
        """SAVE jobs this rank finished since the last call (job -> 1)."""
        done, self._completed = self._completed, {}
        return done

    def completed_loads(self) -> dict[int, int]:
        """Leases this rank's LOAD from ended (succeeded or failed) since the last call (lease -> 1)."""
        done, self._loads_done = self._loads_done, {}
        return done

    def end(self) -> None:
        self._plan = None

    # ---- internals ------------------------------------------------------------------

    def _load_ended(self, spec: LoadSpec) -> None:
        # The scheduler counts the ranks done with each lease (both modes).
        if spec.lease:
            self._loads_done[spec.lease] = 1
        # finished_recving is for asynchronous loads only: vLLM frees the
        # blocks of a request named there that is not waiting for its KV.
        # A synchronous load's request is already running.
        if self.settings.load_mode == "async":
            self._recv_done.add(spec.req_id)

    def _fail_load(self, spec: LoadSpec, why: str) -> None:
        log.warning("kvstash rank %d: load for %s failed (%s): %d blocks to recompute",
                    self.tp_rank, spec.req_id, why, len(spec.block_ids))
        self._errors.update(spec.block_ids)
        self._load_ended(spec)

    def _save_done(self, spec: SaveSpec) -> None:
        self._completed[spec.job] = 1
        left = self._pending_by_req.get(spec.req_id, 0) - 1
        if left > 0:
            self._pending_by_req[spec.req_id] = left
        else:
            self._pending_by_req.pop(spec.req_id, None)

    def _submit_ready(self, force: bool, reqs: set[str] | None = None) -> None:
        """Submit marked SAVEs whose GPU work is done (force: wait for it first).

        With @reqs, only the batches holding one of those requests are
        forced; batches go out in order, so forcing one forces those before.
        """
        if not self._waiting:
            return
        last = -1
        if force:
            for i, (_t, specs) in enumerate(self._waiting):
                if reqs is None or any(s.req_id in reqs for s in specs):
                    last = i
        c = self._client() if self._waiting else None
        while self._waiting:
            token, specs = self._waiting[0]
            if last >= 0:
                self._ordering.wait(token)
                last -= 1
            elif not self._ordering.ready(token):
                break
            self._waiting.pop(0)
            if c is None:
                # No kvstashd: nothing will read these blocks; they are free.
                for s in specs:
                    self._save_done(s)
                continue
            try:
                with c.batch():
                    for s in specs:
                        self._saves.append((c.save(s.keys, s.block_ids), s))
            except KvstashError as e:
                if isinstance(e, ConnectionLost):
                    self.session.lost(e)   # type: ignore[union-attr]
                started = {id(s) for _, s in self._saves}
                for s in specs:
                    if id(s) not in started:
                        self._save_done(s)
                c = None

    def _reap(self) -> None:
        c = self.session.client if self.session is not None else None
        if c is not None and not c.closed and (self._loads or self._saves):
            c.poll()
            # poll() only reaps; connected looks at the socket, and once it
            # has seen kvstashd gone libkvstash completes everything locally.
            if (self._loads or self._saves) and not c.connected:
                c.poll()
        keep_l = []
        for op, spec in self._loads:
            if not op.done():
                keep_l.append((op, spec))
                continue
            e = op.exception()
            if e is None:
                self._load_ended(spec)
            else:
                if isinstance(e, ConnectionLost):
                    self.session.lost(e)   # type: ignore[union-attr]
                self._fail_load(spec, str(e))
        self._loads = keep_l
        keep_s = []
        for op, spec in self._saves:
            if not op.done():
                keep_s.append((op, spec))
                continue
            e = op.exception()
            if e is not None:
                if isinstance(e, ConnectionLost):
                    self.session.lost(e)   # type: ignore[union-attr]
                else:
                    log.warning("kvstash rank %d: save of %d blocks for %s failed: %s",
                                self.tp_rank, len(spec.block_ids), spec.req_id, e)
            self._save_done(spec)
        self._saves = keep_s

    def _flush(self, reqs: set[str]) -> None:
        """Wait until no SAVE of @reqs reads their blocks any more."""
        self._submit_ready(force=True, reqs=reqs)
        for op, spec in list(self._saves):
            if spec.req_id in reqs:
                try:
                    op.wait()
                except KvstashError:
                    pass
        self._reap()

    def pending(self) -> int:
        """Loads and saves this rank has not seen complete."""
        return len(self._loads) + len(self._saves) + sum(len(s) for _, s in self._waiting)

    def shutdown(self, timeout: float = 10.0) -> None:
        """Let in-flight copies finish (they read or write vLLM's memory), then close."""
        try:
            self._submit_ready(force=True)
            c = self.session.client if self.session is not None else None
            if c is not None and not c.closed:
                try:
                    c.wait_all([op for op, _ in self._loads + self._saves], timeout=timeout)
                except KvstashError:
                    pass
        finally:
            if self.session is not None:
                self.session.close()


__all__ = ["WorkerCore"]
