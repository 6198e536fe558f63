"""Reclaim in the simulator (issue 22): long applications fill the cluster, small jobs arrive
late (`benchmarks/scenarios/reclaim-late.yaml`); the same seeds without reclaim, with reclaim
(reclaim_after 30 s, grace 30 s) and with reclaim but no grace. Per arm, mean and 95 %
interval over the seeds, and each reclaim arm against no reclaim seed by seed: time from a
late job's arrival to its fair share, Jain's index (time average and a plot over time), the
late jobs' JCT, the long applications' JCT, the makespan, executors reclaimed and work lost.

    python -m benchmarks.bench_reclaim_sim [--seeds 10]

writes benchmarks/results/reclaim_sim.{md,json,png}.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from allocator.engine_config import EngineConfig
from allocator.scenarios.batch import load_batch
from allocator.sim.batch_sim import BatchSimulator, SimResult
from allocator.sim.stats import estimate, paired

ROOT = Path(__file__).resolve().parents[1]
SCENARIO = ROOT / "benchmarks" / "scenarios" / "reclaim-late.yaml"
RESULTS = ROOT / "benchmarks" / "results"
LONG = ("etl", "ml")  # the applications that fill the cluster first; the others arrive late
ARMS = {
    "no reclaim": {},
    "reclaim": {"reclaim_after": 30.0, "reclaim_grace": 30.0},
    "reclaim, no grace": {"reclaim_after": 30.0, "reclaim_grace": 0.0},
}
#: (key, title, digits): the metrics, each one number per run.
METRICS = (
    ("late_to_fair_share_s", "late jobs: arrival to fair share, s", 1),
    ("late_jct_s", "late jobs: mean JCT, s", 1),
    ("long_jct_s", "long applications: mean JCT, s", 1),
    ("jct_s", "all jobs: mean JCT, s", 1),
    ("makespan_s", "makespan, s", 1),
    ("fairness", "Jain's index, time average", 3),
    ("reclaimed", "executors reclaimed", 1),
    ("long_to_long", "of which from one long application to the other", 1),
    ("work_lost_s", "work lost, executor-s", 1),
    ("work_lost_pct", "work lost, % of all work", 2),
)


def measure(simulator: BatchSimulator, result: SimResult) -> dict[str, float]:
    late = [j for j in result.jobs if j.group not in LONG]
    long = [j for j in result.jobs if j.group in LONG]
    work = sum(j.model.work for j in result.jobs)
    lost = sum(j.work_lost for j in result.jobs)
    group = {j.name: j.group for j in result.jobs}
    decisions = simulator.reclaim.decisions if simulator.reclaim is not None else []
    between_long = [d for _, d in decisions if {group[d.victim], group[d.beneficiary]} <= set(LONG)]
    return {
        "late_to_fair_share_s": float(np.mean([j.to_fair_share() for j in late])),
        "late_jct_s": float(np.mean([j.finished - j.submitted for j in late])),
        "long_jct_s": float(np.mean([j.finished - j.submitted for j in long])),
        "jct_s": float(result.jct().mean()),
        "makespan_s": result.makespan_s,
        "fairness": result.series.mean_fairness(),
        "reclaimed": float(sum(j.reclaimed for j in result.jobs)),
        "long_to_long": float(len(between_long)),
        "work_lost_s": lost,
        "work_lost_pct": 100 * lost / work,
    }


def run(seeds: int) -> dict:
    batch = load_batch(SCENARIO)
    per_arm: dict[str, list[dict[str, float]]] = {arm: [] for arm in ARMS}
    series: dict[str, tuple[list[float], list[float]]] = {}
    started = time.perf_counter()
    for arm, knobs in ARMS.items():
        for seed in range(seeds):
            config = EngineConfig(seed=seed, **knobs)
            simulator = BatchSimulator(batch, config, watch_fair_share=True)
            result = simulator.run()
            per_arm[arm].append(measure(simulator, result))
            if seed == 0:
                series[arm] = (list(result.series.times), list(result.series.fairness))
    base = per_arm["no reclaim"]
    summary: dict[str, dict] = {}
    for arm, runs in per_arm.items():
        summary[arm] = {}
        for key, *_ in METRICS:
            values = [r[key] for r in runs]
            e = estimate(values)
            row = {"mean": e.mean, "half": e.half}
            if arm != "no reclaim":
                p = paired(values, [r[key] for r in base])
                row["vs_no_reclaim"] = {"mean": p.diff.mean, "half": p.diff.half}
            summary[arm][key] = row
    return {
        "scenario": str(SCENARIO.relative_to(ROOT)),
        "engine": EngineConfig().to_json() | {"reclaim_min_runtime": 5.0},
        "arms": ARMS,
        "seeds": list(range(seeds)),
        "summary": summary,
        "runs": per_arm,
        "wall_s": round(time.perf_counter() - started, 1),
        "_series": series,
    }


def render(report: dict) -> str:
    arms = list(report["arms"])
    lines = [
        f"| metric ({len(report['seeds'])} paired seeds, mean ± 95 % CI) | "
        + " | ".join(arms)
        + " |",
        "|---|" + "---|" * len(arms),
    ]
    for key, title, digits in METRICS:
        cells = []
        for arm in arms:
            row = report["summary"][arm][key]
            cell = f"{row['mean']:.{digits}f} ± {row['half']:.{digits}f}"
            if "vs_no_reclaim" in row:
                d = row["vs_no_reclaim"]
                cell += f" ({d['mean']:+.{digits}f} ± {d['half']:.{digits}f})"
            cells.append(cell)
        lines.append(f"| {title} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(series: dict[str, tuple[list[float], list[float]]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(8, 3.2))
    for arm, (times, fairness) in series.items():
        axis.step(np.array(times) / 60, fairness, where="post", label=arm, linewidth=1.2)
    axis.set_xlabel("minutes")
    axis.set_ylabel("Jain's index (groups)")
    axis.set_ylim(0, 1.05)
    axis.grid(alpha=0.3)
    axis.legend(loc="lower right", fontsize=8)
    axis.set_title("reclaim-late.yaml, seed 0", fontsize=9)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10)
    args = parser.parse_args()
    report = run(args.seeds)
    series = report.pop("_series")
    RESULTS.mkdir(parents=True, exist_ok=True)
    plot(series, RESULTS / "reclaim_sim.png")
    (RESULTS / "reclaim_sim.json").write_text(json.dumps(report, indent=1) + "\n")
    table = render(report)
    text = (
        "# Reclaim in the simulator\n\n"
        "`python -m benchmarks.bench_reclaim_sim` (part of `make bench`): "
        f"`{report['scenario']}`, rPS-DSF characterized (the engine's defaults), role level, "
        f"reclaim_min_runtime 5 s, per run 10, per minute 60; {report['wall_s']:.0f} s of "
        "wall time. In brackets: the paired difference from no reclaim, seed by seed.\n\n"
        f"{table}\n\n"
        "Jain's index over time (seed 0): `reclaim_sim.png`. What is modelled, and why "
        "executors go back and forth between the long applications (the fair share and the "
        'allocation run disagree under per-agent criteria): `docs/reclaim.md`, "In the '
        'simulator".\n'
    )
    (RESULTS / "reclaim_sim.md").write_text(text)
    print(table)


if __name__ == "__main__":
    main()
