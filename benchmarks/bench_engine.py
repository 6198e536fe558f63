"""Benchmark: the online engine's churn tick (issue 28) and its memory.

A cluster of Google-mix agents (`allocator.workloads`) is packed with running tasks
(`Engine.adopt`), every tenant wants more than fits and one allocation run settles what
is left. A churn tick is then: 10 running tasks end (`Engine.release`) and one allocation
run (`Engine.allocate`) hands their room out. Each size and scheduler runs in its own
process, which reports the CPU time of each tick (the machine is shared: CPU seconds are
the steadier measure), the setup time and its own peak RSS.

`--engine reference` runs the dense engine as it was before issue 28
(`tests/support/reference_engine.py`, a frozen copy), so before and after are measured
back to back on the same machine. Results: benchmarks/results/engine.{json,md}.

    python -m benchmarks.bench_engine                      # both engines, every size
    python -m benchmarks.bench_engine --sizes 1000x100 --engine current
    python -m benchmarks.bench_engine --scheduler drf/selection=joint   # EngineConfig changes
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import click
import numpy as np

from benchmarks.kept_notes import kept_notes

RESULTS = Path(__file__).resolve().parent / "results"
ENGINES = {"current": "allocator.engine", "reference": "tests.support.reference_engine"}
SIZES = ((1_000, 100), (10_000, 1_000), (50_000, 5_000))
SCHEDULERS = ("rpsdsf", "drf", "bfdrf", "tsf", "psdsf")
#: Configurations measured beside the schedulers' own, as SCHEDULER/SETTING=VALUE,...
#: (`EngineConfig.mesos` changes): the joint and FUGA selections, which run over the
#: changed agents, and what still takes a dense snapshot per run (the random selection,
#: waste ties with best fit, a per-agent criterion at role level with best fit).
VARIANTS = ("drf/selection=joint", "fuga", "drf/selection=random", "bfdrf/ties=waste",
            "psdsf/selection=bestfit")  # fmt: skip
CHURN_TASKS = 10
#: The dense engine holds int64 (F, A) matrices and copies them per run: past this many
#: pairs it is not run (50,000 x 5,000 would need well over 10 GB).
REFERENCE_MAX_PAIRS = 20_000_000
NOTES = """
How BF-DRF's runs work now (issue 28, branch i28g):

- The frameworks' and roles' DRF shares are kept through a run, recomputed only for the
  framework served and its role (`KeptShares` in `allocator/engine_columns.py`); a pick
  over them is one compiled pass (`_pick_loop`), which also retires the frameworks that fit
  nowhere, drawing ties from the run's generator exactly where the generic pass draws.
  Where few frameworks x agents are in a run (the churn tick) the sorted walk over a kept
  fit matrix remains.
- Best fit is a compiled scan (`CompiledScan` in `allocator/policy/bestfit_index.py`) over
  the agents' kept halves of H: the same H, feasibility and draws as `best_fit_scan`, no
  (F, A) matrix to build.
- A run over agents where no framework has constraints and no filter holds reads its
  eligibility as a broadcast view (no (F, agents) array).

What is left (issue 28):

- TSF (its y_n kept across runs, `allocator/engine_alone.py`), the joint, FUGA and random
  selections run over the changed agents too. Waste ties with best or first fit, per-agent
  criteria at role level (several roles) with best or first fit and Mesos role pools
  (`Engine.pooled_attribute`) still take the dense snapshot per run, or a generic pick
  (`allocator/engine_columns.py` says why each; `--variants` measures them).
- Constrained or filtered runs still build the (frameworks x agents) eligibility array.
"""
TARGETS = {(10_000, 1_000): (5.0, None), (50_000, 5_000): (50.0, 2 * 1024**3)}


def packing(capacity: np.ndarray, demand: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """(pairs, 3) rows (framework, agent, tasks): each agent packed with whole tasks of
    frameworks drawn at random, a few rounds, so that little room is left."""
    residual = capacity.copy()
    rows = []
    agents = np.arange(len(capacity))
    for _ in range(6):
        chosen = rng.integers(len(demand), size=len(capacity))
        d = demand[chosen]
        whole = np.floor((residual / d).min(axis=1) * 0.999).astype(np.int64)
        whole = np.maximum(whole, 0)
        residual -= whole[:, None] * d
        held = whole > 0
        rows.append(np.column_stack([chosen[held], agents[held], whole[held]]))
    return np.concatenate(rows)


def cpu_ms(step) -> tuple[float, object]:  # type: ignore[no-untyped-def]
    began = time.process_time()
    out = step()
    return (time.process_time() - began) * 1e3, out


def run_case(agents: int, tenants: int, scheduler: str, engine_name: str, ticks: int) -> dict:
    """Build, settle and time `ticks` churn ticks in this process."""
    from allocator.engine_config import EngineConfig
    from allocator.workloads import google_agent_capacities, random_demands

    module = importlib.import_module(ENGINES[engine_name])
    rng = np.random.default_rng(0)
    capacity = google_agent_capacities(agents, rng)
    demand = random_demands(tenants, rng)
    started = time.process_time()
    name, _, settings = scheduler.partition("/")
    changes = dict(item.split("=", 1) for item in settings.split(",") if item)
    engine = module.Engine(("cpus", "mem"), EngineConfig.mesos(name, seed=0, **changes))
    for i, (cpus, mem) in enumerate(capacity.tolist()):
        engine.add_agent(f"a{i}", {"cpus": cpus, "mem": mem})
    for n, (cpus, mem) in enumerate(demand.tolist()):
        engine.register(f"t{n}", {"cpus": cpus, "mem": mem}, target=1e9)
    placed: dict[tuple[int, int], int] = {}
    for n, i, tasks in packing(capacity, demand, rng).tolist():
        engine.adopt(f"t{n}", f"a{i}", tasks)
        placed[(n, i)] = placed.get((n, i), 0) + tasks
    settle_ms, settled = cpu_ms(lambda: engine.allocate(0.0))
    for g in settled:
        key = (int(g.framework[1:]), int(g.agent[1:]))
        placed[key] = placed.get(key, 0) + g.tasks
    setup_s = time.process_time() - started
    pairs = sorted(placed)
    tick_ms = []
    granted = []
    for t in range(ticks):
        now = float(engine.interval * (t + 1))
        ends = [pairs[k] for k in rng.choice(len(pairs), CHURN_TASKS, replace=False)]

        def tick(ends: list[tuple[int, int]] = ends, now: float = now) -> list:
            for n, i in ends:
                engine.release(f"t{n}", f"a{i}", 1)
            return engine.allocate(now)

        ms, grants = cpu_ms(tick)
        tick_ms.append(ms)
        granted.append(len(grants))
        for n, i in ends:
            placed[(n, i)] -= 1
        for g in grants:
            key = (int(g.framework[1:]), int(g.agent[1:]))
            placed[key] = placed.get(key, 0) + g.tasks
        pairs = sorted(k for k, v in placed.items() if v > 0)
    return {
        "engine": engine_name,
        "agents": agents,
        "tenants": tenants,
        "scheduler": scheduler,
        "running_tasks": int(sum(placed.values())),
        "setup_cpu_s": round(setup_s, 2),
        "settle_run_cpu_ms": round(settle_ms, 1),
        "ticks": ticks,
        "tick_cpu_ms_median": round(statistics.median(tick_ms), 3),
        "tick_cpu_ms_max": round(max(tick_ms), 3),
        "grants_per_tick": round(statistics.mean(granted), 1),
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def in_child(agents: int, tenants: int, scheduler: str, engine_name: str, ticks: int) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_engine", "--one",
               f"{agents}x{tenants}", "--scheduler", scheduler, "--engine", engine_name,
               "--ticks", str(ticks)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        return {"engine": engine_name, "agents": agents, "tenants": tenants,
                "scheduler": scheduler, "error": done.stderr.strip()[-500:]}  # fmt: skip
    return json.loads(done.stdout)


def table(rows: list[dict]) -> str:
    lines = [
        "| agents x tenants | scheduler | engine | running tasks | tick CPU ms (median) "
        "| tick CPU ms (max) | grants/tick | settle run CPU ms | peak RSS MiB |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        size = f"{r['agents']:,} x {r['tenants']:,}"
        if "error" in r or "skipped" in r:
            why = r.get("skipped") or r["error"].splitlines()[-1]
            lines.append(f"| {size} | {r['scheduler']} | {r['engine']} | {why} |||||")
            continue
        lines.append(
            f"| {size} | {r['scheduler']} | {r['engine']} | {r['running_tasks']:,} "
            f"| {r['tick_cpu_ms_median']} | {r['tick_cpu_ms_max']} | {r['grants_per_tick']} "
            f"| {r['settle_run_cpu_ms']} | {r['peak_rss_mib']} |"
        )
    return "\n".join(lines)


def verdicts(rows: list[dict]) -> list[str]:
    out = []
    for (agents, tenants), (ms, rss) in TARGETS.items():
        for r in rows:
            if (r["agents"], r["tenants"]) != (agents, tenants) or r["engine"] != "current":
                continue
            if "error" in r:
                out.append(f"- {agents:,} x {tenants:,} {r['scheduler']}: failed")
                continue
            ok = r["tick_cpu_ms_median"] <= ms and (rss is None or r["peak_rss_mib"] * 2**20 <= rss)
            need = f"tick <= {ms} ms" + ("" if rss is None else f", RSS <= {rss / 2**30:g} GiB")
            out.append(
                f"- {agents:,} x {tenants:,} {r['scheduler']}: tick {r['tick_cpu_ms_median']} ms, "
                f"{r['peak_rss_mib']} MiB ({need}): {'met' if ok else 'NOT met'}"
            )
    return out


@click.command()
@click.option("--sizes", default=",".join(f"{a}x{t}" for a, t in SIZES), show_default=True)
@click.option("--scheduler", "schedulers", multiple=True, default=SCHEDULERS, show_default=True)
@click.option("--engine", "engines", multiple=True, default=("reference", "current"))
@click.option("--variants", is_flag=True, help="also the VARIANTS configurations")
@click.option("--ticks", default=20, show_default=True)
@click.option("--one", default=None, help="AxT: run one case in this process, print JSON")
@click.option("--no-write", is_flag=True, help="print the table, write no results")
def main(
    sizes: str, schedulers: tuple[str, ...], engines: tuple[str, ...], variants: bool,
    ticks: int, one: str | None, no_write: bool,
) -> None:  # fmt: skip
    if one is not None:
        agents, tenants = map(int, one.split("x"))
        print(json.dumps(run_case(agents, tenants, schedulers[0], engines[0], ticks)))
        return
    if variants:
        schedulers = (*schedulers, *VARIANTS)
    rows = []
    for size in sizes.split(","):
        agents, tenants = map(int, size.split("x"))
        for scheduler in schedulers:
            for engine_name in engines:  # back to back: before, then after
                if engine_name == "reference" and agents * tenants > REFERENCE_MAX_PAIRS:
                    rows.append({"engine": engine_name, "agents": agents, "tenants": tenants,
                                 "scheduler": scheduler,
                                 "skipped": "not run: dense (F, A) int64 matrices"})  # fmt: skip
                    continue
                row = in_child(agents, tenants, scheduler, engine_name, ticks)
                rows.append(row)
                print(json.dumps(row), file=sys.stderr)
    text = (
        "# Online engine: churn tick and memory (issue 28)\n\n"
        f"Machine: {platform.node()}, python {platform.python_version()}, "
        f"{os.cpu_count()} cores shared with other work (CPU seconds of the benchmark "
        "process, not wall time). `python -m benchmarks.bench_engine`.\n\n"
        "Agents from the Google server mix, tenants with random demands, all in one role, "
        f"`EngineConfig.mesos(scheduler)`; running tasks adopted, one settling run, then {ticks} "
        f"churn ticks of {CHURN_TASKS} tasks ending and one allocation run each. `reference` is "
        "the dense engine before issue 28 (`tests/support/reference_engine.py`), `current` "
        "the incremental one, run back to back.\n\n"
        + table(rows)
        + "\n\nTargets (issue 28):\n\n"
        + "\n".join(verdicts(rows))
        + "\n"
        + NOTES
    )
    print(text)
    if not no_write:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "engine.json").write_text(json.dumps(rows, indent=2) + "\n")
        (RESULTS / "engine.md").write_text(text + kept_notes(RESULTS / "engine.md"))


if __name__ == "__main__":
    main()
