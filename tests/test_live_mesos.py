"""benchmarks/live_mesos.py: the pure parts (a master's /master/state read as executors per
agent type and group, time averages, the quick batch, the report), and one slow end-to-end
`--quick` run of fairbroker rPS-DSF and Spark 3.5's own Mesos backend on a real master."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from allocator.batch.allocation import parse_allocation
from allocator.scenarios.batch import load_batch
from benchmarks import live_mesos
from benchmarks.mesos_samples import OTHER, group_of, parse_state, time_average, type_series

CHECKOUT = Path(__file__).resolve().parents[1]
SHAPES = {"pi": {"cpus": 2.0, "mem": 1024.0}, "wordcount": {"cpus": 1.0, "mem": 1792.0}}
NAMES = {"127.0.1.1": "t1-a", "127.0.1.3": "t2-a"}
TYPES = {"t1-a": "t1", "t2-a": "t2"}


def task(agent: str, state: str, cpus: float, mem: float) -> dict:
    resources = {"cpus": cpus, "mem": mem, "disk": 0.0, "ports": "[31000-31001]"}
    return {"slave_id": agent, "state": state, "resources": resources}


def master_state() -> dict:
    """Two agents, fairbroker's framework (groups by shape), two Spark frameworks (groups by
    name), a finished task and an inactive framework that must not count."""
    return {
        "slaves": [
            {
                "id": "S1",
                "hostname": "127.0.1.1",
                "active": True,
                "resources": {"cpus": 4.0, "mem": 7168.0, "disk": 100.0},
            },
            {
                "id": "S3",
                "hostname": "127.0.1.3",
                "active": True,
                "resources": {"cpus": 8.0, "mem": 4096.0},
            },
        ],
        "frameworks": [
            {
                "name": "fairbroker",
                "active": True,
                "tasks": [
                    task("S3", "TASK_RUNNING", 2, 1024),
                    task("S3", "TASK_STAGING", 2, 1024),
                    task("S1", "TASK_RUNNING", 1, 1792),
                    task("S1", "TASK_FINISHED", 1, 1792),
                ],
            },
            {"name": "pi-q0-j0", "active": True, "tasks": [task("S1", "TASK_RUNNING", 2, 1024)]},
            # Spark's backend may size an executor below its shape: the name decides
            {
                "name": "wordcount-q1-j0",
                "active": True,
                "tasks": [task("S3", "TASK_STARTING", 1, 1000)],
            },
            {"name": "pi-q1-j0", "active": False, "tasks": [task("S3", "TASK_RUNNING", 2, 1024)]},
            {"name": "fairbroker", "active": True, "tasks": [task("S3", "TASK_RUNNING", 3, 5)]},
        ],
    }


def test_master_state_becomes_executors_per_agent_type_and_group() -> None:
    sample = parse_state(master_state(), SHAPES, NAMES)
    assert sample.frameworks == 4
    assert sample.executors == {
        "t1-a": {"wordcount": 1, "pi": 1},
        "t2-a": {"pi": 2, "wordcount": 1, OTHER: 1},
    }
    assert sample.by_type(TYPES) == {"t1": {"wordcount": 1, "pi": 1},
                                     "t2": {"pi": 2, "wordcount": 1, OTHER: 1}}  # fmt: skip
    # held: pi 3 x (2, 1024); wordcount (1, 1792) + (1, 1000); other (3, 5)
    assert sample.allocated == {
        "pi": {"cpus": 6.0, "mem": 3072.0},
        "wordcount": {"cpus": 2.0, "mem": 2792.0},
        OTHER: {"cpus": 3.0, "mem": 5.0},
    }
    assert sample.capacity == {"cpus": 12.0, "mem": 11264.0}


def test_the_sample_reads_back_as_fairbrokers_allocation() -> None:
    """What the batch runner's series gets: running and held per group, executors per agent."""
    parsed = parse_allocation(parse_state(master_state(), SHAPES, NAMES).to_allocation())
    assert parsed.running == {"pi": 3, "wordcount": 2, OTHER: 1}
    assert parsed.allocated["pi"] == {"cpus": 6.0, "mem": 3072.0}
    assert parsed.agent_executors == {"t1-a": {"wordcount": 1, "pi": 1},
                                      "t2-a": {"pi": 2, "wordcount": 1, OTHER: 1}}  # fmt: skip


def test_group_by_framework_name_before_shape() -> None:
    assert group_of("pi-q0-j3", {"cpus": 1.0, "mem": 1792.0}, SHAPES) == "pi"
    assert group_of("fairbroker", {"cpus": 1.0, "mem": 1792.0}, SHAPES) == "wordcount"
    assert group_of("fairbroker", {"cpus": 1.0}, SHAPES) == OTHER
    assert group_of("pilot", {"cpus": 3.0}, SHAPES) == OTHER  # "pi" needs "pi-"


def test_time_average_holds_each_sample_until_the_next() -> None:
    values = np.array([[2.0, 0.0], [4.0, 1.0], [0.0, 0.0]])
    # 2 for 1 s, 4 for 3 s, 0 for 1 s (to end=5): (2 + 12 + 0) / 5; second column 3 / 5
    assert time_average([0.0, 1.0, 4.0], values, 5.0) == pytest.approx([14 / 5, 3 / 5])
    # samples after `end` weigh nothing
    assert time_average([0.0, 1.0, 9.0], values, 5.0) == pytest.approx([18 / 5, 4 / 5])


def test_type_series_orders_types_and_groups() -> None:
    samples = [{"by_type": {"t2": {"pi": 3}}}, {"by_type": {"t1": {"wordcount": 2, "pi": 1}}}]
    got = type_series(samples, ["t1", "t2"], ["pi", "wordcount"])
    assert got.tolist() == [[[0, 0], [3, 0]], [[1, 2], [0, 0]]]


def test_quick_batch_keeps_the_shapes_and_shrinks_the_work() -> None:
    spec = load_batch(CHECKOUT / "benchmarks" / "scenarios" / "spark-fill.yaml")
    quick = live_mesos.quick_batch(spec)
    assert live_mesos.shapes(quick) == live_mesos.shapes(spec) == SHAPES
    assert [g.queues for g in quick.groups] == [1, 1]
    assert [g.executor_demand()[1] for g in quick.groups] == [2, 2]
    assert [(g.app.partitions, g.app.task_s) for g in quick.groups] == [(8, 2), (8, 2)]
    assert [g.executor_demand()[1] for g in spec.groups] == [8, 8]  # the original untouched


def fake_run(way: str, index: int, makespan: float, failed: int = 0) -> dict:
    return {
        "way": way, "run": index, "makespan_s": makespan, "cluster_opened_s": 10.0,
        "jct_by_group_s": {"pi": makespan - 10, "wordcount": makespan - 5},
        "jobs": 4, "jobs_failed": failed, "failed": ["pi-q0-j0: exit code 1"] * failed,
        "executors_peak": 20, "executors_mean": 15.0,
        "allocated": {"cpus": 0.5, "mem": 0.6},
        "executors_by_type_mean": {"t1": {"pi": 1.0, "wordcount": 2.0}},
        "executors_by_type_peak": {"t1": {"pi": 2, "wordcount": 4}},
        "load_1min": [3.0, 4.0], "samples": [],
    }  # fmt: skip


def test_report_means_and_gain() -> None:
    runs = [fake_run("rpsdsf", 1, 200.0), fake_run("spark", 1, 300.0),
            fake_run("rpsdsf", 2, 220.0), fake_run("spark", 2, 260.0, failed=1)]  # fmt: skip
    means = live_mesos.means(runs, "rpsdsf")
    assert means is not None and means["makespan_s"] == pytest.approx(210.0)
    assert means["makespan_sd"] == pytest.approx(np.std([200, 220], ddof=1))
    assert live_mesos.means(runs, "drf") is None
    text = live_mesos.render({"command": "x", "date": "d", "json": "j", "png": "p",
                              "setup": "S", "notes": "N", "runs": runs})  # fmt: skip
    # 210 against 280: 25.0 % shorter
    # 210 - 10 against 280 - 10 after the barrier (opened at 10 s in every run): 25.9 %
    assert (
        "fairbroker rPS-DSF characterized: mean makespan 25.0 % shorter than Spark 3.5 Mesos "
        "backend, Mesos allocator (25.9 % shorter after the barrier)" in text
    )
    assert "| Spark 3.5 Mesos backend, Mesos allocator | 2 | 280.0 (28.3) | 270.0 |" in text
    assert "1 of 8 |" in text and "- Spark 3.5 Mesos backend, Mesos allocator run 2: pi" in text


@pytest.mark.slow
@pytest.mark.live
def test_quick_benchmark_end_to_end(tmp_path: Path) -> None:
    """`--quick` for fairbroker rPS-DSF and Spark's own Mesos backend on the real master:
    every job's answer right, executors seen on the agents, nothing left running."""
    real_mesos = live_mesos._support()
    if real_mesos.mesos_home() is None:
        pytest.skip(real_mesos.SKIP_REASON)
    pyspark = pytest.importorskip("pyspark")
    if not pyspark.__version__.startswith("3.5"):
        pytest.skip(
            f"Spark's Mesos backend needs pyspark 3.5 (make spark35), not {pyspark.__version__}"
        )
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.live_mesos", "--quick", "--runs", "1",
         "--ways", "rpsdsf,spark", "--out", str(tmp_path / "out"),
         "--workdir", str(tmp_path / "work"), "--quiet"],
        cwd=CHECKOUT, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    data = json.loads((tmp_path / "out" / "live_mesos_quick.json").read_text())
    assert [r["way"] for r in data["runs"]] == ["rpsdsf", "spark"]
    for run in data["runs"]:
        assert run["jobs"] == 2 and run["jobs_failed"] == 0, run["failed"]
        assert run["executors_peak"] >= 2 and run["makespan_s"] > 0
        assert all(j["ok"] for j in run["jobs_detail"])
    assert (tmp_path / "out" / "live_mesos_quick.png").stat().st_size > 0
    left = real_mesos.processes_under(tmp_path / "work")
    assert not left, real_mesos.describe(left)
