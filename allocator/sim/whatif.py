"""What-if report: every scheduler x mode on the same paired seeds of one batch scenario.

For each configuration: makespan, mean and p95 job completion time per group, time-averaged
allocation and fairness, each as a mean over seeds with a 95 % t-interval; the ranking by
makespan, with each configuration compared seed by seed against the fastest (a difference is
marked significant when its whole interval lies beyond the minimum meaningful difference,
MIN_DIFFERENCE of the makespan: a gain of 0.04 s on a 132 s batch is noise to an operator
however many seeds confirm it); and one recommendation line against DRF, the criterion of
Mesos's default allocator, which recommends a switch only on such a difference. Figures:
small multiples of the allocation over time (one panel per scheduler, both modes, rolling
means, the first seed's runs) and a bar chart with the intervals over every seed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from allocator.engine_config import EngineConfig
from allocator.scenarios.batch import BatchSpec
from allocator.sim.batch_sim import BatchSimulator, SimResult
from allocator.sim.plot import shown_resources, style_panel
from allocator.sim.stats import Estimate, Paired, estimate, paired

#: The baseline a recommendation is measured against: the criterion of Mesos's default
#: (hierarchical DRF) allocator, not fairbroker's default scheduler (EngineConfig's).
MESOS_DEFAULT_CRITERION = "drf"
#: The smallest makespan difference worth acting on, as a fraction of the makespan compared with.
MIN_DIFFERENCE = 0.01


@dataclass
class Config:
    scheduler: str
    mode: str
    makespan: list[float] = field(default_factory=list)
    jct_mean: dict[str, list[float]] = field(default_factory=dict)
    jct_p95: dict[str, list[float]] = field(default_factory=dict)
    allocated: dict[str, list[float]] = field(default_factory=dict)
    fairness: list[float] = field(default_factory=list)
    reclaimed: list[float] = field(default_factory=list)  # with reclaim: executors per seed
    work_lost: list[float] = field(default_factory=list)  # and executor-seconds lost
    series: tuple[np.ndarray, np.ndarray] | None = None  # first seed: times, (T, R) fractions

    @property
    def label(self) -> str:
        return f"{self.scheduler}/{self.mode}"

    def add(self, result: SimResult) -> None:
        self.makespan.append(result.makespan_s)
        groups: dict[str, list[float]] = {}
        for job in result.jobs:
            groups.setdefault(job.group, []).append(job.finished - job.submitted)
        for group, values in groups.items():
            self.jct_mean.setdefault(group, []).append(float(np.mean(values)))
            self.jct_p95.setdefault(group, []).append(float(np.percentile(values, 95)))
        for r, v in result.series.time_average().items():
            self.allocated.setdefault(r, []).append(v)
        self.fairness.append(result.series.mean_fairness())
        if result.reclaims:
            self.reclaimed.append(float(sum(j.reclaimed for j in result.jobs)))
            self.work_lost.append(sum(j.work_lost for j in result.jobs))
        if self.series is None:
            self.series = (np.array(result.series.times), np.array(result.series.allocated))


@dataclass
class Report:
    scenario: str
    seeds: int
    first_seed: int
    level: str
    trigger: str
    resources: tuple[str, ...]
    configs: list[Config]

    def ranked(self) -> list[Config]:
        return sorted(self.configs, key=lambda c: float(np.mean(c.makespan)))

    def against_best(self) -> list[tuple[Config, Paired | None]]:
        """Each configuration, fastest first, with its paired difference from the fastest."""
        ranked = self.ranked()
        best = ranked[0]
        return [(c, None if c is best else paired(c.makespan, best.makespan)) for c in ranked]

    def baseline(self, mode: str) -> Config | None:
        baseline = MESOS_DEFAULT_CRITERION
        return next((c for c in self.configs if c.scheduler == baseline and c.mode == mode), None)

    def recommendation(self) -> str:
        best = self.ranked()[0]
        base = self.baseline(best.mode)
        tied = [
            c.label for c, p in self.against_best()[1:]
            if p is not None and not p.later(MIN_DIFFERENCE)
        ]  # fmt: skip
        also = f"; not distinguishable from {', '.join(tied)}" if tied else ""
        if (base is None or base is best) and len(tied) == len(self.configs) - 1:
            return (
                f"Recommendation: none: no configuration is {MIN_DIFFERENCE:.0%} or more "
                f"faster than another ({best.label} {estimate(best.makespan).fmt()} s)."
            )
        if base is None or base is best:
            return (
                f"Recommendation: {best.label} has the shortest makespan "
                f"({estimate(best.makespan).fmt()} s){also}."
            )
        p = paired(best.makespan, base.makespan)
        rel = p.relative
        if not p.sooner(MIN_DIFFERENCE):
            return (
                f"Recommendation: keep {base.label} (DRF, the Mesos default's criterion): the "
                f"fastest, {best.label}, is {-rel.mean:.1%} +- {rel.half:.1%} shorter, not "
                f"shown to be {MIN_DIFFERENCE:.0%} or more at {self.seeds} seeds."
            )
        return (
            f"Recommendation: {best.label}: {-rel.mean:.1%} +- {rel.half:.1%} shorter makespan "
            f"than DRF ({base.mode}), the Mesos default's criterion; faster in {p.wins} of "
            f"{p.n} seeds{also}."
        )

    # ---- text ---------------------------------------------------------------------------
    def render(self) -> str:
        groups = list(self.configs[0].jct_mean)
        head = ["rank", "scheduler", "mode", "makespan s", "vs fastest"]
        head += [f"{g} JCT mean s" for g in groups] + [f"{g} JCT p95 s" for g in groups]
        head += [f"{r} %" for r in self.resources] + ["fairness"]
        reclaims = bool(self.configs[0].reclaimed)
        head += ["reclaimed", "work lost s"] if reclaims else []
        rows = []
        for rank, (c, p) in enumerate(self.against_best(), start=1):
            if p is None:
                versus = "fastest"
            else:
                mark = "*" if p.later(MIN_DIFFERENCE) else "~"
                versus = f"{p.diff.mean:+.0f} +- {p.diff.half:.0f} {mark}"
            row = [str(rank), c.scheduler, c.mode, estimate(c.makespan).fmt(), versus]
            row += [estimate(c.jct_mean[g]).fmt(1) for g in groups]
            row += [estimate(c.jct_p95[g]).fmt(1) for g in groups]
            row += [_pct(estimate(c.allocated[r])) for r in self.resources]
            row.append(estimate(c.fairness).fmt(3))
            if reclaims:
                row += [estimate(c.reclaimed).fmt(1), estimate(c.work_lost).fmt(1)]
            rows.append(row)
        lines = [
            f"{self.scenario}: {len(self.configs)} configurations x {self.seed_range()}, "
            f"level {self.level}, trigger {self.trigger}; mean +- 95 % interval",
            "",
            "| " + " | ".join(head) + " |",
            "|" + "---|" * len(head),
            *("| " + " | ".join(row) + " |" for row in rows),
            "",
            "vs fastest: the paired makespan difference from rank 1; * significant (the whole "
            f"interval beyond {MIN_DIFFERENCE:.0%} of the fastest's makespan), ~ not shown to "
            "be at these seeds.",
            "",
            self.recommendation(),
        ]
        return "\n".join(lines)

    def to_json(self) -> dict[str, object]:
        def est(values: Sequence[float]) -> dict[str, float]:
            e = estimate(values)
            return {"mean": round(e.mean, 4), "ci95": round(e.half, 4)}

        out = []
        for rank, (c, p) in enumerate(self.against_best(), start=1):
            out.append({
                "rank": rank,
                "scheduler": c.scheduler,
                "mode": c.mode,
                "makespan_s": est(c.makespan),
                "vs_fastest_s": None if p is None else {
                    **est(np.array(c.makespan) - np.array(self.ranked()[0].makespan)),
                    "significant": p.later(MIN_DIFFERENCE),
                },
                "jct_mean_s": {g: est(v) for g, v in c.jct_mean.items()},
                "jct_p95_s": {g: est(v) for g, v in c.jct_p95.items()},
                "allocated": {r: est(v) for r, v in c.allocated.items()},
                "fairness": est(c.fairness),
            } | ({"reclaimed": est(c.reclaimed), "work_lost_s": est(c.work_lost)}
                 if c.reclaimed else {}))  # fmt: skip
        return {
            "scenario": self.scenario,
            "seeds": self.seeds,
            "first_seed": self.first_seed,
            "min_difference": MIN_DIFFERENCE,
            "level": self.level,
            "trigger": self.trigger,
            "configurations": out,
            "recommendation": self.recommendation(),
        }

    # ---- figures ------------------------------------------------------------------------
    def title(self, one_seed: bool = False) -> str:
        """The figures' title; `one_seed`: the figure shows the first seed's run only."""
        seeds = self.seed_range()
        shown = f"seed {self.first_seed} of {seeds}" if one_seed else seeds
        return f"{self.scenario}: {shown}, level {self.level}, trigger {self.trigger}"

    def seed_range(self) -> str:
        last = self.first_seed + self.seeds - 1
        return f"{self.seeds} paired seeds ({self.first_seed}..{last})"

    def plot(self, path: str | Path) -> list[Path]:
        """The allocation small multiples at `path`, the summary bars beside it
        (NAME-summary.SUFFIX); returns both paths."""
        path = Path(path)
        summary = path.with_name(f"{path.stem}-summary{path.suffix}")
        _plot_multiples(self, path)
        _plot_summary(self, summary)
        return [path, summary]


def _pct(e: Estimate) -> str:
    return f"{e.mean * 100:.1f} +- {e.half * 100:.1f}"


def run_whatif(
    batch: BatchSpec,
    schedulers: Sequence[str],
    modes: Sequence[str],
    seeds: int,
    base: EngineConfig,
    progress: Callable[[str, int], None] | None = None,
) -> Report:
    """Every scheduler x mode at seeds base.seed .. base.seed + seeds - 1, the rest of the
    engine as in `base`."""
    configs = []
    for name in schedulers:
        for mode in modes:
            config = Config(name, mode)
            for seed in range(base.seed, base.seed + seeds):
                engine = base.replace(scheduler=name, mode=mode, seed=seed)
                config.add(BatchSimulator(batch, engine).run())
                if progress is not None:
                    progress(config.label, seed)
            configs.append(config)
    level, trigger = str(base.level), str(base.trigger)
    return Report(batch.name, seeds, base.seed, level, trigger, batch.resource_names(), configs)


# ---- plotting helpers -----------------------------------------------------------------------
def rolling(times: np.ndarray, values: np.ndarray, window: float, step: float):
    """A step series (value held from each time to the next) as a trailing time-weighted
    rolling mean sampled every `step` seconds."""
    grid = np.arange(0.0, times[-1] + step, step)
    held = values[np.clip(np.searchsorted(times, grid, side="right") - 1, 0, None)]
    width = max(1, round(window / step))
    kernel = np.ones(width) / width
    padded = np.concatenate([np.repeat(held[:1], width - 1, axis=0), held])
    smooth = np.column_stack(
        [np.convolve(padded[:, k], kernel, mode="valid") for k in range(held.shape[1])]
    )
    return grid, smooth


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _plot_multiples(report: Report, path: Path) -> None:
    plt = _pyplot()
    schedulers = list(dict.fromkeys(c.scheduler for c in report.configs))
    modes = list(dict.fromkeys(c.mode for c in report.configs))
    shown = shown_resources(report.resources)
    end = max(float(c.series[0][-1]) for c in report.configs if c.series is not None)
    window, step = max(10.0, end / 40), max(1.0, end / 2000)
    fig, axes = plt.subplots(
        len(schedulers), len(shown), figsize=(5.2 * len(shown), 1.9 * len(schedulers) + 1.2),
        sharex=True, sharey=True, squeeze=False,
    )  # fmt: skip
    colours = dict(zip(modes, ("tab:blue", "tab:orange", "tab:green"), strict=False))
    for row, name in enumerate(schedulers):
        for config in (c for c in report.configs if c.scheduler == name):
            if config.series is None:
                continue
            grid, smooth = rolling(*config.series, window, step)
            for col, resource in enumerate(shown):
                k = report.resources.index(resource)
                axes[row, col].plot(grid, smooth[:, k] * 100, color=colours[config.mode],
                                    linewidth=1.2, label=config.mode)  # fmt: skip
        for col, resource in enumerate(shown):
            style_panel(axes[row, col], resource if row == 0 else None,
                        f"{name}\nallocated %" if col == 0 else None)  # fmt: skip
    for ax in axes[-1]:
        ax.set_xlabel("time (s)")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(modes), frameon=False,
               title=f"rolling mean over {window:.0f} s")  # fmt: skip
    fig.suptitle(report.title(one_seed=True))
    fig.tight_layout(rect=(0, 0.06, 1, 0.97))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def bar_axis(ends: list[float]) -> tuple[float, float, str]:
    """Y limits for bars whose interval ends are `ends`, and a note when the axis does not
    start at 0: a few percent between configurations would vanish on a full axis, so it is
    cut to the intervals, and the panel says so."""
    low, high = min(ends), max(ends)
    pad = 0.1 * (high - low) + 1e-9
    bottom = max(0.0, low - pad)
    note = f"axis cut: starts at {bottom:.4g}, not 0" if bottom > 0 else ""
    return bottom, high + pad, note


def _plot_summary(report: Report, path: Path) -> None:
    plt = _pyplot()
    schedulers = list(dict.fromkeys(c.scheduler for c in report.configs))
    modes = list(dict.fromkeys(c.mode for c in report.configs))
    by = {(c.scheduler, c.mode): c for c in report.configs}
    panels = [("makespan s", lambda c: c.makespan)]
    groups = list(report.configs[0].jct_mean)
    panels += [(f"{g} JCT mean s", lambda c, g=g: c.jct_mean[g]) for g in groups]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.8), squeeze=False)
    width = 0.8 / len(modes)
    x = np.arange(len(schedulers))
    for ax, (label, values) in zip(axes[0], panels, strict=True):
        ends = []
        for k, mode in enumerate(modes):
            stats = [estimate(values(by[(s, mode)])) if (s, mode) in by else None
                     for s in schedulers]  # fmt: skip
            means = [e.mean if e else np.nan for e in stats]
            halves = [e.half if e else 0.0 for e in stats]
            ax.bar(x + (k - (len(modes) - 1) / 2) * width, means, width, yerr=halves,
                   capsize=3, label=mode)  # fmt: skip
            ends += [v for e in stats if e for v in (e.low, e.high)]
        bottom, top, note = bar_axis(ends)
        ax.set_ylim(bottom, top)
        ax.set_xticks(x, schedulers)
        ax.set_title(label if not note else f"{label}\n({note})")
        ax.grid(axis="y", alpha=0.3)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=len(modes), frameon=False,
               title="mean over seeds, bars: 95 % interval")  # fmt: skip
    fig.suptitle(report.title())
    fig.tight_layout(rect=(0, 0.14, 1, 0.95))
    fig.savefig(path, dpi=120)
    plt.close(fig)
