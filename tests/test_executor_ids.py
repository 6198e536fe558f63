"""Executor ids never restart: a tenant id registered again, after an unregister, a broker
stop or a restart, continues after every id ever stored for it (its executors' directories
and logs are named by the id)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict
from pathlib import Path

from support.broker import PI, RecordingBackend, request

from allocator.backends.base import ExecutorState, LaunchSpec
from allocator.broker.core import Broker
from allocator.broker.store import Store
from allocator.engine_config import EngineConfig


def _spec(tenant: str, executor_id: str) -> LaunchSpec:
    return LaunchSpec(tenant, executor_id, "t1", dict(PI), "spark://d:1", "app", 2, 640)


def _broker(path: Path) -> Broker:
    broker = Broker(RecordingBackend(), EngineConfig("drf"), store=Store(path))
    broker.start(loop=False)
    return broker


def _launched(broker: Broker) -> list[str]:
    return [spec.executor_id for spec in broker.backend.launched]


def test_the_store_keeps_the_next_id_of_a_forgotten_tenant_across_a_reopen(tmp_path) -> None:
    path = tmp_path / "broker.sqlite"
    store = Store(path)
    assert store.next_executor("pi") == 1  # never seen
    store.save_tenant("pi", request("pi", PI).SerializeToString(), 2, 1)
    store.record_launch(_spec("pi", "1"), 2)
    store.record_launch(_spec("pi", "2"), 3)
    store.delete_tenant("pi")  # its row and its executors' rows go; the id does not
    store.close()
    again = Store(path)
    assert again.tenants() == [] and again.executors() == []
    assert again.next_executor("pi") == 3 and again.next_executor("wc") == 1
    again.close()


def test_a_broker_restart_continues_the_ids_of_a_tenant_registered_again(tmp_path) -> None:
    path = tmp_path / "broker.sqlite"
    first = _broker(path)
    first.register(request("pi", PI, target=2))
    first.allocate_once()
    assert _launched(first) == ["1", "2"]
    first.stop()  # kills the executors and forgets the tenant
    second = _broker(path)
    assert second.tenants == {}
    second.register(request("pi", PI, target=2))  # the plugin of a new run of the same app
    second.allocate_once()
    assert _launched(second) == ["3", "4"]
    second.stop()


def test_an_unregistered_tenant_keeps_its_ids_after_a_restart(tmp_path) -> None:
    path = tmp_path / "broker.sqlite"
    first = _broker(path)
    first.register(request("pi", PI, target=1))
    first.allocate_once()
    first.unregister("pi")
    first.backend.report(first.backend.launched[0], ExecutorState.KILLED)
    assert "pi" not in first.tenants  # forgotten: no tenant row left
    first.register(request("pi", PI, target=1))  # within the same run
    first.allocate_once()
    first.unregister("pi")
    first.backend.report(first.backend.launched[1], ExecutorState.KILLED)
    assert _launched(first) == ["1", "2"]
    first.stop()
    second = _broker(path)
    second.register(request("pi", PI, target=1))
    second.allocate_once()
    assert _launched(second) == ["3"]
    second.stop()


def test_a_file_of_schema_2_takes_its_next_ids_from_its_rows(tmp_path) -> None:
    """Before executor_ids, the next id was the tenant row's column; an executor row ahead of
    it (written by a crash between the two) still counts."""
    path = tmp_path / "broker.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    db.executescript(
        "CREATE TABLE tenants (tenant_id TEXT PRIMARY KEY, request BLOB NOT NULL, "
        "target INTEGER NOT NULL, next_executor INTEGER NOT NULL);"
        "CREATE TABLE executors (tenant_id TEXT NOT NULL, executor_id TEXT NOT NULL, "
        "spec TEXT NOT NULL, handle TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'LAUNCHED', "
        "PRIMARY KEY (tenant_id, executor_id));"
        "CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
        "PRAGMA user_version = 2;"
    )
    blob = request("pi", PI).SerializeToString()
    db.execute("INSERT INTO tenants VALUES ('pi', ?, 2, 3)", (blob,))
    for tenant, executor in (("pi", "7"), ("gone", "4")):
        spec = json.dumps(asdict(_spec(tenant, executor)))
        db.execute(
            "INSERT INTO executors VALUES (?, ?, ?, 'h', 'LAUNCHED')", (tenant, executor, spec)
        )
    db.close()
    store = Store(path)
    assert [t.next_executor for t in store.tenants()] == [8]  # past executor 7, not 3
    assert store.next_executor("pi") == 8
    assert store.next_executor("gone") == 5  # an executor row without its tenant row
    store.close()
