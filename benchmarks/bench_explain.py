"""Benchmark: what `fairbroker explain` costs at 1,000 agents x 100 tenants (issue 26).

The engine of `benchmarks.bench_reclaim` (1,000 agents of paper 001's Google server mix, 90
tenants filling the cluster and 10 late ones waiting) is asked, repeatedly, why a late
tenant and a filling tenant wait (`allocator.explain.explain`: one snapshot, the criterion,
per-agent reasons). Nothing is computed while nobody asks, so this is the whole cost, paid
per request. Target: under 100 ms CPU per request. Results: benchmarks/results/explain.md.

    python -m benchmarks.bench_explain [--agents N] [--tenants F] [--scheduler drf] [--repeats R]
"""

from __future__ import annotations

import platform
import statistics
import time
from pathlib import Path

import click

from allocator.explain import explain
from allocator.fair_share import fair_shares
from benchmarks.bench_reclaim import build

RESULTS = Path(__file__).resolve().parent / "results"
TARGET_MS = 100.0


@click.command()
@click.option("--agents", default=1000, show_default=True)
@click.option("--tenants", default=100, show_default=True)
@click.option("--scheduler", default="drf", show_default=True)
@click.option("--repeats", default=20, show_default=True)
@click.option("--seed", default=0, show_default=True)
def main(agents: int, tenants: int, scheduler: str, repeats: int, seed: int) -> None:
    engine, late = build(agents, tenants, scheduler, seed)
    share = fair_shares(engine).as_dict()
    rows = []
    for tenant in (late[0], "t0"):
        cpu = []
        for _ in range(repeats):
            start = time.process_time()
            answer = explain(engine, tenant, 1.0, share)
            cpu.append((time.process_time() - start) * 1000)
        reasons: dict[str, int] = {}
        for item in answer.waiting:
            reasons[item.reason] = reasons.get(item.reason, 0) + 1
        rows.append((tenant, statistics.median(cpu), max(cpu), reasons))
        click.echo(f"{tenant}: median {statistics.median(cpu):.1f} ms CPU, reasons {reasons}")
    executors = int(sum(engine.running.values()))
    lines = [
        "# `explain` cost (issue 26)",
        "",
        f"`python -m benchmarks.bench_explain --agents {agents} --tenants {tenants} "
        f"--scheduler {scheduler} --repeats {repeats}`; {platform.processor() or 'cpu'}, "
        f"{time.strftime('%Y-%m-%d')}; {executors} executors running.",
        "",
        "| tenant | median ms CPU | max ms CPU | reasons (agents) |",
        "|---|---|---|---|",
        *[
            f"| {tenant} | {median:.1f} | {most:.1f} | {reasons} |"
            for tenant, median, most, reasons in rows
        ],
        "",
        f"Target: under {TARGET_MS:g} ms CPU per request: "
        + ("met." if all(row[1] < TARGET_MS for row in rows) else "**missed**."),
        "",
    ]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "explain.md").write_text("\n".join(lines))
    click.echo(f"wrote {RESULTS / 'explain.md'}")


if __name__ == "__main__":
    main()
