"""One batch scenario run live twice on the embedded cluster, under Mesos's default (DRF,
oblivious: an agent's whole remainder offered to one tenant) and under rPS-DSF
characterized, side by side with the simulator's prediction of both (`fairbroker compare`,
`make run`). The result is compare.json:

    {"batch": PATH, "runs": [{"scheduler", "mode", "makespan_s", "executors_peak",
     "jobs_failed", ...}, ...], "prediction": [{"scheduler", "mode", "makespan_s", ...}, ...]}

Each run starts its own broker on the scenario's agents and stops it, with every executor it
launched, before the next run starts or an error or Ctrl-C propagates.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from google.protobuf import json_format

from allocator.batch.gate import StartGate
from allocator.batch.result import LiveBatchResult
from allocator.batch.runner import SubmitFunction, run_live_batch
from allocator.engine_config import EngineConfig
from allocator.scenarios.batch import BatchSpec
from allocator.sim.stats import estimate
from allocator.sim.whatif import run_whatif


@dataclass(frozen=True)
class RunConfig:
    scheduler: str
    mode: str

    @property
    def label(self) -> str:
        return f"{self.scheduler}/{self.mode}"

    @property
    def slug(self) -> str:
        return f"{self.scheduler}-{self.mode}"


MESOS_DEFAULT = RunConfig("drf", "oblivious")
CANDIDATE = RunConfig("rpsdsf", "characterized")
RUNS = (MESOS_DEFAULT, CANDIDATE)
PREDICTION_SEEDS = 3
GATE_TIMEOUT_S = 180.0


def run_live(
    spec: BatchSpec,
    engine: EngineConfig,
    workdir: Path,
    *,
    job_timeout: float,
    progress: bool,
    submit: SubmitFunction | None = None,
    gate_timeout: float = GATE_TIMEOUT_S,
) -> tuple[LiveBatchResult, float | None]:
    """The batch through a broker of its own on the scenario's agents, under `engine`, with
    the cluster held back until the first wave's drivers have registered (allocator.batch.
    gate); the result and when the cluster opened (seconds after the start)."""
    from allocator.broker.server import BrokerOptions, BrokerService
    from allocator.scenarios.cluster_file import agent_infos

    agents = agent_infos(spec.agents)
    options = BrokerOptions(
        engine=engine, http_port=0, grpc_port=0, state_dir=workdir / "broker", agents=agents
    )  # fmt: skip
    service = BrokerService(options).start()
    # The first wave: each submission queue's first job.
    gate = StartGate(service.broker, sum(g.queues for g in spec.groups), gate_timeout)
    try:

        def snapshot() -> dict[str, Any]:
            return json_format.MessageToDict(service.broker.allocation())

        gate.close()
        result = run_live_batch(
            spec,
            broker=service.http_address,
            snapshot=snapshot,
            workdir=workdir,
            oblivious=engine.mode == "oblivious",
            progress=progress,
            job_timeout=job_timeout,
            submit=submit,
        )
        return result, gate.opened_after
    finally:
        gate.stop()
        service.stop(kill_executors=True)


def run_summary(
    run: RunConfig, result: LiveBatchResult, opened_after: float | None = None
) -> dict[str, Any]:
    """One entry of compare.json's `runs`: the headline numbers, then the full result."""
    full = result.to_json()
    series = result.series
    return {
        "scheduler": run.scheduler,
        "mode": run.mode,
        "makespan_s": full["makespan_s"],
        "cluster_opened_s": None if opened_after is None else round(opened_after, 2),
        "executors_peak": series.executors_peak if series is not None else None,
        "executors_mean": round(series.executors_average(), 2) if series is not None else None,
        "jobs": full["jobs"],
        "jobs_failed": full["failures"],
        "jct_by_group_s": {g: v["mean"] for g, v in full["jct_by_group_s"].items()},
        "allocated": full["allocated"],
        "fairness": full["fairness"],
        "result": full,
    }


def predict(
    spec: BatchSpec, base: EngineConfig, runs: Sequence[RunConfig], seeds: int
) -> list[dict[str, Any]]:
    """The simulator's prediction for each run's scheduler and mode (the scenario's job
    models, `seeds` paired seeds): mean makespan with its 95 % half-interval, per-group mean
    JCT, time-averaged allocation and fairness."""
    predicted = []
    for run in runs:
        config = run_whatif(spec, [run.scheduler], [run.mode], seeds, base).configs[0]
        makespan = estimate(config.makespan)
        predicted.append({
            "scheduler": run.scheduler,
            "mode": run.mode,
            "makespan_s": round(makespan.mean, 3),
            # None with one seed: no interval
            "makespan_half_s": round(makespan.half, 3) if np.isfinite(makespan.half) else None,
            "jct_by_group_s": {
                g: round(float(np.mean(v)), 3) for g, v in config.jct_mean.items()
            },
            "allocated": {r: round(float(np.mean(v)), 4) for r, v in config.allocated.items()},
            "fairness": round(float(np.mean(config.fairness)), 4),
        })  # fmt: skip
    return predicted


SANDBOX_NOTE = (
    "SANDBOX OFF (once for both runs): compare's executors run as this user beside the "
    "brokers it starts for this batch alone, on loopback, each stopped with every executor "
    "after its run; the cluster is emulated on this one machine and the apps are the ones "
    "the scenario names, not a tenant's code. A broker serving tenants runs them in the "
    "sandbox (fairbroker serve --sandbox auto, docs/security.md)."
)


class _NoSandboxWarning(logging.Filter):
    """Drops the embedded cluster's per-start SANDBOX OFF warning: compare says it once."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("SANDBOX OFF")


@contextmanager
def _sandbox_said_once(say: Callable[[str], None]) -> Iterator[None]:
    say(SANDBOX_NOTE)
    logger = logging.getLogger("allocator.backends.local")
    quiet = _NoSandboxWarning()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def run_compare(
    spec: BatchSpec,
    batch_path: str,
    base: EngineConfig,
    workdir: Path,
    *,
    job_timeout: float = 600,
    progress: bool = True,
    runs: Sequence[RunConfig] = RUNS,
    seeds: int = PREDICTION_SEEDS,
    submit: SubmitFunction | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Every run of `runs` live, one after another (workdir/<scheduler>-<mode>/, with the
    run's result.json), then the prediction; compare.json's content."""
    engine = base.with_default_role_weights(spec.role_weights())
    summaries = []
    with _sandbox_said_once(say):
        for run in runs:
            say(f"fairbroker: {spec.name}: live run under {run.label} ({len(spec.agents)} agents)")
            load_before = os.getloadavg()[0]
            result, opened_after = run_live(
                spec,
                engine.replace(scheduler=run.scheduler, mode=run.mode),
                workdir / run.slug,
                job_timeout=job_timeout,
                progress=progress,
                submit=submit,
            )
            summary = run_summary(run, result, opened_after)
            # the machine's other work slows every start-up (docs/emulation.md): say how busy
            summary["machine_load"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
            path = workdir / run.slug / "result.json"
            path.write_text(json.dumps(summary["result"], indent=2))
            summaries.append(summary)
    say(f"fairbroker: {spec.name}: the simulator's prediction ({seeds} seeds)")
    return {
        "batch": batch_path,
        "runs": summaries,
        "prediction": predict(spec, engine, runs, seeds),
    }


def _number(value: float | None, digits: int = 1, scale: float = 1.0) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def render(data: dict[str, Any], emulation: str = "") -> str:
    """The live runs side by side, each beside the simulator's prediction for it."""
    runs, predicted = data["runs"], data["prediction"]
    by_config = {(p["scheduler"], p["mode"]): p for p in predicted}
    groups = list(runs[0]["jct_by_group_s"]) if runs else []
    width = max(24, *(len(f"{r['scheduler']}/{r['mode']}") + 2 for r in runs))
    header = "".join(f"{r['scheduler'] + '/' + r['mode']:>{width}}" for r in runs)
    rows: list[tuple[str, list[str]]] = [
        ("makespan s (live)", [_number(r["makespan_s"]) for r in runs]),
        (
            "makespan s (simulator)",
            [
                _predicted(p) if p else "-"
                for p in (by_config.get((r["scheduler"], r["mode"])) for r in runs)
            ],
        ),
        ("simulator vs live", [_error(r, by_config) for r in runs]),
    ]
    for g in groups:
        rows.append((f"{g} mean JCT s", [_number(r["jct_by_group_s"].get(g)) for r in runs]))
    rows += [
        ("executors peak", [str(r["executors_peak"]) for r in runs]),
        ("executors time-avg", [_number(r["executors_mean"]) for r in runs]),
        *[
            (f"{res} allocated %", [_number((r["allocated"] or {}).get(res), 1, 100) for r in runs])
            for res in ("cpus", "mem")
        ],
        ("fairness (Jain)", [_number(r["fairness"], 2) for r in runs]),
        ("jobs failed", [f"{r['jobs_failed']} of {r['jobs']}" for r in runs]),
        ("machine load before/after", [_load(r.get("machine_load")) for r in runs]),
    ]
    lines = [f"{data['batch']}: live, side by side", f"{'':<24}{header}"]
    lines += [f"{name:<24}" + "".join(f"{c:>{width}}" for c in cells) for name, cells in rows]
    verdict = _verdict(runs)
    if verdict:
        lines.append(verdict)
    if emulation:
        lines.append(emulation)
    return "\n".join(lines)


def _load(load: list[float] | None) -> str:
    return "-" if not load else " / ".join(f"{x:.1f}" for x in load)


def _predicted(p: dict[str, Any]) -> str:
    half = p["makespan_half_s"]
    return _number(p["makespan_s"]) + ("" if half is None else f" +- {_number(half)}")


def _error(run: dict[str, Any], by_config: dict[tuple[str, str], dict[str, Any]]) -> str:
    predicted = by_config.get((run["scheduler"], run["mode"]))
    if predicted is None or not run["makespan_s"]:
        return "-"
    return f"{(predicted['makespan_s'] / run['makespan_s'] - 1) * 100:+.1f} %"


def _verdict(runs: list[dict[str, Any]]) -> str:
    """The candidate's makespan against Mesos's default's, when both ran."""
    by = {(r["scheduler"], r["mode"]): r for r in runs}
    base = by.get((MESOS_DEFAULT.scheduler, MESOS_DEFAULT.mode))
    ours = by.get((CANDIDATE.scheduler, CANDIDATE.mode))
    if base is None or ours is None or not base["makespan_s"]:
        return ""
    gain = 1 - ours["makespan_s"] / base["makespan_s"]
    word = "sooner" if gain >= 0 else "later"
    return (
        f"{CANDIDATE.label} finished the batch {abs(gain) * 100:.1f} % {word} than "
        f"{MESOS_DEFAULT.label} (Mesos's default), placing {ours['executors_peak']} executors "
        f"at peak against {base['executors_peak']}"
    )


def emulation_note(spec: BatchSpec) -> str:
    """What the batch emulates, with its parameters (docs/emulation.md)."""
    parts = []
    for group in spec.groups:
        app = group.app
        task_s = getattr(app, "task_s", 0.0)
        if app is None or not task_s:
            continue
        tasks = app.partitions
        parts.append(f"{group.name}: {tasks} tasks x {task_s:g} s" if tasks else
                     f"{group.name}: tasks of {task_s:g} s")  # fmt: skip
    if not parts:
        return ""
    return (
        "emulated work (docs/emulation.md): each task sleeps out a fixed wall time per task "
        f"slot ({'; '.join(parts)}), so a job runs as fast as the executors and cores it holds "
        "on the emulated agents; the answers (Pi, word counts) are real and checked; CPUs of "
        "the agents are virtual"
    )
