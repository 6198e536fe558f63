"""Groups with no tenant and no executor are forgotten: thousands of register/unregister
cycles with unique groups leave the live groups only, in the engine, the store and the
scrape (40,000 cycles kept 40,007 groups; the per-scrape and per-run cost grew with them)."""

from __future__ import annotations

import sqlite3
import time

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from support.broker import PI, WORDCOUNT, RecordingBackend, request

from allocator.backends.base import ExecutorState
from allocator.broker.core import Broker
from allocator.broker.metrics import BrokerMetrics
from allocator.broker.proto import pb
from allocator.broker.store import Store
from allocator.engine_config import EngineConfig

CYCLES = 2_000
LIVE = {"etl", "ml"}


def _scraped_groups(metrics: BrokerMetrics) -> set[str]:
    text = generate_latest(metrics.registry).decode()
    return {
        sample.labels["group"]
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if "group" in sample.labels
    }


def _engine_groups(broker: Broker) -> set[str]:
    return set(broker.engine.snapshot(time.monotonic()).cluster.role_names)


@pytest.fixture(scope="module")
def churned(tmp_path_factory):
    """Two live tenants (groups etl, ml) and CYCLES tenants of unique groups that came and
    went, one in a hundred after an executor of its own had run and exited."""
    store = Store(tmp_path_factory.mktemp("state") / "broker.sqlite")
    broker = Broker(RecordingBackend(), EngineConfig("drf", level="role"), store=store)
    metrics = BrokerMetrics.of_broker(broker)
    broker.start(loop=False)
    broker.register(request("wc", WORDCOUNT, target=1, group="etl"))
    broker.register(request("pi", PI, target=1, group="ml"))
    broker.allocate_once()
    for n in range(CYCLES):
        tenant = f"job-{n}"
        broker.register(request(tenant, PI, target=1 if n % 100 == 0 else 0, group=f"g{n}"))
        if n % 100 == 0:
            broker.allocate_once()
        broker.unregister(tenant)
        for spec in [s for s in broker.backend.launched if s.tenant_id == tenant]:
            broker.backend.report(spec, ExecutorState.KILLED)
    yield broker, metrics
    broker.stop()


def test_the_scrape_holds_the_live_groups_only(churned) -> None:
    broker, metrics = churned
    assert _scraped_groups(metrics) == LIVE
    assert set(broker.tenants) == {"wc", "pi"}
    # the store keeps groups only in tenant rows: those of the live tenants are left
    db = sqlite3.connect(f"{broker.store.path.as_uri()}?mode=ro", uri=True)
    rows = db.execute("SELECT request FROM tenants").fetchall()
    db.close()
    assert {pb.RegisterRequest.FromString(blob).group for (blob,) in rows} == LIVE


def test_the_engine_forgets_a_group_with_no_tenant_and_no_executor(churned) -> None:
    broker, _ = churned
    assert _engine_groups(broker) == LIVE


def test_a_stopping_tenant_keeps_its_group_until_its_last_executor_exits() -> None:
    broker = Broker(RecordingBackend(), EngineConfig("drf"))
    metrics = BrokerMetrics.of_broker(broker)
    broker.start(loop=False)
    broker.register(request("pi", PI, target=1, group="ml"))
    broker.allocate_once()
    broker.unregister("pi")  # its executor still holds capacity
    assert "ml" in _engine_groups(broker) and _scraped_groups(metrics) == {"ml"}
    broker.backend.report(broker.backend.launched[0], ExecutorState.KILLED)
    assert _scraped_groups(metrics) == set()
