"""Reclaim in the live broker (issue 22, docs/reclaim.md): the fair share, computed off the
allocation loop, and what becomes of each executor `allocator.reclaim` chooses.

At every allocation run (`Reclaimer.run`, under the broker's lock):

1. the executors still alive past their grace are killed (`Backend.kill`; the local backend
   sends SIGTERM, then SIGKILL), whether reclaim is still on or not: they were told to go;
2. the engine's cluster is handed to `FairShareWorker`, which recomputes the fair share on
   its own thread, only when agents, tenants, targets or the configuration changed
   (`FairShareCache`); it is shown (`GetAllocation`, metrics, `explain`) whether reclaim is
   on or not. The run uses the last completed result and never waits for it;
3. while `EngineConfig.reclaims`, each tenant's waiting time is kept: since when it has
   wanted more executors than it holds while holding fewer than its fair share;
4. once some tenant has waited `reclaim_after`, `select_reclaims` chooses among the live
   executors (those being killed at a tenant's request excepted), with the executors already
   leaving as `in_flight`; for each decision the store records the executor as LEAVING, with
   its beneficiary and its kill deadline, before anything else (write-ahead); then the
   executor is LEAVING in memory (GetAllocation, the heartbeat reply's `leaving`), one line
   is logged, and it is counted.

A reclaimed executor keeps its capacity until its process is gone; its exit is never a
failure (`tenants.executor_exited(reclaimed=True)`). A restarted broker takes the stored
reclaims back with their deadlines (`recover`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from allocator.backends.base import Backend, ExecutorState
from allocator.broker.store import Store, StoredReclaim, StoreError
from allocator.broker.tenants import Tenant
from allocator.engine import Engine
from allocator.engine_config import EngineConfig
from allocator.fair_share import FairShare, FairShareCache
from allocator.model import Cluster
from allocator.reclaim import Reclaim, RunningExecutor, hold_room, select_reclaims

log = logging.getLogger(__name__)

MINUTE = 60.0  # the window of `reclaim_per_minute`
HISTORY = 256  # reclaims kept for `explain`


class FairShareWorker:
    """The fair share on a thread of its own: `post` hands over the latest cluster (a copy:
    `Engine.cluster()` copies its arrays), `latest` is the last completed result. A post
    made while a fill runs replaces any older one still waiting, so the worker is at most
    one fill behind."""

    def __init__(self) -> None:
        self._cache = FairShareCache()
        self._cond = threading.Condition()
        self._posted: tuple[Cluster, EngineConfig, np.ndarray] | None = None
        self._latest: FairShare | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None

    @property
    def latest(self) -> FairShare | None:
        return self._latest

    @property
    def fills(self) -> int:
        """Fills computed so far (the other posts were answered from the cache)."""
        return self._cache.computed

    def post(self, cluster: Cluster, config: EngineConfig, known_demand: np.ndarray) -> None:
        with self._cond:
            if self._stopping:
                return
            self._posted = (cluster, config, known_demand)
            if self._thread is None:
                self._thread = threading.Thread(target=self._body, name="fair-share", daemon=True)
                self._thread.start()
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _body(self) -> None:
        while True:
            with self._cond:
                while self._posted is None and not self._stopping:
                    self._cond.wait()
                if self._stopping:
                    return
                cluster, config, known = self._posted
                self._posted = None
            try:
                share = self._cache.get(cluster, config, known)
            except Exception:  # the thread must outlive one bad cluster
                log.exception("fair share: computation failed")
                continue
            self._latest = share


@dataclass
class Leaving:
    decision: Reclaim
    deadline: float  # unix seconds: killed from then on if still alive
    killed: bool = False


class Reclaimer:
    """The broker's reclaim bookkeeping: the executors leaving, the tenants waiting, the
    reclaims of the last minute."""

    def __init__(self, store: Store, backend: Backend) -> None:
        self.store = store
        self.backend = backend
        self.fair = FairShareWorker()
        self.leaving: dict[tuple[str, str], Leaving] = {}
        self.waiting_since: dict[str, float] = {}  # tenant -> broker clock
        # One RunningExecutor per live executor, kept between runs: building tens of
        # thousands of them at every run cost more than the selection itself.
        self._known: dict[tuple[str, str], RunningExecutor] = {}
        self._recent: deque[float] = deque()  # broker clock of each reclaim in the last minute
        #: The last reclaims with their unix time, for `explain` (bounded: reclaims are few)
        self.history: deque[tuple[float, Reclaim]] = deque(maxlen=HISTORY)

    # ---- what the API shows ------------------------------------------------------------
    def fair_shares(self) -> dict[str, int]:
        """Tenant -> fair share in executors (empty until first computed)."""
        share = self.fair.latest
        return {} if share is None else share.as_dict()

    def leaving_of(self, tenant_id: str) -> list[str]:
        """The tenant's executors being reclaimed, until their processes are gone."""
        return [e for (t, e) in self.leaving if t == tenant_id]

    # ---- events --------------------------------------------------------------------------
    def gone(self, tenant_id: str, executor_id: str) -> bool:
        """An executor's process is gone (or forgotten); True if it was being reclaimed."""
        self._known.pop((tenant_id, executor_id), None)
        return self.leaving.pop((tenant_id, executor_id), None) is not None

    def recover(self, tenants: Mapping[str, Tenant], stored: list[StoredReclaim]) -> None:
        """After a restart: the adopted executors that were being reclaimed still are, with
        their deadlines."""
        for row in stored:
            tenant = tenants.get(row.tenant_id)
            record = tenant.executors.get(row.executor_id) if tenant is not None else None
            if record is None:
                continue  # not adopted: gone, and its rows with it
            record.state = ExecutorState.LEAVING
            decision = Reclaim(
                executor=row.executor_id, victim=row.tenant_id, agent=record.spec.agent,
                beneficiary=row.beneficiary, placement=row.placement, victim_executors=0,
                victim_fair_share=0, beneficiary_executors=0, beneficiary_fair_share=0,
            )  # fmt: skip
            self.leaving[(row.tenant_id, row.executor_id)] = Leaving(decision, row.deadline)
            log.info(
                "reclaim: executor %s/%s is still leaving for %s; killed in %.0f s if alive",
                row.tenant_id, row.executor_id, row.beneficiary,
                max(0.0, row.deadline - time.time()),
            )  # fmt: skip

    def stop(self) -> None:
        self.fair.stop()

    # ---- the allocation run's part -------------------------------------------------------
    def run(self, engine: Engine, tenants: Mapping[str, Tenant], now: float) -> list[Reclaim]:
        """Kill the overdue, then choose and record this run's reclaims (returned)."""
        for key in [k for k in self.leaving if k[1] not in _executors_of(tenants, k[0])]:
            del self.leaving[key]  # forgotten without an exit (agent lost, never reported)
        if len(self._known) > sum(len(t.executors) for t in tenants.values()):
            self._known = {
                k: v for k, v in self._known.items() if k[1] in _executors_of(tenants, k[0])
            }
        self._kill_overdue(time.time())
        config = engine.config
        self.fair.post(engine.cluster(), config, engine.known_demand())
        if not config.reclaims:
            self.waiting_since.clear()
            return []
        fair = self.fair.latest
        if fair is None:
            return []
        self._update_waiting(engine, tenants, fair, now)
        if not any(now - since >= config.reclaim_after for since in self.waiting_since.values()):
            return []
        while self._recent and self._recent[0] <= now - MINUTE:
            self._recent.popleft()
        decisions = select_reclaims(
            fair,
            self._running(tenants, fair),
            self.waiting_since,
            now,
            config.reclaim_limits(),
            reclaimed_last_minute=len(self._recent),
            in_flight=[leaving.decision for leaving in self.leaving.values()],
            protected_groups=config.protected_groups,
        )
        made = []
        for decision in decisions:
            if not self._ask_to_leave(tenants[decision.victim], decision, now, config):
                break  # the store refused: nothing more this run
            hold_room(engine, decision, now, config.reclaim_grace, config.interval)
            made.append(decision)
        return made

    def _update_waiting(
        self, engine: Engine, tenants: Mapping[str, Tenant], fair: FairShare, now: float
    ) -> None:
        """Since when each tenant has wanted more than it holds, below its fair share."""
        shares = fair.as_dict()
        pending = engine.pending()
        for name in [n for n in self.waiting_since if n not in tenants]:
            del self.waiting_since[name]
        for name, tenant in tenants.items():
            share = shares.get(name)
            waits = (
                share is not None
                and tenant.stopping_since is None
                and pending.get(name, 0) > 0
                and engine.tasks_of(name) < share
            )
            if waits:
                self.waiting_since.setdefault(name, now)
            else:
                self.waiting_since.pop(name, None)

    def _running(self, tenants: Mapping[str, Tenant], fair: FairShare) -> list[RunningExecutor]:
        """The executors holding capacity that the fair share knows of; those killed at a
        tenant's request are left out (they leave anyway; their room is as good as free)."""
        frameworks = set(fair.cluster.framework_names)
        agents = set(fair.cluster.agent_names)
        known = self._known
        out = []
        for name, tenant in tenants.items():
            if name not in frameworks:
                continue
            for executor_id, record in tenant.executors.items():
                if record.state is ExecutorState.KILLING or record.spec.agent not in agents:
                    continue
                running = known.get((name, executor_id))
                if running is None:
                    running = known[name, executor_id] = RunningExecutor(
                        executor_id, name, record.spec.agent, record.granted_at
                    )
                out.append(running)
        return out

    def _ask_to_leave(
        self, tenant: Tenant, decision: Reclaim, now: float, config: EngineConfig
    ) -> bool:
        """Record, then mark, one reclaim; False if the store could not record it."""
        key = (tenant.tenant_id, decision.executor)
        record = tenant.executors[decision.executor]
        deadline = time.time() + config.reclaim_grace
        try:
            self.store.record_reclaim(
                StoredReclaim(*key, decision.beneficiary, decision.placement, deadline)
            )
        except StoreError as error:
            log.error("reclaim of %s/%s not recorded, so not made: %s", *key, error)
            return False
        record.state = ExecutorState.LEAVING
        self.leaving[key] = Leaving(decision, deadline)
        self._recent.append(now)
        self.history.append((time.time(), decision))
        tenant.reclaimed += 1
        log.info(
            "reclaim: executor %s/%s on %s leaves for %s (%s holds %d, fair share %d; %s holds "
            "%d, fair share %d); killed in %g s if still running",
            tenant.tenant_id, decision.executor, decision.agent, decision.beneficiary,
            tenant.tenant_id, decision.victim_executors, decision.victim_fair_share,
            decision.beneficiary, decision.beneficiary_executors,
            decision.beneficiary_fair_share, config.reclaim_grace,
        )  # fmt: skip
        return True

    def _kill_overdue(self, wall: float) -> None:
        for key, leaving in list(self.leaving.items()):  # a kill may report the exit at once
            if leaving.killed or wall < leaving.deadline:
                continue
            leaving.killed = True
            log.info("reclaim: executor %s/%s is still running past its grace; killing it", *key)
            try:
                self.backend.kill(*key)
            except Exception:  # retried at the next run
                leaving.killed = False
                log.exception("reclaim: kill of %s/%s failed", *key)


def _executors_of(tenants: Mapping[str, Tenant], tenant_id: str) -> Mapping[str, object]:
    tenant = tenants.get(tenant_id)
    return tenant.executors if tenant is not None else {}
