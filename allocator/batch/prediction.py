"""After a live batch: the simulator's prediction for the same batch under every scheduler and
mode (the scenario's calibrated job models), beside what the live run measured."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from allocator.engine_config import EngineConfig
from allocator.scenarios.batch import BatchSpec
from allocator.sim.stats import estimate
from allocator.sim.whatif import Report, run_whatif

SEEDS = 3


def predict(spec: BatchSpec, engine: EngineConfig, seeds: int = SEEDS) -> Report:
    """Every scheduler x mode, the rest of the engine as the live run's `engine`."""
    from allocator.policy import COMPARED_SCHEDULERS
    from allocator.state import Mode

    return run_whatif(spec, COMPARED_SCHEDULERS, [str(m) for m in Mode], seeds, engine)


def render(report: Report, live: dict) -> str:
    """The prediction table with the live run's row beside its own configuration."""
    groups = list(report.configs[0].jct_mean)
    ran = (live.get("scheduler"), live.get("mode"))
    resources = [r for r in ("cpus", "mem") if r in report.resources]
    lines = [
        f"simulator's prediction for this batch ({report.seeds} seeds, the scenario's "
        "calibrated job models; mean +- 95 % interval; allocated: time-averaged):",
        f"{'scheduler':<10}{'mode':<15}{'makespan s':>16}"
        + "".join(f"{g + ' jct s':>18}" for g in groups)
        + "".join(f"{r + ' %':>8}" for r in resources),
    ]
    for config in report.ranked():
        cells = "".join(f"{estimate(config.jct_mean[g]).fmt(1):>18}" for g in groups)
        cells += "".join(f"{np.mean(config.allocated[r]) * 100:>8.1f}" for r in resources)
        lines.append(f"{config.scheduler:<10}{config.mode:<15}"
                     f"{estimate(config.makespan).fmt(1):>16}{cells}")  # fmt: skip
        if (config.scheduler, config.mode) == ran:
            by_group = live.get("jct_by_group_s") or {}
            allocated = live.get("allocated") or {}
            live_cells = "".join(
                f"{_value(by_group.get(g, {}).get('mean')):>18}" for g in groups
            )
            live_cells += "".join(
                f"{_value(None if r not in allocated else allocated[r] * 100):>8}"
                for r in resources
            )
            lines.append(f"{'  live':<25}{_value(live.get('makespan_s')):>16}{live_cells}")
    lines.append(report.recommendation().replace("Recommendation:", "Predicted best:", 1))
    return "\n".join(lines)


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def plot(report: Report, live: dict, path: str | Path) -> None:
    """Predicted makespan per scheduler and mode with intervals; the live run as a marker."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    schedulers = list(dict.fromkeys(c.scheduler for c in report.configs))
    modes = list(dict.fromkeys(c.mode for c in report.configs))
    by = {(c.scheduler, c.mode): c for c in report.configs}
    fig, ax = plt.subplots(figsize=(7.5, 4))
    width = 0.8 / len(modes)
    x = np.arange(len(schedulers))
    for k, mode in enumerate(modes):
        offset = (k - (len(modes) - 1) / 2) * width
        stats = [estimate(by[(s, mode)].makespan) for s in schedulers]
        ax.bar(x + offset, [e.mean for e in stats], width, yerr=[e.half for e in stats],
               capsize=3, label=f"predicted, {mode}")  # fmt: skip
        if live.get("mode") == mode and live.get("scheduler") in schedulers:
            at = schedulers.index(live["scheduler"])
            ax.plot(x[at] + offset, live["makespan_s"], marker="*", markersize=14,
                    color="black", linestyle="none",
                    label=f"live, {live['scheduler']}/{mode}")  # fmt: skip
    ax.set_xticks(x, schedulers)
    ax.set_ylabel("makespan s")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), frameon=False)
    ax.set_title(f"{report.scenario}: live run and the simulator's prediction "
                 f"({report.seeds} seeds)")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
