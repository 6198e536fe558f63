"""Real Spark through the Mesos path: the broker registers with the test master through
pymesos, and a Spark job's executors run as Mesos command tasks on its local agents."""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest
from mesos_master import AgentSpec, MesosMaster
from spark_support import HOSTS_JOB, Driver, executor_processes, wait_for

from allocator.backends.local import spark_home
from allocator.backends.mesos import MesosBackend, MesosOptions
from allocator.broker.server import BrokerOptions, BrokerService

PI_CONF = {
    "spark.executor.cores": "2",
    "spark.executor.memory": "640m",  # + 384 overhead = 1024 MiB
    "spark.executor.instances": "2",
}
AGENTS = [
    AgentSpec("mem-rich", {"cpus": 4, "mem": 7168}, hostname="127.0.3.1"),
    AgentSpec("cpu-rich", {"cpus": 8, "mem": 4096}, hostname="127.0.3.2"),
]


@contextlib.contextmanager
def mesos_broker(tmp_path: Path, master: MesosMaster, **kw):
    backend = MesosBackend(
        MesosOptions(
            master=master.address, spark_home=str(spark_home()), state_dir=tmp_path / "broker"
        )
    )
    options = BrokerOptions(
        http_port=0, grpc_port=0, state_dir=tmp_path / "broker", tick_seconds=0.5, **kw
    )
    with BrokerService(options, backend=backend) as service:
        yield service


@pytest.fixture
def master(tmp_path: Path):
    with MesosMaster(AGENTS, allocation_interval=0.3, work_dir=tmp_path / "mesos") as running:
        yield running
    with contextlib.suppress(ProcessLookupError):
        for pid in executor_processes(str(tmp_path)):
            os.killpg(pid, signal.SIGKILL)


@pytest.mark.parametrize(
    ("scheduler", "mode"), [("rpsdsf", "characterized"), ("drf", "oblivious")]
)
def test_spark_executors_run_as_mesos_tasks(
    tmp_path: Path, master: MesosMaster, scheduler: str, mode: str
) -> None:
    with mesos_broker(tmp_path, master, scheduler=scheduler, mode=mode) as service:
        driver = Driver(
            service.http_address, [str(HOSTS_JOB), "2", "8", "0.2"], workdir=tmp_path,
            name="pi", group="pi", conf=PI_CONF, oblivious=mode == "oblivious",
        )  # fmt: skip
        code, result = driver.wait(timeout=240)
        assert code == 0, driver.output()
        assert result["sum"] == sum(range(8))
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
