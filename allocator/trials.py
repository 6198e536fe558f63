"""Repeated static fills of one scenario: means, spreads and the bound they are measured by."""

from __future__ import annotations

import math
import os
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm import tqdm

from allocator import native_fill
from allocator.errors import FairbrokerError
from allocator.filling import progressive_fill
from allocator.model import Cluster
from allocator.optimal import DEFAULT_MAX_PAIRS, Optimum, optimum
from allocator.policy import Selection, Ties, scheduler
from allocator.policy.levels import Level
from allocator.state import AllocationState, Grant, Mode

#: JSON output carries the x_{n,i} matrix by default up to this many framework-agent pairs.
JSON_MATRIX_PAIRS = 10_000
#: Progress is updated every this many grants (reading the allocation costs O(F R)).
PROGRESS_EVERY = 2_000
#: A fill's progress bar appears after this many seconds (FAIRBROKER_PROGRESS_DELAY).
PROGRESS_DELAY_ENV = "FAIRBROKER_PROGRESS_DELAY"


def _progress_delay() -> float:
    try:
        delay = float(os.environ.get(PROGRESS_DELAY_ENV, "1"))
    except ValueError:
        return 1.0
    return delay if math.isfinite(delay) and delay >= 0 else 1.0


class FillLimitError(FairbrokerError):
    """A fill reached --max-grants before it finished."""


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
    framework_totals: np.ndarray  # (trials, F) tasks of each framework in each trial
    utilization: np.ndarray  # (R,) mean over trials
    grants: float  # mean grants per fill
    optimum: Optimum | None
    optimum_skipped: str | None = None  # why the bound was not solved, if it was not
    notes: list[str] = field(default_factory=list)
    #: Seconds spent filling, all trials together (not reading the scenario, not the bound).
    fill_seconds: float = 0.0

    def _per_pair(self, values: np.ndarray, rows: np.ndarray, cols: np.ndarray) -> dict:
        c = self.cluster
        out: dict[str, dict[str, float]] = {c.framework_names[n]: {} for n in range(c.n_frameworks)}
        picked = np.round(values[rows, cols], 6).tolist()
        for n, i, v in zip(rows.tolist(), cols.tolist(), picked, strict=True):
            out[c.framework_names[n]][c.agent_names[i]] = v
        return out

    def matrix_json(self) -> dict[str, Any]:
        """x_{n,i} mean and sd over trials, sparse: pairs where no trial placed a task are
        left out (a framework with no task anywhere maps to {})."""
        rows, cols = np.nonzero((self.tasks_mean != 0) | (self.tasks_std != 0))
        return {
            "mean": self._per_pair(self.tasks_mean, rows, cols),
            "std": self._per_pair(self.tasks_std, rows, cols),
        }

    def framework_summary(self) -> list[dict[str, Any]]:
        """Per framework: mean tasks (sd over trials), agents used in any trial, and the
        dominant share of its mean allocation (max_r x_n d_{n,r} / C_r)."""
        c = self.cluster
        tasks = self.framework_totals.mean(axis=0)
        sd = self.framework_totals.std(axis=0, ddof=1) if self.trials > 1 else np.zeros_like(tasks)
        used = (self.tasks_mean > 0).sum(axis=1)
        total = np.where(c.total > 0, c.total, np.inf)
        share = (tasks[:, None] * np.nan_to_num(c.demand) / total).max(axis=1, initial=0.0)
        return [
            {"name": name, "tasks": round(float(tasks[n]), 6), "tasks_std": round(float(sd[n]), 6),
             "agents_used": int(used[n]), "dominant_share": round(float(share[n]), 6)}
            for n, name in enumerate(c.framework_names)
        ]  # fmt: skip

    def to_json(self, matrix: bool | None = None) -> dict[str, Any]:
        """`matrix`: include x_{n,i} (`tasks`); default when at most JSON_MATRIX_PAIRS pairs."""
        std = float(self.totals.std(ddof=1)) if self.trials > 1 else 0.0
        if matrix is None:
            matrix = self.cluster.n_frameworks * self.cluster.n_agents <= JSON_MATRIX_PAIRS
        out: dict[str, Any] = {
            "scheduler": self.scheduler,
            "selection": str(self.selection),
            "mode": str(self.mode),
            "ties": str(self.ties),
            "trials": self.trials,
            "seed": self.seed,
            "tasks": self.matrix_json() if matrix else None,
            "total": {"mean": round(float(self.totals.mean()), 6), "std": round(std, 6)},
            "optimum": None,
            "utilization": {
                r: round(float(u), 6)
                for r, u in zip(self.cluster.resources, self.utilization, strict=True)
            },
            "grants": round(self.grants, 3),
            "fill_seconds": round(self.fill_seconds, 6),
            "frameworks": self.framework_summary(),
            "agents": self.cluster.n_agents,
        }
        if self.optimum is not None:
            out["optimum"] = {"tasks": self.optimum.tasks, "lp_tasks": self.optimum.lp_tasks}
        notes = list(self.notes)
        if not matrix:
            notes.append("tasks (the x matrix) left out; use --matrix")
        if self.optimum_skipped:
            notes.append(f"optimum: {self.optimum_skipped}")
        if notes:
            out["notes"] = notes
        return out


class _FillProgress:
    """A progress bar for one long fill: the share of the most allocated resource, which is
    what ends a fill, so tqdm's remaining-time estimate follows it. Shown after 1 s (or
    $FAIRBROKER_PROGRESS_DELAY seconds)."""

    def __init__(self, state: AllocationState, desc: str, enabled: bool) -> None:
        self.state = state
        self.grants = 0
        self.total = np.where(state.cluster.total > 0, state.cluster.total, np.inf)
        self.bar = tqdm(total=1000, desc=desc, disable=not enabled, leave=False,
                        delay=_progress_delay(), file=sys.stderr,
                        bar_format="{desc}: {percentage:3.0f}% of the bottleneck resource "
                        "|{bar}| [{elapsed}<{remaining}]{postfix}")  # fmt: skip

    def __call__(self, grant: Grant) -> None:
        self.grants += 1
        if self.grants % PROGRESS_EVERY == 0:
            self.show()

    def show(self) -> None:
        if not self.bar.disable:
            filled = float((self.state.alloc.sum(axis=0) / self.total).max())
            self.bar.update(max(0, int(filled * 1000) - self.bar.n))
            self.bar.set_postfix_str(f"{self.grants:,} grants", refresh=False)

    def at(self, grants: int) -> None:
        """Progress from a fill that counts its own grants (the native fill)."""
        self.grants = grants
        self.show()

    def close(self) -> None:
        self.bar.close()


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
    max_grants: int | None = None,
    params: Mapping[str, object] | None = None,
) -> FillSummary:
    """Fill `trials` fresh copies of the cluster; trial t draws from the seed sequence (seed, t).

    The optimum is solved when `with_optimum` is true, or by default when the instance has at
    most DEFAULT_MAX_PAIRS framework-agent pairs. A fill that reaches `max_grants` raises
    FillLimitError. `params`: the criteria's and selections' parameters by name
    (`EngineConfig.policy_params()`: FUGA's K and lambda). Memory is O(F A) whatever the
    number of trials: per-pair sums and sums of squares (exact for task counts) stand in for
    the trials' matrices.
    """
    if trials < 1:
        raise ValueError("trials must be at least 1")
    chosen = scheduler(scheduler_name)
    selection = Selection(selection or chosen.default_selection)
    mode, ties = Mode(mode), Ties(ties)
    cluster.check_runnable()
    n_f, n_a = cluster.n_frameworks, cluster.n_agents
    tasks_sum = np.zeros((n_f, n_a))
    tasks_sq = np.zeros((n_f, n_a)) if trials > 1 else None
    framework_totals = np.zeros((trials, n_f))
    utilization = np.zeros((trials, len(cluster.resources)))
    grants = 0
    fill_seconds = 0.0
    kernels_loaded = False
    for t in tqdm(range(trials), desc=f"{chosen.title} fill", disable=not progress or trials == 1,
                  leave=False, file=sys.stderr):  # fmt: skip
        state = AllocationState(cluster, mode)
        rng = np.random.default_rng([seed, t])
        bar = _FillProgress(state, f"{chosen.title} fill", progress)
        try:
            # One grant past the limit tells a fill that needs more than max_grants from
            # one that finishes in exactly max_grants (which is not stopped).
            limit = None if max_grants is None else max_grants + 1
            criterion = chosen.criterion(params)
            native = native_fill.applies(state, criterion, selection, ties, Level.FRAMEWORK,
                                         agent_pass=False, single_offer=False)  # fmt: skip
            if native and not kernels_loaded:  # fill_seconds times the fill, not the loading
                native_fill.load_kernels(criterion, selection)
                kernels_loaded = True
            started = time.perf_counter()
            made = native_fill.fill(state, criterion, selection, rng, limit) if native else None
            if made is not None:
                bar.at(len(made[0]))
            else:  # (also where the kernels cannot decide: they left state and rng untouched)
                progressive_fill(state, criterion, selection, rng, ties, max_grants=limit,
                                 on_grant=bar, keep=False, params=params)  # fmt: skip
            fill_seconds += time.perf_counter() - started
        finally:
            bar.close()
        if max_grants is not None and bar.grants > max_grants:
            raise FillLimitError(
                f"--max-grants: the fill was stopped after {max_grants:,} grants and was not "
                "finished; check that demand and capacity use the same units, or raise it"
            )
        grants += bar.grants
        tasks_sum += state.tasks
        if tasks_sq is not None:
            tasks_sq += np.square(state.tasks, dtype=float)
        framework_totals[t] = state.tasks.sum(axis=1)
        utilization[t] = state.utilization()
    totals = framework_totals.sum(axis=1)
    tasks_mean = tasks_sum / trials
    if tasks_sq is None:
        tasks_std = np.zeros((n_f, n_a))
    else:
        tasks_sq -= tasks_sum * tasks_mean  # sum of squared deviations
        tasks_std = np.sqrt(np.maximum(tasks_sq, 0.0) / (trials - 1), out=tasks_sq)
    pairs = int(cluster.eligible.sum())
    skipped = None
    if with_optimum is None:
        with_optimum = pairs <= DEFAULT_MAX_PAIRS
        if not with_optimum:
            skipped = f"skipped ({pairs:,} pairs > {DEFAULT_MAX_PAIRS:,}; use --optimum)"
    elif not with_optimum:
        skipped = "skipped (--no-optimum)"
    notes = []
    needs_demand = chosen.criterion(params).needs_demand or selection is Selection.BESTFIT
    if mode is Mode.OBLIVIOUS and needs_demand:
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
        tasks_mean=tasks_mean,
        tasks_std=tasks_std,
        totals=totals,
        framework_totals=framework_totals,
        utilization=utilization.mean(axis=0),
        grants=grants / trials,
        optimum=optimum(cluster) if with_optimum else None,
        optimum_skipped=skipped,
        notes=notes,
        fill_seconds=fill_seconds,
    )
