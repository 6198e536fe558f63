"""A stand-in for Spark's executor launcher on the embedded cluster, the broker's
executors by state, and the processes carrying the embedded cluster's marker: for the tests
of reclaim, explain and orphans."""

from __future__ import annotations

import os
from pathlib import Path

from allocator.backends.local import MARKER
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


def marked(workdir: Path, leaders: bool = True) -> set[int]:
    """Live processes carrying this embedded cluster's marker, whatever the broker knows:
    the executors (their process groups' leaders), or with leaders=False every process."""
    found = set()
    suffix = f"/{workdir.resolve()}".encode()
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            if leaders and os.getpgid(int(entry.name)) != int(entry.name):
                continue
            environ = Path(f"/proc/{entry.name}/environ").read_bytes().split(b"\0")
            state = Path(f"/proc/{entry.name}/stat").read_text().rsplit(")", 1)[-1].split()[0]
        except OSError:
            continue
        if state != "Z" and any(
            item.startswith(f"{MARKER}=".encode()) and item.endswith(suffix) for item in environ
        ):
            found.add(int(entry.name))
    return found
