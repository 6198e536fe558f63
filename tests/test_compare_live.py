"""`fairbroker compare` with real Spark on a small two-agent batch (about two minutes): both
live runs and the simulator's prediction land in compare.json, and nothing it started
outlives it, also when interrupted with Ctrl-C."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

# One agent of each of the paper's first two types and one job per group, each asking for
# 2 executors (Pi 2 CPU / 1 GiB, WordCount 1 CPU / 1.75 GiB): 6 CPU / 5.5 GiB in all on
# t1 (4 CPU / 7 GiB) and t2 (8 CPU / 4 GiB). Whatever goes first where, the rest still fits
# (t1 full of Pi leaves t2 room for both WordCounts; t2 with both WordCounts leaves t1 room
# for both Pis; mixed, each agent keeps room for its other executor), so both runs peak at 4.
# As in spark-fill.yaml: JVMs that start on less CPU (docs/emulation.md).
FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData"
FAST_JVM = {"spark.executor.extraJavaOptions": FLAGS, "spark.driver.extraJavaOptions": FLAGS}
MINI = {
    "name": "compare-mini",
    "resources": ["cpus", "mem"],
    "agents": [
        {"name": "t1-a", "resources": {"cpus": 4, "mem": 7168}},
        {"name": "t2-a", "resources": {"cpus": 8, "mem": 4096}},
    ],
    "groups": [
        {
            "name": "pi",
            "queues": 1,
            "jobs_per_queue": 1,
            "spark": {
                "spark.executor.cores": 2,
                "spark.executor.memory": "640m",
                "spark.executor.instances": 2,
                "spark.ui.enabled": False,
                **FAST_JVM,
            },
            "app": {"kind": "pi", "partitions": 4, "samples": 2000, "task_s": 1},
            "job": {"work": 2, "startup_s": 4, "executor_start_s": 10, "serial_s": 2},
        },
        {
            "name": "wordcount",
            "queues": 1,
            "jobs_per_queue": 1,
            "spark": {
                "spark.executor.cores": 1,
                "spark.executor.memory": "1408m",
                "spark.executor.instances": 2,
                "spark.ui.enabled": False,
                **FAST_JVM,
            },
            "app": {"kind": "wordcount", "input_mb": 0.1, "partitions": 4, "task_s": 1},
            "job": {"work": 4, "startup_s": 4, "executor_start_s": 10, "serial_s": 4},
        },
    ],
}
PLACED = 4


def start_compare(tmp_path: Path) -> tuple[subprocess.Popen[str], Path]:
    scenario = tmp_path / "mini.yaml"
    scenario.write_text(yaml.safe_dump(MINI))
    out = tmp_path / "out"
    argv = [
        sys.executable,
        "-c",
        "from allocator.cli import main; main()",
        "compare",
        str(scenario),
        "--out",
        str(out),
        "--quiet",
        "--seeds",
        "1",
        "--job-timeout",
        "240",
    ]
    process = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        # Ctrl-C as a terminal gives it, even when this suite inherited SIGINT ignored (a
        # shell's background job): Python then never raises KeyboardInterrupt
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    return process, out


def processes_under(directory: Path) -> list[int]:
    """Processes (drivers, executors, Python workers) whose command line or working
    directory lies under `directory`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            cwd = os.readlink(entry / "cwd")
            if (entry / "stat").read_text().split(") ")[-1].startswith("Z"):
                continue
        except OSError:
            continue
        if str(directory) in cmdline or cwd.startswith(str(directory)):
            found.append(int(entry.name))
    return found


def descendants(root: int) -> set[int]:
    """`root`'s child processes, their children and so on, now."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int((entry / "stat").read_text().split(") ")[-1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(parent, []).append(int(entry.name))
    found, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(") ")[-1]
    except OSError:
        return False
    return not state.startswith("Z")


def test_compare_writes_both_runs_and_the_prediction(tmp_path: Path):
    process, out = start_compare(tmp_path)
    try:
        stdout, stderr = process.communicate(timeout=900)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 0, stderr[-3000:]
    data = json.loads((out / "compare.json").read_text())
    assert data["batch"] == str(tmp_path / "mini.yaml")
    runs = {(r["scheduler"], r["mode"]): r for r in data["runs"]}
    assert list(runs) == [("drf", "oblivious"), ("rpsdsf", "characterized")]
    for run in runs.values():
        assert run["jobs"] == 2 and run["jobs_failed"] == 0, run
        assert run["makespan_s"] > 0
        # the cluster opened once both drivers had registered, before the jobs ended
        assert 0 < run["cluster_opened_s"] < run["makespan_s"]
        assert run["executors_peak"] == PLACED
        assert 0 < run["executors_mean"] <= run["executors_peak"]
        assert set(run["jct_by_group_s"]) == {"pi", "wordcount"}
        assert run["result"]["scheduler"] == run["scheduler"]
        assert run["result"]["mode"] == run["mode"]
        run_dir = out / f"{run['scheduler']}-{run['mode']}"
        written = json.loads((run_dir / "result.json").read_text())
        assert written == run["result"]
    predicted = [(p["scheduler"], p["mode"]) for p in data["prediction"]]
    assert predicted == list(runs)
    assert all(p["makespan_s"] > 0 for p in data["prediction"])
    assert "drf/oblivious" in stdout and "rpsdsf/characterized" in stdout
    assert "emulated work" in stdout
    # said once for both runs, with why, not once per broker started
    assert stderr.count("SANDBOX OFF") == 1, stderr[-3000:]
    assert "brokers it starts for this batch alone" in stderr
    for run in runs.values():
        assert len(run["machine_load"]) == 2 and min(run["machine_load"]) >= 0
    assert processes_under(out) == []


# Interrupting the second run costs a whole first run first: `make test-slow`.
@pytest.mark.parametrize(
    "run", ["drf-oblivious", pytest.param("rpsdsf-characterized", marks=pytest.mark.slow)]
)
def test_ctrl_c_leaves_no_driver_or_executor(tmp_path: Path, run: str):
    """Ctrl-C in the first run, or in the second (the first run's broker already stopped,
    the second's executors up): no driver, executor or Python worker of it remains."""
    process, out = start_compare(tmp_path)
    try:
        # Interrupt once the run's executors are up (their working directories exist).
        deadline = time.monotonic() + 600
        agents = out / run / "broker" / "agents"
        while time.monotonic() < deadline and process.poll() is None:
            if agents.is_dir() and any(p for p in agents.rglob("executor-*") if p.is_dir()):
                break
            time.sleep(0.5)
        assert process.poll() is None, f"compare ended before {run}'s executors started"
        # and until their processes are there to interrupt (their directories come first)
        started = descendants(process.pid) | set(processes_under(out))
        while len(started) <= 2:
            assert time.monotonic() < deadline and process.poll() is None, started
            time.sleep(0.5)
            started = descendants(process.pid) | set(processes_under(out))
        os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C does
        process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode != 0
    assert not (out / "compare.json").exists()
    deadline = time.monotonic() + 20
    while any(alive(p) for p in started) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [p for p in started if alive(p)] == []
    assert processes_under(out) == []
