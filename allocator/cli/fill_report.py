"""`fairbroker fill`'s text report: a per-framework summary, and x_{n,i} when asked for (or
when the agents fit on one line)."""

from __future__ import annotations

from allocator.trials import FillSummary

#: Without --matrix/--no-matrix the text report shows x_{n,i} up to this many agents.
TEXT_MATRIX_AGENTS = 8


def _matrix(summary: FillSummary) -> list[str]:
    c = summary.cluster
    width = max(8, *(len(a) for a in c.agent_names)) + 2
    name_width = max(10, *(len(f) for f in c.framework_names)) + 2
    lines = [
        "mean tasks x_{n,i} (sample sd over trials)",
        " " * name_width + "".join(f"{a:>{width + 8}}" for a in c.agent_names) + f"{'total':>12}",
    ]
    for n, f in enumerate(c.framework_names):
        cells = "".join(
            f"{summary.tasks_mean[n, i]:>{width},.2f} ({summary.tasks_std[n, i]:5,.2f})"
            for i in range(c.n_agents)
        )
        lines.append(f"{f:<{name_width}}{cells}{summary.tasks_mean[n].sum():>12,.2f}")
    return lines


def _frameworks(summary: FillSummary) -> list[str]:
    rows = summary.framework_summary()
    name_width = max(10, *(len(r["name"]) for r in rows)) + 2
    lines = [f"{'framework':<{name_width}}{'tasks':>12}{'(sd)':>9}{'agents used':>13}"
             f"{'dominant share':>16}"]  # fmt: skip
    for r in rows:
        sd = f"({r['tasks_std']:.2f})"
        lines.append(f"{r['name']:<{name_width}}{r['tasks']:>12,.2f}{sd:>9}"
                     f"{r['agents_used']:>13,}{r['dominant_share']:>16.4f}")  # fmt: skip
    return lines


def render_fill(summary: FillSummary, matrix: bool | None = None) -> str:
    c = summary.cluster
    if matrix is None:
        matrix = c.n_agents <= TEXT_MATRIX_AGENTS
    lines = [
        f"{summary.scheduler} / {summary.selection} / {summary.mode}, ties {summary.ties}, "
        f"{summary.trials} trial(s), seed {summary.seed}; {c.n_agents:,} agents, "
        f"{c.n_frameworks:,} frameworks",
        *_frameworks(summary),
    ]
    if matrix:
        lines += _matrix(summary)
    std = summary.totals.std(ddof=1) if summary.trials > 1 else 0.0
    lines.append(
        f"total tasks: {summary.totals.mean():,.2f} (sd {std:,.2f}), "
        f"{summary.grants:,.2f} grants per fill"
    )
    best = summary.optimum
    if best is not None:
        milp = "not solved in time" if best.tasks is None else f"{best.tasks:,} tasks (MILP)"
        lp = "-" if best.lp_tasks is None else f"{best.lp_tasks:,.2f}"
        lines.append(f"optimum: {milp}, LP relaxation {lp}")
    elif summary.optimum_skipped:
        lines.append(f"optimum: {summary.optimum_skipped}")
    util = ", ".join(f"{r} {u:.1%}" for r, u in zip(c.resources, summary.utilization, strict=True))
    lines.append(f"allocated: {util}")
    if not matrix:
        lines.append(f"x matrix: {c.n_frameworks:,} x {c.n_agents:,} not shown (use --matrix)")
    lines.extend(f"note: {note}" for note in summary.notes)
    return "\n".join(lines)
