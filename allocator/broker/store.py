"""What the broker persists so a restart loses nothing: tenants and their executors (SQLite).

Tenants are kept as their RegisterRequest (protobuf bytes) plus the latest target; executors
as their launch spec and backend handle, so a restarted broker can re-adopt them.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import asdict
from pathlib import Path

from allocator.backends.base import LaunchSpec

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
"""
# An executor row is written before its process is started (LAUNCHING, no handle yet) and
# gets its handle once started (LAUNCHED): a crash in between leaves the intent on disk.
LAUNCHING, LAUNCHED = "LAUNCHING", "LAUNCHED"


class Store:
    """A small SQLite file; `Store(None)` keeps nothing (no restart recovery)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            # WAL with NORMAL sync survives a broker crash (not a power cut) at a fraction of
            # the cost of syncing every launch.
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(SCHEMA)
            columns = [row[1] for row in self._db.execute("PRAGMA table_info(executors)")]
            if "state" not in columns:  # a state file from before the write-ahead rows
                self._db.execute(
                    f"ALTER TABLE executors ADD COLUMN state TEXT NOT NULL DEFAULT '{LAUNCHED}'"
                )

    def _run(self, sql: str, *args: object) -> list[tuple]:
        if self._db is None:
            return []
        with self._lock:
            return self._db.execute(sql, args).fetchall()

    def _transaction(self, *statements: tuple[str, tuple]) -> None:
        if self._db is None:
            return
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                for sql, args in statements:
                    self._db.execute(sql, args)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def save_tenant(self, tenant_id: str, request: bytes, target: int, next_executor: int) -> None:
        self._run(
            "INSERT OR REPLACE INTO tenants VALUES (?, ?, ?, ?)",
            tenant_id, request, target, next_executor,
        )  # fmt: skip

    def set_target(self, tenant_id: str, target: int) -> None:
        self._run("UPDATE tenants SET target = ? WHERE tenant_id = ?", target, tenant_id)

    def set_next_executor(self, tenant_id: str, next_executor: int) -> None:
        self._run(
            "UPDATE tenants SET next_executor = ? WHERE tenant_id = ?", next_executor, tenant_id
        )

    def delete_tenant(self, tenant_id: str, executors: bool = True) -> None:
        """Forget a tenant; with executors=False its executor rows stay until each exits."""
        if executors:
            self._run("DELETE FROM executors WHERE tenant_id = ?", tenant_id)
        self._run("DELETE FROM tenants WHERE tenant_id = ?", tenant_id)

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

    def tenants(self) -> list[tuple[str, bytes, int, int]]:
        return self._run("SELECT tenant_id, request, target, next_executor FROM tenants")

    def executors(self) -> list[tuple[LaunchSpec, str]]:
        """Stored executors and their handles ('' for one whose start was not recorded)."""
        rows = self._run("SELECT spec, handle FROM executors")
        return [(LaunchSpec(**json.loads(spec)), handle) for spec, handle in rows]

    def close(self) -> None:
        if self._db is not None:
            with self._lock:
                self._db.close()
            self._db = None
