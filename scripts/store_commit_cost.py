"""What one grant costs the state file under each SQLite durability setting.

A grant is two commits of the broker's store: the write-ahead executor row (record_launch),
then its handle (set_handle). Each setting runs GRANTS grants on a fresh file in DIRECTORY
(default: a temporary directory under the current one, so the disk is the one the state
would be on) and prints the median and 90th percentile per grant.

    .venv/bin/python scripts/store_commit_cost.py [DIRECTORY] [GRANTS]
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

from allocator.backends.base import LaunchSpec
from allocator.broker import store as store_module
from allocator.broker.proto import pb

SETTINGS = {
    "WAL + NORMAL (before)": ("WAL", "NORMAL"),
    "WAL + FULL (chosen)": ("WAL", "FULL"),
    "rollback journal (DELETE) + FULL": ("DELETE", "FULL"),
}


def per_grant(directory: Path, journal: str, synchronous: str, grants: int) -> list[float]:
    original = store_module.Store._connect

    def connect(self: store_module.Store, path: Path):  # the setting under test
        db = original(self, path)
        db.execute(f"PRAGMA journal_mode={journal}")
        db.execute(f"PRAGMA synchronous={synchronous}")
        return db

    with mock.patch.object(store_module.Store, "_connect", connect):
        store = store_module.Store(directory / "broker.sqlite")
    try:
        request = pb.RegisterRequest(tenant_id="pi", target=grants)
        store.save_tenant("pi", request.SerializeToString(), grants, 1)
        seconds = []
        for n in range(1, grants + 1):
            spec = LaunchSpec("pi", str(n), "t1", {"cpus": 2.0, "mem": 1024.0}, "", "", 2, 640)
            began = time.perf_counter()
            store.record_launch(spec, n + 1)
            store.set_handle("pi", str(n), f"pid-{n}")
            seconds.append(time.perf_counter() - began)
        return seconds
    finally:
        store.close()


def main() -> None:
    base = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    grants = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    for name, (journal, synchronous) in SETTINGS.items():
        with tempfile.TemporaryDirectory(dir=base) as directory:
            seconds = per_grant(Path(directory), journal, synchronous, grants)
        deciles = statistics.quantiles(seconds, n=10)
        print(
            f"{name:34s} per grant: median {statistics.median(seconds) * 1e3:7.3f} ms, "
            f"p90 {deciles[-1] * 1e3:7.3f} ms ({grants} grants)"
        )


if __name__ == "__main__":
    main()
