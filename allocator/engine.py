"""The online allocation engine: cluster state changed by events, allocation runs on demand.

The engine is pure: no clock, no I/O. A driver (the simulator, the live broker) tells it what
happened (`add_agent`, `register`, `set_target`, `release`, ...) and when to run an allocation
(`allocate(now)`); it answers with grants, made by the very same `progressive_fill` as the
static fill.

The state lives across runs (issue 28): per-agent and per-framework slot arrays, the running
tasks as sparse maps (most framework-agent pairs hold nothing), placement constraints as rows
only for the frameworks that have them. A run costs what changed: after a run that filled
until nothing fitted, only the agents an event touched since (room freed or added, a filter
ended) and those where a framework that started wanting again fits can take anyone, so the
run fills over those agents alone (`allocator.engine_columns`), with the same grants and the
same random draws as a run over all; TSF's y_n, summed over the whole cluster, is kept
across runs (`allocator.engine_alone`). Where that does not hold (per-agent criteria at
role level, with several roles, with best or first fit; Mesos role pools:
`allocator.engine_columns` says why) a run takes a dense snapshot of every agent and
framework.

Timing follows Mesos 1.x: a run happens every allocation interval, and at once when an agent
or framework is added or a framework revives (`run_now` tells the driver). Resources freed by
finished tasks wait for the next tick, unless the trigger is `release`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from allocator import engine_bulk, engine_direct
from allocator.engine_alone import TasksAlone
from allocator.engine_columns import (
    Columns,
    ColumnsFirst,
    ColumnsPass,
    restrictable,
    with_first_agent,
)
from allocator.engine_config import EngineConfig, Trigger
from allocator.errors import FairbrokerError
from allocator.filling import progressive_fill
from allocator.mesos_defaults import MIN_ALLOCATABLE
from allocator.model import (
    Cluster,
    fit_demand_of,
    fit_floor_of,
    held_demand_of,
    matches_constraints,
)
from allocator.policy import Selection, Ties, bestfit_index, scheduler
from allocator.policy.base import Criterion
from allocator.policy.levels import Level
from allocator.policy.selection import FillInputs, Selector, make_selector
from allocator.policy.tsf import TSF, whole_tasks
from allocator.state import AllocationState, Grant, Mode

#: Up to this many grants a run's record adds them one by one, beyond with `np.add.at`.
FEW_GRANTS = 16


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
        #: The name in each slot (`<free i>` for a free one), kept as slots change.
        self.names: list[str] = []
        #: Each slot's registration number: `index` (insertion) order is ascending `order`.
        self.order: list[int] = []
        self._registered = 0

    def add(self, name: str) -> int:
        slot = self.free.pop() if self.free else self.size
        self.size = max(self.size, slot + 1)
        self.index[name] = slot
        if slot == len(self.names):
            self.names.append(name)
            self.order.append(self._registered)
        else:
            self.names[slot] = name
            self.order[slot] = self._registered
        self._registered += 1
        return slot

    def remove(self, name: str) -> int:
        slot = self.index.pop(name)
        self.free.append(slot)
        self.names[slot] = f"<free {slot}>"
        return slot

    def in_order(self, slots: Iterable[int]) -> list[int]:
        """`slots` (registered ones) in the order `index` lists them."""
        return sorted(slots, key=self.order.__getitem__)


def _grow(array: np.ndarray, rows: int, fill: object = 0) -> np.ndarray:
    """`array` padded with `fill` to at least `rows` rows, doubling so that repeated growth
    stays cheap."""
    if rows <= array.shape[0]:
        return array
    out = np.full((max(rows, 2 * array.shape[0], 8), *array.shape[1:]), fill, dtype=array.dtype)
    out[: array.shape[0]] = array
    return out


class _FrameworkRows(NamedTuple):
    """Per framework slot, what a run's cluster shows of the registered frameworks (free
    slots: no demand, weight 1)."""

    active: np.ndarray
    demand: np.ndarray
    fit_demand: np.ndarray
    held_demand: np.ndarray
    weight: np.ndarray
    role_of: np.ndarray


class _Placements:
    """The tasks granted in one run, as a map of (framework, agent) pairs: what a run's
    `AllocationState` writes its grants into instead of a dense (F, A) matrix."""

    def __init__(self) -> None:
        self.cells: dict[tuple[int, int], int] = {}

    def __getitem__(self, key: tuple[int, int]) -> int:
        return self.cells.get(key, 0)

    def __setitem__(self, key: tuple[int, int], value: int) -> None:
        self.cells[key] = value


class _Picked(Sequence[str]):
    """The names at some slots, in that order, looked up only when read (a run reads
    only how many there are)."""

    def __init__(self, names: tuple[str, ...], slots: np.ndarray) -> None:
        self.names = names
        self.slots = slots

    def __len__(self) -> int:
        return len(self.slots)

    def __getitem__(self, i):  # type: ignore[no-untyped-def,override]
        if isinstance(i, slice):
            return tuple(self.names[j] for j in self.slots[i].tolist())
        return self.names[int(self.slots[i])]


def _from_config(name: str) -> property:
    return property(lambda engine: getattr(engine.config, name), doc=f"config.{name}")


class Engine:
    """Online allocation state across runs; a run costs what changed since the last."""

    def __init__(
        self,
        resources: tuple[str, ...],
        config: EngineConfig,
        min_allocatable: dict[str, float] | None = None,
    ) -> None:
        self.resources = tuple(resources)
        # What changed since the last run that left nothing fitting (see `_candidates`).
        self._touched: set[int] = set()  # agent slots whose room grew or whose filters ended
        self._rescan: set[int] = set()  # framework slots that may want tasks again
        self._everywhere = True  # every agent (configuration changed, a run stopped early)
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
        self._live = np.zeros(0, dtype=bool)  # agent slots in use
        self._demand = np.zeros((0, n_r))
        self._known = np.zeros((0, n_r))  # what the policy may know (NaN: not yet)
        self._weight = np.zeros(0)
        self._target = np.zeros(0)
        self._role = np.zeros(0, dtype=np.int64)
        self._active = np.zeros(0, dtype=bool)
        # Placement constraints: (A slots,) rows of the frameworks that have any; the others
        # may run on every registered agent.
        self._rows: dict[int, np.ndarray] = {}
        self._constraints: dict[int, dict[str, object]] = {}
        # Running tasks x_{n,i}, both ways round: framework slot -> agent slot -> tasks, and
        # agent slot -> framework slot -> tasks (only pairs that hold tasks).
        self._placed: dict[int, dict[int, int]] = {}
        self._hosted: dict[int, dict[int, int]] = {}
        # What one task of each registered framework slot holds, as its grants report it.
        self._held: dict[int, dict[str, float]] = {}
        self._count = np.zeros(0)  # x_n
        self._used = np.zeros((0, n_r))  # resources allocated on each agent
        self._names: tuple[tuple[str, ...], tuple[str, ...]] | None = None
        # The agents' names alone, by capacity version (which moves when agents do).
        self._agent_names: tuple[int, tuple[str, ...]] | None = None
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
        # `cluster()` is rebuilt only when what it shows changed (this counter moved).
        self._version = 0
        self._cluster: tuple[int, Cluster] | None = None
        self._sums: tuple[int, np.ndarray, np.ndarray] | None = None
        self._alone: TasksAlone | None = None  # TSF's y_n, from the first TSF run on
        self._capacity_version = 0  # moves whenever an agent's capacity or the agents change
        self._roles_version = 0  # moves whenever `_roles` does
        self._frameworks_version = 0  # moves whenever a framework registers or leaves
        self._rows_cache: tuple[int, _FrameworkRows] | None = None
        # (frameworks version, the tolerance it was made with, `Columns.fit_floor`)
        self._floor_cache: tuple[int, np.ndarray, np.ndarray] | None = None
        self._role_weights: tuple[int, EngineConfig, np.ndarray] | None = None
        # (capacity version, the distinct capacity rows, the largest |capacity| per resource)
        self._shapes: tuple[int, np.ndarray, np.ndarray] | None = None
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
        self._dirty = self._everywhere = True
        self._version = getattr(self, "_version", 0) + 1

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
        self._live = _grow(self._live, n_a, fill=False)
        self._names = None
        for name in ("_demand", "_weight", "_target", "_role", "_active", "_count"):
            setattr(self, name, _grow(getattr(self, name), n_f))
        self._known = _grow(self._known, n_f, fill=np.nan)
        for n, row in self._rows.items():
            self._rows[n] = _grow(row, len(self._live), fill=False)
        self._version += 1

    def _constraint_row(self, constraints: dict[str, object]) -> np.ndarray:
        if not constraints:
            return self._live.copy()
        row = np.zeros(len(self._live), dtype=bool)
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
        self._live[slot] = True
        for fw_slot, row in self._rows.items():
            row[slot] = matches_constraints(record.attributes, self._constraints[fw_slot])
        self._alone_agent(slot, +1)
        self._touched.add(slot)
        self._capacity_version += 1
        self.run_now = self._dirty = True

    def set_capacity(self, name: str, capacity: dict[str, float]) -> None:
        """What the allocator may use on an agent changed (a Mesos framework's offers plus
        its own running tasks); a rise is like a new offer and asks for a run."""
        self._agent(name)
        vector = self._vector(capacity, f"agent {name!r} capacity", positive=False)
        slot = self._agent_slots.index[name]
        if (vector > self._capacity[slot]).any():
            self.run_now = True
        self._alone_agent(slot, -1)
        self._capacity[slot] = vector
        self._alone_agent(slot, +1)
        self.agents[name].capacity = vector
        self._touched.add(slot)
        self._version += 1
        self._capacity_version += 1
        self._dirty = True

    def remove_agent(self, name: str) -> list[tuple[str, int]]:
        """Forget an agent; returns the (framework, tasks) that were running there (lost)."""
        self._agent(name)
        slot = self._agent_slots.remove(name)
        self._alone_agent(slot, -1)
        hosted = self._hosted.pop(slot, {})
        names = self._framework_slots.names
        lost = [(names[n], hosted[n]) for n in self._framework_slots.in_order(hosted)]
        for n, tasks in hosted.items():
            self._count[n] -= tasks
            placed = self._placed[n]
            del placed[slot]
            if not placed:
                del self._placed[n]
            self._rescan.add(n)  # below its target again: it may fit elsewhere
        self._used[slot] = 0.0
        self._capacity[slot] = 0.0
        self._live[slot] = False
        for row in self._rows.values():
            row[slot] = False
        self._names = None
        self._version += 1
        self._capacity_version += 1
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
        if require_fit and self.agents and not self._fits_some_agent(vector, row, constraints):
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
            self._roles_version += 1
        self._demand[slot] = vector
        self._known[slot] = vector if record.declared else np.nan
        self._weight[slot] = record.weight
        self._target[slot] = record.target
        self._role[slot] = self._roles.index(role)
        self._active[slot] = True
        if constraints:
            self._rows[slot] = row
            self._constraints[slot] = constraints
        self._count[slot] = 0.0
        self._held[slot] = dict(zip(self.resources, map(float, vector), strict=True))
        self._names = None
        self._framework_changed(slot)
        if self._alone is not None:
            self._alone.register(slot)
        self._rescan.add(slot)
        self.run_now = self._dirty = True

    def _fits_some_agent(
        self, vector: np.ndarray, row: np.ndarray, constraints: dict[str, object]
    ) -> bool:
        """Whether one task of `vector` fits on some registered agent that `row` allows
        (unconstrained: on some distinct capacity, of which there are few)."""
        n_a = self._agent_slots.size
        capacity = self._capacity[:n_a][row[:n_a]] if constraints else self._capacity_shapes()[0]
        return bool((vector <= capacity + 1e-9).all(axis=1).any())

    def _capacity_shapes(self) -> tuple[np.ndarray, np.ndarray]:
        """The distinct capacity rows of the live agents, and the largest |capacity| of each
        resource over all agent slots (built again only when capacities changed)."""
        if self._shapes is None or self._shapes[0] != self._capacity_version:
            n_a = self._agent_slots.size
            capacity = self._capacity[:n_a]
            distinct = np.unique(capacity[self._live[:n_a]], axis=0)
            largest = np.abs(capacity).max(axis=0) if n_a else np.zeros(len(self.resources))
            self._shapes = (self._capacity_version, distinct, largest)
        return self._shapes[1], self._shapes[2]

    def unregister(self, name: str) -> list[tuple[str, int]]:
        """Remove a framework; returns its (agent, tasks) still running (now freed)."""
        self._framework(name)
        slot = self._framework_slots.remove(name)
        placed = self._placed.pop(slot, {})
        names = self._agent_slots.names
        freed = [(names[i], placed[i]) for i in self._agent_slots.in_order(placed)]
        for i, tasks in placed.items():
            self._used[i] -= tasks * self._demand[slot]
            hosted = self._hosted[i]
            del hosted[slot]
            if not hosted:
                del self._hosted[i]
            self._touched.add(i)
        self._count[slot] = 0.0
        self._active[slot] = False
        self._names = None
        self._version += 1
        self._target[slot] = 0.0
        self._rows.pop(slot, None)
        self._constraints.pop(slot, None)
        self._rescan.discard(slot)
        self._drop_filters(lambda key: key[0] == name)
        del self.frameworks[name]
        del self._held[slot]
        self._framework_changed(slot)
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
        self._roles_version += 1
        self._rows_cache = None  # the role numbers moved
        dropped = self._role == role  # free slots only
        self._role[self._role > role] -= 1
        self._role[dropped] = 0

    def set_target(self, name: str, target: float) -> None:
        """How many tasks the framework wants in all; raising it is a revive."""
        record = self._framework(name)
        if not (target >= 0 and np.isfinite(target)):
            raise EngineError(f"framework {name!r}: target must be a non-negative number")
        slot = self._framework_slots.index[name]
        if target > record.target:
            self.run_now = self._dirty = True
            self._drop_filters(lambda key: key[0] == name)
            self._rescan.add(slot)
        if target != record.target:
            self._version += 1
        record.target = float(target)
        self._target[slot] = record.target

    def release(self, framework: str, agent: str, tasks: int = 1) -> None:
        """Tasks finished or failed: their resources return to the pool."""
        try:
            n = self._framework_slots.index[framework]
            i = self._agent_slots.index[agent]
        except KeyError:
            self._framework(framework)  # the error for whichever is unknown
            self._agent(agent)
            raise
        placed = self._placed.get(n, {})
        held = placed.get(i, 0)
        if tasks > held:
            raise EngineError(
                f"framework {framework!r} holds {held} tasks on {agent!r}, not {tasks}"
            )
        self._set_tasks(n, i, held - tasks)
        if self._count[n] >= self._target[n]:
            self._rescan.add(n)  # wanted nothing; now it may want a task anywhere
        self._count[n] -= tasks
        self._used[i] -= tasks * self._demand[n]
        self._touched.add(i)
        self._dirty = True
        if self.trigger is Trigger.RELEASE:
            self.run_now = True

    def _set_tasks(self, n: int, i: int, tasks: int) -> None:
        """x_{n,i} = tasks in both sparse maps."""
        if tasks:
            self._placed.setdefault(n, {})[i] = tasks
            self._hosted.setdefault(i, {})[n] = tasks
            return
        placed, hosted = self._placed.get(n), self._hosted.get(i)
        if placed is not None:
            placed.pop(i, None)
            if not placed:
                del self._placed[n]
        if hosted is not None:
            hosted.pop(n, None)
            if not hosted:
                del self._hosted[i]

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
        self._set_tasks(n, i, self._placed.get(n, {}).get(i, 0) + tasks)
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
        agents = self._slot_names()[0]
        out = {}
        for f, n in self._framework_slots.index.items():
            placed = self._placed.get(n, {})
            for i in sorted(placed):
                out[(f, agents[i])] = placed[i]
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

    # ---- the cluster as arrays ---------------------------------------------------------
    def _slot_names(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """Agent and framework names by slot (`<free i>` for free slots); they change only
        when membership does."""
        if self._names is None:
            version = self._capacity_version
            if self._agent_names is None or self._agent_names[0] != version:
                self._agent_names = (version, tuple(self._agent_slots.names))
            self._names = (self._agent_names[1], tuple(self._framework_slots.names))
        return self._names

    def _eligible_at(self, columns: np.ndarray | slice) -> np.ndarray:
        """(F slots, agents) the placement constraints at the agent slots `columns`, as the
        transpose of an (agents, F) array: `AllocationState` reads it by agent, uncopied."""
        n_f = self._framework_slots.size
        live = self._live[columns]
        by_agent = live[:, None] & self._active[None, :n_f]
        for n, row in self._rows.items():
            by_agent[:, n] = row[columns] & live
        return by_agent.T

    def _eligible_over(self, columns: np.ndarray, filtered: list[tuple[int, int]]) -> np.ndarray:
        """`_eligible_at(columns)` (live agent slots) with the `filtered` (framework, column)
        pairs cleared; where no framework has constraints and no filter holds, a read-only
        view of the active frameworks broadcast over the columns (no (F, agents) array)."""
        n_f = self._framework_slots.size
        if self._rows or filtered:
            eligible = self._eligible_at(columns)
            for n, c in filtered:
                eligible[n, c] = False
            return eligible
        return np.broadcast_to(self._active[:n_f, None].copy(), (n_f, len(columns)))

    def _filter_out(self, eligible: np.ndarray, now: float, column: np.ndarray) -> None:
        """Apply the refuse filters that hold at `now` to `eligible` (F, agents), whose
        columns are the agent slots mapped by `column` (slot -> column, -1: absent)."""
        for n, c in self._filtered(now, column):
            eligible[n, c] = False

    def _filtered(self, now: float, column: np.ndarray) -> list[tuple[int, int]]:
        """The (framework slot, column) pairs the refuse filters that hold at `now` take
        out, for the agent slots mapped by `column` (slot -> column, -1: absent)."""
        frameworks, agents = self._framework_slots.index, self._agent_slots.index
        out = []
        for (f, a), until in self.filters.items():
            if until <= now:
                continue
            i = agents[a]
            c = column[i]
            if c < 0:
                continue
            declined = self.declined.get((f, a))
            if declined is not None:
                free = self._capacity[i] - self._used[i]
                tol = 1e-9 * np.maximum(np.abs(free), 1.0)
                if (free > declined + tol).any():
                    continue  # more is free than was declined: the filter does not apply
            out.append((frameworks[f], int(c)))
        return out

    def _dense_tasks(self) -> np.ndarray:
        """x_{n,i} as an (F slots, A slots) matrix."""
        tasks = np.zeros((self._framework_slots.size, self._agent_slots.size), dtype=np.int64)
        for n, placed in self._placed.items():
            tasks[n, list(placed)] = list(placed.values())
        return tasks

    def snapshot(self, now: float) -> AllocationState:
        """Every registered agent and framework as a Cluster (slot order), with the running
        tasks loaded: what a run over all agents starts from (and `explain` reads)."""
        n_f, n_a = self._framework_slots.size, self._agent_slots.size
        eligible = self._eligible_at(slice(0, n_a))
        self._filter_out(eligible, now, np.arange(n_a))
        state = AllocationState(self.cluster(eligible), self.mode, known_demand=self._known[:n_f])
        state.load(self._dense_tasks(), self._count[:n_f], self._used[:n_a])
        return state

    def cluster(self, eligible: np.ndarray | None = None) -> Cluster:
        """The registered agents and frameworks in slot order (free slots: NaN demand, no
        task limit). `eligible` defaults to the placement constraints alone, without the
        refuse filters an allocation run applies; that cluster is built again only when
        agents, frameworks, capacities, targets or the configuration changed (share it,
        do not change it)."""
        if eligible is None:
            if self._cluster is not None and self._cluster[0] == self._version:
                return self._cluster[1]
            built = self._build_cluster(self._eligible_at(slice(0, self._agent_slots.size)))
            self._cluster = (self._version, built)
            return built
        return self._build_cluster(eligible)

    def _build_cluster(self, eligible: np.ndarray) -> Cluster:
        n_f, n_a = self._framework_slots.size, self._agent_slots.size
        agent_names, framework_names = self._slot_names()
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
            role_weight=self._role_weight(roles),
            contested=self._contested_matrix(n_f, n_a, eligible),
        )

    def _role_weight(self, roles: list[str]) -> np.ndarray:
        """Each role's weight, a copy (built again only when the roles or the config moved)."""
        cached = self._role_weights
        if cached is None or cached[0] != self._roles_version or cached[1] is not self.config:
            weights = self.role_weights
            built = np.array([weights.get(r, 1.0) for r in roles], dtype=float)
            cached = self._role_weights = (self._roles_version, self.config, built)
        return cached[2].copy()

    def _contested_matrix(self, n_f: int, n_a: int, eligible: np.ndarray) -> np.ndarray | None:
        """Cluster.contested: the constraints without the pooled attribute, and only where the
        framework may use its own copy of the agent (`eligible` there: a framework resting
        or filtered on its copy could not take the room were it offered; an agent whose
        copy for the framework's role is not known is contested)."""
        key = self.pooled_attribute
        if key is None:
            return None
        self._slot_names()
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

    # ---- allocation --------------------------------------------------------------------
    def _candidates(self) -> np.ndarray:
        """Agent slots where a wanting framework may fit now, in slot order: those touched
        since the last run that left nothing fitting, and those where a framework that may
        want tasks again fits (a superset is harmless: a run finds nothing there)."""
        n_a = self._agent_slots.size
        live = self._live[:n_a]
        if self._everywhere:
            return np.flatnonzero(live)
        chosen = np.zeros(n_a, dtype=bool)
        chosen[list(self._touched)] = True
        wanting = [n for n in self._rescan if self._count[n] < self._target[n]]
        if wanting:
            residual = self._capacity[:n_a] - self._used[:n_a]
            # Looser than any fit test of a run (1e-9 of the largest capacity). Column-major:
            # numpy broadcasts over a row of a few resources slowly.
            slack = 1e-6 * np.maximum(self._capacity_shapes()[1], 1.0)
            room = np.add(residual, slack, order="F")
            for n in wanting:
                fits = live.copy() if n not in self._rows else self._rows[n][:n_a] & live
                for r, d in enumerate(self._demand[n]):
                    if d > 0:
                        fits &= room[:, r] >= d
                chosen |= fits
        return np.flatnonzero(chosen & live)

    def _scope(self, columns: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(fresh, near) for a run over `columns` (characterized): after the last run
        nothing fitted anywhere, so a framework that may not want tasks again (not fresh:
        not in `_rescan`) fits, if anywhere, only where room grew since, `_touched`, whose
        positions in `columns` are `near`. None when every agent is a candidate."""
        if self._everywhere or self.mode is not Mode.CHARACTERIZED:
            return None
        fresh = np.zeros(self._framework_slots.size, dtype=bool)
        fresh[list(self._rescan)] = True
        touched = np.array(sorted(self._touched), dtype=np.int64)
        at = np.minimum(np.searchsorted(columns, touched), max(len(columns) - 1, 0))
        near = at[columns[at] == touched] if len(columns) else at[:0]
        return fresh, near

    def _forget_changes(self) -> None:
        self._touched = set()
        self._rescan = set()
        self._everywhere = False

    def _alone_agent(self, slot: int, change: int) -> None:
        """Agent `slot`, as it is now, enters (+1) or leaves (-1) TSF's y_n."""
        if self._alone is None:
            return
        allowed = self._active[: self._framework_slots.size].copy()
        for n, row in self._rows.items():
            allowed[n] = row[slot]
        self._alone.agent(self._capacity[slot], allowed, self._demand, change)

    def _tasks_alone(self, now: float) -> np.ndarray | None:
        """TSF's y_n of each framework slot as a dense run at `now` sums it, over the agents
        it may use that no refuse filter keeps from it (None: not exact, run densely)."""
        n_f, n_a = self._framework_slots.size, self._agent_slots.size
        if self._alone is None:
            self._alone = TasksAlone(self._capacity[:n_a], self._live[:n_a])
        active = self._active[:n_f]
        alone = self._alone.current(
            self._capacity[:n_a], self._live[:n_a], self._demand[:n_f], active, self._rows
        )
        if not self._alone.exact:
            return None
        slots = self._agent_slots.index
        held = sorted({slots[a] for (_, a), until in self.filters.items() if until > now})
        if held:  # the filtered pairs, as `snapshot` finds them, leave the sum
            agents = np.array(held)
            column = np.full(n_a, -1, dtype=np.int64)
            column[agents] = np.arange(len(agents))
            allowed = np.array(self._eligible_at(agents))
            open_ = allowed.copy()
            self._filter_out(open_, now, column)
            whole = whole_tasks(self._demand[:n_f], self._capacity[agents])
            alone = alone - np.where(allowed & ~open_, whole, 0.0).sum(axis=1)
        return np.where(active, alone, 0.0)

    def allocate(self, now: float, max_grants: int | None = None) -> list[EngineGrant]:
        """One allocation run: progressive filling from the current state.

        Skipped when nothing changed since a run after which nothing fitted (the answer
        would be the same), unless a refuse filter has expired since, and when no framework
        wants more tasks. This is the one place that rule lives: drivers call at every tick
        and whenever `run_now` asks, and `runs` counts the runs that were not skipped. A run
        stopped at `max_grants` asks for the next one at once (`run_now`).
        """
        self.run_now = False
        if now >= self._next_filter_expiry:
            slots = self._agent_slots.index
            ended = [a for (_, a), until in self.filters.items() if until <= now and a in slots]
            self._touched.update(slots[a] for a in ended)
            self._drop_filters(lambda key: self.filters[key] <= now)
            self._next_filter_expiry = min(self.filters.values(), default=np.inf)
            self._dirty = True
        if not self._dirty or not self.agents or not self.frameworks:
            return []
        n_f = self._framework_slots.size
        if not (self._count[:n_f] < self._target[:n_f]).any():
            self._dirty = False
            return []
        criterion = self.scheduler.criterion(self.policy_params)
        oblivious = self.mode is Mode.OBLIVIOUS
        selection = Selection(self.selection)
        # One role: the selectors serve frameworks as at framework level.
        level = Level(self.level) if len(self._roles) > 1 else Level.FRAMEWORK
        local = self.pooled_attribute is None and restrictable(
            criterion, selection, level, Ties(self.ties)
        )
        alone = self._tasks_alone(now) if local and isinstance(criterion, TSF) else None
        local = local and (alone is not None or not isinstance(criterion, TSF))
        if local:
            columns = with_first_agent(self._candidates(), selection, Ties(self.ties))
        else:
            columns = np.arange(self._agent_slots.size)
        grants: list[Grant] | None = None
        state: AllocationState | None = None
        selector: Selector | None = None
        if local and self._direct_applies(criterion, selection, level):
            grants = engine_direct.fill(self._direct_run(columns), self.rng, max_grants)
        if grants is None:
            state, selector = self._run_state(now, columns, local, alone, criterion, selection)
            grants = self._usual_fill(state, selector, criterion, max_grants)
        self.runs += 1
        out = self._record(grants, state, columns, now)
        stopped = max_grants is not None and len(out) >= max_grants
        if not local:
            self._everywhere = True
        else:
            left = columns
            if stopped and isinstance(selector, ColumnsPass):
                left = columns[selector.order[selector.position :]]  # visited: nothing fits
            self._forget_changes()
            if stopped:
                self._touched.update(left.tolist())
            if oblivious:  # what a tenant declined returns at the next run
                self._touched.update(int(columns[g.agent]) for g in grants)
        # Characterized filling stops only when nothing fits; oblivious runs withhold offered
        # agents, so what they declined may fit at the next run.
        self._dirty = oblivious and bool(out)
        if stopped:
            self.run_now = self._dirty = True
        return out

    def _run_state(
        self, now: float, columns: np.ndarray, local: bool, alone: np.ndarray | None,
        criterion: Criterion, selection: Selection,
    ) -> tuple[AllocationState, Selector | None]:  # fmt: skip
        """A run's state over `columns` (`local`: the candidates; else a dense snapshot) and
        the selector that serves it (None: `progressive_fill` makes its own)."""
        if not local:
            return self.snapshot(now), None
        state = self._columns_state(now, columns, alone)
        inputs = FillInputs(state, criterion, self.rng, self.ties, self.level, True)
        if selection is Selection.RRR:
            return state, ColumnsPass(inputs, self._agent_slots.size, columns)
        if selection in (Selection.BESTFIT, Selection.FIRSTFIT):
            scope = self._scope(columns)
            return state, ColumnsFirst(inputs, selection is Selection.BESTFIT, scope)
        if selection is Selection.RANDOM:
            from allocator.engine_random import ColumnsRandom  # compiled: on first use

            return state, ColumnsRandom(inputs, self._agent_slots.size, columns)
        # joint, FUGA: what they choose from is feasible pairs only
        return state, make_selector(
            selection, state, criterion, self.rng, self.ties, self.level, True,
            self.policy_params,
        )  # fmt: skip

    def _usual_fill(
        self, state: AllocationState, selector: Selector | None, criterion: Criterion,
        max_grants: int | None,
    ) -> list[Grant]:  # fmt: skip
        """The run's grants (agents as positions in the state): the compiled BF-DRF loop
        where it applies, else progressive filling with the selector."""
        if isinstance(selector, ColumnsFirst) and engine_bulk.applies(selector):
            return engine_bulk.fill(selector, max_grants)
        return progressive_fill(
            state,
            criterion,
            self.selection,
            self.rng,
            self.ties,
            level=self.level,
            single_offer=self.mode is Mode.OBLIVIOUS,
            max_grants=max_grants,
            agent_pass=True,
            params=self.policy_params,
            selector=selector,
        )

    def _direct_applies(self, criterion: Criterion, selection: Selection, level: Level) -> bool:
        """Whether `engine_direct` makes this run: characterized BF-DRF at role level with
        random ties, no constraint or refuse filter (every active framework eligible on
        every agent), over the candidates (the caller checked `local`)."""
        return (
            engine_direct.ENABLED
            and self.mode is Mode.CHARACTERIZED
            and criterion.name == "drf"
            and selection is Selection.BESTFIT
            and level is Level.ROLE
            and Ties(self.ties) is Ties.RANDOM
            and bestfit_index.COMPILED
            and not self._rows
            and not self.filters
        )

    def _direct_run(self, columns: np.ndarray) -> engine_direct.DirectRun:
        n_f, n_a = self._framework_slots.size, self._agent_slots.size
        total, tol = self._totals()
        rows = self._framework_rows()
        return engine_direct.DirectRun(
            count=self._count[:n_f],
            used=self._used[:n_a],
            capacity=self._capacity[:n_a],
            columns=columns,
            active=rows.active,
            limit=np.where(self._active[:n_f], self._target[:n_f], 0.0),
            held_demand=rows.held_demand,
            fit_demand=rows.fit_demand,
            floor=self._fit_floor(rows, tol),
            known=self._known[:n_f],
            weight=rows.weight,
            role_of=rows.role_of,
            role_weight=self._role_weight(self._roles),
            total=total,
            tol=tol,
            scope=self._scope(columns),
        )

    def _columns_state(
        self, now: float, columns: np.ndarray, alone: np.ndarray | None = None
    ) -> AllocationState:
        """The allocation state over the agent slots `columns` (all frameworks), with the
        whole cluster's totals and tolerance (and TSF's y_n, `alone`)."""
        n_f, n_a = self._framework_slots.size, self._agent_slots.size
        filtered: list[tuple[int, int]] = []
        if self.filters:
            column = np.full(n_a, -1, dtype=np.int64)
            column[columns] = np.arange(len(columns))
            filtered = self._filtered(now, column)
        eligible = self._eligible_over(columns, filtered)
        agent_names, framework_names = self._slot_names()
        active = self._active[:n_f]
        roles = self._roles or ["*"]
        capacity = self._capacity[:n_a]
        total, tol = self._totals()
        rows = self._framework_rows()
        cluster = Columns(
            resources=self.resources,
            agent_names=_Picked(agent_names, columns),  # type: ignore[arg-type]
            framework_names=framework_names,
            capacity=np.take(capacity, columns, axis=0),  # (faster than capacity[columns])
            demand=rows.demand,
            weight=rows.weight,
            eligible=eligible,
            max_tasks=np.where(active, self._target[:n_f], 0.0),
            role_of=rows.role_of,
            role_names=tuple(roles),
            role_weight=self._role_weight(roles),
            whole_total=total,
            alone=alone,
            framework_rows=(rows.active, rows.fit_demand, rows.held_demand),
            fit_floor=self._fit_floor(rows, tol),
        )
        # The run's own grants only: nothing in a run reads x_{n,i}, and the engine records
        # the grants in its maps (`_record`).
        placements: np.ndarray = _Placements()  # type: ignore[assignment]
        running = (self._count[:n_f], np.take(self._used, columns, axis=0))
        return AllocationState(cluster, self.mode, known_demand=self._known[:n_f], tol=tol,
                               tasks=placements, running=running)  # fmt: skip

    def _framework_rows(self) -> _FrameworkRows:
        """The framework slots' rows of a run's cluster, made again only when frameworks
        register or leave: the runs share them, and nothing in a run writes them (writable
        all the same, so the compiled kernels see the array types they were built for)."""
        if self._rows_cache is None or self._rows_cache[0] != self._frameworks_version:
            n_f = self._framework_slots.size
            active = self._active[:n_f].copy()
            demand = np.where(active[:, None], self._demand[:n_f], np.nan)
            rows = _FrameworkRows(
                active=active,
                demand=demand,
                fit_demand=fit_demand_of(demand),
                held_demand=held_demand_of(demand),
                weight=np.where(active, self._weight[:n_f], 1.0),
                role_of=self._role[:n_f].copy(),
            )
            self._rows_cache = (self._frameworks_version, rows)
        return self._rows_cache[1]

    def _fit_floor(self, rows: _FrameworkRows, tol: np.ndarray) -> np.ndarray:
        """`Columns.fit_floor` of the kept rows, made again only when the frameworks or the
        tolerance (the capacities) changed; `_framework_changed` writes one row."""
        cached = self._floor_cache
        if cached is None or cached[0] != self._frameworks_version or cached[1] is not tol:
            cached = (self._frameworks_version, tol, fit_floor_of(rows.fit_demand, tol))
            self._floor_cache = cached
        return cached[2]

    def _framework_changed(self, slot: int) -> None:
        """A framework registered or left at `slot`: its row of the kept framework rows is
        written again (the others stand), or they are made again at the next run when the
        slots grew or the roles were renumbered."""
        cached = self._rows_cache
        self._frameworks_version += 1
        if cached is None or cached[0] != self._frameworks_version - 1:
            return
        rows = cached[1]
        if len(rows.active) != self._framework_slots.size:
            return
        active = bool(self._active[slot])
        rows.active[slot] = active
        if active:  # a registered demand is finite: fit_demand_of and held keep it as it is
            rows.demand[slot] = rows.fit_demand[slot] = rows.held_demand[slot] = self._demand[slot]
        else:
            free = np.full((1, len(self.resources)), np.nan)
            rows.demand[slot] = free[0]
            rows.fit_demand[slot] = fit_demand_of(free)[0]
            rows.held_demand[slot] = held_demand_of(free)[0]
        rows.weight[slot] = self._weight[slot] if active else 1.0
        rows.role_of[slot] = self._role[slot]
        self._rows_cache = (self._frameworks_version, rows)
        floor = self._floor_cache
        if floor is not None and floor[0] == self._frameworks_version - 1:
            floor[2][slot] = fit_floor_of(rows.fit_demand[slot], floor[1])
            self._floor_cache = (self._frameworks_version, floor[1], floor[2])

    def _totals(self) -> tuple[np.ndarray, np.ndarray]:
        """C_r and the fit tolerance of the whole cluster, as a dense snapshot computes them
        (recomputed only when the cluster changed)."""
        if self._sums is None or self._sums[0] != self._capacity_version:
            capacity = self._capacity[: self._agent_slots.size].copy()
            tol = 1e-9 * np.maximum(capacity.max(axis=0, initial=0.0), 1.0)
            self._sums = (self._capacity_version, capacity.sum(axis=0), tol)
        return self._sums[1], self._sums[2]

    def _record(
        self, grants: list[Grant], state: AllocationState | None, columns: np.ndarray,
        now: float,
    ) -> list[EngineGrant]:  # fmt: skip
        """Write a run's grants (agents as positions in `columns`) into the engine."""
        if not grants:
            return []
        oblivious = self.mode is Mode.OBLIVIOUS
        # The names by slot as the slots keep them (not `_slot_names`' tuples, made again
        # after every registration: nearly every run in a backlog).
        agent_names, framework_names = self._agent_slots.names, self._framework_slots.names
        slots, positions, counts = zip(*grants, strict=True)
        agents = np.take(columns, positions).tolist()
        # In grant order, as one grant after another adds them (the same sums either way;
        # a few grants, the usual run in a backlog, cost less one by one).
        if len(grants) <= FEW_GRANTS:
            count, used, demand = self._count, self._used, self._demand
            for n, i, t in zip(slots, agents, counts, strict=True):
                count[n] += t
                used[i] += t * demand[n]
        else:
            frameworks = np.array(slots, dtype=np.int64)
            tasks = np.array(counts, dtype=np.int64)
            np.add.at(self._count, frameworks, tasks)
            np.add.at(self._used, agents, tasks[:, None] * self._demand[frameworks])
        out = []
        for n, i, t, c in zip(slots, agents, counts, positions, strict=True):
            f, a = framework_names[n], agent_names[i]
            placed = self._placed.setdefault(n, {})
            placed[i] = held = placed.get(i, 0) + t
            self._hosted.setdefault(i, {})[n] = held
            if oblivious:
                # The tenant keeps whole tasks and declines the rest of the offer; from now
                # on the allocator knows its demand from what it launched.
                self._known[n] = self.frameworks[f].demand
                assert state is not None  # (the direct run is characterized)
                self._decline(f, a, state.withheld[c], now)
            out.append(EngineGrant(f, a, t, dict(self._held[n])))
        self.grants_total += len(out)
        return out
