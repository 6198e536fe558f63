"""What the broker persists so a restart loses nothing: tenants and their executors (SQLite).

Tenants are kept as their RegisterRequest (protobuf bytes) plus the latest target; executors
as their launch spec and backend handle, so a restarted broker can re-adopt them.

Every change is one transaction; the broker changes its memory only after the commit (a
failed write raises StoreError and leaves both as they were). At open the state directory is
locked for the broker's lifetime, the files are checked (`state_check`), SQLite's integrity
check runs, the schema version is checked and every row is parsed; any damage refuses the
start (`StateDamaged`, naming the file and the way out) unless `recover=True`, which keeps
every readable row in a fresh database, keeps the damaged files beside it and reports what it
dropped.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError

from allocator.backends.base import LaunchSpec
from allocator.broker.proto import pb
from allocator.broker.state_check import database_problem, wal_problem
from allocator.errors import FairbrokerError

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 1: before write-ahead executor rows and the meta table
SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (
  tenant_id TEXT PRIMARY KEY, request BLOB NOT NULL, target INTEGER NOT NULL,
  next_executor INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS executors (
  tenant_id TEXT NOT NULL, executor_id TEXT NOT NULL, spec TEXT NOT NULL,
  handle TEXT NOT NULL, state TEXT NOT NULL DEFAULT 'LAUNCHED',
  PRIMARY KEY (tenant_id, executor_id)
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
# An executor row is written before its process is started (LAUNCHING, no handle yet) and
# gets its handle once started (LAUNCHED): a crash in between leaves the intent on disk.
LAUNCHING, LAUNCHED = "LAUNCHING", "LAUNCHED"


class StoreError(FairbrokerError):
    """A write to the state file failed (disk full, read-only, I/O error): nothing changed."""


class StateDamaged(FairbrokerError):
    """The state directory is damaged or in use; the message names the file and what to do."""


@dataclass(frozen=True)
class StoredTenant:
    tenant_id: str
    request: pb.RegisterRequest
    target: int
    next_executor: int


@dataclass
class _Loaded:
    tenants: list[StoredTenant] = field(default_factory=list)
    executors: list[tuple[LaunchSpec, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


INTEGRITY_ROWS = 100  # SQLite stops its integrity report after this many problems
PROBLEM_CHARS = 200  # a problem as one log/error line is cut to this length


def one_line(text: str, limit: int = PROBLEM_CHARS) -> str:
    """`text` on one line (line breaks and other control characters become spaces), cut to
    `limit` characters: a refusal or a recovery report must stay a single line."""
    flat = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def integrity_summary(rows: list[tuple]) -> str:
    """SQLite's integrity report (rows, the first one multi-line, headed by '*** in
    database main ***') as one line: how many problems, and the first."""
    lines = [
        line.strip()
        for row in rows
        for line in str(row[0]).splitlines()
        if line.strip() and not line.startswith("*** in database")
    ]
    count = f"{len(lines)} or more" if len(rows) >= INTEGRITY_ROWS else str(len(lines))
    plural = "" if len(lines) == 1 else "s"
    first = lines[0] if lines else "no detail"
    return one_line(f"integrity check: {count} problem{plural}, first: {first}")


def _tenant_of(row: tuple) -> StoredTenant:
    tenant_id, blob, target, next_executor = row
    request = pb.RegisterRequest.FromString(blob)
    if len(unknown_fields.UnknownFieldSet(request)):
        raise ValueError("fields from a newer fairbroker")
    if request.tenant_id != tenant_id or not isinstance(target, int):
        raise ValueError("its columns disagree")
    return StoredTenant(tenant_id, request, target, int(next_executor))


class Store:
    """A small SQLite file; `Store(None)` keeps nothing (no restart recovery)."""

    def __init__(self, path: Path | None, recover: bool = False) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._dir_lock: int | None = None
        self.recovery_report: str | None = None
        self._loaded = _Loaded()
        if path is None:
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock_directory(path)
        try:
            self._open(path, recover)
        except BaseException:
            self.close()
            raise

    # ---- opening -------------------------------------------------------------------------
    def _lock_directory(self, path: Path) -> None:
        """One broker per state directory: an exclusive lock held until close()."""
        lock_path = path.with_name(path.name + ".lock")
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "?"
            os.close(fd)
            raise StateDamaged(
                f"{path.parent}: in use by another broker (pid {holder}); stop it or give "
                "this one another state directory"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._dir_lock = fd

    def _open(self, path: Path, recover: bool) -> None:
        existed = path.exists() and path.stat().st_size > 0
        wal = path.with_name(path.name + "-wal")
        problems = [p for p in (database_problem(path), wal_problem(wal)) if p] if existed else []
        wal_present = wal.exists()
        if not problems:
            loaded = self._connect_and_load(path, wal_present)
            problems = loaded.problems
            if not problems:
                self._loaded = loaded
                return
            if self._db is not None:
                self._db.close()
                self._db = None
        more = f" (and {len(problems) - 1} more)" if problems[1:] else ""
        where = f"{path}: {one_line(problems[0])}{more}"
        if not recover:
            raise StateDamaged(
                f"{where}; start with --state-recover to keep every readable row (the damaged "
                f"files are kept beside it), or move {path.parent} away to start empty"
            )
        self._recover(path, problems)

    def _connect(self, path: Path) -> sqlite3.Connection:
        db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        # WAL with NORMAL sync survives a broker crash (not a power cut) at a fraction of
        # the cost of syncing every launch.
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=NORMAL")
        return db

    def _connect_and_load(self, path: Path, wal_present: bool) -> _Loaded:
        loaded = _Loaded()
        try:
            self._db = db = self._connect(path)
            check = db.execute(f"PRAGMA integrity_check({INTEGRITY_ROWS})").fetchall()
            if check != [("ok",)]:
                loaded.problems.append(integrity_summary(check))
                return loaded
            version = db.execute("PRAGMA user_version").fetchone()[0]
            fresh = not db.execute("SELECT name FROM sqlite_master").fetchall()
            if version > SCHEMA_VERSION:
                loaded.problems.append(
                    f"written by a newer fairbroker (schema {version}; this one reads "
                    f"up to {SCHEMA_VERSION})"
                )
                return loaded
            db.executescript(SCHEMA)
            self._migrate(db, 0 if fresh else version)
            clean = db.execute("SELECT value FROM meta WHERE key = 'clean'").fetchone()
            if clean is not None and clean[0] == "0" and not wal_present:
                loaded.problems.append(
                    "its write-ahead log is missing after an unclean stop (recent changes lost)"
                )
            self._read_rows(db, loaded)
            if not loaded.problems:
                # Until close() says otherwise, this file was not stopped cleanly; the flag is
                # moved into the main file so that a WAL lost later is noticed.
                db.execute("INSERT OR REPLACE INTO meta VALUES ('clean', '0')")
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        except sqlite3.DatabaseError as error:
            loaded.problems.append(f"unreadable ({error})")
        return loaded

    @staticmethod
    def _migrate(db: sqlite3.Connection, version: int) -> None:
        columns = [row[1] for row in db.execute("PRAGMA table_info(executors)")]
        if "state" not in columns:  # schema 1: before the write-ahead executor rows
            db.execute(f"ALTER TABLE executors ADD COLUMN state TEXT NOT NULL DEFAULT '{LAUNCHED}'")
        if version != SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @staticmethod
    def _read_rows(db: sqlite3.Connection, loaded: _Loaded) -> None:
        """Parse every row; each one that does not parse is a problem (and is skipped)."""
        try:
            for row in db.execute("SELECT tenant_id, request, target, next_executor FROM tenants"):
                try:
                    loaded.tenants.append(_tenant_of(row))
                except (DecodeError, ValueError, TypeError) as error:
                    loaded.problems.append(f"tenant row {row[0]!r} unreadable ({error})")
        except sqlite3.DatabaseError as error:
            loaded.problems.append(f"tenants table unreadable ({error})")
        try:
            for tenant_id, executor_id, spec, handle in db.execute(
                "SELECT tenant_id, executor_id, spec, handle FROM executors"
            ):
                try:
                    loaded.executors.append((LaunchSpec(**json.loads(spec)), str(handle)))
                except (ValueError, TypeError) as error:
                    loaded.problems.append(
                        f"executor row {tenant_id!r}/{executor_id!r} unreadable ({error})"
                    )
        except sqlite3.DatabaseError as error:
            loaded.problems.append(f"executors table unreadable ({error})")

    def _recover(self, path: Path, problems: list[str]) -> None:
        """Keep every readable row in a fresh database; the damaged files stay beside it."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        kept = _Loaded()
        for suffix in ("", "-wal", "-shm"):
            source = path.with_name(path.name + suffix)
            if source.exists():
                shutil.copy2(source, path.with_name(f"{path.name}.damaged-{stamp}{suffix}"))
        try:
            salvage = sqlite3.connect(path)  # SQLite keeps the WAL's readable frames
            try:
                self._read_rows(salvage, kept)
            finally:
                salvage.close()
        except sqlite3.DatabaseError as error:
            kept.problems.append(f"tables unreadable ({error})")
        for suffix in ("", "-wal", "-shm"):
            path.with_name(path.name + suffix).unlink(missing_ok=True)
        self._db = db = self._connect(path)
        db.executescript(SCHEMA)
        self._migrate(db, 0)
        db.execute("INSERT OR REPLACE INTO meta VALUES ('clean', '0')")
        for t in kept.tenants:
            self.save_tenant(t.tenant_id, t.request.SerializeToString(), t.target, t.next_executor)
        for spec, handle in kept.executors:
            self.save_executor(spec, handle)
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._loaded = _Loaded(kept.tenants, kept.executors)
        dropped = "; ".join(one_line(p) for p in problems + kept.problems)
        self.recovery_report = (
            f"{path}: recovered {len(kept.tenants)} tenants and {len(kept.executors)} "
            f"executors; dropped what was unreadable: {dropped}; the damaged files are kept "
            f"as {path.name}.damaged-{stamp}*"
        )
        log.warning("%s", self.recovery_report)

    # ---- reads (what was loaded at open) -------------------------------------------------
    def tenants(self) -> list[StoredTenant]:
        return list(self._loaded.tenants)

    def executors(self) -> list[tuple[LaunchSpec, str]]:
        """Stored executors and their handles ('' for one whose start was not recorded)."""
        return list(self._loaded.executors)

    # ---- writes: one transaction each ----------------------------------------------------
    def _transaction(self, *statements: tuple[str, tuple]) -> None:
        if self._db is None:
            return
        with self._lock:
            try:
                self._db.execute("BEGIN IMMEDIATE")
                try:
                    for sql, args in statements:
                        self._db.execute(sql, args)
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:  # SQLite ends some failures itself
                        self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                raise StoreError(f"{self.path}: write failed ({error})") from None

    def _run(self, sql: str, *args: object) -> None:
        self._transaction((sql, args))

    def save_tenant(self, tenant_id: str, request: bytes, target: int, next_executor: int) -> None:
        self._run(
            "INSERT OR REPLACE INTO tenants VALUES (?, ?, ?, ?)",
            tenant_id, request, target, next_executor,
        )  # fmt: skip

    def set_target(self, tenant_id: str, target: int) -> None:
        self._run("UPDATE tenants SET target = ? WHERE tenant_id = ?", target, tenant_id)

    def delete_tenant(self, tenant_id: str, executors: bool = True) -> None:
        """Forget a tenant; with executors=False its executor rows stay until each exits."""
        statements = [("DELETE FROM tenants WHERE tenant_id = ?", (tenant_id,))]
        if executors:
            statements.append(("DELETE FROM executors WHERE tenant_id = ?", (tenant_id,)))
        self._transaction(*statements)

    def record_launch(self, spec: LaunchSpec, next_executor: int) -> None:
        """Write-ahead: the executor (LAUNCHING, no handle) and the tenant's next id, before
        the backend starts anything."""
        self._transaction(
            ("UPDATE tenants SET next_executor = ? WHERE tenant_id = ?",
             (next_executor, spec.tenant_id)),
            ("INSERT OR REPLACE INTO executors VALUES (?, ?, ?, '', ?)",
             (spec.tenant_id, spec.executor_id, json.dumps(asdict(spec)), LAUNCHING)),
        )  # fmt: skip

    def set_handle(self, tenant_id: str, executor_id: str, handle: str) -> None:
        self._run(
            "UPDATE executors SET handle = ?, state = ? WHERE tenant_id = ? AND executor_id = ?",
            handle, LAUNCHED, tenant_id, executor_id,
        )  # fmt: skip

    def save_executor(self, spec: LaunchSpec, handle: str) -> None:
        self._run(
            "INSERT OR REPLACE INTO executors VALUES (?, ?, ?, ?, ?)",
            spec.tenant_id, spec.executor_id, json.dumps(asdict(spec)), handle, LAUNCHED,
        )  # fmt: skip

    def delete_executor(self, tenant_id: str, executor_id: str) -> None:
        self._run(
            "DELETE FROM executors WHERE tenant_id = ? AND executor_id = ?", tenant_id, executor_id
        )

    def close(self) -> None:
        """Mark the file cleanly stopped (its WAL folded in), then release the directory."""
        with self._lock:
            if self._db is not None:
                try:
                    self._db.execute("INSERT OR REPLACE INTO meta VALUES ('clean', '1')")
                    self._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                except sqlite3.Error as error:
                    log.warning("%s: not marked clean at close (%s)", self.path, error)
                self._db.close()
                self._db = None
            if self._dir_lock is not None:
                os.close(self._dir_lock)
                self._dir_lock = None
