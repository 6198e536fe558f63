"""FUGA (paper 003) against BF-DRF and rPS-DSF: utilisation and fairness.

Paper 003's qualitative claim: FUGA keeps utilisation close to (or above) first/best fit
while keeping users' dominant shares close to equal. Three workloads:

1. the paper 002 batch in the simulator (both modes, paired seeds): makespan, time-averaged
   allocated cpus/mem and Jain's index of the groups' dominant shares;
2. static fills of Google-like clusters (paper 001's server mix, random demands): allocated
   cpus/mem at the end and the coefficient of variation of the frameworks' dominant shares
   (the deviation from equal shares FUGA minimises), with FUGA's lambda swept;
3. a Google-like task trace (2 h, 200 servers, 20 users) in the trace simulator.

Writes benchmarks/results/fuga.md.

    python -m benchmarks.fuga_report [--seeds 3]
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np

from allocator.engine_config import EngineConfig
from allocator.filling import progressive_fill
from allocator.policy import scheduler
from allocator.policy.base import max_ratio
from allocator.scenarios.batch import load_batch
from allocator.sim.batch_sim import BatchSimulator
from allocator.sim.trace_sim import run_trace
from allocator.state import AllocationState
from allocator.workloads import google_like_cluster

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
COMPARED = ("fuga", "bfdrf", "rpsdsf")
MODES = ("characterized", "oblivious")


def _mean(values: list[float]) -> str:
    return (
        f"{np.mean(values):.3f}"
        if len(values) == 1
        else (f"{np.mean(values):.3f} ± {np.std(values, ddof=1):.3f}")
    )


def batch_section(seeds: int) -> list[str]:
    batch = load_batch(HERE / "scenarios" / "paper-batch.yaml")
    lines = [
        "## 1. Paper 002 batch (simulator)",
        "",
        f"Mean ± sd over seeds 0-{seeds - 1} (a seed fixes the jobs for every scheduler).",
        "",
        "| scheduler | mode | makespan s | cpus | mem | Jain (groups) | grants |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode in MODES:
        for name in COMPARED:
            runs = [
                BatchSimulator(batch, EngineConfig(name, mode=mode, seed=s)).run().to_json()
                for s in range(seeds)
            ]
            lines.append(
                f"| {name} | {mode} | {_mean([r['makespan_s'] for r in runs])} | "
                f"{_mean([r['allocated']['cpus'] for r in runs])} | "
                f"{_mean([r['allocated']['mem'] for r in runs])} | "
                f"{_mean([r['fairness'] for r in runs])} | "
                f"{np.mean([r['grants'] for r in runs]):.0f} |"
            )
    return lines


def fill(cluster, config: EngineConfig, seed: int) -> dict[str, float]:
    state = AllocationState(cluster)
    criterion = scheduler(config.scheduler).criterion()
    progressive_fill(state, criterion, config.effective_selection, np.random.default_rng(seed),
                     params=config.policy_params())  # fmt: skip
    shares = max_ratio(state.alloc, cluster.total)
    used = state.utilization()
    return {
        "cpus": float(used[0]),
        "mem": float(used[1]),
        "cv": float(shares.std() / shares.mean()),
        "tasks": float(state.count.sum()),
    }


def static_section(seeds: int) -> list[str]:
    lines = [
        "## 2. Static fills of Google-like clusters",
        "",
        "Characterized progressive fill of an empty cluster until nothing fits; CV = std / mean "
        f"of the frameworks' dominant shares (0 = equal shares). Mean ± sd over seeds "
        f"0-{seeds - 1}.",
        "",
        "| cluster | scheduler | cpus | mem | CV of shares | tasks |",
        "|---|---|---|---|---|---|",
    ]
    policies = [(name, EngineConfig(name)) for name in COMPARED]
    policies.append(("drf firstfit", EngineConfig("drf", selection="firstfit")))
    for lam in (0.0, 0.3, 3.0, 10.0):
        policies.append((f"fuga lambda={lam:g}", EngineConfig("fuga", fuga_lambda=lam)))
    for agents, frameworks in ((200, 20), (1000, 100)):
        for label, config in policies:
            runs = [
                fill(google_like_cluster(agents, frameworks, s), config, s) for s in range(seeds)
            ]
            lines.append(
                f"| {agents} x {frameworks} | {label} | {_mean([r['cpus'] for r in runs])} | "
                f"{_mean([r['mem'] for r in runs])} | {_mean([r['cv'] for r in runs])} | "
                f"{np.mean([r['tasks'] for r in runs]):.0f} |"
            )
    return lines


TRACE = {
    "kind": "trace",
    "name": "google-2h-small",
    "horizon_s": 7200,
    "sample_s": 300,
    "cluster": {"google": {"agents": 200, "seed": 1}},
    "jobs": {"google": {"seed": 1, "users": 20, "load": 0.9}},
}


def trace_section() -> list[str]:
    lines = [
        "## 3. Google-like task trace (2 h, 200 servers, 20 users, load 0.9)",
        "",
        "| scheduler | cpus | mem | Jain (users) | tasks done | grants |",
        "|---|---|---|---|---|---|",
    ]
    for name in COMPARED:
        result = run_trace(dict(TRACE), EngineConfig(name)).to_json()
        lines.append(
            f"| {name} | {result['allocated']['cpus']:.3f} | {result['allocated']['mem']:.3f} | "
            f"{result['fairness']:.3f} | {result['tasks']['completed']} | {result['grants']} |"
        )
    return lines


@click.command()
@click.option("--seeds", type=click.IntRange(min=1), default=3, show_default=True)
def main(seeds: int) -> None:
    start = time.perf_counter()
    sections = []
    for name, build in (
        ("batch", lambda: batch_section(seeds)),
        ("static", lambda: static_section(seeds)),
        ("trace", trace_section),
    ):
        click.echo(f"{name} ...", err=True)
        sections.append(build())
    lines = [
        "# FUGA against BF-DRF and rPS-DSF (`python -m benchmarks.fuga_report`)",
        "",
        f"Generated {time.strftime('%Y-%m-%d')} in {time.perf_counter() - start:.0f} s. "
        "FUGA runs with its defaults (K = 3, lambda = 1, 4 executor types per agent, "
        "horizon 4) unless a row says otherwise; see docs/fuga.md.",
        "",
    ]
    for section in sections:
        lines += [*section, ""]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "fuga.md").write_text("\n".join(lines))
    click.echo(f"wrote {RESULTS / 'fuga.md'}")


if __name__ == "__main__":
    main()
