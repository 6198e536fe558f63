"""Real Spark through the Mesos path: the broker registers with the test master through
pymesos, and a Spark job's executors run as Mesos command tasks on its local agents."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from mesos_master import AgentSpec, MesosMaster
from support.mesos import PI_CONF, mesos_broker
from support.polling import wait_for
from support.spark import HOSTS_JOB, Driver, executor_processes

from allocator.broker.proto import pb
from allocator.policy import PAPER_SCHEDULERS

AGENTS = [
    AgentSpec("mem-rich", {"cpus": 4, "mem": 7168}, hostname="127.0.3.1"),
    AgentSpec("cpu-rich", {"cpus": 8, "mem": 4096}, hostname="127.0.3.2"),
]


@pytest.fixture
def master(tmp_path: Path):
    with MesosMaster(AGENTS, allocation_interval=0.3, work_dir=tmp_path / "mesos") as running:
        yield running
    with contextlib.suppress(ProcessLookupError):
        for pid in executor_processes(str(tmp_path)):
            os.killpg(pid, signal.SIGKILL)


# Every scheduler once and both modes in `make test` (DRF oblivious is Mesos's default, rPS-DSF
# characterized the one `make run` shows); the other five pairs in `make test-slow`: the
# Mesos path is the same code for each scheduler, and each real Spark run costs a minute.
IN_MAKE_TEST = {("drf", "oblivious"), ("rpsdsf", "characterized"), ("psdsf", "characterized"),
                ("tsf", "characterized"), ("bfdrf", "oblivious")}  # fmt: skip


@pytest.mark.parametrize(
    ("scheduler", "mode"),
    [
        pytest.param(s, m, marks=() if (s, m) in IN_MAKE_TEST else pytest.mark.slow)
        for s in PAPER_SCHEDULERS
        for m in ("characterized", "oblivious")
    ],
)
def test_spark_executors_run_as_mesos_tasks(
    tmp_path: Path, master: MesosMaster, scheduler: str, mode: str
) -> None:
    with mesos_broker(tmp_path, master, scheduler=scheduler, mode=mode) as service:
        driver = Driver(
            service.http_address, [str(HOSTS_JOB), "2", "4", "0.1"], workdir=tmp_path,
            name="pi", group="pi", conf=PI_CONF, oblivious=mode == "oblivious",
        )  # fmt: skip
        code, result = driver.wait(timeout=240)
        assert code == 0, driver.output()
        assert result["sum"] == sum(range(4))
        tasks = master.tasks()
        assert len(tasks) >= 2
        # every executor was a Mesos task whose resources are exactly the demand
        for task in tasks:
            assert task.resources == {"cpus": 2.0, "mem": 1024.0}, task
        # the driver saw its executors on the agents' addresses (and itself on 127.0.0.1)
        executor_hosts = set(result["hosts"]) - {"127.0.0.1"}
        assert executor_hosts and executor_hosts <= {"127.0.3.1", "127.0.3.2"}
        wait_for(lambda: not executor_processes(str(tmp_path)), 30, "executors to exit")
    calls = master.calls()
    assert all(c.status < 400 for c in calls), [c for c in calls if c.status >= 400]


def test_faults_lose_no_work_and_launch_nothing_twice(tmp_path: Path, master: MesosMaster):
    with mesos_broker(tmp_path, master, scheduler="drf") as service:
        driver = Driver(
            service.http_address, [str(HOSTS_JOB), "2", "160", "0.5"], workdir=tmp_path,
            name="faults", group="pi", conf=PI_CONF,
        )  # fmt: skip
        running = lambda: master.tasks("TASK_RUNNING")  # noqa: E731
        wait_for(lambda: len(running()) == 2, 120, "two executors running as Mesos tasks")
        subscribes = lambda: len(master.calls("SUBSCRIBE"))  # noqa: E731

        master.drop_stream()  # the broker re-subscribes with its framework id
        wait_for(lambda: subscribes() == 2 and master.frameworks()[0].connected, 30,
                 "re-subscription after a dropped stream")  # fmt: skip
        master.fail_next_call("ACCEPT", 500)  # the next launch is refused by the master
        victim = running()[0]
        master.lose_agent(victim.agent_name)  # its executor is lost with it
        wait_for(lambda: len(running()) == 2 and victim.task_id not in
                 {t.task_id for t in running()}, 120, "a replacement executor")  # fmt: skip
        old_id = master.master_id
        master.fail_over()
        wait_for(lambda: subscribes() == 3 and master.frameworks()[0].connected, 30,
                 "re-subscription to the new master")  # fmt: skip
        assert master.master_id != old_id
        code, result = driver.wait(timeout=300)
        assert code == 0, driver.output()
        assert result["sum"] == sum(range(160))
        assert service.broker.allocation().broker.backend == "mesos"  # still serving
        wait_for(lambda: not executor_processes(str(tmp_path)), 30, "executors to exit")
    launched = [
        task["task_id"]["value"]
        for call in master.calls("ACCEPT")
        if call.status == 202
        for op in call.body["accept"]["operations"]
        for task in op["launch"]["task_infos"]
    ]
    assert len(launched) == len(set(launched)) >= 3  # two, then a replacement; no repeats
    # the injected 500; and an ACKNOWLEDGE of an update read from a stream the master had
    # just dropped gets 403 (the agent re-sends the update after re-subscription)
    errors = [(c.type, c.status) for c in master.calls() if c.status >= 400]
    assert ("ACCEPT", 500) in errors, errors
    assert set(errors) <= {("ACCEPT", 500), ("ACKNOWLEDGE", 403)}, errors
    assert all(c.stream_id for c in master.calls() if c.type != "SUBSCRIBE")


def test_status_shows_mesos_view_beside_the_brokers(tmp_path: Path, master: MesosMaster):
    from allocator.backends.mesos.operator_view import MesosOperatorError, mesos_view

    with mesos_broker(tmp_path, master) as service:
        # A tenant with pending demand that no agent holds: the broker keeps taking offers
        # (and declining them) instead of suppressing them, so both agents show up.
        service.broker.register(pb.RegisterRequest(
            tenant_id="big", demand={"cpus": 16, "mem": 1024}, target=1,
            launch=pb.ExecutorLaunch(driver_url="spark://CoarseGrainedScheduler@127.0.0.1:9",
                                     app_id="big", cores=16, heap_mib=512),
        ))  # fmt: skip
        wait_for(lambda: len(service.broker.engine.agents) == 2, 30, "offers from both agents")
        view = mesos_view(master.address)
        assert {a["hostname"] for a in view.state["slaves"]} == {"127.0.3.1", "127.0.3.2"}
        assert [f["name"] for f in view.state["frameworks"]] == ["fairbroker"]
        done = subprocess.run(
            [sys.executable, "-c", "from allocator.cli import main; main()", "status",
             "--broker", service.grpc_address, "--master", master.address],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        assert "mesos backend" in done.stdout and "Mesos master" in done.stdout
        assert "127.0.3.1" in done.stdout and "fairbroker" in done.stdout
    with pytest.raises(MesosOperatorError, match="cannot reach"):
        mesos_view("127.0.0.1:1")
