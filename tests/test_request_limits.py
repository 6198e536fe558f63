"""Bounds on every tenant request: each violation is an INVALID_ARGUMENT naming the field and
the limit; no Register produces more launches than the caps; a re-register is identical or
refused; control characters never reach a log line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.broker import AGENTS, PI, RecordingBackend, request

from allocator.backends.base import AgentInfo
from allocator.backends.executor import ExecutorEnvPolicy
from allocator.broker.core import ApiError, Broker
from allocator.broker.limits import Limits
from allocator.broker.proto import pb
from allocator.broker.store import Store
from allocator.broker.validation import printable
from allocator.engine_config import EngineConfig


def make_broker(limits: Limits | None = None, agents=AGENTS, **kw) -> Broker:
    broker = Broker(RecordingBackend(agents=agents), EngineConfig("drf"), limits=limits, **kw)
    broker.start(loop=False)
    return broker


def refused(broker: Broker, req: pb.RegisterRequest, field: str) -> str:
    with pytest.raises(ApiError) as error:
        broker.register(req)
    assert error.value.code == "INVALID_ARGUMENT"
    assert str(error.value).startswith(field), str(error.value)
    assert "\n" not in str(error.value)
    assert req.tenant_id not in broker.engine.frameworks
    return str(error.value)


def with_(req: pb.RegisterRequest, change) -> pb.RegisterRequest:
    change(req)
    return req


BAD = [
    ("tenant_id", lambda r: setattr(r, "tenant_id", "app-1\n")),  # re.match + $ took this
    ("tenant_id", lambda r: setattr(r, "tenant_id", "a" * 129)),
    ("tenant_id", lambda r: setattr(r, "tenant_id", "../x")),
    ("tenant_id", lambda r: setattr(r, "tenant_id", "-x")),
    ("group", lambda r: setattr(r, "group", "pi\n2026-01-01 INFO forged line")),
    ("group", lambda r: setattr(r, "group", "role@other")),
    ("group", lambda r: setattr(r, "group", "g" * 65)),
    ("weight", lambda r: setattr(r, "weight", 1001)),
    ("weight", lambda r: setattr(r, "weight", -1)),
    ("weight", lambda r: setattr(r, "weight", float("inf"))),
    ("target", lambda r: setattr(r, "target", -1)),
    ("demand.cpus", lambda r: (r.demand.update(cpus=1e-300), setattr(r.launch, "cores", 0))),
    ("demand.mem", lambda r: r.demand.update(mem=16)),
    ("launch.cores", lambda r: setattr(r.launch, "cores", 64)),
    ("launch.driver_url", lambda r: setattr(r.launch, "driver_url", "spark://x@h:1; id")),
    ("launch.app_id", lambda r: setattr(r.launch, "app_id", "--driver-url")),
    ("launch.resource_profile_id", lambda r: setattr(r.launch, "resource_profile_id", -1)),
    ("launch.environment", lambda r: r.launch.environment.update(
        {f"V{i}": "x" for i in range(65)})),
    ("launch.environment", lambda r: r.launch.environment.update(
        {f"V{i}": "x" * 8000 for i in range(9)})),
    ("constraints", lambda r: r.constraints.update({f"k{i}": "v" for i in range(17)})),
    ("constraints", lambda r: r.constraints.update({"rack\n": "a"})),
    ("constraints.rack", lambda r: r.constraints.update({"rack": "a b"})),
]  # fmt: skip


@pytest.mark.parametrize(("field", "change"), BAD)
def test_each_bound_is_refused_naming_its_field(field, change) -> None:
    policy = ExecutorEnvPolicy.of_operator([f"V{i}" for i in range(65)], [])
    broker = make_broker(Limits(executor_env=policy))
    message = refused(broker, with_(request("app-1", PI), change), field)
    assert "\n" not in message
    broker.stop()


def test_the_reported_flood_is_refused_and_a_huge_target_is_capped() -> None:
    """demand.cpus = 1e-300 with cores 64 and target 2^31-1 made 33,792 launches in one run."""
    agents = [AgentInfo(f"a{i}", "127.0.0.1", {"cpus": 64, "mem": 262144}) for i in range(100)]
    broker = make_broker(Limits(max_executors_per_tenant=100, max_launches_per_run=32), agents)
    flood = request("flood", {"cpus": 1e-300, "mem": 1024}, target=2**31 - 1)
    flood.launch.cores = 64
    refused(broker, flood, "demand.cpus")
    broker.register(request("big", {"cpus": 1, "mem": 512}, target=2**31 - 1))
    runs = []
    for _ in range(10):
        runs.append(broker.allocate_once())
    assert runs == [32, 32, 32, 4, 0, 0, 0, 0, 0, 0]
    assert broker.engine.tasks_of("big") == len(broker.backend.launched) == 100
    (tenant,) = broker.allocation().tenants
    assert tenant.target == 100 and tenant.pending == 0  # held at the cap
    assert broker.tenants["big"].target == 2**31 - 1  # the wish is kept as sent
    broker.stop()


def test_an_oblivious_offer_beyond_the_run_cap_goes_back_to_the_pool() -> None:
    broker = make_broker(Limits(max_launches_per_run=3))
    broker.configure(mode="oblivious")
    broker.register(request("wc", {"cpus": 1, "mem": 512}, target=100))
    assert broker.allocate_once() == 3
    assert broker.engine.tasks_of("wc") == 3  # the rest of the offer was not kept
    assert broker.engine.run_now  # and the next run comes at once
    broker.stop()


def test_tenant_and_group_counts_are_bounded() -> None:
    broker = make_broker(Limits(max_tenants=3, max_groups=2))
    broker.register(request("a", PI, target=0, group="g1"))
    broker.register(request("b", PI, target=0, group="g2"))
    refused(broker, request("c", PI, target=0, group="g3"), "group")
    broker.register(request("c", PI, target=0, group="g1"))
    refused(broker, request("d", PI, target=0, group="g1"), "tenant_id")
    broker.unregister("a")
    broker.register(request("d", PI, target=0, group="g1"))
    broker.stop()


def test_kill_lists_are_bounded() -> None:
    broker = make_broker(Limits(max_kill_ids=2))
    broker.register(request("pi", PI, target=1))
    assert broker.kill("pi", ["9", "nope"]) == []
    with pytest.raises(ApiError, match="executor_ids: at most 2"):
        broker.kill("pi", ["1", "2", "3"])
    broker.stop()


@pytest.mark.parametrize(
    "change",
    [
        lambda r: setattr(r, "group", "other"),
        lambda r: setattr(r, "weight", 3),
        lambda r: r.constraints.update(type="t2"),
        lambda r: r.launch.environment.update(SPARK_USER="bob"),
        lambda r: setattr(r.launch, "heap_mib", 512),
        lambda r: setattr(r, "oblivious", True),
    ],
)
def test_a_reregister_is_identical_or_refused_and_nothing_diverges(change, tmp_path) -> None:
    store = Store(tmp_path / "s.sqlite")
    broker = make_broker(store=store)
    broker.register(request("pi", PI, target=2))
    broker.register(request("pi", PI, target=3))  # the same, a new target: fine
    with pytest.raises(ApiError) as error:
        broker.register(with_(request("pi", PI, target=3), change))
    assert error.value.code == "FAILED_PRECONDITION"
    broker.stop(kill_executors=False)
    again = make_broker(store=Store(tmp_path / "s.sqlite"))
    (stored,) = again.tenants.values()
    assert stored.request == request("pi", PI, target=3) and stored.target == 3
    again.stop()


def test_control_characters_never_reach_a_log_line(caplog) -> None:
    caplog.set_level(logging.DEBUG)
    broker = make_broker()
    hostile = request("app-1", PI)
    hostile.group = "pi\n2026-11-23 INFO allocator: tenant root registered"
    with pytest.raises(ApiError) as error:
        broker.register(hostile)
    with pytest.raises(ApiError) as unknown:
        broker.heartbeat("x\n2026 INFO forged")
    for text in (str(error.value), str(unknown.value), caplog.text):
        assert "\nINFO" not in text and "\n2026" not in text
    assert printable("a\nb\x1b[31m\u2028") == "a\\nb\\x1b[31m\\u2028"
    broker.stop()


def test_operator_limits_from_settings() -> None:
    limits = Limits().with_settings(["max_tenants=5", "min_demand.cpus=0.5", "max_weight=10"])
    assert limits.max_tenants == 5 and limits.min_demand["cpus"] == 0.5
    assert limits.min_demand["mem"] == 32 and limits.max_weight == 10
    for bad in ("max_tenants=1.5", "nope=1", "max_tenants", "max_tenants=-1", "x=nan"):
        with pytest.raises(ValueError):
            Limits().with_settings([bad])


@pytest.mark.parametrize(
    ("setting", "message"),
    [("max_launches_per_run=0", "max_launches_per_run: at least 1, got 0"),
     ("max_tenants=0.5", "max_tenants: at least 1"),
     ("max_lanches_per_run=4", "unknown limit (did you mean max_launches_per_run?)"),
     ("min_weight=0", "min_weight: must be in (0, max_weight 1000]"),
     ("min_weight=2000", "min_weight: must be in (0, max_weight 1000]")],
)  # fmt: skip
def test_limits_that_would_stop_the_broker_are_refused(setting, message) -> None:
    with pytest.raises(ValueError) as error:
        Limits().with_settings([setting])
    assert message in str(error.value)


def test_weights_at_the_bounds(tmp_path: Path) -> None:
    broker = make_broker()
    for tenant, weight in (("low", 0.001), ("high", 1000.0)):
        broker.register(request(tenant, PI, weight=weight))
    for weight in (1e-320, 0.0009, 1000.5, float("inf")):
        with pytest.raises(ApiError, match=r"weight: must be in \[0.001, 1000\]"):
            broker.register(request("bad", PI, weight=weight))
    broker.stop()


def test_defaults_keep_a_run_at_100_agents_to_the_cap(tmp_path: Path) -> None:
    agents = [AgentInfo(f"a{i}", "127.0.0.1", {"cpus": 64, "mem": 262144}) for i in range(100)]
    broker = make_broker(agents=agents)
    for t in range(50):
        broker.register(request(f"t{t}", {"cpus": 1, "mem": 512}, target=1_000_000))
    assert broker.allocate_once() == Limits().max_launches_per_run
    broker.stop()
