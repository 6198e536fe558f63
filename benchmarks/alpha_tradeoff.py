"""alphaPF-VDS's efficiency-fairness trade-off: total tasks and Jain's index of the
frameworks' dominant shares as alpha goes from 0.5 to 50, beside exact PS-DSF (alpha =
infinity), on paper 000's modified example, paper 002's example and a Google-like instance.

python -m benchmarks.alpha_tradeoff -> benchmarks/results/alpha_tradeoff.{md,json,png}
"""

from __future__ import annotations

import json
from importlib.resources import files
from pathlib import Path

import click
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from allocator.exact import solve
from allocator.exact.common import dominant_share_per_task
from allocator.model import Cluster
from allocator.scenarios.static import load_scenario
from allocator.workloads import google_like_cluster

RESULTS = Path(__file__).resolve().parent / "results"
ALPHAS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0)


def instances() -> dict[str, Cluster]:
    data = files("allocator") / "data"
    return {
        "paper 000 Fig. 1 (modified)": load_scenario(data / "paper000-modified.yaml"),
        "paper 002 Table I": load_scenario(data / "paper002-example.yaml"),
        "Google-like 20 agents x 8 frameworks": google_like_cluster(20, 8, seed=0),
    }


def jain(values: np.ndarray) -> float:
    return float(values.sum() ** 2 / (len(values) * (values**2).sum()))


def measure(cluster: Cluster) -> list[dict]:
    share = dominant_share_per_task(cluster)
    rows = []
    for alpha in (*ALPHAS, np.inf):
        if np.isinf(alpha):
            result = solve(cluster, "psdsf-exact")
        else:
            result = solve(cluster, "alpha-psdsf", alpha)
        rows.append(
            {
                "alpha": "inf (PS-DSF)" if np.isinf(alpha) else alpha,
                "tasks": round(float(result.totals.sum()), 4),
                "jain": round(jain(result.totals * share / cluster.weight), 4),
                "converged": result.converged,
                "kkt_violation": result.kkt_violation,
                "sweeps": result.iterations,
            }
        )
    return rows


def plot(report: dict[str, list[dict]], path: Path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for name, rows in report.items():
        finite = [r for r in rows if isinstance(r["alpha"], float)]
        alphas = [r["alpha"] for r in finite]
        top = rows[-1]["tasks"]
        left.plot(alphas, [r["tasks"] / top for r in finite], marker="o", label=name)
        right.plot(alphas, [r["jain"] for r in finite], marker="o", label=name)
    left.set(xscale="log", xlabel="alpha", ylabel="total tasks / PS-DSF's")
    right.set(xscale="log", xlabel="alpha", ylabel="Jain's index of dominant shares")
    left.axhline(1.0, color="grey", lw=0.5)
    left.legend(fontsize=8)
    fig.suptitle("alphaPF-VDS: efficiency against fairness (tasks relative to exact PS-DSF)")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def render(report: dict[str, list[dict]]) -> str:
    lines = [
        "# alphaPF-VDS trade-off",
        "",
        "`python -m benchmarks.alpha_tradeoff`: total tasks and Jain's index of the "
        "frameworks' global dominant shares x_n max_r d_{n,r}/C_r under the alphaPF-VDS "
        "equilibrium (utility reconstructed, see allocator/exact/alpha.py); the last row is "
        "exact PS-DSF. `certificate`: the largest relative violation of the equilibrium "
        "conditions (allocator/exact/alpha_kkt.py); `converged` means it is at most 1e-8.",
        "",
    ]
    for name, rows in report.items():
        lines += [f"## {name}", "", "| alpha | total tasks | Jain | converged | certificate |"]
        lines.append("|---|---|---|---|---|")
        for r in rows:
            ok = "yes" if r["converged"] else "no"
            proof = "-" if r["kkt_violation"] is None else f"{r['kkt_violation']:.1e}"
            lines.append(
                f"| {r['alpha']} | {r['tasks']:.3f} | {r['jain']:.4f} | {ok} | {proof} |"
            )
        lines.append("")
    lines.append("![trade-off](alpha_tradeoff.png)")
    return "\n".join(lines) + "\n"


@click.command()
def main() -> None:
    report = {name: measure(cluster) for name, cluster in instances().items()}
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "alpha_tradeoff.json").write_text(json.dumps(report, indent=1) + "\n")
    plot(report, RESULTS / "alpha_tradeoff.png")
    text = render(report)
    (RESULTS / "alpha_tradeoff.md").write_text(text)
    click.echo(text)


if __name__ == "__main__":
    main()
