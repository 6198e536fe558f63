"""The phases of every job of a `fairbroker compare` run (make run), read from its Spark
drivers' and executors' logs: what the simulator's job model (allocator.scenarios.batch.
JobModel) is calibrated from. Run: `python -m benchmarks.calibrate_live results/run`.

With `--scenario FILE`, the job models the runs suggest and the simulator's makespan with
them beside each live one (docs/emulation.md, "Calibration"): startup_s is when the start
barrier opened the cluster (mean of the runs), serial_s the tail's mean over every job of
the group in both runs, work stays the emulated work, and start_cpu_s, the CPU-seconds an
executor's start costs on the `host:`'s cores, is fitted to the executors' own start-up
times, not to the makespans: every executor's launch (its working directory's stdout,
created at launch) and its first task's end less `task_s` (its stderr), replayed through
the simulator's processor sharing (allocator.sim.host) at each candidate value, least
squares.

Per job, in seconds (Spark's log stamps have 1 s resolution):
- startup: submitted until the driver registers with the broker (`startup_s`);
- executor start: registration until each executor registered with the driver, median over
  the job's executors granted at once (`executor_start_s` under this contention);
- first task: the first executor's registration until its first task finished, beyond the
  emulated `task_s` (the Python worker's start, part of `executor_start_s` in the model);
- tasks: the first task started until the last finished;
- tail: the last task finished until the driver exited (`serial_s`).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

STAMP = r"^(\d\d/\d\d/\d\d \d\d:\d\d:\d\d) "
REGISTERING = re.compile(STAMP + r".*fairbroker: registering tenant", re.MULTILINE)
EXECUTOR = re.compile(STAMP + r".*Registered executor", re.MULTILINE)
STARTED = re.compile(STAMP + r".*Starting task", re.MULTILINE)
FINISHED = re.compile(STAMP + r".*Finished task", re.MULTILINE)


def _seconds(stamp: str) -> float:
    moment = datetime.strptime(stamp, "%y/%m/%d %H:%M:%S").replace(tzinfo=UTC)
    return moment.timestamp()


def job_phases(job: dict, started_at: float) -> dict[str, float | None]:
    text = Path(job["log"]).read_text(errors="replace")
    submitted = started_at + job["submitted_s"]
    ended = started_at + job["ended_s"]
    registered = [_seconds(s) for s in REGISTERING.findall(text)]
    executors = sorted(_seconds(s) for s in EXECUTOR.findall(text))
    starts = [_seconds(s) for s in STARTED.findall(text)]
    finishes = [_seconds(s) for s in FINISHED.findall(text)]
    if not registered or not executors or not starts or not finishes:
        return {"job_s": job["duration_s"]}
    first_wave = [t - registered[0] for t in executors if t - executors[0] < 30]
    return {
        "job_s": job["duration_s"],
        "startup_s": registered[0] - submitted,
        "executor_start_s": statistics.median(first_wave),
        "executors": len(executors),
        "first_task_done_s": min(finishes) - executors[0],
        "tasks_s": max(finishes) - min(starts),
        "tail_s": ended - max(finishes),
    }


def run_phases(result: dict) -> dict[str, dict[str, float]]:
    """Mean phases per group of one live run's result.json."""
    by_group: dict[str, list[dict[str, float | None]]] = {}
    for job in result["job_list"]:
        by_group.setdefault(job["group"], []).append(job_phases(job, result["started_at"]))
    means = {}
    for group, jobs in by_group.items():
        keys = [k for k in jobs[0] if all(j.get(k) is not None for j in jobs)]
        means[group] = {k: round(statistics.mean(float(j[k]) for j in jobs), 1) for k in keys}
    return means


MODEL_PHASES = {"startup_s": "startup_s", "executor_start_s": "executor_start_s",
                "serial_s": "tail_s"}  # fmt: skip


APP_ID = re.compile(r"registering tenant (\S+)")
EXECUTOR_REGISTERED = re.compile(STAMP + r".*Successfully registered with driver", re.MULTILINE)
EXECUTOR_FINISHED = re.compile(STAMP + r".*Executor: Finished task", re.MULTILINE)


def executor_starts(run: dict, task_s: dict[str, float]) -> list[dict[str, float | None]]:
    """Every executor of one live run, in seconds from the run's start: `launched`, `ready`
    (its first task's end less the group's task_s; None if it ran no task) and `left`
    (when it stopped competing for the CPU without a task done: registered, or its job's
    end). Executors live in the run's broker/agents/AGENT/APP/executor-N/."""
    result = run["result"]
    started_at = result["started_at"]
    jobs = {}
    for job in result["job_list"]:
        found = APP_ID.search(Path(job["log"]).read_text(errors="replace"))
        if found:
            jobs[found.group(1)] = job
    base = Path(result["job_list"][0]["log"]).parent.parent / "broker" / "agents"
    out: list[dict[str, float | None]] = []
    for directory in sorted(base.glob("*/*/executor-*")):
        job = jobs.get(directory.parent.name)
        if job is None or not (directory / "stdout").exists():
            continue
        launched = (directory / "stdout").stat().st_mtime - started_at
        text = (directory / "stderr").read_text(errors="replace")
        finished = EXECUTOR_FINISHED.search(text)
        registered = EXECUTOR_REGISTERED.search(text)
        ready = None
        if finished:
            ready = _seconds(finished.group(1)) - started_at - task_s.get(job["group"], 0.0)
        left = job["ended_s"]
        if registered and not finished:
            left = min(left, _seconds(registered.group(1)) - started_at)
        out.append({"group": job["group"], "launched": launched, "ready": ready, "left": left})
    return out


def replay_starts(executors: list[dict], cpu_s: float, cores: float) -> np.ndarray:
    """Each executor's ready time under processor sharing of `cores` among the executors
    starting at once, each needing `cpu_s` (allocator.sim.host); an executor that ran no task
    leaves the host at its `left` time. NaN for those."""
    from allocator.sim.host import StartingExecutors

    host = StartingExecutors(cores)
    events = sorted((e["launched"], i) for i, e in enumerate(executors))
    leaves = {i: e["left"] for i, e in enumerate(executors) if e["ready"] is None}
    ready = np.full(len(executors), np.nan)
    pending = list(events)
    while pending or host.keys:
        next_launch = pending[0][0] if pending else np.inf
        next_leave = min((leaves[k] for k in host.keys if k in leaves), default=np.inf)
        next_done = host.next_done()
        now = min(next_launch, next_leave, next_done)
        if now == next_done:
            for key in host.pop_done(now):
                ready[key] = now  # type: ignore[index]
        elif now == next_leave:
            for key in [k for k in host.keys if leaves.get(k, np.inf) <= now]:
                host.remove(key, now)
        else:
            _, index = pending.pop(0)
            host.add(index, cpu_s, now)
    for index in leaves:
        ready[index] = np.nan
    return ready


def fit_start_cpu(data: dict, task_s: dict[str, float], cores: float) -> tuple[float, float]:
    """start_cpu_s minimizing the squared error of every executor's ready time over every
    run (grid of 0.1 s), and the root-mean-square error there, in seconds."""
    runs = [executor_starts(run, task_s) for run in data["runs"]]
    observed = [np.array([np.nan if e["ready"] is None else e["ready"] for e in r]) for r in runs]
    best = (np.inf, 0.0)
    for cpu_s in np.arange(0.5, 60.0, 0.1):
        errors = [replay_starts(r, cpu_s, cores) - o for r, o in zip(runs, observed, strict=True)]
        squared = np.concatenate([e[np.isfinite(e)] ** 2 for e in errors])
        best = min(best, (float(squared.mean()), round(float(cpu_s), 1)))
    return best[1], float(np.sqrt(best[0]))


def suggested_models(data: dict) -> dict[str, dict[str, float]]:
    """Per group, each job-model phase's mean over the group's jobs in every run."""
    pooled: dict[str, dict[str, list[float]]] = {}
    for run in data["runs"]:
        for job in run["result"]["job_list"]:
            phases = job_phases(job, run["result"]["started_at"])
            for field, phase in MODEL_PHASES.items():
                if phases.get(phase) is not None:
                    pooled.setdefault(job["group"], {}).setdefault(field, []).append(
                        float(phases[phase])  # type: ignore[arg-type]
                    )
    models = {
        group: {field: round(statistics.mean(values), 1) for field, values in fields.items()}
        for group, fields in pooled.items()
    }
    # Behind the start barrier a job's executors can come only once the cluster opened.
    opened = [r["cluster_opened_s"] for r in data["runs"] if r.get("cluster_opened_s")]
    if opened:
        for model in models.values():
            model["startup_s"] = round(statistics.mean(opened), 1)
    return models


def _with_models(spec, models: dict[str, dict[str, float]]):
    groups = []
    for group in spec.groups:
        job = group.job.model_copy(update=models.get(group.name, {}))
        groups.append(group.model_copy(update={"job": job}))
    return spec.model_copy(update={"groups": groups})


def _predicted(spec, data: dict, seeds: int) -> list[float]:
    from allocator.batch.compare import RunConfig, predict
    from allocator.engine_config import EngineConfig

    runs = [RunConfig(r["scheduler"], r["mode"]) for r in data["runs"]]
    engine = EngineConfig.mesos("drf").with_default_role_weights(spec.role_weights())
    return [p["makespan_s"] for p in predict(spec, engine, runs, seeds)]


def check_models(data: dict, scenario: Path, seeds: int) -> None:
    from allocator.scenarios.batch import load_batch

    spec = load_batch(scenario)
    cores = spec.host.cores if spec.host is not None else 1.0
    task_s = {g.name: float(getattr(g.app, "task_s", 0.0)) for g in spec.groups}
    models = suggested_models(data)
    fitted, rms = fit_start_cpu(data, task_s, cores)
    print(f"  start_cpu_s fitted to every executor's start-up on {cores:g} cores: {fitted:g} "
          f"CPU-s (rms error {rms:.1f} s over the executors' ready times)")  # fmt: skip
    models = {
        g: {**{k: v for k, v in m.items() if k != "executor_start_s"}, "executor_start_s": 0.0,
            "start_cpu_s": fitted}
        for g, m in models.items()
    }  # fmt: skip
    spec = _with_models(spec, models)
    for group in spec.groups:
        print(f"  {group.name}: job: {group.job.model_dump(exclude={'jitter'})}")
    for run, predicted in zip(data["runs"], _predicted(spec, data, seeds), strict=True):
        error = predicted / run["makespan_s"] - 1
        print(f"  {run['scheduler']}/{run['mode']}: live {run['makespan_s']:.1f} s, "
              f"simulator {predicted:.1f} s ({error * 100:+.1f} %)")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="the --out directory of fairbroker compare")
    parser.add_argument("--scenario", type=Path, help="suggest its job models and check them")
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    data = json.loads((args.run_dir / "compare.json").read_text())
    predicted = {(p["scheduler"], p["mode"]): p for p in data["prediction"]}
    for run in data["runs"]:
        label = (run["scheduler"], run["mode"])
        p = predicted.get(label, {})
        print(f"{'/'.join(label)}: live makespan {run['makespan_s']:.1f} s, predicted "
              f"{p.get('makespan_s', float('nan')):.1f} s, executors peak "
              f"{run['executors_peak']}, time-avg {run['executors_mean']}")  # fmt: skip
        for group, phases in run_phases(run["result"]).items():
            print(f"  {group:<10} " + ", ".join(f"{k} {v:g}" for k, v in phases.items()))
    if args.scenario is not None:
        print("suggested job models (means over both runs):")
        check_models(data, args.scenario, args.seeds)


if __name__ == "__main__":
    main()
