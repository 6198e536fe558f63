"""The phases of every job of a `fairbroker compare` run (make run), read from its Spark
drivers' logs: what the simulator's job model (allocator.scenarios.batch.JobModel) is
calibrated from. Run: `python -m benchmarks.calibrate_live results/run`.

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="the --out directory of fairbroker compare")
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


if __name__ == "__main__":
    main()
