"""The processes this machine runs, as /proc shows them, for tests that check what is left."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path


def processes() -> Iterator[tuple[Path, str, str]]:
    """(/proc entry, command line with spaces, working directory) of every process that can
    be read; one that ends or cannot be read while we look is left out."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        yield entry, cmdline, cwd
