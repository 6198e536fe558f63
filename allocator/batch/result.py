"""What a live batch measured: jobs, timings, allocation over time; table, JSON and plot."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from allocator.batch.sampler import LiveSeries
from allocator.errors import FairbrokerError


@dataclass
class JobRecord:
    name: str
    group: str
    queue: int
    index: int
    submitted_s: float  # seconds since the batch started
    ended_s: float
    exit_code: int | None  # None: killed at the job timeout
    ok: bool  # exited 0 with a correct answer
    detail: str
    log: Path

    @property
    def duration_s(self) -> float:
        return self.ended_s - self.submitted_s

    def to_json(self) -> dict[str, object]:
        return {
            "name": self.name,
            "group": self.group,
            "queue": self.queue,
            "index": self.index,
            "submitted_s": round(self.submitted_s, 3),
            "ended_s": round(self.ended_s, 3),
            "duration_s": round(self.duration_s, 3),
            "exit_code": self.exit_code,
            "ok": self.ok,
            "detail": self.detail,
            "log": str(self.log),
        }


def _stats(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"mean": None, "median": None, "max": None}
    array = np.array(values)
    return {
        "mean": round(float(array.mean()), 3),
        "median": round(float(np.median(array)), 3),
        "max": round(float(array.max()), 3),
    }


def _cell(value: float | None, width: int, scale: float = 1.0) -> str:
    return f"{'-':>{width}}" if value is None else f"{value * scale:>{width}.1f}"


@dataclass
class LiveBatchResult:
    name: str
    broker: str
    groups: list[str]
    started_at: float  # unix seconds
    jobs: list[JobRecord]
    series: LiveSeries | None  # None: no snapshot function was given
    sample_errors: int = 0
    last_sample_error: str = ""

    @property
    def makespan_s(self) -> float:
        if not self.jobs:
            return 0.0
        return max(j.ended_s for j in self.jobs) - min(j.submitted_s for j in self.jobs)

    @property
    def failures(self) -> list[JobRecord]:
        return [j for j in self.jobs if not j.ok]

    @property
    def grants(self) -> int | None:
        return None if self.series is None else self.series.grants()

    def job_times(self, group: str | None = None) -> dict[str, float | None]:
        """Mean, median and max job duration (s), of one group or of all."""
        return _stats([j.duration_s for j in self.jobs if group in (None, j.group)])

    def allocated(self, group: str | None = None) -> dict[str, float] | None:
        """Time-averaged fraction of the agents' capacity allocated, per resource."""
        if self.series is None or self.series.samples == 0:
            return None
        series = self.series.total if group is None else self.series.by_group[group]
        return series.time_average()

    def to_json(self) -> dict[str, object]:
        last = None if self.series is None else self.series.last
        fairness = None
        if self.series is not None and self.series.samples:
            fairness = round(self.series.total.mean_fairness(), 4)
        return {
            "name": self.name,
            "broker": self.broker,
            "scheduler": last.scheduler if last else None,
            "mode": last.mode if last else None,
            "started_at": self.started_at,
            "makespan_s": round(self.makespan_s, 3),
            "jobs": len(self.jobs),
            "failures": len(self.failures),
            "jct_s": self.job_times(),
            "jct_by_group_s": {g: self.job_times(g) for g in self.groups},
            "allocated": _rounded(self.allocated()),
            "allocated_by_group": {g: _rounded(self.allocated(g)) for g in self.groups},
            "fairness": fairness,
            "grants": self.grants,
            "samples": 0 if self.series is None else self.series.samples,
            "sample_errors": self.sample_errors,
            "executors_per_agent": self._agent_json(),
            "job_list": [j.to_json() for j in self.jobs],
        }

    def _agent_json(self) -> dict[str, dict[str, dict[str, float]]] | None:
        if self.series is None:
            return None
        peak = self.series.agent_peak
        return {
            agent: {
                g: {"mean": round(v, 3), "peak": peak.get(agent, {}).get(g, 0)}
                for g, v in groups.items()
            }
            for agent, groups in self.series.agent_average().items()
        }

    def render_summary(self) -> str:
        last = None if self.series is None else self.series.last
        policy = f"{last.scheduler}/{last.mode}" if last and last.scheduler else "policy unknown"
        grants = "-" if self.grants is None else str(self.grants)
        lines = [
            f"{self.name}: live, broker {self.broker}, {policy}, {len(self.jobs)} jobs, "
            f"makespan {self.makespan_s:.1f} s, grants {grants}",
            f"{'group':<12}{'jobs':>5}{'failed':>7}{'jct mean':>10}{'median':>8}{'max':>8}"
            f"{'cpus %':>8}{'mem %':>7}",
        ]
        for group in [*self.groups, None]:
            jobs = [j for j in self.jobs if group in (None, j.group)]
            times = self.job_times(group)
            alloc = self.allocated(group) or {}
            lines.append(
                f"{group or 'all':<12}{len(jobs):>5}{sum(not j.ok for j in jobs):>7}"
                f"{_cell(times['mean'], 10)}{_cell(times['median'], 8)}{_cell(times['max'], 8)}"
                f"{_cell(alloc.get('cpus'), 8, 100)}{_cell(alloc.get('mem'), 7, 100)}"
            )
        if self.series is not None and self.series.samples:
            lines.append(
                f"fairness {self.series.total.mean_fairness():.2f} (Jain, time-averaged), "
                f"{self.series.samples} samples"
                + (f", {self.sample_errors} failed" if self.sample_errors else "")
            )
            lines.extend(self._agent_table())
        else:
            lines.append("no allocation samples")
        if self.sample_errors:
            lines.append(f"last snapshot error: {self.last_sample_error}")
        for job in self.failures:
            lines.append(f"failed: {job.name}: {job.detail} (log {job.log})")
        return "\n".join(lines)

    def _agent_table(self) -> list[str]:
        assert self.series is not None
        average = self.series.agent_average()
        if not average:
            return []
        width = max(8, *(len(a) for a in average)) + 2
        lines = [
            "executors per agent, time-averaged (peak):",
            f"{'agent':<{width}}" + "".join(f"{g:>14}" for g in self.groups),
        ]
        for agent, groups in average.items():
            peak = self.series.agent_peak.get(agent, {})
            cells = "".join(
                f"{f'{groups.get(g, 0.0):.1f} ({peak.get(g, 0)})':>14}" for g in self.groups
            )
            lines.append(f"{agent:<{width}}{cells}")
        return lines

    def plot(self, path: str | Path) -> None:
        """Allocated CPU % and memory % over time, one line per group and one for all."""
        from allocator.sim.plot import plot_runs

        if self.series is None or self.series.samples == 0:
            raise FairbrokerError("no allocation samples to plot (no snapshot function given)")
        runs = [(g, s) for g, s in self.series.by_group.items()]
        plot_runs([*runs, ("all", self.series.total)], path, f"{self.name} (live)")


def _rounded(values: dict[str, float] | None) -> dict[str, float] | None:
    return None if values is None else {r: round(v, 4) for r, v in values.items()}
