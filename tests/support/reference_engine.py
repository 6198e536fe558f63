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

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from allocator.engine_config import EngineConfig, Trigger
from allocator.errors import FairbrokerError
from allocator.filling import progressive_fill
from allocator.mesos_defaults import MIN_ALLOCATABLE
from allocator.model import Cluster, matches_constraints
from allocator.policy import scheduler
from allocator.state import AllocationState, Mode


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


class _Slots:
    """Names to reusable row indices of growable arrays."""

    def __init__(self) -> None:
        self.index: dict[str, int] = {}
        self.free: list[int] = []
        self.size = 0

    def add(self, name: str) -> int:
        slot = self.free.pop() if self.free else self.size
        self.size = max(self.size, slot + 1)
        self.index[name] = slot
        return slot

    def remove(self, name: str) -> int:
        slot = self.index.pop(name)
        self.free.append(slot)
        return slot


def _grow(array: np.ndarray, rows: int, cols: int | None = None, fill: object = 0) -> np.ndarray:
    """`array` padded with `fill` to at least `rows` rows (and `cols` columns if 2-D),
    doubling so that repeated growth stays cheap."""
    need_rows = rows > array.shape[0]
    need_cols = array.ndim == 2 and cols is not None and cols > array.shape[1]
    if not (need_rows or need_cols):
        return array
    new_rows = max(rows, 2 * array.shape[0], 8) if need_rows else array.shape[0]
    shape: tuple[int, ...] = (new_rows,)
    if array.ndim == 2:
        new_cols = max(cols or 0, 2 * array.shape[1], 8) if need_cols else array.shape[1]
        shape = (new_rows, new_cols)
    out = np.full(shape, fill, dtype=array.dtype)
    out[tuple(slice(0, n) for n in array.shape)] = array
    return out


def _from_config(name: str) -> property:
    return property(lambda engine: getattr(engine.config, name), doc=f"config.{name}")


class Engine:
    """Online allocation state in slot arrays, so an allocation run costs array copies."""

    def __init__(
        self,
        resources: tuple[str, ...],
        config: EngineConfig,
        min_allocatable: dict[str, float] | None = None,
    ) -> None:
        self.resources = tuple(resources)
        self.apply(config)
        self.rng = np.random.default_rng(config.seed)
        self.agents: dict[str, AgentRecord] = {}
        self.frameworks: dict[str, FrameworkRecord] = {}
        self.filters: dict[tuple[str, str], float] = {}  # (framework, agent) -> refused until
        # What a framework declined on an agent: its filter holds only while the agent's free
        # resources stay within this (Mesos's RefusedOfferFilter); absent: refused outright.
        self.declined: dict[tuple[str, str], np.ndarray] = {}
        self.run_now = False  # an event asks for an allocation before the next tick
        self.grants_total = 0
        self.runs = 0
        n_r = len(self.resources)
        self._agent_slots = _Slots()
        self._framework_slots = _Slots()
        self._capacity = np.zeros((0, n_r))
        self._demand = np.zeros((0, n_r))
        self._known = np.zeros((0, n_r))  # what the policy may know (NaN: not yet)
        self._weight = np.zeros(0)
        self._target = np.zeros(0)
        self._role = np.zeros(0, dtype=np.int64)
        self._active = np.zeros(0, dtype=bool)
        self._eligible = np.zeros((0, 0), dtype=bool)  # constraints only, (F slots, A slots)
        self._tasks = np.zeros((0, 0), dtype=np.int64)  # running tasks x_{n,i}
        self._count = np.zeros(0)  # x_n
        self._used = np.zeros((0, n_r))  # resources allocated on each agent
        self._names: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        self._roles: list[str] = []
        # The agent attribute naming the role an agent copy is offered to (the Mesos backend's
        # `mesos_role` with several roles): frameworks that match an agent's other attributes
        # contest its room whatever its role (Cluster.contested). None: no such pools. A
        # pooled agent is named POOL@VALUE (VALUE: its pooled attribute), so the copies of
        # one agent share POOL.
        self.pooled_attribute: str | None = None
        # (for which _names, contested by constraints, each framework's own copy of each agent)
        self._contested: tuple[object, np.ndarray, np.ndarray] | None = None
        self._dirty = True  # something changed since the last run that left nothing fitting
        self._next_filter_expiry = np.inf
        minimum = MIN_ALLOCATABLE if min_allocatable is None else min_allocatable
        self._min_allocatable = np.array([minimum.get(r, np.inf) for r in self.resources])

    # ---- configuration -----------------------------------------------------------------
    def apply(self, config: EngineConfig) -> None:
        """Decide with `config` from the next run on (at start, or at run time through the
        broker's API); the random stream is the one seeded at start."""
        self.config = config
        self.scheduler = scheduler(config.scheduler)
        self.selection = config.effective_selection
        self.policy_params = config.policy_params()
        self._dirty = True

    # What the engine decides with, read from its configuration (never a second copy).
    mode = _from_config("mode")
    level = _from_config("level")
    trigger = _from_config("trigger")
    ties = _from_config("ties")
    refuse_seconds = _from_config("refuse_seconds")
    interval = _from_config("interval")
    role_weights = _from_config("role_weights")

    # ---- events ------------------------------------------------------------------------
    def _vector(self, amounts: dict[str, float], what: str, positive: bool = True) -> np.ndarray:
        """Amounts on the resource axis; `positive`: some amount must be above 0."""
        unknown = set(amounts) - set(self.resources)
        if unknown:
            raise EngineError(f"{what}: unknown resource {sorted(unknown)[0]!r}")
        vector = np.array([float(amounts.get(r, 0.0)) for r in self.resources])
        valid = bool(np.isfinite(vector).all() and (vector >= 0).all())
        if positive and not (valid and (vector > 0).any()):
            raise EngineError(f"{what}: must be finite, non-negative and positive somewhere")
        if not valid:
            raise EngineError(f"{what}: must be finite and non-negative")
        return vector

    def _resize(self) -> None:
        n_f, n_a = self._framework_slots.size, self._agent_slots.size
        self._capacity = _grow(self._capacity, n_a)
        self._used = _grow(self._used, n_a)
        self._names = None
        for name in ("_demand", "_weight", "_target", "_role", "_active", "_count"):
            setattr(self, name, _grow(getattr(self, name), n_f))
        self._known = _grow(self._known, n_f, fill=np.nan)
        self._eligible = _grow(self._eligible, n_f, n_a, fill=False)
        self._tasks = _grow(self._tasks, n_f, n_a)

    def _constraint_row(self, constraints: dict[str, object]) -> np.ndarray:
        if not constraints:
            row = np.zeros(self._eligible.shape[1], dtype=bool)
            row[list(self._agent_slots.index.values())] = True
            return row
        row = np.zeros(self._eligible.shape[1], dtype=bool)
        for name, slot in self._agent_slots.index.items():
            row[slot] = matches_constraints(self.agents[name].attributes, constraints)
        return row

    def add_agent(
        self,
        name: str,
        capacity: dict[str, float],
        attributes: dict | None = None,
        *,
        empty: bool = False,
    ) -> None:
        """`empty`: the agent may hold nothing yet (a Mesos agent whose offers were declined
        before the broker heard of it), as `set_capacity` may leave any agent."""
        if name in self.agents:
            raise EngineError(f"agent {name!r}: already registered")
        vector = self._vector(capacity, f"agent {name!r}", positive=not empty)
        record = AgentRecord(name, vector, dict(attributes or {}))
        self.agents[name] = record
        slot = self._agent_slots.add(name)
        self._resize()
        self._capacity[slot] = vector
        self._used[slot] = 0.0
        self._tasks[:, slot] = 0
        for fw_name, fw_slot in self._framework_slots.index.items():
            constraints = self.frameworks[fw_name].constraints
            self._eligible[fw_slot, slot] = matches_constraints(record.attributes, constraints)
        self.run_now = self._dirty = True

    def set_capacity(self, name: str, capacity: dict[str, float]) -> None:
        """What the allocator may use on an agent changed (a Mesos framework's offers plus
        its own running tasks); a rise is like a new offer and asks for a run."""
        self._agent(name)
        vector = self._vector(capacity, f"agent {name!r} capacity", positive=False)
        slot = self._agent_slots.index[name]
        if (vector > self._capacity[slot]).any():
            self.run_now = True
        self._capacity[slot] = vector
        self.agents[name].capacity = vector
        self._dirty = True

    def remove_agent(self, name: str) -> list[tuple[str, int]]:
        """Forget an agent; returns the (framework, tasks) that were running there (lost)."""
        self._agent(name)
        slot = self._agent_slots.remove(name)
        lost = [
            (f, int(self._tasks[n, slot]))
            for f, n in self._framework_slots.index.items()
            if self._tasks[n, slot] > 0
        ]
        self._count -= self._tasks[:, slot]
        self._tasks[:, slot] = 0
        self._used[slot] = 0.0
        self._capacity[slot] = 0.0
        self._eligible[:, slot] = False
        self._names = None
        self._drop_filters(lambda key: key[1] == name)
        del self.agents[name]
        self._dirty = True
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
        require_fit: bool = True,
    ) -> None:
        """`require_fit`: refuse a demand no registered agent holds (off when agents come
        and go with offers, as on Mesos)."""
        if name in self.frameworks:
            raise EngineError(f"framework {name!r}: already registered")
        if not (weight > 0 and np.isfinite(weight)):
            raise EngineError(f"framework {name!r}: weight must be positive")
        if not (target >= 0 and np.isfinite(target)):
            raise EngineError(f"framework {name!r}: target must be a non-negative number")
        vector = self._vector(demand, f"framework {name!r} demand")
        constraints = dict(constraints or {})
        row = self._constraint_row(constraints)
        n_a = self._agent_slots.size
        fits = (vector <= self._capacity[:n_a] + 1e-9).all(axis=1) & row[:n_a]
        if require_fit and self.agents and not fits.any():
            raise EngineError(f"framework {name!r}: demand fits no registered agent")
        record = FrameworkRecord(
            name,
            vector,
            role,
            float(weight),
            constraints,
            float(target),
            self.mode is Mode.CHARACTERIZED if declared is None else declared,
        )
        self.frameworks[name] = record
        slot = self._framework_slots.add(name)
        self._resize()
        if role not in self._roles:
            self._roles.append(role)
        self._demand[slot] = vector
        self._known[slot] = vector if record.declared else np.nan
        self._weight[slot] = record.weight
        self._target[slot] = record.target
        self._role[slot] = self._roles.index(role)
        self._active[slot] = True
        self._eligible[slot] = row
        self._tasks[slot] = 0
        self._count[slot] = 0.0
        self._names = None
        self.run_now = self._dirty = True

    def unregister(self, name: str) -> list[tuple[str, int]]:
        """Remove a framework; returns its (agent, tasks) still running (now freed)."""
        self._framework(name)
        slot = self._framework_slots.remove(name)
        freed = [
            (a, int(self._tasks[slot, i]))
            for a, i in self._agent_slots.index.items()
            if self._tasks[slot, i] > 0
        ]
        row = self._tasks[slot, : self._used.shape[0]]
        self._used -= row[:, None] * self._demand[slot]
        self._tasks[slot] = 0
        self._count[slot] = 0.0
        self._active[slot] = False
        self._names = None
        self._target[slot] = 0.0
        self._eligible[slot] = False
        self._drop_filters(lambda key: key[0] == name)
        del self.frameworks[name]
        self._forget_role_if_unused(int(self._role[slot]))
        if freed:
            self._dirty = True
            if self.trigger is Trigger.RELEASE:
                self.run_now = True
        return freed

    def _forget_role_if_unused(self, role: int) -> None:
        """A role no registered framework has is dropped, so that groups which came and went
        cost neither memory nor time in every run; the other roles keep their order."""
        if (self._active & (self._role == role)).any():
            return
        del self._roles[role]
        dropped = self._role == role  # free slots only
        self._role[self._role > role] -= 1
        self._role[dropped] = 0

    def set_target(self, name: str, target: float) -> None:
        """How many tasks the framework wants in all; raising it is a revive."""
        record = self._framework(name)
        if not (target >= 0 and np.isfinite(target)):
            raise EngineError(f"framework {name!r}: target must be a non-negative number")
        if target > record.target:
            self.run_now = self._dirty = True
            self._drop_filters(lambda key: key[0] == name)
        record.target = float(target)
        self._target[self._framework_slots.index[name]] = record.target

    def release(self, framework: str, agent: str, tasks: int = 1) -> None:
        """Tasks finished or failed: their resources return to the pool."""
        self._framework(framework)
        self._agent(agent)
        n = self._framework_slots.index[framework]
        i = self._agent_slots.index[agent]
        held = int(self._tasks[n, i])
        if tasks > held:
            raise EngineError(
                f"framework {framework!r} holds {held} tasks on {agent!r}, not {tasks}"
            )
        self._tasks[n, i] = held - tasks
        self._count[n] -= tasks
        self._used[i] -= tasks * self._demand[n]
        self._dirty = True
        if self.trigger is Trigger.RELEASE:
            self.run_now = True

    def refuse(self, framework: str, agent: str, until: float) -> None:
        """Keep a framework off an agent until `until` (e.g. its executors keep failing there)."""
        self._framework(framework)
        self._agent(agent)
        self.filters[(framework, agent)] = max(until, self.filters.get((framework, agent), 0.0))
        self.declined.pop((framework, agent), None)
        self._next_filter_expiry = min(self._next_filter_expiry, until)

    def _drop_filters(self, drop: Callable[[tuple[str, str]], bool]) -> None:
        self.filters = {key: t for key, t in self.filters.items() if not drop(key)}
        self.declined = {key: v for key, v in self.declined.items() if key in self.filters}

    def _decline(self, framework: str, agent: str, leftover: np.ndarray, now: float) -> None:
        """The framework declined `leftover` of an offer: filter that agent from it for
        max(refuse, interval) while the agent offers no more than that, if it is allocatable."""
        if self.refuse_seconds <= 0 or not (leftover >= self._min_allocatable).any():
            return
        until = now + max(self.refuse_seconds, self.interval)
        self.filters[(framework, agent)] = until
        self.declined[(framework, agent)] = leftover.copy()
        self._next_filter_expiry = min(self._next_filter_expiry, until)

    def adopt(self, framework: str, agent: str, tasks: int = 1) -> None:
        """Count tasks that are already running (after a broker restart) without granting."""
        self._framework(framework)
        self._agent(agent)
        n = self._framework_slots.index[framework]
        i = self._agent_slots.index[agent]
        self._tasks[n, i] += tasks
        self._count[n] += tasks
        self._used[i] += tasks * self._demand[n]

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
    @property
    def running(self) -> dict[tuple[str, str], int]:
        """(framework, agent) -> running tasks, for reports (built on demand)."""
        agents = {i: a for a, i in self._agent_slots.index.items()}
        out = {}
        for f, n in self._framework_slots.index.items():
            for i in np.flatnonzero(self._tasks[n]):
                out[(f, agents[int(i)])] = int(self._tasks[n, i])
        return out

    def tasks_of(self, framework: str) -> int:
        self._framework(framework)
        return int(self._count[self._framework_slots.index[framework]])

    def pending(self) -> dict[str, int]:
        """Tasks each framework still wants beyond what it runs."""
        counts = self._count
        return {
            name: max(0, int(self._target[n]) - int(counts[n]))
            for name, n in self._framework_slots.index.items()
        }

    def allocated_by_role(self) -> dict[str, np.ndarray]:
        """Resources held by each role (what the metrics and time series report)."""
        held = self._count[:, None] * self._demand
        out: dict[str, np.ndarray] = {}
        for g, role in enumerate(self._roles):
            mine = self._active & (self._role == g)
            if mine.any():
                out[role] = held[mine].sum(axis=0)
        return out

    def capacity_total(self) -> np.ndarray:
        return self._capacity.sum(axis=0)

    # ---- allocation --------------------------------------------------------------------
    def snapshot(self, now: float) -> AllocationState:
        """The registered cluster (slot arrays) as a Cluster, with running tasks loaded."""
        n_f, n_a = self._framework_slots.size, self._agent_slots.size
        eligible = self._eligible[:n_f, :n_a].copy()
        for (f, a), until in self.filters.items():
            if until <= now:
                continue
            i = self._agent_slots.index[a]
            declined = self.declined.get((f, a))
            if declined is not None:
                free = self._capacity[i] - self._used[i]
                tol = 1e-9 * np.maximum(np.abs(free), 1.0)
                if (free > declined + tol).any():
                    continue  # more is free than was declined: the filter does not apply
            eligible[self._framework_slots.index[f], i] = False
        state = AllocationState(self.cluster(eligible), self.mode, known_demand=self._known[:n_f])
        state.load(self._tasks[:n_f, :n_a], self._count[:n_f], self._used[:n_a])
        return state

    def cluster(self, eligible: np.ndarray | None = None) -> Cluster:
        """The registered agents and frameworks in slot order (free slots: NaN demand, no
        task limit). `eligible` defaults to the placement constraints alone, without the
        refuse filters an allocation run applies."""
        n_f, n_a = self._framework_slots.size, self._agent_slots.size
        if self._names is None:  # slot names change only when membership does
            agents = {i: a for a, i in self._agent_slots.index.items()}
            frameworks = {n: f for f, n in self._framework_slots.index.items()}
            self._names = (
                tuple(agents.get(i, f"<free {i}>") for i in range(n_a)),
                tuple(frameworks.get(n, f"<free {n}>") for n in range(n_f)),
            )
        agent_names, framework_names = self._names
        if eligible is None:
            eligible = self._eligible[:n_f, :n_a].copy()
        active = self._active[:n_f]
        demand = np.where(active[:, None], self._demand[:n_f], np.nan)
        roles = self._roles or ["*"]
        return Cluster(
            resources=self.resources,
            agent_names=agent_names,
            framework_names=framework_names,
            capacity=self._capacity[:n_a].copy(),
            demand=demand,
            weight=np.where(active, self._weight[:n_f], 1.0),
            eligible=eligible,
            max_tasks=np.where(active, self._target[:n_f], 0.0),
            role_of=self._role[:n_f].copy(),
            role_names=tuple(roles),
            role_weight=np.array([self.role_weights.get(r, 1.0) for r in roles]),
            contested=self._contested_matrix(n_f, n_a, eligible),
        )

    def _contested_matrix(self, n_f: int, n_a: int, eligible: np.ndarray) -> np.ndarray | None:
        """Cluster.contested: the constraints without the pooled attribute, and only where the
        framework may use its own copy of the agent (`eligible` there: a framework resting
        or filtered on its copy could not take the room were it offered; an agent whose
        copy for the framework's role is not known is contested)."""
        key = self.pooled_attribute
        if key is None:
            return None
        if self._contested is None or self._contested[0] is not self._names:
            self._contested = (self._names, *self._pools(key, n_f, n_a))
        _, matrix, own = self._contested
        rows = np.arange(n_f)[:, None]
        return matrix & np.where(own >= 0, eligible[rows, np.maximum(own, 0)], True)

    def _pools(self, key: str, n_f: int, n_a: int) -> tuple[np.ndarray, np.ndarray]:
        """Recomputed only when membership changes (a framework's constraints and an agent's
        attributes are fixed while it is registered): (F, A) whether the framework matches
        the agent but for the pooled attribute, and (F, A) the index of the framework's own
        copy of the agent (the same POOL with the framework's VALUE), -1 if none."""
        matrix = np.zeros((n_f, n_a), dtype=bool)
        own = np.full((n_f, n_a), -1, dtype=np.int64)
        copies: dict[tuple[str, str], int] = {}  # (pool, value) -> agent index
        pool_of = np.empty(n_a, dtype=object)
        for agent, a in self._agent_slots.index.items():
            value = str(self.agents[agent].attributes.get(key, ""))
            pool_of[a] = agent.removesuffix(f"@{value}")
            copies[(pool_of[a], value)] = a
        for name, f in self._framework_slots.index.items():
            constraints = self.frameworks[name].constraints
            wanted = {k: v for k, v in constraints.items() if k != key}
            mine = constraints.get(key)
            values = mine if isinstance(mine, list) else [] if mine is None else [mine]
            for agent, a in self._agent_slots.index.items():
                matrix[f, a] = matches_constraints(self.agents[agent].attributes, wanted)
                if len(values) == 1:  # one role: one copy of each agent is the framework's
                    own[f, a] = copies.get((pool_of[a], str(values[0])), -1)
        return matrix, own

    def known_demand(self) -> np.ndarray:
        """(F slots, R) the demand the policy may know (NaN rows: not yet), a copy."""
        return self._known[: self._framework_slots.size].copy()

    def allocate(self, now: float, max_grants: int | None = None) -> list[EngineGrant]:
        """One allocation run: progressive filling on the current snapshot.

        Skipped when nothing changed since a run after which nothing fitted (the answer
        would be the same), unless a refuse filter has expired since, and when no framework
        wants more tasks. This is the one place that rule lives: drivers call at every tick
        and whenever `run_now` asks, and `runs` counts the runs that were not skipped. A run
        stopped at `max_grants` asks for the next one at once (`run_now`).
        """
        self.run_now = False
        if now >= self._next_filter_expiry:
            self._drop_filters(lambda key: self.filters[key] <= now)
            self._next_filter_expiry = min(self.filters.values(), default=np.inf)
            self._dirty = True
        if not self._dirty or not self.agents or not self.frameworks:
            return []
        n_f = self._framework_slots.size
        if not (self._count[:n_f] < self._target[:n_f]).any():
            self._dirty = False
            return []
        state = self.snapshot(now)
        oblivious = self.mode is Mode.OBLIVIOUS
        grants = progressive_fill(
            state,
            self.scheduler.criterion(self.policy_params),
            self.selection,
            self.rng,
            self.ties,
            level=self.level,
            single_offer=oblivious,
            max_grants=max_grants,
            agent_pass=True,
            params=self.policy_params,
        )
        self.runs += 1
        out = []
        names = state.cluster
        for grant in grants:
            f = names.framework_names[grant.framework]
            a = names.agent_names[grant.agent]
            record = self.frameworks[f]
            # The snapshot wrote the grant into the shared tasks matrix already.
            self._count[grant.framework] += grant.tasks
            self._used[grant.agent] += grant.tasks * record.demand
            if oblivious:
                # The tenant keeps whole tasks and declines the rest of the offer; from now
                # on the allocator knows its demand from what it launched.
                self._known[grant.framework] = record.demand
                self._decline(f, a, state.withheld[grant.agent], now)
            resources = dict(zip(self.resources, map(float, record.demand), strict=True))
            out.append(EngineGrant(f, a, grant.tasks, resources))
        self.grants_total += len(out)
        # Characterized filling stops only when nothing fits; oblivious runs withhold offered
        # agents, so what they declined may fit at the next run.
        self._dirty = oblivious and bool(out)
        if max_grants is not None and len(out) >= max_grants:
            self.run_now = self._dirty = True
        return out
