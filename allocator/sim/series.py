"""Allocation time series: allocated fraction per resource and Jain's fairness index.

Values are piecewise constant between events; `advance(t)` integrates up to t with the
values last recorded. The values are allocator.metrics_defs's, the definitions the
Prometheus exporter uses, so the simulator, a live batch and a scrape agree.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

import numpy as np

from allocator.metrics_defs import EngineLike, GroupUsage, jain

__all__ = ["AllocationSeries", "SampledSeries", "jain", "write_series_csv"]


class SampledSeries(Protocol):
    """What a plot or a CSV reads of a time series: simulation, trace or live alike."""

    resources: tuple[str, ...]
    times: list[float]
    allocated: list[np.ndarray]  # fraction of capacity per resource, one per time
    fairness: list[float]


class AllocationSeries:
    def __init__(self, engine: EngineLike) -> None:
        self.engine = engine
        self.resources = tuple(engine.resources)
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
        usage = GroupUsage.of(self.engine)
        self._last_alloc = usage.allocated_ratio()
        self._last_fair = usage.fairness(busy_groups)
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


def write_series_csv(
    path: str | Path, series: SampledSeries, parts: Mapping[str, SampledSeries] | None = None
) -> None:
    """One row per sample: time_s, allocated_<resource> (`fairbroker_cluster_allocated_ratio`),
    fairness, then <part>_allocated_<resource> for each part recorded at the same times (a live
    batch's groups: `fairbroker_group_allocated_ratio`)."""
    parts = dict(parts or {})
    resources = series.resources
    header = ["time_s", *(f"allocated_{r}" for r in resources), "fairness"]
    header += [f"{label}_allocated_{r}" for label in parts for r in resources]
    columns = [part.allocated for part in parts.values()]
    with open(path, "w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(header)
        for k, (time, allocated, fairness) in enumerate(
            zip(series.times, series.allocated, series.fairness, strict=True)
        ):
            row = [f"{time:.3f}", *(f"{v:.6f}" for v in allocated), f"{fairness:.6f}"]
            row += [f"{v:.6f}" for column in columns for v in column[k]]
            writer.writerow(row)
