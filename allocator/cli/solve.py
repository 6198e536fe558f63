"""`fairbroker solve SCENARIO --policy P`: the exact (divisible) allocation of a fair policy,
with `--integer` a feasible whole-task rounding beside the MILP optimum and progressive
filling (allocator/exact/ does the work)."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from allocator.cli.option_types import SEED, choice_of
from allocator.cli.outputs import check_stdout


def _per_pair(cluster, x) -> dict[str, dict[str, float]]:
    return {
        f: {a: round(float(x[n, i]), 6) for i, a in enumerate(cluster.agent_names)}
        for n, f in enumerate(cluster.framework_names)
    }


def _utilization(cluster, x) -> dict[str, float]:
    used = (x.T @ cluster.demand).sum(axis=0)
    total = cluster.total
    return {
        r: round(float(used[k] / total[k]) if total[k] > 0 else 0.0, 6)
        for k, r in enumerate(cluster.resources)
    }


def solve_report(cluster, policy: str, alpha: float, integer: bool, seed: int) -> dict[str, Any]:
    """The JSON document `solve --json` prints."""
    import numpy as np

    from allocator.exact import solve
    from allocator.exact.registry import EXACT_POLICIES
    from allocator.exact.rounding import round_feasible
    from allocator.filling import progressive_fill
    from allocator.optimal import optimum
    from allocator.policy import scheduler
    from allocator.policy.alpha_psdsf import AlphaParams
    from allocator.state import AllocationState

    result = solve(cluster, policy, alpha)
    name = policy.lower()
    out: dict[str, Any] = {
        "policy": name,
        "alpha": alpha if name == "alpha-psdsf" else None,
        "converged": result.converged,
        "iterations": result.iterations,
        "kkt_violation": result.kkt_violation,
        "tasks": _per_pair(cluster, result.tasks),
        "total": round(float(result.tasks.sum()), 6),
        "utilization": _utilization(cluster, result.tasks),
    }
    if integer:
        whole = round_feasible(cluster, result.tasks)
        out["integer"] = {
            "rounding": "floor, then +1 task by largest fractional part where it fits",
            "tasks": _per_pair(cluster, whole),
            "total": int(whole.sum()),
        }
        best = optimum(cluster)
        out["optimum"] = {"tasks": best.tasks, "lp_tasks": best.lp_tasks}
        online = scheduler(EXACT_POLICIES[name][1])
        criterion = online.criterion({"alpha-psdsf": AlphaParams(alpha)})
        state = AllocationState(cluster)
        rng = np.random.default_rng(seed)
        progressive_fill(state, criterion, online.default_selection, rng)
        out["fill"] = {
            "scheduler": online.name,
            "selection": str(online.default_selection),
            "seed": seed,
            "tasks": _per_pair(cluster, state.tasks),
            "total": int(state.tasks.sum()),
        }
    if result.notes:
        out["notes"] = result.notes
    return out


def _render(cluster, report: dict[str, Any]) -> str:
    alpha = f", alpha {report['alpha']}" if report["alpha"] is not None else ""
    state = "converged" if report["converged"] else "NOT converged"
    certificate = report["kkt_violation"]
    proof = f" (largest KKT violation {certificate:.1e})" if certificate is not None else ""
    lines = [
        f"{report['policy']}{alpha}: {state} after {report['iterations']} iteration(s){proof}"
    ]
    columns = [("divisible x_{n,i}", report["tasks"], ".4f")]
    if "integer" in report:
        columns += [
            ("rounded", report["integer"]["tasks"], ".0f"),
            (f"fill ({report['fill']['scheduler']})", report["fill"]["tasks"], ".0f"),
        ]
    name_width = max(10, *(len(f) for f in cluster.framework_names)) + 2
    for title, tasks, fmt in columns:
        lines.append(title)
        lines.append(
            " " * name_width + "".join(f"{a:>12}" for a in cluster.agent_names) + f"{'total':>12}"
        )
        for f in cluster.framework_names:
            row = tasks[f]
            cells = "".join(f"{row[a]:>12{fmt}}" for a in cluster.agent_names)
            lines.append(f"{f:<{name_width}}{cells}{sum(row.values()):>12{fmt}}")
    lines.append(f"total tasks: {report['total']:.4f}")
    if "integer" in report:
        lines.append(
            f"rounded: {report['integer']['total']} tasks ({report['integer']['rounding']}); "
            f"fill: {report['fill']['total']}; optimum: {report['optimum']['tasks']} (MILP)"
        )
    util = ", ".join(f"{r} {u:.1%}" for r, u in report["utilization"].items())
    lines.append(f"allocated: {util}")
    lines.extend(f"note: {note}" for note in report.get("notes", []))
    return "\n".join(lines)


@click.command()
@click.argument("scenario", type=click.Path(dir_okay=False))
@click.option(
    "--policy",
    "-p",
    type=choice_of("allocator.exact.registry", "EXACT_POLICIES"),
    required=True,
    help="Exact policy.",
)
@click.option(
    "--alpha",
    type=float,
    default=None,
    help="alpha-psdsf's alpha (1 = proportional fairness; large = PS-DSF)  [default: 3.0; "
    "alpha-psdsf only]",
)
@click.option(
    "--integer",
    is_flag=True,
    help="Also a feasible whole-task rounding, the MILP optimum and progressive filling.",
)
@click.option("--seed", type=SEED, default=0, show_default=True, help="Seed of the fill.")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def solve(
    scenario: str, policy: str, alpha: float | None, integer: bool, seed: int, as_json: bool
) -> None:
    """The exact divisible allocation of SCENARIO under an exact fair policy."""
    from allocator.errors import ScenarioError
    from allocator.exact.registry import DEFAULT_ALPHA
    from allocator.scenarios.static import load_scenario

    if alpha is not None and policy.lower() != "alpha-psdsf":
        raise ScenarioError(f"alpha: only alpha-psdsf takes --alpha, not {policy.lower()}")
    alpha = DEFAULT_ALPHA if alpha is None else alpha
    check_stdout()
    cluster = load_scenario(scenario)
    report = solve_report(cluster, policy, alpha, integer, seed)
    click.echo(json.dumps(report) if as_json else _render(cluster, report))
    sys.stdout.flush()
