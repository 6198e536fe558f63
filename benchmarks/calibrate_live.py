"""The phases of every job of a `fairbroker compare` run (make run), read from its Spark
drivers' logs: what the simulator's job model (allocator.scenarios.batch.JobModel) is
calibrated from. Run: `python -m benchmarks.calibrate_live results/run`.

With `--scenario FILE`, the job models the runs suggest and the simulator's makespan with
them beside each live one: startup_s is when the start barrier opened the cluster (mean of
the runs; without a barrier, the drivers' mean registration time), serial_s the tail's mean
over every job of the group in both runs, work stays the emulated work, and executor_start_s
is fitted (one value for both groups) so that the predicted makespans of the runs sum to the
live ones.

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


def fit_executor_start(spec, data: dict, seeds: int, models: dict) -> float:
    """One executor_start_s for every group such that the predicted makespans sum to the
    live ones (bisection; the predicted makespan grows with it). On two real cores it
    stands for everything an executor waits for before its share of the work flows: its JVM
    and its Python worker starting among all the others, and the tasks' overheads."""
    live = sum(r["makespan_s"] for r in data["runs"])
    low, high = 0.0, 600.0
    for _ in range(12):
        middle = (low + high) / 2
        trial = {g: {**m, "executor_start_s": middle} for g, m in models.items()}
        if sum(_predicted(_with_models(spec, trial), data, seeds)) < live:
            low = middle
        else:
            high = middle
    return round((low + high) / 2, 1)


def check_models(data: dict, scenario: Path, seeds: int) -> None:
    from allocator.scenarios.batch import load_batch

    spec = load_batch(scenario)
    models = suggested_models(data)
    fitted = fit_executor_start(spec, data, seeds, models)
    print(f"  executor_start_s fitted to both live makespans: {fitted:g} s (from the logs: "
          + ", ".join(f"{g} {m.get('executor_start_s', '-')}" for g, m in models.items())
          + " s to register)")  # fmt: skip
    models = {g: {**m, "executor_start_s": fitted} for g, m in models.items()}
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
