"""Reclaim in the batch simulator (issue 22): hand-computed timelines on one agent, the work
lost, protected groups, the fair-share watch, reclaim off unchanged, and the CLI."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from support.commands import run_fairbroker

from allocator.engine_config import EngineConfig
from allocator.scenarios.batch import load_batch, parse_batch
from allocator.sim.batch_sim import BatchSimulator, SimResult
from allocator.sim.trace_sim import run_trace

SCENARIOS = Path(__file__).resolve().parents[1] / "benchmarks" / "scenarios"


def group(name: str, work: float, task_s: float = 40.0, arrival: float | None = None,
          executors: int = 4) -> dict:  # fmt: skip
    spec = {
        "name": name,
        "queues": 1,
        "jobs_per_queue": 1,
        "demand": {"cpus": 1, "mem": 1},
        "executors": executors,
        "job": {"work": work, "startup_s": 0, "executor_start_s": 0, "serial_s": 0,
                "release_spread_s": 0, "task_s": task_s},
    }  # fmt: skip
    if arrival is not None:  # a late arrival: its own pool, its time counts from arrival_s
        spec |= {"admission": {"policy": "fcfs"}, "jobs": [{"arrival_s": arrival}]}
    return spec


def late_batch(task_s: float = 40.0, cpus: int = 4, *groups: dict) -> dict:
    """One agent of `cpus` 1-cpu slots; A fills it at 0 with 4 long executors, B (same
    demand) arrives at 100 s with 200 executor-s of work."""
    return {
        "agents": [{"name": "s", "resources": {"cpus": cpus, "mem": 64}}],
        "groups": [group("a", 4000, task_s), group("b", 200, arrival=100), *groups],
    }


def run(data: dict, **config) -> SimResult:
    engine = EngineConfig("drf", **config)
    return BatchSimulator(parse_batch(data), engine, watch_fair_share=True).run()


def jobs(result: SimResult) -> dict[str, object]:
    return {job.group: job for job in result.jobs}


RECLAIM = {"reclaim_after": 10, "reclaim_grace": 5, "reclaim_min_runtime": 5}


def test_late_tenant_waits_for_the_long_job_without_reclaim():
    """A runs 4 executors from 0 s: 4000 executor-s end at 1000 s; B holds nothing before."""
    result = run(late_batch())
    a, b = jobs(result).values()
    assert a.finished == pytest.approx(1000)
    assert b.fair_share_at >= 1000
    assert b.finished == pytest.approx(1000 + 200 / 4)  # all 4 slots once A is gone
    assert result.to_json().get("reclaim") is None
    assert a.reclaimed == b.reclaimed == 0


def test_late_tenant_reaches_its_fair_share_after_reclaim_after_plus_grace():
    """B registers at 100 s and waits from the run at 100 s; at 110 s (reclaim_after 10) two
    of A's executors are reclaimed (fair share 2 + 2), killed at 115 s (grace 5), and the
    allocation run at 115 s gives B both slots: within reclaim_after + grace + one interval.
    A's tasks are 40 s, started at 0 s: at 110 s each is 30 s into its task, 10 s from its
    end, more than the grace, so each killed executor loses 30 + 5 = 35 executor-s."""
    result = run(late_batch(task_s=40), **RECLAIM)
    a, b = jobs(result).values()
    assert b.fair_share_at - b.submitted <= 10 + 5 + 1
    assert b.fair_share_at == pytest.approx(115)
    assert a.reclaimed == 2 and b.reclaimed == 0
    assert a.work_lost == pytest.approx(2 * 35)
    # B: 200 executor-s on 2 executors from 115 s: ends at 215 s.
    assert b.finished == pytest.approx(215)
    # A: 4 x 115 s done by 115 s, 70 lost; 2 executors until 215 s; then 4 again.
    done = 4 * 115 - 70 + 2 * 100
    assert a.finished == pytest.approx(215 + (4000 - done) / 4)
    reclaim = result.to_json()["reclaim"]
    assert reclaim["executors"] == 2
    assert reclaim["work_lost_s"] == pytest.approx(70)
    assert reclaim["by_group"]["b"]["to_fair_share_s"] == pytest.approx(15)


def test_a_task_ending_within_the_grace_loses_nothing():
    """Tasks of 7 s: at 110 s an executor is 5 s into its 16th task (105 s), which ends at
    112 s, within the grace: no work is lost; the executor idles until the kill at 115 s."""
    result = run(late_batch(task_s=7), **RECLAIM)
    a, b = jobs(result).values()
    assert a.reclaimed == 2
    assert a.work_lost == 0
    # Working 4 until 112 s, 2 from 112 s until B ends at 215 s, then 4.
    done = 4 * 112 + 2 * (215 - 112)
    assert a.finished == pytest.approx(215 + (4000 - done) / 4)
    assert b.fair_share_at == pytest.approx(115)


def test_a_longer_grace_keeps_the_room_used_longer():
    result = run(late_batch(task_s=1000), **(RECLAIM | {"reclaim_grace": 20}))
    a, b = jobs(result).values()
    assert b.fair_share_at == pytest.approx(130)  # 100 + 10 + 20
    assert a.work_lost == pytest.approx(2 * 130)  # killed 130 s into their first task


def test_protected_group_is_never_a_victim():
    """Six slots: A (protected) and C want 3 each and split the agent; B arrives with a fair
    share of 2 (6 slots, 3 tenants): only C gives one executor (down to its fair share 2), A
    keeps its 3 and B stays at 1. Without the protection each gives one."""
    data = late_batch(40, 6)
    data["groups"][0]["executors"] = 3
    data["groups"].append(group("c", 3000, executors=3))
    result = run(data, **RECLAIM, protected_groups=("a",))
    by = jobs(result)
    assert by["a"].reclaimed == 0
    assert by["c"].reclaimed == 1
    assert by["b"].fair_share_at != by["b"].fair_share_at  # never reached: 1 of 2
    unprotected = run(data, **RECLAIM)
    assert jobs(unprotected)["a"].reclaimed == 1 and jobs(unprotected)["c"].reclaimed == 1


def test_whole_group_protected_means_no_reclaim_at_all():
    result = run(late_batch(), **RECLAIM, protected_groups=("a",))
    a, b = jobs(result).values()
    assert a.reclaimed == 0 and a.work_lost == 0
    assert b.fair_share_at >= 1000


#: `fairbroker sim tests/data/spark-fill-frozen.yaml --json` (`make run`'s batch as it was,
#: frozen so the batch can change) at seeds 0 and 1, DRF and rPS-DSF, before the simulator
#: could reclaim (commit 34e87f3): reclaim off changes nothing.
FROZEN_BATCH = Path(__file__).resolve().parent / "data" / "spark-fill-frozen.yaml"
DIGESTS = {
    ("drf", 0): "2b6b43aadbeaa017",
    ("drf", 1): "a4995f5cec72bae1",
    ("rpsdsf", 0): "af0e40791216e61a",
    ("rpsdsf", 1): "ede34a694f0c9792",
}


@pytest.mark.parametrize(("scheduler", "seed"), sorted(DIGESTS))
def test_reclaim_off_replays_the_simulator_unchanged(scheduler: str, seed: int):
    batch = load_batch(FROZEN_BATCH)
    result = BatchSimulator(batch, EngineConfig(scheduler, seed=seed)).run()
    payload = result.to_json()
    payload["finished"] = [round(j.finished, 9) for j in result.jobs]
    text = json.dumps(payload, sort_keys=True)
    assert hashlib.sha256(text.encode()).hexdigest()[:16] == DIGESTS[(scheduler, seed)]
    assert "reclaim" not in payload and "reclaim_after" not in payload["engine"]


def test_sim_cli_acts_on_reclaim_after_and_writes_it_with_the_results(tmp_path: Path):
    path = tmp_path / "late.yaml"
    path.write_text(json.dumps(late_batch()))
    out = run_fairbroker("sim", str(path), "-s", "drf", "--reclaim-after", "10",
                         "--reclaim-grace", "5", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert payload["engine"]["reclaim_after"] == 10
    assert payload["engine"]["reclaim_grace"] == 5
    assert payload["reclaim"]["executors"] == 2
    assert payload["reclaim"]["work_lost_s"] == pytest.approx(70)
    text = run_fairbroker("sim", str(path), "-s", "drf", "--reclaim-after", "10",
                          "--reclaim-grace", "5")  # fmt: skip
    assert "2 executors reclaimed" in text.stdout


def trace(**extra) -> dict:
    """One agent of 4 slots; user a submits 4 tasks of 1000 s at 0 s, user b 4 of 50 s at
    100 s."""
    task = {"demand": {"cpus": 1, "mem": 1}, "tasks": 4}
    return {
        "kind": "trace",
        "name": "late",
        "cluster": {"agents": [{"name": "s", "resources": {"cpus": 4, "mem": 64}}]},
        "jobs": {"list": [{"user": "a", "name": "ja", "submit_s": 0, "duration_s": 1000, **task},
                          {"user": "b", "name": "jb", "submit_s": 100, "duration_s": 50,
                           **task}]},
        **extra,
    }  # fmt: skip


def test_trace_without_reclaim_b_waits_for_a():
    result = run_trace(trace(), EngineConfig("drf"), audit=True)
    assert list(result.jct) == pytest.approx([1000, 1050 - 100])
    assert result.reclaim is None and "reclaim" not in result.to_json()


def test_trace_reclaim_kills_and_reruns_tasks():
    """At 110 s two of a's tasks are reclaimed (fair shares 2 and 2), killed at 115 s: 115 s
    each lost, back in a's queue with their 1000 s. b runs two tasks 115-165 s and two
    165-215 s; a's two re-run tasks start at 215 s and end at 1215 s."""
    result = run_trace(trace(), EngineConfig("drf", **RECLAIM), audit=True)
    assert list(result.jct) == pytest.approx([1215, 215 - 100])
    assert result.tasks_completed == 8
    reclaim = result.to_json()["reclaim"]
    assert reclaim["executors"] == 2
    assert reclaim["work_lost_s"] == pytest.approx(230)
    assert reclaim["by_user"] == {"a": {"executors": 2, "work_lost_s": pytest.approx(230)}}


def test_trace_task_ending_within_the_grace_is_not_lost():
    """a's tasks last 113 s: reclaimed at 110 s, they end at 113 s, within the grace (5 s)."""
    data = trace()
    data["jobs"]["list"][0]["duration_s"] = 113
    result = run_trace(data, EngineConfig("drf", **RECLAIM), audit=True)
    assert result.to_json()["reclaim"]["work_lost_s"] == 0
    assert result.tasks_completed == 8


def test_trace_protected_user_is_never_a_victim():
    result = run_trace(trace(), EngineConfig("drf", **RECLAIM, protected_groups=("a",)))
    assert result.to_json()["reclaim"]["executors"] == 0
    assert list(result.jct) == pytest.approx([1000, 950])


def test_sim_cli_reclaims_on_a_trace(tmp_path: Path):
    path = tmp_path / "late.yaml"
    path.write_text(json.dumps(trace()))
    out = run_fairbroker("sim", str(path), "-s", "drf", "--reclaim-after", "10",
                         "--reclaim-grace", "5", "--json")  # fmt: skip
    assert out.returncode == 0, out.stderr
    payload = json.loads(out.stdout)
    assert payload["engine"]["reclaim_after"] == 10
    assert payload["reclaim"]["work_lost_s"] == pytest.approx(230)


def test_whatif_acts_on_reclaim_and_reports_it():
    from allocator.sim.whatif import run_whatif

    base = EngineConfig(**RECLAIM)
    report = run_whatif(parse_batch(late_batch()), ["drf"], ["characterized"], 2, base)
    (config,) = report.configs
    assert config.reclaimed == [2, 2]
    assert config.work_lost == pytest.approx([70, 70])
    assert "work lost s" in report.render()
    assert report.to_json()["configurations"][0]["work_lost_s"]["mean"] == pytest.approx(70)


@pytest.mark.parametrize(
    ("knobs", "times"),
    [
        ({}, [110, 110]),  # both placements in the run at 110 s
        ({"reclaim_per_run": 1}, [110, 111]),  # one per run
        ({"reclaim_per_minute": 1}, [110, 170]),  # the second once a minute has passed
        ({"reclaim_min_runtime": 200}, [200, 200]),  # A's executors started at 0 s
        ({"reclaim_per_run": 0}, []),
    ],
)
def test_every_bound_acts_in_the_simulator(knobs: dict, times: list[float]):
    simulator = BatchSimulator(parse_batch(late_batch()), EngineConfig("drf", **RECLAIM | knobs))
    simulator.run()
    assert simulator.reclaim is not None
    decisions = simulator.reclaim.decisions
    assert [t for t, _ in decisions] == times
    assert all(d.victim.startswith("a-") and d.beneficiary.startswith("b-") for _, d in decisions)
