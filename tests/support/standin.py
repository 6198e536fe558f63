"""A stand-in for Spark's executor launcher on the embedded cluster, and the broker's
executors by state: for the tests of reclaim and explain."""

from __future__ import annotations

from pathlib import Path

from allocator.broker.core import Broker


def stand_in_spark(tmp_path: Path, ignore_term: bool = False) -> Path:
    """spark-class as a bash script: says it registered with its driver, then would live
    300 s (its command line keeps the executor's arguments, as the JVM's does)."""
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    script = home / "bin" / "spark-class"
    trap = 'trap "" TERM\n' if ignore_term else ""
    script.write_text(
        f"#!/bin/bash\n{trap}echo 'Successfully registered with driver' >&2\nsleep 300\n"
    )
    script.chmod(0o755)
    return home


def held(broker: Broker) -> dict[str, dict[str, int]]:
    """Tenant -> executor state -> count."""
    with broker._lock:
        out: dict[str, dict[str, int]] = {}
        for name, tenant in broker.tenants.items():
            for record in tenant.executors.values():
                by_state = out.setdefault(name, {})
                by_state[record.state.value] = by_state.get(record.state.value, 0) + 1
        return out
