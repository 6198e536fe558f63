"""`fairbroker state export|import`: the broker's durable state as one JSON document, to move
it from a state directory (SQLite) to ZooKeeper (`serve --ha`) or back, or to keep a copy.

The brokers must be stopped: a state directory is locked by its broker, and an import into
ZooKeeper refuses while any broker is a member of the election or the path holds rows.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import click

from allocator.errors import FairbrokerError

FORMAT = "fairbroker-state"
VERSION = 1
CONNECT_TIMEOUT_S = 15.0


def _where(state_dir: str | None, ha: str | None):
    if (state_dir is None) == (ha is None):
        raise click.UsageError("give exactly one of --state-dir and --ha")
    if ha is None:
        return None
    from allocator.broker.zk_url import parse_zk_url

    try:
        return parse_zk_url(ha)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--ha") from None


@contextmanager
def _zk_store(url: Any):
    from kazoo.client import KazooClient

    from allocator.broker.zk_store import ZkStore

    client = KazooClient(hosts=url.connect_string)
    try:
        client.start(timeout=CONNECT_TIMEOUT_S)
    except Exception as error:
        raise FairbrokerError(f"{url}: cannot reach ZooKeeper ({error})") from None
    try:
        yield ZkStore(lambda: client, url.path, lambda: None)
    finally:
        client.stop()
        client.close()


def _sqlite(state_dir: str):
    from allocator.broker.store import Store

    return Store(Path(state_dir) / "broker.sqlite")


@click.group("state")
def state() -> None:
    """Export or import the broker's durable state (SQLite state dir or ZooKeeper)."""


@state.command("export")
@click.option("--state-dir", type=click.Path(file_okay=False, exists=True), default=None,
              help="A stopped broker's state directory (broker.sqlite).")  # fmt: skip
@click.option("--ha", default=None, metavar="zk://HOST:PORT[,...]/PATH",
              help="The brokers' ZooKeeper path (readable while they run).")  # fmt: skip
@click.option("-o", "--output", type=click.Path(dir_okay=False), default="-",
              show_default=True, help="Where to write the JSON document.")  # fmt: skip
def export_state(state_dir: str | None, ha: str | None, output: str) -> None:
    """Write the state as one JSON document."""
    from allocator.backends.mesos.link import FrameworkIdFile
    from allocator.broker.zk_store import rows_of

    url = _where(state_dir, ha)
    if url is None:
        assert state_dir is not None
        store = _sqlite(state_dir)
        try:
            rows = rows_of(store, FrameworkIdFile(Path(state_dir)).load())
        finally:
            store.close()
    else:
        with _zk_store(url) as zk:
            zk.load()
            rows = rows_of(zk, zk.framework_id())
    text = json.dumps({"format": FORMAT, "version": VERSION, "rows": rows}, indent=1,
                      sort_keys=True)  # fmt: skip
    if output == "-":
        click.echo(text)
    else:
        Path(output).write_text(text + "\n")
    counts = ", ".join(f"{len(v)} {k}" for k, v in rows.items())
    click.echo(f"fairbroker: exported {counts}", err=True)


def _read_document(path: str) -> dict[str, dict[str, dict]]:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text()
        document = json.loads(text)
    except (OSError, ValueError) as error:
        raise FairbrokerError(f"{path}: not a state document ({error})") from None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise FairbrokerError(f"{path}: not a {FORMAT} document")
    if document.get("version") != VERSION:
        raise FairbrokerError(f"{path}: version {document.get('version')!r}, this reads {VERSION}")
    rows = document.get("rows")
    if not isinstance(rows, dict) or not all(isinstance(v, dict) for v in rows.values()):
        raise FairbrokerError(f"{path}: 'rows' is not a mapping of tables")
    return rows


def _into_sqlite(rows: dict[str, dict[str, dict]], state_dir: str) -> int:
    """Write rows (checked as a ZkStore reads them) into an empty state directory."""
    from allocator.backends.mesos.link import FrameworkIdFile
    from allocator.broker.zk_store import ZkStore

    parsed = ZkStore(lambda: None, "/import", lambda: None)
    parsed._rows = {table: dict(rows.get(table, {})) for table in parsed._rows}
    store = _sqlite(state_dir)
    try:
        if store.tenants() or store.executors():
            raise FairbrokerError(f"{state_dir}: holds a state already; import only into an "
                                  "empty state directory")  # fmt: skip
        tenants = parsed.tenants()
        for tenant in tenants:
            store.save_tenant(tenant.tenant_id, tenant.request.SerializeToString(),
                              tenant.target, tenant.next_executor)  # fmt: skip
        for tenant_id, next_executor in parsed.executor_ids().items():
            store.raise_next_executor(tenant_id, next_executor)
        executors = parsed.executors()
        for spec, handle in executors:
            store.save_executor(spec, handle)
        for reclaim in parsed.reclaims():
            store.record_reclaim(reclaim)
        for task_id, agent_id in parsed.kills().items():
            store.record_kill(task_id, agent_id, "imported")
    finally:
        store.close()
    framework_id = parsed.framework_id()
    if framework_id:
        FrameworkIdFile(Path(state_dir)).save(framework_id)
    return len(tenants) + len(executors)


@state.command("import")
@click.argument("document", type=click.Path(dir_okay=False, allow_dash=True))
@click.option("--state-dir", type=click.Path(file_okay=False), default=None,
              help="An empty state directory to write broker.sqlite into.")  # fmt: skip
@click.option("--ha", default=None, metavar="zk://HOST:PORT[,...]/PATH",
              help="An empty ZooKeeper path, no broker running on it.")  # fmt: skip
def import_state(document: str, state_dir: str | None, ha: str | None) -> None:
    """Write an exported state into an empty state directory or ZooKeeper path."""
    from allocator.broker.store import StoreError

    url = _where(state_dir, ha)
    rows = _read_document(document)
    if url is None:
        assert state_dir is not None
        count = _into_sqlite(rows, state_dir)
        where = str(Path(state_dir) / "broker.sqlite")
    else:
        with _zk_store(url) as zk:
            try:
                count = zk.import_rows(rows)
            except StoreError as error:
                raise FairbrokerError(str(error)) from None
        where = str(url)
    click.echo(f"fairbroker: imported {count} rows into {where}", err=True)
