"""The simulator's workload randomness: paired across schedulers, deterministic at jitter 0."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml
from support.commands import run_fairbroker

from allocator.engine_config import EngineConfig
from allocator.scenarios.batch import JitterSpec, JobModel, parse_batch
from allocator.sim.batch_sim import BatchSimulator
from allocator.sim.bound import makespan_bound
from allocator.sim.workload import JobDraws


def two_groups(jitter: dict | None = None, jobs_per_queue: int = 4) -> dict:
    """A small heterogeneous batch where schedulers disagree about placement."""
    job = {"work": 40, "startup_s": 5, "executor_start_s": 3, "serial_s": 2,
           "release_spread_s": 2}  # fmt: skip
    if jitter is not None:
        job["jitter"] = jitter
    return {
        "agents": [
            {"name": "a", "resources": {"cpus": 8, "mem": 4}},
            {"name": "b", "resources": {"cpus": 4, "mem": 8}},
        ],
        "groups": [
            {"name": "x", "queues": 2, "jobs_per_queue": jobs_per_queue,
             "demand": {"cpus": 2, "mem": 1}, "executors": 6, "job": dict(job)},
            {"name": "y", "queues": 2, "jobs_per_queue": jobs_per_queue,
             "demand": {"cpus": 1, "mem": 2}, "executors": 6, "job": dict(job)},
        ],
    }  # fmt: skip


FULL = {"work": 0.2, "startup_s": 0.3, "executor_start_s": 0.5, "serial_s": 0.4,
        "random_release": True}  # fmt: skip


def jobs_by_name(result) -> dict:
    return {j.name: j for j in result.jobs}


def test_same_seed_same_jobs_under_every_scheduler_and_mode():
    spec = parse_batch(two_groups(FULL))
    runs = [
        BatchSimulator(spec, EngineConfig(name, mode=mode, seed=7)).run()
        for name, mode in (("drf", "characterized"), ("rpsdsf", "oblivious"),
                           ("bfdrf", "characterized"))
    ]  # fmt: skip
    first = jobs_by_name(runs[0])
    assert len(first) == 16
    for other in runs[1:]:
        jobs = jobs_by_name(other)
        assert jobs.keys() == first.keys()
        for name, job in jobs.items():
            assert job.model == first[name].model, name  # work, start-up, serial tail
            if name.endswith("-j0"):
                assert job.submitted == first[name].submitted == 0.0
    # The schedulers did differ (otherwise the pairing would be trivially true).
    assert len({round(r.makespan_s, 6) for r in runs}) > 1
    # Another seed draws other jobs.
    other_seed = jobs_by_name(BatchSimulator(spec, EngineConfig("drf", seed=8)).run())
    assert any(other_seed[n].model.work != first[n].model.work for n in first)


def test_the_allocators_generator_does_not_move_the_workload():
    """Two engine seeds are two allocator streams; the jobs come from the workload key."""
    spec = parse_batch(two_groups(FULL))
    a = JobDraws.draw(spec.groups[0].job.model(), spec.groups[0].job.jitter, 3, 0, 1, 2)
    b = JobDraws.draw(spec.groups[0].job.model(), spec.groups[0].job.jitter, 3, 0, 1, 2)
    assert a.model == b.model
    starts = [a.executor_start() for _ in range(5)]
    assert starts == [b.executor_start() for _ in range(5)]
    assert a.release_delays(4) == b.release_delays(4)
    # Each key is its own job: group, queue and job index all matter.
    keys = [(3, 0, 1, 2), (3, 1, 1, 2), (3, 0, 0, 2), (3, 0, 1, 3), (4, 0, 1, 2)]
    works = {JobDraws.draw(JobModel(work=40), JitterSpec(work=0.2), *k).model.work for k in keys}
    assert len(works) == len(keys)


def test_draws_stay_within_their_spread():
    model = JobModel(work=100, startup_s=10, executor_start_s=4, serial_s=2,
                     release_spread_s=3)  # fmt: skip
    jitter = JitterSpec(**FULL)
    works, starts, delays = [], [], []
    for job in range(400):
        draws = JobDraws.draw(model, jitter, 0, 0, 0, job)
        works.append(draws.model.work)
        assert 7 <= draws.model.startup_s <= 13 and 1.2 <= draws.model.serial_s <= 2.8
        starts.append(draws.executor_start())
        delays += draws.release_delays(3)
    assert min(works) >= 80 and max(works) <= 120
    assert np.mean(works) == pytest.approx(100, abs=2)  # centred: U(0.8, 1.2) x 100
    assert np.std(works) == pytest.approx(20 / np.sqrt(3), rel=0.15)
    assert min(starts) >= 2 and max(starts) <= 6
    assert min(delays) > 0 and max(delays) <= 3
    assert len({round(d, 9) for d in delays}) > 1000  # independent, not an even grid


def test_jitter_zero_is_the_deterministic_model_exactly():
    model = JobModel(work=40, release_spread_s=2)
    draws = JobDraws.draw(model, JitterSpec(), 5, 1, 2, 3)
    assert draws.model is model
    assert draws.executor_start() == 3.0
    assert draws.release_delays(4) == [0.5, 1.0, 1.5, 2.0]
    # An explicit all-zero jitter block gives the same run as none at all.
    plain = BatchSimulator(parse_batch(two_groups()), EngineConfig("psdsf", seed=4)).run()
    zero = BatchSimulator(parse_batch(two_groups({"work": 0})), EngineConfig("psdsf", seed=4)).run()
    assert zero.makespan_s == plain.makespan_s and zero.grants == plain.grants
    assert [j.finished for j in zero.jobs] == [j.finished for j in plain.jobs]
    # Jobs of a group are then identical.
    assert {j.model.work for j in plain.jobs} == {40}


def test_random_release_alone_keeps_every_job_the_same():
    """Random release delays change when executors return, never the jobs' own draws."""
    spec = parse_batch(two_groups({"random_release": True}))
    result = BatchSimulator(spec, EngineConfig("drf", seed=1)).run()
    assert {j.model.work for j in result.jobs} == {40}
    assert not result.series.engine.running


@pytest.mark.parametrize("bad", [{"work": 1.0}, {"work": -0.1}, {"serial_s": float("nan")},
                                 {"startup": 0.1}])  # fmt: skip
def test_bad_jitter_is_a_one_line_error(bad):
    from allocator.errors import ScenarioError

    with pytest.raises(ScenarioError, match=r"groups\[0\]\.job\.jitter"):
        parse_batch(two_groups(bad))


def test_the_bound_follows_the_seeds_draws():
    data = two_groups({"work": 0.2, "startup_s": 0.2, "serial_s": 0.2, "executor_start_s": 0.2})
    spec = parse_batch(data)
    every_seed = makespan_bound(spec)
    for seed in range(3):
        result = BatchSimulator(spec, EngineConfig("rpsdsf", seed=seed)).run()
        bound = makespan_bound(spec, seed)
        assert every_seed.seconds <= bound.seconds <= result.makespan_s
        # The chain of queue 0 of group x at full width (6 executors fit: 4 on a, 2 on b).
        jobs = [j for j in result.jobs if j.group == "x" and j.queue == 0]
        overhead = sum(j.model.startup_s + 3 * 0.8 + j.model.serial_s for j in jobs)
        assert bound.chain_s >= overhead + sum(j.model.work for j in jobs) / 6 - 1e-9
    # Without jitter the per-seed and every-seed bounds coincide.
    plain = parse_batch(two_groups())
    assert makespan_bound(plain, 5) == makespan_bound(plain)
    assert makespan_bound(plain).binding in {"fluid", "chain"}


# The paper batch as it was before the workload model (commit 6d75e1c, bace901^): identical
# jobs, Pi 60 / WordCount 90 executor-seconds, releases on an even grid.
PRE_ISSUE_PAPER_BATCH = {
    "name": "paper-batch",
    "resources": ["cpus", "mem"],
    "agents": [
        {"name": f"{t}-{s}", "resources": {"cpus": c, "mem": m}, "attributes": {"type": t}}
        for t, c, m in (("t1", 4, 14336), ("t2", 8, 8192), ("t3", 6, 11264))
        for s in "ab"
    ],
    "groups": [
        {"name": name, "queues": 5, "jobs_per_queue": 50, "demand": demand, "executors": 64,
         "job": {"work": work, "startup_s": 5, "executor_start_s": 3, "serial_s": 2,
                 "release_spread_s": 2}}
        for name, demand, work in (("pi", {"cpus": 2, "mem": 2048}, 60),
                                   ("wordcount", {"cpus": 1, "mem": 3584}, 90))
    ],
}  # fmt: skip

# `fairbroker sim` on that batch, BF-DRF characterized, recorded at 6d75e1c. BF-DRF picks agents
# by best fit (not the rrr pass the engine changed) and characterized mode never declines (the
# refuse-filter and offered-remainder changes are oblivious-only), so none of the issue's
# engine changes apply: with jitter 0 the run must be the old one exactly. (Under DRF, TSF,
# PS-DSF or rPS-DSF, or in oblivious mode, the runs changed on purpose.)
PRE_ISSUE_GOLDEN = {
    0: {"makespan_s": 2379.167, "jobs": 500, "grants": 2532, "fairness": 0.9971,
        "jct_s": {"mean": 42.714, "p50": 38.333, "p95": 51.0},
        "jct_by_group_s": {"pi": 38.02, "wordcount": 47.409},
        "allocated": {"cpus": 0.8825, "mem": 0.9711}, "makespan_bound_s": 1647.727},
    1: {"makespan_s": 2378.833, "jobs": 500, "grants": 2532, "fairness": 0.9971,
        "jct_s": {"mean": 42.71, "p50": 38.333, "p95": 51.0},
        "jct_by_group_s": {"pi": 38.017, "wordcount": 47.404},
        "allocated": {"cpus": 0.8826, "mem": 0.9712}, "makespan_bound_s": 1647.727},
}  # fmt: skip


@pytest.mark.parametrize("seed", sorted(PRE_ISSUE_GOLDEN))
def test_jitter_zero_reproduces_the_pre_issue_simulator(tmp_path, seed):
    path = tmp_path / "paper-batch-pre-issue.yaml"
    path.write_text(yaml.safe_dump(PRE_ISSUE_PAPER_BATCH))
    done = run_fairbroker(
        "sim", str(path), "-s", "bfdrf", "--mode", "characterized", "--seed", str(seed),
        "--json", "-q",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert {key: out[key] for key in PRE_ISSUE_GOLDEN[seed]} == PRE_ISSUE_GOLDEN[seed]
