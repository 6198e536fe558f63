"""Allocation time series of a live run, built from broker snapshots.

Each snapshot feeds allocator.sim.series.AllocationSeries through an engine-shaped view (the
series reads it as allocator.metrics_defs.GroupUsage: `resources`, `capacity_total()` and
`allocated_by_role()`), one series for all groups and one per group, so time averages,
fairness and plots are defined exactly as in the simulator and the Prometheus exporter.
Executors per agent and group are averaged over the same busy time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from allocator.batch.allocation import AllocationSample
from allocator.sim.series import AllocationSeries


class SnapshotView:
    """The latest snapshot, shaped like the parts of Engine that AllocationSeries reads."""

    def __init__(self, resources: Sequence[str], capacity: dict[str, float], only: str | None):
        self.resources = tuple(resources)
        self.only = only
        self._capacity = self._vector(capacity)
        self._held: dict[str, np.ndarray] = {}

    def _vector(self, amounts: dict[str, float]) -> np.ndarray:
        return np.array([amounts.get(r, 0.0) for r in self.resources])

    def update(self, sample: AllocationSample) -> None:
        if sample.capacity:
            self._capacity = self._vector(sample.capacity)
        self._held = {
            group: self._vector(amounts)
            for group, amounts in sample.allocated.items()
            if self.only is None or group == self.only
        }

    def capacity_total(self) -> np.ndarray:
        return self._capacity

    def allocated_by_role(self) -> dict[str, np.ndarray]:
        return self._held


class LiveSeries:
    """Total and per-group allocation series plus executors per agent, sampled over time."""

    def __init__(
        self, resources: Sequence[str], capacity: dict[str, float], groups: Sequence[str]
    ) -> None:
        self.groups = tuple(groups)
        self.views = {None: SnapshotView(resources, capacity, None)} | {
            g: SnapshotView(resources, capacity, g) for g in self.groups
        }
        self.total = AllocationSeries(self.views[None])  # type: ignore[arg-type]
        self.by_group = {
            g: AllocationSeries(self.views[g])  # type: ignore[arg-type]
            for g in self.groups
        }
        self.samples = 0
        self.first: AllocationSample | None = None
        self.last: AllocationSample | None = None
        self._agents: dict[str, dict[str, int]] = {}
        self._agent_integral: dict[str, dict[str, float]] = {}
        self.agent_peak: dict[str, dict[str, int]] = {}
        self.executors_peak = 0  # most executors placed at one sample, all agents and groups
        self._span = 0.0
        self._time = 0.0
        self._busy = False

    def _all(self) -> list[AllocationSeries]:
        return [self.total, *self.by_group.values()]

    def advance(self, time: float) -> None:
        """Integrate the values last recorded up to `time` (seconds since the batch started)."""
        for series in self._all():
            series.advance(time)
        elapsed = time - self._time
        if elapsed > 0 and self._busy:
            self._span += elapsed
            for agent, counts in self._agents.items():
                row = self._agent_integral.setdefault(agent, {})
                for group, n in counts.items():
                    row[group] = row.get(group, 0.0) + elapsed * n
        self._time = max(self._time, time)

    def record(self, time: float, sample: AllocationSample | None, busy: set[str]) -> None:
        """Advance to `time`, then hold `sample` (None: keep the last one) from now on."""
        self.advance(time)
        if sample is not None:
            self.samples += 1
            self.first = self.first or sample
            self.last = sample
            for view in self.views.values():
                view.update(sample)
            self._agents = sample.agent_executors
            placed = sum(n for counts in sample.agent_executors.values() for n in counts.values())
            self.executors_peak = max(self.executors_peak, placed)
            for agent, counts in sample.agent_executors.items():
                peak = self.agent_peak.setdefault(agent, {})
                for group, n in counts.items():
                    peak[group] = max(peak.get(group, 0), n)
        self._busy = bool(busy)
        for series in self._all():
            series.record(time, busy)

    def agent_average(self) -> dict[str, dict[str, float]]:
        """Time-averaged executors per agent and group over the time jobs were in flight."""
        agents = set(self.agent_peak) | set(self._agent_integral)
        if self._span <= 0:
            return {a: {} for a in sorted(agents)}
        return {
            a: {g: v / self._span for g, v in self._agent_integral.get(a, {}).items()}
            for a in sorted(agents)
        }

    def executors_average(self) -> float:
        """Executors placed, all agents and groups, time-averaged while jobs were in flight."""
        return sum(v for groups in self.agent_average().values() for v in groups.values())

    def grants(self) -> int | None:
        """Grants the broker made between the first and the last snapshot."""
        if self.first is None or self.last is None:
            return None
        if self.first.grants_total is None or self.last.grants_total is None:
            return None
        return self.last.grants_total - self.first.grants_total
