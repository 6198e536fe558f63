"""The broker against a recording backend: grants, statuses, leases, restarts, bad input,
and both transports of the tenant API (real gRPC and HTTP servers on loopback)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from support.broker import AGENTS, PI, WORDCOUNT, RecordingBackend, http, request
from support.commands import run_fairbroker

from allocator.backends.base import ExecutorState
from allocator.broker.client import BrokerCallError, BrokerClient
from allocator.broker.core import ApiError, Broker
from allocator.broker.server import BrokerOptions, BrokerService
from allocator.broker.store import Store
from allocator.engine_config import EngineConfig


def placed(backend: RecordingBackend) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for spec in backend.launched:
        out.setdefault(spec.tenant_id, {}).setdefault(spec.agent, 0)
        out[spec.tenant_id][spec.agent] += 1
    return out


def used(backend: RecordingBackend) -> dict[str, dict[str, float]]:
    totals: dict[str, dict[str, float]] = {}
    for spec in backend.launched:
        if (spec.tenant_id, spec.executor_id) in backend.alive:
            agent = totals.setdefault(spec.agent, {})
            for r, v in spec.resources.items():
                agent[r] = agent.get(r, 0.0) + v
    return totals


@pytest.fixture
def broker():
    backend = RecordingBackend()
    broker = Broker(backend, EngineConfig("rpsdsf", mode="characterized"))
    broker.start(loop=False)
    yield broker
    broker.stop()


def test_rpsdsf_places_each_tenant_where_it_packs(broker: Broker) -> None:
    # rPS-DSF on paper 002's servers, one Mesos allocation pass (agents shuffled, each filled
    # in turn): the first agent is split while both shares are 0, then the residual criterion
    # packs. WordCount (memory-heavy) holds most of the memory-rich t1, Pi (CPU-heavy) most of
    # the CPU-rich t2 (the ideal is Table I's 4 WC on T1, 4 Pi on T2).
    broker.register(request("pi", PI, target=100))
    broker.register(request("wc", WORDCOUNT, target=100))
    broker.allocate_once()
    where = placed(broker.backend)
    assert where["wc"].get("t1", 0) > where["pi"].get("t1", 0)
    assert where["pi"].get("t2", 0) > where["wc"].get("t2", 0)
    assert sum(k for tenant in where.values() for k in tenant.values()) >= 10
    for agent in AGENTS:
        for r, v in used(broker.backend).get(agent.name, {}).items():
            assert v <= agent.resources[r] + 1e-9


def test_alpha_psdsf_serves_through_the_broker(broker: Broker) -> None:
    """`serve`'s engine with alpha-psdsf (switched as `fairbroker configure` does): one pass
    gives both tenants executors (a tenant with none has the smallest key), stays within
    every agent's capacity and leaves no room for another executor of either."""
    broker.configure(scheduler="alpha-psdsf")
    assert broker.info().scheduler == "alpha-psdsf"
    assert broker.engine.scheduler.criterion().alpha == 3.0  # online alpha is fixed at 3
    broker.register(request("pi", PI, target=100))
    broker.register(request("wc", WORDCOUNT, target=100))
    assert broker.allocate_once() > 0
    where = placed(broker.backend)
    assert sum(where["pi"].values()) >= 1 and sum(where["wc"].values()) >= 1
    demand = {s.tenant_id: s.resources for s in broker.backend.launched}
    for agent in AGENTS:
        use = used(broker.backend).get(agent.name, {})
        free = {r: v - use.get(r, 0.0) for r, v in agent.resources.items()}
        assert min(free.values()) >= -1e-9
        for tenant, need in demand.items():
            fits = all(free.get(r, 0.0) >= v - 1e-9 for r, v in need.items() if v > 0)
            assert not fits, f"{tenant} still fits on {agent.name}: {free}"


def test_launch_spec_carries_the_demand_and_the_driver(broker: Broker) -> None:
    broker.register(request("pi", PI, target=2))
    broker.allocate_once()
    specs = broker.backend.launched
    assert len(specs) == 2 and {s.executor_id for s in specs} == {"1", "2"}
    assert all(s.resources == PI and s.heap_mib == 640 and s.cores == 2 for s in specs)
    assert specs[0].driver_url.startswith("spark://CoarseGrainedScheduler@")


def test_exit_releases_and_a_replacement_is_granted(broker: Broker) -> None:
    backend = broker.backend
    broker.register(request("pi", PI, target=2))
    broker.allocate_once()
    first = backend.launched[0]
    backend.report(first, ExecutorState.RUNNING)
    backend.report(first, ExecutorState.FAILED)
    assert broker.engine.tasks_of("pi") == 1
    broker.allocate_once()
    assert len(backend.launched) == 3 and backend.launched[2].executor_id == "3"
    assert broker.engine.tasks_of("pi") == 2


def test_kill_waits_for_the_exit_then_lower_target_means_no_replacement(broker: Broker):
    backend = broker.backend
    broker.register(request("pi", PI, target=2))
    broker.allocate_once()
    broker.set_target("pi", 1)
    assert broker.kill("pi", ["1", "nope"]) == ["1"]
    assert backend.killed == [("pi", "1")]
    assert broker.engine.tasks_of("pi") == 2  # still held until the process is gone
    backend.report(backend.launched[0], ExecutorState.KILLED)
    broker.allocate_once()
    assert broker.engine.tasks_of("pi") == 1 and len(backend.launched) == 2


@pytest.mark.parametrize("ended", [ExecutorState.FAILED, ExecutorState.FINISHED,
                                   ExecutorState.KILLED])  # fmt: skip
def test_repeated_quick_exits_rest_the_tenant_on_that_agent_whatever_the_exit(
    broker: Broker, ended: ExecutorState
) -> None:
    """Exit 0 (FINISHED) and a kill nobody asked for (KILLED) crash-loop like FAILED."""
    backend = broker.backend
    broker.register(request("pi", PI, target=1, constraints={"type": "t2"}))
    for _ in range(2):
        broker.allocate_once()
        backend.report(backend.launched[-1], ended)
    launches = len(backend.launched)
    broker.allocate_once()
    assert len(backend.launched) == launches == 2  # no third launch on the failing agent
    assert broker.tenants["pi"].standing.failures == {"t2": 2}


def test_exits_the_broker_asked_for_rest_nothing(broker: Broker) -> None:
    """A stopping driver lowers its target to 0, then its executors exit 0; an executor
    killed at the tenant's request: neither is a crash loop, however soon it ends."""
    backend = broker.backend
    broker.register(request("pi", PI, target=1, constraints={"type": "t2"}))
    for n in range(1, 5):
        broker.set_target("pi", 1)
        assert broker.allocate_once() == 1, f"round {n}: resting"
        spec = backend.launched[-1]
        if n % 2:
            broker.set_target("pi", 0)
            backend.report(spec, ExecutorState.FINISHED)
        else:
            assert broker.kill("pi", [spec.executor_id]) == [spec.executor_id]
            backend.report(spec, ExecutorState.FAILED)  # e.g. a non-zero exit on SIGTERM
    assert broker.tenants["pi"].standing.failures == {}


class RefusingBackend(RecordingBackend):
    """Its launches fail (the backend raises), until `refusing` is cleared."""

    refusing = True

    def __init__(self) -> None:
        super().__init__()
        self.attempts: list[str] = []  # agents it was asked to launch on

    def launch(self, spec):
        self.attempts.append(spec.agent)
        if self.refusing:
            raise RuntimeError("no such executor binary")
        return super().launch(spec)


def rest_on_t2(broker: Broker, kind: str) -> None:
    """Make tenant "pi" (held to agent t2) rest there: after one failed launch, or after two
    executors that failed before registering."""
    backend = broker.backend
    if kind == "launch failure":
        assert broker.allocate_once() == 0 and backend.attempts == ["t2"]
        return
    backend.refusing = False
    for _ in range(2):
        assert broker.allocate_once() == 1
        backend.report(backend.launched[-1], ExecutorState.FAILED)


@pytest.mark.parametrize("kind", ["launch failure", "crash loop"])
@pytest.mark.parametrize("renewal", ["SetTarget", "re-register"])
def test_a_rest_of_either_kind_survives_a_raised_target(kind: str, renewal: str) -> None:
    """Raising the target lifts the engine's refuse filters (a Mesos revive); the tenant's
    rest on t2 must outlast it, whatever began it (the bug: a launch failure's rest did not,
    and SetTarget 2 brought two launches on t2 at once)."""
    backend = RefusingBackend()
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    broker.register(request("pi", PI, target=1, constraints={"type": "t2"}))
    rest_on_t2(broker, kind)
    attempts = len(backend.attempts)
    assert broker.allocate_once() == 0
    if renewal == "SetTarget":
        broker.set_target("pi", 2)
    else:
        broker.register(request("pi", PI, target=2, constraints={"type": "t2"}))
    assert broker.allocate_once() == 0
    assert len(backend.attempts) == attempts  # nothing launched, nor tried, on t2
    broker.stop()


def test_lease_expiry_reclaims_a_silent_tenant() -> None:
    backend = RecordingBackend()
    broker = Broker(backend, EngineConfig("drf", mode="characterized"), lease_seconds=0.2)
    broker.start(loop=False)
    broker.register(request("gone", PI, target=3))
    broker.register(request("alive", WORDCOUNT, target=1))
    broker.allocate_once()
    time.sleep(0.3)
    broker.heartbeat("alive")
    broker.allocate_once()
    assert sorted(e for t, e in backend.killed if t == "gone") == ["1", "2", "3"]
    with pytest.raises(ApiError, match="unknown tenant"):
        broker.heartbeat("gone")
    # its capacity returns only as its processes exit (they get a grace period)
    assert broker.engine.tasks_of("gone") == 3
    for spec in [s for s in backend.launched if s.tenant_id == "gone"]:
        backend.report(spec, ExecutorState.KILLED)
    assert "gone" not in broker.tenants and "gone" not in broker.engine.frameworks
    assert "alive" in broker.tenants
    broker.stop()


def test_a_run_that_stalls_the_broker_expires_no_lease_for_its_own_silence(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Fault injection: a run that holds the broker past a lease (a kernel compiling under
    # load held every thread for 38 s once), so no tenant could be heard meanwhile.
    monkeypatch.setattr("allocator.broker.core.STALL_SECONDS", 0.1)
    backend = RecordingBackend()
    broker = Broker(backend, EngineConfig("drf", mode="characterized"), lease_seconds=0.3)
    broker.start(loop=False)
    broker.register(request("pi", PI, target=2))
    real = broker.engine.allocate

    def stalled(now: float, max_grants: int | None = None):  # type: ignore[no-untyped-def]
        time.sleep(0.5)
        return real(now, max_grants)

    monkeypatch.setattr(broker.engine, "allocate", stalled)
    broker.allocate_once()  # 0.5 s: longer than the lease
    monkeypatch.setattr(broker.engine, "allocate", real)
    broker.allocate_once()  # at once, before the tenant's queued call got in
    assert "pi" in broker.tenants and backend.killed == []
    time.sleep(0.4)  # now the tenant is silent while the broker listens
    broker.allocate_once()
    assert sorted(e for t, e in backend.killed if t == "pi") == ["1", "2"]
    broker.stop()


def test_a_silent_tenant_expires_even_when_every_run_stalls(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Runs of 0.15 s every 0.15 s, each a stall: the time between them still counts, so a
    # silent tenant is dropped once 0.3 s of listening have passed, not never.
    monkeypatch.setattr("allocator.broker.core.STALL_SECONDS", 0.1)
    backend = RecordingBackend()
    broker = Broker(backend, EngineConfig("drf", mode="characterized"), lease_seconds=0.3)
    broker.start(loop=False)
    broker.register(request("pi", PI, target=2))
    real = broker.engine.allocate

    def stalled(now: float, max_grants: int | None = None):  # type: ignore[no-untyped-def]
        time.sleep(0.15)
        return real(now, max_grants)

    monkeypatch.setattr(broker.engine, "allocate", stalled)
    for _ in range(8):  # 2.4 s in all, 1.2 s of it listening
        broker.allocate_once()
        time.sleep(0.15)
    assert "pi" not in broker.tenants or broker.tenants["pi"].stopping_since is not None
    assert sorted(e for t, e in backend.killed if t == "pi") == ["1", "2"]
    broker.stop()


def test_restart_readopts_running_executors_without_double_counting(tmp_path: Path) -> None:
    alive: set[tuple[str, str]] = set()
    store = Store(tmp_path / "s.sqlite")
    first = Broker(RecordingBackend(alive=alive), EngineConfig("drf"), store=store)
    first.start(loop=False)
    first.register(request("pi", PI, target=3))
    first.allocate_once()
    launched = list(first.backend.launched)
    alive.discard(("pi", launched[0].executor_id))  # one executor died while the broker was down
    first.stop(kill_executors=False)

    backend = RecordingBackend(alive=alive)
    second = Broker(backend, EngineConfig("drf"), store=Store(tmp_path / "s.sqlite"))
    second.start(loop=False)
    assert second.engine.tasks_of("pi") == 2  # the two survivors, counted once
    assert set(second.tenants["pi"].executors) == {"2", "3"}
    second.allocate_once()
    assert [s.executor_id for s in backend.launched] == ["4"]  # one replacement, fresh id
    assert second.engine.tasks_of("pi") == 3
    second.stop()


@pytest.mark.parametrize(
    ("demand", "message"),
    [
        ({"cpus": -1, "mem": 1024}, "demand.cpus"),
        ({"cpus": 2, "mem": float("nan")}, "demand.mem"),
        ({"cpus": 2}, "positive cpus and mem"),
        ({"cpus": 2, "mem": 1024, "gpus": 1}, "unknown resource"),
        ({"cpus": 9, "mem": 1024}, "fits no registered agent"),
        ({}, "required"),
    ],
)
def test_bad_demand_is_refused_and_others_keep_being_served(broker, demand, message) -> None:
    broker.register(request("ok", PI, target=1))
    bad = request("bad", {"cpus": 1, "mem": 1024})
    bad.demand.clear()
    bad.demand.update(demand)
    bad.launch.cores = max(1, int(demand.get("cpus", 1)))
    with pytest.raises(ApiError, match=message):
        broker.register(bad)
    assert "bad" not in broker.tenants and "bad" not in broker.engine.frameworks
    broker.allocate_once()
    assert placed(broker.backend) == {"ok": {next(iter(placed(broker.backend)["ok"])): 1}}


def test_heap_above_the_accounted_memory_is_refused(broker: Broker) -> None:
    bad = request("big", PI)
    bad.launch.heap_mib = 2048
    with pytest.raises(ApiError, match="heap_mib"):
        broker.register(bad)


def test_reregistering_is_idempotent_but_not_with_another_demand(broker: Broker) -> None:
    broker.register(request("pi", PI, target=2))
    broker.allocate_once()
    broker.register(request("pi", PI, target=2))
    broker.allocate_once()
    assert len(broker.backend.launched) == 2
    with pytest.raises(ApiError, match="another demand"):
        broker.register(request("pi", WORDCOUNT))


def test_oblivious_tenant_takes_whole_agent_remainders(broker: Broker) -> None:
    broker.configure(mode="oblivious")
    broker.register(request("wc", WORDCOUNT, target=100))
    broker.allocate_once()
    # one offer per agent to the only tenant; it keeps every whole executor that fits
    assert placed(broker.backend)["wc"] == {"t1": 4, "t2": 2, "t3": 3}
    reply = broker.allocation()
    assert [t.declared for t in reply.tenants] == [False]


# ---- transports ------------------------------------------------------------------------
@pytest.fixture
def service(tmp_path: Path):
    options = BrokerOptions(
        engine=EngineConfig("rpsdsf", interval=0.05), http_port=0, grpc_port=0,
        state_dir=tmp_path, token="s3cret", agents=AGENTS,
    )  # fmt: skip
    with BrokerService(options, backend=RecordingBackend()) as running:
        yield running


def test_http_json_register_uses_protobufs_json_mapping(service) -> None:
    body = {
        "tenantId": "app-1",
        "group": "pi",
        "demand": {"cpus": 2, "mem": 1024},
        "target": 2,
        "launch": {
            "driverUrl": "spark://CoarseGrainedScheduler@127.0.0.1:40000",
            "appId": "app-1",
            "cores": 2,
            "heapMib": 640,
            "environment": {"SPARK_EXECUTOR_OPTS": "-Dx=1"},
        },
    }
    status, reply = http(service, "Register", json.dumps(body).encode())
    assert status == 200 and reply["tenantId"] == "app-1" and reply["declared"] is True
    deadline = time.monotonic() + 60
    while len(service.broker.backend.launched) < 2:
        assert time.monotonic() < deadline, service.broker.backend.launched
        time.sleep(0.02)
    spec = service.broker.backend.launched[0]
    assert spec.environment == {"SPARK_EXECUTOR_OPTS": "-Dx=1"} and spec.heap_mib == 640
    with BrokerClient(service.grpc_address, token="s3cret") as client:
        allocation = client.allocation()
    (tenant,) = allocation.tenants
    assert tenant.running == 2 and tenant.group == "pi" and tenant.allocated["mem"] == 2048


def test_token_is_required_on_both_transports(service) -> None:
    status, reply = http(service, "Heartbeat", b'{"tenantId": "x"}', token=None)
    assert status == 401 and reply["code"] == "UNAUTHENTICATED"
    status, _ = http(service, "Heartbeat", b'{"tenantId": "x"}', token="wrong")
    assert status == 401
    with BrokerClient(service.grpc_address) as client, pytest.raises(BrokerCallError) as error:
        client.allocation()
    assert error.value.code == "UNAUTHENTICATED"


def test_http_errors_are_clear_and_the_server_keeps_serving(service) -> None:
    assert http(service, "Heartbeat", b'{"tenantId": "nobody"}')[0] == 404
    status, reply = http(service, "Register", b'{"tenantId": ')
    assert status == 400 and "malformed Register request" in reply["error"]
    status, reply = http(service, "Register", b'{"tenantId": "a", "demand": {"cpus": "lots"}}')
    assert status == 400
    status, reply = http(service, "Register", b"x" * (2 << 20))
    assert status == 413 and reply["code"] == "RESOURCE_EXHAUSTED"
    assert http(service, "Register", b"{}", content_type="text/plain")[0] == 415
    assert http(service, "Launch", b"{}")[0] == 404
    assert http(service, "GetAllocation", b"{}")[0] == 200


def test_grpc_errors_name_the_problem(service) -> None:
    with BrokerClient(service.grpc_address, token="s3cret") as client:
        with pytest.raises(BrokerCallError, match="unknown tenant") as error:
            client.set_target("nobody", 3)
        assert error.value.code == "NOT_FOUND"
        with pytest.raises(BrokerCallError, match=r"demand\.cpus") as error:
            client.register(request("neg", {"cpus": -2, "mem": 1024}))
        assert error.value.code == "INVALID_ARGUMENT"
        info = client.configure(scheduler="drf", mode="oblivious")
        assert (info.scheduler, info.mode) == ("drf", "oblivious")
        with pytest.raises(BrokerCallError, match=r"unknown .fifo."):
            client.configure(scheduler="fifo")


def test_configure_switches_a_running_broker_to_fuga_and_it_allocates(service) -> None:
    """`fairbroker configure --scheduler fuga` against a running broker (the same path as
    `serve --scheduler fuga`: the engine looks the scheduler up by name), then tenants get
    their executors from FUGA's placement, within every agent's capacity."""
    done = run_fairbroker(
        "configure", "--broker", service.http_address, "--token", "s3cret", "--scheduler", "fuga"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "scheduler fuga, characterized mode, fuga selection, role level, tick trigger, "
        "ties random; reclaim off"
    )
    # Three executors each: 3 x (1 cpu, 1792 MiB) and 3 x (2 cpus, 1024 MiB) fit together on
    # t1-t3 whichever tenant the broker serves first (checked by hand over the placements).
    with BrokerClient(service.grpc_address, token="s3cret") as client:
        client.register(request("wc", WORDCOUNT, target=3))
        client.register(request("pi", PI, target=3))
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            allocation = client.allocation()
            if sorted(t.running for t in allocation.tenants) == [3, 3]:
                break
            time.sleep(0.05)
    assert (allocation.broker.scheduler, allocation.broker.selection) == ("fuga", "fuga")
    assert {t.tenant_id: t.running for t in allocation.tenants} == {"wc": 3, "pi": 3}
    where = placed(service.broker.backend)
    assert {tenant: sum(on.values()) for tenant, on in where.items()} == {"wc": 3, "pi": 3}
    for agent in AGENTS:
        for r, v in used(service.broker.backend).get(agent.name, {}).items():
            assert v <= agent.resources[r] + 1e-9


def test_agents_come_and_go_with_the_backend() -> None:
    """A Mesos-like backend: agents appear with offers, capacity follows them, agents die."""
    backend = RecordingBackend(agents=[AGENTS[1]])  # the CPU-rich t2 only
    broker = Broker(backend, EngineConfig("drf", mode="characterized"))
    broker.start(loop=False)
    broker.register(request("pi", PI, target=6))
    assert broker.allocate_once() == 4  # 8 cpus / 2 per executor
    assert backend.flushes == 1
    broker.agent_added(AGENTS[0])  # t1: 4 cpus more
    assert broker.engine.run_now
    assert broker.allocate_once() == 2 and placed(backend)["pi"] == {"t2": 4, "t1": 2}
    # what the broker may use on t1 shrinks to what it already runs there: nothing new fits
    broker.set_target("pi", 8)
    broker.capacity_changed("t1", {"cpus": 4, "mem": 2048, "disk": 100})  # disk: not ours
    assert broker.allocate_once() == 0
    # t2 dies: its four executors are lost, forgotten, and replaced where there is room
    broker.agent_removed("t2")
    assert broker.engine.tasks_of("pi") == 2
    assert {e.agent for e in broker.allocation().tenants[0].executors} == {"t1"}
    broker.capacity_changed("t1", {"cpus": 4, "mem": 7168})
    broker.agent_added(AGENTS[2])  # t3: 6 cpus
    assert broker.allocate_once() == 3  # 6 cpus on t3; t1 is full at 4
    assert broker.engine.tasks_of("pi") == 5
    for agent in broker.allocation().agents:
        assert agent.allocated["cpus"] <= agent.capacity["cpus"]
    broker.stop()


def test_losing_the_agent_of_a_stopping_tenant_forgets_it_and_serves_the_others() -> None:
    backend = RecordingBackend()
    broker = Broker(backend, EngineConfig("drf"))
    broker.start(loop=False)
    broker.register(request("gone", PI, target=1, constraints={"type": "t1"}))
    broker.register(request("stays", WORDCOUNT, target=1, constraints={"type": "t3"}))
    assert broker.allocate_once() == 2
    broker.unregister("gone")  # its executor on t1 is asked to stop and never reports
    broker.agent_removed("t1")
    assert list(broker.tenants) == ["stays"] and "gone" not in broker.engine.frameworks
    assert broker.engine.tasks_of("stays") == 1
    broker.stop()
