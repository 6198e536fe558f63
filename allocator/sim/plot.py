"""Paper 002 Figs. 1-5 style plots: allocated CPU % and memory % over time per run.

A few runs share one panel per resource. Many runs (`sim --compare`: every scheduler x mode
and the admission rows) become small multiples, one row of panels per scheduler (the label's
first `/` part), so that no panel holds more lines than a palette has distinct colours."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from allocator.sim.series import SampledSeries

#: Up to this many runs share one row of panels.
MAX_RUNS_PER_PANEL = 6


def _palette(n: int) -> list[Any]:
    import matplotlib

    name = "tab10" if n <= 10 else "tab20"
    colours = list(matplotlib.colormaps[name].colors)
    if n > len(colours):
        raise ValueError(f"{n} runs in one panel: more than {len(colours)} distinct colours")
    return colours[:n]


def _rows(labels: Sequence[str]) -> dict[str, list[int]]:
    """Run indices per panel row: one row when few, else one per scheduler."""
    if len(labels) <= MAX_RUNS_PER_PANEL:
        return {"": list(range(len(labels)))}
    rows: dict[str, list[int]] = {}
    for k, label in enumerate(labels):
        rows.setdefault(label.split("/", 1)[0], []).append(k)
    return rows


def shown_resources(resources: Sequence[str]) -> list[str]:
    """The resources a panel row shows: cpus and mem, or the first two."""
    return [r for r in ("cpus", "mem") if r in resources] or list(resources[:2])


def style_panel(ax, title: str | None, ylabel: str | None) -> None:
    """An allocation panel: 0-105 %, a light grid, its title on the top row and its label
    in the first column (None: not this panel's)."""
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    if title is not None:
        ax.set_title(title)
    if ylabel is not None:
        ax.set_ylabel(ylabel)


def runs_figure(runs: Sequence[tuple[str, SampledSeries]], title: str = ""):
    """The matplotlib figure of `plot_runs` (returned for callers that inspect it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    resources = runs[0][1].resources if runs else ("cpus", "mem")
    shown = shown_resources(resources)
    rows = _rows([label for label, _ in runs])
    fig, axes = plt.subplots(
        len(rows), len(shown), figsize=(5.5 * len(shown), 2.2 * len(rows) + 1.0),
        sharex=True, sharey=True, squeeze=False,
    )  # fmt: skip
    for row, (group, members) in enumerate(rows.items()):
        colours = _palette(len(members))
        for colour, k in zip(colours, members, strict=True):
            label, series = runs[k]
            times = np.array(series.times)
            values = np.array(series.allocated) * 100
            short = label.split("/", 1)[1] if group and "/" in label else label
            for col, resource in enumerate(shown):
                column = resources.index(resource)
                axes[row, col].step(times, values[:, column], where="post", label=short,
                                    color=colour, linewidth=1)  # fmt: skip
        for col, resource in enumerate(shown):
            style_panel(axes[row, col], f"allocated {resource} %" if row == 0 else None,
                        (group or "%") if col == 0 else None)  # fmt: skip
        axes[row, -1].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                             frameon=False)  # fmt: skip
    for ax in axes[-1]:
        ax.set_xlabel("time (s)")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def plot_runs(
    runs: Sequence[tuple[str, SampledSeries]], path: str | Path, title: str = ""
) -> None:
    """Allocated cpus and mem over time: a panel per resource (and per scheduler when many
    runs), one step line per labelled run, each line of a panel in its own colour."""
    import matplotlib.pyplot as plt

    fig = runs_figure(runs, title)
    fig.savefig(path, dpi=120)
    plt.close(fig)
