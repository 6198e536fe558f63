"""Benchmark: `fairbroker fill --json` on a large instance, as a user runs it (issue 17).

Writes a scenario of 200,000 agents drawn from paper 001's Google server mix and 100
frameworks with random demand vectors (`allocator.workloads`, the same shapes as
bench_fill.py) as JSON, runs the installed command on it in a subprocess and records wall
time, the child's peak RSS and the size of the JSON it prints. Target on the 2-core reference
machine: under 60 s and 1 GB. Results: benchmarks/results/fill_scale.json and fill_scale.md.

    python -m benchmarks.bench_fill_scale [--agents N] [--frameworks F] [--scheduler drf]
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click
import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_SECONDS = 60.0
TARGET_BYTES = 1024**3


def write_scenario(path: Path, agents: int, frameworks: int, seed: int) -> None:
    from allocator.workloads import google_agent_capacities, random_demands

    rng = np.random.default_rng(seed)
    capacity = google_agent_capacities(agents, rng)
    demand = random_demands(frameworks, rng)
    data = {
        "agents": [{"name": f"a{i}", "resources": {"cpus": c, "mem": m}}
                   for i, (c, m) in enumerate(capacity.tolist())],
        "frameworks": [{"name": f"f{n}", "demand": {"cpus": c, "mem": m}}
                       for n, (c, m) in enumerate(demand.tolist())],
    }  # fmt: skip
    path.write_text(json.dumps(data))


def run_fill(scenario: Path, out: Path, scheduler: str) -> dict[str, object]:
    command = [str(Path(sys.executable).with_name("fairbroker")), "fill", str(scenario),
               "--scheduler", scheduler, "--json", "--quiet"]  # fmt: skip
    started = time.perf_counter()
    with out.open("w") as stdout:
        process = subprocess.Popen(command, stdout=stdout, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    process.returncode = os.waitstatus_to_exitcode(status)
    error = process.stderr.read().decode() if process.stderr else ""
    if process.returncode != 0:
        raise click.ClickException(f"fill failed ({process.returncode}): {error.strip()}")
    result = json.loads(out.read_text())
    return {
        "wall_seconds": round(wall, 2),
        # the child's CPU time: what a shared machine's load does not stretch
        "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2),
        "peak_rss_bytes": usage.ru_maxrss * 1024,  # Linux reports KiB
        "output_bytes": out.stat().st_size,
        "grants": result["grants"],
        "grants_per_second_overall": round(result["grants"] / wall),
        "total_tasks": result["total"]["mean"],
        "utilization": result["utilization"],
        "notes": result.get("notes", []),
    }


@click.command()
@click.option("--agents", default=200_000, show_default=True)
@click.option("--frameworks", default=100, show_default=True)
@click.option("--scheduler", default="drf", show_default=True)
@click.option("--seed", default=0, show_default=True)
def main(agents: int, frameworks: int, scheduler: str, seed: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp) / "scenario.json"
        write_scenario(scenario, agents, frameworks, seed)
        size = scenario.stat().st_size
        click.echo(f"fill --json: {agents:,} agents x {frameworks} frameworks ({scheduler}), "
                   f"scenario {size / 1e6:.1f} MB ...", err=True)  # fmt: skip
        row = run_fill(scenario, Path(tmp) / "out.json", scheduler)
    row.update({"agents": agents, "frameworks": frameworks, "scheduler": scheduler,
                "scenario_bytes": size,
                "meets_time_target": row["wall_seconds"] < TARGET_SECONDS,
                "meets_memory_target": row["peak_rss_bytes"] < TARGET_BYTES})  # fmt: skip
    meta = {"machine": platform.machine(), "python": platform.python_version(),
            "cpus": os.cpu_count(), "target_seconds": TARGET_SECONDS,
            "target_bytes": TARGET_BYTES}  # fmt: skip
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fill_scale.json").write_text(json.dumps({"meta": meta, "run": row}, indent=2)
                                             + "\n")  # fmt: skip
    lines = [
        f"# `fairbroker fill --json`: {agents:,} agents x {frameworks} frameworks ({scheduler})",
        "",
        "| wall s | CPU s | peak RSS MiB | output KB | grants | grants/s (overall) | under 60 s "
        "| under 1 GB |",
        "|---|---|---|---|---|---|---|---|",
        f"| {row['wall_seconds']} | {row['cpu_seconds']} | {row['peak_rss_bytes'] / 2**20:.0f} | "
        f"{row['output_bytes'] / 1e3:.1f} | {row['grants']:,.0f} | "
        f"{row['grants_per_second_overall']:,} | {row['meets_time_target']} | "
        f"{row['meets_memory_target']} |",
    ]
    (RESULTS / "fill_scale.md").write_text("\n".join(lines) + "\n")
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
