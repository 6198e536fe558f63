"""The Mesos path's test helpers: a scheduler driver that records every call, a master's
offer, a tenant's register request, the tasks a driver was asked to launch, and a broker
serving through a Mesos master (the project's test master or a real one)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from allocator.backends.local import spark_home
from allocator.backends.mesos import MesosBackend, MesosOptions
from allocator.broker.proto import pb
from allocator.broker.server import BrokerOptions, BrokerService
from support.broker import engine_from

PI_CONF = {
    "spark.executor.cores": "2",
    "spark.executor.memory": "640m",  # + 384 overhead = 1024 MiB
    "spark.executor.instances": "2",
}


class RecordingDriver:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, name: str):
        def record(*args, **kwargs):
            self.calls.append((name, args + tuple(kwargs.values())))

        return record

    def named(self, name: str) -> list[tuple]:
        return [args for call, args in self.calls if call == name]


def offer(offer_id: str, agent: str, host: str, cpus: float, mem: float, role: str = "*"):
    resources = [
        {"name": "cpus", "type": "SCALAR", "scalar": {"value": cpus}, "role": "*",
         "allocation_info": {"role": role}},
        {"name": "mem", "type": "SCALAR", "scalar": {"value": mem}, "role": "*",
         "allocation_info": {"role": role}},
        {"name": "ports", "type": "RANGES", "ranges": {"range": [{"begin": 31000, "end": 32000}]}},
    ]  # fmt: skip
    return {
        "id": {"value": offer_id},
        "framework_id": {"value": "fw-1"},
        "agent_id": {"value": agent},
        "hostname": host,
        "resources": resources,
        "attributes": [{"name": "type", "type": "TEXT", "text": {"value": agent}}],
        "allocation_info": {"role": role},
    }


def tenant(name: str, cpus: float, mem: float, target: int, group: str = "") -> pb.RegisterRequest:
    return pb.RegisterRequest(
        tenant_id=name, group=group, demand={"cpus": cpus, "mem": mem}, target=target,
        launch=pb.ExecutorLaunch(
            driver_url="spark://CoarseGrainedScheduler@10.0.0.5:7078", app_id=f"app-{name}",
            cores=int(cpus), heap_mib=int(mem) - 384,
        ),
    )  # fmt: skip


def launched(driver: RecordingDriver) -> list[dict]:
    return [
        task
        for ids, operations, _filters in driver.named("acceptOffers")
        for op in operations
        for task in op["launch"]["task_infos"]
    ]


@contextlib.contextmanager
def mesos_broker(
    tmp_path: Path, master, spark: Path | None = None, **kw
) -> Iterator[BrokerService]:
    """A broker service on the Mesos backend, subscribed to `master` (anything with an
    `address`); engine fields among `kw` go to its EngineConfig, the rest to BrokerOptions.
    `spark`: the SPARK_HOME executors run from (default: the real one)."""
    engine = engine_from(kw, scheduler="rpsdsf", interval=0.5)
    home = spark_home() if spark is None else spark
    backend = MesosBackend(
        MesosOptions(
            master=master.address, spark_home=str(home), state_dir=tmp_path / "broker",
            refuse_seconds=engine.refuse_seconds,  # as `serve` passes the engine's
        )
    )  # fmt: skip
    options = BrokerOptions(
        engine=engine,
        http_port=0,
        grpc_port=0,
        state_dir=tmp_path / "broker",
        **kw,
    )
    with BrokerService(options, backend=backend) as service:
        yield service


class DelayedFirstReports:
    """Issue 23's race, forced: every `agent_added` applied off the allocation thread
    (pymesos's) after the first waits until an allocation run has flushed (declined the
    held offers, suppressed). Installed on a broker before it starts; `delayed` lists the
    agents whose report was held back past a run."""

    def __init__(self, broker, backend, wait_s: float = 30.0) -> None:
        import threading

        self.first, self.flushed = threading.Event(), threading.Event()
        self.delayed: list[str] = []
        self._flush, self._apply, self._wait_s = backend.flush, broker.agent_added, wait_s
        backend.flush, broker.agent_added = self.flush, self.agent_added

    def flush(self, wants_more: bool = True) -> None:
        self._flush(wants_more)
        if self.first.is_set():
            self.flushed.set()

    def agent_added(self, agent) -> None:
        import threading

        if self.first.is_set() and threading.current_thread().name != "allocation":
            assert self.flushed.wait(self._wait_s), "no allocation run after the first agent"
            self.delayed.append(agent.name)
        self._apply(agent)
        self.first.set()
