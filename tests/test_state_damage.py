"""Damage that leaves well-formed files (a write-ahead log emptied, cut to its header or at a
frame edge, a main file emptied, garbage on a frame header, an executor row filed under
another key) refuses the start in one line, and --state-recover starts with what is left;
an intact file is never refused, including after a stop at a full disk."""

from __future__ import annotations

import shutil
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from support.broker import PI, WORDCOUNT, RecordingBackend, request

from allocator.broker.core import Broker
from allocator.broker.state_check import FRAME_HEADER, WAL_HEADER, wal_problem
from allocator.broker.store import StateDamaged, Store
from allocator.engine_config import EngineConfig

FILES = ("", "-wal", ".commits")


def _wal(path: Path) -> Path:
    return path.with_name(path.name + "-wal")


def power_cut_image(tmp_path: Path) -> Path:
    """The state directory of a broker that lost power: 'pi' and its two executors were
    folded into the main file at this start; 'wc' and its executor are only in the log."""
    live = tmp_path / "live" / "broker.sqlite"
    first = Broker(RecordingBackend(), EngineConfig("drf"), store=Store(live))
    first.start(loop=False)
    first.register(request("pi", PI, target=2))
    first.allocate_once()
    first.stop(kill_executors=False)
    alive = {("pi", "1"), ("pi", "2")}
    broker = Broker(RecordingBackend(alive=alive), EngineConfig("drf"), store=Store(live))
    broker.start(loop=False)  # the start folds the log into the main file
    broker.register(request("wc", WORDCOUNT, target=1))
    broker.allocate_once()
    crash = tmp_path / "crash"
    crash.mkdir()
    for suffix in FILES:
        shutil.copy(live.with_name(live.name + suffix), crash / f"broker.sqlite{suffix}")
    broker.stop(kill_executors=False)
    return crash / "broker.sqlite"


def frames(wal: Path) -> list[tuple[int, bool]]:
    """(offset, ends a transaction) of every frame of the log, by its format."""
    data = wal.read_bytes()
    page_size = struct.unpack(">I", data[8:12])[0]
    size = FRAME_HEADER + page_size
    return [
        (offset, struct.unpack(">I", data[offset + 4 : offset + 8])[0] != 0)
        for offset in range(WAL_HEADER, len(data) - size + 1, size)
    ]


def _cut_at_first_commit(path: Path) -> None:
    """Keep the log up to its first complete transaction: a valid, shorter log."""
    wal = _wal(path)
    first_end = next(offset for offset, commit in frames(wal) if commit)
    page_size = struct.unpack(">I", wal.read_bytes()[8:12])[0]
    data = wal.read_bytes()
    assert len(data) > first_end + FRAME_HEADER + page_size  # more commits followed
    wal.write_bytes(data[: first_end + FRAME_HEADER + page_size])


def _garbage_on_frame_header(path: Path) -> None:
    """Overwrite the salts of the second frame's header; its page and checksums stay."""
    wal = _wal(path)
    data = bytearray(wal.read_bytes())
    offset = frames(wal)[1][0]
    data[offset + 8 : offset + 16] = b"\xa5" * 8
    wal.write_bytes(bytes(data))


DAMAGE = {
    "log emptied": (lambda p: _wal(p).write_bytes(b""), "emptied (0 bytes)"),
    "log cut to its header": (
        lambda p: _wal(p).write_bytes(_wal(p).read_bytes()[:WAL_HEADER]),
        "cut to its header",
    ),
    "main file emptied": (lambda p: p.write_bytes(b""), "empty (0 bytes) although"),
    "log cut at a frame edge": (_cut_at_first_commit, "cut short"),
    "garbage on a frame header": (_garbage_on_frame_header, "frame 2 has a garbage header"),
}
# What --state-recover finds readable: the main file holds 'pi'; only the log held 'wc'.
RECOVERED = {
    "log emptied": {"pi"},
    "log cut to its header": {"pi"},
    "main file emptied": set(),
    "log cut at a frame edge": {"pi", "wc"},  # the first commit registered wc; its launch is lost
    "garbage on a frame header": {"pi"},
}


@pytest.mark.parametrize("variant", list(DAMAGE))
def test_a_well_formed_but_short_state_refuses_in_one_line(variant, tmp_path) -> None:
    path = power_cut_image(tmp_path)
    damage, message = DAMAGE[variant]
    damage(path)
    for _ in range(2):  # a refusal leaves the files as they were: the second says the same
        with pytest.raises(StateDamaged) as error:
            Store(path)
        text = str(error.value)
        assert message in text and str(path) in text and "--state-recover" in text, text
        assert "\n" not in text


@pytest.mark.parametrize("variant", list(DAMAGE))
def test_recover_starts_with_what_is_left(variant, tmp_path) -> None:
    path = power_cut_image(tmp_path)
    damage, message = DAMAGE[variant]
    damage(path)
    store = Store(path, recover=True)
    assert store.recovery_report is not None and message in store.recovery_report
    assert {t.tenant_id for t in store.tenants()} == RECOVERED[variant]
    pi_executors = {s.executor_id for s, _ in store.executors() if s.tenant_id == "pi"}
    assert pi_executors == ({"1", "2"} if "pi" in RECOVERED[variant] else set())
    store.close()
    again = Store(path)  # the recovered file (and its count) start cleanly from now on
    assert {t.tenant_id for t in again.tenants()} == RECOVERED[variant]
    again.close()


def test_the_cut_log_is_well_formed_so_only_the_commit_count_tells(tmp_path) -> None:
    """The frame-edge cut passes every structural check: the count is what catches it."""
    path = power_cut_image(tmp_path)
    _cut_at_first_commit(path)
    assert wal_problem(_wal(path)) is None
    (path.with_name(path.name + ".commits")).unlink()  # a directory of an older broker
    store = Store(path)  # nothing to compare with: SQLite's view is all there is
    assert {t.tenant_id for t in store.tenants()} == {"pi", "wc"}
    assert {s.tenant_id for s, _ in store.executors()} == {"pi"}  # wc's launch is gone
    store.close()


def test_an_intact_crash_image_starts_with_everything(tmp_path) -> None:
    path = power_cut_image(tmp_path)
    store = Store(path)
    assert {t.tenant_id for t in store.tenants()} == {"pi", "wc"}
    assert len(store.executors()) == 3
    store.close()


def test_a_count_behind_the_file_is_not_damage(tmp_path) -> None:
    """The count is written after the commit, unsynced: a power cut can leave it behind."""
    path = power_cut_image(tmp_path)
    count = path.with_name(path.name + ".commits")
    data = count.read_bytes()
    behind = int(data[:20]) - 3
    live = Store(tmp_path / "other" / "x.sqlite")  # a valid record of another count
    live._count.write(behind)
    shutil.copy(live._count.path, count)
    live.close()
    store = Store(path)
    assert {t.tenant_id for t in store.tenants()} == {"pi", "wc"}
    store.close()
    assert int(count.read_bytes()[:20]) > behind  # caught up at the start


def test_a_torn_count_is_ignored_not_taken_for_a_loss(tmp_path, caplog) -> None:
    path = power_cut_image(tmp_path)
    path.with_name(path.name + ".commits").write_bytes(b"99999999999999999999 deadbeef\n")
    store = Store(path)
    assert {t.tenant_id for t in store.tenants()} == {"pi", "wc"}
    store.close()
    assert "broker.sqlite.commits: does not read back" in caplog.text


# ---- a stop at a full disk ---------------------------------------------------------------
FILL = """
import os, resource, signal, sys
from pathlib import Path
from allocator.broker.proto import pb
from allocator.broker.store import Store, StoreError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG
path, limit, close = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "close"
store = Store(path)
resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # no file may grow past limit
acknowledged = []
for n in range(10_000):
    try:
        store.save_tenant(f"t{n}", pb.RegisterRequest(tenant_id=f"t{n}").SerializeToString(), n, 1)
    except StoreError as error:
        print("failed:", error, file=sys.stderr)
        break
    acknowledged.append(f"t{n}")
print(" ".join(acknowledged), flush=True)
if close:
    store.close()  # a stop that tries to fold the log in at a full disk
os._exit(0)
"""


@pytest.mark.parametrize("stop", ["close", "exit"])
def test_an_intact_file_starts_after_a_stop_at_a_full_disk(stop, tmp_path) -> None:
    path = tmp_path / "broker.sqlite"
    Store(path).close()
    limit = path.stat().st_size + 16 * 4096 + 2000  # the log's last write ends mid-frame
    done = subprocess.run(
        [sys.executable, "-c", FILL, str(path), str(limit), stop],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "write failed" in done.stderr, done.stderr  # EFBIG: SQLite says "disk I/O error"
    acknowledged = done.stdout.split()
    assert len(acknowledged) >= 2
    if stop == "exit":  # the state the old check refused: the log ends in half a frame
        assert "in the middle of a frame" in (wal_problem(_wal(path)) or "")
    store = Store(path)
    assert sorted(t.tenant_id for t in store.tenants()) == sorted(acknowledged)
    store.close()


# ---- an executor row filed under another key -----------------------------------------------
def _clean_state(tmp_path: Path) -> Path:
    path = tmp_path / "broker.sqlite"
    broker = Broker(RecordingBackend(), EngineConfig("drf"), store=Store(path))
    broker.start(loop=False)
    broker.register(request("pi", PI, target=2))
    broker.allocate_once()
    broker.stop(kill_executors=False)
    return path


def _refile(path: Path, sql: str) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute(sql)
    db.close()


COPY_AS_3 = (
    "INSERT INTO executors SELECT tenant_id, '3', spec, handle, state FROM executors "
    "WHERE tenant_id = 'pi' AND executor_id = '1'"
)
MOVE_2_TO_7 = "UPDATE executors SET executor_id = '7' WHERE executor_id = '2'"


def test_an_executor_row_under_another_key_refuses_in_one_line(tmp_path) -> None:
    path = _clean_state(tmp_path)
    _refile(path, COPY_AS_3)  # executor 1 is stored twice: as 1 and as 3
    with pytest.raises(StateDamaged) as error:
        Store(path)
    text = str(error.value)
    assert "executor row 'pi'/'3' holds executor 'pi'/'1'" in text and "\n" not in text
    assert "--state-recover" in text


def test_recover_keeps_one_row_per_executor_and_says_which(tmp_path) -> None:
    path = _clean_state(tmp_path)
    _refile(path, COPY_AS_3)
    _refile(path, MOVE_2_TO_7)  # executor 2 is stored only under 7
    store = Store(path, recover=True)
    report = store.recovery_report or ""
    assert "kept the row of 'pi'/'1' that is its own" in report
    assert "kept executor 'pi'/'2' from row 'pi'/'7'" in report
    assert sorted(s.executor_id for s, _ in store.executors()) == ["1", "2"]
    store.close()
    # counted once each: the restarted broker adopts two executors, not three
    alive = {("pi", "1"), ("pi", "2")}
    broker = Broker(RecordingBackend(alive=alive), EngineConfig("drf"), store=Store(path))
    broker.start(loop=False)
    assert sorted(broker.tenants["pi"].executors) == ["1", "2"]
    assert broker.engine.tasks_of("pi") == 2
    broker.stop(kill_executors=False)


def test_frames_of_earlier_generations_pass_and_a_foreign_salt_does_not(tmp_path) -> None:
    """After a checkpoint SQLite writes the log again from its start (salt-1 plus 1): the
    older frames left past the new ones are not damage; a salt of no generation is."""
    path = tmp_path / "a.sqlite"
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA wal_autocheckpoint=0")
    db.execute("CREATE TABLE t (x)")
    for rows in (60, 20, 5):  # three generations, each shorter than the one before
        for _ in range(rows):
            db.execute("INSERT INTO t VALUES (?)", ("x" * 3000,))
        db.execute("PRAGMA wal_checkpoint(PASSIVE)")
    copy = tmp_path / "copy-wal"
    shutil.copy(_wal(path), copy)
    db.close()
    salts = {struct.unpack(">I", copy.read_bytes()[o + 8 : o + 12])[0] for o, _ in frames(copy)}
    assert len(salts) == 3  # the copy holds frames of three generations
    assert wal_problem(copy) is None
    data = bytearray(copy.read_bytes())
    last = frames(copy)[-1][0]  # a frame of the oldest generation
    data[last + 8 : last + 12] = struct.pack(">I", max(salts) + 7)  # ahead of the header
    copy.write_bytes(bytes(data))
    assert "has a garbage header" in (wal_problem(copy) or "")
