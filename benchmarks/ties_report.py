"""What `--ties waste` does: Table I rows and small heterogeneous instances vs the MILP optimum.

python -m benchmarks.ties_report [--trials N]   -> benchmarks/results/ties.md
"""

from __future__ import annotations

from pathlib import Path

import click

from allocator.model import Cluster
from allocator.optimal import optimum
from allocator.scenarios.static import parse_scenario
from allocator.table1 import compare
from allocator.trials import run_trials
from allocator.workloads import google_like_cluster

RESULTS = Path(__file__).resolve().parent / "results"
INSTANCES = [(20, 4, seed) for seed in range(3)] + [(40, 8, seed) for seed in range(3)]

#: Paper 001 Fig. 1 (complementary servers and users) and paper 002's Sec. V cluster with
#: the Pi (2 CPU, 2 GB) and WordCount (1 CPU, 3.5 GB) executors, memory in GB.
NAMED: dict[str, dict] = {
    "paper001-fig1": {
        "agents": [
            {"name": "s1", "resources": {"cpus": 2, "mem": 12}},
            {"name": "s2", "resources": {"cpus": 12, "mem": 2}},
        ],
        "frameworks": [
            {"name": "u1", "demand": {"cpus": 0.2, "mem": 1}},
            {"name": "u2", "demand": {"cpus": 1, "mem": 0.2}},
        ],
    },
    "paper002-sec5": {
        "agents": [
            {"name": f"t{k}{j}", "resources": {"cpus": c, "mem": m}}
            for k, (c, m) in enumerate([(4, 14), (8, 8), (6, 11)], 1)
            for j in "ab"
        ],
        "frameworks": [
            {"name": "pi", "demand": {"cpus": 2, "mem": 2}},
            {"name": "wc", "demand": {"cpus": 1, "mem": 3.5}},
        ],
    },
}


def instances() -> list[tuple[str, Cluster, int]]:
    named = [(name, parse_scenario(data), 0) for name, data in NAMED.items()]
    mixed = [(f"google {a}x{f} s{s}", google_like_cluster(a, f, s), s) for a, f, s in INSTANCES]
    return named + mixed


SCHEDULERS = ("drf", "tsf", "psdsf", "rpsdsf", "bfdrf")


@click.command()
@click.option("--trials", default=200, show_default=True)
def main(trials: int) -> None:
    lines = [
        f"# Tie-breaking: random vs waste ({trials} trials each)",
        "",
        "## Paper 002 Table I instance: mean total tasks (optimum 42)",
        "",
        "| row | random | waste |",
        "|---|---|---|",
    ]
    by_ties = {t: compare(trials, seed=0, ties=t) for t in ("random", "waste")}
    for plain, waste in zip(by_ties["random"], by_ties["waste"], strict=True):
        lines.append(
            f"| {plain.paper.label} | {plain.ours.totals.mean():.2f} | "
            f"{waste.ours.totals.mean():.2f} |"
        )
    lines += [
        "",
        "## Heterogeneous instances: mean total tasks beside the MILP optimum",
        "",
        "| instance | optimum | "
        + " | ".join(f"{s} random | {s} waste" for s in SCHEDULERS)
        + " |",
        "|---|---|" + "---|---|" * len(SCHEDULERS),
    ]
    for label, cluster, seed in instances():
        click.echo(f"instance {label}", err=True)
        best = optimum(cluster).tasks
        cells = []
        for name in SCHEDULERS:
            for ties in ("random", "waste"):
                summary = run_trials(
                    cluster,
                    name,
                    ties=ties,
                    trials=max(1, trials // 4),
                    seed=seed,
                    with_optimum=False,
                )
                cells.append(f"{summary.totals.mean():.1f}")
        lines.append(f"| {label} | {best:.0f} | " + " | ".join(cells) + " |")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "ties.md").write_text("\n".join(lines) + "\n")
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
