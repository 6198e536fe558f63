"""TSF's y_n over the online engine's whole cluster, kept across runs (issue 28).

y_n, the tasks framework n could run alone (`allocator.policy.tsf`), is the sum over the
agents it may use of floor(gamma_{n,i}). Only an agent coming, going or changing capacity
and a framework registering change it, so the engine keeps it for every framework slot
instead of summing over every agent at every run; a run over the changed agents reads it
from `Columns.alone`. What a dense run also leaves out of the sum, the agents a refuse
filter keeps from the framework at that run, is taken off per run (`Engine._tasks_alone`).

The values are sums of whole numbers: every addition and subtraction is exact while they
stay below 2^53, as the dense sum is; past that (`exact` false) the engine runs TSF densely.
"""

from __future__ import annotations

import numpy as np

from allocator.policy.tsf import whole_tasks

#: Whole numbers up to here are exact in float64.
EXACT = 2.0**53


class TasksAlone:
    """y_n of each framework slot for its demand, over the live agents its constraints allow
    (refuse filters not applied)."""

    def __init__(self, capacity: np.ndarray, live: np.ndarray) -> None:
        """Start from the engine's agents (`capacity` and `live` by agent slot); every
        framework is computed at the first `current`."""
        self.values = np.zeros(0)
        self.pending: set[int] = set()  # framework slots to compute afresh
        self.exact = True
        # Live agents by distinct capacity: unconstrained frameworks sum over these.
        self.kinds: dict[bytes, tuple[np.ndarray, int]] = {}
        for c in capacity[live]:
            self._count(c, +1)

    def _count(self, capacity: np.ndarray, change: int) -> None:
        key = capacity.tobytes()
        held = self.kinds.get(key, (capacity.copy(), 0))[1] + change
        if held:
            self.kinds[key] = (capacity.copy(), held)
        else:
            del self.kinds[key]

    def agent(self, capacity: np.ndarray, allowed: np.ndarray, demand: np.ndarray,
              change: int) -> None:  # fmt: skip
        """An agent of `capacity` came (`change` +1) or went (-1); `allowed` (F slots,): the
        frameworks that may use it, `demand` (F slots, R) theirs."""
        self._count(capacity, change)
        n_f = min(len(self.values), len(allowed))
        whole = whole_tasks(demand[:n_f], capacity[None, :])[:, 0]
        whole = np.where(allowed[:n_f], whole, 0.0)
        if change > 0:
            self.values[:n_f] += whole
        else:
            self.values[:n_f] -= whole
        self._check(whole)

    def register(self, slot: int) -> None:
        self.pending.add(slot)

    def current(
        self,
        capacity: np.ndarray,
        live: np.ndarray,
        demand: np.ndarray,
        active: np.ndarray,
        rows: dict[int, np.ndarray],
    ) -> np.ndarray:
        """(F slots,) y_n now (`values`; the arguments are the engine's slot arrays, read only
        for the frameworks registered since the last call)."""
        n_f = len(active)
        if n_f > len(self.values):
            self.pending.update(range(len(self.values), n_f))
            self.values = np.concatenate([self.values, np.zeros(n_f - len(self.values))])
        fresh = [n for n in sorted(self.pending) if n < n_f and active[n]]
        self.pending.clear()
        wide = [n for n in fresh if n not in rows]
        if wide and self.kinds:
            kinds = np.array([c for c, _ in self.kinds.values()])
            held = np.array([float(h) for _, h in self.kinds.values()])
            whole = whole_tasks(demand[wide], kinds)
            self.values[wide] = whole @ held
            self._check(whole.max(axis=1) * held.sum())
        elif wide:
            self.values[wide] = 0.0
        for n in fresh:
            if n in rows:
                where = live & rows[n][: len(live)]
                whole = whole_tasks(demand[n : n + 1], capacity[where])[0]
                self.values[n] = whole.sum()
                self._check(whole.max(initial=0.0) * len(whole))
        return self.values[:n_f]

    def _check(self, bound: np.ndarray) -> None:
        """`exact` stays true while every term and every value is below 2^53."""
        if self.exact and bound.size and (bound.max() >= EXACT or self.values.max() >= EXACT):
            self.exact = False
