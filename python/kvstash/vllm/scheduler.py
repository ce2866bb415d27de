# SPDX-License-Identifier: MIT
"""KvstashConnector's scheduler side: leases, loads and saves per request.

Runs in vLLM's engine-core process over a role="scheduler" session (QUERY
and RELEASE only).  vLLM calls it in this order each step (Scheduler.
schedule() and update_from_output(), vllm/v1/core/sched/scheduler.py):

  lookup()        get_num_new_matched_tokens: QUERY the request's block
                  keys beyond its GPU-cached prefix, pinning the hits under
                  a lease; report them as an asynchronous load.
  after_alloc()   update_state_after_alloc: vLLM allocated blocks for the
                  hit tokens; the lease becomes this step's LOAD into them.
  build()         build_connector_meta, once at the end of schedule():
                  every lease looked up but not allocated is RELEASEd (a
                  request that did not fit, or one looked up twice), and
                  each scheduled request's newly full blocks become SAVEs.
  finished()      request_finished, once per request, aborts included.
  worker_output() update_connector_output: which SAVEs all ranks finished,
                  which leases every rank's LOAD is done with (they are
                  RELEASEd then, which the last rank's LOAD normally made
                  moot: ENOENT).

So a lease lives from its QUERY to the end of the same schedule() call,
or, once allocated, until every rank's LOAD has ended: a re-lookup that
changes, a preemption, an abort and a dead worker all leave no live lease
(and the lease TTL bounds whatever a crash leaves).

Blocks a SAVE still reads are never handed back to vLLM: a finished
request with SAVEs in flight keeps its blocks (request_finished returns
True) until every rank reports it in finished_sending; a preempted one is
flushed by the workers before the next forward pass (StepPlan.flush).
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConnectionLost, KvstashError, NotSealed, Timeout
from .plan import LoadSpec, SaveSpec, StepPlan
from .session import Releases, Session
from .settings import Settings, block_key

log = logging.getLogger("kvstash.vllm")


@dataclass
class _Req:
    request: Any
    lease: int = 0                 # from this step's lookup, not yet allocated
    lease_start: int = 0           # block index of the lease's first key
    lease_hits: int = 0
    lease_keys: int = 0            # how many keys the QUERY asked for
    lease_step: int = -1
    loading: int = 0               # lease whose LOADs the workers run
    load_ids: tuple[int, ...] = ()
    load_start: int = 0
    block_ids: list[int] = field(default_factory=list)
    saved: int = 0                 # blocks [0, saved) are saved, loaded or GPU-cached
    jobs: set[int] = field(default_factory=set)   # SAVE jobs not finished on every rank
    finished: bool = False
    delayed: bool = False          # request_finished returned True: vLLM waits for finished_sending


def _query_id(req_id: str) -> int:
    """A request id as QUERY's 64-bit req_id (it only labels kvstashd's log lines)."""
    return int.from_bytes(hashlib.sha1(req_id.encode()).digest()[:8], "little") >> 1


class SchedulerCore:
    def __init__(self, settings: Settings, session: Session, world_size: int) -> None:
        self.settings = settings
        self.session = session
        self.world_size = world_size
        self._reqs: dict[str, _Req] = {}
        self._unclaimed: set[str] = set()
        self._loads: list[LoadSpec] = []
        self._finish_after_save: set[str] = set()
        self._jobs: dict[int, list[Any]] = {}       # job -> [req_id, ranks still to report]
        self._lease_loads: dict[int, list[Any]] = {}  # lease -> [req_id, ranks still loading]
        self._next_job = 1
        self._step = 0
        self._releases = Releases(session)

    # ---- leases ------------------------------------------------------------

    def _drop_lease(self, st: _Req, rid: str) -> None:
        if st.lease:
            self._releases.release(st.lease)
            st.lease = 0
        self._unclaimed.discard(rid)

    def _forget(self, rid: str) -> None:
        st = self._reqs.pop(rid, None)
        for job in st.jobs if st is not None else ():
            self._jobs.pop(job, None)

    # ---- vLLM's calls ----------------------------------------------------------

    def lookup(self, request: Any, num_computed_tokens: int) -> tuple[int, bool]:
        """(tokens loadable beyond @num_computed_tokens, asynchronous?)."""
        rid = request.request_id
        st = self._reqs.get(rid)
        if st is None:
            st = self._reqs[rid] = _Req(request)
        st.request = request
        if st.loading:
            return 0, False     # not asked again while loading; never load twice
        bs = self.settings.block_size
        start = num_computed_tokens // bs
        hashes = list(getattr(request, "block_hashes", None) or ())
        stop = len(hashes)
        if self.settings.load_mode == "sync":
            # The request computes in this very step, and vLLM needs at
            # least one token to compute: leave the block of the last token.
            stop = min(stop, max(0, (int(request.num_tokens) - 1) // bs))
        st.saved = start         # GPU-cached blocks need no SAVE (raised below by a load)
        if st.lease and st.lease_step == self._step and (st.lease_start, st.lease_keys) == (start, stop - start):
            return st.lease_hits * bs, self.settings.load_mode == "async"   # same question, same answer
        self._drop_lease(st, rid)
        if stop <= start:
            return 0, False
        c = self.session.ensure()
        if c is None:
            return 0, False
        max_keys = c.info.max_keys
        keys = b"".join(block_key(h) for h in hashes[start:min(stop, start + max_keys)])
        try:
            hits, lease = c.query(keys, req_id=_query_id(rid)).wait(self.settings.query_timeout_s)
        except ConnectionLost as e:
            self.session.lost(e)
            return 0, False
        except NotSealed:
            return 0, False      # workers not (all) registered yet: nothing can be loaded
        except Timeout:
            log.warning("kvstash: QUERY for %s took over %g s; not loading", rid, self.settings.query_timeout_s)
            return 0, False
        except KvstashError as e:
            log.warning("kvstash: QUERY for %s failed: %s", rid, e)
            return 0, False
        self._releases.reap()
        if hits == 0:
            return 0, False
        st.lease, st.lease_start, st.lease_hits, st.lease_keys = lease, start, hits, stop - start
        st.lease_step = self._step
        self._unclaimed.add(rid)
        return hits * bs, self.settings.load_mode == "async"

    def after_alloc(self, request: Any, block_ids: list[int], num_external_tokens: int) -> None:
        rid = request.request_id
        st = self._reqs.get(rid)
        if num_external_tokens == 0:
            if st is not None:
                self._drop_lease(st, rid)   # vLLM will not load what was looked up
            return
        bs = self.settings.block_size
        n = num_external_tokens // bs
        if st is None or not st.lease:
            # vLLM waits for this request's load: answer it, as a failed
            # load, rather than leave it waiting for ever.
            log.error("kvstash: vLLM allocated %d external tokens for %s without a lease", num_external_tokens, rid)
            start = (st.lease_start if st is not None else 0)
            self._loads.append(LoadSpec(rid, 0, tuple(block_ids[start:start + n])))
            return
        dst = tuple(block_ids[st.lease_start:st.lease_start + n])
        if num_external_tokens % bs or len(dst) != n or n > st.lease_hits:
            log.error("kvstash: %s: %d external tokens into %d blocks do not match the lease's %d blocks",
                      rid, num_external_tokens, len(dst), st.lease_hits)
            self._drop_lease(st, rid)
            self._loads.append(LoadSpec(rid, 0, dst))
            return
        self._loads.append(LoadSpec(rid, st.lease, dst))
        self._lease_loads[st.lease] = [rid, self.world_size]
        st.loading, st.load_ids, st.load_start = st.lease, dst, st.lease_start
        st.saved = st.lease_start + n    # loaded blocks are in kvstashd already
        st.lease = 0
        self._unclaimed.discard(rid)

    def build(self, so: Any) -> StepPlan:
        """build_connector_meta: the step's plan; resets the step's state."""
        for rid in list(self._unclaimed):
            self._drop_lease(self._reqs[rid], rid)
        plan = StepPlan(step=self._step, loads=self._loads, finish_after_save=self._finish_after_save)
        self._loads, self._finish_after_save = [], set()

        for rid in getattr(so, "preempted_req_ids", None) or ():
            st = self._reqs.get(rid)
            if st is not None:
                st.block_ids = []
                if st.jobs:
                    plan.flush.add(rid)

        # Block tables: new requests bring all their blocks; running ones
        # the blocks added this step; resumed (preempted) ones all anew.
        scheduled: list[str] = []
        for nrd in so.scheduled_new_reqs:
            st = self._reqs.get(nrd.req_id)
            if st is not None:
                st.block_ids = list(nrd.block_ids[0])
                scheduled.append(nrd.req_id)
        cached = so.scheduled_cached_reqs
        resumed = getattr(cached, "resumed_req_ids", None) or set()
        for i, rid in enumerate(cached.req_ids):
            st = self._reqs.get(rid)
            if st is None:
                continue
            new = cached.new_block_ids[i]
            if rid in resumed:
                st.block_ids = list(new[0]) if new is not None else []
            elif new is not None:
                st.block_ids.extend(new[0])
            scheduled.append(rid)

        bs = self.settings.block_size
        for rid in scheduled:
            st = self._reqs[rid]
            req = st.request
            after = int(req.num_computed_tokens) + int(so.num_scheduled_tokens.get(rid, 0))
            full = min(after, int(req.num_tokens)) // bs
            hashes = getattr(req, "block_hashes", None) or ()
            full = min(full, len(hashes), len(st.block_ids))
            if full <= st.saved:
                continue
            ids = tuple(st.block_ids[st.saved:full])
            if 0 in ids:
                # vLLM's null block: a slot not backed by memory (never for
                # full attention); saving it would store zeros under a key.
                log.error("kvstash: %s: null block among blocks to save; not saving", rid)
                st.saved = full
                continue
            keys = b"".join(block_key(h) for h in hashes[st.saved:full])
            job = self._next_job
            self._next_job += 1
            plan.saves.append(SaveSpec(job, rid, keys, ids))
            self._jobs[job] = [rid, self.world_size]
            st.jobs.add(job)
            st.saved = full
        self._releases.reap()
        self._step += 1
        return plan

    def finished(self, request: Any) -> bool:
        """request_finished: True when vLLM must keep the blocks until finished_sending."""
        rid = request.request_id
        st = self._reqs.get(rid)
        if st is None:
            return False
        self._drop_lease(st, rid)
        st.finished = True
        if st.jobs:
            st.delayed = True
            self._finish_after_save.add(rid)
            return True
        if not st.loading:
            self._forget(rid)
        return False

    def worker_output(self, completed_saves: dict[int, int], completed_loads: dict[int, int],
                      finished_sending: set[str] | None, invalid_block_ids: set[int] | None) -> None:
        """update_connector_output: the ranks' aggregated reports of the last step."""
        for job, count in completed_saves.items():
            entry = self._jobs.get(job)
            if entry is None:
                continue
            entry[1] -= count
            if entry[1] > 0:
                continue
            del self._jobs[job]
            st = self._reqs.get(entry[0])
            if st is not None:
                st.jobs.discard(job)
        invalid = invalid_block_ids or set()
        if invalid:
            for st in self._reqs.values():
                bad = [i for i, b in enumerate(st.load_ids) if b in invalid]
                if bad:
                    # vLLM recomputes from the first failed block: save them again then.
                    st.saved = min(st.saved, st.load_start + bad[0])
                    st.load_ids = ()
        for lease, count in completed_loads.items():
            entry = self._lease_loads.get(lease)
            if entry is None:
                continue
            entry[1] -= count
            if entry[1] > 0:
                continue
            del self._lease_loads[lease]
            # Normally the ranks' LOADs consumed the lease (ENOENT); after a
            # failed LOAD on some rank this is what unpins its blocks.
            self._releases.release(lease)
            rid = entry[0]
            st = self._reqs.get(rid)
            if st is not None and st.loading == lease:
                st.loading = 0
                if st.finished and not st.delayed:
                    self._forget(rid)
        for rid in finished_sending or ():
            st = self._reqs.get(rid)
            if st is not None and not st.loading:
                self._forget(rid)
        self._releases.reap()

    def shutdown(self) -> None:
        for rid in list(self._unclaimed):
            self._drop_lease(self._reqs[rid], rid)
        self.session.close()   # the session's end drops every lease it made

    # ---- introspection (tests, debugging) --------------------------------------

    def tracked(self) -> int:
        """Requests this side still tracks."""
        return len(self._reqs)


__all__ = ["SchedulerCore"]
