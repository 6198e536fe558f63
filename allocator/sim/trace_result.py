"""What a trace simulation reports: job completion times, task counts, the time series and
their summaries (JSON for `fairbroker sim --json`, a few lines for the command line)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from allocator.sim.trace_series import TraceSeries

#: Jobs are classified by their number of tasks for completion times (paper 001 Fig. 6b
#: uses five classes by task count; these bounds are ours).
SIZE_CLASSES: tuple[tuple[str, int, float], ...] = (
    ("1", 1, 1),
    ("2-10", 2, 10),
    ("11-100", 11, 100),
    ("101-1000", 101, 1000),
    (">1000", 1001, math.inf),
)


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


@dataclass
class TraceResult:
    scenario: str
    scheduler: str
    selection: str
    mode: str
    level: str
    trigger: str
    seed: int
    resources: tuple[str, ...]
    users: list[str]
    agents: int
    end_s: float
    makespan_s: float | None
    jct: np.ndarray  # completion times of finished, non-warm jobs
    jct_tasks: np.ndarray  # their task counts
    jobs_submitted: int
    tasks_submitted: int
    tasks_completed: int
    tasks_dropped: int
    user_submitted: np.ndarray
    user_completed: np.ndarray
    grants: int
    allocation_runs: int
    series: TraceSeries
    wall_s: float
    slots_per_server: int | None = None
    slot_occupancy: float | None = None
    notes: list[str] = field(default_factory=list)
    reclaim: dict[str, object] | None = None  # tasks reclaimed, work lost (trace_reclaim)
    engine_config: dict[str, object] | None = None  # written with a reclaim's results

    def users_complete(self) -> int:
        """Users that submitted tasks and saw every one of them complete."""
        submitted = self.user_submitted > 0
        return int((submitted & (self.user_completed >= self.user_submitted)).sum())

    def allocated(self) -> dict[str, float]:
        return self.series.time_average()

    def to_json(self, series: bool | None = None) -> dict[str, object]:
        """Summary; `series` adds sampled time series (default: when there are <= 20 users)."""
        jct = self.jct

        def stats(values: np.ndarray) -> dict[str, float | int | None]:
            if len(values) == 0:
                return {"jobs": 0, "mean": None, "p50": None, "p95": None}
            return {
                "jobs": len(values),
                "mean": round(float(values.mean()), 3),
                "p50": round(float(np.percentile(values, 50)), 3),
                "p95": round(float(np.percentile(values, 95)), 3),
            }

        by_size = {
            label: stats(jct[(self.jct_tasks >= low) & (self.jct_tasks <= high)])
            for label, low, high in SIZE_CLASSES
        }
        submitted = self.user_submitted > 0
        ratio = self.user_completed[submitted] / self.user_submitted[submitted]
        out: dict[str, object] = {
            "scenario": self.scenario,
            "scheduler": self.scheduler,
            "selection": self.selection,
            "mode": self.mode,
            "level": self.level,
            "trigger": self.trigger,
            "seed": self.seed,
            "agents": self.agents,
            "users": int(submitted.sum()),
            "end_s": round(self.end_s, 3),
            "makespan_s": None if self.makespan_s is None else round(self.makespan_s, 3),
            "jobs": {"submitted": self.jobs_submitted, "completed": len(jct)},
            "tasks": {
                "submitted": self.tasks_submitted,
                "completed": self.tasks_completed,
                "dropped_on_leave": self.tasks_dropped,
            },
            "jct_s": stats(jct),
            "jct_by_size_s": by_size,
            "allocated": {r: round(v, 4) for r, v in self.allocated().items()},
            "fairness": round(self.series.mean_fairness(), 4),
            "fairness_waiting": _round(self.series.mean_fairness_waiting(), 4),
            "users_complete": self.users_complete(),
            "task_completion_ratio": {
                "mean": round(float(ratio.mean()), 4) if len(ratio) else None,
                "min": round(float(ratio.min()), 4) if len(ratio) else None,
            },
            "grants": self.grants,
            "allocation_runs": self.allocation_runs,
            "wall_s": round(self.wall_s, 3),
            "sim_s_per_wall_s": round(self.end_s / self.wall_s, 1) if self.wall_s > 0 else None,
        }
        if self.slots_per_server is not None:
            out["slots_per_server"] = self.slots_per_server
            out["slot_occupancy"] = round(self.slot_occupancy or 0.0, 4)
        if self.notes:
            out["notes"] = self.notes
        if self.reclaim is not None:  # (outputs without reclaim stay as they were)
            out["reclaim"] = self.reclaim
            out["engine"] = self.engine_config
        if series if series is not None else len(self.users) <= 20:
            out["series"] = self.series_json()
        return out

    def series_json(self) -> dict[str, object]:
        s = self.series
        allocated = np.array(s.allocated).reshape(len(s.times), -1)
        out: dict[str, object] = {
            "t": [round(t, 3) for t in s.times],
            "allocated": {
                r: np.round(allocated[:, k], 4).tolist() for k, r in enumerate(self.resources)
            },
            "fairness": np.round(np.array(s.fairness), 4).tolist(),
        }
        if s.track_users and s.shares:
            shares = np.array(s.shares)
            out["dominant_share"] = {
                u: np.round(shares[:, k], 4).tolist() for k, u in enumerate(self.users)
            }
        return out

    def share_at(self, user: str, start: float, end: float) -> float:
        """Mean sampled dominant share of `user` over [start, end) (needs user tracking)."""
        times = np.array(self.series.times)
        k = self.users.index(user)
        shares = np.array(self.series.shares)[:, k]
        window = (times >= start) & (times < end)
        return float(shares[window].mean())
