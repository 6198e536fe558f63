"""Allocation time series: allocated fraction per resource and Jain's fairness index.

Values are piecewise constant between events; `advance(t)` integrates up to t with the
values last recorded. The same definitions serve the simulator and a live run.
"""

from __future__ import annotations

import numpy as np

from allocator.engine import Engine


def jain(values: np.ndarray) -> float:
    """Jain's index (sum x)^2 / (n sum x^2); 1 when all equal, 1/n when one holds all."""
    if len(values) == 0 or not np.any(values):
        return 1.0
    return float(values.sum() ** 2 / (len(values) * np.square(values).sum()))


class AllocationSeries:
    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.times: list[float] = []
        self.allocated: list[np.ndarray] = []  # fraction of registered capacity, per resource
        self.fairness: list[float] = []
        self._integral = np.zeros(len(engine.resources))
        self._fair_integral = 0.0
        self._span = 0.0
        self._last_time = 0.0
        self._last_alloc = np.zeros(len(engine.resources))
        self._last_fair = 1.0
        self._busy = False

    def advance(self, time: float) -> None:
        elapsed = time - self._last_time
        if elapsed > 0 and self._busy:
            self._integral += elapsed * self._last_alloc
            self._fair_integral += elapsed * self._last_fair
            self._span += elapsed
        self._last_time = time

    def record(self, time: float, busy_groups: set[str]) -> None:
        """Sample the engine's allocation now; `busy_groups` have jobs waiting or running."""
        total = self.engine.capacity_total()
        held = self.engine.allocated_by_role()
        zero = np.zeros(len(total))
        used = sum(held.values(), zero)
        scale = np.divide(1.0, total, out=np.zeros_like(total), where=total > 0)
        shares = np.array([np.max(held.get(g, zero) * scale) for g in sorted(busy_groups)])
        self._last_alloc = used * scale
        self._last_fair = jain(shares) if len(shares) else 1.0
        self._busy = bool(busy_groups)
        self.times.append(time)
        self.allocated.append(self._last_alloc)
        self.fairness.append(self._last_fair)

    def time_average(self) -> dict[str, float]:
        if self._span <= 0:
            return {r: 0.0 for r in self.engine.resources}
        return {
            r: float(v)
            for r, v in zip(self.engine.resources, self._integral / self._span, strict=True)
        }

    def mean_fairness(self) -> float:
        return self._fair_integral / self._span if self._span > 0 else 1.0
