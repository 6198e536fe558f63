"""The online allocation engine: cluster state changed by events, allocation runs on demand.

The engine is pure: no clock, no I/O. A driver (the simulator, the live broker) tells it what
happened (`add_agent`, `register`, `set_target`, `release`, ...) and when to run an allocation
(`allocate(now)`); it answers with grants. Each run takes a snapshot of the registered agents
and frameworks as a `Cluster`, replays the running tasks into an `AllocationState`, and runs
the very same `progressive_fill` as the static fill.

Timing follows Mesos 1.x: a run happens every allocation interval, and at once when an agent
or framework is added or a framework revives (`run_now` tells the driver). Resources freed by
finished tasks wait for the next tick, unless the trigger is `release`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from allocator.errors import FairbrokerError
from allocator.filling import progressive_fill
from allocator.model import Cluster, _matches
from allocator.policy import Selection, Ties, scheduler
from allocator.policy.levels import Level
from allocator.state import AllocationState, Mode

#: Mesos's default refuse filter for declined resources, and allocation interval.
DEFAULT_REFUSE_SECONDS = 5.0
DEFAULT_INTERVAL_SECONDS = 1.0


class Trigger(StrEnum):
    """tick: freed resources wait for the next periodic run (Mesos). release: run at once."""

    TICK = "tick"
    RELEASE = "release"


class EngineError(FairbrokerError):
    """An event the engine cannot apply (unknown names, bad demand, ...)."""


@dataclass
class AgentRecord:
    name: str
    capacity: np.ndarray
    attributes: dict[str, object] = field(default_factory=dict)


@dataclass
class FrameworkRecord:
    name: str
    demand: np.ndarray  # the executor's real size; the policy sees it only if characterized
    role: str = "*"
    weight: float = 1.0
    constraints: dict[str, object] = field(default_factory=dict)
    target: float = 0.0  # tasks it wants in all (running + pending)
    declared: bool = True  # d_n declared to the allocator (characterized)


@dataclass(frozen=True)
class EngineGrant:
    framework: str
    agent: str
    tasks: int
    resources: dict[str, float]


class Engine:
    def __init__(
        self,
        resources: tuple[str, ...],
        scheduler_name: str,
        mode: Mode | str = Mode.CHARACTERIZED,
        selection: Selection | str | None = None,
        level: Level | str = Level.ROLE,
        trigger: Trigger | str = Trigger.TICK,
        ties: Ties | str = Ties.RANDOM,
        seed: int = 0,
        refuse_seconds: float = DEFAULT_REFUSE_SECONDS,
        role_weights: dict[str, float] | None = None,
    ) -> None:
        self.resources = tuple(resources)
        self.configure(scheduler_name, mode, selection)
        self.level = Level(level)
        self.trigger = Trigger(trigger)
        self.ties = Ties(ties)
        self.rng = np.random.default_rng(seed)
        self.refuse_seconds = refuse_seconds
        self.role_weights = dict(role_weights or {})
        self.agents: dict[str, AgentRecord] = {}
        self.frameworks: dict[str, FrameworkRecord] = {}
        self.running: dict[tuple[str, str], int] = {}  # (framework, agent) -> tasks
        self.observed: dict[str, np.ndarray] = {}  # oblivious: demand seen from grants
        self.filters: dict[tuple[str, str], float] = {}  # (framework, agent) -> refused until
        self.run_now = False  # an event asks for an allocation before the next tick
        self.grants_total = 0

    # ---- configuration -----------------------------------------------------------------
    def configure(
        self, scheduler_name: str, mode: Mode | str, selection: Selection | str | None = None
    ) -> None:
        """Switch scheduler and mode (at start, or at run time through the broker's API)."""
        chosen = scheduler(scheduler_name)
        self.scheduler = chosen
        self.mode = Mode(mode)
        self.selection = Selection(selection or chosen.default_selection)

    # ---- events ------------------------------------------------------------------------
    def _vector(self, amounts: dict[str, float], what: str) -> np.ndarray:
        unknown = set(amounts) - set(self.resources)
        if unknown:
            raise EngineError(f"{what}: unknown resource {sorted(unknown)[0]!r}")
        vector = np.array([float(amounts.get(r, 0.0)) for r in self.resources])
        if not np.isfinite(vector).all() or (vector < 0).any() or not (vector > 0).any():
            raise EngineError(f"{what}: must be finite, non-negative and positive somewhere")
        return vector

    def add_agent(
        self, name: str, capacity: dict[str, float], attributes: dict | None = None
    ) -> None:
        if name in self.agents:
            raise EngineError(f"agent {name!r}: already registered")
        self.agents[name] = AgentRecord(
            name, self._vector(capacity, f"agent {name!r}"), dict(attributes or {})
        )
        self.run_now = True

    def remove_agent(self, name: str) -> list[tuple[str, int]]:
        """Forget an agent; returns the (framework, tasks) that were running there (lost)."""
        self._agent(name)
        lost = [(f, k) for (f, a), k in self.running.items() if a == name]
        for framework, _ in lost:
            del self.running[(framework, name)]
        self.filters = {key: t for key, t in self.filters.items() if key[1] != name}
        del self.agents[name]
        return lost

    def register(
        self,
        name: str,
        demand: dict[str, float],
        role: str = "*",
        weight: float = 1.0,
        target: float = 0.0,
        constraints: dict | None = None,
        declared: bool | None = None,
    ) -> None:
        if name in self.frameworks:
            raise EngineError(f"framework {name!r}: already registered")
        if not (weight > 0 and np.isfinite(weight)):
            raise EngineError(f"framework {name!r}: weight must be positive")
        vector = self._vector(demand, f"framework {name!r} demand")
        fits = any(
            (vector <= a.capacity + 1e-9).all() and _matches(a.attributes, constraints or {})
            for a in self.agents.values()
        )
        if self.agents and not fits:
            raise EngineError(f"framework {name!r}: demand fits no registered agent")
        self.frameworks[name] = FrameworkRecord(
            name,
            vector,
            role,
            float(weight),
            dict(constraints or {}),
            float(target),
            self.mode is Mode.CHARACTERIZED if declared is None else declared,
        )
        self.run_now = True

    def unregister(self, name: str) -> list[tuple[str, int]]:
        """Remove a framework; returns its (agent, tasks) still running (now freed)."""
        self._framework(name)
        freed = [(a, k) for (f, a), k in self.running.items() if f == name]
        for agent, _ in freed:
            del self.running[(name, agent)]
        self.filters = {key: t for key, t in self.filters.items() if key[0] != name}
        self.observed.pop(name, None)
        del self.frameworks[name]
        if freed and self.trigger is Trigger.RELEASE:
            self.run_now = True
        return freed

    def set_target(self, name: str, target: float) -> None:
        """How many tasks the framework wants in all; raising it is a revive."""
        record = self._framework(name)
        if target < 0:
            raise EngineError(f"framework {name!r}: target must not be negative")
        if target > record.target:
            self.run_now = True
            self.filters = {key: t for key, t in self.filters.items() if key[0] != name}
        record.target = float(target)

    def release(self, framework: str, agent: str, tasks: int = 1) -> None:
        """Tasks finished or failed: their resources return to the pool."""
        key = (framework, agent)
        held = self.running.get(key, 0)
        if tasks > held:
            raise EngineError(
                f"framework {framework!r} holds {held} tasks on {agent!r}, not {tasks}"
            )
        if held == tasks:
            del self.running[key]
        else:
            self.running[key] = held - tasks
        if self.trigger is Trigger.RELEASE:
            self.run_now = True

    def adopt(self, framework: str, agent: str, tasks: int = 1) -> None:
        """Count tasks that are already running (after a broker restart) without granting."""
        self._framework(framework)
        self._agent(agent)
        self.running[(framework, agent)] = self.running.get((framework, agent), 0) + tasks

    def _agent(self, name: str) -> AgentRecord:
        try:
            return self.agents[name]
        except KeyError:
            raise EngineError(f"unknown agent {name!r}") from None

    def _framework(self, name: str) -> FrameworkRecord:
        try:
            return self.frameworks[name]
        except KeyError:
            raise EngineError(f"unknown framework {name!r}") from None

    # ---- queries -----------------------------------------------------------------------
    def tasks_of(self, framework: str) -> int:
        return sum(k for (f, _), k in self.running.items() if f == framework)

    def pending(self) -> dict[str, int]:
        """Tasks each framework still wants beyond what it runs."""
        counts: dict[str, int] = {}
        for (f, _), k in self.running.items():
            counts[f] = counts.get(f, 0) + k
        return {
            name: max(0, int(r.target) - counts.get(name, 0)) for name, r in self.frameworks.items()
        }

    # ---- allocation --------------------------------------------------------------------
    def snapshot(self, now: float) -> AllocationState:
        """The registered cluster as a Cluster, with running tasks replayed into a state."""
        agents = list(self.agents.values())
        frameworks = list(self.frameworks.values())
        roles = sorted({f.role for f in frameworks}) or ["*"]
        eligible = np.array(
            [[_matches(a.attributes, f.constraints) for a in agents] for f in frameworks],
            dtype=bool,
        ).reshape(len(frameworks), len(agents))
        agent_index = {a.name: i for i, a in enumerate(agents)}
        framework_index = {f.name: n for n, f in enumerate(frameworks)}
        for (f, a), until in self.filters.items():
            if until > now:
                eligible[framework_index[f], agent_index[a]] = False
        cluster = Cluster(
            resources=self.resources,
            agent_names=tuple(a.name for a in agents),
            framework_names=tuple(f.name for f in frameworks),
            capacity=np.array([a.capacity for a in agents]).reshape(len(agents), -1),
            demand=np.array([f.demand for f in frameworks]).reshape(len(frameworks), -1),
            weight=np.array([f.weight for f in frameworks], dtype=float),
            eligible=eligible,
            max_tasks=np.array([f.target for f in frameworks], dtype=float),
            role_of=np.array([roles.index(f.role) for f in frameworks], dtype=np.int64),
            role_names=tuple(roles),
            role_weight=np.array([self.role_weights.get(r, 1.0) for r in roles]),
        )
        state = AllocationState(cluster, self.mode)
        for (f, a), k in self.running.items():
            state.grant(framework_index[f], agent_index[a], k)
        # What the policy may know: declared demand, or what earlier grants revealed.
        for n, f in enumerate(frameworks):
            if f.declared:
                state.known_demand[n] = f.demand
            elif f.name in self.observed:
                state.known_demand[n] = self.observed[f.name]
            else:
                state.known_demand[n] = np.nan
        state.demand_version += 1
        return state

    def allocate(self, now: float) -> list[EngineGrant]:
        """One allocation run: progressive filling on the current snapshot."""
        self.run_now = False
        self.filters = {key: t for key, t in self.filters.items() if t > now}
        if not self.agents or not any(self.pending().values()):
            return []
        state = self.snapshot(now)
        oblivious = self.mode is Mode.OBLIVIOUS
        grants = progressive_fill(
            state,
            self.scheduler.criterion(),
            self.selection,
            self.rng,
            self.ties,
            level=self.level,
            single_offer=oblivious,
        )
        out = []
        cluster = state.cluster
        for grant in grants:
            f = cluster.framework_names[grant.framework]
            a = cluster.agent_names[grant.agent]
            record = self.frameworks[f]
            self.running[(f, a)] = self.running.get((f, a), 0) + grant.tasks
            if oblivious:
                self.observed.setdefault(f, record.demand.copy())
                # The tenant keeps whole tasks and declines the rest of the offer.
                self.filters[(f, a)] = now + self.refuse_seconds
            out.append(
                EngineGrant(
                    f,
                    a,
                    grant.tasks,
                    dict(zip(self.resources, map(float, record.demand), strict=True)),
                )
            )
        self.grants_total += len(out)
        return out
