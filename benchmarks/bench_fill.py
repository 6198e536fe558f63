"""Benchmark: one full characterized fill of a Google-like cluster, per scheduler.

10,000 agents drawn from paper 001's Table I server mix (largest server 64 CPUs, 256 GiB)
and 1,000 frameworks with random demand vectors. Each scheduler runs in its own process so
its peak memory is its own. Results go to benchmarks/results/fill.json and fill.md.

    python -m benchmarks.bench_fill [--agents N] [--frameworks F] [--schedulers drf,...]
"""

from __future__ import annotations

import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

import click
import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_GRANTS_PER_SECOND = 10_000
MEMORY_LIMIT_BYTES = 2 * 1024**3


def measure(name: str, agents: int, frameworks: int, seed: int) -> dict[str, object]:
    """Run one fill in this process and report time, grants and peak RSS."""
    from allocator.filling import progressive_fill
    from allocator.policy import scheduler
    from allocator.state import AllocationState
    from allocator.workloads import google_like_cluster

    started = time.perf_counter()
    cluster = google_like_cluster(agents, frameworks, seed)
    state = AllocationState(cluster)
    chosen = scheduler(name)
    setup = time.perf_counter() - started
    started = time.perf_counter()
    grants = progressive_fill(
        state, chosen.criterion(), chosen.default_selection, np.random.default_rng(seed)
    )
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    utilization = state.utilization()
    return {
        "scheduler": name,
        "selection": str(chosen.default_selection),
        "agents": agents,
        "frameworks": frameworks,
        "grants": len(grants),
        "tasks": int(state.count.sum()),
        "fill_seconds": round(elapsed, 3),
        "setup_seconds": round(setup, 3),
        "grants_per_second": round(len(grants) / elapsed),
        "peak_rss_bytes": peak,
        "utilization": {
            r: round(float(u), 4) for r, u in zip(cluster.resources, utilization, strict=True)
        },
    }


@click.command()
@click.option("--agents", default=10_000, show_default=True)
@click.option("--frameworks", default=1_000, show_default=True)
@click.option("--schedulers", default="drf,tsf,psdsf,rpsdsf,bfdrf", show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--one", hidden=True, default=None, help="Internal: run one scheduler, print JSON.")
def main(agents: int, frameworks: int, schedulers: str, seed: int, one: str | None) -> None:
    if one:
        print(json.dumps(measure(one, agents, frameworks, seed)))
        return
    rows = []
    for name in schedulers.split(","):
        click.echo(f"filling {agents} agents x {frameworks} frameworks with {name} ...", err=True)
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "benchmarks.bench_fill",
                "--one",
                name,
                "--agents",
                str(agents),
                "--frameworks",
                str(frameworks),
                "--seed",
                str(seed),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        row = json.loads(done.stdout)
        row["meets_grant_target"] = row["grants_per_second"] >= TARGET_GRANTS_PER_SECOND
        row["meets_memory_target"] = row["peak_rss_bytes"] < MEMORY_LIMIT_BYTES
        rows.append(row)
        click.echo(
            f"  {row['grants']} grants in {row['fill_seconds']} s = {row['grants_per_second']}/s,"
            f" peak RSS {row['peak_rss_bytes'] / 2**20:.0f} MiB",
            err=True,
        )
    RESULTS.mkdir(exist_ok=True)
    meta = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": __import__("os").cpu_count(),
        "target_grants_per_second": TARGET_GRANTS_PER_SECOND,
        "memory_limit_bytes": MEMORY_LIMIT_BYTES,
    }
    (RESULTS / "fill.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=2) + "\n")
    lines = [
        f"# Full characterized fill: {agents} agents x {frameworks} frameworks",
        "",
        "| scheduler | selection | grants | fill s | grants/s | peak RSS MiB | cpus | mem |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        u = r["utilization"]
        lines.append(
            f"| {r['scheduler']} | {r['selection']} | {r['grants']} | {r['fill_seconds']} | "
            f"{r['grants_per_second']} | {r['peak_rss_bytes'] / 2**20:.0f} | "
            f"{u['cpus']:.1%} | {u['mem']:.1%} |"
        )
    (RESULTS / "fill.md").write_text("\n".join(lines) + "\n")
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
