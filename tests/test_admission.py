"""Job admission (allocator.admission): paper 004's formulas by hand, the ordering rules, the
state machine, the simulator and the live runner (fake drivers) admitting in policy order,
and one-line errors for bad scenarios."""

from __future__ import annotations

import copy
import itertools
import math
import re
from pathlib import Path

import pytest
import yaml
from support.commands import run_fairbroker
from support.fake_submit import FakeSubmit

from allocator.admission import (
    Admission,
    AdmissionConfig,
    PendingJob,
    Policy,
    deadline_order,
    priority_order,
    wfq_quantum,
    wfq_sizes,
)
from allocator.batch import run_live_batch
from allocator.engine_config import EngineConfig
from allocator.errors import ScenarioError
from allocator.scenarios.batch import parse_batch
from allocator.sim.batch_sim import BatchSimulator


@pytest.mark.parametrize(
    ("n", "lam", "sizes"),
    [
        (10, 0, (3, 3, 4)),  # floor(10/3) = 3; floor(7/2) = 3; 10 - 6 = 4
        (10, 1, (4, 3, 3)),  # 3 + 1 = 4; floor(6/2) = 3; 3
        (7, 2, (4, 1, 2)),  # 2 + 2 = 4; floor(3/2) = 1; 2
        (2, 0, (0, 1, 1)),  # floor(2/3) = 0; floor(2/2) = 1; 1
        (2, 5, (2, 0, 0)),  # lambda beyond n: every job in HQ
        (0, 0, (0, 0, 0)),
    ],
)
def test_queue_sizes(n, lam, sizes):
    assert wfq_sizes(n, lam) == sizes
    assert sum(sizes) == n


def test_time_quanta():
    assert wfq_quantum([5.0, 8.0, 7.0], alpha=2) == 2  # floor(8 / 4)
    assert wfq_quantum([13.0, 9.0, None], alpha=1) == 6  # floor(13 / 2)
    assert wfq_quantum([3.0], alpha=2) == 0  # floor(3 / 4): a zero quantum hands on at once
    assert wfq_quantum([None, None], alpha=1) == math.inf


def job(order, arrival=0.0, priority=0, deadline=None, estimate=0.0) -> PendingJob:
    return PendingJob(order, order, arrival, priority, deadline, estimate)


def test_priority_then_arrival_then_deadline():
    jobs = [
        job(0, arrival=1, priority=2, deadline=9),
        job(1, arrival=0, priority=1, deadline=5),
        job(2, arrival=1, priority=2, deadline=7),
        job(3, arrival=0, priority=2, deadline=9),
        job(4, arrival=0, priority=4),
    ]
    assert [j.key for j in priority_order(jobs)] == [4, 3, 2, 0, 1]
    # Inside HQ/MQ: deadline first (none last), then priority, then arrival.
    assert [j.key for j in deadline_order(jobs)] == [1, 2, 3, 0, 4]


def test_fcfs_and_sjf_fill_free_turns():
    jobs = [job(0, 0, estimate=30), job(1, 2, estimate=10), job(2, 0, estimate=20)]
    fcfs = Admission(jobs, 2, AdmissionConfig(Policy.FCFS))
    assert [j.key for j in fcfs.admit(0)] == [0, 2]
    assert fcfs.admit(5) == []  # both turns held
    fcfs.finished(2)
    assert [j.key for j in fcfs.admit(5)] == [1]
    sjf = Admission(jobs, 1, AdmissionConfig(Policy.SJF))
    assert [j.key for j in sjf.admit(0)] == [2]  # job 1 is shorter but has not arrived
    assert sjf.next_change(0) == 2
    sjf.finished(2)
    assert [j.key for j in sjf.admit(3)] == [1]


def test_wfq_by_hand():
    # Six jobs, two turns, lambda 0: N_HQ = 2, N_MQ = 2, N_LQ = 2.
    jobs = [
        job(0, arrival=0, priority=1),
        job(1, arrival=0, priority=4, deadline=40),
        job(2, arrival=0, priority=3, deadline=20),
        job(3, arrival=1, priority=3, deadline=50),
        job(4, arrival=0, priority=4, deadline=30),
        job(5, arrival=2, priority=1),
    ]
    pool = Admission(jobs, 2, AdmissionConfig(Policy.WFQ, lam=0, alpha1=2, alpha2=1))
    queues = pool.queues
    # Sorted: 1 and 4 (priority 4; same arrival, deadline 30 < 40), 2 (3, arrival 0), 3, 0, 5.
    assert [j.key for j in queues["high"]] == [4, 1]  # by deadline
    assert [j.key for j in queues["medium"]] == [2, 3]
    assert [j.key for j in queues["low"]] == [0, 5]
    assert pool.quanta == (10.0, 25.0, math.inf)  # floor(40/4), floor(50/2)
    assert [j.key for j in pool.admit(0)] == [4, 1]  # HQ takes both turns
    assert pool.next_change(0) == 1  # job 3 arrives
    assert pool.admit(1) == []
    assert pool.next_change(1) == 2  # job 5 arrives
    # At t = 10 both HQ quanta end; the jobs keep running, the turns go to MQ.
    assert pool.next_change(2) == 10
    assert [j.key for j in pool.admit(10)] == [2, 3]
    pool.finished(4)  # ends after its quantum: it holds no turn any more
    assert pool.admit(12) == []
    pool.finished(2)  # ends inside its quantum (until 35): its turn is free
    assert [j.key for j in pool.admit(20)] == [0]  # LQ, first come
    assert pool.next_change(20) == 35  # job 3's quantum
    assert [j.key for j in pool.admit(35)] == [5]
    assert pool.done()
    assert pool.next_change(35) is None  # LQ turns end only when their jobs do


def test_bad_admission_configs():
    with pytest.raises(ScenarioError, match="alpha1"):
        AdmissionConfig(Policy.WFQ, alpha1=1, alpha2=1)
    with pytest.raises(ScenarioError, match="lambda"):
        AdmissionConfig(Policy.WFQ, lam=-1)


# ---- in the simulator -------------------------------------------------------------------

BATCH = {
    "name": "admission",
    "agents": [{"name": "a1", "resources": {"cpus": 4, "mem": 4096}}],
    "groups": [
        {
            "name": "g",
            "queues": 1,
            "jobs_per_queue": 4,
            "demand": {"cpus": 4, "mem": 1024},
            "executors": 1,
            "job": {"work": 10, "startup_s": 0, "executor_start_s": 0, "serial_s": 0},
            "jobs": [
                {"priority": 1, "work": 40},
                {"priority": 3, "work": 30},
                {"priority": 2, "work": 20, "deadline_s": 100},
                {"priority": 4, "work": 10, "arrival_s": 5},
            ],
        }
    ],
}


def simulate(batch: dict, policy: str | None = None):
    """DRF in the simulator, admitting by `policy` (None: the scenario's own sections)."""
    config = AdmissionConfig(Policy(policy)) if policy else None
    return BatchSimulator(parse_batch(batch), EngineConfig("drf"), admission=config).run()


def start_order(batch: dict, policy: str | None) -> list[str]:
    result = simulate(batch, policy)
    return [j.name for j in sorted(result.jobs, key=lambda j: (j.started, j.name))]


def test_simulator_admits_in_policy_order():
    # One turn: a job at a time. Job k of the single queue is named g-q0-jk.
    assert start_order(BATCH, None) == ["g-q0-j0", "g-q0-j1", "g-q0-j2", "g-q0-j3"]
    assert start_order(BATCH, "fcfs") == ["g-q0-j0", "g-q0-j1", "g-q0-j2", "g-q0-j3"]
    # sjf: 20 s (j2) first among those at t = 0; j3 (10 s) has arrived by then.
    assert start_order(BATCH, "sjf") == ["g-q0-j2", "g-q0-j3", "g-q0-j1", "g-q0-j0"]
    # wfq: n = 4 -> HQ 1 (j3, priority 4), MQ 1 (j1), LQ 2 (j0, j2 first come, then in
    # declaration order). At t = 0 j3 has not arrived, so the turn goes to MQ's j1 (infinite
    # quantum: no deadline in MQ), then to j3, then LQ.
    assert start_order(BATCH, "wfq") == ["g-q0-j1", "g-q0-j3", "g-q0-j0", "g-q0-j2"]


def quantum_batch() -> dict:
    """One turn, room for four jobs side by side, six 40 s jobs under wfq with lambda 1:
    HQ = floor(6/3) + 1 = 3 jobs (priority 4, deadlines 40, 20, 30), MQ = floor(3/2) = 1
    (priority 2, deadline 100), LQ = 2 (priority 1). TQ_H = floor(40 / 2^2) = 10 s and
    TQ_M = floor(100 / 2^1) = 50 s."""
    return {
        "name": "quantum",
        "agents": [{"name": "a1", "resources": {"cpus": 16, "mem": 16384}}],
        "groups": [
            {
                "name": "g",
                "queues": 1,
                "jobs_per_queue": 6,
                "demand": {"cpus": 4, "mem": 1024},
                "executors": 1,
                "job": {"work": 40, "startup_s": 0, "executor_start_s": 0, "serial_s": 0},
                "admission": {"policy": "wfq", "lambda": 1, "alpha1": 2, "alpha2": 1},
                "jobs": [
                    {"priority": 1},
                    {"priority": 4, "deadline_s": 40},
                    {"priority": 4, "deadline_s": 20},
                    {"priority": 4, "deadline_s": 30},
                    {"priority": 2, "deadline_s": 100},
                    {"priority": 1},
                ],
            }
        ],
    }


def test_simulated_quantum_hands_the_turn_on_while_the_job_runs():
    jobs = {j.name: j for j in simulate(quantum_batch()).jobs}
    first, second, third, mq, lq0, lq1 = (jobs[f"g-q0-j{k}"] for k in (2, 3, 1, 4, 0, 5))
    # HQ in deadline order (20, 30, 40), one every TQ_H = 10 s, then MQ when HQ is empty.
    assert [first.started, second.started, third.started, mq.started] == [0, 10, 20, 30]
    # Each HQ job is still running when its successor takes the turn (a job takes > 40 s).
    assert first.finished > second.started and second.finished > third.started
    assert third.finished > mq.started
    # Four jobs at once on one turn: at t = 30 none of the four has finished.
    assert min(j.finished for j in (first, second, third, mq)) > 30
    # MQ's job ends inside its 50 s quantum, so it holds the turn to its end; LQ is FCFS
    # and holds its turns to the end.
    assert mq.finished < 30 + 50
    assert lq0.started == mq.finished and lq1.started == lq0.finished


def test_simulated_turnaround_counts_from_arrival():
    fcfs = AdmissionConfig(Policy.FCFS)
    result = BatchSimulator(parse_batch(BATCH), EngineConfig("drf"), admission=fcfs).run()
    jobs = {j.name: j for j in result.jobs}
    late = jobs["g-q0-j3"]  # arrives at 5, starts after j0 (40 s), j1 (30) and j2 (20)
    assert late.submitted == 5 and late.started >= 90
    assert late.finished - late.submitted == pytest.approx(late.finished - 5)
    assert result.to_json()["admission"] == "fcfs"


def test_group_admission_section_and_sim_cli(tmp_path: Path):
    batch = copy.deepcopy(BATCH)
    batch["groups"][0]["admission"] = {"policy": "wfq", "lambda": 0, "alpha1": 3, "alpha2": 1}
    assert start_order(batch, None) == ["g-q0-j1", "g-q0-j3", "g-q0-j0", "g-q0-j2"]
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(batch))
    done = run_fairbroker("sim", str(path), "--compare", "--json", "-s", "drf")
    assert done.returncode == 0, done.stderr
    runs = yaml.safe_load(done.stdout)["runs"]
    rows = [(r["scheduler"], r["mode"], r["admission"]) for r in runs]
    labels = set(rows)
    assert len(rows) == len(labels), rows  # no row twice (the scenario's wfq is not rerun)
    assert ("fuga", "characterized", "wfq") in labels  # the scenario's own policy
    assert {("drf", "characterized", p) for p in ("fcfs", "sjf", "wfq")} <= labels
    # Every compared scheduler in both modes under the scenario's wfq, plus drf/characterized
    # under the two other policies.
    assert len(rows) == 2 * len({r[0] for r in rows}) + 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"priority": -1}, "groups[0].jobs[0].priority"),
        ({"deadline_s": 3, "arrival_s": 4}, "deadline_s: 3 is not after arrival_s 4"),
    ],
)
def test_bad_jobs_are_one_line_errors(tmp_path: Path, change, message):
    batch = copy.deepcopy(BATCH)
    batch["groups"][0]["jobs"][0].update(change)
    path = tmp_path / "b.yaml"
    path.write_text(yaml.safe_dump(batch))
    done = run_fairbroker("sim", str(path))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert message in done.stderr


@pytest.mark.parametrize(
    ("where", "value", "message"),
    [
        ("group", {"policy": "lifo"}, "admission.policy"),
        ("group", {"policy": "wfq", "alpha1": 1, "alpha2": 1}, "alpha1: must be greater"),
        ("batch", {"policy": "fcfs"}, "groups[0].admission: the batch has its own"),
        ("jobs", [{"priority": 1}], "jobs: 1 entries for queues x jobs_per_queue = 4"),
    ],
)
def test_bad_admission_sections(where, value, message):
    batch = copy.deepcopy(BATCH)
    if where == "jobs":
        batch["groups"][0]["jobs"] = value
    else:
        batch["groups"][0]["admission"] = {"policy": "sjf"} if where == "batch" else value
        if where == "batch":
            batch["admission"] = value
    with pytest.raises(ScenarioError, match=re.escape(message)):
        parse_batch(batch)


def test_unknown_admission_option_is_one_line():
    done = run_fairbroker("sim", "benchmarks/scenarios/spark-small.yaml", "--admission", "lifo")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "'lifo' is not one of fcfs, sjf, wfq" in done.stderr


# ---- in the live runner (fake drivers; the real batch is in test_admission_live.py) ------


def live_batch() -> dict:
    return {
        "name": "live-admission",
        "agents": [{"name": "a1", "resources": {"cpus": 8, "mem": 8192}}],
        "groups": [
            {
                "name": "pi",
                "queues": 1,
                "jobs_per_queue": 4,
                "spark": {"spark.executor.cores": 1, "spark.executor.memory": "640m"},
                "executors": 1,
                "app": {"kind": "pi", "partitions": 1, "samples": 1000},
                "job": {"work": 10},
                "jobs": [{"priority": 1}, {"priority": 3}, {"priority": 2}, {"priority": 4}],
            }
        ],
    }


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("fcfs", ["pi-q0-j0", "pi-q0-j1", "pi-q0-j2", "pi-q0-j3"]),
        # n = 4: HQ = {j3}, MQ = {j1}, LQ = {j2, j0} (priority order, then FCFS in LQ).
        ("wfq", ["pi-q0-j3", "pi-q0-j1", "pi-q0-j0", "pi-q0-j2"]),
    ],
)
def test_live_runner_admits_in_policy_order(tmp_path: Path, policy, expected):
    submit = FakeSubmit(tmp_path, {})
    result = run_live_batch(
        parse_batch(live_batch()),
        broker="127.0.0.1:1",
        snapshot=None,
        workdir=tmp_path / "work",
        progress=False,
        sample_interval=0.05,
        submit=submit,
        admission=AdmissionConfig(Policy(policy)),
    )
    assert all(j.ok for j in result.jobs), result.render_summary()
    order = [j.name for j in sorted(result.jobs, key=lambda j: j.submitted_s)]
    assert order == expected
    # One turn: each job starts after the one before it ended.
    by_start = sorted(result.jobs, key=lambda j: j.submitted_s)
    assert all(b.submitted_s >= a.ended_s for a, b in itertools.pairwise(by_start))
    assert [c["conf"]["spark.app.name"] for c in submit.calls] == expected


def test_live_runner_hands_the_turn_on_after_the_quantum(tmp_path: Path):
    # n = 4, lambda 1: HQ = floor(4/3) + 1 = 2 (j0, deadline 2; j1, deadline 4), MQ =
    # floor(2/2) = 1 (j2, no deadline: infinite quantum), LQ = 1 (j3). TQ_H = floor(4/4) = 1 s.
    batch = live_batch()
    batch["groups"][0]["jobs"] = [
        {"priority": 4, "deadline_s": 2},
        {"priority": 4, "deadline_s": 4},
        {"priority": 2},
        {"priority": 1},
    ]
    # The HQ jobs run 3 s, three quanta.
    submit = FakeSubmit(tmp_path, {f"pi-q0-j{k}": {"FAKE_SLEEP": "3"} for k in (0, 1)})
    result = run_live_batch(
        parse_batch(batch),
        broker="127.0.0.1:1",
        snapshot=None,
        workdir=tmp_path / "work",
        progress=False,
        # Longer than the batch: the runner must wake for the quantum's end by itself.
        sample_interval=60,
        submit=submit,
        admission=AdmissionConfig(Policy.WFQ, lam=1, alpha1=2, alpha2=1),
    )
    assert all(j.ok for j in result.jobs), result.render_summary()
    j0, j1, j2, j3 = sorted(result.jobs, key=lambda j: j.submitted_s)
    assert [j.name for j in (j0, j1, j2, j3)] == [f"pi-q0-j{k}" for k in range(4)]
    # j1 takes the turn when j0's 1 s quantum ends, while j0 still runs; j2 (MQ) when j1's
    # quantum ends, while j1 still runs; j3 (LQ) only after j2, whose quantum is infinite.
    assert 1.0 <= j1.submitted_s < j0.ended_s
    assert 2.0 <= j2.submitted_s < j1.ended_s
    assert j3.submitted_s >= j2.ended_s


def test_compare_says_what_the_admission_rows_measure():
    from allocator.cli.sim import _admission_note

    def row(admission: str, makespan: float, jct: float) -> dict:
        return {"admission": admission, "makespan_s": makespan, "jct_s": {"mean": jct}}

    queues = [row("queues", 2300.0, 40.6)]
    pools = [row(a, 2211.1, 1121.9) for a in ("fcfs", "sjf", "wfq")]
    note = " ".join(_admission_note(queues + pools))
    assert "admission rows (fcfs, sjf, wfq)" in note and "not comparable" in note
    assert "identical makespans and JCTs" in note
    pools[1] = row("sjf", 2150.0, 900.0)
    assert "identical" not in " ".join(_admission_note(queues + pools))
    assert _admission_note(queues) == [] and _admission_note(pools) == []
