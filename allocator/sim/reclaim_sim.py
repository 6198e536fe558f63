"""Reclaim in virtual time (issue 22): the simulators' side of `allocator.reclaim`.

`SimReclaim` holds what the broker would: the running executors with their start times, the
decisions whose executor is still leaving, since when each framework has wanted more than
it holds, and the reclaims of the last minute. At each allocation run the driver calls
`run(now)`, which asks `select_reclaims` (the same function the broker calls) with the
fair share of the engine's current state (`FairShareCache`). The driver then lets each
reclaimed executor leave: it keeps its resources for the grace and is killed after it
(docs/reclaim.md, "In the simulator", says what the batch simulator models of that).

`FairShareWatch` measures, with or without reclaim, when each framework first holds its
fair share.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import numpy as np

from allocator.engine import Engine
from allocator.engine_config import EngineConfig
from allocator.fair_share import FairShareCache
from allocator.reclaim import Reclaim, RunningExecutor, hold_room, select_reclaims

#: The window of `reclaim_per_minute`.
MINUTE = 60.0


class SimReclaim:
    def __init__(self, engine: Engine, config: EngineConfig) -> None:
        if not config.reclaims:
            raise ValueError("SimReclaim: reclaim is off (reclaim_after 0)")
        self.engine = engine
        self.limits = config.reclaim_limits()
        self.grace = config.reclaim_grace
        self.interval = config.interval
        self.protected = config.protected_groups
        self.fair = FairShareCache()
        self.executors: dict[str, RunningExecutor] = {}
        self.leaving: dict[str, Reclaim] = {}
        self.waiting_since: dict[str, float] = {}
        self.recent: deque[float] = deque()  # times of the reclaims of the last minute
        self.decisions: list[tuple[float, Reclaim]] = []

    def started(self, executor: str, framework: str, agent: str, now: float) -> None:
        self.executors[executor] = RunningExecutor(executor, framework, agent, now)

    def gone(self, executor: str) -> None:
        """The executor ended (its work done, killed, or its job's end)."""
        self.executors.pop(executor, None)
        self.leaving.pop(executor, None)

    def run(self, now: float) -> list[Reclaim]:
        """The executors to reclaim now; each is counted as leaving until `gone`."""
        pending = self.engine.pending()
        for name, wanted in pending.items():
            if wanted > 0:
                self.waiting_since.setdefault(name, now)
            else:
                self.waiting_since.pop(name, None)
        for name in [n for n in self.waiting_since if n not in pending]:
            del self.waiting_since[name]
        after = self.limits.reclaim_after
        if not any(now - since >= after for since in self.waiting_since.values()):
            return []
        while self.recent and self.recent[0] <= now - MINUTE:
            self.recent.popleft()
        decisions = select_reclaims(
            self.fair.get(self.engine),
            list(self.executors.values()),
            self.waiting_since,
            now,
            self.limits,
            reclaimed_last_minute=len(self.recent),
            in_flight=list(self.leaving.values()),
            protected_groups=self.protected,
        )
        for decision in decisions:
            hold_room(self.engine, decision, now, self.grace, self.interval)
            self.leaving[decision.executor] = decision
            self.recent.append(now)
            self.decisions.append((now, decision))
        return decisions


@dataclass
class FairShareWatch:
    """When each framework first held at least its fair share (the engine's executors,
    starting ones included, against `fair_shares` of the state at that run)."""

    engine: Engine
    fair: FairShareCache = field(default_factory=FairShareCache)
    reached: dict[str, float] = field(default_factory=dict)

    def observe(self, now: float) -> None:
        share = self.fair.get(self.engine)
        names = share.cluster.framework_names
        wanted = np.flatnonzero(share.active & (share.executors > 0))
        for n in wanted:
            name = names[n]
            if name in self.reached:
                continue
            if self.engine.tasks_of(name) >= share.executors[n]:
                self.reached[name] = now
