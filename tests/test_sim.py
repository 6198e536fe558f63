"""The batch simulator: hand-computed timelines, the bound, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml
from support.commands import run_fairbroker

from allocator.engine_config import EngineConfig
from allocator.scenarios.batch import load_batch, parse_batch
from allocator.sim.batch_sim import BatchSimulator
from allocator.sim.bound import makespan_bound
from allocator.sim.series import TimeSeries

SCENARIOS = Path(__file__).resolve().parents[1] / "benchmarks" / "scenarios"


def batch(jobs_per_queue: int = 1, queues: int = 1, executors: int = 4, **job) -> dict:
    return {
        "agents": [{"name": "s", "resources": {"cpus": 8, "mem": 8}}],
        "groups": [
            {
                "name": "g",
                "queues": queues,
                "jobs_per_queue": jobs_per_queue,
                "demand": {"cpus": 1, "mem": 1},
                "executors": executors,
                "job": {
                    "work": 40,
                    "startup_s": 5,
                    "executor_start_s": 3,
                    "serial_s": 2,
                    "release_spread_s": 2,
                    **job,
                },
            }
        ],
    }


def test_one_job_timeline():
    """Driver up at 5 s, 4 executors granted at once (registration triggers a run), working
    from 8 s, 40 executor-seconds take 10 s, 2 s serial: done at 20 s."""
    result = BatchSimulator(parse_batch(batch()), EngineConfig("drf")).run()
    (job,) = result.jobs
    assert job.registered == 5
    assert job.finished == pytest.approx(20)
    assert result.makespan_s == pytest.approx(20)
    # 4 of 8 cpus from 5 s to 20 s, over the 20 s the batch was busy.
    assert result.series.time_average()["cpus"] == pytest.approx(0.5 * 15 / 20)
    assert result.grants == 4  # characterized: one executor per grant


def test_queue_runs_jobs_one_after_another():
    result = BatchSimulator(parse_batch(batch(jobs_per_queue=3)), EngineConfig("drf")).run()
    finished = sorted(j.finished for j in result.jobs)
    assert finished == pytest.approx([20, 40, 60])


def test_executors_that_do_not_fit_wait_and_slow_the_job():
    """Two queues of 8-executor jobs on 8 cpus: each job gets 4, work 40 takes 10 s."""
    spec = parse_batch(batch(queues=2, executors=8))
    result = BatchSimulator(spec, EngineConfig("drf")).run()
    assert [j.finished for j in result.jobs] == pytest.approx([20, 20])


@pytest.mark.parametrize("name", ["drf", "tsf", "psdsf", "rpsdsf", "bfdrf"])
@pytest.mark.parametrize("mode", ["characterized", "oblivious"])
def test_paper_cluster_batch_completes_above_the_bound(name, mode):
    data = yaml.safe_load((SCENARIOS / "paper-batch.yaml").read_text())
    for group in data["groups"]:
        group["jobs_per_queue"] = 3
    spec = parse_batch(data)
    result = BatchSimulator(spec, EngineConfig(name, mode=mode, seed=2)).run()
    assert len(result.jobs) == 30
    assert all(j.finished > j.submitted for j in result.jobs)
    bound = makespan_bound(spec)
    assert result.makespan_s >= bound.seconds
    assert 0 < result.series.time_average()["cpus"] <= 1
    assert not result.series.engine.running  # every executor released


def test_bound_of_a_single_group():
    """One agent, 8 executors at once: 4 jobs x 40 executor-seconds need >= 20 s fluid,
    and the chain of 4 jobs at 8 executors takes 4 x (5 + 3 + 2 + 5) = 60 s."""
    bound = makespan_bound(parse_batch(batch(jobs_per_queue=4, executors=8)))
    assert bound.fluid_s == pytest.approx(20)
    assert bound.chain_s == pytest.approx(60)


def test_shipped_scenarios_load():
    for name in ("paper-batch.yaml", "vf.yaml"):
        spec = load_batch(SCENARIOS / name)
        assert {g.name for g in spec.groups} == {"pi", "wordcount"}
    vf = load_batch(SCENARIOS / "vf.yaml")
    assert [a.register_at for a in vf.agents] == sorted(a.register_at for a in vf.agents)


def test_sim_cli_json(tmp_path):
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(batch(jobs_per_queue=2)))
    done = run_fairbroker("sim", str(path), "--scheduler", "rpsdsf", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["makespan_s"] == pytest.approx(40)
    assert out["jobs"] == 2
    assert set(out["jct_s"]) == {"mean", "p50", "p95"}
    assert set(out["allocated"]) == {"cpus", "mem"}
    assert 0 < out["fairness"] <= 1 and out["grants"] == 8
    assert out["makespan_bound_s"] <= out["makespan_s"]


def test_sim_cli_text_says_which_bound_binds(tmp_path):
    """One queue of 4 jobs, 8 executors: fluid 20 s, chain 60 s (see test_bound_of_a_single_
    group), so the chain binds; a batch with many queues is capacity-bound instead."""
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(batch(jobs_per_queue=4, executors=8)))
    done = run_fairbroker("sim", str(path), "-q")
    assert done.returncode == 0, done.stderr
    assert "lower bound 60.0 s, the chain bound (fluid 20.0 s: capacity only; chain 60.0 s:" in (
        done.stdout
    )
    # 20 such queues: 3,200 executor-seconds on 8 cpus is 400 s, the chain still 60 s.
    path.write_text(yaml.safe_dump(batch(jobs_per_queue=4, queues=20, executors=8)))
    done = run_fairbroker("sim", str(path), "-q")
    assert done.returncode == 0, done.stderr
    assert "lower bound 400.0 s, the fluid bound (fluid 400.0 s: capacity only; chain 60.0 s:" in (
        done.stdout
    )


BAD = {
    "unknown scheduler": (None, ["--scheduler", "fifo"], "--scheduler"),
    "fits no agent": ({"demand": {"cpus": 9, "mem": 1}}, [], "fits no agent"),
    "negative queues": ({"queues": -1}, [], "groups[0].queues"),
    "no demand": ({"demand": None}, [], "demand or spark"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_batches_are_one_line_errors(tmp_path, case):
    change, args, expected = BAD[case]
    data = batch()
    if change:
        data["groups"][0].update(change)
        data["groups"][0] = {k: v for k, v in data["groups"][0].items() if v is not None}
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(data))
    done = run_fairbroker("sim", str(path), *args)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr


def test_sim_writes_the_series_csv_a_live_batch_writes(tmp_path: Path) -> None:
    out = tmp_path / "series.csv"
    done = run_fairbroker(
        "sim", "benchmarks/scenarios/spark-small.yaml", "--json", "--series", str(out)
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    rows = out.read_text().splitlines()
    assert rows[0] == "time_s,allocated_cpus,allocated_mem,fairness"
    values = [list(map(float, row.split(","))) for row in rows[1:]]
    assert all(0 <= v <= 1 for row in values for v in row[1:])
    assert values[-1][0] == pytest.approx(result["makespan_s"], abs=1.0)
    assert max(row[1] for row in values) > 0.3  # executors were granted and show up


def test_time_series_averages_over_busy_time_and_samples_on_its_grid():
    series = TimeSeries(("cpus", "mem"), sample_s=10.0)
    series.hold(np.array([0.5, 0.25]), 0.8, busy=True)
    series.advance(25.0)  # busy 0-25 at (0.5, 0.25), fairness 0.8
    series.hold(np.array([1.0, 1.0]), 0.2, busy=False)
    series.advance(40.0)  # idle 25-40: sampled, not averaged
    series.hold(np.array([0.0, 1.0]), 1.0, busy=True)
    series.advance(45.0)  # busy 40-45 at (0, 1), fairness 1
    assert series.times == [0.0, 10.0, 20.0, 30.0, 40.0]
    # A sample shows the values held at its time (from 40 on: the last ones).
    assert [a.tolist() for a in series.allocated] == [[0.5, 0.25]] * 3 + [[1, 1], [0, 1]]
    assert series.fairness == [0.8, 0.8, 0.8, 0.2, 1.0]
    average = series.time_average()
    assert average["cpus"] == pytest.approx((25 * 0.5 + 5 * 0.0) / 30)
    assert average["mem"] == pytest.approx((25 * 0.25 + 5 * 1.0) / 30)
    assert series.mean_fairness() == pytest.approx((25 * 0.8 + 5 * 1.0) / 30)
