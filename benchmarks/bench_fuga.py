"""Benchmark: FUGA's allocation run on 1,000 agents x 100 frameworks (target: under 1 s).

One allocation run = a characterized progressive fill of an empty Google-like cluster
(paper 001's server mix, `allocator.workloads.google_like_cluster`) until nothing fits, with
FUGA's default bounds (K = 3, 4 executor types per agent, 512 combinations, horizon 4).
BF-DRF and rPS-DSF run the same instance for scale. Each run is timed in wall and CPU
seconds (the machine is shared, so CPU time is the steadier number). Results go to
benchmarks/results/fuga_speed.json and fuga_speed.md.

    python -m benchmarks.bench_fuga [--agents 1000] [--frameworks 100] [--runs 3]
"""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path

import click
import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_SECONDS = 1.0


def one_run(name: str, agents: int, frameworks: int, seed: int) -> dict[str, float]:
    from allocator.filling import progressive_fill
    from allocator.policy import scheduler
    from allocator.policy.base import max_ratio
    from allocator.state import AllocationState
    from allocator.workloads import google_like_cluster

    cluster = google_like_cluster(agents, frameworks, seed)
    chosen = scheduler(name)
    state = AllocationState(cluster)
    rng = np.random.default_rng(seed)
    wall, cpu = time.perf_counter(), time.process_time()
    grants = progressive_fill(state, chosen.criterion(), chosen.default_selection, rng)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    shares = max_ratio(state.alloc, cluster.total)
    used = state.utilization()
    return {
        "wall_s": wall,
        "cpu_s": cpu,
        "grants": len(grants),
        "tasks": float(state.count.sum()),
        "cpus": float(used[0]),
        "mem": float(used[1]),
        "share_cv": float(shares.std() / shares.mean()),
    }


@click.command()
@click.option("--agents", type=click.IntRange(min=1), default=1000, show_default=True)
@click.option("--frameworks", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--runs", type=click.IntRange(min=1), default=3, show_default=True)
def main(agents: int, frameworks: int, runs: int) -> None:
    rows = []
    for name in ("fuga", "bfdrf", "rpsdsf"):
        measured = [one_run(name, agents, frameworks, seed) for seed in range(runs)]
        row: dict[str, object] = {"scheduler": name}
        for key in measured[0]:
            row[key] = float(np.mean([m[key] for m in measured]))
        row["max_wall_s"] = max(m["wall_s"] for m in measured)
        row["max_cpu_s"] = max(m["cpu_s"] for m in measured)
        rows.append(row)
        click.echo(
            f"{name}: wall {row['wall_s']:.3f} s (max {row['max_wall_s']:.3f}), "
            f"cpu {row['cpu_s']:.3f} s (max {row['max_cpu_s']:.3f})",
            err=True,
        )
    fuga = rows[0]
    payload = {
        "agents": agents,
        "frameworks": frameworks,
        "runs": runs,
        "target_s": TARGET_SECONDS,
        "fuga_under_target_cpu": fuga["max_cpu_s"] < TARGET_SECONDS,
        "fuga_under_target_wall": fuga["max_wall_s"] < TARGET_SECONDS,
        "machine": platform.platform(),
        "date": time.strftime("%Y-%m-%d"),
        "rows": rows,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fuga_speed.json").write_text(json.dumps(payload, indent=2) + "\n")
    lines = [
        f"# FUGA allocation run: {agents} agents x {frameworks} frameworks ({runs} seeds)",
        "",
        f"One characterized fill of an empty Google-like cluster until nothing fits; target "
        f"under {TARGET_SECONDS:g} s per run. Machine: {payload['machine']}, "
        f"{payload['date']}.",
        "",
        "| scheduler | wall s (mean / max) | cpu s (mean / max) | tasks | cpus | mem | "
        "CV of dominant shares |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['scheduler']} | {r['wall_s']:.3f} / {r['max_wall_s']:.3f} | "
            f"{r['cpu_s']:.3f} / {r['max_cpu_s']:.3f} | {r['tasks']:.0f} | "
            f"{r['cpus']:.1%} | {r['mem']:.1%} | {r['share_cv']:.3f} |"
        )
    (RESULTS / "fuga_speed.md").write_text("\n".join(lines) + "\n")
    click.echo(f"wrote {RESULTS / 'fuga_speed.md'}")


if __name__ == "__main__":
    main()
