"""The simulator's allocation plot: readable with every --compare row."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from matplotlib.colors import to_hex

from allocator.sim.plot import plot_runs, runs_figure

SCHEDULERS = ("drf", "tsf", "psdsf", "rpsdsf", "bfdrf", "fuga")


@dataclass
class Series:
    level: float
    resources: tuple[str, ...] = ("cpus", "mem")
    times: list[float] = field(default_factory=lambda: [0.0, 10.0, 20.0])
    allocated: list[np.ndarray] = field(default_factory=list)
    fairness: list[float] = field(default_factory=lambda: [1.0, 1.0, 1.0])

    def __post_init__(self) -> None:
        self.allocated = [np.array([self.level, self.level / 2])] * 3


def compare_runs() -> list[tuple[str, Series]]:
    """The 15 rows of `sim --compare` on a batch: 6 schedulers x 2 modes, 3 admission rows."""
    runs = [
        (f"{s}/{m}", Series(0.1 * k + 0.05 * j))
        for k, s in enumerate(SCHEDULERS)
        for j, m in enumerate(("characterized", "oblivious"))
    ]
    runs += [(f"rpsdsf/characterized/{a}", Series(0.9)) for a in ("fcfs", "sjf", "wfq")]
    return runs


def panel_lines(ax) -> list[tuple[str, str]]:
    return [(line.get_label(), to_hex(line.get_color())) for line in ax.get_lines()]


def test_compare_plot_has_one_row_per_scheduler_and_distinct_colours():
    fig = runs_figure(compare_runs(), "spark-small")
    axes = np.array(fig.axes).reshape(len(SCHEDULERS), 2)
    assert [ax.get_ylabel() for ax in axes[:, 0]] == list(SCHEDULERS)
    for ax in axes.flat:
        colours = [colour for _, colour in panel_lines(ax)]
        assert len(colours) == len(set(colours)), panel_lines(ax)
    assert [label for label, _ in panel_lines(axes[3, 0])] == [
        "characterized", "oblivious", "characterized/fcfs", "characterized/sjf",
        "characterized/wfq",
    ]  # fmt: skip
    assert len(panel_lines(axes[0, 1])) == 2


def test_few_runs_share_one_row_with_their_full_labels(tmp_path):
    runs = [("pi", Series(0.3)), ("wc", Series(0.4)), ("all", Series(0.7))]
    fig = runs_figure(runs)
    assert len(fig.axes) == 2
    assert [label for label, _ in panel_lines(fig.axes[0])] == ["pi", "wc", "all"]
    path = tmp_path / "live.png"
    plot_runs(runs, path)
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
