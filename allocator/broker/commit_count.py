"""How many changes the broker has committed to its state file, kept in a second file.

The state file counts its own commits (a row in its meta table, written in each transaction);
this file repeats the count after each commit. A state file that holds fewer commits than
this file says has lost acknowledged changes, however its write-ahead log was cut: emptied,
cut to its header, cut at a frame edge, or its frames dropped by SQLite after garbage. Those
are losses no check of the files' structure can see, since each leaves a well-formed WAL.

The count is written after SQLite has synced the commit and is not synced itself: after a
power cut it can be behind the state file (nothing is refused), never ahead of what was
durable unless the commit itself was not (which is the loss to detect). A count that does
not read back (torn or overwritten) is reported and treated as absent, never as a loss.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path

SUFFIX = ".commits"
_WIDTH = 20  # digits: every record has the same length, so one pwrite replaces the last


def _record(count: int) -> bytes:
    digits = f"{count:0{_WIDTH}d}"
    return f"{digits} {zlib.crc32(digits.encode()):08x}\n".encode()


class CommitCount:
    """The count beside `path` (`path` + '.commits'); read at open, written after commits."""

    def __init__(self, path: Path) -> None:
        self.path = path.with_name(path.name + SUFFIX)
        self.problem: str | None = None  # why a file present could not be read
        self.expected = self._read()  # None: no count kept (new directory, older broker)
        self._fd: int | None = None

    def _read(self) -> int | None:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as error:
            self.problem = f"{self.path.name}: unreadable ({error.strerror})"
            return None
        digits = data[:_WIDTH]
        if digits.isdigit() and data == _record(int(digits)):
            return int(digits)
        self.problem = f"{self.path.name}: does not read back (ignored)"
        return None

    def write(self, count: int) -> None:
        """Record `count` (after its commit). Not synced: see the module's docstring."""
        record = _record(count)
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            os.ftruncate(self._fd, len(record))  # every record has this length
        os.pwrite(self._fd, record, 0)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
