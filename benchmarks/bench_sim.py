"""Benchmark: simulator speed, and paper 001's utilization comparison on Google-like traces.

(a) The paper-batch job batch (`BatchSimulator`, rPS-DSF), and every scheduler x mode on it
    (--batch-scenario runs another batch file, e.g. an older commit's paper batch).
(b) The 2,000-agent, 24-hour Google-like trace (`google-24h.yaml`) under Best-Fit DRFH and
    First-Fit DRFH (and any other scheduler named): simulated seconds per wall second, engine
    grants per wall second, and what the run reports (allocation, completion times, ...).
(c) Paper 001 Table II: the slot scheduler's utilization for several slots per maximum
    server, beside Best-Fit and First-Fit DRFH, on a smaller Google-like instance.
(d) With --profile, where the time goes: cProfile of the first hours of (b).

Every part reports wall time and the process's CPU time: on a shared machine the wall time
moves with the other load, the CPU time much less. --baseline BEFORE.json (this script's
sim.json from another commit, same options, run back to back) adds a before/after table.

Results go to benchmarks/results/sim.json and sim.md.

    python -m benchmarks.bench_sim [--schedulers bfdrf,drf:firstfit] [--hours 24]
        [--table2-agents 200] [--slots 10,12,14,16,20] [--profile-hours 2] [--skip ...]
        [--batch-scenario FILE] [--baseline FILE]
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import platform
import pstats
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import click

from allocator.engine_config import EngineConfig

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"
SCENARIOS = ROOT / "scenarios"
TARGET_SIM_S_PER_WALL_S = 300


def _commit() -> str:
    try:
        done = subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT
        )
        return done.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def _scheduler(spec: str) -> tuple[str, str | None]:
    name, _, selection = spec.partition(":")
    return name, selection or None


BATCH_SCHEDULERS = ("drf", "tsf", "psdsf", "rpsdsf", "bfdrf")
BATCH_MODES = ("characterized", "oblivious")


def bench_batch(path: Path) -> dict[str, Any]:
    from allocator.scenarios.batch import load_batch
    from allocator.sim.batch_sim import BatchSimulator

    batch = load_batch(path)
    started, cpu = time.perf_counter(), time.process_time()
    result = BatchSimulator(batch, EngineConfig("rpsdsf")).run()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    # Every paper scheduler x mode at seed 0 (what `sim --compare` and whatif repeat per seed).
    simulated, started_all, cpu_all = 0.0, time.perf_counter(), time.process_time()
    for name in BATCH_SCHEDULERS:
        for mode in BATCH_MODES:
            simulated += BatchSimulator(batch, EngineConfig(name, mode=mode)).run().makespan_s
    wall_all, cpu_all = time.perf_counter() - started_all, time.process_time() - cpu_all
    return {
        "scenario": path.stem,
        "scenario_file": str(path),
        "scheduler": "rpsdsf",
        "simulated_s": round(result.makespan_s, 1),
        "wall_s": round(wall, 3),
        "cpu_s": round(cpu, 3),
        "sim_s_per_wall_s": round(result.makespan_s / wall, 1),
        "grants": result.grants,
        "grants_per_wall_s": round(result.grants / wall),
        "jobs": len(result.jobs),
        "all": {
            "runs": len(BATCH_SCHEDULERS) * len(BATCH_MODES),
            "simulated_s": round(simulated, 1),
            "wall_s": round(wall_all, 3),
            "cpu_s": round(cpu_all, 3),
        },
    }


def _trace_row(result, load_s: float, cpu_s: float | None = None) -> dict[str, Any]:
    out = result.to_json(series=False)
    return {
        "scenario": out["scenario"],
        "scheduler": out["scheduler"],
        "selection": out["selection"],
        "slots_per_server": out.get("slots_per_server"),
        "agents": out["agents"],
        "users": out["users"],
        "simulated_s": out["end_s"],
        "load_s": round(load_s, 3),
        "wall_s": out["wall_s"],
        "cpu_s": None if cpu_s is None else round(cpu_s, 3),
        "sim_s_per_wall_s": out["sim_s_per_wall_s"],
        "grants": out["grants"],
        "grants_per_wall_s": round(out["grants"] / out["wall_s"]) if out["wall_s"] else None,
        "allocation_runs": out["allocation_runs"],
        "allocated": out["allocated"],
        "slot_occupancy": out.get("slot_occupancy"),
        "fairness": out["fairness"],
        "fairness_waiting": out["fairness_waiting"],
        "jobs": out["jobs"],
        "tasks": out["tasks"],
        "jct_s": out["jct_s"],
        "jct_by_size_s": out["jct_by_size_s"],
        "users_complete": out["users_complete"],
        "task_completion_ratio": out["task_completion_ratio"],
    }


def bench_trace(path: Path, schedulers: list[str], hours: float | None) -> list[dict[str, Any]]:
    from allocator.scenarios.trace import load_trace
    from allocator.sim.trace_sim import run_trace

    rows = []
    for spec in schedulers:
        name, selection = _scheduler(spec)
        started = time.perf_counter()
        workload = load_trace(path)
        load_s = time.perf_counter() - started
        click.echo(f"  {path.name}: {spec} ...", err=True)
        horizon = hours * 3600 if hours else None
        cpu = time.process_time()
        result = run_trace(workload, EngineConfig(name, selection=selection), horizon_s=horizon)
        rows.append(_trace_row(result, load_s, time.process_time() - cpu))
        click.echo(f"    {rows[-1]['wall_s']:.1f} s wall, {rows[-1]['cpu_s']:.1f} s CPU", err=True)
    return rows


def bench_table2(agents: int, slots: list[int], schedulers: list[str]) -> list[dict[str, Any]]:
    """Paper 001 Table II on a smaller Google-like instance (same 24 h workload shape)."""
    from allocator.scenarios.files import read_yaml
    from allocator.scenarios.trace import parse_trace
    from allocator.sim.trace_sim import run_trace

    data = read_yaml(SCENARIOS / "google-24h.yaml")
    data["cluster"]["google"]["agents"] = agents
    data["name"] = f"google-24h-{agents}"
    workload = parse_trace(data)
    rows = []
    for spec in schedulers:
        name, selection = _scheduler(spec)
        click.echo(f"  table II, {agents} agents: {spec} ...", err=True)
        rows.append(_trace_row(run_trace(workload, EngineConfig(name, selection=selection)), 0.0))
    for k in slots:
        click.echo(f"  table II, {agents} agents: slots k={k} ...", err=True)
        rows.append(_trace_row(run_trace(workload, EngineConfig("slots"), slots_per_server=k), 0.0))
    return rows


def profile_trace(path: Path, spec: str, hours: float, top: int = 20) -> dict[str, Any]:
    from allocator.scenarios.trace import load_trace
    from allocator.sim.trace_sim import run_trace

    name, selection = _scheduler(spec)
    workload = load_trace(path)
    profiler = cProfile.Profile()
    profiler.enable()
    result = run_trace(workload, EngineConfig(name, selection=selection), horizon_s=hours * 3600)
    profiler.disable()
    stats = pstats.Stats(profiler, stream=io.StringIO())
    total = stats.total_tt  # type: ignore[attr-defined]
    rows = []
    for (file, line, func), (_, calls, tottime, cumtime, _) in stats.stats.items():  # type: ignore[attr-defined]
        where = f"{Path(file).parent.name}/{Path(file).name}:{line}({func})" if line else func
        rows.append(
            {
                "function": where,
                "calls": calls,
                "tottime_s": round(tottime, 3),
                "cumtime_s": round(cumtime, 3),
            }
        )
    by_cum = sorted(rows, key=lambda r: -r["cumtime_s"])[:top]
    by_tot = sorted(rows, key=lambda r: -r["tottime_s"])[:top]
    return {
        "scheduler": spec,
        "hours": hours,
        "profiled_wall_s": round(total, 3),
        "grants": result.grants,
        "allocation_runs": result.allocation_runs,
        "by_cumulative": by_cum,
        "by_internal": by_tot,
    }


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def render(report: dict[str, Any]) -> str:
    lines = [
        "# Simulator benchmark",
        "",
        f"Machine: {report['machine']}; commit {report['commit']}; Python {report['python']}.",
        f"Target: the 24 h, 2,000-agent trace at >= {TARGET_SIM_S_PER_WALL_S} simulated s per "
        "wall s.",
        "",
    ]
    if report.get("load"):
        lines += [f"Load average (1/5/15 min) at the start: {report['load']}.", ""]
    if "batch" in report:
        b = report["batch"]
        lines += [
            f"## Paper batch (BatchSimulator, rPS-DSF; {b.get('scenario_file', b['scenario'])})",
            "",
            "| simulated s | wall s | CPU s | sim s / wall s | grants | grants / wall s |",
            "|---|---|---|---|---|---|",
            f"| {b['simulated_s']} | {b['wall_s']} | {b.get('cpu_s', '—')} | "
            f"{b['sim_s_per_wall_s']} | {b['grants']} | {b['grants_per_wall_s']} |",
            "",
        ]
        if "all" in b:
            a = b["all"]
            lines += [
                f"Every scheduler x mode ({a['runs']} runs, seed 0): {a['simulated_s']} "
                f"simulated s in {a['wall_s']} s wall, {a['cpu_s']} s CPU.",
                "",
            ]
    if report.get("trace"):
        hours = report.get("hours")
        span = f"first {hours:g} h" if hours else "24 h"
        lines += [
            f"## Google-like trace (google-24h.yaml: 2,000 agents, {span})",
            "",
            "| scheduler | selection | wall s | CPU s | sim s / wall s | grants | "
            "grants / wall s | runs | cpus | mem | fairness (waiting) | JCT mean s | JCT p95 s | "
            "tasks done | users done |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in report["trace"]:
            lines.append(
                f"| {r['scheduler']} | {r['selection']} | {r['wall_s']} | {r.get('cpu_s', '—')} | "
                f"{r['sim_s_per_wall_s']} | {r['grants']} | {r['grants_per_wall_s']} | "
                f"{r['allocation_runs']} | {_pct(r['allocated']['cpus'])} | "
                f"{_pct(r['allocated']['mem'])} | {r['fairness']} ({r['fairness_waiting']}) | "
                f"{r['jct_s']['mean']} | "
                f"{r['jct_s']['p95']} | {r['tasks']['completed']}/{r['tasks']['submitted']} | "
                f"{r['users_complete']}/{r['users']} |"
            )
        lines.append("")
    if report.get("table2"):
        rows = report["table2"]
        agents = rows[0]["agents"]
        lines += [
            f"## Paper 001 Table II, qualitatively ({agents} agents, same 24 h workload shape)",
            "",
            "Paper (Google trace, 2,000 servers): slots peak at 14 per maximum server with "
            "43.9% CPU / 28.0% memory.",
            "",
            "| scheduler | slots per max server | cpus | mem | slot occupancy | tasks done | "
            "JCT mean s | users done | wall s |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            label = r["scheduler"] + (f"/{r['selection']}" if r["scheduler"] == "drf" else "")
            lines.append(
                f"| {label} | {r['slots_per_server'] or '—'} | {_pct(r['allocated']['cpus'])} | "
                f"{_pct(r['allocated']['mem'])} | {_pct(r['slot_occupancy'])} | "
                f"{r['tasks']['completed']}/{r['tasks']['submitted']} | {r['jct_s']['mean']} | "
                f"{r['users_complete']}/{r['users']} | {r['wall_s']} |"
            )
        lines.append("")
    if report.get("profile"):
        p = report["profile"]
        lines += [
            f"## Where the time goes ({p['scheduler']}, first {p['hours']} h, cProfile)",
            "",
            f"{p['profiled_wall_s']} s profiled, {p['allocation_runs']} allocation runs, "
            f"{p['grants']} grants.",
            "",
            "| function (by internal time) | calls | tottime s | cumtime s |",
            "|---|---|---|---|",
        ]
        for r in p["by_internal"]:
            lines.append(
                f"| `{r['function']}` | {r['calls']} | {r['tottime_s']} | {r['cumtime_s']} |"
            )
        lines += [
            "",
            "| function (by cumulative time) | calls | tottime s | cumtime s |",
            "|---|---|---|---|",
        ]
        for r in p["by_cumulative"]:
            lines.append(
                f"| `{r['function']}` | {r['calls']} | {r['tottime_s']} | {r['cumtime_s']} |"
            )
        lines.append("")
    if report.get("baseline"):
        lines += before_after(report["baseline"], report)
    return "\n".join(lines)


def _ratio(after: float | None, before: float | None) -> str:
    if not after or not before:
        return "—"
    return f"{after / before:.2f}"


def before_after(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    """The same parts at two commits, run back to back: wall and CPU seconds, after / before
    (above 1: slower). Rows are matched by part, scheduler and selection."""
    rows: list[tuple[str, dict[str, Any], dict[str, Any]]] = []
    if "batch" in before and "batch" in after:
        b, a = before["batch"], after["batch"]
        rows.append((f"batch {b['scenario']}, rpsdsf", b, a))
        if "all" in b and "all" in a:
            rows.append((f"batch {b['scenario']}, {a['all']['runs']} configurations", b["all"],
                         a["all"]))  # fmt: skip
    old = {(r["scheduler"], r["selection"]): r for r in before.get("trace") or []}
    for r in after.get("trace") or []:
        match = old.get((r["scheduler"], r["selection"]))
        if match is not None:
            rows.append((f"trace, {r['scheduler']}/{r['selection']}", match, r))
    lines = [
        f"## Before/after: commit {before['commit']} vs {after['commit']} (back to back)",
        "",
        f"Before: load average {before.get('load', '?')} at its start; after: "
        f"{after.get('load', '?')}. After / before above 1 means slower.",
        "",
        "| part | simulated s before / after | grants before / after | wall s before | "
        "wall s after | after / before | CPU s before | CPU s after | after / before |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for label, b, a in rows:
        lines.append(
            f"| {label} | {b['simulated_s']} / {a['simulated_s']} | {b.get('grants', '—')} / "
            f"{a.get('grants', '—')} | {b['wall_s']} | {a['wall_s']} | "
            f"{_ratio(a['wall_s'], b['wall_s'])} | {b.get('cpu_s', '—')} | {a.get('cpu_s', '—')} | "
            f"{_ratio(a.get('cpu_s'), b.get('cpu_s'))} |"
        )
    return [*lines, ""]


@click.command()
@click.option("--schedulers", default="bfdrf,drf:firstfit", show_default=True)
@click.option("--hours", type=float, default=None, help="Stop the 24 h trace early (hours).")
@click.option("--table2-agents", default=200, show_default=True)
@click.option("--slots", default="10,12,14,16,20", show_default=True)
@click.option("--profile-hours", type=float, default=2.0, show_default=True)
@click.option(
    "--skip",
    default="",
    help="Comma list of parts to skip: batch, trace, table2, profile.",
)
@click.option(
    "--batch-scenario",
    type=click.Path(exists=True, dir_okay=False),
    default=str(SCENARIOS / "paper-batch.yaml"),
    show_default=True,
)
@click.option(
    "--baseline",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="sim.json from another commit: add a before/after table.",
)
@click.option("--output", type=click.Path(file_okay=False), default=str(RESULTS))
def main(
    schedulers: str,
    hours: float | None,
    table2_agents: int,
    slots: str,
    profile_hours: float,
    skip: str,
    batch_scenario: str,
    baseline: str | None,
    output: str,
) -> None:
    skipped = {s for s in skip.split(",") if s}
    names = [s for s in schedulers.split(",") if s]
    report: dict[str, Any] = {
        "machine": f"{platform.machine()}, {platform.processor() or 'cpu'}, {os.cpu_count()} cores",
        "python": platform.python_version(),
        "commit": _commit(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()),
        "hours": hours,
    }
    if "batch" not in skipped:
        click.echo("paper batch ...", err=True)
        report["batch"] = bench_batch(Path(batch_scenario))
    if "trace" not in skipped:
        click.echo("google-24h ...", err=True)
        report["trace"] = bench_trace(SCENARIOS / "google-24h.yaml", names, hours)
    if "table2" not in skipped:
        click.echo("table II ...", err=True)
        ks = [int(k) for k in slots.split(",") if k]
        report["table2"] = bench_table2(table2_agents, ks, names)
    if "profile" not in skipped:
        click.echo("profile ...", err=True)
        report["profile"] = profile_trace(SCENARIOS / "google-24h.yaml", names[0], profile_hours)
    report["peak_rss_bytes"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    if baseline is not None:
        report["baseline"] = json.loads(Path(baseline).read_text())
    out = Path(output)
    out.mkdir(parents=True, exist_ok=True)
    (out / "sim.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "sim.md").write_text(render(report))
    click.echo(render(report))


if __name__ == "__main__":
    sys.exit(main())
