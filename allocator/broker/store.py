"""What the broker persists so a restart loses nothing: tenants and their executors (SQLite).

Tenants are kept as their RegisterRequest (protobuf bytes) plus the latest target; executors
as their launch spec and backend handle, so a restarted broker can re-adopt them.

Every change is one transaction; the broker changes its memory only after the commit (a
failed write raises StoreError and leaves both as they were). At open the state directory is
locked for the broker's lifetime, the files are checked (`state_check`), SQLite's integrity
check runs, the count of committed changes is compared with the one kept beside the file
(`commit_count`), the schema version is checked and every row is parsed; any damage refuses
the start (`StateDamaged`, naming the file and the way out) unless `recover=True`, which keeps
every readable row in a fresh database, keeps the damaged files beside it and reports what it
dropped. A file that holds every committed change starts even if its log ends in an
unfinished write (a disk that filled up mid-write): only a lost commit is damage.

Durability: WAL mode with `synchronous=FULL`. A grant the broker acted on (an executor
started, a tenant acknowledged) must survive a power cut, or the next start forgets running
executors and tenants. SQLite's documentation (pragma.html#pragma_synchronous, wal.html) says
WAL with NORMAL stays consistent but "might roll back" commits after a power loss, since the
log is synced only at checkpoints; WAL with FULL syncs the log at every commit, which makes
commits durable with one fsync each. The rollback journal with FULL is durable too but syncs
the journal and the database at every commit (several fsyncs). Measured per grant (two
commits: the write-ahead executor row, then its handle) with scripts/store_commit_cost.py:
see docs/operations.md, "State durability".
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import sqlite3
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from google.protobuf import unknown_fields
from google.protobuf.message import DecodeError

from allocator.backends.base import LaunchSpec
from allocator.broker.commit_count import SUFFIX as COUNT_SUFFIX
from allocator.broker.commit_count import CommitCount
from allocator.broker.proto import pb
from allocator.broker.state_check import WAL_HEADER, database_problem, wal_problem
from allocator.errors import FairbrokerError

log = logging.getLogger(__name__)

# 1: before write-ahead executor rows and the meta table; 2: before executor_ids; 3: before
# reclaims; 4: before kills
SCHEMA_VERSION = 5
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
CREATE TABLE IF NOT EXISTS executor_ids (
  tenant_id TEXT PRIMARY KEY, next_executor INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS reclaims (
  tenant_id TEXT NOT NULL, executor_id TEXT NOT NULL, beneficiary TEXT NOT NULL,
  placement TEXT NOT NULL, deadline REAL NOT NULL, PRIMARY KEY (tenant_id, executor_id)
);
CREATE TABLE IF NOT EXISTS kills (
  task_id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL
);
"""
# kills: cluster tasks the broker does not want (not, or no longer, one of its executors: a
# task that reappeared after the broker replaced it), written before the KILL is sent and
# deleted at the task's terminal update; a restarted broker sends them again.
# reclaims: executors asked to leave (issue 22), written before anyone is told, with the unix
# time after which the broker kills them; a row goes with its executor's.
# executor_ids: the next executor id of every tenant id ever stored, kept after the tenant is
# forgotten, so a tenant id registered again (after an unregister or a restart) never reuses
# an id (its executors' directories and logs are named by it).
_RAISE_NEXT_ID = (
    "INSERT INTO executor_ids VALUES (?, ?) ON CONFLICT (tenant_id) "
    "DO UPDATE SET next_executor = max(next_executor, excluded.next_executor)"
)
# An executor row is written before its process is started (LAUNCHING, no handle yet) and
# gets its handle once started (LAUNCHED): a crash in between leaves the intent on disk.
LAUNCHING, LAUNCHED = "LAUNCHING", "LAUNCHED"
LEAVING = "LEAVING"  # reclaimed: its reclaims row says for whom and until when


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


@dataclass(frozen=True)
class StoredReclaim:
    """An executor being reclaimed: for `beneficiary` (its placement `placement`), to be
    killed once `deadline` (unix seconds) has passed."""

    tenant_id: str
    executor_id: str
    beneficiary: str
    placement: str
    deadline: float


@dataclass
class _Loaded:
    tenants: list[StoredTenant] = field(default_factory=list)
    executors: list[tuple[LaunchSpec, str]] = field(default_factory=list)
    reclaims: list[StoredReclaim] = field(default_factory=list)
    kills: dict[str, str] = field(default_factory=dict)  # task id -> agent id ('' unknown)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what a recovery did beyond dropping rows


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


def _next_after(executor_id: str) -> int:
    """The id after `executor_id` (ids are decimal counters; anything else counts as 0)."""
    return int(executor_id) + 1 if executor_id.isdecimal() else 1


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return None


def _remove_created(path: Path, wal_size: int | None) -> None:
    """Leave the files as they were found: a read-only connection creates an empty log (and
    its index) where there was none."""
    if wal_size is None:
        for suffix in ("-wal", "-shm"):
            created = path.with_name(path.name + suffix)
            if _size(created) == 0 or suffix == "-shm":
                created.unlink(missing_ok=True)


def _lost_commits(path: Path, wal: Path, size: int | None, expected: int, committed: int) -> str:
    """Why a file holds fewer commits than its count says: what its WAL (`size` bytes, None:
    absent) looked like at open."""
    if size is None:
        how = "its write-ahead log is missing after an unclean stop"
    elif size == 0:
        how = f"{wal.name}: emptied (0 bytes) after an unclean stop"
    elif size == WAL_HEADER:
        how = f"{wal.name}: cut to its header after an unclean stop"
    else:
        how = f"{wal.name}: cut short (at a frame edge, or frames SQLite dropped)"
    return (
        f"{how}: its last {expected - committed} committed changes are missing "
        f"({path.name}{COUNT_SUFFIX} counts {expected}, the file holds {committed})"
    )


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
        self._commits = 0  # changes committed to the file in all (its meta row 'commits')
        self._count: CommitCount | None = None
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
        self._count = count = CommitCount(path)
        if count.problem:
            log.warning("%s", count.problem)
        expected = count.expected
        existed = path.exists() and path.stat().st_size > 0
        wal = path.with_name(path.name + "-wal")
        problems: list[str] = []
        if not existed and expected:
            state = "empty (0 bytes)" if path.exists() else "missing"
            problems = [f"{path.name}: {state} although {expected} changes were committed to it"]
        structural = [p for p in (database_problem(path), wal_problem(wal)) if p] if existed else []
        if structural and expected is None:
            problems = structural  # no count: a damaged log cannot be told from a lost commit
        if not problems:
            loaded = self._connect_and_load(path, wal, expected)
            problems = structural + loaded.problems
            if not loaded.problems:
                if structural:
                    log.warning(
                        "%s: %s; every committed change is there (the end of the log is an "
                        "unfinished write, as at a full disk): starting",
                        path, "; ".join(structural),
                    )  # fmt: skip
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
        # FULL: every commit is synced, so a power cut loses no grant (module docstring).
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        return db

    @staticmethod
    def _committed(db: sqlite3.Connection) -> int:
        """The file's own count of committed changes (0 before it kept one)."""
        try:
            row = db.execute("SELECT value FROM meta WHERE key = 'commits'").fetchone()
        except sqlite3.OperationalError:  # no meta table (schema 1)
            return 0
        return int(row[0]) if row is not None and str(row[0]).isdecimal() else 0

    def _connect_and_load(self, path: Path, wal: Path, expected: int | None) -> _Loaded:
        loaded = _Loaded()
        wal_size = _size(wal)  # before SQLite creates one
        try:
            committed = 0
            if _size(path):
                # Read-only first: a writable connection folds the log into the file (or
                # deletes a log it cannot read) at close, which would destroy the evidence.
                probe = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
                try:
                    check = probe.execute(f"PRAGMA integrity_check({INTEGRITY_ROWS})").fetchall()
                    committed = self._committed(probe)
                finally:
                    probe.close()
                    _remove_created(path, wal_size)
                if check != [("ok",)]:
                    loaded.problems.append(integrity_summary(check))
                    return loaded
                if expected is not None and committed < expected:
                    loaded.problems.append(_lost_commits(path, wal, wal_size, expected, committed))
                    return loaded
            self._db = db = self._connect(path)
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
            # Without a count (a file of an older broker), a WAL gone after an unclean stop is
            # the one loss that can be told.
            if expected is None and clean is not None and clean[0] == "0" and wal_size is None:
                loaded.problems.append(
                    "its write-ahead log is missing after an unclean stop (recent changes lost)"
                )
            self._read_rows(db, loaded)
            if not loaded.problems:
                # Until close() says otherwise, this file was not stopped cleanly; the flag is
                # moved into the main file so that a WAL lost later is noticed.
                db.execute("INSERT OR REPLACE INTO meta VALUES ('clean', '0')")
                db.execute("INSERT OR REPLACE INTO meta VALUES ('commits', ?)", (str(committed),))
                db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
                self._commits = committed
                self._write_count()
        except sqlite3.DatabaseError as error:
            loaded.problems.append(f"unreadable ({error})")
        return loaded

    @staticmethod
    def _migrate(db: sqlite3.Connection, version: int) -> None:
        columns = [row[1] for row in db.execute("PRAGMA table_info(executors)")]
        if "state" not in columns:  # schema 1: before the write-ahead executor rows
            db.execute(f"ALTER TABLE executors ADD COLUMN state TEXT NOT NULL DEFAULT '{LAUNCHED}'")
        if 0 < version < 3:  # before executor_ids: the ids in use are those of stored rows
            for tenant_id, next_executor in db.execute(
                "SELECT tenant_id, next_executor FROM tenants"
            ).fetchall():
                db.execute(_RAISE_NEXT_ID, (tenant_id, next_executor))
            for tenant_id, executor_id in db.execute(
                "SELECT tenant_id, executor_id FROM executors"
            ).fetchall():
                db.execute(_RAISE_NEXT_ID, (tenant_id, _next_after(str(executor_id))))
        if version != SCHEMA_VERSION:
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")

    @staticmethod
    def _read_rows(db: sqlite3.Connection, loaded: _Loaded) -> None:
        """Parse every row; each one that does not parse is a problem (and is skipped). An
        executor row whose key is not the executor it holds is a problem too; of the rows
        holding one executor, one is kept (its own row first), so none is counted twice."""
        tenants: list[StoredTenant] = []
        try:
            for row in db.execute("SELECT tenant_id, request, target, next_executor FROM tenants"):
                try:
                    tenants.append(_tenant_of(row))
                except (DecodeError, ValueError, TypeError) as error:
                    loaded.problems.append(f"tenant row {row[0]!r} unreadable ({error})")
        except sqlite3.DatabaseError as error:
            loaded.problems.append(f"tenants table unreadable ({error})")
        executors: dict[tuple[str, str], tuple[LaunchSpec, str]] = {}
        misfiled: list[tuple[tuple[str, str], LaunchSpec, str]] = []
        try:
            for tenant_id, executor_id, spec, handle in db.execute(
                "SELECT tenant_id, executor_id, spec, handle FROM executors ORDER BY rowid"
            ):
                try:
                    launch = LaunchSpec(**json.loads(spec))
                except (ValueError, TypeError) as error:
                    loaded.problems.append(
                        f"executor row {tenant_id!r}/{executor_id!r} unreadable ({error})"
                    )
                    continue
                if (launch.tenant_id, launch.executor_id) == (tenant_id, executor_id):
                    executors[tenant_id, executor_id] = (launch, str(handle))
                else:
                    misfiled.append(((str(tenant_id), str(executor_id)), launch, str(handle)))
        except sqlite3.DatabaseError as error:
            loaded.problems.append(f"executors table unreadable ({error})")
        for (tenant_id, executor_id), launch, handle in misfiled:
            held = (launch.tenant_id, launch.executor_id)
            loaded.problems.append(
                f"executor row {tenant_id!r}/{executor_id!r} holds executor "
                f"{held[0]!r}/{held[1]!r} (its key disagrees with its contents)"
            )
            if held in executors:
                loaded.notes.append(f"kept the row of {held[0]!r}/{held[1]!r} that is its own")
            else:
                executors[held] = (launch, handle)
                loaded.notes.append(
                    f"kept executor {held[0]!r}/{held[1]!r} from row {tenant_id!r}/{executor_id!r}"
                )
        loaded.executors.extend(executors.values())
        # absent from a file being salvaged with a damaged schema: nothing is leaving then
        with contextlib.suppress(sqlite3.DatabaseError):
            for row in db.execute(
                "SELECT tenant_id, executor_id, beneficiary, placement, deadline FROM reclaims"
            ):
                tenant_id, executor_id, beneficiary, placement, deadline = row
                if (tenant_id, executor_id) not in executors:
                    continue  # its executor row is gone: so is the executor
                if not isinstance(deadline, int | float):
                    loaded.problems.append(f"reclaim row {tenant_id!r}/{executor_id!r} unreadable")
                    continue
                loaded.reclaims.append(
                    StoredReclaim(tenant_id, executor_id, str(beneficiary), str(placement),
                                  float(deadline))
                )  # fmt: skip
        with contextlib.suppress(sqlite3.DatabaseError):  # absent from an older schema's file
            for task_id, agent_id in db.execute("SELECT task_id, agent_id FROM kills"):
                loaded.kills[str(task_id)] = str(agent_id)
        # A tenant's next id is past every id stored for it, whichever row says so.
        floor: dict[str, int] = {}
        # absent from a file of an older schema (migrated at open) or one being salvaged
        with contextlib.suppress(sqlite3.DatabaseError):
            floor.update(db.execute("SELECT tenant_id, next_executor FROM executor_ids"))
        for launch, _ in loaded.executors:
            ahead = _next_after(launch.executor_id)
            floor[launch.tenant_id] = max(floor.get(launch.tenant_id, 1), ahead)
        loaded.tenants.extend(
            replace(t, next_executor=max(t.next_executor, int(floor.get(t.tenant_id, 1))))
            for t in tenants
        )

    def _recover(self, path: Path, problems: list[str]) -> None:
        """Keep every readable row in a fresh database; the damaged files stay beside it."""
        stamp = time.strftime("%Y%m%dT%H%M%S")
        kept = _Loaded()
        for suffix in ("", "-wal", "-shm", COUNT_SUFFIX):
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
        db.execute("INSERT OR REPLACE INTO meta VALUES ('commits', '0')")
        self._commits = 0
        self._write_count()  # the fresh file is the count's reference from now on
        for t in kept.tenants:
            self.save_tenant(t.tenant_id, t.request.SerializeToString(), t.target, t.next_executor)
        for spec, handle in kept.executors:
            self.save_executor(spec, handle)
        for reclaim in kept.reclaims:
            self.record_reclaim(reclaim)
        for task_id, agent_id in kept.kills.items():
            self.record_kill(task_id, agent_id, "kept at recovery")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self._loaded = _Loaded(kept.tenants, kept.executors, kept.reclaims, kept.kills)
        dropped = "; ".join(one_line(p) for p in problems + kept.problems)
        notes = "".join(f"; {one_line(note)}" for note in kept.notes)
        self.recovery_report = (
            f"{path}: recovered {len(kept.tenants)} tenants and {len(kept.executors)} "
            f"executors; dropped what was unreadable: {dropped}{notes}; the damaged files are "
            f"kept as {path.name}.damaged-{stamp}*"
        )
        log.warning("%s", self.recovery_report)

    # ---- reads (what was loaded at open) -------------------------------------------------
    def tenants(self) -> list[StoredTenant]:
        return list(self._loaded.tenants)

    def executors(self) -> list[tuple[LaunchSpec, str]]:
        """Stored executors and their handles ('' for one whose start was not recorded)."""
        return list(self._loaded.executors)

    def reclaims(self) -> list[StoredReclaim]:
        """Stored executors being reclaimed (each of a stored executor)."""
        return list(self._loaded.reclaims)

    def kills(self) -> dict[str, str]:
        """Stored kill intents: task id -> agent id ('' when unknown)."""
        return dict(self._loaded.kills)

    def executor_ids(self) -> dict[str, int]:
        """Every tenant id ever stored -> its next executor id (for `fairbroker state
        export`)."""
        if self._db is None:
            return {}
        with self._lock:
            rows = self._db.execute("SELECT tenant_id, next_executor FROM executor_ids").fetchall()
        return {str(t): int(n) for t, n in rows}

    def next_executor(self, tenant_id: str) -> int:
        """The first executor id never stored for `tenant_id` (1 if none ever was), whether
        or not the tenant is stored now."""
        if self._db is None:
            return 1
        with self._lock:
            row = self._db.execute(
                "SELECT next_executor FROM executor_ids WHERE tenant_id = ?", (tenant_id,)
            ).fetchone()
        return int(row[0]) if row is not None else 1

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
                    self._db.execute(
                        "UPDATE meta SET value = ? WHERE key = 'commits'", (str(self._commits + 1),)
                    )
                    self._db.execute("COMMIT")
                except BaseException:
                    if self._db.in_transaction:  # SQLite ends some failures itself
                        self._db.execute("ROLLBACK")
                    raise
            except sqlite3.Error as error:
                self._resync_count()
                raise StoreError(f"{self.path}: write failed ({error})") from None
            self._commits += 1
            self._write_count()

    def _write_count(self) -> None:
        if self._count is None:
            return
        try:
            self._count.write(self._commits)
        except OSError as error:  # behind is safe: only a count ahead of the file refuses
            log.warning("%s: commit count not written (%s)", self._count.path, error.strerror)

    def _resync_count(self) -> None:
        """After a failed commit: what the file holds (a failed COMMIT may have landed)."""
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._commits = max(self._commits, self._committed(self._db))

    def _run(self, sql: str, *args: object) -> None:
        self._transaction((sql, args))

    def save_tenant(self, tenant_id: str, request: bytes, target: int, next_executor: int) -> None:
        self._transaction(
            ("INSERT OR REPLACE INTO tenants VALUES (?, ?, ?, ?)",
             (tenant_id, request, target, next_executor)),
            (_RAISE_NEXT_ID, (tenant_id, next_executor)),
        )  # fmt: skip

    def raise_next_executor(self, tenant_id: str, next_executor: int) -> None:
        """Executor ids of `tenant_id` start at `next_executor` or later (`state import`)."""
        self._run(_RAISE_NEXT_ID, tenant_id, next_executor)

    def set_target(self, tenant_id: str, target: int) -> None:
        self._run("UPDATE tenants SET target = ? WHERE tenant_id = ?", target, tenant_id)

    def delete_tenant(self, tenant_id: str, executors: bool = True) -> None:
        """Forget a tenant; with executors=False its executor rows stay until each exits."""
        statements = [("DELETE FROM tenants WHERE tenant_id = ?", (tenant_id,))]
        if executors:
            statements.append(("DELETE FROM executors WHERE tenant_id = ?", (tenant_id,)))
            statements.append(("DELETE FROM reclaims WHERE tenant_id = ?", (tenant_id,)))
        self._transaction(*statements)

    def record_launch(self, spec: LaunchSpec, next_executor: int) -> None:
        """Write-ahead: the executor (LAUNCHING, no handle) and the tenant's next id, before
        the backend starts anything."""
        self._transaction(
            ("UPDATE tenants SET next_executor = ? WHERE tenant_id = ?",
             (next_executor, spec.tenant_id)),
            (_RAISE_NEXT_ID, (spec.tenant_id, next_executor)),
            ("INSERT OR REPLACE INTO executors VALUES (?, ?, ?, '', ?)",
             (spec.tenant_id, spec.executor_id, json.dumps(asdict(spec)), LAUNCHING)),
        )  # fmt: skip

    def set_handle(self, tenant_id: str, executor_id: str, handle: str) -> None:
        self._run(
            "UPDATE executors SET handle = ?, state = ? WHERE tenant_id = ? AND executor_id = ?",
            handle, LAUNCHED, tenant_id, executor_id,
        )  # fmt: skip

    def save_executor(self, spec: LaunchSpec, handle: str) -> None:
        self._transaction(
            ("INSERT OR REPLACE INTO executors VALUES (?, ?, ?, ?, ?)",
             (spec.tenant_id, spec.executor_id, json.dumps(asdict(spec)), handle, LAUNCHED)),
            (_RAISE_NEXT_ID, (spec.tenant_id, _next_after(spec.executor_id))),
        )  # fmt: skip

    def record_reclaim(self, reclaim: StoredReclaim) -> None:
        """Write-ahead for a reclaim: the executor is marked LEAVING, with its beneficiary and
        its kill deadline, before anyone is told (heartbeat reply, allocation) or signalled."""
        key = (reclaim.tenant_id, reclaim.executor_id)
        self._transaction(
            ("UPDATE executors SET state = ? WHERE tenant_id = ? AND executor_id = ?",
             (LEAVING, *key)),
            ("INSERT OR REPLACE INTO reclaims VALUES (?, ?, ?, ?, ?)",
             (*key, reclaim.beneficiary, reclaim.placement, reclaim.deadline)),
        )  # fmt: skip

    def record_kill(self, task_id: str, agent_id: str, reason: str) -> None:
        """Write-ahead for a KILL of a task the broker does not want: on disk before the
        KILL is sent, so a restarted broker sends it again."""
        self._run("INSERT OR REPLACE INTO kills VALUES (?, ?, ?, ?)",
                  task_id, agent_id, reason[:500], time.time())  # fmt: skip

    def forget_kill(self, task_id: str) -> None:
        self._run("DELETE FROM kills WHERE task_id = ?", task_id)

    def delete_executor(self, tenant_id: str, executor_id: str) -> None:
        key = (tenant_id, executor_id)
        self._transaction(
            ("DELETE FROM executors WHERE tenant_id = ? AND executor_id = ?", key),
            ("DELETE FROM reclaims WHERE tenant_id = ? AND executor_id = ?", key),
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
            if self._count is not None:
                self._count.close()
            if self._dir_lock is not None:
                os.close(self._dir_lock)
                self._dir_lock = None
