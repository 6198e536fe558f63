"""Allocation time series: allocated fraction per resource and Jain's fairness index.

One `TimeSeries` serves the batch simulator and a live batch (`AllocationSeries`, fed from
the engine or a snapshot) and the trace simulator (`allocator.sim.trace_series`, fed
incrementally). Values are piecewise constant between events; `advance(t)` integrates up to
t with the values last held. The values are allocator.metrics_defs's, the definitions the
Prometheus exporter uses, so the simulators, a live batch and a scrape agree.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from allocator.metrics_defs import EngineLike, GroupUsage, jain

__all__ = ["AllocationSeries", "SampledSeries", "TimeSeries", "jain", "write_series_csv"]


class SampledSeries(Protocol):
    """What a plot or a CSV reads of a time series: simulation, trace or live alike."""

    resources: tuple[str, ...]
    times: list[float]
    allocated: list[np.ndarray]  # fraction of capacity per resource, one per time
    fairness: list[float]


class TimeSeries:
    """Allocated fraction per resource and Jain's index over time: the one time series of
    the batch simulator, the trace simulator and a live batch.

    The values are piecewise constant: a driver holds the current ones (`hold`), and
    `advance(t)` integrates them up to t while something is busy (the averages are over
    that time). Samples are taken when the driver asks (`sample`, at its events) or, with
    `sample_s`, on a fixed grid as time advances.
    """

    def __init__(self, resources: Sequence[str], sample_s: float | None = None) -> None:
        self.resources = tuple(resources)
        self.sample_s = sample_s
        self.times: list[float] = []
        self.allocated: list[np.ndarray] = []  # fraction of registered capacity, per resource
        self.fairness: list[float] = []
        self._integral = np.zeros(len(self.resources))
        self._fair_integral = 0.0
        self._span = 0.0
        self._last_time = 0.0
        self._next_sample = 0.0
        self._allocated = np.zeros(len(self.resources))
        self._fairness = 1.0
        self._busy = False

    def hold(self, allocated: np.ndarray, fairness: float, busy: bool) -> None:
        """The values from now on; `busy`: the time counts towards the averages."""
        self._allocated = allocated
        self._fairness = fairness
        self._busy = busy

    def advance(self, time: float) -> None:
        elapsed = time - self._last_time
        if elapsed <= 0:
            return
        if self._busy:
            self._integral += elapsed * self._allocated
            self._fair_integral += elapsed * self._fairness
            self._span += elapsed
        if self.sample_s is not None:
            while self._next_sample < time:
                self.sample(self._next_sample)
                self._next_sample += self.sample_s
        self._last_time = time

    def sample(self, time: float) -> None:
        self.times.append(time)
        self.allocated.append(self._allocated)
        self.fairness.append(self._fairness)

    def time_average(self) -> dict[str, float]:
        """Mean allocated fraction per resource over the busy time."""
        if self._span <= 0:
            return {r: 0.0 for r in self.resources}
        average = self._integral / self._span
        return {r: float(v) for r, v in zip(self.resources, average, strict=True)}

    def mean_fairness(self) -> float:
        return self._fair_integral / self._span if self._span > 0 else 1.0


class AllocationSeries(TimeSeries):
    """The time series of an engine (or a live snapshot shaped like one), sampled at each
    `record`: the values are GroupUsage's, over the engine's groups (roles)."""

    def __init__(self, engine: EngineLike) -> None:
        super().__init__(engine.resources)
        self.engine = engine

    def record(self, time: float, busy_groups: set[str]) -> None:
        """Sample the engine's allocation now; `busy_groups` have jobs waiting or running."""
        usage = GroupUsage.of(self.engine)
        self.hold(usage.allocated_ratio(), usage.fairness(busy_groups), bool(busy_groups))
        self.sample(time)


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
