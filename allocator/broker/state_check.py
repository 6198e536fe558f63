"""Checks of a broker state file before SQLite touches it.

SQLite repairs a damaged write-ahead log silently: a WAL with a bad header is ignored, frames
after a bad checksum are dropped, a missing WAL simply loses what it held. Each of those
would start the broker with less than it had written, so the files are checked first, by
the WAL format (https://www.sqlite.org/fileformat.html, "The WAL File Format").
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

WAL_MAGIC = (0x377F0682, 0x377F0683)  # little- / big-endian checksums
WAL_HEADER = 32
FRAME_HEADER = 24
SQLITE_HEADER = b"SQLite format 3\x00"
MAX_GENERATIONS = 1 << 16  # restarts of the log between an old frame and the header


def _checksum(data: bytes, big_endian: bool, s0: int = 0, s1: int = 0) -> tuple[int, int]:
    """SQLite's WAL checksum: over 32-bit word pairs, s0 += x0 + s1, s1 += x1 + s0."""
    words = np.frombuffer(data, dtype=">u4" if big_endian else "<u4").astype(np.uint64)
    mask = 0xFFFFFFFF
    for x0, x1 in zip(words[0::2].tolist(), words[1::2].tolist(), strict=True):
        s0 = (s0 + x0 + s1) & mask
        s1 = (s1 + x1 + s0) & mask
    return s0, s1


def wal_problem(wal: Path) -> str | None:
    """What is wrong with a WAL file, or None (absent and empty WALs are fine here)."""
    try:
        data = wal.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as error:
        return f"{wal.name}: unreadable ({error.strerror})"
    if not data:
        return None
    if len(data) < WAL_HEADER:
        return f"{wal.name}: truncated ({len(data)} bytes, shorter than its header)"
    magic, version, page_size, _, salt1, salt2, c0, c1 = struct.unpack(">8I", data[:32])
    if magic not in WAL_MAGIC or version != 3007000:
        return f"{wal.name}: not a SQLite WAL (garbage in its header)"
    big = magic == WAL_MAGIC[1]
    if (c0, c1) != _checksum(data[:24], big):
        return f"{wal.name}: header checksum mismatch (garbage in its header)"
    frame = FRAME_HEADER + page_size
    if (len(data) - WAL_HEADER) % frame:
        return f"{wal.name}: truncated in the middle of a frame ({len(data)} bytes)"
    s0, s1 = c0, c1
    earlier: int | None = None  # generations back of the last frame past the current ones
    for offset in range(WAL_HEADER, len(data), frame):
        frame_no = (offset - WAL_HEADER) // frame + 1
        header = data[offset : offset + FRAME_HEADER]
        _, _, f_salt1, f_salt2, f0, f1 = struct.unpack(">6I", header)
        if (f_salt1, f_salt2) != (salt1, salt2) or earlier is not None:
            # Past the current frames only frames of earlier generations may follow (left
            # after a checkpoint, not in use): SQLite adds 1 to salt-1 at each restart of the
            # log, so theirs is behind the header's, and further behind along the file.
            behind = (salt1 - f_salt1) & 0xFFFFFFFF
            if not 0 < behind <= MAX_GENERATIONS or behind < (earlier or 0):
                return (
                    f"{wal.name}: frame {frame_no} has a garbage header (its salt matches no "
                    "generation of the log)"
                )
            earlier = behind
            continue
        s0, s1 = _checksum(header[:8], big, s0, s1)
        s0, s1 = _checksum(data[offset + FRAME_HEADER : offset + frame], big, s0, s1)
        if (s0, s1) != (f0, f1):
            return f"{wal.name}: frame {frame_no} fails its checksum (garbage in the log)"
    return None


def database_problem(path: Path) -> str | None:
    """A main database file shorter than its own header says, or not SQLite at all."""
    try:
        with open(path, "rb") as f:
            header = f.read(100)
        size = path.stat().st_size
    except OSError as error:
        return f"{path.name}: unreadable ({error.strerror})"
    if size == 0:
        return None  # created but never written
    if len(header) < 100 or not header.startswith(SQLITE_HEADER):
        return f"{path.name}: not a SQLite database (truncated or overwritten)"
    page_size = struct.unpack(">H", header[16:18])[0]
    page_size = 65536 if page_size == 1 else page_size
    pages, valid_for, changes = struct.unpack(">I", header[28:32]), header[92:96], header[24:28]
    if size % page_size:
        return f"{path.name}: truncated ({size} bytes is not a whole number of pages)"
    if valid_for == changes and pages[0] * page_size > size:
        return f"{path.name}: truncated ({size} bytes; its header says {pages[0]} pages)"
    return None
