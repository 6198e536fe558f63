"""Long Google-like traces (issue 28): the job generator as a stream, streamed trace
scenarios in the simulator, and a run stopped by its progress callback."""

from __future__ import annotations

import json

import numpy as np
import pytest

from allocator.engine_config import EngineConfig
from allocator.errors import ScenarioError
from allocator.scenarios.google import (
    GoogleJobs,
    GoogleWorkloadSpec,
    google_cluster,
    google_job_stream,
    google_jobs,
)
from allocator.scenarios.trace import parse_trace
from allocator.sim.trace_sim import TraceSimulator, run_trace

DAY = 86400.0
FIELDS = ("submit_s", "user", "tasks", "demand", "durations", "warm")


def _capacity(agents: int) -> np.ndarray:
    _, capacity = google_cluster(agents, 1)
    return capacity.sum(axis=0) / np.array([64.0, 262144.0])


def _joined(parts: list[GoogleJobs]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([getattr(p, k) for p in parts]) for k in FIELDS}


@pytest.mark.parametrize("chunk_s", [600.0, 3600.0, 5 * 3600.0, DAY, 10 * DAY])
def test_stream_is_google_jobs_cut_into_chunks(chunk_s):
    spec = GoogleWorkloadSpec(seed=3, users=20)
    capacity = _capacity(300)
    whole = google_jobs(spec, capacity, DAY)
    parts = list(google_job_stream(spec, capacity, DAY, chunk_s))
    joined = _joined(parts)
    for key in FIELDS:
        assert np.array_equal(joined[key], getattr(whole, key)), key
    # Each chunk holds the arrivals of its own window (the first also the warm start).
    for k, part in enumerate(parts):
        assert part.offsets[-1] == len(part.durations)
        assert (part.submit_s < (k + 1) * chunk_s).all() or chunk_s >= DAY
    assert len(parts) <= int(np.ceil(DAY / chunk_s))


def test_stream_past_the_calibration_keeps_the_rate():
    spec = GoogleWorkloadSpec(seed=1, users=50, calibrate_s=DAY)
    capacity = _capacity(500)
    horizon = 4 * DAY
    joined = _joined(list(google_job_stream(spec, capacity, horizon, 3600.0)))
    first_day = google_jobs(spec.model_copy(update={"calibrate_s": None}), capacity, DAY)
    n = len(first_day.submit_s)
    # The first day is google_jobs's one-day workload, job for job.
    for key in ("submit_s", "user", "tasks", "demand", "warm"):
        assert np.array_equal(joined[key][:n], getattr(first_day, key)), key
    submit = joined["submit_s"]
    assert (np.diff(submit) >= 0).all() and submit[-1] < horizon
    assert not joined["warm"][n:].any()
    # Poisson arrivals at one rate: jobs per day stay the first day's (which has the warm
    # jobs at 0 on top), within a few standard deviations of a Poisson count.
    per_day = np.histogram(submit[submit > 0], bins=4, range=(0, horizon))[0]
    later = per_day[1:]
    assert abs(later.mean() - per_day[0]) < 5 * np.sqrt(per_day[0])
    assert later.max() - later.min() < 8 * np.sqrt(later.mean())
    # google_jobs over the long horizon (all at once) is the same stream.
    whole = google_jobs(spec, capacity, horizon)
    assert np.array_equal(whole.durations, joined["durations"])


def _scenario(**extra: object) -> dict:
    return {
        "kind": "trace",
        "name": "streamed",
        "horizon_s": 4 * 3600,
        "sample_s": 600,
        "cluster": {"google": {"agents": 60, "seed": 2}},
        "jobs": {"google": {"seed": 2, "users": 12, "load": 0.9}},
        **extra,
    }


@pytest.mark.parametrize("scheduler", ["bfdrf", "drf"])
def test_streamed_scenario_simulates_exactly_like_the_whole(scheduler):
    results = []
    for extra in ({}, {"stream_s": 900}):
        workload = parse_trace(_scenario(**extra))
        assert (workload.stream is not None) == bool(extra)
        out = run_trace(workload, EngineConfig(scheduler)).to_json()
        for key in ("wall_s", "sim_s_per_wall_s", "notes"):
            out.pop(key, None)
        results.append(json.dumps(out, sort_keys=True))
    assert results[0] == results[1]
    assert json.loads(results[0])["grants"] > 100


def test_streamed_groups_are_dropped_when_done():
    workload = parse_trace(_scenario(stream_s=900))
    simulator = TraceSimulator(workload, EngineConfig("bfdrf"))
    result = simulator.run()
    done = [g for g, q in enumerate(simulator.queues) if q is None]
    # Every group whose tasks all completed is retired; the others still hold their queue.
    assert len(done) > 0
    assert all(simulator.unfinished[g] == 0 for g in done)
    assert len(simulator.index) == len(simulator.names) - len(done)
    assert result.jobs_submitted == len(simulator.job_submit)


def test_stream_s_needs_google_jobs_and_users_present_from_the_start():
    job = {"user": "u", "tasks": 1, "demand_norm": {"cpus": 0.1}, "duration_s": 5}
    with pytest.raises(ScenarioError, match="stream_s"):
        parse_trace(_scenario(stream_s=600, jobs={"list": [job]}))
    with pytest.raises(ScenarioError, match="join"):
        parse_trace(_scenario(stream_s=600, users=[{"name": "user001", "join_s": 10}]))


def test_progress_returning_true_ends_the_run_at_that_tick():
    workload = parse_trace(_scenario())
    seen: list[float] = []

    def progress(now: float, done: int) -> bool:
        seen.append(now)
        return now >= 1800

    result = run_trace(workload, EngineConfig("bfdrf"), progress)
    assert result.end_s == seen[-1] >= 1800
    assert seen[-2] < 1800
    assert result.makespan_s is None
