"""Paper 002 Figs. 1-5 style plots: allocated CPU % and memory % over time per run."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from allocator.sim.series import SampledSeries


def plot_runs(
    runs: Sequence[tuple[str, SampledSeries]], path: str | Path, title: str = ""
) -> None:
    """One panel per resource (cpus, mem); one step line per labelled run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    resources = runs[0][1].resources if runs else ("cpus", "mem")
    shown = [r for r in ("cpus", "mem") if r in resources] or list(resources[:2])
    fig, axes = plt.subplots(len(shown), 1, figsize=(11, 3.2 * len(shown)), sharex=True)
    axes = np.atleast_1d(axes)
    for label, series in runs:
        times = np.array(series.times)
        values = np.array(series.allocated) * 100
        for ax, resource in zip(axes, shown, strict=True):
            column = resources.index(resource)
            ax.step(times, values[:, column], where="post", label=label, linewidth=1)
    for ax, resource in zip(axes, shown, strict=True):
        ax.set_ylabel(f"allocated {resource} %")
        ax.set_ylim(0, 105)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("time (s)")
    # Outside the data: with --compare there are a dozen runs.
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, frameon=False)
    if title:
        axes[0].set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
