"""Calibrate the simulator's job model T(n) = startup + executor start + serial + work / n
from real Spark runs of the shipped Pi and WordCount apps through the broker.

Each app of benchmarks/scenarios/spark-small.yaml runs alone (one driver at a time, so the
2-core host is not shared) with n = 1 and n = 3 executors, `--rounds` times each:
- startup_s: spark-submit until the driver registers with the broker;
- executor_start_s: grant until the executor registered with its driver (the broker's log);
- work and serial_s: from the two job times, T(1) - T(3) = work (1 - 1/3) and the rest.

Writes benchmarks/results/calibration.{json,md}. Run: `python -m benchmarks.calibrate_jobs`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from allocator.batch.apps import prepare_apps
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.engine_config import EngineConfig
from allocator.scenarios.batch import load_batch
from allocator.scenarios.cluster_file import agent_infos
from spark_shim.submit import spark_submit_command

SCENARIO = Path(__file__).parent / "scenarios" / "spark-small.yaml"
RESULTS = Path(__file__).parent / "results"
WIDTHS = (1, 3)


def _watch_registration(service: BrokerService, seen: dict, stop: threading.Event) -> None:
    while not stop.wait(0.05):
        if service.broker.tenants and "at" not in seen:
            seen["at"] = time.monotonic()


def run_once(service: BrokerService, group, app, executors: int, workdir: Path) -> dict:
    job = f"{group.name}-n{executors}-{time.monotonic_ns()}"
    conf = {**app.job_conf(job), "spark.executor.instances": str(executors)}
    plan = spark_submit_command(app.app_args(job), broker=service.http_address, conf=conf)
    seen: dict = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_watch_registration, args=(service, seen, stop))
    watcher.start()
    began = time.monotonic()
    try:
        done = subprocess.run(
            plan.argv, env={**plan.env, "PYSPARK_PYTHON": sys.executable},
            capture_output=True, timeout=600, cwd=workdir,
        )  # fmt: skip
    finally:
        stop.set()
        watcher.join()
    ended = time.monotonic()
    ok, detail = app.check(done.stdout.decode(errors="replace"), done.returncode)
    if not ok:
        raise RuntimeError(f"{group.name} with {executors} executors: {detail}")
    starts = list(service.broker.registration_seconds)
    service.broker.registration_seconds.clear()
    return {
        "executors": executors,
        "job_s": ended - began,
        "startup_s": seen.get("at", ended) - began,
        "executor_start_s": statistics.median(starts) if starts else None,
    }


def fit(runs: list[dict]) -> dict:
    """The job model's parameters from runs at the two widths."""
    by_width = {
        n: statistics.median(r["job_s"] for r in runs if r["executors"] == n) for n in WIDTHS
    }
    (n1, t1), (n2, t2) = sorted(by_width.items())
    # On a 2-core host more executors can mean a slower job (their JVMs start together):
    # the work term is then below the noise and taken as 0.
    work = max((t1 - t2) / (1 / n1 - 1 / n2), 0.0)
    startup = statistics.median(r["startup_s"] for r in runs)
    starts = [r["executor_start_s"] for r in runs if r["executor_start_s"] is not None]
    executor_start = statistics.median(starts)
    serial = t1 - startup - executor_start - work / n1
    return {
        "job_s_by_executors": {str(n): round(t, 2) for n, t in by_width.items()},
        "work": round(work, 1),
        "startup_s": round(startup, 1),
        "executor_start_s": round(executor_start, 1),
        "serial_s": round(max(serial, 0.0), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--refit", action="store_true", help="Refit the runs in results/calibration.json."
    )
    args = parser.parse_args()
    if args.refit:
        out = json.loads((RESULTS / "calibration.json").read_text())
        for data in out["groups"].values():
            data["model"] = fit(data["runs"])
        args.rounds = out["rounds"]
        write(out, args.rounds)
        return
    spec = load_batch(SCENARIO)
    out: dict = {"scenario": str(SCENARIO.name), "rounds": args.rounds, "groups": {}}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        apps = prepare_apps(spec, workdir)
        options = BrokerOptions(
            engine=EngineConfig("rpsdsf", interval=1.0),
            http_port=0,
            grpc_port=0,
            state_dir=workdir / "broker",
            agents=agent_infos(spec.agents),
        )
        with BrokerService(options) as service:
            for group in spec.groups:
                runs = [
                    run_once(service, group, apps[group.name], n, workdir)
                    for _ in range(args.rounds)
                    for n in WIDTHS
                ]
                out["groups"][group.name] = {"runs": runs, "model": fit(runs)}
                print(group.name, out["groups"][group.name]["model"], flush=True)
    write(out, args.rounds)


def write(out: dict, rounds: int) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "calibration.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [
        "# Job-model calibration from real Spark runs",
        "",
        f"`python -m benchmarks.calibrate_jobs --rounds {rounds}`: each app of "
        "spark-small.yaml alone through the broker on the embedded cluster, 1 and 3 executors.",
        "",
        "| group | T(1) s | T(3) s | startup_s | executor_start_s | serial_s | work (executor-s) |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, data in out["groups"].items():
        m = data["model"]
        t = m["job_s_by_executors"]
        lines.append(
            f"| {name} | {t['1']} | {t['3']} | {m['startup_s']} | {m['executor_start_s']} "
            f"| {m['serial_s']} | {m['work']} |"
        )
    (RESULTS / "calibration.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
