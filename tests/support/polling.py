"""Waiting for real components in tests: a free loopback port, and polling until a check
holds."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any


def free_port(ip: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def wait_for(
    check: Callable[[], Any],
    timeout: float,
    what: str,
    every: float = 0.2,
    context: Callable[[], str] | None = None,
) -> Any:
    """The first truthy value of `check()`, polled every `every` s and once more at the
    deadline; AssertionError naming `what` (and `context()`, what was seen) when it never
    comes."""
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() >= deadline:
            seen = f"\n{context()}" if context else ""
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}{seen}")
        time.sleep(every)
