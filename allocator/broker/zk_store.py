"""The broker's durable state in ZooKeeper (`serve --ha`): the same interface as the SQLite
`Store`, so the broker and its reclaimer cannot tell them apart.

Layout under PATH/state, one znode per row, its data JSON:

    tenants/<tenant>              {"request": base64 RegisterRequest, "target", "next_executor"}
    executors/<tenant>|<executor> {"spec": LaunchSpec, "handle", "state"}
    executor_ids/<tenant>         {"next_executor"}   (kept after the tenant is forgotten)
    reclaims/<tenant>|<executor>  {"beneficiary", "placement", "deadline"}
    meta/framework_id             the Mesos framework id

Names are percent-encoded (so '|', '/' and '.' never reach a znode name). The leader is the
only writer: it reads everything at its take-over (`load`) and keeps the rows in memory,
from which each write is built as one transaction. Every transaction first checks the
leader's own election node (an ephemeral node, version 0): when the session that holds it has
expired, ZooKeeper has removed it and the whole transaction fails, so a deposed leader (one
paused past its session timeout, or partitioned away) cannot overwrite its successor's state.
A failed write raises StoreError and changes nothing, as with SQLite.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
from dataclasses import asdict
from typing import Any
from urllib.parse import quote, unquote

from allocator.backends.base import LaunchSpec
from allocator.broker.proto import pb
from allocator.broker.store import (
    LAUNCHED,
    LAUNCHING,
    LEAVING,
    StoredReclaim,
    StoredTenant,
    StoreError,
    _next_after,
)

log = logging.getLogger(__name__)

WRITE_TIMEOUT_S = 5.0  # a write the leader cannot make in this time has failed
TABLES = ("tenants", "executors", "executor_ids", "reclaims", "kills", "meta")


def _name(*parts: str) -> str:
    return "|".join(quote(p, safe="").replace(".", "%2E") for p in parts)


def _parts(name: str) -> list[str]:
    return [unquote(p) for p in name.split("|")]


def _dumps(value: object) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


class ZkStore:
    """`Store`'s interface over ZooKeeper. `fence_node()` names the leader's election node
    (None: not leading, every write fails)."""

    def __init__(self, client_of: Any, root: str, fence_node: Any) -> None:
        self._client_of = client_of  # () -> KazooClient (connected by the election)
        self.root = f"{root}/state"
        self.path = f"zk:{self.root}"
        self._fence_node = fence_node
        self._lock = threading.Lock()
        self.recovery_report: str | None = None
        self._rows: dict[str, dict[str, dict]] = {t: {} for t in TABLES}
        self.loaded = False

    # ---- the take-over read --------------------------------------------------------------
    def load(self) -> None:
        """Read every row (the new leader, before it recovers anything)."""
        client = self._client_of()
        rows: dict[str, dict[str, dict]] = {t: {} for t in TABLES}
        problems = []
        for table in TABLES:
            where = f"{self.root}/{table}"
            client.ensure_path(where)
            for name in client.get_children(where):
                data, _ = client.get(f"{where}/{name}")
                try:
                    rows[table][name] = json.loads(data) if data else {}
                except ValueError:
                    problems.append(f"{table}/{name} unreadable")
        with self._lock:
            self._rows = rows
            self.loaded = True
        if problems:
            self.recovery_report = f"{self.path}: skipped {'; '.join(problems[:10])}"
            log.warning("%s", self.recovery_report)
        log.info(
            "read the state from ZooKeeper %s: %d tenants, %d executors", self.root,
            len(rows["tenants"]), len(rows["executors"]),
        )  # fmt: skip

    # ---- reads ---------------------------------------------------------------------------
    def tenants(self) -> list[StoredTenant]:
        out = []
        with self._lock:
            rows = dict(self._rows["tenants"])
            floors = {_parts(k)[0]: v.get("next_executor", 1)
                      for k, v in self._rows["executor_ids"].items()}  # fmt: skip
        for name, row in rows.items():
            tenant_id = _parts(name)[0]
            try:
                request = pb.RegisterRequest.FromString(base64.b64decode(row["request"]))
                if request.tenant_id != tenant_id:
                    raise ValueError("its name disagrees")
                next_executor = max(int(row["next_executor"]), int(floors.get(tenant_id, 1)))
                out.append(StoredTenant(tenant_id, request, int(row["target"]), next_executor))
            except (KeyError, ValueError, TypeError) as error:
                log.warning("%s: tenant %r unreadable (%s); skipped", self.path, tenant_id, error)
        return out

    def executors(self) -> list[tuple[LaunchSpec, str]]:
        out = []
        with self._lock:
            rows = dict(self._rows["executors"])
        for name, row in rows.items():
            try:
                out.append((LaunchSpec(**row["spec"]), str(row["handle"])))
            except (KeyError, TypeError) as error:
                log.warning("%s: executor %r unreadable (%s); skipped", self.path, name, error)
        return out

    def reclaims(self) -> list[StoredReclaim]:
        with self._lock:
            rows = dict(self._rows["reclaims"])
            executors = set(self._rows["executors"])
        out = []
        for name, row in rows.items():
            if name not in executors:
                continue
            tenant_id, executor_id = _parts(name)
            out.append(StoredReclaim(tenant_id, executor_id, str(row["beneficiary"]),
                                     str(row["placement"]), float(row["deadline"])))  # fmt: skip
        return out

    def kills(self) -> dict[str, str]:
        """Stored kill intents (as `Store.kills`): task id -> agent id ('' when unknown)."""
        with self._lock:
            rows = dict(self._rows["kills"])
        return {_parts(n)[0]: str(r.get("agent_id", "")) for n, r in rows.items()}

    def next_executor(self, tenant_id: str) -> int:
        with self._lock:
            row = self._rows["executor_ids"].get(_name(tenant_id))
        return int(row["next_executor"]) if row else 1

    def executor_ids(self) -> dict[str, int]:
        with self._lock:
            rows = dict(self._rows["executor_ids"])
        return {_parts(n)[0]: int(r["next_executor"]) for n, r in rows.items()}

    def framework_id(self) -> str | None:
        with self._lock:
            row = self._rows["meta"].get("framework_id")
        return str(row["value"]) if row else None

    # ---- writes: one transaction each, checked against our election node -----------------
    def _transaction(self, changes: list[tuple[str, str, dict | None]]) -> None:
        """`changes`: (table, name, row or None to delete); rows already so are skipped."""
        node = self._fence_node()
        if node is None or not self.loaded:
            raise StoreError(f"{self.path}: not the leader, nothing written")
        with self._lock:
            client = self._client_of()
            transaction = client.transaction()
            transaction.check(node, 0)
            for table, name, row in changes:
                path = f"{self.root}/{table}/{name}"
                held = self._rows[table].get(name)
                if row is None:
                    if held is not None:
                        transaction.delete(path)
                elif held is None:
                    transaction.create(path, _dumps(row))
                elif held != row:
                    transaction.set_data(path, _dumps(row))
            try:
                results = transaction.commit_async().get(timeout=WRITE_TIMEOUT_S)
            except Exception as error:  # connection loss, expired session, timeout
                raise StoreError(
                    f"{self.path}: write failed ({type(error).__name__}: {error})"
                ) from None
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                cause = [r for r in failed if type(r).__name__ != "RolledBackError"] or failed
                first = cause[0]
                raise StoreError(
                    f"{self.path}: write refused ({type(first).__name__}): the election node "
                    "is gone (this broker no longer leads) or the state changed under it"
                )
            for table, name, row in changes:
                if row is None:
                    self._rows[table].pop(name, None)
                else:
                    self._rows[table][name] = row

    def _raise_next(self, tenant_id: str, next_executor: int) -> tuple[str, str, dict]:
        held = self._rows["executor_ids"].get(_name(tenant_id))
        best = max(next_executor, int(held["next_executor"]) if held else 1)
        return ("executor_ids", _name(tenant_id), {"next_executor": best})

    def save_tenant(self, tenant_id: str, request: bytes, target: int, next_executor: int) -> None:
        row = {"request": base64.b64encode(request).decode(), "target": int(target),
               "next_executor": int(next_executor)}  # fmt: skip
        self._transaction([("tenants", _name(tenant_id), row),
                           self._raise_next(tenant_id, next_executor)])  # fmt: skip

    def set_target(self, tenant_id: str, target: int) -> None:
        held = self._rows["tenants"].get(_name(tenant_id))
        if held is not None:
            self._transaction([("tenants", _name(tenant_id), {**held, "target": int(target)})])

    def _of_tenant(self, table: str, tenant_id: str) -> list[str]:
        return [n for n in self._rows[table] if _parts(n)[0] == tenant_id]

    def delete_tenant(self, tenant_id: str, executors: bool = True) -> None:
        changes: list[tuple[str, str, dict | None]] = [("tenants", _name(tenant_id), None)]
        if executors:
            changes += [("executors", n, None) for n in self._of_tenant("executors", tenant_id)]
            changes += [("reclaims", n, None) for n in self._of_tenant("reclaims", tenant_id)]
        self._transaction(changes)

    def record_launch(self, spec: LaunchSpec, next_executor: int) -> None:
        """Write-ahead: the executor (LAUNCHING, no handle) and the tenant's next id."""
        changes: list[tuple[str, str, dict | None]] = []
        held = self._rows["tenants"].get(_name(spec.tenant_id))
        if held is not None:
            changes.append(("tenants", _name(spec.tenant_id),
                            {**held, "next_executor": int(next_executor)}))  # fmt: skip
        changes.append(self._raise_next(spec.tenant_id, next_executor))
        changes.append(("executors", _name(spec.tenant_id, spec.executor_id),
                        {"spec": asdict(spec), "handle": "", "state": LAUNCHING}))  # fmt: skip
        self._transaction(changes)

    def set_handle(self, tenant_id: str, executor_id: str, handle: str) -> None:
        name = _name(tenant_id, executor_id)
        held = self._rows["executors"].get(name)
        if held is not None:
            self._transaction([("executors", name, {**held, "handle": handle, "state": LAUNCHED})])

    def save_executor(self, spec: LaunchSpec, handle: str) -> None:
        row = {"spec": asdict(spec), "handle": handle, "state": LAUNCHED}
        self._transaction([
            ("executors", _name(spec.tenant_id, spec.executor_id), row),
            self._raise_next(spec.tenant_id, _next_after(spec.executor_id)),
        ])  # fmt: skip

    def record_reclaim(self, reclaim: StoredReclaim) -> None:
        name = _name(reclaim.tenant_id, reclaim.executor_id)
        changes: list[tuple[str, str, dict | None]] = []
        held = self._rows["executors"].get(name)
        if held is not None:
            changes.append(("executors", name, {**held, "state": LEAVING}))
        changes.append(("reclaims", name, {"beneficiary": reclaim.beneficiary,
                                           "placement": reclaim.placement,
                                           "deadline": reclaim.deadline}))  # fmt: skip
        self._transaction(changes)

    def record_kill(self, task_id: str, agent_id: str, reason: str) -> None:
        """Write-ahead for a KILL of a task the broker does not want (as `Store.record_kill`)."""
        row = {"agent_id": agent_id, "reason": reason[:500], "at": time.time()}
        self._transaction([("kills", _name(task_id), row)])

    def forget_kill(self, task_id: str) -> None:
        if _name(task_id) in self._rows["kills"]:
            self._transaction([("kills", _name(task_id), None)])

    def delete_executor(self, tenant_id: str, executor_id: str) -> None:
        name = _name(tenant_id, executor_id)
        self._transaction([("executors", name, None), ("reclaims", name, None)])

    def save_framework_id(self, framework_id: str) -> None:
        self._transaction([("meta", "framework_id", {"value": framework_id})])

    def forget_framework_id(self) -> None:
        self._transaction([("meta", "framework_id", None)])

    def import_rows(self, rows: dict[str, dict[str, dict]]) -> int:
        """`fairbroker state import`: write `rows` (as `rows_of`) into an empty state, in
        one transaction, while no broker is a member of the election. Returns the znodes
        written. Raises StoreError (nothing written) otherwise."""
        client = self._client_of()
        election = self.root.rsplit("/", 1)[0] + "/election"
        if client.exists(election) and client.get_children(election):
            raise StoreError(f"{self.path}: brokers are running (members under {election}); "
                             "stop them first")  # fmt: skip
        self.load()
        held = sum(len(t) for t in self._rows.values())
        if held:
            raise StoreError(f"{self.path}: holds {held} rows already; import only into an "
                             "empty path")  # fmt: skip
        transaction = client.transaction()
        count = 0
        for table, named in rows.items():
            if table not in TABLES:
                raise StoreError(f"unknown table {table!r}")
            for name, row in named.items():
                transaction.create(f"{self.root}/{table}/{name}", _dumps(row))
                count += 1
        results = transaction.commit()
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            raise StoreError(f"{self.path}: import refused ({type(failed[0]).__name__})")
        self.load()
        return count

    def close(self) -> None:
        """The session is the election's; nothing of the store's own to release."""


def rows_of(store: Any, framework_id: str | None) -> dict[str, dict[str, dict]]:
    """A store's state (SQLite `Store` or `ZkStore`) as ZkStore rows: the document of
    `fairbroker state export`."""
    rows: dict[str, dict[str, dict]] = {t: {} for t in TABLES}
    for tenant in store.tenants():
        rows["tenants"][_name(tenant.tenant_id)] = {
            "request": base64.b64encode(tenant.request.SerializeToString()).decode(),
            "target": tenant.target, "next_executor": tenant.next_executor,
        }  # fmt: skip
    for tenant_id, next_executor in store.executor_ids().items():
        rows["executor_ids"][_name(tenant_id)] = {"next_executor": next_executor}
    leaving = {(r.tenant_id, r.executor_id): r for r in store.reclaims()}
    for spec, handle in store.executors():
        key = (spec.tenant_id, spec.executor_id)
        state = LEAVING if key in leaving else (LAUNCHED if handle else LAUNCHING)
        rows["executors"][_name(*key)] = {"spec": asdict(spec), "handle": handle, "state": state}
    for (tenant_id, executor_id), r in leaving.items():
        rows["reclaims"][_name(tenant_id, executor_id)] = {
            "beneficiary": r.beneficiary, "placement": r.placement, "deadline": r.deadline,
        }  # fmt: skip
    for task_id, agent_id in store.kills().items():
        rows["kills"][_name(task_id)] = {"agent_id": agent_id, "reason": "exported", "at": 0.0}
    if framework_id:
        rows["meta"]["framework_id"] = {"value": framework_id}
    return rows


class ZkFrameworkId:
    """The Mesos framework id kept in ZooKeeper (what `FrameworkIdFile` is for one host)."""

    def __init__(self, store: ZkStore) -> None:
        self.store = store
        self.path = f"{store.path}/meta/framework_id"

    def load(self) -> str | None:
        return self.store.framework_id()

    def save(self, framework_id: str) -> None:
        try:
            self.store.save_framework_id(framework_id)
        except StoreError as error:  # the next leader would register a new framework
            log.error("the Mesos framework id was not kept: %s", error)

    def forget(self) -> None:
        try:
            self.store.forget_framework_id()
        except StoreError as error:
            log.error("the Mesos framework id was not forgotten: %s", error)
