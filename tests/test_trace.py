"""Trace-driven simulation: CSV traces, the Google-like generator, paper 001's dynamic
example, the slot baseline, and grants that respect capacity."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from allocator.engine_config import EngineConfig
from allocator.errors import ScenarioError
from allocator.policy import SCHEDULERS
from allocator.scenarios.google import (
    GoogleWorkloadSpec,
    google_cluster,
    google_jobs,
    server_mix_fractions,
)
from allocator.scenarios.kind import scenario_kind
from allocator.scenarios.trace import load_trace, parse_trace
from allocator.sim.trace_sim import run_trace
from allocator.workloads import GOOGLE_SERVER_MIX

SCENARIOS = Path(__file__).resolve().parents[1] / "benchmarks" / "scenarios"
EXAMPLE_CSV = SCENARIOS / "example-trace.csv"
DYNAMIC = SCENARIOS / "drfh-dynamic.yaml"


def csv_spec(path: Path, agents: int = 20, **extra: object) -> dict:
    return {
        "kind": "trace",
        "cluster": {"google": {"agents": agents, "seed": 0}},
        "jobs": {"csv": str(path)},
        **extra,
    }


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ---- CSV traces ---------------------------------------------------------------------------
def test_example_csv_runs_to_completion():
    result = run_trace(csv_spec(EXAMPLE_CSV), EngineConfig("bfdrf"), audit=True)
    out = result.to_json()
    assert out["jobs"] == {"submitted": 5, "completed": 5}
    assert out["tasks"]["submitted"] == out["tasks"]["completed"] == 281
    assert out["users_complete"] == 3
    assert out["makespan_s"] == pytest.approx(1800.0)  # b-web's 1800 s tasks start at 0
    workload = parse_trace(csv_spec(EXAMPLE_CSV))
    # c-ml has two demand vectors, so two task groups (frameworks); a-report is 3 task rows.
    assert sorted(g.name for g in workload.groups) == [
        "a-etl",
        "a-report",
        "b-batch",
        "b-web",
        "c-ml",
        "c-ml#2",
    ]
    largest = workload.largest
    c_ml = next(g for g in workload.groups if g.name == "c-ml")
    assert np.allclose(c_ml.demand, [0.25 * largest[0], 0.30 * largest[1]])


def test_absolute_columns_and_machine_csv(tmp_path):
    machines = write(tmp_path, "name,cpus,mem\nm1,8,16384\nm2,4,32768\n", "machines.csv")
    jobs = write(tmp_path, "submit_s,user,job,cpus,mem,duration_s\n0,u,j,2,4096,10\n")
    spec = {"kind": "trace", "cluster": {"csv": str(machines)}, "jobs": {"csv": str(jobs)}}
    workload = parse_trace(spec)
    assert workload.agent_names == ["m1", "m2"]
    assert np.allclose(workload.largest, [8, 32768])
    result = run_trace(workload, EngineConfig("drf"), audit=True)
    assert result.tasks_completed == 1 and result.makespan_s == pytest.approx(10.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("submit_s,user,job,cpus_norm\n", "trace.csv:1: header: missing column 'duration_s'"),
        ("submit_s,user,job,cpus_norm,duration_s\n", "trace.csv:1: rows: no tasks"),
        (
            "submit_s,user,job,cpus,cpus_norm,duration_s\n",
            "trace.csv:1: header: 'cpus' given twice",
        ),
        ("submit_s,user,job,gpus,duration_s\n", "trace.csv:1: header: unknown column 'gpus'"),
        (
            "submit_s,user,job,cpus_norm,mem_norm,duration_s\n0,u,j,0.1,abc,5\n",
            "trace.csv:2: mem_norm: not a number: 'abc'",
        ),
        (
            "# comment\nsubmit_s,user,job,cpus_norm,mem_norm,duration_s\n\n0,u,j,0.1,0.1,-5\n",
            "trace.csv:4: duration_s: must not be negative",
        ),
        (
            "submit_s,user,job,cpus_norm,mem_norm,duration_s\n0,u,j,0.1,0.1\n",
            "trace.csv:2: row: expected 6 fields, got 5",
        ),
        (
            "submit_s,user,job,tasks,cpus_norm,mem_norm,duration_s\n0,u,j,1.5,0.1,0.1,5\n",
            "trace.csv:2: tasks: must be a whole number >= 1",
        ),
        (
            "submit_s,user,job,cpus_norm,mem_norm,duration_s\n0,,j,0.1,0.1,5\n",
            "trace.csv:2: user: empty",
        ),
        (
            "submit_s,user,job,cpus_norm,mem_norm,duration_s\n0,u,j,0,0,5\n",
            "trace.csv:2: demand: must be positive in at least one resource",
        ),
        (
            "submit_s,user,job,cpus_norm,mem_norm,duration_s\n0,u,j,0.1,0.1,5\n3,u,k,2.0,0.1,5\n",
            "trace.csv:3: demand: job 'k' (cpus 128, mem 26214.4) fits no machine",
        ),
    ],
)
def test_csv_errors_name_file_line_and_field(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        parse_trace(csv_spec(path))
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_csv_errors_through_yaml_keep_the_csv_location(tmp_path):
    write(tmp_path, "submit_s,user,job,cpus_norm,mem_norm,duration_s\n0,u,j,x,0.1,5\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(yaml.safe_dump(csv_spec(Path("trace.csv"))))
    with pytest.raises(ScenarioError) as caught:
        load_trace(scenario)
    assert str(caught.value) == f"{tmp_path / 'trace.csv'}:2: cpus_norm: not a number: 'x'"


def test_yaml_errors_name_the_field(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"kind": "trace", "cluster": {}, "jobs": {"csv": "x.csv"}}))
    with pytest.raises(ScenarioError, match=r"bad.yaml: cluster: give exactly one of"):
        load_trace(path)
    spec = {"kind": "trace", "cluster": {"google": {"agents": 5}}, "jobs": {"google": {}}}
    with pytest.raises(ScenarioError, match=r"horizon_s: required with jobs\.google"):
        parse_trace(spec)


def test_scenario_kind_tells_trace_from_batch_and_static():
    assert scenario_kind(DYNAMIC) == "trace"
    assert scenario_kind(SCENARIOS / "paper-batch.yaml") == "batch"
    assert scenario_kind({"agents": [], "frameworks": []}) == "static"


# ---- the Google-like generator --------------------------------------------------------------
def test_server_mix_proportions_and_determinism():
    names, capacity = google_cluster(20_000, seed=3)
    assert len(names) == 20_000 and capacity.shape == (20_000, 2)
    kinds = {(c, m): k for k, (_, c, m) in enumerate(GOOGLE_SERVER_MIX)}
    normalized = capacity / np.array([64.0, 256.0 * 1024])
    index = np.array([kinds[(round(c, 2), round(m, 2))] for c, m in normalized])
    observed = np.bincount(index, minlength=len(GOOGLE_SERVER_MIX)) / len(index)
    assert np.abs(observed - server_mix_fractions()).max() < 0.015
    assert np.array_equal(google_cluster(50, seed=3)[1], google_cluster(50, seed=3)[1])
    assert not np.array_equal(google_cluster(50, seed=3)[1], google_cluster(50, seed=4)[1])


def test_workload_shapes_and_load():
    spec = GoogleWorkloadSpec(seed=5, users=40)
    capacity = np.array([105.0, 94.0])  # about 200 Table I servers, normalized
    jobs = google_jobs(spec, capacity, 6 * 3600)
    again = google_jobs(spec, capacity, 6 * 3600)
    assert np.array_equal(jobs.durations, again.durations)
    assert np.array_equal(jobs.demand, again.demand)
    assert jobs.offsets[-1] == len(jobs.durations) == jobs.tasks.sum()
    assert np.all(np.diff(jobs.submit_s) >= 0) and jobs.submit_s.min() >= 0
    # Heavy-tailed job sizes: most jobs are small, a few are large (warm-start jobs are the
    # long-running ones, over-represented at t = 0).
    fresh = jobs.tasks[~jobs.warm]
    assert (fresh == 1).mean() > 0.2 and np.median(fresh) <= 10 and fresh.max() >= 100
    # Tasks are small next to the largest server; durations span seconds to hours.
    assert np.median(jobs.demand[:, 0]) < 0.05 and np.median(jobs.demand[:, 1]) < 0.05
    assert jobs.demand.max() <= spec.demand_max
    assert jobs.durations.min() < 120 and jobs.durations.max() > 6 * 3600
    # The bottleneck resource is asked for `load` of the cluster inside the window.
    start = np.repeat(jobs.submit_s, jobs.tasks)
    inside = np.clip(np.minimum(start + jobs.durations, 6 * 3600) - start, 0, None)
    asked = (np.repeat(jobs.demand, jobs.tasks, axis=0) * inside[:, None]).sum(axis=0)
    assert (asked / (capacity * 6 * 3600)).max() == pytest.approx(spec.load, rel=1e-3)
    assert jobs.warm.any()  # steady state at t = 0


def small_google(agents: int = 60, hours: float = 2.0, seed: int = 2) -> dict:
    return {
        "kind": "trace",
        "name": "google-small",
        "horizon_s": hours * 3600,
        "sample_s": 300,
        "cluster": {"google": {"agents": agents, "seed": seed}},
        "jobs": {
            "google": {
                "seed": seed,
                "users": 12,
                "load": 0.9,
                "service_median_s": 1800.0,
                "batch_median_s": 120.0,
                "tasks_max": 300,
                "service_tasks_max": 100,
            }
        },
    }


# ---- slots baseline and completion --------------------------------------------------------
def test_slot_scheduler_is_registered_and_underutilizes():
    assert "slots" in SCHEDULERS
    workload = parse_trace(small_google(agents=40, hours=1.0))
    best = run_trace(workload, EngineConfig("bfdrf"), audit=True)
    slots = run_trace(workload, EngineConfig("slots"), slots_per_server=14, audit=True)
    best_alloc, slot_alloc = best.allocated(), slots.allocated()
    # Paper 001 Table II: slots leave the cluster far emptier than Best-Fit DRFH.
    assert slot_alloc["cpus"] < best_alloc["cpus"] - 0.1
    assert slot_alloc["mem"] < best_alloc["mem"] - 0.1
    assert best.tasks_completed > slots.tasks_completed
    assert slots.to_json()["slot_occupancy"] > 0.5  # slots, not resources, are what runs out
    assert "slots" not in best_alloc and "slots" not in slot_alloc


def test_users_complete_all_tasks_when_the_load_drains():
    spec = small_google(agents=40, hours=1.0, seed=3)
    spec["horizon_s"] = None
    spec["jobs"]["google"]["load"] = 0.5
    spec["jobs"]["google"]["warm_start_s"] = 0
    with pytest.raises(ScenarioError, match="horizon_s"):
        parse_trace(spec)
    spec["horizon_s"] = 3600.0
    workload = parse_trace(spec)
    firstfit = EngineConfig("drf", selection="firstfit")
    result = run_trace(workload, firstfit, horizon_s=10 * 24 * 3600.0)
    out = result.to_json()
    users = out["users"]
    assert out["tasks"]["completed"] == out["tasks"]["submitted"] > 0
    assert out["users_complete"] == users > 0
    assert out["makespan_s"] is not None and out["makespan_s"] >= 3600 * 0.5
    assert out["jobs"]["completed"] == out["jobs"]["submitted"]
    assert out["jct_s"]["p50"] <= out["jct_s"]["p95"]
    assert sum(c["jobs"] for c in out["jct_by_size_s"].values()) == out["jobs"]["completed"]


# ---- paper 001's dynamic example ----------------------------------------------------------
@pytest.fixture(scope="module")
def dynamic():
    return run_trace(DYNAMIC, EngineConfig("bfdrf"), audit=True)


def test_dynamic_example_share_bands(dynamic):
    share = dynamic.share_at
    # U1 alone: memory-bound; paper 62% (its server draw), ours about 0.56-0.6.
    assert 0.45 < share("u1", 100, 200) < 0.7
    assert share("u2", 100, 200) == 0 and share("u3", 100, 200) == 0
    # U1 and U2: about equal, paper 44% each.
    u1, u2 = share("u1", 350, 500), share("u2", 350, 500)
    assert 0.35 < u1 < 0.55 and 0.35 < u2 < 0.55 and abs(u1 - u2) < 0.08
    # All three: paper 26% each.
    three = [share(u, 700, 1080) for u in ("u1", "u2", "u3")]
    assert all(0.2 < s < 0.38 for s in three) and max(three) - min(three) < 0.1
    # U1 has left: U2 and U3 share what it held.
    assert share("u1", 1200, 1500) == 0
    assert 0.35 < share("u2", 1200, 1500) < 0.6 and 0.35 < share("u3", 1200, 1500) < 0.6


def test_dynamic_example_reports_series(dynamic):
    out = dynamic.to_json()
    series = out["series"]
    assert len(series["t"]) == 150  # 1500 s sampled every 10 s
    assert set(series["dominant_share"]) == {"u1", "u2", "u3"}
    assert out["tasks"]["dropped_on_leave"] > 0  # U1's unfinished tasks when it left
    assert out["makespan_s"] is None  # effectively unlimited work
