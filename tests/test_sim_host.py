"""Executors starting on the one machine of an emulated cluster (allocator.sim.host): the
host's cores shared equally among the executors starting at once, in the simulator and in
the calibration that replays a live run's start-ups (benchmarks/calibrate_live.py)."""

from __future__ import annotations

import numpy as np
import pytest

from allocator.engine_config import EngineConfig
from allocator.errors import ScenarioError
from allocator.scenarios.batch import parse_batch
from allocator.sim.batch_sim import BatchSimulator
from allocator.sim.host import StartingExecutors
from benchmarks.calibrate_live import replay_starts


def drain(host: StartingExecutors, launches: list[tuple[float, str]]) -> dict[str, float]:
    """When each key's start is done, launches added at their times."""
    done: dict[str, float] = {}
    pending = sorted(launches)
    while pending or host.keys:
        when = host.next_done()
        if pending and pending[0][0] <= when:
            at, key = pending.pop(0)
            host.add(key, 10.0, at)
            continue
        for key in host.pop_done(when):
            done[str(key)] = when
    return done


def test_four_starts_on_two_cores_take_twice_as_long():
    # 4 x 10 CPU-s on 2 cores: each gets half a core, all done at 20 s
    assert drain(StartingExecutors(2), [(0, k) for k in "abcd"]) == pytest.approx(
        {k: 20.0 for k in "abcd"}
    )


def test_a_start_alone_gets_one_core_not_more():
    assert drain(StartingExecutors(2), [(0, "a")]) == {"a": 10.0}
    assert drain(StartingExecutors(float("inf")), [(0, k) for k in "ab"]) == {"a": 10, "b": 10}


def test_later_starts_slow_the_earlier_ones():
    # a, b alone on 2 cores for 5 s (5 CPU-s left each); then c, d join: half a core each,
    # a and b done at 15 s, when c and d have 5 left; alone again, done at 20 s
    done = drain(StartingExecutors(2), [(0, "a"), (0, "b"), (5, "c"), (5, "d")])
    assert done == pytest.approx({"a": 15, "b": 15, "c": 20, "d": 20})


def test_a_removed_start_frees_its_share():
    host = StartingExecutors(2)
    for key in "abcd":
        host.add(key, 10.0, 0.0)
    assert host.remove("c", 4.0) and host.remove("d", 4.0)  # 2 CPU-s done each by then
    assert not host.remove("c", 4.0)
    assert host.next_done() == pytest.approx(12.0)  # 8 left at a full core
    assert host.pop_done(12.0) == ["a", "b"]


def one_job(executors: int, host: dict | None, start_cpu_s: float = 10.0) -> dict:
    data = {
        "agents": [{"name": "s", "resources": {"cpus": 8, "mem": 8}}],
        "groups": [
            {
                "name": "g",
                "queues": 1,
                "jobs_per_queue": 1,
                "demand": {"cpus": 1, "mem": 1},
                "executors": executors,
                "job": {"work": 40, "startup_s": 5, "executor_start_s": 1, "serial_s": 2,
                        "start_cpu_s": start_cpu_s},
            }
        ],
    }  # fmt: skip
    if host is not None:
        data["host"] = host
    return data


@pytest.mark.parametrize(
    ("executors", "host", "finished"),
    [
        # driver up at 5 s; 4 executors share 2 cores: 40 CPU-s take 20 s, then the fixed
        # 1 s: working from 26 s, 40 executor-s at 4 take 10 s, 2 s serial: 38 s
        (4, {"cores": 2}, 5 + 20 + 1 + 10 + 2),
        # 8 executors on 2 cores: 40 s of start-up, then 5 s of work
        (8, {"cores": 2}, 5 + 40 + 1 + 5 + 2),
        # 4 cores for 4 executors: one each, 10 s
        (4, {"cores": 4}, 5 + 10 + 1 + 10 + 2),
        # no host: every executor has a core of its own
        (8, None, 5 + 10 + 1 + 5 + 2),
    ],
)
def test_the_simulator_shares_the_host_among_starting_executors(executors, host, finished):
    result = BatchSimulator(parse_batch(one_job(executors, host)), EngineConfig("drf")).run()
    assert result.jobs[0].finished == pytest.approx(finished)


def test_without_start_cpu_the_host_changes_nothing():
    plain = BatchSimulator(parse_batch(one_job(8, None, 0.0)), EngineConfig("drf")).run()
    hosted = BatchSimulator(parse_batch(one_job(8, {"cores": 1}, 0.0)), EngineConfig("drf")).run()
    assert plain.jobs[0].finished == hosted.jobs[0].finished == pytest.approx(5 + 1 + 5 + 2)


@pytest.mark.parametrize("cores", [0, -1, "x"])
def test_bad_host_is_a_one_line_error(cores):
    with pytest.raises(ScenarioError, match=r"host\.cores"):
        parse_batch({**one_job(2, None), "host": {"cores": cores}})


def test_the_calibration_replays_a_run_through_the_same_sharing():
    # 4 executors at 0 s and one at 30 s, 10 CPU-s each on 2 cores: the four are ready at
    # 20 s, the last alone at 40 s
    executors = [{"launched": 0.0, "ready": 1.0, "left": 0.0} for _ in range(4)]
    executors.append({"launched": 30.0, "ready": 1.0, "left": 0.0})
    assert replay_starts(executors, 10.0, 2.0) == pytest.approx([20, 20, 20, 20, 40])
    # one more that ran no task (ready None) competes until it leaves at 5 s: 0-5 s, five
    # starting at 0.4 core each, 2 CPU-s done; then 8 left at half a core take 16 s
    executors.append({"launched": 0.0, "ready": None, "left": 5.0})
    replayed = replay_starts(executors, 10.0, 2.0)
    assert replayed[:4] == pytest.approx([21.0] * 4)
    assert replayed[4] == pytest.approx(40.0)
    assert np.isnan(replayed[5])
