"""The state file: every change one transaction applied to memory only after it commits; a
damaged state directory never starts silently (each damage variant, then --state-recover);
a schema version; one broker per state directory."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from support.broker import PI, WORDCOUNT, RecordingBackend, request

from allocator.broker.core import ApiError, Broker
from allocator.broker.store import SCHEMA_VERSION, StateDamaged, Store
from allocator.engine_config import EngineConfig


def crashed_state(tmp_path: Path) -> Path:
    """The files of a broker that died with two tenants and three executors: copied while
    it runs (the write-ahead log still holds the recent changes; the commit count beside)."""
    live = tmp_path / "live" / "broker.sqlite"
    broker = Broker(RecordingBackend(), EngineConfig("drf"), store=Store(live))
    broker.start(loop=False)
    broker.register(request("pi", PI, target=2))
    broker.register(request("wc", WORDCOUNT, target=1))
    broker.allocate_once()
    crash = tmp_path / "crash"
    crash.mkdir()
    for suffix in ("", "-wal", ".commits"):
        shutil.copy(live.with_name(live.name + suffix), crash / ("broker.sqlite" + suffix))
    broker.stop(kill_executors=False)
    assert (crash / "broker.sqlite-wal").stat().st_size > 0
    return crash / "broker.sqlite"


def restored(path: Path, recover: bool = False) -> Broker:
    broker = Broker(RecordingBackend(), EngineConfig("drf"), store=Store(path, recover=recover))
    broker.start(loop=False)
    return broker


def test_an_intact_crash_image_restores_everything(tmp_path: Path) -> None:
    broker = restored(crashed_state(tmp_path))
    assert sorted(broker.tenants) == ["pi", "wc"] and broker.tenants["pi"].target == 2
    assert len(broker.store.executors()) == 3
    broker.stop()


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def _sql(path: Path, *statements: str) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    for statement in statements:
        db.execute(statement)
    db.close()


def _clean_copy(path: Path) -> Path:
    """The state after a clean stop (no WAL), to edit rows in."""
    Store(path).close()
    return path


def _corrupt_page(path: Path, page: int = 3) -> None:
    """Overwrite cell pointers inside one b-tree page of a clean copy (page 3: the tenants'
    primary-key index): the header and the file size stay valid, so only SQLite's
    integrity check can tell."""
    _clean_copy(path)
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    start = (page - 1) * size + 8
    data[start : start + 32] = b"\x55" * 32
    path.write_bytes(bytes(data))


DAMAGE = {
    "missing WAL": (lambda p: _wal(p).unlink(), "write-ahead log is missing"),
    "truncated WAL": (
        lambda p: _wal(p).write_bytes(_wal(p).read_bytes()[:-1000]), "truncated in the middle"
    ),
    "garbage in the WAL": (
        lambda p: _wal(p).write_bytes(
            _wal(p).read_bytes()[:200] + b"\xde\xad" * 50 + _wal(p).read_bytes()[300:]
        ),
        "fails its checksum",
    ),
    "garbage WAL header": (
        lambda p: _wal(p).write_bytes(b"\x00" * 32 + _wal(p).read_bytes()[32:]),
        "not a SQLite WAL",
    ),
    "truncated database": (
        lambda p: (_clean_copy(p), p.write_bytes(p.read_bytes()[:5000])), "truncated"
    ),
    "truncated to whole pages": (
        lambda p: (_clean_copy(p), p.write_bytes(p.read_bytes()[:4096])), "truncated"
    ),
    "unreadable row": (
        lambda p: _sql(_clean_copy(p),
                       "INSERT INTO tenants VALUES ('bad', X'FFFFFFFF0102', 1, 1)"),
        "tenant row 'bad' unreadable",
    ),
    "extra executor field from a newer version": (
        lambda p: _sql(_clean_copy(p),
                       "UPDATE executors SET spec = json_set(spec, '$.gpu_slot', 3) "
                       "WHERE executor_id = '1' AND tenant_id = 'wc'"),
        "executor row 'wc'/'1' unreadable",
    ),
    "extra tenant field from a newer version": (
        lambda p: _sql(_clean_copy(p),
                       "UPDATE tenants SET request = CAST(request || X'F80701' AS BLOB) "
                       "WHERE tenant_id = 'wc'"),
        "fields from a newer fairbroker",
    ),
    "newer schema": (
        lambda p: _sql(_clean_copy(p), "PRAGMA user_version = 99"), "written by a newer"
    ),
    "corrupted b-tree page": (_corrupt_page, "integrity check: 4 problems, first: On tree page 3"),
}  # fmt: skip


@pytest.mark.parametrize("variant", list(DAMAGE))
def test_damage_refuses_to_start_naming_the_file_and_the_way_out(variant, tmp_path) -> None:
    path = crashed_state(tmp_path)
    damage, message = DAMAGE[variant]
    damage(path)
    with pytest.raises(StateDamaged) as error:
        Store(path)
    text = str(error.value)
    assert message in text and str(path) in text and "--state-recover" in text
    assert "\n" not in text
    # the refusal released the directory lock: a second try says the same
    with pytest.raises(StateDamaged, match=message):
        Store(path)


@pytest.mark.parametrize("variant", list(DAMAGE))
def test_recover_keeps_every_readable_row_and_reports_the_rest(variant, tmp_path) -> None:
    path = crashed_state(tmp_path)
    damage, message = DAMAGE[variant]
    damage(path)
    store = Store(path, recover=True)
    assert store.recovery_report is not None and message in store.recovery_report
    assert "\n" not in store.recovery_report
    assert list(path.parent.glob("broker.sqlite.damaged-*"))
    kept = {t.tenant_id for t in store.tenants()}
    if variant in ("unreadable row", "extra executor field from a newer version"):
        assert kept == {"pi", "wc"}  # only the bad row went
    if variant == "extra tenant field from a newer version":
        assert kept == {"pi"}
    if variant == "corrupted b-tree page":
        assert kept == {"pi", "wc"}  # only an index page was hit; the table pages read
    store.close()
    broker = restored(path)  # the recovered file starts cleanly from now on
    assert set(broker.tenants) == kept
    broker.stop()


def test_a_schema_version_is_written_and_an_old_file_is_migrated(tmp_path) -> None:
    path = tmp_path / "broker.sqlite"
    Store(path).close()
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    db.close()
    old = tmp_path / "old.sqlite"  # as the broker wrote it before this version
    _sql(old,
         "CREATE TABLE tenants (tenant_id TEXT PRIMARY KEY, request BLOB NOT NULL, "
         "target INTEGER NOT NULL, next_executor INTEGER NOT NULL)",
         "CREATE TABLE executors (tenant_id TEXT NOT NULL, executor_id TEXT NOT NULL, "
         "spec TEXT NOT NULL, handle TEXT NOT NULL, "
         "PRIMARY KEY (tenant_id, executor_id))")  # fmt: skip
    _sql(old, "INSERT INTO tenants VALUES (?, ?, 3, 1)".replace(
        "?, ?", f"'pi', X'{request('pi', PI).SerializeToString().hex()}'"))
    store = Store(old)
    assert [t.target for t in store.tenants()] == [3]
    store.close()


def test_one_broker_per_state_directory(tmp_path) -> None:
    first = Store(tmp_path / "broker.sqlite")
    with pytest.raises(StateDamaged, match=r"in use by another broker \(pid \d+\)"):
        Store(tmp_path / "broker.sqlite")
    first.close()
    Store(tmp_path / "broker.sqlite").close()  # released at close


def test_a_second_serve_on_the_same_state_dir_refuses_in_one_line(tmp_path) -> None:
    holder = Store(tmp_path / "broker.sqlite")
    try:
        done = subprocess.run(
            [sys.executable, "-c", "from allocator.cli import main; main()", "serve",
             "--state-dir", str(tmp_path), "--port", "0", "--grpc-port", "0", "--no-metrics"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        holder.close()
    assert done.returncode != 0
    assert "in use by another broker" in done.stderr and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_serve_on_a_corrupted_page_refuses_in_one_line(tmp_path) -> None:
    path = crashed_state(tmp_path)
    _corrupt_page(path)
    done = subprocess.run(
        [sys.executable, "-c", "from allocator.cli import main; main()", "serve",
         "--state-dir", str(path.parent), "--port", "0", "--grpc-port", "0", "--no-metrics"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "integrity check: 4 problems, first: On tree page 3" in lines[0]
    assert str(path) in lines[0] and "--state-recover" in lines[0]
    assert len(lines[0]) < 600


def test_a_long_integrity_report_is_cut_to_one_line() -> None:
    from allocator.broker.store import PROBLEM_CHARS, integrity_summary

    rows = [("*** in database main ***\nOn tree page 3 cell 99: Offset 21845 out of range",)]
    rows += [(f"On tree page 3 cell {i}: Offset 21845 out of range",) for i in range(98, -1, -1)]
    text = integrity_summary(rows)
    assert text.startswith("integrity check: 100 or more problems, first: On tree page 3 cell 99")
    assert "\n" not in text and len(text) <= PROBLEM_CHARS


def _full(store: Store) -> None:
    """Real SQLite 'database or disk is full': the file may not grow by another page."""
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")


def test_disk_full_register_changes_nothing_in_memory(tmp_path) -> None:
    store = Store(tmp_path / "broker.sqlite")
    broker = Broker(RecordingBackend(), EngineConfig("drf"), store=store)
    broker.start(loop=False)
    _full(store)
    big = request("pi", PI, target=2)
    big.launch.environment["SPARK_EXECUTOR_OPTS"] = "-Dx=" + "y" * 8000  # needs new pages
    with pytest.raises(ApiError) as error:
        broker.register(big)
    assert error.value.code == "UNAVAILABLE" and "disk is full" in str(error.value)
    assert "pi" not in broker.tenants and "pi" not in broker.engine.frameworks
    assert broker.allocate_once() == 0 and broker.backend.launched == []
    broker.stop(kill_executors=False)
    assert restored(tmp_path / "broker.sqlite").tenants == {}


def test_read_only_state_refuses_changes_and_leaves_no_phantom_allocation(tmp_path) -> None:
    store = Store(tmp_path / "broker.sqlite")
    broker = Broker(RecordingBackend(), EngineConfig("drf"), store=store)
    broker.start(loop=False)
    broker.register(request("pi", PI, target=1))
    store._db.execute("PRAGMA query_only = 1")  # every write now fails, as on a read-only fs
    with pytest.raises(ApiError, match="not recorded, nothing changed") as error:
        broker.set_target("pi", 3)
    assert error.value.code == "UNAVAILABLE" and broker.tenants["pi"].target == 1
    with pytest.raises(ApiError, match="not recorded"):
        broker.unregister("pi")
    assert "pi" in broker.tenants and broker.tenants["pi"].stopping_since is None
    assert broker.allocate_once() == 0  # the launch could not be recorded: not made
    assert broker.backend.launched == [] and broker.engine.tasks_of("pi") == 0
    allocation = broker.allocation()
    assert all(a.allocated["cpus"] == 0 for a in allocation.agents)
    store._db.execute("PRAGMA query_only = 0")
    assert broker.allocate_once() == 1  # the disk is back: the grant is made and recorded
    broker.stop(kill_executors=False)
    again = restored(tmp_path / "broker.sqlite")
    assert again.tenants["pi"].target == 1 and set(again.tenants["pi"].executors) == set()
    assert [spec.executor_id for spec, _ in again.store.executors()] == ["1"]
    again.stop()


def test_http_answers_503_when_the_state_cannot_be_written(tmp_path) -> None:
    from support.broker import AGENTS, http

    from allocator.broker.server import BrokerOptions, BrokerService

    options = BrokerOptions(http_port=0, grpc_port=0, state_dir=tmp_path, agents=AGENTS)
    with BrokerService(options, backend=RecordingBackend()) as service:
        service.broker.store._db.execute("PRAGMA query_only = 1")
        body = json.dumps(
            {"tenantId": "app-1", "demand": {"cpus": 2, "mem": 1024}, "launch": {
                "driverUrl": "spark://CoarseGrainedScheduler@127.0.0.1:4000", "appId": "app-1",
                "cores": 2, "heapMib": 640}}
        ).encode()  # fmt: skip
        status, reply = http(service, "Register", body, token=None)
    assert status == 503 and reply["code"] == "UNAVAILABLE"


def test_kill_intents_survive_a_restart_until_forgotten(tmp_path) -> None:
    """Issue 23: the KILL of a task the broker does not want is on disk before it is sent;
    the next start reads it back (to send it again); a forgotten one is gone. A file of the
    previous schema (no kills table) opens with none."""
    path = tmp_path / "broker.sqlite"
    store = Store(path)
    assert store.kills() == {}
    store.record_kill("pi.1", "S1", "given up with its agent, since replaced")
    store.record_kill("pi.2", "", "abandoned")
    store.close()
    store = Store(path)
    assert store.kills() == {"pi.1": "S1", "pi.2": ""}
    store.forget_kill("pi.1")
    store.close()
    store = Store(path)
    assert store.kills() == {"pi.2": ""}
    store.close()
    db = sqlite3.connect(path)
    db.execute("DROP TABLE kills")
    db.execute("PRAGMA user_version = 4")
    db.commit()
    db.close()
    store = Store(path)
    assert store.kills() == {}
    store.record_kill("pi.3", "S2", "x")
    store.close()
    store = Store(path)
    assert store.kills() == {"pi.3": "S2"}
    store.close()
