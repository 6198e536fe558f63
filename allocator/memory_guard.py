"""Refuse work that cannot fit in memory before starting it, with the size it would need
(a generated cluster of 10^8 agents used to run for a minute and die with MemoryError)."""

from __future__ import annotations

import os
from pathlib import Path

from allocator.errors import ScenarioError

#: Measured peak memory per agent of a trace simulation (`fairbroker sim` on a Google-like
#: cluster: 186 MB at 10^5 agents, 970 MB at 10^6), rounded up.
TRACE_BYTES_PER_AGENT = 1000
#: A static fill's framework x agent arrays: the state's x (int64), the trials' sums and
#: squares, mean and sd (float64), eligibility (bool, twice).
FILL_BYTES_PER_PAIR = 5 * 8 + 2


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None


def available_bytes() -> int | None:
    """Memory this process can still take: MemAvailable, capped by a cgroup v2 limit."""
    available = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                available = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if available is None and hasattr(os, "sysconf"):
        try:
            available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            available = None
    limit = _read_int("/sys/fs/cgroup/memory.max")
    used = _read_int("/sys/fs/cgroup/memory.current")
    if limit is not None and used is not None:
        available = min(available or limit, max(limit - used, 0))
    return available


def human_bytes(count: float) -> str:
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if count < 1000 or unit == "TB":
            return f"{count:,.0f} {unit}" if unit == "B" else f"{count:,.1f} {unit}"
        count /= 1000
    raise AssertionError("unreachable")


def require_memory(needed: float, what: str, available: int | None = None) -> None:
    """ScenarioError naming `what` when `needed` bytes exceed what is available."""
    available = available_bytes() if available is None else available
    if available is not None and needed > available:
        raise ScenarioError(
            f"{what} would need about {human_bytes(needed)} of memory; "
            f"{human_bytes(available)} is available"
        )
