"""Reclaim victim selection (issue 22): which running executors to ask to leave so that a
framework held below its fair share for long enough gets room it can use.

A pure function of the current executors, the fair shares (`allocator.fair_share`) and the
knobs; the caller (the broker with live executors, a simulator with the engine's tasks)
asks the executors to leave, keeps their capacity counted as used until they are gone, and
passes those decisions back as `in_flight` until then. The normal allocation run serves the
beneficiary once the room is free.

One placement at a time, until the bounds or the candidates run out:

1. the beneficiary is the waiting framework furthest below its fair share, measured in the
   active criterion (executors short times the criterion's price of one executor; ties: the
   lowest slot). A framework waits when it has wanted more executors than it holds for at
   least `reclaim_after` seconds and holds fewer than its fair share;
2. if one executor of the beneficiary already fits in free room on an eligible agent, that
   room is counted as its (the allocation run will serve it) and nothing is killed;
3. otherwise the victim is the framework most over its fair share in the same measure,
   skipping opted-out groups; on each agent the beneficiary may use, the fewest of the
   victim's youngest reclaimable executors whose room, with the free room and the room of
   executors already leaving, fits one beneficiary executor; the agent needing the fewest
   kills wins (then the least work lost, then the lowest slot). A victim never goes below
   its fair share and executors younger than `min_runtime` are never taken. If the most
   over-share victim has no such agent, the next one is tried; if none has, the
   beneficiary is left for this run.

The room of one placement comes from one victim; kills are never partial (a placement
needing more kills than the bounds still allow is not started).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from operator import attrgetter
from typing import Protocol

import numpy as np

from allocator.model import Cluster


class FairShare(Protocol):
    """What the choice reads of a fair share (`allocator.fair_share.FairShare`). A protocol:
    `EngineConfig.reclaim_limits` imports this module, and the fair share imports the
    configuration, so importing it here would close an import cycle."""

    @property
    def cluster(self) -> Cluster: ...

    @property
    def executors(self) -> np.ndarray: ...

    @property
    def unit(self) -> np.ndarray: ...


#: The knobs' defaults as `ReclaimLimits` takes them (serve's are EngineConfig's, docs/reclaim.md).
DEFAULT_RECLAIM_AFTER = 30.0
DEFAULT_MIN_RUNTIME = 5.0
DEFAULT_PER_RUN = 10
DEFAULT_PER_MINUTE = 60


@dataclass(frozen=True)
class ReclaimLimits:
    """`reclaim_after` seconds a framework must have waited (0 disables reclaim);
    `min_runtime` seconds an executor must have run before it may be taken; at most
    `per_run` executors per call and `per_minute` in any minute."""

    reclaim_after: float = DEFAULT_RECLAIM_AFTER
    min_runtime: float = DEFAULT_MIN_RUNTIME
    per_run: int = DEFAULT_PER_RUN
    per_minute: int = DEFAULT_PER_MINUTE

    def __post_init__(self) -> None:
        for name in ("reclaim_after", "min_runtime"):
            value = getattr(self, name)
            if not (np.isfinite(value) and value >= 0):
                raise ValueError(f"{name}: must be finite and >= 0, got {value}")
        for name in ("per_run", "per_minute"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)}")

    @property
    def enabled(self) -> bool:
        return self.reclaim_after > 0


@dataclass(frozen=True)
class RunningExecutor:
    id: str
    framework: str
    agent: str
    started: float  # seconds, the caller's clock


@dataclass(frozen=True)
class Reclaim:
    """Ask `executor` of `victim` on `agent` to leave so that `beneficiary` fits there.

    Decisions with the same `placement` (the id of the placement's first executor, unique
    across runs) together make room for one executor of the beneficiary. The counts are the
    projected executors before this decision (what the reclaim log line reports next to the
    fair shares)."""

    executor: str
    victim: str
    agent: str
    beneficiary: str
    placement: str
    victim_executors: int
    victim_fair_share: int
    beneficiary_executors: int
    beneficiary_fair_share: int


class _Projection:
    """Executors per framework per agent and free room per agent, as they will be once the
    executors leaving are gone and the beneficiaries placed."""

    def __init__(self, fair: FairShare, executors: Sequence[RunningExecutor]) -> None:
        cluster = fair.cluster
        self.frameworks = {name: n for n, name in enumerate(cluster.framework_names)}
        self.agents = {name: i for i, name in enumerate(cluster.agent_names)}
        self.demand = np.nan_to_num(cluster.demand, nan=0.0)
        self.eligible = cluster.eligible
        self.tol = 1e-9 * np.maximum(cluster.capacity.max(axis=0, initial=0.0), 1.0)
        self.fw = self._indices(self.frameworks, executors, "framework", "has no fair share")
        self.ag = self._indices(self.agents, executors, "agent", "is not a known agent")
        self.started = np.fromiter(map(attrgetter("started"), executors), float, len(executors))
        self.held = np.zeros((cluster.n_frameworks, cluster.n_agents), dtype=np.int64)
        np.add.at(self.held, (self.fw, self.ag), 1)
        self.room = cluster.capacity - self.held.T @ self.demand
        self.count = self.held.sum(axis=1)

    @staticmethod
    def _indices(
        index: Mapping[str, int], executors: Sequence[RunningExecutor], field: str, what: str
    ) -> np.ndarray:
        names = map(attrgetter(field), executors)
        try:  # map and fromiter: one C-level pass, tens of thousands of executors
            return np.fromiter(map(index.__getitem__, names), np.int64, len(executors))
        except KeyError as missing:
            raise ValueError(f"reclaim: {field} {missing.args[0]!r} {what}") from None

    def leave(self, framework: int, agent: int, executors: int = 1) -> None:
        self.held[framework, agent] -= executors
        self.count[framework] -= executors
        self.room[agent] += executors * self.demand[framework]

    def place(self, framework: int, agent: int, executors: int = 1) -> None:
        self.held[framework, agent] += executors
        self.count[framework] += executors
        self.room[agent] -= executors * self.demand[framework]

    def whole_fits(self, framework: int, agent: int) -> int:
        """Executors of `framework` the free room of `agent` holds."""
        d = self.demand[framework]
        need = d > 0
        if not need.any():
            return 0
        return int(np.floor((self.room[agent, need] + self.tol[need]) / d[need]).min())

    def fits(self, framework: int) -> np.ndarray:
        """(A,) eligible agents where one executor of `framework` fits in free room."""
        ok = (self.demand[framework] <= self.room + self.tol).all(axis=1)
        return ok & self.eligible[framework]

    def kills_needed(self, beneficiary: int, victim: int) -> np.ndarray:
        """(A,) executors of `victim` to remove from each agent before one executor of
        `beneficiary` fits there (inf where no number of them would do)."""
        short = self.demand[beneficiary] - self.room - self.tol  # (A, R)
        d_v = self.demand[victim]
        with np.errstate(divide="ignore", invalid="ignore"):
            per_resource = np.where(short > 0, np.where(d_v > 0, np.ceil(short / d_v), np.inf), 0.0)
        return per_resource.max(axis=1, initial=0.0)


class _Candidates:
    """The reclaimable executors (old enough, not leaving yet, not opted out), youngest
    first within each (framework, agent), consumed from the front."""

    def __init__(self, projection: _Projection, reclaimable: np.ndarray, now: float) -> None:
        n_f, n_a = projection.held.shape
        chosen = np.flatnonzero(reclaimable)
        started = projection.started[chosen]
        key = projection.fw[chosen] * n_a + projection.ag[chosen]
        # Youngest first (latest start); equal start times in the order given (stable).
        order = np.lexsort((-started, key)) if len(chosen) else chosen
        self.index = chosen[order]
        self.age = now - started[order]
        self.cumulative_age = np.concatenate(([0.0], np.cumsum(self.age)))
        counts = np.bincount(key, minlength=n_f * n_a).reshape(n_f, n_a)
        self.start = np.concatenate(([0], np.cumsum(counts.ravel())[:-1])).reshape(n_f, n_a)
        self.available = counts
        self.taken = np.zeros_like(counts)

    def left(self, framework: int) -> np.ndarray:
        """(A,) reclaimable executors of `framework` still untaken on each agent."""
        return self.available[framework] - self.taken[framework]

    def work_lost(self, framework: int, agents: np.ndarray, kills: np.ndarray) -> np.ndarray:
        """Seconds run by the `kills` youngest untaken executors on each of `agents`."""
        first = self.start[framework, agents] + self.taken[framework, agents]
        return self.cumulative_age[first + kills] - self.cumulative_age[first]

    def take(self, framework: int, agent: int, kills: int) -> np.ndarray:
        """Indices (into the executors) of the `kills` youngest untaken ones."""
        first = self.start[framework, agent] + self.taken[framework, agent]
        self.taken[framework, agent] += kills
        return self.index[first : first + kills]


#: After a reclaim the victim is kept off that agent for the grace and at least this long
#: more, so that the room goes to the beneficiary: under the per-agent criteria (PS-DSF,
#: rPS-DSF) the allocation run may prefer the victim on that very agent, and without the
#: hold the room went back to it at the next run (docs/reclaim.md, "disagree").
HOLD_SECONDS = 10.0
HOLD_RUNS = 3


class Refuses(Protocol):
    def refuse(self, framework: str, agent: str, until: float) -> None: ...


def hold_room(
    engine: Refuses, decision: Reclaim, now: float, grace: float, interval: float
) -> None:
    """Keep the victim off the agent its executor is reclaimed from (the engine's refuse
    filter) until the room has gone to the beneficiary."""
    hold = max(HOLD_SECONDS, HOLD_RUNS * interval)
    engine.refuse(decision.victim, decision.agent, now + grace + hold)


def select_reclaims(
    fair: FairShare,
    executors: Sequence[RunningExecutor],
    waiting_since: Mapping[str, float],
    now: float,
    limits: ReclaimLimits,
    *,
    reclaimed_last_minute: int = 0,
    in_flight: Sequence[Reclaim] = (),
    protected_groups: Collection[str] = (),
) -> list[Reclaim]:
    """The executors to reclaim now (see the module docstring for the rule).

    `executors`: every running executor, those already leaving included (their capacity is
    used until they are gone). `waiting_since`: framework -> since when it has wanted more
    executors than it holds, for the frameworks that do. `in_flight`: earlier decisions
    whose executor still runs. `protected_groups`: groups (roles) with `preemptible: false`.
    """
    budget = min(limits.per_run, limits.per_minute - reclaimed_last_minute)
    if not limits.enabled or budget <= 0:
        return []
    projection = _Projection(fair, executors)
    cluster = fair.cluster
    fair_count = fair.executors
    unit = fair.unit

    leaving = {r.executor: r for r in in_flight}
    is_leaving = np.zeros(len(executors), dtype=bool)
    if leaving:
        ids = map(attrgetter("id"), executors)
        is_leaving = np.fromiter(map(leaving.__contains__, ids), bool, len(executors))
    _project_in_flight(projection, executors, is_leaving, leaving, fair_count)

    protected = np.array([r in protected_groups for r in cluster.role_names])[cluster.role_of]
    reclaimable = (now - projection.started >= limits.min_runtime) & ~is_leaving
    reclaimable &= ~protected[projection.fw]
    candidates = _Candidates(projection, reclaimable, now)

    waiting = np.zeros(cluster.n_frameworks, dtype=bool)
    for name, since in waiting_since.items():
        n = projection.frameworks.get(name)
        if n is not None and now - since >= limits.reclaim_after:
            waiting[n] = True

    decisions: list[Reclaim] = []
    while budget > 0:
        short = np.where(waiting, fair_count - projection.count, 0)
        if not (short > 0).any():
            break
        beneficiary = int(np.argmax(np.where(short > 0, short * unit, -np.inf)))
        free = np.flatnonzero(projection.fits(beneficiary))
        if free.size:  # the allocation run can serve it without a kill
            agent = int(free[0])
            fit = projection.whole_fits(beneficiary, agent)
            projection.place(beneficiary, agent, max(1, min(fit, int(short[beneficiary]))))
            continue
        made = _reclaim_for(
            beneficiary, projection, candidates, fair_count, unit, protected, budget
        )
        if made is None:
            waiting[beneficiary] = False  # nothing can make room for it in this run
            continue
        victim, agent, chosen = made
        placement = executors[chosen[0]].id
        for k in chosen:
            decisions.append(
                Reclaim(
                    executor=executors[k].id,
                    victim=cluster.framework_names[victim],
                    agent=cluster.agent_names[agent],
                    beneficiary=cluster.framework_names[beneficiary],
                    placement=placement,
                    victim_executors=int(projection.count[victim]),
                    victim_fair_share=int(fair_count[victim]),
                    beneficiary_executors=int(projection.count[beneficiary]),
                    beneficiary_fair_share=int(fair_count[beneficiary]),
                )
            )
            projection.leave(victim, agent)
        projection.place(beneficiary, agent)
        budget -= len(chosen)
    return decisions


def _project_in_flight(
    projection: _Projection,
    executors: Sequence[RunningExecutor],
    is_leaving: np.ndarray,
    leaving: Mapping[str, Reclaim],
    fair_count: np.ndarray,
) -> None:
    """Remove the executors already leaving and place their beneficiaries where their room
    was made: on each agent, one executor per earlier placement that the room holds, up to
    the beneficiary's fair share."""
    placements: dict[tuple[int, int], set[str]] = {}
    for k in np.flatnonzero(is_leaving):
        executor = executors[k]
        decision = leaving[executor.id]
        projection.leave(int(projection.fw[k]), int(projection.ag[k]))
        beneficiary = projection.frameworks.get(decision.beneficiary)
        if beneficiary is None:  # gone since: the room is simply free
            continue
        key = (beneficiary, int(projection.ag[k]))
        placements.setdefault(key, set()).add(decision.placement)
    for (beneficiary, agent), made in sorted(placements.items()):
        room_for = projection.whole_fits(beneficiary, agent)
        below = int(fair_count[beneficiary] - projection.count[beneficiary])
        placed = max(0, min(len(made), room_for, below))
        if placed:
            projection.place(beneficiary, agent, placed)


def _reclaim_for(
    beneficiary: int,
    projection: _Projection,
    candidates: _Candidates,
    fair_count: np.ndarray,
    unit: np.ndarray,
    protected: np.ndarray,
    budget: int,
) -> tuple[int, int, np.ndarray] | None:
    """(victim, agent, executor indices) that make room for one executor of `beneficiary`,
    or None."""
    over = projection.count - fair_count
    eligible_victims = (over > 0) & ~protected
    eligible_victims[beneficiary] = False
    if not eligible_victims.any():
        return None
    measure = np.where(eligible_victims, over * unit, -np.inf)
    # Most over-share first; a stable sort keeps the lowest slot first among equals.
    for victim in np.argsort(-measure, kind="stable"):
        if not eligible_victims[victim]:
            break
        victim = int(victim)
        kills = projection.kills_needed(beneficiary, victim)
        allowed = np.minimum(candidates.left(victim), min(int(over[victim]), budget))
        feasible = projection.eligible[beneficiary] & (kills >= 1) & (kills <= allowed)
        if not feasible.any():
            continue
        agents = np.flatnonzero(feasible)
        needed = kills[agents].astype(np.int64)
        fewest = agents[needed == needed.min()]
        lost = candidates.work_lost(victim, fewest, np.full(fewest.size, needed.min()))
        agent = int(fewest[np.argmin(lost)])  # argmin: the lowest slot among equals
        return victim, agent, candidates.take(victim, agent, int(needed.min()))
    return None
