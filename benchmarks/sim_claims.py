"""Paper 002 Sec. V claims, checked in the simulator under the Mesos-faithful defaults.

Runs every scheduler x mode on the paper batch (several seeds), on a homogeneous variant,
and on Sec. V-F; also the per-framework / release-triggered variant for contrast. Writes
benchmarks/results/sim_claims.md (tables, and a verdict line per claim).

    python -m benchmarks.sim_claims [--seeds N]
"""

from __future__ import annotations

import copy
import statistics
from pathlib import Path

import click
import yaml

from allocator.policy import PAPER_SCHEDULERS as SCHEDULERS
from allocator.sim.batch import parse_batch
from allocator.sim.bound import makespan_bound
from allocator.sim.simulator import BatchSimulator

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
MODES = ("characterized", "oblivious")


def load(name: str) -> dict:
    return yaml.safe_load((HERE / "scenarios" / name).read_text())


def homogeneous(data: dict) -> dict:
    """The paper batch on six identical agents with the same total capacity."""
    out = copy.deepcopy(data)
    total_cpus = sum(a["resources"]["cpus"] for a in data["agents"])
    total_mem = sum(a["resources"]["mem"] for a in data["agents"])
    n = len(data["agents"])
    out["name"] = "paper-batch-homogeneous"
    out["agents"] = [
        {"name": f"h{i}", "resources": {"cpus": total_cpus / n, "mem": total_mem / n}}
        for i in range(n)
    ]
    return out


def makespans(data: dict, seeds: int, **options: str) -> dict[tuple[str, str], list[float]]:
    spec = parse_batch(data)
    out: dict[tuple[str, str], list[float]] = {}
    for name in SCHEDULERS:
        for mode in MODES:
            runs = []
            for seed in range(seeds):
                result = BatchSimulator(spec, name, mode, seed=seed, **options).run()
                runs.append(result.makespan_s)
            out[(name, mode)] = runs
            click.echo(f"  {data.get('name')} {name}/{mode}: {statistics.mean(runs):.0f} s",
                       err=True)
    return out


def table(title: str, data: dict, results: dict[tuple[str, str], list[float]]) -> list[str]:
    bound = makespan_bound(parse_batch(data)).seconds
    lines = [f"### {title}", "", f"Fluid/chain lower bound: {bound:.0f} s", "",
             "| scheduler | characterized (mean, min-max) | oblivious (mean, min-max) |",
             "|---|---|---|"]
    for name in SCHEDULERS:
        cells = []
        for mode in MODES:
            runs = results[(name, mode)]
            cells.append(f"{statistics.mean(runs):.0f} ({min(runs):.0f}-{max(runs):.0f})")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def mean(results: dict, name: str, mode: str) -> float:
    return statistics.mean(results[(name, mode)])


def verdicts(batch: dict, homo: dict, vf: dict) -> list[str]:
    def holds(flag: bool) -> str:
        return "holds" if flag else "does NOT hold"

    lines = ["### Claims", ""]
    for mode in MODES:
        d, p = mean(batch, "drf", mode), mean(batch, "psdsf", mode)
        lines.append(f"- PS-DSF sooner than DRF ({mode}): {p:.0f} vs {d:.0f} s: {holds(p < d)}")
    c, o = mean(batch, "drf", "characterized"), mean(batch, "drf", "oblivious")
    lines.append(f"- characterized beats oblivious under DRF: {c:.0f} vs {o:.0f} s: {holds(c < o)}")
    for mode in MODES:
        p = mean(batch, "psdsf", mode)
        t = mean(batch, "tsf", mode)
        d = mean(batch, "drf", mode)
        for other in ("bfdrf", "rpsdsf"):
            x = mean(batch, other, mode)
            lines.append(
                f"- {other} comparable to PS-DSF (within 3%) and better than TSF ({mode}): "
                f"{x:.0f} vs PS-DSF {p:.0f}, TSF {t:.0f}: "
                f"{holds(abs(x - p) <= 0.03 * p and x < t)}"
            )
        lines.append(f"- TSF comparable to DRF within 3% ({mode}): {t:.0f} vs {d:.0f}: "
                     f"{holds(abs(t - d) <= 0.03 * d)}")
    for mode in MODES:
        p, d = mean(homo, "psdsf", mode), mean(homo, "drf", mode)
        lines.append(f"- homogeneous agents: PS-DSF ~ DRF within 3% ({mode}): {p:.0f} vs {d:.0f}:"
                     f" {holds(abs(p - d) <= 0.03 * d)}")
    r, b = mean(vf, "rpsdsf", "characterized"), mean(vf, "bfdrf", "characterized")
    lines.append(f"- Sec. V-F: rPS-DSF finishes sooner than BF-DRF (characterized): "
                 f"{r:.0f} vs {b:.0f}: {holds(r < b)}")
    return [*lines, ""]


@click.command()
@click.option("--seeds", default=3, show_default=True)
def main(seeds: int) -> None:
    paper = load("paper-batch.yaml")
    vf_data = load("vf.yaml")
    homo = homogeneous(paper)
    batch = makespans(paper, seeds)
    flat = makespans(paper, seeds, level="framework", trigger="release")
    homo_results = makespans(homo, seeds)
    vf = makespans(vf_data, seeds)
    lines = [f"# Paper 002 Sec. V in the simulator ({seeds} seeds each, makespan in s)", ""]
    lines += verdicts(batch, homo_results, vf)
    lines += table("Paper batch, role-level fairness, tick timing (the defaults)", paper, batch)
    lines += table("Paper batch, per-framework fairness, allocation on every release",
                   paper, flat)
    lines += table("Homogeneous agents (same totals), defaults", homo, homo_results)
    lines += table("Sec. V-F (agents registered one by one), defaults", vf_data, vf)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sim_claims.md").write_text("\n".join(lines) + "\n")
    click.echo("\n".join(lines))


if __name__ == "__main__":
    main()
