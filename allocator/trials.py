"""Repeated static fills of one scenario: means, spreads and the bound they are measured by."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from allocator.filling import progressive_fill
from allocator.model import Cluster
from allocator.optimal import DEFAULT_MAX_PAIRS, Optimum, optimum
from allocator.policy import Selection, Ties, scheduler
from allocator.state import AllocationState, Mode


@dataclass
class FillSummary:
    cluster: Cluster
    scheduler: str
    selection: Selection
    mode: Mode
    ties: Ties
    trials: int
    seed: int
    tasks_mean: np.ndarray  # (F, A)
    tasks_std: np.ndarray  # (F, A), sample standard deviation over trials
    totals: np.ndarray  # (trials,)
    utilization: np.ndarray  # (R,) mean over trials
    grants: float  # mean grants per fill
    optimum: Optimum | None
    notes: list[str] = field(default_factory=list)

    def _per_pair(self, values: np.ndarray) -> dict[str, dict[str, float]]:
        c = self.cluster
        return {
            f: {a: round(float(values[n, i]), 6) for i, a in enumerate(c.agent_names)}
            for n, f in enumerate(c.framework_names)
        }

    def to_json(self) -> dict[str, Any]:
        std = float(self.totals.std(ddof=1)) if self.trials > 1 else 0.0
        out: dict[str, Any] = {
            "scheduler": self.scheduler,
            "selection": str(self.selection),
            "mode": str(self.mode),
            "ties": str(self.ties),
            "trials": self.trials,
            "seed": self.seed,
            "tasks": {
                "mean": self._per_pair(self.tasks_mean),
                "std": self._per_pair(self.tasks_std),
            },
            "total": {"mean": round(float(self.totals.mean()), 6), "std": round(std, 6)},
            "optimum": None,
            "utilization": {
                r: round(float(u), 6)
                for r, u in zip(self.cluster.resources, self.utilization, strict=True)
            },
            "grants": round(self.grants, 3),
        }
        if self.optimum is not None:
            out["optimum"] = {"tasks": self.optimum.tasks, "lp_tasks": self.optimum.lp_tasks}
        if self.notes:
            out["notes"] = self.notes
        return out


def run_trials(
    cluster: Cluster,
    scheduler_name: str,
    selection: Selection | str | None = None,
    mode: Mode | str = Mode.CHARACTERIZED,
    ties: Ties | str = Ties.RANDOM,
    trials: int = 1,
    seed: int = 0,
    with_optimum: bool | None = None,
    progress: bool = False,
) -> FillSummary:
    """Fill `trials` fresh copies of the cluster; trial t draws from the seed sequence (seed, t).

    The optimum is solved when `with_optimum` is true, or by default when the instance has at
    most DEFAULT_MAX_PAIRS framework-agent pairs.
    """
    if trials < 1:
        raise ValueError("trials must be at least 1")
    chosen = scheduler(scheduler_name)
    selection = Selection(selection or chosen.default_selection)
    mode, ties = Mode(mode), Ties(ties)
    cluster.check_runnable()
    runs = np.zeros((trials, cluster.n_frameworks, cluster.n_agents))
    utilization = np.zeros((trials, len(cluster.resources)))
    grants = 0
    for t in tqdm(range(trials), desc=f"{chosen.title} fill", disable=not progress, leave=False):
        state = AllocationState(cluster, mode)
        rng = np.random.default_rng([seed, t])
        grants += len(progressive_fill(state, chosen.criterion(), selection, rng, ties))
        runs[t] = state.tasks
        utilization[t] = state.utilization()
    if with_optimum is None:
        with_optimum = int(cluster.eligible.sum()) <= DEFAULT_MAX_PAIRS
    notes = []
    if mode is Mode.OBLIVIOUS and (chosen.criterion.needs_demand or selection is Selection.BESTFIT):
        notes.append(
            f"{chosen.title} needs d_n; in oblivious mode it uses the demand observed from each "
            "framework's granted tasks (none before its first task)"
        )
    return FillSummary(
        cluster=cluster,
        scheduler=chosen.name,
        selection=selection,
        mode=mode,
        ties=ties,
        trials=trials,
        seed=seed,
        tasks_mean=runs.mean(axis=0),
        tasks_std=runs.std(axis=0, ddof=1) if trials > 1 else np.zeros_like(runs[0]),
        totals=runs.sum(axis=(1, 2)),
        utilization=utilization.mean(axis=0),
        grants=grants / trials,
        optimum=optimum(cluster) if with_optimum else None,
        notes=notes,
    )
