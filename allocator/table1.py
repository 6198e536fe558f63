"""Paper 002 Tables I and II (mean and sample sd of x_{n,i} over trials) beside ours."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from allocator.model import Cluster
from allocator.policy import Selection
from allocator.scenarios.static import load_scenario
from allocator.trials import FillSummary, run_trials


def paper_example() -> Cluster:
    """d1 = (5,1), d2 = (1,5); c1 = (100,30), c2 = (30,100) (paper 002 eqs. 11-12)."""
    return load_scenario(Path(__file__).parent / "data" / "paper002-example.yaml")


@dataclass(frozen=True)
class PaperRow:
    label: str
    scheduler: str
    selection: Selection
    mean: tuple[float, float, float, float]  # x11, x12, x21, x22 (framework, server)
    total: float
    sd: tuple[float, float, float, float] | None


PAPER_ROWS = (
    PaperRow(
        "DRF", "drf", Selection.RANDOM, (6.55, 4.69, 4.69, 6.55), 22.48, (2.31, 0.46, 0.46, 2.31)
    ),
    PaperRow("TSF", "tsf", Selection.RANDOM, (6.5, 4.7, 4.7, 6.5), 22.4, (2.29, 0.46, 0.46, 2.29)),
    PaperRow(
        "RRR-PS-DSF",
        "psdsf",
        Selection.RANDOM,
        (19.44, 1.15, 1.07, 19.42),
        41.08,
        (0.59, 0.99, 1.0, 0.49),
    ),
    PaperRow("BF-DRF", "bfdrf", Selection.BESTFIT, (20, 2, 0, 19), 41, None),
    PaperRow("PS-DSF (joint)", "psdsf", Selection.JOINT, (19, 0, 2, 20), 41, None),
    PaperRow("rPS-DSF", "rpsdsf", Selection.RRR, (19, 2, 2, 19), 42, None),
)


@dataclass(frozen=True)
class ComparedRow:
    paper: PaperRow
    ours: FillSummary

    def to_json(self) -> dict[str, Any]:
        mean = self.ours.tasks_mean.ravel()
        sd = self.ours.tasks_std.ravel()
        return {
            "row": self.paper.label,
            "scheduler": self.paper.scheduler,
            "selection": str(self.paper.selection),
            "paper": {
                "mean": list(self.paper.mean),
                "total": self.paper.total,
                "sd": self.paper.sd,
            },
            "ours": {
                "mean": [round(float(v), 4) for v in mean],
                "total": round(float(self.ours.totals.mean()), 4),
                "sd": [round(float(v), 4) for v in sd],
            },
        }


def compare(
    trials: int = 2000, seed: int = 0, ties: str = "random", progress: bool = False
) -> list[ComparedRow]:
    cluster = paper_example()
    return [
        ComparedRow(
            row,
            run_trials(
                cluster,
                row.scheduler,
                row.selection,
                ties=ties,
                trials=trials,
                seed=seed,
                with_optimum=False,
                progress=progress,
            ),
        )
        for row in PAPER_ROWS
    ]


def render(rows: list[ComparedRow]) -> str:
    head = f"{'row':<16}{'':<9}{'x11':>8}{'x12':>8}{'x21':>8}{'x22':>8}{'total':>9}"
    lines = ["Table I: mean tasks x_{n,i} (framework n, server i)", head, "-" * len(head)]

    def line(
        label: str, kind: str, values: np.ndarray | tuple[float, ...], total: float | None
    ) -> str:
        cells = "".join(f"{v:8.2f}" for v in values)
        tail = f"{total:9.2f}" if total is not None else ""
        return f"{label:<16}{kind:<9}{cells}{tail}"

    for row in rows:
        ours = row.ours.tasks_mean.ravel()
        total = float(row.ours.totals.mean())
        lines.append(line(row.paper.label, "paper", row.paper.mean, row.paper.total))
        lines.append(line("", "ours", ours, total))
        diff = ours - np.array(row.paper.mean)
        lines.append(line("", "diff", diff, total - row.paper.total).replace(" -0.00", "  0.00"))
    lines += [
        "",
        "Table II: sample standard deviation of x_{n,i}",
        head[:-9],
        "-" * (len(head) - 9),
    ]
    for row in rows:
        if row.paper.sd is None:
            continue
        ours = row.ours.tasks_std.ravel()
        lines.append(line(row.paper.label, "paper", row.paper.sd, None))
        lines.append(line("", "ours", ours, None))
        lines.append(line("", "diff", ours - np.array(row.paper.sd), None))
    first = rows[0].ours
    lines.append("")
    lines.append(
        f"{first.trials} trials per row, seed {first.seed}, ties {first.ties}; "
        "DRF/TSF/RRR-PS-DSF use a uniformly random agent per step (see README)."
    )
    return "\n".join(lines)
