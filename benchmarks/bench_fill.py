"""Benchmark: one full characterized fill of a Google-like cluster, per scheduler.

10,000 agents drawn from paper 001's Table I server mix (largest server 64 CPUs, 256 GiB)
and 1,000 frameworks with random demand vectors. Each scheduler runs in its own process so
its peak memory is its own. Results go to benchmarks/results/fill.json and fill.md.

Times are CPU seconds of the fill alone (the machine is shared; wall seconds are recorded
too). Each fill is timed after a fill of 1,000 x 100 with the same scheduler has loaded its
compiled kernels (numba caches them on disk; the first run after an install compiles them,
`warmup_seconds`). `--before` also times the frozen pre-issue-28 fill
(`tests/support/reference_fill`) back to back with the current one, checks both made the
same grants, and writes both columns.

    python -m benchmarks.bench_fill [--agents N] [--frameworks F] [--schedulers drf,...]
                                    [--before]
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import resource
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import click
import numpy as np

from benchmarks.kept_notes import kept_notes

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_GRANTS_PER_SECOND = 10_000
MEMORY_LIMIT_BYTES = 2 * 1024**3


TESTS = Path(__file__).resolve().parents[1] / "tests"
FILLS = ("current", "reference")


def fill_function(which: str) -> Callable[..., list]:
    """`progressive_fill` as it is, or the frozen copy from before issue 28."""
    if which == "reference":
        sys.path.insert(0, str(TESTS))
        from support.reference_fill.filling import progressive_fill as reference

        return reference
    from allocator.filling import progressive_fill

    return progressive_fill


def measure(name: str, agents: int, frameworks: int, seed: int,
            which: str = "current") -> dict[str, object]:  # fmt: skip
    """Run one fill in this process and report time, grants and peak RSS."""
    from allocator.policy import scheduler
    from allocator.state import AllocationState
    from allocator.workloads import google_like_cluster

    fill = fill_function(which)
    chosen = scheduler(name)
    started = time.perf_counter()
    # large enough for the native fill (MIN_PAIRS): loads numba and the compiled kernels
    fill(AllocationState(google_like_cluster(1000, 100, seed)), chosen.criterion(),
         chosen.default_selection, np.random.default_rng(seed))  # fmt: skip
    warmup = time.perf_counter() - started
    started = time.perf_counter()
    cluster = google_like_cluster(agents, frameworks, seed)
    state = AllocationState(cluster)
    setup = time.perf_counter() - started
    started, cpu_started = time.perf_counter(), time.process_time()
    grants = fill(state, chosen.criterion(), chosen.default_selection,
                  np.random.default_rng(seed))  # fmt: skip
    cpu = time.process_time() - cpu_started
    elapsed = time.perf_counter() - started
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    utilization = state.utilization()
    sequence = np.array([(g.framework, g.agent) for g in grants], dtype=np.int64)
    return {
        "scheduler": name,
        "fill": which,
        "selection": str(chosen.default_selection),
        "agents": agents,
        "frameworks": frameworks,
        "grants": len(grants),
        "tasks": int(state.count.sum()),
        "grants_sha256": hashlib.sha256(sequence.tobytes()).hexdigest()[:16],
        "fill_cpu_seconds": round(cpu, 3),
        "fill_seconds": round(elapsed, 3),
        "setup_seconds": round(setup, 3),
        "warmup_seconds": round(warmup, 3),
        "grants_per_second": round(len(grants) / max(cpu, 1e-9)),
        "peak_rss_bytes": peak,
        "utilization": {
            r: round(float(u), 4) for r, u in zip(cluster.resources, utilization, strict=True)
        },
    }


TARGET_FILL_SECONDS = 1.0


def run_one(name: str, agents: int, frameworks: int, seed: int, which: str) -> dict[str, object]:
    """`measure` in a fresh process (its own peak memory and a cold start)."""
    argv = [sys.executable, "-m", "benchmarks.bench_fill", "--one", name, "--fill", which,
            "--agents", str(agents), "--frameworks", str(frameworks),
            "--seed", str(seed)]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, check=True)
    return json.loads(done.stdout)


@click.command()
@click.option("--agents", default=10_000, show_default=True)
@click.option("--frameworks", default=1_000, show_default=True)
@click.option("--schedulers", default="drf,tsf,psdsf,rpsdsf,bfdrf", show_default=True)
@click.option("--seed", default=0, show_default=True)
@click.option("--before", is_flag=True, help="Also time the pre-issue-28 fill, back to back.")
@click.option("--one", hidden=True, default=None, help="Internal: run one scheduler, print JSON.")
@click.option("--fill", "which", hidden=True, type=click.Choice(FILLS), default="current")
def main(agents: int, frameworks: int, schedulers: str, seed: int, before: bool,
         one: str | None, which: str) -> None:  # fmt: skip
    if one:
        print(json.dumps(measure(one, agents, frameworks, seed, which)))
        return
    rows = []
    for name in schedulers.split(","):
        click.echo(f"filling {agents} agents x {frameworks} frameworks with {name} ...", err=True)
        row = run_one(name, agents, frameworks, seed, "current")
        if before:
            old = run_one(name, agents, frameworks, seed, "reference")
            row["before"] = {k: old[k] for k in ("fill_cpu_seconds", "fill_seconds", "grants",
                                                   "grants_sha256", "peak_rss_bytes")}  # fmt: skip
            row["same_grants"] = old["grants_sha256"] == row["grants_sha256"]
        row["meets_fill_target"] = row["fill_cpu_seconds"] <= TARGET_FILL_SECONDS
        row["meets_grant_target"] = row["grants_per_second"] >= TARGET_GRANTS_PER_SECOND
        row["meets_memory_target"] = row["peak_rss_bytes"] < MEMORY_LIMIT_BYTES
        rows.append(row)
        click.echo(
            f"  {row['grants']} grants in {row['fill_cpu_seconds']} CPU s"
            f" = {row['grants_per_second']}/s, peak RSS {row['peak_rss_bytes'] / 2**20:.0f} MiB"
            + (f"; before {row['before']['fill_cpu_seconds']} CPU s" if before else ""),
            err=True,
        )
    RESULTS.mkdir(exist_ok=True)
    meta = {
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "load_average": os.getloadavg(),
        "target_fill_seconds": TARGET_FILL_SECONDS,
        "target_grants_per_second": TARGET_GRANTS_PER_SECOND,
        "memory_limit_bytes": MEMORY_LIMIT_BYTES,
    }
    (RESULTS / "fill.json").write_text(json.dumps({"meta": meta, "runs": rows}, indent=2) + "\n")
    lines = [
        f"# Full characterized fill: {agents} agents x {frameworks} frameworks",
        "",
        "CPU seconds of the fill alone (`python -m benchmarks.bench_fill"
        + (" --before" if before else "")
        + "`), each in its own process"
        + (
            "; before: the fill as it was before issue 28 (`tests/support/reference_fill`),"
            " run back to back with the current one"
            if before
            else ""
        )
        + ".",
        "",
    ]
    if before:
        lines += [
            "| scheduler | selection | grants | before CPU s | after CPU s | speed-up | "
            "same grants | grants/s | peak RSS MiB | cpus | mem |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
    else:
        lines += [
            "| scheduler | selection | grants | CPU s | grants/s | peak RSS MiB | cpus | mem |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for r in rows:
        u = r["utilization"]
        rss = f"{r['peak_rss_bytes'] / 2**20:.0f}"
        if before:
            was = r["before"]["fill_cpu_seconds"]
            speedup = was / max(r["fill_cpu_seconds"], 1e-9)
            lines.append(
                f"| {r['scheduler']} | {r['selection']} | {r['grants']} | {was} | "
                f"{r['fill_cpu_seconds']} | {speedup:.0f}x | {'yes' if r['same_grants'] else 'NO'}"
                f" | {r['grants_per_second']} | {rss} | {u['cpus']:.1%} | {u['mem']:.1%} |"
            )
        else:
            lines.append(
                f"| {r['scheduler']} | {r['selection']} | {r['grants']} | "
                f"{r['fill_cpu_seconds']} | {r['grants_per_second']} | {rss} | "
                f"{u['cpus']:.1%} | {u['mem']:.1%} |"
            )
    click.echo("\n".join(lines))
    (RESULTS / "fill.md").write_text("\n".join(lines) + "\n" + kept_notes(RESULTS / "fill.md"))


if __name__ == "__main__":
    main()
