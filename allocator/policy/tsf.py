"""TSF (paper 000; 002 Sec. III): x_n / (phi_n y_n), y_n = tasks n could run alone.

y_n = sum over eligible agents of floor(gamma_{n,i}): whole tasks on the eligible cluster if
n had it to itself. It needs d_n; in oblivious mode the demand observed from the framework's
granted tasks stands in (a framework with no task yet has x_n = 0 and so criterion 0).

Unlike the share criteria, TSF reads the whole framework-level `AllocationState` (y_n needs
the demand, `known_demand`), never a `Holdings` view: its role level is computed here
(`role_column`) from the frameworks' task shares.

y_n is the whole cluster's even where a run sees some agents only: an online engine run over
the changed agents (`allocator.engine_columns.Columns`) carries the engine's y_n (`alone`),
kept across runs as agents and frameworks come and go (`allocator.engine_alone`).
"""

from __future__ import annotations

import numpy as np

from allocator.policy.base import CRITERIA, Criterion
from allocator.state import AllocationState


def whole_tasks(demand: np.ndarray, capacity: np.ndarray) -> np.ndarray:
    """(N, K) floor(gamma_{n,k}): whole tasks of each demand row on each empty capacity
    (0 where no resource is asked for), elementwise as `Cluster.fit` computes gamma."""
    gamma = np.full((len(demand), len(capacity)), np.inf)
    for r in range(demand.shape[1]):
        need = demand[:, r] > 0
        if need.any():
            gamma[need] = np.minimum(gamma[need], capacity[None, :, r] / demand[need, r, None])
    return np.floor(np.where(np.isfinite(gamma), gamma, 0.0) + 1e-9)


def tasks_alone(
    state: AllocationState, demand: np.ndarray, rows: np.ndarray | None = None
) -> np.ndarray:
    """y_n for the given demand rows (all frameworks, or those selected by `rows`).

    NaN demand rows give NaN. Agents with the same capacity hold the same whole tasks, so
    floor(gamma_{n,i}) is computed once per distinct capacity and counted once per eligible
    agent of it: the sums are of whole numbers, exact in any order while they stay below
    2^53 (beyond, the per-agent sum of `Cluster.fit` is used).
    """
    cluster = state.cluster
    known = getattr(cluster, "alone", None)  # the whole cluster's, on a run over some agents
    if known is not None:
        alone = known if rows is None else known[rows]
        return np.where(np.isnan(demand).any(axis=1), np.nan, alone)
    capacity, kind = np.unique(cluster.capacity, axis=0, return_inverse=True)
    kind = kind.reshape(-1)
    d = np.nan_to_num(demand, nan=np.inf)
    whole = whole_tasks(d, capacity)  # as Cluster.fit, on the distinct capacities
    eligible = cluster.eligible if rows is None else cluster.eligible[rows]
    if eligible.all():
        agents = np.bincount(kind, minlength=len(capacity)).astype(float)
        alone = whole @ agents
        exact = whole.max(initial=0.0) * cluster.n_agents < 2.0**53
    else:
        exact = False
    if not exact:  # constraints, or sums too large to be exact: every agent on its own
        gamma = cluster.fit(d, rows)
        alone = np.floor(gamma + 1e-9).sum(axis=1)
    return np.where(np.isnan(demand).any(axis=1), np.nan, alone)


@CRITERIA.register("tsf")
class TSF(Criterion):
    name = "tsf"
    needs_demand = True

    def __init__(self) -> None:
        self._alone: np.ndarray | None = None
        self._scale = np.empty(0)
        self._version: tuple[int, int] = (-1, -1)

    def alone(self, state: AllocationState) -> np.ndarray:
        """y_n, recomputed only for frameworks whose demand became known since last time."""
        if self._alone is None or self._version[0] != id(state):
            self._alone = tasks_alone(state, state.known_demand)
            self._scale = self._inverse(state)
        elif self._version[1] != state.demand_version:
            stale = np.isnan(self._alone) & ~np.isnan(state.known_demand).any(axis=1)
            if stale.any():
                self._alone[stale] = tasks_alone(state, state.known_demand[stale], stale)
            self._scale = self._inverse(state)
        self._version = (id(state), state.demand_version)
        return self._alone

    def _inverse(self, state: AllocationState) -> np.ndarray:
        """1 / (phi_n y_n); 0 while d_n is unknown (x_n is 0 then), huge where y_n = 0."""
        alone = np.nan_to_num(self._alone, nan=np.inf)
        with np.errstate(divide="ignore"):
            inverse = np.where(alone > 0, 1.0 / alone, 1e300)
        return inverse / state.cluster.weight

    def scale(self, state: AllocationState) -> np.ndarray:
        """1 / (phi_n y_n) of each framework: its criterion is x_n times this."""
        self.alone(state)
        return self._scale

    def values(self, state: AllocationState) -> np.ndarray:
        self.alone(state)
        return state.count * self._scale

    def role_column(self, state: AllocationState, agent: int | None = None) -> np.ndarray:
        """A role's task share is the sum of its frameworks' x_n / y_n, over its weight."""
        shares = self.values(state) * state.cluster.weight
        cluster = state.cluster
        by_role = np.bincount(cluster.role_of, weights=shares, minlength=len(cluster.role_names))
        return by_role / cluster.role_weight

    def role_matrix(self, state: AllocationState) -> np.ndarray:
        column = self.role_column(state)
        return np.broadcast_to(column[:, None], (len(column), state.residual.shape[0]))
