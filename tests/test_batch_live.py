"""The live batch runner with fake drivers and a fake broker snapshot, and the `app:` schema.

A fake driver is a small Python script standing in for spark-submit: it answers like the
real apps (Pi, a Python word count of the generated input), sleeps, and can fail, hang or
leave a child behind, so queueing, timing, answer checks, sampling and teardown are checked
in seconds. The real batch through the broker is tested with the broker itself.
"""

from __future__ import annotations

import _thread
import json
import math
import os
import signal
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict
from support.fake_submit import FakePlan, FakeSubmit
from support.polling import wait_for

from allocator.batch import run_live_batch
from allocator.batch.allocation import parse_allocation
from allocator.batch.answers import parse_result, pi_tolerance
from allocator.broker.proto import pb
from allocator.errors import FairbrokerError, ScenarioError
from allocator.scenarios.batch import load_batch, parse_batch

SCENARIOS = Path(__file__).resolve().parents[1] / "benchmarks" / "scenarios"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has exited; only its parent's wait() is missing.
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ")[-1].startswith("Z"))


def scenario(pi_jobs: int = 2, wc_jobs: int = 1, queues: int = 2, **pi_app: object) -> dict:
    job = {"work": 10}
    return {
        "name": "fake",
        "agents": [
            {"name": "a1", "resources": {"cpus": 8, "mem": 8192}},
            {"name": "a2", "resources": {"cpus": 4, "mem": 8192}},
        ],
        "groups": [
            {
                "name": "pi",
                "weight": 2,
                "queues": queues,
                "jobs_per_queue": pi_jobs,
                "spark": {"spark.executor.cores": 2, "spark.executor.memory": "640m"},
                "executors": 3,
                "app": {"kind": "pi", "partitions": 4, "samples": 1000, **pi_app},
                "job": job,
            },
            {
                "name": "wordcount",
                "queues": 1,
                "jobs_per_queue": wc_jobs,
                "spark": {"spark.executor.memory": "1408m", "spark.executor.instances": 2},
                "app": {"kind": "wordcount", "input_mb": 0.05, "seed": 3},
                "job": job,
            },
        ],
    }


class FakeBroker:
    """Allocation snapshots: pi holds 4 cpus / 2048 MiB on a1 (2 executors) and wordcount
    1 cpu / 1792 MiB on a2; each call is one more grant. Built with the real protobuf
    classes, so the JSON has proto3's quirks (int64 as strings, defaults left out)."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self) -> dict:
        self.calls += 1
        allocation = pb.Allocation(
            broker=pb.BrokerInfo(scheduler="drf", mode="characterized", grants_total=self.calls),
            tenants=[
                pb.TenantAllocation(
                    tenant_id="app-1", group="pi", running=2, allocated={"cpus": 4, "mem": 2048}
                ),
                pb.TenantAllocation(
                    tenant_id="app-2",
                    group="wordcount",
                    running=1,
                    allocated={"cpus": 1, "mem": 1792},
                ),
            ],
            agents=[
                pb.AgentAllocation(
                    name="a1", capacity={"cpus": 8, "mem": 8192}, executors={"app-1": 2}
                ),
                pb.AgentAllocation(
                    name="a2", capacity={"cpus": 4, "mem": 8192}, executors={"app-2": 1}
                ),
            ],
        )
        return MessageToDict(allocation)


# ---- the `app:` section --------------------------------------------------------------------


def test_app_section_validates():
    spec = parse_batch(scenario())
    pi, wordcount = (g.app for g in spec.groups)
    assert (pi.kind, pi.partitions, pi.samples, pi.seed) == ("pi", 4, 1000, 0)
    assert (wordcount.kind, wordcount.input_mb, wordcount.partitions) == ("wordcount", 0.05, None)
    data = scenario()
    data["groups"][0]["app"] = {"kind": "script", "path": "job.py", "args": ["x", 3]}
    assert parse_batch(data).groups[0].app.args == ["x", 3]
    del data["groups"][0]["app"]
    assert parse_batch(data).groups[0].app is None  # the simulator does not need it


@pytest.mark.parametrize(
    ("app", "message"),
    [
        ({"kind": "pi", "partitions": 0}, "groups[0].app.partitions: Input should be greater"),
        ({"kind": "pi", "samples": "many"}, "groups[0].app.samples: Input should be a valid"),
        ({"kind": "wordcount"}, "groups[0].app.input_mb: missing"),
        ({"kind": "wordcount", "input_mb": -1}, "groups[0].app.input_mb: Input should be greater"),
        ({"kind": "script", "args": []}, "groups[0].app.path: missing"),
        ({"kind": "pi", "colour": "red"}, "groups[0].app.colour: unknown field"),
        ({"partitions": 3}, "groups[0].app.kind: missing (one of pi, wordcount, script)"),
        ({"kind": "sort"}, "groups[0].app: Input tag 'sort' found using 'kind' does not match"),
        ("pi", "groups[0].app: Input should be a valid dictionary"),
    ],
)
def test_bad_app_is_one_line_error(app: object, message: str):
    data = scenario()
    data["groups"][0]["app"] = app
    with pytest.raises(ScenarioError) as error:
        parse_batch(data)
    assert str(error.value).startswith(message)
    assert "\n" not in str(error.value)


def test_spark_small_scenario():
    spec = load_batch(SCENARIOS / "spark-small.yaml")
    demands = {g.name: g.executor_demand() for g in spec.groups}
    assert demands["pi"][0] == {"cpus": 2, "mem": 1024}
    assert demands["wordcount"][0] == {"cpus": 1, "mem": 1792}
    assert {g.name: g.app.kind for g in spec.groups} == {"pi": "pi", "wordcount": "wordcount"}
    assert spec.description and spec.calibration
    types = {a.attributes["type"]: (a.resources["cpus"], a.resources["mem"]) for a in spec.agents}
    assert types == {"t1": (4, 7168), "t2": (8, 4096), "t3": (6, 5632)}
    assert len(spec.agents) == 6


def test_live_runner_needs_app_and_spark(tmp_path: Path):
    data = scenario()
    del data["groups"][1]["app"]
    with pytest.raises(ScenarioError, match=r"groups\[1\] \(wordcount\): a live run needs an"):
        run_live_batch(
            parse_batch(data),
            broker="h:1",
            snapshot=None,
            workdir=tmp_path,
            progress=False,
            submit=FakeSubmit(tmp_path),
        )
    data = scenario()
    del data["groups"][0]["spark"]
    data["groups"][0]["demand"] = {"cpus": 2, "mem": 1024}
    with pytest.raises(ScenarioError, match=r"groups\[0\] \(pi\): a live run needs a `spark:`"):
        run_live_batch(
            parse_batch(data),
            broker="h:1",
            snapshot=None,
            workdir=tmp_path,
            progress=False,
            submit=FakeSubmit(tmp_path / "x"),
        )


# ---- answers and snapshots -------------------------------------------------------------------


def test_parse_result_takes_the_last_result_line():
    log = "INFO x\nRESULT pi=3.0 samples=4\nWARN RESULT pi=9 not at line start\nRESULT pi=3.1\n"
    assert parse_result(log) == {"pi": "3.1"}
    assert parse_result("no result here\nRESULTS pi=3\n") is None
    assert pi_tolerance(1_600_000) == pytest.approx(6 * 1.642 / math.sqrt(1_600_000), rel=1e-3)


def test_parse_allocation_reads_proto_json():
    sample = parse_allocation(FakeBroker()())
    assert sample.grants_total == 1
    assert sample.capacity == {"cpus": 12, "mem": 16384}
    assert sample.allocated == {
        "pi": {"cpus": 4, "mem": 2048},
        "wordcount": {"cpus": 1, "mem": 1792},
    }
    assert sample.agent_executors == {"a1": {"pi": 2}, "a2": {"wordcount": 1}}
    assert (sample.scheduler, sample.running) == ("drf", {"pi": 2, "wordcount": 1})
    empty = parse_allocation(MessageToDict(pb.Allocation(broker=pb.BrokerInfo())))
    assert empty.grants_total == 0 and empty.allocated == {}
    assert parse_allocation({}).grants_total is None
    with pytest.raises(FairbrokerError, match=r"tenants\[0\].allocated.cpus is not a number"):
        parse_allocation({"tenants": [{"allocated": {"cpus": "lots"}}]})


# ---- the runner ------------------------------------------------------------------------------


def test_queues_run_jobs_in_order_and_in_parallel(tmp_path: Path):
    submit = FakeSubmit(tmp_path, {"pi-q1-j0": {"FAKE_SLEEP": "0.6"}})
    broker = FakeBroker()
    result = run_live_batch(
        parse_batch(scenario(pi_jobs=2, wc_jobs=1)),
        broker="127.0.0.1:7080",
        snapshot=broker,
        workdir=tmp_path / "work",
        oblivious=True,
        token="secret",
        progress=False,
        sample_interval=0.05,
        submit=submit,
    )
    jobs = {j.name: j for j in result.jobs}
    assert list(jobs) == ["pi-q0-j0", "pi-q0-j1", "pi-q1-j0", "pi-q1-j1", "wordcount-q0-j0"]
    assert all(j.ok and j.exit_code == 0 for j in result.jobs), result.render_summary()
    # One after another within a queue, all queues at once.
    assert jobs["pi-q0-j1"].submitted_s >= jobs["pi-q0-j0"].ended_s
    assert jobs["pi-q1-j1"].submitted_s >= jobs["pi-q1-j0"].ended_s >= 0.6
    assert max(jobs[f"{q}-j0"].submitted_s for q in ("pi-q0", "pi-q1", "wordcount-q0")) < 0.5
    # the last job's end and the batch's are read a moment apart (0.026 s seen under load)
    assert result.makespan_s == pytest.approx(max(j.ended_s for j in result.jobs), abs=0.25)
    assert result.makespan_s < sum(j.duration_s for j in result.jobs)
    # What was submitted: group, options and the Spark conf per job. The group's weight (2) is
    # not each job's: it is the broker's role weight (tests/test_parity.py), as in simulation.
    call = next(c for c in submit.calls if c["conf"]["spark.app.name"] == "pi-q0-j1")
    assert call["app_args"][0].endswith("spark_shim/apps/pi.py")
    assert call["app_args"][1:] == ["4", "1000", "--seed", "0"]
    assert (call["broker"], call["group"], call.get("weight", 1.0)) == ("127.0.0.1:7080", "pi", 1.0)
    assert (call["oblivious"], call["token"]) == (True, "secret")
    assert call["conf"] == {
        "spark.app.name": "pi-q0-j1",
        "spark.executor.cores": "2",
        "spark.executor.memory": "640m",
        "spark.executor.instances": "3",  # from `executors:`
    }
    wc = next(c for c in submit.calls if c["group"] == "wordcount")
    assert wc["app_args"][2:] == [
        str(tmp_path / "work/outputs/wordcount-q0-j0.json"),
        "--partitions",
        "4",
    ]
    assert Path(wc["app_args"][1]).stat().st_size >= 0.05 * 1024 * 1024
    assert "some driver log line" in jobs["pi-q0-j0"].log.read_text()
    assert jobs["pi-q0-j0"].log == tmp_path / "work/jobs/pi-q0-j0.log"
    # Sampling: constant allocation while jobs ran, one grant per snapshot call.
    assert result.grants == broker.calls - 1 > 5
    assert result.allocated() == pytest.approx({"cpus": 5 / 12, "mem": 3840 / 16384})
    assert result.allocated("pi") == pytest.approx({"cpus": 4 / 12, "mem": 2048 / 16384})
    agents = result.series.agent_average()
    assert agents == {"a1": {"pi": pytest.approx(2)}, "a2": {"wordcount": pytest.approx(1)}}
    assert not any(alive(pid) for pid in submit.pids())


def test_wrong_answers_failures_and_timeouts_are_recorded(tmp_path: Path):
    submit = FakeSubmit(
        tmp_path,
        {
            "pi-q0-j0": {"FAKE_PI": "3.3"},
            "pi-q1-j0": {"FAKE_EXIT": "3"},
            "pi-q1-j1": {"FAKE_SLEEP": "60", "FAKE_CHILD": "1"},
        },
    )
    start = time.monotonic()
    result = run_live_batch(
        parse_batch(scenario(pi_jobs=2, wc_jobs=1)),
        broker="h:1",
        snapshot=None,
        workdir=tmp_path / "work",
        progress=False,
        job_timeout=2,
        submit=submit,
    )
    assert time.monotonic() - start < 50  # the timed-out job's 60 s were not waited out
    details = {j.name: (j.ok, j.exit_code, j.detail) for j in result.jobs}
    assert details["pi-q0-j0"][:2] == (False, 0)
    assert details["pi-q0-j0"][2].startswith("pi=3.300000 is too far")
    assert details["pi-q1-j0"] == (False, 3, "exit code 3")
    assert details["pi-q1-j1"] == (False, None, "timed out")
    assert details["pi-q0-j1"][0] and details["wordcount-q0-j0"][0]
    assert [j.name for j in result.failures] == ["pi-q0-j0", "pi-q1-j0", "pi-q1-j1"]
    # the timed-out job's child too: it was SIGKILLed, and dies (is reaped by init) within
    # moments; left alone it would sleep for two minutes
    wait_for(lambda: not any(alive(pid) for pid in submit.pids()), 30, "the jobs' processes to end")
    summary = result.render_summary()
    assert "no allocation samples" in summary
    assert "failed: pi-q1-j1: timed out" in summary
    payload = json.loads(json.dumps(result.to_json()))
    assert payload["failures"] == 3 and payload["grants"] is None
    with pytest.raises(FairbrokerError, match="no allocation samples to plot"):
        result.plot(tmp_path / "plot.png")


def test_interrupt_stops_every_driver(tmp_path: Path):
    # Ctrl-C raises KeyboardInterrupt only where SIGINT is not ignored: a shell running the
    # suite in the background (`make test &`) hands it down ignored.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        _interrupt_stops_every_driver(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def _interrupt_stops_every_driver(tmp_path: Path) -> None:
    # the jobs outlast the wait for them to start, however slow the machine
    slow = {"FAKE_SLEEP": "600", "FAKE_CHILD": "1"}
    submit = FakeSubmit(tmp_path, {"pi-q0-j0": slow, "pi-q1-j0": slow, "wordcount-q0-j0": slow})
    interrupted: list[float] = []

    def interrupt_once_started() -> None:
        """Ctrl-C as soon as the three drivers and their children are up."""
        deadline = time.monotonic() + 120
        while len(submit.pids()) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)
        interrupted.append(time.monotonic())
        _thread.interrupt_main()

    timer = threading.Thread(target=interrupt_once_started, daemon=True)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        run_live_batch(
            parse_batch(scenario()),
            broker="h:1",
            snapshot=FakeBroker(),
            workdir=tmp_path / "w",
            progress=False,
            sample_interval=0.05,
            submit=submit,
        )
    timer.join()
    assert time.monotonic() - interrupted[0] < 30  # stopped at once, not at the jobs' end
    pids = submit.pids()
    assert len(pids) == 6  # three drivers and their children had started
    assert not any(alive(pid) for pid in pids)
    assert not [t for t in threading.enumerate() if t.name.startswith("queue-")]


def test_submit_errors_propagate_and_stop_the_batch(tmp_path: Path):
    class Broken(FakeSubmit):
        def __call__(self, app_args: Sequence[str], **options: object) -> FakePlan:
            if options["group"] == "wordcount":
                raise FairbrokerError("--broker: expected HOST:PORT")
            return super().__call__(app_args, **options)

    submit = Broken(tmp_path, {"pi-q0-j0": {"FAKE_SLEEP": "60"}})
    with pytest.raises(FairbrokerError, match="expected HOST:PORT"):
        run_live_batch(
            parse_batch(scenario()),
            broker="h",
            snapshot=None,
            workdir=tmp_path / "w",
            progress=False,
            submit=submit,
        )
    assert not any(alive(pid) for pid in submit.pids())


def test_the_brokers_ca_reaches_the_drivers_environment_not_this_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`batch --broker --ca-file`: each driver gets FAIRBROKER_CA_FILE (the CA's absolute
    path, for its plugin) in its own environment, and the batch's process keeps its own; a
    batch given no CA hands its drivers none, even where this process has one set."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ca.pem").write_text("not read by the fake drivers\n")
    monkeypatch.setenv("FAIRBROKER_CA_FILE", "/elsewhere/ca.pem")
    for ca_file, expected in (("ca.pem", str(tmp_path / "ca.pem")), (None, "-")):
        submit = FakeSubmit(tmp_path / f"fake-{expected != '-'}")
        result = run_live_batch(
            parse_batch(scenario(pi_jobs=1, wc_jobs=1, queues=1)), broker="127.0.0.1:1",
            snapshot=None, workdir=tmp_path / f"out-{expected != '-'}", progress=False,
            submit=submit, ca_file=ca_file,
        )  # fmt: skip
        assert not result.failures
        seen = {p.stem: p.read_text() for p in submit.state.glob("*.ca")}
        assert seen == {"pi-q0-j0": expected, "wordcount-q0-j0": expected}
        assert os.environ["FAIRBROKER_CA_FILE"] == "/elsewhere/ca.pem"  # untouched


def test_snapshot_failures_do_not_stop_the_batch(tmp_path: Path):
    broker = FakeBroker()

    def flaky() -> dict:
        if broker.calls % 2:
            broker.calls += 1
            raise ConnectionError("broker restarting")
        return broker()

    result = run_live_batch(
        parse_batch(scenario(pi_jobs=1, wc_jobs=1, queues=1)),
        broker="h:1",
        snapshot=flaky,
        workdir=tmp_path / "w",
        progress=False,
        sample_interval=0.05,
        submit=FakeSubmit(tmp_path),
    )
    assert all(j.ok for j in result.jobs)
    assert result.sample_errors > 0 and result.series.samples > 0
    assert "ConnectionError: broker restarting" in result.render_summary()


def test_summary_json_and_plot(tmp_path: Path):
    result = run_live_batch(
        parse_batch(scenario(pi_jobs=1, wc_jobs=1)),
        broker="h:1",
        snapshot=FakeBroker(),
        workdir=tmp_path / "w",
        progress=True,
        sample_interval=0.05,
        submit=FakeSubmit(tmp_path),
    )
    lines = result.render_summary().splitlines()
    assert lines[0].startswith("fake: live, broker h:1, drf/characterized, 3 jobs, makespan")
    assert lines[1].split() == [
        "group",
        "jobs",
        "failed",
        "jct",
        "mean",
        "median",
        "max",
        "cpus",
        "%",
        "mem",
        "%",
    ]
    assert lines[2].split()[:3] == ["pi", "2", "0"]
    assert lines[4].split()[:3] == ["all", "3", "0"]
    assert lines[4].split()[-2:] == ["41.7", "23.4"]  # 5/12 cpus, 3840/16384 mem
    assert any(line.split()[:3] == ["a1", "2.0", "(2)"] for line in lines)
    payload = json.loads(json.dumps(result.to_json()))
    assert payload["jobs"] == 3 and payload["failures"] == 0
    assert set(payload["jct_by_group_s"]) == {"pi", "wordcount"}
    assert payload["executors_per_agent"]["a1"]["pi"] == {"mean": 2.0, "peak": 2}
    assert payload["allocated_by_group"]["wordcount"]["cpus"] == pytest.approx(1 / 12, abs=1e-4)
    result.plot(tmp_path / "alloc.png")
    assert (tmp_path / "alloc.png").stat().st_size > 1000


def test_bad_arguments(tmp_path: Path):
    spec = parse_batch(scenario())
    for options in ({"sample_interval": 0}, {"job_timeout": -1}):
        with pytest.raises(FairbrokerError, match="must be positive"):
            run_live_batch(
                spec,
                broker="h:1",
                snapshot=None,
                workdir=tmp_path,
                progress=False,
                submit=FakeSubmit(tmp_path),
                **options,
            )


def test_script_app_is_checked_by_exit_code(tmp_path: Path):
    job = tmp_path / "my_job.py"
    job.write_text("# any PySpark script\n")
    data = scenario(pi_jobs=1, queues=1)
    data["groups"][0]["app"] = {"kind": "script", "path": str(job), "args": ["x", 3, True]}
    submit = FakeSubmit(tmp_path / "fake")
    result = run_live_batch(
        parse_batch(data),
        broker="h:1",
        snapshot=None,
        workdir=tmp_path / "w",
        progress=False,
        submit=submit,
    )
    first = result.jobs[0]
    assert (first.name, first.ok, first.detail) == ("pi-q0-j0", True, "exit code 0")
    call = next(c for c in submit.calls if c["group"] == "pi")
    assert call["app_args"] == [str(job), "x", "3", "true"]
    data["groups"][0]["app"]["path"] = str(tmp_path / "missing.py")
    with pytest.raises(ScenarioError, match=r"groups\[0\] \(pi\).app.path: no such file"):
        run_live_batch(
            parse_batch(data),
            broker="h:1",
            snapshot=None,
            workdir=tmp_path / "w",
            progress=False,
            submit=submit,
        )
