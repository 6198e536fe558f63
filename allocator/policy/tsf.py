"""TSF (paper 000; 002 Sec. III): x_n / (phi_n y_n), y_n = tasks n could run alone.

y_n = sum over eligible agents of floor(gamma_{n,i}): whole tasks on the eligible cluster if
n had it to itself. It needs d_n; in oblivious mode the demand observed from the framework's
granted tasks stands in (a framework with no task yet has x_n = 0 and so criterion 0).
"""

from __future__ import annotations

import numpy as np

from allocator.policy.base import Criterion
from allocator.state import AllocationState


def tasks_alone(
    state: AllocationState, demand: np.ndarray, rows: np.ndarray | None = None
) -> np.ndarray:
    """y_n for the given demand rows (all frameworks, or those selected by `rows`).

    NaN demand rows give NaN.
    """
    gamma = state.cluster.fit(np.nan_to_num(demand, nan=np.inf), rows)
    alone = np.floor(gamma + 1e-9).sum(axis=1)
    return np.where(np.isnan(demand).any(axis=1), np.nan, alone)


class TSF(Criterion):
    name = "tsf"
    needs_demand = True

    def __init__(self) -> None:
        self._alone: np.ndarray | None = None
        self._version: tuple[int, int] = (-1, -1)

    def alone(self, state: AllocationState) -> np.ndarray:
        """y_n, recomputed only for frameworks whose demand became known since last time."""
        if self._alone is None or self._version[0] != id(state):
            self._alone = tasks_alone(state, state.known_demand)
        elif self._version[1] != state.demand_version:
            stale = np.isnan(self._alone) & ~np.isnan(state.known_demand).any(axis=1)
            if stale.any():
                self._alone[stale] = tasks_alone(state, state.known_demand[stale], stale)
        self._version = (id(state), state.demand_version)
        return self._alone

    def values(self, state: AllocationState) -> np.ndarray:
        alone = self.alone(state)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(alone > 0, state.count / alone, np.inf)
        share = np.where(state.count == 0, 0.0, share)
        return share / state.cluster.weight
