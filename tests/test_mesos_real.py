"""The broker's Mesos path against a real Apache Mesos 1.11.0 master and six real agents
(tests/real_mesos.py): real Spark jobs whose executors are Mesos tasks on real agents, and
the faults a real master produces. Skipped when the machine has no Mesos build."""

from __future__ import annotations

from pathlib import Path

import pytest
from real_mesos import SKIP_REASON, RealMesos, mesos_home, processes_under
from spark_support import HOSTS_JOB, Driver, executor_processes, wait_for
from test_mesos_live import PI_CONF, mesos_broker

from allocator.backends.cluster_file import load_cluster_file

pytestmark = pytest.mark.skipif(mesos_home() is None, reason=SKIP_REASON)

AGENTS = load_cluster_file()  # paper 002's three agent types, as the embedded cluster
HOSTS = {a.hostname for a in AGENTS}


@pytest.fixture
def mesos(tmp_path: Path):
    with RealMesos(AGENTS, work_dir=tmp_path / "mesos", agent_ping_timeout=1) as running:
        yield running
    assert not processes_under(tmp_path / "mesos"), "a process outlived the real cluster"


def assert_all_terminal(mesos: RealMesos) -> None:
    tasks = mesos.tasks()
    assert tasks and all(t.state in TERMINAL for t in tasks), [(t.task_id, t.state) for t in tasks]


TERMINAL = {"TASK_FINISHED", "TASK_FAILED", "TASK_KILLED", "TASK_LOST", "TASK_ERROR",
            "TASK_DROPPED", "TASK_GONE"}  # fmt: skip


@pytest.mark.parametrize(("scheduler", "mode"), [("rpsdsf", "characterized"),
                                                 ("drf", "oblivious")])  # fmt: skip
def test_spark_pi_runs_as_tasks_on_real_agents(
    tmp_path: Path, mesos: RealMesos, scheduler: str, mode: str
) -> None:
    with mesos_broker(tmp_path, mesos, scheduler=scheduler, mode=mode) as service:
        driver = Driver(
            service.http_address, [str(HOSTS_JOB), "2", "4", "0.1"], workdir=tmp_path,
            name="pi", group="pi", conf=PI_CONF, oblivious=mode == "oblivious",
        )  # fmt: skip
        code, result = driver.wait(timeout=240)
        assert code == 0, driver.output()
        assert result["sum"] == sum(range(4))
        tasks = mesos.tasks()
        assert len(tasks) >= 2
        for task in tasks:  # every executor was a Mesos task of exactly the demand
            assert task.resources == {"cpus": 2.0, "mem": 1024.0}, task
        executor_hosts = set(result["hosts"]) - {"127.0.0.1"}
        assert executor_hosts and executor_hosts <= HOSTS
        wait_for(lambda: not executor_processes(str(tmp_path)), 60, "executors to exit")
    wait_for(lambda: all(t.state in TERMINAL for t in mesos.tasks()), 30,
             "every Mesos task to reach a terminal state")  # fmt: skip
