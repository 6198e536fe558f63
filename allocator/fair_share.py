"""Fair share per framework: what progressive filling would give each current framework if
the whole cluster were empty and every framework's demand were placed again, capped by its
target (issue 22).

It is the engine's own allocation run on a fresh state: the same `progressive_fill` with the
active criterion, selection (rrr as Mesos's allocation pass), level, role weights, framework
weights, placement constraints and mode, and the engine's tie rule among equal candidates
(random or waste-then-random). The random part is replaced by a deterministic rule, so the
fair share of a given cluster is the same at every call (it must not jump between runs
because of a random draw): `FirstChoice` stands in for the random generator and always takes
the lowest index, which means

- a tie between frameworks (or roles, or agents of equal best fit) goes to the lowest slot,
  i.e. the framework registered first (the agent declared first);
- the agent order of `rrr` (Mesos's allocation pass: each agent filled before the next) and
  of `random` selection is the declaration order.

Oblivious mode fills as the static oblivious fill does (the chosen framework keeps the whole
tasks the agent's remainder holds; no agent is withheld for the rest of the run, since the
fair share describes the state repeated runs reach, not one run's offers).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from allocator.engine_config import EngineConfig
from allocator.filling import progressive_fill
from allocator.model import Cluster
from allocator.policy import scheduler
from allocator.policy.base import Criterion
from allocator.state import AllocationState, Mode

if TYPE_CHECKING:
    from allocator.engine import Engine


class FirstChoice(np.random.Generator):
    """A generator whose every draw is the first option: `integers` 0, `random` 0.0 and
    `permutation` the identity. The selectors use no other draw."""

    def __init__(self) -> None:
        super().__init__(np.random.PCG64(0))

    def integers(self, *args: Any, **kwargs: Any) -> Any:
        return 0

    def random(self, *args: Any, **kwargs: Any) -> Any:
        return 0.0

    def permutation(self, x: Any, axis: int = 0) -> np.ndarray:
        return np.arange(x) if isinstance(x, int | np.integer) else np.array(x, copy=True)


@dataclass(frozen=True)
class FairShare:
    """Fair share of every framework slot of `cluster` (free slots: 0).

    `by_agent[n, i]` executors of framework n on agent i in the fair allocation;
    `unit[n]` is the active criterion's value for one executor of n (positive): a count of
    executors times `unit` compares shortfalls and excesses of different frameworks in the
    criterion's own terms (e.g. dominant share over weight for DRF).
    """

    cluster: Cluster
    by_agent: np.ndarray  # (F, A) int
    unit: np.ndarray  # (F,) float

    @property
    def executors(self) -> np.ndarray:
        """(F,) fair share in executors."""
        return self.by_agent.sum(axis=1)

    @property
    def active(self) -> np.ndarray:
        """(F,) slots that hold a registered framework (free slots have no demand)."""
        return self.cluster.has_demand

    def of(self, framework: str) -> int:
        return int(self.executors[self.cluster.framework_names.index(framework)])

    def as_dict(self) -> dict[str, int]:
        """Framework name -> fair share in executors, registered frameworks only."""
        names = self.cluster.framework_names
        executors = self.executors
        return {names[n]: int(executors[n]) for n in np.flatnonzero(self.active)}

    def on_agents(self, framework: str) -> dict[str, int]:
        """Agent name -> executors of `framework` there in the fair allocation (nonzero)."""
        row = self.by_agent[self.cluster.framework_names.index(framework)]
        return {self.cluster.agent_names[i]: int(row[i]) for i in np.flatnonzero(row)}


def criterion_per_executor(criterion: Criterion, state: AllocationState) -> np.ndarray:
    """(F,) the criterion of each framework holding exactly one executor on an empty
    cluster; 1 where it is not a positive finite number (no demand, fits nowhere).

    Every criterion here is proportional to the executors held for a fixed demand, so this
    is the criterion's price of one executor. Per-agent criteria take the framework's best
    (lowest) value over its eligible agents; rPS-DSF on an empty cluster is PS-DSF.
    """
    demand = np.nan_to_num(state.cluster.demand, nan=0.0)
    state.count = np.ones(len(demand))
    state.alloc = np.asfortranarray(demand.copy())
    if criterion.per_agent:
        matrix = np.where(state.cluster.eligible, criterion.matrix(state), np.inf)
        values = matrix.min(axis=1, initial=np.inf)
    else:
        values = np.asarray(criterion.values(state), dtype=float)
    return np.where(np.isfinite(values) & (values > 0), values, 1.0)


def fair_share_of(
    cluster: Cluster, config: EngineConfig, known_demand: np.ndarray | None = None
) -> FairShare:
    """Fair share on `cluster` (its `max_tasks` are the targets) under `config`.

    `known_demand`: what the policy may know of each demand (the engine's; NaN rows in
    oblivious mode until observed); default as `AllocationState` decides for the mode.
    """
    criterion = scheduler(config.scheduler).criterion()
    state = AllocationState(cluster, config.mode, known_demand=known_demand)
    progressive_fill(
        state,
        criterion,
        config.effective_selection,
        FirstChoice(),
        config.ties,
        level=config.level,
        agent_pass=True,
        keep=False,
    )
    # A fresh criterion: some cache per state (TSF's tasks-alone).
    unit = criterion_per_executor(
        scheduler(config.scheduler).criterion(), AllocationState(cluster, Mode.CHARACTERIZED)
    )
    return FairShare(cluster, state.tasks.copy(), unit)


def fair_shares(source: Engine | Cluster, config: EngineConfig | None = None) -> FairShare:
    """Fair share of every framework of an engine (its agents, registered frameworks,
    targets, constraints and configuration; refuse filters and running tasks play no part)
    or of a `Cluster` (then `config` is required)."""
    if isinstance(source, Cluster):
        if config is None:
            raise ValueError("fair_shares: a Cluster needs an EngineConfig")
        return fair_share_of(source, config)
    return fair_share_of(source.cluster(), config or source.config, source.known_demand())


class FairShareCache:
    """The fair share recomputed only when what it depends on changed: agents' capacities,
    the frameworks (demands, weights, targets, roles, constraints) and the configuration.
    Running tasks, grants and releases do not change it, so an allocation run that only
    places or frees executors pays a fingerprint of the cluster arrays, not a fill."""

    def __init__(self) -> None:
        self._key: bytes | None = None
        self._share: FairShare | None = None
        self.computed = 0  # fills run so far (the others were answered from the cache)
        # The cluster object last asked about: `Engine.cluster()` hands back the same one
        # until something in it changes, so asking again costs no fingerprint.
        self._last: tuple[Cluster, EngineConfig, np.ndarray | None] | None = None

    def get(
        self,
        source: Engine | Cluster,
        config: EngineConfig | None = None,
        known_demand: np.ndarray | None = None,
    ) -> FairShare:
        """`known_demand` with a Cluster: the engine's (`Engine.known_demand()`), for a
        cluster taken from an engine elsewhere (the broker's worker thread)."""
        if isinstance(source, Cluster):
            cluster, known = source, known_demand
        else:
            cluster, known = source.cluster(), source.known_demand()
            config = config or source.config
        if config is None:
            raise ValueError("FairShareCache.get: a Cluster needs an EngineConfig")
        last = self._last
        if (
            self._share is not None
            and last is not None
            and last[0] is cluster  # the engine's cluster, rebuilt only when it changed
            and last[1] == config
            and _same(last[2], known)
        ):
            return self._share
        self._last = (cluster, config, None if known is None else known.copy())
        key = _fingerprint(cluster, config, known)
        if self._share is None or key != self._key:
            self._share = fair_share_of(cluster, config, known)
            self._key = key
            self.computed += 1
        return self._share


def _same(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    if a is None or b is None:
        return a is b
    return a.shape == b.shape and bool(np.array_equal(a, b, equal_nan=True))


def _fingerprint(cluster: Cluster, config: EngineConfig, known: np.ndarray | None) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    names = (cluster.resources, cluster.agent_names, cluster.framework_names, cluster.role_names)
    digest.update(repr((names, config.to_json())).encode())
    arrays = (cluster.capacity, cluster.demand, cluster.weight, cluster.eligible,
              cluster.max_tasks, cluster.role_of, cluster.role_weight, known)  # fmt: skip
    for array in arrays:
        if array is not None:
            digest.update(np.ascontiguousarray(array).tobytes())
            digest.update(repr(array.shape).encode())
    return digest.digest()
